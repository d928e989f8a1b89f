"""Read-read and write-write instruction configurations (issue 22): the data table decides what
is measured, the generated PTX has the intended register pattern, the SASS checks accept what
ptxas -O3 really emits for it and reject a merged (CSE'd) or dead-write-eliminated kernel (real
ptxas + nvdisasm, no GPU), and the suite's measurement path gives known answers on synthetic
timings (FakeDevice)."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from gpudissect.arch.target import make_target
from gpudissect.catalog.model import load_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.build import build_module
from gpudissect.store.db import Result
from gpudissect.suites.instructions.checks import Sample, check_family
from gpudissect.suites.instructions.core import measure_work
from gpudissect.suites.instructions.own_sass import core_sass
from gpudissect.suites.instructions.strategies import strategy
from gpudissect.suites.instructions.studies import dependence_types as configs
from gpudissect.suites.instructions.studies.dependence_types import (
    ConfigSpec,
    check_config,
    check_read_read,
    check_write_write,
    config_lengths,
    config_specs,
)
from gpudissect.suites.instructions.suite import Plan, prepare_works
from gpudissect.suites.instructions.template import GenerationError, generate_config
from gpudissect.suites.instructions.verify import autoverify_many

RR, WW = "latency_read_read", "latency_write_write"
TABLE = """
[dependence_types]
register_budget = 64
predicates = 3
[[dependence_types.set]]
variants = ["fma.rn.f32", "fma.rn.f64"]
measures = ["latency_read_read", "latency_write_write"]
[[dependence_types.set]]
variants = ["mad.lo.*"]
shared = 3
[[dependence_types.set]]
variants = ["ex2.approx.ftz.f32"]
measures = ["latency_write_write"]
"""
PLAN = Plan(tp_min_length=0, latency_units=(16, 32, 48), tp_chains=(1,), tp_units=(64, 128), tp_warps=(4,),
            distances=(2,), distance_units=(32, 64), reps=3, launches=1)


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "strategies.toml"
    f.write_text(TABLE)
    monkeypatch.setattr(configs, "STRATEGY_FILE", f)


@pytest.fixture(scope="module")
def sm90():
    return make_target("sm_90", "13.0")


def variant(name: str):
    return load_catalog().get(name)


# --- the data table ------------------------------------------------------------------------


def test_table_decides_measures_shared_operand_and_predicates(table):
    # read_read: the shared register takes turns with the last other source of its type
    assert config_specs(variant("fma.rn.f32")) == [ConfigSpec(RR, 1, 3, (1, 3)), ConfigSpec(WW, 1, 3)]
    assert config_specs(variant("mad.lo.u32")) == [ConfigSpec(RR, 3, 3, (3, 2)), ConfigSpec(WW, 3, 3)]
    assert config_specs(variant("ex2.approx.ftz.f32")) == [ConfigSpec(WW, 1, 3)]
    assert config_specs(variant("add.f32")) == []
    with pytest.raises(ValueError, match="unknown measure control_read_read"):  # a control is no entry
        config_specs(variant("fma.rn.f32"), TABLE.replace('"latency_read_read", "latency_write_write"',
                                                          '"control_read_read"'))
    with pytest.raises(ValueError, match="unknown measure latency_x"):
        config_specs(variant("fma.rn.f32"), TABLE.replace('"latency_read_read", "latency_write_write"',
                                                          '"latency_x"'))


def test_lengths_stay_within_the_register_budget(table):
    # the budget is the control's (no register shared), so that both time the same lengths:
    # fma.rn.f32 read_read: a, b, c and d per instance, 4 registers: 64 // 4 = 16 instances at most
    assert config_lengths(variant("fma.rn.f32"), ConfigSpec(RR), (16, 32, 48), 4) == (5, 11, 16)
    # fma.rn.f64: 2 registers per value, 8 per instance: 8
    assert max(config_lengths(variant("fma.rn.f64"), ConfigSpec(RR), (16, 32, 48), 4)) == 8
    # write_write: one value and one destination of its own per instance (the control): 32
    assert config_lengths(variant("fma.rn.f32"), ConfigSpec(WW), (16, 32, 48), 4) == (11, 21, 32)


# --- generation ----------------------------------------------------------------------------


def _instances(entry: str, op: str) -> list[str]:
    region = entry.split("%t0, %clock64;")[1].split("%t1, %clock64;")[0]
    return [ln.strip() for ln in region.splitlines() if op in ln]


def test_read_read_ptx_shares_one_register_and_nothing_else(sm90):
    k = generate_config(variant("fma.rn.f32"), strategy("reg"), sm90, "read_read", length=6, name="k")
    inst = [re.findall(r"%r\d+", ln) for ln in _instances(k.entry, "fma.rn.f32")]
    assert len(inst) == 6
    dests, a, others = [i[0] for i in inst], {i[1] for i in inst}, [r for i in inst for r in i[2:]]
    assert len(a) == 1 and len(set(dests)) == 6  # one shared source; each instance its own result
    assert len(set(others)) == 12 and not (set(others) | a) & set(dests)  # no value shared, no write-read
    for r in others + list(a):  # every value read is loaded at run time, outside the region
        assert re.search(rf"ld\.global\.b32 {r}, \[%in\+\d+\];", k.entry)
    for d in dests:  # every result stored after the loop: nothing is dead
        assert re.search(rf"st\.global\.b32 \[%outp\+\d+\], {d};", k.entry)
    assert f"xor.b32 {a.pop()}" in k.entry  # changed after each repetition: nothing loop-invariant


def test_write_write_ptx_writes_one_register_under_cycling_predicates(sm90):
    k = generate_config(variant("ex2.approx.ftz.f32"), strategy("reg"), sm90, "write_write", length=6,
                        preds=3, name="k")
    inst = _instances(k.entry, "ex2.approx")
    got = [re.match(r"@(%p\d+) ex2\.approx\.ftz\.f32 (%r\d+), (%r\d+);", ln).groups() for ln in inst]
    assert len(got) == 6 and len({d for _, d, _ in got}) == 1
    assert [p for p, _, _ in got][:3] == [p for p, _, _ in got][3:] and len({p for p, _, _ in got}) == 3
    assert len({s for _, _, s in got}) == 6  # each instance its own source value: none the same


def test_forms_that_do_not_exist_are_refused(sm90):
    with pytest.raises(GenerationError, match="two source operands"):
        generate_config(variant("ex2.approx.ftz.f32"), strategy("reg"), sm90, "read_read")
    with pytest.raises(GenerationError, match="predicate result"):
        generate_config(variant("setp.lt.s32"), strategy("reg"), sm90, "write_write")


# --- the SASS checks on hand-written SASS -------------------------------------------------


def _fam(sass, make, lengths=(4, 8)):
    return [Sample(units=n, length=n, region=sass(*make(n))) for n in lengths]


OWN = {"FFMA": Fraction(1)}


def test_read_read_check(sass):
    good = _fam(sass, lambda n: [f"FFMA R{40 + i}, R{10 + i}, R2.reuse, R{20 + i}" for i in range(n)])
    why, info = check_read_read(good, OWN)
    assert why is None and info["shared_slots"] == {"FFMA": [1]} and info["reuse_fraction"] == 1.0
    merged = _fam(sass, lambda n: [f"FFMA R{40 + i}, R{10 + i}, R2, R{20 + i}" for i in range(n - 1)])
    assert "merged" in check_read_read(merged, OWN)[0]
    chained = _fam(sass, lambda n: [f"FFMA R{40 + i}, R{39 + i}, R2, R{20 + i}" for i in range(n)])
    assert "write-read" in check_read_read(chained, OWN)[0]
    two = _fam(sass, lambda n: [f"FFMA R{40 + i}, R3, R2, R{20 + i}" for i in range(n)])
    assert "not one source operand" in check_read_read(two, OWN)[0]
    none = _fam(sass, lambda n: [f"FFMA R{40 + i}, R{10 + i}, R{60 + i}, R{20 + i}" for i in range(n)])
    assert "no register is read by every instance" in check_read_read(none, OWN)[0]


def test_write_write_check(sass):
    good = _fam(sass, lambda n: [f"@P{1 + i % 3} FFMA R7, R{10 + i}, R2, R3" for i in range(n)])
    why, info = check_write_write(good, OWN)
    assert why is None and info["predicates"] == ["@P1", "@P2", "@P3"]
    dead = _fam(sass, lambda n: ["FFMA R7, R10, R2, R3"])  # only the last write left
    assert "dead" in check_write_write(dead, OWN)[0]
    sel = _fam(sass, lambda n: [f"FFMA R7, R{10 + i}, R2, R3" for i in range(n)])
    assert "select" in check_write_write(sel, OWN)[0]
    read = _fam(sass, lambda n: [f"@P1 FFMA R7, R{10 + i}, R7, R3" for i in range(n)])
    assert "read between" in check_write_write(read, OWN)[0]
    spread = _fam(sass, lambda n: [f"@P1 FFMA R{7 + i}, R{10 + i}, R2, R3" for i in range(n)])
    assert "different registers" in check_write_write(spread, OWN)[0]
    assert "SASS changed" in check_config(WW, good, OWN, {"FFMA": Fraction(1), "FSEL": Fraction(1)})[0]


# --- real ptxas: the checks accept what ptxas emits, reject a merged or dead form ----------


def _check(sm90, mode: str, name: str, op: str, own: dict, edit=None, lengths=(8, 16)):
    v = variant(name)
    ks = [generate_config(v, strategy("reg"), sm90, mode, length=n, preds=4, name=f"k{n}") for n in lengths]
    if edit is not None:
        for k in ks:
            k.entry = edit(k.entry)
    built = build_module(ks, sm90.arch)
    samples = [Sample(k.units, k.length, built[k.name].region) for k in ks]
    fam = check_family(samples, check_depth=False)
    if not fam.ok:
        return fam.reason, {}
    return check_config(RR if mode == "read_read" else WW, samples, own, core_sass(fam.per_unit, None, {}))


def _same_sources(entry: str) -> str:
    """Every fma.rn.f32 instance given the first instance's sources: ptxas may merge them."""
    lines = entry.splitlines()
    idx = [i for i, ln in enumerate(lines) if ln.strip().startswith("fma.rn.f32")]
    srcs = lines[idx[0]].split(",", 1)[1]
    for i in idx:
        lines[i] = lines[i].split(",", 1)[0] + "," + srcs
    return "\n".join(lines)


