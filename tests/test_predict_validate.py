"""gpudissect predict --validate (GPU-free): the generator, the error statistics, the span
statistic of a launch, the control-code schedule and the --measured path end to end.

Every expected number comes from the synthetic inputs written here, never from a GPU run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpudissect.cli import app
from gpudissect.kernel.control import Control
from gpudissect.predict.generate import generate, verified_pool
from gpudissect.predict.harness import ITERS, REPS
from gpudissect.predict.measure import SCHEMA, build_all, full_launch, summarize_times
from gpudissect.predict.sched import branch_cost, region_cycles, simulate_controls
from gpudissect.predict.tables import tables_from
from gpudissect.predict.validate import analyse, error_stats, kendall_tau, read_measured
from gpudissect.report.read.results import ResultSet

DATA = Path(__file__).resolve().parents[1] / "data" / "h100"

FADD_LAT, FADD_RATE, MUFU_LAT = 4.0, 4.0, 20.0  # synthetic tables


def _rec(variant: str, measure: str, value: float, sass: list[str]) -> dict:
    return {"variant": variant, "measure": measure, "value": value, "unit": "", "flags": [], "sass": sass}


def _rs() -> ResultSet:
    recs = {"instructions": [
        _rec("add.f32", "latency", FADD_LAT, ["FADD"]), _rec("add.f32", "throughput_peak", FADD_RATE, ["FADD"]),
        _rec("mul.f32", "latency", FADD_LAT, ["FMUL"]), _rec("ex2.approx.f32", "latency", MUFU_LAT, ["MUFU.EX2"]),
        _rec("fma.rn.f32", "latency", FADD_LAT, ["FFMA"]), _rec("mul.lo.u32", "latency", 4.0, ["IMAD"]),
        _rec("add.u32", "latency", 4.0, ["IADD3"]), _rec("min.s32", "latency", 4.0, ["VIMNMX"]),
    ]}
    docs = {s: {"schema": "gpudissect.suite/1", "suite": s, "summary": {},
                "provenance": {"arch": "sm_90", "gpu_name": "Synthetic GPU"}, "records": r}
            for s, r in recs.items()}
    return ResultSet("syn", "synthetic", docs)


@pytest.fixture
def tables():
    return tables_from(_rs(), {})


# --- error statistics --------------------------------------------------------------------------

def test_error_stats_known_inputs():
    s = error_stats([10.0, 21.0, 33.0, 50.0], [10.0, 20.0, 30.0, 40.0])
    assert s["n"] == 4
    assert math.isclose(s["mape"], (0 + 0.05 + 0.10 + 0.25) / 4)
    assert s["within5"] == 0.5 and s["within10"] == 0.75  # 0 and 5 %; 10 % is within 10 %
    assert s["tau"] == 1.0  # same order
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    # one discordant pair of three: (2 - 1) / 3
    assert math.isclose(kendall_tau([1, 2, 3], [1, 3, 2]), 1 / 3)
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))  # a constant series has no order
    assert error_stats([], [])["mape"] is None


def test_branch_cost_is_the_median():
    assert branch_cost([3.0, 9.0, 4.0]) == 4.0
    assert branch_cost([3.0, 5.0]) == 4.0
    assert branch_cost([]) is None


# --- the span statistic of a launch ------------------------------------------------------------

def _times(rows: list[tuple[int, list[tuple[int, int]]]]) -> np.ndarray:
    """Rows of (smid, [(t0, t1) per repetition])."""
    t = np.zeros((len(rows), 2 * REPS + 1), dtype=np.uint64)
    for i, (sm, reps) in enumerate(rows):
        for r, (a, b) in enumerate(reps):
            t[i, 2 * r], t[i, 2 * r + 1] = a, b
        t[i, -1] = sm
    return t


def test_span_is_first_start_to_last_end_of_an_sm():
    n = ITERS
    cold = (0, 10 * n)  # the first repetition is dropped
    rows = [(0, [cold, (100, 100 + 4 * n), (10_000_000, 10_000_000 + 4 * n)]),  # warp 0 of SM 0 ends early
            (0, [cold, (100, 100 + 8 * n), (10_000_000, 10_000_000 + 8 * n)]),  # warp 1 of SM 0
            (1, [cold, (50, 50 + 8 * n), (20_000_000, 20_000_000 + 8 * n)]),  # SM 1
            (1, [cold, (50, 50 + 8 * n), (20_000_000, 20_000_000 + 8 * n)]),
            (2, [cold, (0, 99 * n), (0, 99 * n)])]  # SM 2 ran one warp: left out
    s = summarize_times(_times(rows), want=2)
    assert s["cycles_per_iter"] == 8.0  # the SM's span, not the early warp's own region
    assert s["warp_cycles_per_iter"] == 8.0 and s["warp_p10"] < 8.0
    assert s["sms"] == 2 and "1 of 3 SMs" in s["flags"][0]


def test_full_launch_follows_the_occupancy_rules():
    from gpudissect.arch.occupancy import occupancy_rules
    from gpudissect.arch.target import make_target

    rules = occupancy_rules(make_target("sm_90"))
    assert full_launch(32, 0, rules).warps == 64  # 32 registers: the whole SM
    f = full_launch(40, 0, rules)  # 40 registers: 1280 per warp, 12 warps per sub-partition
    assert f.warps == 48 and f.warps == f.block_warps * f.blocks_per_sm
    assert full_launch(255, 0, rules).warps < 16


# --- the control-code schedule ------------------------------------------------------------------

def _ctl(stall: int, wb: int | None = None, waits: int = 0) -> Control:
    return Control(stall=stall, yield_=False, write_barrier=wb, read_barrier=None, wait_mask=waits, reuse=0)


def test_one_warp_follows_stall_counts_and_scoreboards(tables):
    from gpudissect.kernel.dataflow import dependence_graph
    from gpudissect.predict.bounds import predict
    from tests.test_predict import _loop, _sass

    lp = _loop(_sass("""
