"""The predictor's SASS rules on real code in a clean clone: the loops of public kernels that the
committed validation recorded (their SASS and control codes, data/h200/predict-validation.json.xz;
the cubins themselves stay on the measuring machine), and the README's example drawn from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudissect.kernel.dataflow import dependence_graph, reads
from gpudissect.predict.validate import loop_body, read_measured

ROOT = Path(__file__).resolve().parents[1]
DOC = read_measured(ROOT / "data" / "h200" / "predict-validation.json.xz")
RECORDS = [r for r in DOC.get("corpus", []) if "loop" in r]


def _bodies():
    return [(r["name"], loop_body({"name": r["symbol"], "loop": r["loop"]})[0]) for r in RECORDS]


def test_the_validation_holds_the_corpus_measured():
    assert len(RECORDS) >= 30 and len({r["project"] for r in RECORDS}) >= 10
    for r in RECORDS:
        assert r["source"].count("@") == 1 and r["split"] in ("train", "held-out")
        assert len(r["loop"]["sass"]) == len(r["loop"]["control_hi"]) > 0


def test_imad_wide_factors_are_32_bit_in_real_loops():
    """IMAD.WIDE reads one register of each factor (its addend and result are pairs)."""
    seen = 0
    for _name, body in _bodies():
        for i in body:
            if "WIDE" not in i.modifiers or len(i.operands) < 4:
                continue
            seen += 1
            toks = [t.split(".")[0].lstrip("-|") for t in i.operands[1:4]]  # R22.reuse -> R22
            factors = [t for t in toks[:2] if t.lstrip("U")[:1] == "R" and t.lstrip("U")[1:].isdigit()]
            addend = toks[2]
            digits = addend.lstrip("U")[1:]
            named = set(factors) | ({addend, addend[:-len(digits)] + str(int(digits) + 1)} if digits.isdigit() else set())
            # nothing read but the factors themselves, the addend's pair and the guard
            assert reads(i) - named - {p for p in reads(i) if p.startswith("P")} == set(), i.text
    assert seen >= 10  # the pattern is there: the test can fail


def test_no_instruction_feeds_itself_across_a_same_guard_writer():
    """Under one guard, an instruction that overwrites its own source (``@!P1 LDG R6, [R6.64]``
    after ``@!P1 IMAD.WIDE R6``) takes it from the writer before it, not from itself."""
    guarded = 0
    for name, body in _bodies():
        for e in dependence_graph(body):
            if e.src == e.dst and body[e.src].predicate:
                j = e.dst
                same = [k for k in range(j) if body[k].predicate == body[j].predicate and e.reg in
                        set(body[k].dests())]
                assert not same, (name, body[j].text)
        guarded += sum(1 for i in body if i.predicate and not i.opcode.startswith("BRA"))
    assert guarded > 0


def test_the_readme_example_is_the_data():
    from gpudissect.report.assemble.predict_example import BEGIN, END, shipped_block

    text = (ROOT / "README.md").read_text()
    block = BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END
    assert block == shipped_block(ROOT), "README.md's predict example drifted: python scripts/readme_predict.py"
    assert "| held-out dram |" in block and "measured cycles/trip" in block


@pytest.mark.parametrize("group", ["held-out", "train", "real"])
def test_every_corpus_group_beats_or_names_its_baselines(group):
    """The error table holds the model and every baseline for each split (what the README shows)."""
    s = DOC["analysis"]["stats"][group]
    assert {"model", "bounds", "sum_latency", "max_pipe"} <= set(s) and s["model"]["n"] > 0


def test_a_specs_unroll_is_its_loops_counter_step_over_the_source_stride():
    """Where a corpus spec names its source loop's stride, the measured loop's counter moves by
    unroll x stride per trip (the recorded SASS): the per-trip figures are of the right unit.
    shoc_bottom_scan's loop does two windows per trip (counter +512, blockSize 256)."""
    from gpudissect.predict.corpus import load_corpus
    from gpudissect.predict.loops import _counter_step

    specs = {k.name: k for k in load_corpus() if k.stride}
    assert "shoc_bottom_scan" in specs and specs["shoc_bottom_scan"].unroll == 2
    seen = 0
    for r in RECORDS:
        k = specs.get(r["name"])
        if k is None:
            continue
        step = _counter_step(tuple(loop_body({"name": r["symbol"], "loop": r["loop"]})[0]))
        assert step is not None and abs(step) == k.unroll * k.stride, (r["name"], step, k.unroll, k.stride)
        seen += 1
    assert seen == len(specs)


def test_the_analysis_takes_a_corrected_unroll_from_the_spec():
    """The stored slope is per source iteration; a spec's unroll corrected after the measurement
    re-scales the per-trip figure the model is scored against."""
    from gpudissect.predict.validate import per_trip

    rec = {"name": "k", "unroll": 1}
    pt = {"cycles_per_source_iter": 100.0, "cycles_per_iter": 100.0}
    assert per_trip(rec, pt, {"k": 2}) == (200.0, 2)
    assert per_trip(rec, pt, {}) == (100.0, 1)
    assert per_trip(rec, {"cycles_per_iter": 70.0}, {"k": 2}) == (70.0, 1)


def test_a_rare_path_weights_what_a_forward_branch_skips():
    """hash_algos_md5's byte loop: 443 of its 463 instructions (the block transform) are what a
    forward branch skips; its spec says they run once every 64 trips (the source's ``datalen ==
    64``). The model is then the common path's cycles plus a 64th of what the rest adds, between
    the two; without the hint, the whole body on every trip, as before."""
    from gpudissect.predict.loop_model import common_path, loop_model, rare_weighted
    from gpudissect.predict.tables import load_tables
    from gpudissect.predict.validate import corpus_specs, predict_point

    assert corpus_specs()["hash_algos_md5"].rare_every == 64
    rec = next(r for r in RECORDS if r["name"] == "hash_algos_md5")
    body, controls = loop_body({"name": rec["symbol"], "loop": rec["loop"]})
    skip = rec["loop"]["skippable"]
    assert len(skip) > 0.9 * len(body)
    tables = load_tables(ROOT / "data" / "h200")
    plain = predict_point("md5", body, controls, tables, 4, 1 << 10)
    rare = predict_point("md5", body, controls, tables, 4, 1 << 10, skippable=skip, rare_every=64)
    cb, cc = common_path(body, controls, skip)
    assert len(cb) == len(body) - len(skip) and len(cc) == len(cb)
    common = loop_model("md5", cb, tables, 4).cycles(cc, tables, 1 << 10, 0.0)
    assert rare["model_full_path"] == plain["model"] and "model_full_path" not in plain
    assert rare["model"] == rare_weighted(common, plain["model"], 64)
    assert common < rare["model"] < plain["model"]
    with pytest.raises(ValueError):
        rare_weighted(1.0, 2.0, 0)


def test_predict_refuses_a_rare_every_below_one(tmp_path):
    from gpudissect.predict.answer import predict_lines

    code, _lines, errors = predict_lines(tmp_path / "none.cubin", ROOT / "data" / "h200", None, None, 4,
                                         False, False, rare_every=0)
    assert code == 2 and errors == ["--rare-every must be at least 1 (got 0)"]