def test_ptxas_read_read_kernels_pass_and_a_merged_one_fails(sm90):
    why, info = _check(sm90, "read_read", "fma.rn.f32", "FFMA", OWN)
    assert why is None and list(info["shared_slots"]) == ["FFMA"]
    why, _ = _check(sm90, "read_read", "fma.rn.f32", "FFMA", OWN, edit=_same_sources)
    assert why is not None  # CSE: one FFMA for all instances


def test_ptxas_write_write_kernels_pass_and_a_dead_one_fails(sm90):
    why, info = _check(sm90, "write_write", "fma.rn.f32", "FFMA", OWN)
    assert why is None and len(info["predicates"]) >= 2
    why, _ = _check(sm90, "write_write", "fma.rn.f32", "FFMA", OWN,
                    edit=lambda e: re.sub(r"@%p\d+ (fma\.rn\.f32)", r"\1", e))
    assert why is not None  # unguarded: every write but the last is dead, and ptxas removes it


def test_ptxas_converting_guarded_fp64_writes_is_refused(sm90):
    why, _ = _check(sm90, "write_write", "fma.rn.f64", "DFMA", {"DFMA": Fraction(1)})
    assert why and ("SASS changed" in why or "select" in why)


# --- the suite's measurement path on synthetic timings -------------------------------------


