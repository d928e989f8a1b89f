"""Control flow in the predictor's simulation (issue 32): BAR.SYNC holds each warp of a block
until the last one arrives and releases them the sync suite's measured cycles later; the guard
branch over a left-out slow path is taken, at the taken branch's cost (GPU-free, on the shipped
H200 tables; every expected figure is computed from them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudissect.kernel.sass import parse_sass
from gpudissect.predict.loop_model import block_group, block_warps, loop_model
from gpudissect.predict.sched import BARRIER, _run
from gpudissect.predict.tables import barrier_sweep

DATA = Path(__file__).resolve().parents[1] / "data" / "h200"

# a chain of work before the barrier (what the block writes to shared memory), a read after it
LOOP = """
.text.bar:
        /*0000*/                   MUFU.EX2 R4, R4 ;
        /*0010*/                   MUFU.EX2 R4, R4 ;
        /*0020*/                   STS [R2], R4 ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0040*/                   LDS R6, [R3] ;
        /*0050*/                   FADD R7, R6, R7 ;
        /*0060*/                   BRA 0x0 ;
"""


@pytest.fixture(scope="module")
def rs(h200_tables):
    return h200_tables[0]


@pytest.fixture(scope="module")
def tables(h200_tables):
    return h200_tables[1]


def test_the_barrier_cost_is_the_sync_suites_sweep(rs, tables):
    rec = next(r for r in rs.records("sync") if r["variant"] == "barrier:bar.sync")
    sweep = {int(v["block_warps"]): float(v["cycles"]) for v in rec["fit"]["sweep"].values()}
    assert tables.barrier == sweep and len(sweep) >= 2
    xs = sorted(sweep)
    for x in xs:
        assert tables.barrier_cycles(x) == sweep[x]
    a, b = xs[-2], xs[-1]  # between two measured sizes: the straight line between them
    mid = (a + b) // 2
    assert tables.barrier_cycles(mid) == pytest.approx(sweep[a] + (sweep[b] - sweep[a]) * (mid - a) / (b - a))
    assert tables.barrier_cycles(4 * b) == sweep[b]  # beyond: the nearest size's
    assert barrier_sweep(rs.records("sync"), "no such variant") == {}


def test_block_warps_and_their_share_of_one_scheduler():
    assert block_warps((256, 1, 1)) == 8 and block_warps((32, 4, 1)) == 4 and block_warps((48,)) == 2
    assert block_group(8, 4) == 2 and block_group(2, 4) == 1 and block_group(32, 4) == 8


def test_a_barrier_holds_the_block_until_its_last_warp_arrives(tables):
    body = next(iter(parse_sass(LOOP).values())).instrs
    warps = 8  # one block of 8 warps: two on the simulated scheduler
    lm = loop_model("bar", body, tables, warps, block_warps=8)
    assert lm.plan.barriers == {3} and lm.plan.block_group == 2
    assert lm.plan.barrier_cycles == tables.barrier_cycles(8)
    trace = []
    _run(*lm.run_args(None, tables), 6, 0.0, lm.plan, trace=trace)
    at = {(t.warp, t.iteration, t.index): t for t in trace}
    for it in range(6):
        last = max(at[(wp, it, 3)].cycle for wp in (0, 1))
        for wp in (0, 1):  # nobody reads before the last arrival plus the measured cost (less its arrivals)
            assert at[(wp, it, 4)].cycle >= last + lm.plan.barrier_cycles - 2
        assert any(at[(wp, it, 4)].held == BARRIER for wp in (0, 1))
    # without the barrier's measurement the model is as before: no wait at it
    plain = loop_model("bar", body, tables.__class__(**{**tables.__dict__, "barrier": {}}), warps, block_warps=8)
    assert not (plain.plan and plain.plan.barriers)
    assert plain.cycles(None, tables, 64, 0.0) < lm.cycles(None, tables, 64, 0.0)


def test_blocks_of_one_warp_wait_for_themselves_alone(tables):
    body = next(iter(parse_sass(LOOP).values())).instrs
    lm = loop_model("bar", body, tables, 8, block_warps=1)
    assert lm.plan.block_group == 1 and lm.plan.barrier_cycles == tables.barrier_cycles(1)
    trace = []
    _run(*lm.run_args(None, tables), 4, 0.0, lm.plan, trace=trace)
    at = {(t.warp, t.iteration, t.index): t for t in trace}
    for wp in (0, 1):
        for it in range(4):
            assert at[(wp, it, 4)].cycle >= at[(wp, it, 3)].cycle + lm.plan.barrier_cycles - 1


def test_predict_prints_the_barrier_it_modelled(tmp_path, tables):
    from typer.testing import CliRunner

    from gpudissect.cli import app

    src = tmp_path / "k.sass"
    src.write_text(LOOP)
    r = CliRunner().invoke(app, ["predict", str(src), "--data", str(DATA), "--block", "256", "--warps", "8"])
    assert r.exit_code == 0, r.output
    assert (f"1 block barrier: each holds the block's 8 warps until the last arrives; "
            f"{tables.barrier_cycles(8):.4g} cycles per barrier back to back") in r.output
    assert "block barrier" in next(x for x in r.output.splitlines() if "binding:" in x)


def test_the_guard_over_a_left_out_slow_path_is_a_taken_branch(tables):
    """Parboil's cp (IEEE 1/sqrtf: ptxas's guarded slow-path CALLs, left out of the body): each
    guard branch is taken on the common path, and the simulation charges it the redirect of the
    loop's taken branch (the calibrated cost), not its stall count."""
    from gpudissect.predict.loop_model import guards_taken
    from gpudissect.predict.validate import loop_body, read_measured

    doc = read_measured(DATA / "predict-validation.json.xz")
    rec = next(r for r in doc["corpus"] if r["name"] == "ispass2009_cp")
    body, controls = loop_body({"name": rec["symbol"], "loop": rec["loop"]})
    taken = guards_taken(body)
    assert taken and all(body[j].opcode == "BRA" and body[j].predicate for j in taken)
    assert all(body[j + 1].offset > body[j].offset + 16 for j in taken)  # the left-out range after it
    # the gaps after the guards are all the instructions left out
    assert sum((body[j + 1].offset - body[j].offset) // 16 - 1 for j in taken) == rec["loop"]["left_out"]
    branch = 3.0 * max(c.stall for c in controls)  # longer than any stall count: it must show
    lm = loop_model("cp", body, tables, 4)
    assert lm.plan.taken == taken
    trace = []
    _run(*lm.run_args(controls, tables), 3, branch, lm.plan, trace=trace)
    at = {(t.warp, t.iteration, t.index): t.cycle for t in trace}
    for j in taken:
        assert at[(0, 1, j + 1)] >= at[(0, 1, j)] + branch


def test_units_the_behaviour_suite_found_competing_are_one(rs, tables):
    """The behaviour suite's pipe pairs: MUFU and POPC compete (their pair's rate is one unit's),
    though the documented pipes keep them apart; the predictor then charges both to one unit."""
    from gpudissect.predict.bounds import pressures
    from gpudissect.predict.tables import competing_units

    summary = rs.docs["behaviour"]["summary"]
    groups = [g for g in summary["pipes"]["groups"] if len(g) > 1]
    solo = summary["pipes"]["solo"]
    merged = [g for g in groups if len({tables.limits.unit_of(solo[m]["sass_op"]) for m in g}) > 1]
    assert merged  # the H200's: ex2 with popc
    for g in merged:
        ops = [solo[m]["sass_op"] for m in g]
        units = {tables.entry(op).unit for op in ops}
        assert len(units) == 1 and "+" in next(iter(units))
    mufu, popc = tables.entry("MUFU.EX2"), tables.entry("POPC")
    assert mufu.unit == popc.unit
    p = pressures([mufu, popc], tables, 8)
    assert p[f"pipe {mufu.unit}"] == pytest.approx(8 * tables.schedulers * (1 / mufu.rate + 1 / popc.rate))
    assert competing_units({}, tables.limits) == {}


def test_overlapping_competing_groups_join_nothing(tables):
    """FFMA competing with LOP3 and with IMAD, which only partly compete with each other (the
    shipped H100 set's verdicts), is no one unit: only the clean group (MUFU with POPC) joins."""
    from gpudissect.predict.tables import competing_units

    solo = {"f": {"sass_op": "FFMA"}, "l": {"sass_op": "LOP3"}, "i": {"sass_op": "IMAD"},
            "m": {"sass_op": "MUFU"}, "p": {"sass_op": "POPC"}}
    got = competing_units({"pipes": {"solo": solo, "groups": [["f", "l"], ["f", "i"], ["m", "p"], ["f"]]}},
                          tables.limits)
    mufu, popc = tables.limits.unit_of("MUFU"), tables.limits.unit_of("POPC")
    assert set(got) == {mufu, popc} and got[mufu] == got[popc]


@pytest.mark.parametrize("warps", [1, 4, 8, 16, 32])
def test_back_to_back_barriers_run_at_the_measured_period(tables, warps):
    """The sync suite's figure is a loop of back-to-back bar.sync: the simulation of such a loop
    (one block of ``warps``) runs at that period, within a cycle."""
    bars = "".join(f"        /*{16 * k:04x}*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;\n" for k in range(16))
    body = next(iter(parse_sass(f".text.b:\n{bars}        /*0100*/                   BRA 0x0 ;\n").values())).instrs
    lm = loop_model("b", body, tables, warps, block_warps=warps)
    trace = []
    _run(*lm.run_args(None, tables), 2, 0.0, lm.plan, trace=trace)
    t0 = [t.cycle for t in trace if t.warp == 0 and t.iteration == 1 and t.index < 16]
    period = (t0[-1] - t0[0]) / (len(t0) - 1)
    assert period == pytest.approx(tables.barrier_cycles(warps), abs=1.0)


def test_predict_says_when_the_warps_are_fewer_than_the_block(tmp_path, tables):
    from typer.testing import CliRunner

    from gpudissect.cli import app

    src = tmp_path / "k.sass"
    src.write_text(LOOP)
    r = CliRunner().invoke(app, ["predict", str(src), "--data", str(DATA), "--block", "1024", "--warps", "4"])
    assert r.exit_code == 0, r.output
    assert "holds the block's 4 warps until the last arrives (--warps 4 is fewer than the block's 32" in r.output
    assert f"{tables.barrier_cycles(4):.4g} cycles per barrier" in r.output