.L_x_0:
MUFU.EX2 R1, R2
FADD R3, R1, R3
FADD R4, R4, R5
@P0 BRA `(.L_x_0)
"""))
    p = predict(lp.name, lp.body, tables, warps=1)
    edges = dependence_graph(list(lp.body))
    # stall counts only: 2 + 3 + 1 + 5 cycles per iteration
    ctl = [_ctl(2), _ctl(3), _ctl(1), _ctl(5)]
    assert simulate_controls(p.entries, edges, ctl, tables.schedulers, 1) == 11
    # a taken-branch redirect of 9 cycles waits beyond the branch's stall count of 5; one of 4
    # hides under it
    assert simulate_controls(p.entries, edges, ctl, tables.schedulers, 1, branch=9.0) == 15
    assert simulate_controls(p.entries, edges, ctl, tables.schedulers, 1, branch=4.0) == 11
    # the FADD waits on the MUFU's scoreboard: issued at 0, ready at MUFU_LAT
    ctl = [_ctl(1, wb=0), _ctl(1, waits=1), _ctl(1), _ctl(1)]
    assert simulate_controls(p.entries, edges, ctl, tables.schedulers, 1) == MUFU_LAT + 3
    # four warps on the scheduler, a region of 200 trips each: the MUFU pipe (one every
    # schedulers / rate cycles) binds; the region's ends add or take less than one pipe
    # interval over 200 trips
    ctl = [_ctl(1), _ctl(1), _ctl(1), _ctl(2)]
    pipe = 4 * tables.schedulers / p.entries[0].rate
    r = region_cycles(p.entries, edges, ctl, tables.schedulers, 4, 200)
    assert abs(r - pipe) <= (tables.schedulers / p.entries[0].rate) / 200
    lp = _loop(_sass("""
.L_x_0:
FADD R3, R1, R3
FADD R4, R4, R5
FADD R6, R6, R5
@P0 BRA `(.L_x_0)
"""))
    p = predict(lp.name, lp.body, tables, warps=4)
    edges = dependence_graph(list(lp.body))
    # ... and without it the issue slot: 4 instructions of 4 warps, the stalls hidden
    r = region_cycles(p.entries, edges, ctl, tables.schedulers, 4, 200)
    assert abs(r - 16) <= 5 / 200
    # the greedy scheduler: warp 0 issues its 4 instructions at cycles 0..3 and could go on at
    # 5 (the branch's stall 2), but warp 1 has taken the slot at 4 and keeps it while it can
    # (4..7); at 8 the oldest ready warp, warp 0, comes back: 8 cycles per trip, not 16
    assert simulate_controls(p.entries, edges, ctl, tables.schedulers, 4) == 8


# --- the generator -----------------------------------------------------------------------------

def _pool():
    from gpudissect.predict.validate import pool_records

    if not (DATA / "instructions.json.xz").exists():
        pytest.skip("no shipped data/h100")
    return verified_pool(pool_records(DATA))


def test_generator_is_deterministic_and_varied():
    pool = _pool()
    assert len(pool) >= 50
    a, b = generate(pool, 40, seed=7), generate(pool, 40, seed=7)
    assert [s.body for s in a] == [s.body for s in b]
    assert [s.body for s in generate(pool, 40, seed=8)] != [s.body for s in a]
    pats = {dict(s.meta)["pattern"] for s in generate(pool, 60, seed=7)}
    assert pats == {"chain", "parallel", "random"}


@pytest.mark.slow
def test_generated_loops_compile_and_their_loops_are_found():
    from gpudissect.arch.target import make_target
    from gpudissect.kernel.toolchain import ToolchainMissing

    pool = _pool()
    specs = generate(pool, 330, seed=20)
    try:
        built = build_all(specs, "sm_90", make_target("sm_90").ptx_isa)
    except ToolchainMissing:
        pytest.skip("no ptxas/nvdisasm")
    ok = {n: v[1] for n, v in built.items() if not isinstance(v, str)}
    hashes = {r["sass_hash"] for r in ok.values()}
    assert len(hashes) >= 300  # distinct SASS loops
    for r in ok.values():  # the loop counts ITERS in steps of one and ends in its branch
        assert r["sass"][-1].split("*/")[1].strip().lstrip("@!P0123456789 ").startswith("BRA")
        assert len(r["control_hi"]) == len(r["sass"])


# --- --measured end to end ---------------------------------------------------------------------

LOOP_SASS = [
    "/*0100*/                   FADD R4, R4, R5 ;",
    "/*0110*/                   FADD R6, R6, R5 ;",
    "/*0120*/              @!P0 BRA `(.L_x_0) ;",
]


def _hi(stall: int) -> str:
    return f"{(stall & 0xF | 7 << 5 | 7 << 8 | 1 << 4) << (105 - 64):#018x}"


def _loop_rec(name: str, category: str, stalls: list[int], points: list[tuple[str, int, float]]) -> dict:
    return {"name": name, "category": category, "meta": {}, "ptx_hash": "x",
            "loop": {"start": 0x100, "end": 0x120, "sass": LOOP_SASS, "control_hi": [_hi(s) for s in stalls],
                     "sass_hash": name},
            "points": [{"point": p, "warps": w, "cycles_per_iter": c} for p, w, c in points]}


def _measured() -> dict:
    # calibration: stalls 1 + 1 + 5 = 7, measured 10 -> the warp loses 3 beyond the stall counts:
    # the redirect is the branch's stall 5 + 3 = 8; the two other calibration loops say 7 and
    # 9: the median is 8 (a branch stall count under 8 waits 8)
    loops = [_loop_rec("cal_a", "calibration", [1, 1, 5], [("1", 1, 10.0)]),
             _loop_rec("cal_b", "calibration", [1, 1, 5], [("1", 1, 9.0)]),
             _loop_rec("cal_c", "calibration", [1, 1, 5], [("1", 1, 11.0)]),
             _loop_rec("gen_a", "generated", [2, 2, 5], [("1", 1, 12.0)]),  # 9 + 3 = 12: exact
             _loop_rec("gen_b", "generated", [1, 1, 5], [("1", 1, 11.0)]),  # 10 predicted: 9.1 % off
             _loop_rec("hash", "hash", [4, 4, 5], [("1", 1, 16.0)]),  # 16: exact
             {"name": "bad", "category": "generated", "error": "loop: no loop"}]
    # one kernel of the corpus of public code (its loop as the hash's), held out
    pub = _loop_rec("pub", "x", [4, 4, 5], [])
    corpus = [{"name": "pub_k", "symbol": "pub", "source": "o/r@c0ffee:k.cu", "split": "held-out", "unroll": 4,
               "loop": pub["loop"], "cases": [{"category": "compute", "points": [
                   {"point": "1", "warps": 1, "cycles_per_iter": 20.0, "footprint": 64},
                   {"point": "4", "warps": 4, "error": "RuntimeError: launch failed"}]}]},
              {"name": "pub_gone", "error": "cubin: missing"}]
    return {"schema": SCHEMA, "arch": "sm_90", "gpu": {"name": "Synthetic GPU", "uuid": "GPU-syn"},
            "loops": loops, "corpus": corpus}


def test_analyse_synthetic_measurements(tables):
    res = analyse(_measured(), tables)
    assert res["calibration"]["branch_cycles"] == 8.0
    rows = {r["loop"]: r for r in res["rows"]}
    assert set(rows) == {"gen_a", "gen_b", "hash", "pub_k"}  # calibration loops are not in the set
    assert rows["gen_a"]["model"] == 12.0 and rows["gen_b"]["model"] == 10.0 and rows["hash"]["model"] == 16.0
    g = res["stats"]["generated"]["model"]
    assert g["n"] == 2 and math.isclose(g["mape"], (0 + 1 / 11) / 2) and g["within5"] == 0.5
    assert res["stats"]["handwritten"]["model"]["mape"] == 0.0
    # the corpus row: the model's slope over trips (the hash loop's 16 cycles a trip) against the
    # measured slope, in its category and split, with its source named
    pub = rows["pub_k"]
    assert pub["model"] == pytest.approx(16.0, rel=1e-3) and pub["measured"] == 20.0
    assert (pub["set"], pub["category"], pub["split"], pub["source"]) == ("real", "compute", "held-out",
                                                                         "o/r@c0ffee:k.cu")
    for g in ("real", "held-out", "held-out compute", "held-out compute @ 1"):
        assert res["stats"][g]["model"]["mape"] == pytest.approx(0.2, rel=1e-3)
    assert "train" not in res["stats"]
    assert res["errors"] == ["bad: loop: no loop", "pub_k compute @ 4: RuntimeError: launch failed",
                             "pub_gone: cubin: missing"]


def test_cli_measured_path(tmp_path: Path):
    from tests.test_predict import _rs as pred_rs

    d = tmp_path / "tables"
    d.mkdir()
    for s, doc in pred_rs().docs.items():
        (d / f"{s}.json").write_text(json.dumps(doc))
    m = tmp_path / "m.json"
    m.write_text(json.dumps(_measured()))
    out, fig = tmp_path / "out.json", tmp_path / "f.png"
    r = CliRunner().invoke(app, ["predict", "--validate", "--measured", str(m), "--data", str(d),
                                 "-o", str(out), "--figure", str(fig)])
    assert r.exit_code == 0, r.output
    assert "generated" in r.output and "taken branch" in r.output and "8.00 cycles from its issue" in r.output
    doc = json.loads(out.read_text())
    assert doc["analysis"]["calibration"]["branch_cycles"] == 8.0 and fig.stat().st_size > 0
    assert read_measured(out)["loops"]  # the output is itself a measured file
    gz = tmp_path / "out.json.gz"  # gzipped when its name says so, and read back the same
    r = CliRunner().invoke(app, ["predict", "--validate", "--measured", str(out), "--data", str(d), "-o", str(gz)])
    assert r.exit_code == 0, r.output
    assert gz.read_bytes()[:2] == b"\x1f\x8b" and read_measured(gz)["loops"] == doc["loops"]
    xz = tmp_path / "out.json.xz"  # xz for a .xz name (the shipped form), the same
    r = CliRunner().invoke(app, ["predict", "--validate", "--measured", str(gz), "--data", str(d), "-o", str(xz)])
    assert r.exit_code == 0, r.output
    assert xz.read_bytes()[:6] == b"\xfd7zXZ\x00" and read_measured(xz)["loops"] == doc["loops"]
    trunc = tmp_path / "trunc.json.xz"
    trunc.write_bytes(xz.read_bytes()[:40])
    r = CliRunner().invoke(app, ["predict", "--validate", "--measured", str(trunc), "--data", str(d)])
    assert r.exit_code == 2 and "not a readable compressed file" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = CliRunner().invoke(app, ["predict", "--validate", "--measured", str(bad), "--data", str(d)])
    assert r.exit_code == 2 and "not a predict --validate measurement file" in r.output
    r = CliRunner().invoke(app, ["predict"])
    assert r.exit_code == 2 and "--validate" in r.output


def test_target_lines_say_met_missed_and_what_the_model_lacks():
    from gpudissect.predict.validate import target_lines

    def st(mape):
        return {"model": {"mape": mape}}

    spec = {"targets": {"generated": 0.05, "real": 0.10},
            "lacks": {"generated @ full": "pipe contention", "real": "memory bandwidth"}}
    stats = {"generated": st(0.09), "generated @ 1": st(0.015), "generated @ full": st(0.17),
             "real": st(0.08), "real @ full": st(0.19)}
    lines = target_lines(stats, spec)
    assert lines[0] == "generated: 9.0% against a target of 5.0%: missed"
    assert lines[1] == "  generated @ full: 17.0%; the model lacks: pipe contention"  # @ 1 is within
    assert lines[2] == "real: 8.0% against a target of 10.0%: met"  # a met group lists no points
    assert len(lines) == 3
    stats["real"] = st(0.12)
    assert target_lines(stats, spec)[-1] == "  real @ full: 19.0%; the model lacks: memory bandwidth"
    assert target_lines({}, spec) == []  # no points: nothing to say


# --- predict INPUT prints the validation's model --------------------------------------------------

def test_predict_prints_what_the_validation_scores(tmp_path: Path):
    """``predict INPUT`` answers with the number the validation's model gives the same loop at
    the same warps, with the taken branch the validation derives from the measurements shipped
    beside the tables (its calibration loops: 8 cycles)."""
    import gzip

    from gpudissect.kernel.control import kernel_words
    from gpudissect.kernel.toolchain import ToolchainMissing, compile_ptx
    from gpudissect.predict.answer import body_controls, model_of
    from gpudissect.predict.loop_model import loop_model
    from gpudissect.predict.loops import select_loops
    from gpudissect.predict.source import read_input
    from gpudissect.predict.tables import load_tables
    from tests.test_predict import PTX

    body = "  fma.rn.f32 %f1, %f1, %f2, %f2;\n  ex2.approx.f32 %f3, %f3;\n  add.f32 %f4, %f4, %f3;"
    try:
        cubin = compile_ptx(PTX.format(body=body), "sm_90", 3).cubin
    except ToolchainMissing:
        pytest.skip("no ptxas")
    src = tmp_path / "k.cubin"
    src.write_bytes(cubin)
    d = tmp_path / "tables"
    d.mkdir()
    for s, doc in _rs().docs.items():
        (d / f"{s}.json").write_text(json.dumps(doc))
    prog = read_input(src, "sm_90")
    lp = select_loops(prog.kernels, prog.labels, "k")[0]
    words = {o: hi for o, _lo, hi in kernel_words(cubin)["k"]}
    points = [("1", 1, 1.0), ("8", 8, 1.0), ("16", 16, 1.0)]
    rec = {"name": "k", "category": "hash", "meta": {}, "ptx_hash": "k", "points":
           [{"point": p, "warps": w, "cycles_per_iter": c} for p, w, c in points],
           "loop": {"start": lp.start, "end": lp.end, "sass": [i.text for i in lp.body],
                    "control_hi": [f"{words[i.offset]:#018x}" for i in lp.body], "sass_hash": "k"}}
    measured = {**_measured(), "iters": ITERS}
    measured["loops"] = measured["loops"][:3] + [rec]  # the calibration loops and this one
    (d / "predict-validation.json.gz").write_bytes(gzip.compress(json.dumps(measured).encode()))
    tables = load_tables(d)
    res = analyse(measured, tables)
    assert res["calibration"]["branch_cycles"] == 8.0
    rows = {r["warps"]: r["model"] for r in res["rows"] if r["loop"] == "k"}
    assert len(rows) == 3 and len(set(rows.values())) == 3  # the warps make a difference
    ctl = body_controls(lp.body, prog.controls["k"])
    assert ctl is not None and any(c.write_barrier is not None for c in ctl)  # the MUFU's scoreboard
    for warps, model in rows.items():
        assert model_of(loop_model(lp.name, lp.body, tables, warps), ctl, tables, 8.0).cycles == model
        r = CliRunner().invoke(app, ["predict", str(src), "--data", str(d), "--warps", str(warps)])
        assert r.exit_code == 0, r.output
        assert "taken branch: 8 cycles from its issue" in r.output
        printed = re.search(r"cycles/iteration per warp: (>= )?(\S+)  \(model v1", r.output)
        assert printed is not None and printed.group(2) == f"{model:.4g}", r.output


def test_trace_names_what_held_issue(tables):
    """The trace of model v1's run (the timeline and the binding resource of ``predict INPUT``):
    a scoreboard wait names its producer, a read barrier is released when the pipe has taken
    its setter (``read_release``), a pipe shared by four warps binds."""
    from gpudissect.kernel.dataflow import dependence_graph
    from gpudissect.predict.bounds import predict
    from gpudissect.predict.sched import SLOT, binding, issue_trace, read_release
    from tests.test_predict import _loop, _sass

    lp = _loop(_sass("""