def test_configurations_measured_from_synthetic_timings(table, sm90, monkeypatch):
    # the register-bank comparison is tested on its own (test_read_read_bank_*): ptxas decides it
    monkeypatch.setattr(configs, "bank_mismatch", lambda r, c: None)
    names = ["fma.rn.f32", "ex2.approx.ftz.f32", "fma.rn.f64"]
    cat = load_catalog()
    vs = [cat.get(n) for n in names]
    works = {w.variant.name: w for w in prepare_works(vs, autoverify_many(vs, sm90, jobs=1), sm90, PLAN, jobs=1)}
    # read-read as fast as its control; write-write 0.5 cycle per instance slower than its control
    per = {"_rr_": 1.0, "_ww_r": 2.5, "_ww_c": 2.0}

    def model(kernel: str, chains: int, length: int, warps: int) -> float:
        return 80 + length * next((c for tag, c in per.items() if tag in kernel), 4.0)

    got = {r.measure: r for r in measure_work(FakeDevice(model), works["fma.rn.f32"], PLAN, sm90).results}
    rr, ww = got[RR], got[WW]
    # the fake clock counts whole cycles: a slope over the lengths is within its resolution
    assert rr.value == pytest.approx(1.0, abs=0.05) and ww.value == pytest.approx(2.5, abs=0.05)
    assert got["latency"].value == pytest.approx(4.0)
    # the shared register takes turns in two operands (a or b, which ptxas may swap, and c)
    assert set(rr.params["shared_slots"]["FFMA"]) == {1, 2} and rr.params["lengths"] == [5, 11, 16]
    assert set(rr.params["bank_pattern"]) == {"5", "11", "16"}
    assert ww.params["lengths"] == [11, 21, 32] and ww.params["predicates"]
    # each against its control (the same lengths, no register shared), at one warp and over warps
    assert got["control_read_read"].params["lengths"] == rr.params["lengths"]
    assert got["control_write_write"].value == pytest.approx(2.0, abs=0.05)
    assert rr.params["one_warp"]["verdict"] == "same" and rr.params["verdict"] == "same"
    assert ww.params["one_warp"]["verdict"] == "slower" and ww.params["verdict"] == "slower"
    assert ww.params["one_warp"]["excess_cycles"] == pytest.approx(0.5, abs=0.1)
    over = ww.params["over_warps"]
    ran = [W for W in PLAN.config_warps if W in over["warps"]]
    assert over["warps"] == ran and len(ran) >= 5 and over["verdict"] == "slower"
    assert ran == list(PLAN.config_warps) or "refused" in ww.params["notes"][0]  # registers per SM
    n = max(ww.params["lengths"])  # a span of one region: (80 + 2.0 n) / (80 + 2.5 n) - 1
    assert [d for _, d in over["differ"]] == pytest.approx([(80 + 2.0 * n) / (80 + 2.5 * n) - 1] * len(ran),
                                                           abs=0.005)
    assert "cycles_per_repeat" in rr.samples and rr.sass == ["FFMA"] and rr.ptx_hash
    assert "read one register" in rr.statistic and "write one register" in ww.statistic
    ex2 = {r.measure: r for r in measure_work(FakeDevice(model), works["ex2.approx.ftz.f32"], PLAN, sm90).results}
    assert RR not in ex2 and ex2[WW].value == pytest.approx(2.5, abs=0.05)
    f64 = {r.measure: r for r in measure_work(FakeDevice(model), works["fma.rn.f64"], PLAN, sm90).results}
    assert f64[RR].value == pytest.approx(1.0, abs=0.05) and f64[RR].params["shared_slots"] == {"DFMA": [0, 2]}
    # ptxas turns guarded 64-bit writes into selects: not timed, with the reason (nothing else timed)
    assert f64[WW].value is None and f64[WW].flags[0].startswith("not timed: ") and "FSEL" in f64[WW].flags[0]


def test_a_one_warp_slope_below_one_issue_per_cycle_is_flagged_not_used(table, sm90):
    # a warp issues at most one SASS instruction per cycle: 0.5 cycles per FFMA is no hardware's
    v = load_catalog().get("fma.rn.f32")
    w = prepare_works([v], autoverify_many([v], sm90, jobs=1), sm90, PLAN, jobs=1)[0]

    def model(kernel: str, chains: int, length: int, warps: int) -> float:
        return 80 + length * (0.5 if "_rr_r" in kernel else 1.0)

    got = {r.measure: r for r in measure_work(FakeDevice(model), w, PLAN, sm90).results}
    rr = got[RR]
    assert any(f.startswith("below-issue-limit: ") for f in rr.flags)
    assert rr.params["one_warp"]["verdict"] is None and rr.params["verdict"] is None
    assert not any(f.startswith("below-issue-limit") for f in got["control_read_read"].flags)


def test_over_warps_decides_on_neighbouring_warp_counts_only():
    same = {W: (1.0, 0.0, 3) for W in (1, 2, 4, 8, 16)}
    lone = {**same, 4: (0.9, 0.0, 3)}  # one warp count apart: listed, decides nothing
    assert configs.over_warps(lone, same, (1024, 1024))["differ"] == [[4, -0.1]]
    assert configs.over_warps(lone, same, (1024, 1024))["verdict"] == "same"
    two = {**lone, 8: (0.95, 0.0, 3)}  # two neighbours, one sign: slower
    out = configs.over_warps(two, same, (1024, 1024))
    assert out["verdict"] == "slower" and out["runs"] == [[4, 8]]
    both = {**two, 1: (1.2, 0.0, 3), 2: (1.2, 0.0, 3)}  # faster at 1-2, slower at 4-8
    assert configs.over_warps(both, same, (1024, 1024))["verdict"] == "mixed"
    # within the clock's resolution of a short span (4 instances x 1 warp: 1 cycle is 25%)
    assert configs.over_warps({1: (1.0, 0.0, 3), 2: (1.0, 0.0, 3)}, {1: (0.9, 0.0, 3), 2: (0.9, 0.0, 3)},
                              (4, 4))["verdict"] == "same"
    assert configs.over_warps({}, {}, (1, 1))["verdict"] is None


def test_read_read_applies_only_beside_another_register_source(table):
    # selp: two register sources and a predicate; the predicate cannot be the shared one
    assert configs.applies(variant("selp.b32"), RR, 1)
    assert not configs.applies(variant("selp.b32"), RR, 3)
    assert not configs.applies(variant("popc.b32"), RR, 1)  # one source: every instance the same
    assert configs.applies(variant("popc.b32"), WW)
    bad = TABLE.replace("shared = 3", "shared = 7")
    with pytest.raises(ValueError, match="mad.lo.u32: source operand 7 cannot be the shared register"):
        config_specs(variant("mad.lo.u32"), bad)


def test_a_control_measured_again_is_compared_again(table, sm90, monkeypatch):
    monkeypatch.setattr(configs, "bank_mismatch", lambda r, c: None)  # ptxas's banks: tested apart
    v = load_catalog().get("fma.rn.f32")
    w = prepare_works([v], autoverify_many([v], sm90, jobs=1), sm90, PLAN, jobs=1)[0]
    slow = {"_rr_r": 1.0, "_rr_c": 2.0}

    def model(kernel: str, chains: int, length: int, warps: int) -> float:
        return 80 + length * next((c for tag, c in slow.items() if tag in kernel), 4.0)

    first = {r.measure: r for r in measure_work(FakeDevice(model), w, PLAN, sm90).results}
    assert first[RR].params["one_warp"]["verdict"] == "faster"
    slow["_rr_c"] = 1.0  # the control again (a retry of its family alone): now as fast
    j = next(k for k, f in enumerate(w.families) if f.measure == "control_read_read")
    again = {r.measure: r for r in measure_work(FakeDevice(model), w, PLAN, sm90, only={j}).results}
    assert again[RR].params["one_warp"]["verdict"] == "same" and again[RR].params["verdict"] == "same"


def test_below_issue_limit_leaves_data_dependent_paths_alone():
    from gpudissect.suites.instructions.core import below_issue as _below_issue

    assert _below_issue(0.5, ["FFMA"], [16, 32, 48], [0.5, 0.5])[0].startswith("below-issue-limit: ")
    assert _below_issue(1.0, ["FFMA"], [16, 32, 48], [1.0, 1.0]) == []
    assert _below_issue(0.5, ["FFMA", "BRA", "FFMA"], [16, 32, 48], [0.5]) == []  # not the static count