.L_x_0:
MUFU.EX2 R1, R2
FADD R3, R1, R3
FADD R4, R4, R5
@P0 BRA `(.L_x_0)
"""))
    p = predict(lp.name, lp.body, tables, warps=1)
    edges = dependence_graph(list(lp.body))
    ctl = [_ctl(1, wb=0), _ctl(1, waits=1), _ctl(1), _ctl(1)]
    trace = issue_trace(p.entries, edges, ctl, tables.schedulers, 1)
    # per trip of MUFU_LAT + 3 cycles: 4 issue, the rest waits for the MUFU's result
    what, shares = binding(trace)
    assert what == "scoreboard MUFU.EX2" and math.isclose(shares[what], (MUFU_LAT - 1) / (MUFU_LAT + 3))
    assert shares[SLOT] == pytest.approx(4 / (MUFU_LAT + 3))
    assert [s.cycle for s in trace[:5]] == [0, MUFU_LAT, MUFU_LAT + 1, MUFU_LAT + 2, MUFU_LAT + 3]
    # a read barrier: the FADD overwriting... waits until the MUFU pipe has taken the MUFU
    interval = tables.schedulers / p.entries[0].rate
    assert interval > 1
    rb = [Control(1, False, None, 1, 0, 0), _ctl(1, waits=0b10), _ctl(1), _ctl(1)]
    trace = issue_trace(p.entries, edges, rb, tables.schedulers, 1, trips=2)
    assert trace[1].cycle == read_release(0.0, interval) and trace[1].held == "scoreboard MUFU.EX2 (read)"
    # four warps: the MUFU pipe binds
    trace = issue_trace(p.entries, edges, [_ctl(1), _ctl(1), _ctl(1), _ctl(2)], tables.schedulers, 4)
    assert binding(trace)[0] == f"pipe {p.entries[0].unit}"