def test_the_shipped_comparisons_are_rederived_from_their_stored_numbers():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rederive", Path(__file__).parents[1] / "scripts" / "rederive_configs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def row(rid, measure, value, slopes, params):
        return {"id": rid, "variant": "fma.rn.f32", "measure": measure, "value": value, "unit": "cycles",
                "statistic": "s", "params": {"lengths": [16, 32, 48], **params}, "fit": None,
                "samples": {"slope_per_repeat": slopes}, "flags": [], "sass": ["FFMA"], "strategy": "reg",
                "ptx_hash": None, "sass_hash": None, "cls": "fp32"}

    over = {"warps": [1, 2, 4], "rate": [1.0, 1.0, 0.9], "rate_halfwidth": [0, 0, 0],
            "control_rate": [1.0, 1.0, 1.0], "control_halfwidth": [0, 0, 0], "verdict": "slower"}
    banks = {"bank_pattern": {"16": {"FFMA:ABB": 16}}}
    rows = [row(1, RR, 1.0, [1.0, 1.0], {"one_warp": {"verdict": "x"}, "over_warps": over, "verdict": "slower",
                                         **banks}),
            row(2, "control_read_read", 1.0, [1.0, 1.0], banks),
            {"id": 3, "variant": "v", "measure": "grid", "params": {"grid_distances": [1, 8],
             "region_sass": {"8": ["0.5*HFMA2"]}, "warp_latency_per_instance": 0.5}}]
    rows[0]["flags"] = ["sass: register banks / operand reuse differ (an older analysis)"]
    new = {k: p for k, (p, _f) in mod.configs(rows).items()}
    assert mod.configs(rows)[1][1] == []  # the patterns agree now: the stored bank flag is dropped
    # one warp count apart decides nothing now; the one-warp slopes agree: the same
    assert new[1]["over_warps"]["verdict"] == "same" and new[1]["one_warp"]["verdict"] == "same"
    assert new[1]["verdict"] == "same" and "lengths" in new[1]
    assert mod.grids(rows)[3]["warp_latency_cycles"] == pytest.approx(1.0)  # per SASS issue
    # a stored pair without the bank evidence (or with different patterns) decides nothing
    rows[1]["params"].pop("bank_pattern")
    assert mod.configs(rows)[1][0]["verdict"] is None


# --- register banks and reuse: a read-read and its control must show the same pattern ------


def test_bank_signature_groups_operands_by_index_parity_and_marks_reuse(sass):
    a, b, c = sass("FFMA R51, R35, R36, R34", "FFMA R61, R33, R60, R30", "FFMA R51, R35, R37.reuse, R34")
    assert configs.bank_signature(a) == "ABB" and configs.bank_signature(b) == "ABB"  # 100 and 011 alike
    assert configs.bank_signature(c) == "AArB"
    (d,) = sass("FFMA R5, R2, 0.5, RZ")
    assert configs.bank_signature(d) == "A--"


def _rr(measure, pattern, value=1.0):
    return Result("fma.rn.f32", measure, value, "cycles", "s", params={"bank_pattern": pattern},
                  samples={"slope_per_repeat": [value, value]})


def test_read_read_bank_mismatch_fails_the_comparison():
    same = {"16": {"FFMA:ABB": 16}}
    ok = configs.against_control(_rr(RR, same), _rr("control_read_read", same, 1.5))
    assert not any(f.startswith("sass:") for f in ok.flags) and ok.params["one_warp"]["verdict"] == "faster"
    other = {"16": {"FFMA:AArB": 16}}  # the read-read rides the reuse cache, the control does not
    bad = configs.against_control(_rr(RR, other), _rr("control_read_read", same, 1.5))
    assert any(f.startswith("sass: register banks") for f in bad.flags)
    assert bad.params["verdict"] is None and bad.params["one_warp"]["verdict"] is None
    unknown = configs.against_control(_rr(RR, None), _rr("control_read_read", same, 1.5))
    assert unknown.params["verdict"] is None


def _rr_lengths(measure, pattern, ys):
    """A one-warp result timed at lengths 5, 11, 16 (two repeats each, the medians ``ys``)."""
    raw = {str(n): [y - 0.5, y + 0.5] for n, y in zip((5, 11, 16), ys, strict=True)}
    return Result("fma.rn.f32", measure, (ys[2] - ys[0]) / 11, "cycles", "s",
                  params={"bank_pattern": pattern, "lengths": [5, 11, 16]},
                  samples={"cycles_per_repeat": raw, "slope_per_repeat": [1.0, 1.0]})


def test_read_read_is_compared_over_the_lengths_whose_bank_patterns_agree():
    """The H200's fma.rn.f32: ptxas placed the 5-instance read-read's registers otherwise than its
    control's, the 11 and 16 alike: the comparison is made over 11 and 16 alone, from each
    result's own cycles, not refused and not over all three lengths."""
    test = {"5": {"FFMA:AAB": 1, "FFMA:ABB": 4}, "11": {"FFMA:ABB": 11}, "16": {"FFMA:ABB": 16}}
    ctrl = {"5": {"FFMA:ABB": 5}, "11": {"FFMA:ABB": 11}, "16": {"FFMA:ABB": 16}}
    r = configs.against_control(_rr_lengths(RR, test, [7, 21, 31]), _rr_lengths("control_read_read", ctrl, [6, 16, 23]))
    one = r.params["one_warp"]
    assert one["lengths"] == [11, 16] and not any(f.startswith("sass:") for f in r.flags)
    assert one["excess_cycles"] == pytest.approx((31 - 21) / 5 - (23 - 16) / 5)
    assert one["verdict"] == "slower" and one["control_cycles"] == pytest.approx(1.4)
    # the longest length agrees: the rates over warps may be compared (none given here)
    assert "over_warps" not in r.params
    # agreeing at one length only: no comparison, flagged as before
    test1 = {**test, "11": {"FFMA:AAB": 11}}
    r1 = configs.against_control(_rr_lengths(RR, test1, [7, 21, 31]),
                                 _rr_lengths("control_read_read", ctrl, [6, 16, 23]))
    assert any(f.startswith("sass: register banks") for f in r1.flags) and r1.params["verdict"] is None
    # the longest length differs: the over-warps comparison (longest kernels) is refused
    test2 = {**test, "16": {"FFMA:AAB": 16}, "5": {"FFMA:ABB": 5}}
    r2 = configs.against_control(_rr_lengths(RR, test2, [7, 21, 31]),
                                 _rr_lengths("control_read_read", ctrl, [6, 16, 23]), {1: (1.0, 0.01, 5)},
                                 {1: (1.0, 0.01, 5)})
    assert r2.params["one_warp"]["lengths"] == [5, 11] and r2.params["over_warps"]["verdict"] is None


def test_read_read_bank_pattern_from_ptxas_is_compared_per_length(sm90):
    """Real ptxas: both families carry a pattern per region length; whether they agree is what
    the comparison then decides (bank_mismatch), not assumed here."""
    v = variant("fma.rn.f32")
    spec = next(s for s in config_specs(v) if s.measure == RR)
    infos = {}
    for ctl in (False, True):
        ks = [generate_config(v, strategy("reg"), sm90, "read_read", length=n, name=f"k{int(ctl)}n{n}",
                              distance=n if ctl else 1, slots=spec.turns) for n in (8, 16)]
        built = build_module(ks, sm90.arch)
        samples = [Sample(k.units, k.length, built[k.name].region) for k in ks]
        fam = check_family(samples, check_depth=False)
        why, infos[ctl] = check_config("control_read_read" if ctl else RR, samples, OWN,
                                       core_sass(fam.per_unit, None, {}))
        assert why is None and set(infos[ctl]["bank_pattern"]) == {"8", "16"}
        assert all(sum(p.values()) == int(n) for n, p in infos[ctl]["bank_pattern"].items())
    assert not any("r" in k for p in infos[True]["bank_pattern"].values() for k in p)  # no reuse in the control


# --- instances of several SASS instructions: checked by data flow -------------------------

ADD64 = {"IADD3": Fraction(1), "IADD3.X": Fraction(1)}  # add.u64: low word, then the carry into the high
MIN64 = {"ISETP.LT.U32.AND": Fraction(1), "ISETP.LT.U32.AND.EX": Fraction(1), "SEL": Fraction(2)}


def _add64(i: int, a: tuple[str, str] = ("R2", "R3"), b: tuple[str, str] | None = None, carry: str | None = None):
    """One add.u64 instance: d = a + b (its own b and d), the carry through a predicate."""
    b = b or (f"R{10 + 2 * i}", f"R{11 + 2 * i}")
    p = f"P{i % 6}"
    return [f"IADD3 R{40 + 2 * i}, {p}, {a[0]}, {b[0]}, RZ",
            f"IADD3.X R{41 + 2 * i}, {a[1]}, {b[1]}, RZ, {carry or p}, !PT"]


def test_multi_sass_read_read_check(sass):
    good = _fam(sass, lambda n: [ln for i in range(n) for ln in _add64(i)])
    why, info = check_read_read(good, ADD64)
    assert why is None and info["shared_slots"] == {"IADD3": [0], "IADD3.X": [0]}
    # instances interleaved as ptxas schedules them, a carry predicate reused, a form of the
    # group of equivalents (IMAD.X for IADD3.X), moves of an input beside: still the pattern
    mixed = _fam(sass, lambda n: ["MOV R90, R3"] + [
        ln for k in range(0, n, 2) for ln in
        [f"IADD3 R{40 + 2 * i}, P{i % 2}, R2, R{10 + 2 * i}, RZ" for i in (k, k + 1)]
        + [f"IMAD.X R{41 + 2 * i}, R90, 0x1, R{11 + 2 * i}, P{i % 2}" for i in (k, k + 1)]])
    why, info = check_read_read(mixed, ADD64)
    assert why is None and info["shared_slots"] == {"IADD3": [0], "IMAD.X": [0]}  # R90 reads as R3
    # one instance reads another's result (its low word): write-read, one group fewer
    chained = _fam(sass, lambda n: [ln for i in range(n) for ln in
                                    _add64(i, b=(f"R{38 + 2 * i}" if i else "R10", f"R{11 + 2 * i}"))])
    assert "write-read" in check_read_read(chained, ADD64)[0]
    # no register read by every instance: each its own "shared" value
    own_a = _fam(sass, lambda n: [ln for i in range(n) for ln in _add64(i, a=(f"R{60 + 2 * i}", f"R{61 + 2 * i}"))])
    assert "no register is read by every instance" in check_read_read(own_a, ADD64)[0]
    # the shared register read by all but one instance
    all_but = _fam(sass, lambda n: [ln for i in range(n) for ln in
                                    _add64(i, a=("R2", "R3") if i else ("R70", "R71"))])
    assert "no register is read by every instance" in check_read_read(all_but, ADD64)[0]
    # two instances reading the same per-instance value: merged
    twice = _fam(sass, lambda n: [ln for i in range(n) for ln in _add64(i, b=("R10", f"R{11 + 2 * i}") if i < 2
                                                                         else None)])
    assert "read by 2 of" in check_read_read(twice, ADD64)[0]
    # the carry from outside the region: the two halves are not one instance
    split = _fam(sass, lambda n: [ln for i in range(n) for ln in _add64(i, carry="P6")])
    assert "unconnected" in check_read_read(split, ADD64)[0]
    # the high word's add missing (moved out of the region)
    half = _fam(sass, lambda n: [_add64(i)[0] for i in range(n)])
    assert "an instance is IADD3 where the variant is" in check_read_read(half, ADD64)[0]
    # an instruction the variant does not compile to
    lop = _fam(sass, lambda n: [ln for i in range(n) for ln in _add64(i) + [f"LOP3.LUT R{41 + 2 * i}, R{41 + 2 * i}, "
                                                                            f"R5, RZ, 0x3c, !PT"]])
    assert "LOP3.LUT per instance beside the variant's SASS" in check_read_read(lop, ADD64)[0]
    # the low words of both operands shared (two operands merged), the high words per instance
    two = _fam(sass, lambda n: [ln for i in range(n) for ln in
                                _add64(i, a=("R2", f"R{61 + 2 * i}"), b=("R10", f"R{11 + 2 * i}"))])
    assert "not one operand's" in check_read_read(two, ADD64)[0]
    # the control: each instance its own copy of the shared value
    ctrl = own_a
    assert configs.check_control(ctrl, ADD64, "read_read") == (None, {"reuse_fraction": 0.0})
    assert "read by every instance" in configs.check_control(good, ADD64, "read_read")[0]
    twice_c = _fam(sass, lambda n: [ln for i in range(n) for ln in
                                    _add64(i, a=(f"R{60 + 2 * i}", f"R{61 + 2 * i}"),
                                           b=("R10", f"R{11 + 2 * i}") if i < 2 else None)])
    assert "R10 is read by 2 instances" in configs.check_control(twice_c, ADD64, "read_read")[0]
    assert "write-read" in configs.check_control(chained, ADD64, "read_read")[0]


def _min64(i: int, dest: tuple[str, str], pred: str, commit: bool = False):
    a, b = (f"R{10 + 2 * i}", f"R{11 + 2 * i}"), ("R2", "R3")
    lines = [f"ISETP.LT.U32.AND P0, PT, {a[0]}, {b[0]}, PT", f"ISETP.LT.U32.AND.EX P0, PT, {a[1]}, {b[1]}, PT, P0"]
    if commit:  # the guard folded into a select that reads the destination
        return lines + [f"SEL R{60 + i}, {a[0]}, {b[0]}, P0", f"SEL R{70 + i}, {a[1]}, {b[1]}, P0",
                        f"SEL {dest[0]}, R{60 + i}, {dest[0]}, {pred}", f"SEL {dest[1]}, R{70 + i}, {dest[1]}, {pred}"]
    return lines + [f"@{pred} SEL {dest[0]}, {a[0]}, {b[0]}, P0", f"@{pred} SEL {dest[1]}, {a[1]}, {b[1]}, P0"]


def test_multi_sass_write_write_check(sass):
    good = _fam(sass, lambda n: [ln for i in range(n) for ln in _min64(i, ("R7", "R8"), f"P{1 + i % 3}")]
                + ["IMAD.MOV.U32 R30, RZ, RZ, R7"])  # a copy of the result after the last write
    why, info = check_write_write(good, MIN64)
    assert why is None and info["predicates"] == ["@P1", "@P2", "@P3"]
    commit = _fam(sass, lambda n: [ln for i in range(n) for ln in _min64(i, ("R7", "R8"), f"P{1 + i % 3}", True)])
    assert "no write-write pair" in check_write_write(commit, MIN64)[0]  # each SEL reads what the last wrote
    # a variant without a SEL of its own: the selects are no instruction of its
    add_commit = _fam(sass, lambda n: [ln for i in range(n) for ln in _add64(i)
                                       + [f"SEL R7, R{40 + 2 * i}, R7, P{1 + i % 3}", f"SEL R8, R{41 + 2 * i}, R8, "
                                          f"P{1 + i % 3}"]])
    why = check_write_write(add_commit, ADD64)[0]
    assert "2*SEL per instance beside the variant's SASS" in why and "select" in why
    # the same SEL count as the variant's, but the destination read: the instances chain
    chain = _fam(sass, lambda n: [ln for i in range(n) for ln in
                                  _min64(i, ("R7", "R8"), f"P{1 + i % 3}")[:2]
                                  + [f"@P1 SEL R7, R{10 + 2 * i}, R7, P0", f"@P1 SEL R8, R{11 + 2 * i}, R3, P0"]])
    assert "no write-write pair" in check_write_write(chain, MIN64)[0]
    spread = _fam(sass, lambda n: [ln for i in range(n) for ln in _min64(i, (f"R{40 + 2 * i}", f"R{41 + 2 * i}"),
                                                                         "P1")])
    assert "different sets of registers" in check_write_write(spread, MIN64)[0]
    bare = _fam(sass, lambda n: [ln.removeprefix("@P1 ") for i in range(n) for ln in _min64(i, ("R7", "R8"), "P1")])
    assert "lost its predicate" in check_write_write(bare, MIN64)[0]
    # the control: each instance its own destination, each write predicated
    assert configs.check_control(spread, MIN64, "write_write")[0] is None
    unguarded = _fam(sass, lambda n: [ln.removeprefix("@P1 ") for i in range(n) for ln in
                                      _min64(i, (f"R{40 + 2 * i}", f"R{41 + 2 * i}"), "P1")])
    assert "lost its predicate" in configs.check_control(unguarded, MIN64, "write_write")[0]


def _check_multi(sm90, name: str, mode: str, control: bool, own: dict, lengths=(8, 14)):
    v = variant(name)
    ks = [generate_config(v, strategy("reg"), sm90, mode, length=n, preds=4, distance=n if control else 1,
                          name=f"k{n}") for n in lengths]
    built = build_module(ks, sm90.arch)
    samples = [Sample(k.units, k.length, built[k.name].region) for k in ks]
    fam = check_family(samples, check_depth=False)
    assert fam.ok, fam.reason
    measure = ("control_" if control else "latency_") + mode
    return samples, check_config(measure, samples, own, core_sass(fam.per_unit, None, {}))


def test_ptxas_multi_sass_read_read_and_control_pass(sm90):
    for name, own in (("add.u64", ADD64), ("min.u64", MIN64)):
        rr, (why, info) = _check_multi(sm90, name, "read_read", False, own)
        assert why is None, (name, why)
        assert info["shared_slots"] and all(j == [0] for j in info["shared_slots"].values())
        ctrl, (why, info) = _check_multi(sm90, name, "read_read", True, own)
        assert why is None and "reuse_fraction" in info, (name, why)
        # each is not the other: the configuration shares a register, the control none
        assert "read by every instance" in configs.check_control(rr, own, "read_read")[0]
        assert "no register is read by every instance" in check_read_read(ctrl, own)[0]


def test_ptxas_multi_sass_write_write(sm90):
    # min.u64: ptxas predicates the instance's own two SELs: a write-write pair
    _, (why, info) = _check_multi(sm90, "min.u64", "write_write", False, MIN64)
    assert why is None and len(info["predicates"]) >= 2
    # add.u64: the guarded write committed through SELs, which read the destination
    _, (why, _) = _check_multi(sm90, "add.u64", "write_write", True, ADD64, lengths=(11, 21))
    assert "SEL" in why and "no write-write pair" in why


def test_a_configuration_and_a_control_of_different_moves_are_not_compared(sass):
    own = {"FFMA": Fraction(1)}
    plain = [Sample(units=n, length=n, region=sass(*["FFMA R4, R0, R1, R2"] * n)) for n in (4, 8)]
    moved = [Sample(units=n, length=n, region=sass(*["FFMA R4, R0, R1, R2", "MOV R6, R4"] * n)) for n in (4, 8)]
    assert configs.moves_per_instance(plain, own) == 0.0
    assert configs.moves_per_instance(moved, own) == 1.0

    def res(measure: str, moves: float) -> Result:
        return Result("fma.rn.f32", measure, 1.0, "cycles", "s", params={"moves_per_instance": moves},
                      samples={"slope_per_repeat": [1.0, 1.0, 1.0]}, fit={"xs": [16, 32], "ys": [16, 32]})

    assert configs.one_warp(res(RR, 0.0), res("control_read_read", 0.0))["verdict"] == "same"
    apart = configs.one_warp(res(RR, 0.0), res("control_read_read", 1.0))
    assert apart["verdict"] is None and "not the same instructions" in apart["why"]


def test_a_chunk_with_nothing_left_to_build_is_returned_as_it_is(sm90):
    """A retry whose families all failed to generate (no kernels) builds no empty module."""
    from gpudissect.suites.instructions.core import Family, _build_chunk

    v = load_catalog().get("add.u64")
    rec = autoverify_many([v], sm90, jobs=1)[0]
    f = Family("latency_operand_1", 1, [], error="not generated", strategy="companion")
    assert _build_chunk(([(v, rec, [f], 0)], "sm_90", None))[0][0].error == "not generated"
