"""How a warp's lanes spread a loop's accesses (issue 32): address forms from the kernel's SASS,
the lines one warp-instruction touches, and the L1's line-at-a-time charge in the memory plan
(GPU-free, on the shipped H200 tables; every expected figure is computed from them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudissect.kernel.sass import parse_sass
from gpudissect.predict.lanes import (
    Form,
    Lanes,
    Walk,
    address_forms,
    broadcasts_of,
    lines_of,
    lines_per_access,
    misses_of,
    walks_of,
)
from gpudissect.predict.memory import hierarchy_from, memory_plan, width
from gpudissect.predict.tables import tables_from
from gpudissect.report.read.results import load_result_set

DATA = Path(__file__).resolve().parents[1] / "data" / "h200"

# a row per thread (llm.c layernorm's mean, cut down): the row stride is a kernel parameter, a
# second stream shared by the warp (a block-wide vector), a third coalesced, a fourth opaque
KERNEL = """
.text.rows:
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   S2R R3, SR_CTAID.X ;
        /*0020*/                   IMAD R0, R3, c[0x0][0x0], R0 ;
        /*0030*/                   HFMA2.MMA R7, -RZ, RZ, 0, 2.384185791015625e-07 ;
        /*0040*/                   IMAD R5, R0, c[0x0][0x218], RZ ;
        /*0050*/                   IMAD.WIDE R8, R5, 0x4, R10 ;
        /*0060*/                   IMAD.WIDE R12, R3, 0x4, R14 ;
        /*0070*/                   IMAD.WIDE R16, R0, R7, R18 ;
        /*0080*/                   IMAD.HI.U32 R20, R0, 0x55555556, RZ ;
        /*0090*/                   IMAD.WIDE R22, R20, 0x4, R24 ;
        /*00a0*/                   LDG.E R26, desc[UR4][R8.64] ;
        /*00b0*/                   LDG.E R27, desc[UR4][R12.64] ;
        /*00c0*/                   LDG.E R28, desc[UR4][R16.64] ;
        /*00d0*/                   LDG.E R29, desc[UR4][R22.64] ;
        /*00e0*/                   FADD R30, R26, R27 ;
        /*00f0*/                   IADD3 R8, P0, R8, 0x4, RZ ;
        /*0100*/                   BRA 0xa0 ;
"""


@pytest.fixture(scope="module")
def instrs():
    return next(iter(parse_sass(KERNEL).values())).instrs


@pytest.fixture(scope="module")
def forms(instrs):
    return address_forms(instrs, 0xA0, [i for i in instrs if i.offset >= 0xA0])


def test_address_forms_follow_the_thread_index(forms):
    assert forms[0xA0] == Form((("x", None),))  # tid times a run-time row length
    assert forms[0xB0].uniform  # the block's index only: every lane the same address
    assert forms[0xC0] == Form((("x", 4),))  # tid x 4, the 4 put in a register by an HFMA2.MMA
    assert forms[0xD0].opaque  # through a division (IMAD.HI): not followed


def test_lines_per_warp_instruction(forms):
    assert lines_per_access(forms[0xA0], (256, 1, 1), 4, 128) == 32  # a row per lane
    assert lines_per_access(forms[0xB0], (256, 1, 1), 4, 128) == 1  # broadcast
    assert lines_per_access(forms[0xC0], (256, 1, 1), 4, 128) == 1  # coalesced
    assert lines_per_access(Form((("x", 16),)), (256, 1, 1), 16, 128) == 4  # 16 bytes per lane
    assert lines_per_access(forms[0xD0], (256, 1, 1), 4, 128) is None
    # a 16 x 16 block: a warp is two rows of 16 lanes; a run-time stride in y: two lines
    assert lines_per_access(Form((("x", 4), ("y", None))), (16, 16, 1), 4, 128) == 2
    assert Lanes.from_json(Lanes(forms).to_json()).forms == forms


def test_a_row_per_lane_takes_the_l1_a_line_at_a_time(instrs, forms):
    rs = load_result_set(DATA)
    tables, hier = tables_from(rs), hierarchy_from(rs)
    body = [i for i in instrs if i.offset >= 0xA0]
    lines = lines_of(Lanes(forms), body, (256, 1, 1), hier.line, width)
    assert lines == {0xA0: 32, 0xB0: 1, 0xC0: 1}
    plain = memory_plan(body, tables, hier, 8, hier.sms, level="dram")
    plan = memory_plan(body, tables, hier, 8, hier.sms, level="dram", lines=lines)
    l1 = hier.levels["L1"].read.share(hier.sms)
    assert plan.unit[0] == "L1 lines" and 0 not in plan.asynchronous
    assert plan.unit_interval[0] == pytest.approx(32 * hier.line * tables.schedulers / l1)
    for j in (1, 2, 3):  # one line or unknown: as without the lanes
        assert plan.unit[j] == plain.unit[j] and plan.unit_interval[j] == plain.unit_interval[j]
    assert plan.bandwidth_interval == plain.bandwidth_interval  # the DRAM's bytes are the same


def test_a_row_per_lane_finds_its_next_elements_in_the_l1(instrs, forms):
    rs = load_result_set(DATA)
    tables, hier = tables_from(rs), hierarchy_from(rs)
    body = [i for i in instrs if i.offset >= 0xA0]
    fill = hier.fills["L1"]  # what one miss brings in: the memory suite's fill granularity
    misses = misses_of(lines_of(Lanes(forms), body, (256, 1, 1), hier.line, width), body, fill, width)
    assert misses == {0xA0: 4 / fill}  # one access in fill / width reaches the level
    plan = memory_plan(body, tables, hier, 8, hier.sms, level="dram", misses=misses)
    l1, dram = hier.levels["L1"].latency, hier.levels["DRAM"].latency
    assert plan.latency[0] == pytest.approx(l1 + (dram - l1) * 4 / fill)
    assert plan.latency[1] == dram and plan.miss == {0: 4 / fill}


def test_the_fills_are_the_memory_suites():
    """The bytes a miss brings in, per level, are the memory suite's measured fill granularity
    (not the L1's line: a miss fills a sector of it)."""
    rs = load_result_set(DATA)
    hier = hierarchy_from(rs)
    from gpudissect.predict.memory import FILL_SUMMARY, FILLED, _dig, _memory_summary

    summary = _memory_summary(rs, [r for r in rs.records("memory") if r.get("value") is not None])
    assert set(hier.fills) == set(FILLED)
    for level in FILLED:
        assert hier.fills[level] == int(_dig(summary, FILL_SUMMARY.format(level)))


def test_a_broadcast_reaches_its_level_an_element_at_a_time(instrs, forms):
    """Every lane reads one address (a block-wide vector): one element of each access reaches the
    level, and its next elements are in what its miss brought in, as for a row per lane."""
    rs = load_result_set(DATA)
    tables, hier = tables_from(rs), hierarchy_from(rs)
    body = [i for i in instrs if i.offset >= 0xA0]
    one = broadcasts_of(Lanes(forms), body, (256, 1, 1))
    assert one == {0xB0}  # the row per lane, the coalesced and the opaque access are none
    # a 32 x 8 block: a form of the y index alone is one address for the 32 lanes of a warp
    assert broadcasts_of(Lanes({0xB0: Form((("y", 4),))}), body, (32, 8, 1)) == {0xB0}
    assert broadcasts_of(Lanes({0xB0: Form((("y", 4),))}), body, (16, 16, 1)) == frozenset()
    fill = hier.fills["L1"]
    lines = lines_of(Lanes(forms), body, (256, 1, 1), hier.line, width)
    misses = misses_of(lines, body, fill, width, one)
    assert misses == {0xA0: 4 / fill, 0xB0: 4 / fill}
    plain = memory_plan(body, tables, hier, 8, hier.sms, level="dram", lines=lines)
    plan = memory_plan(body, tables, hier, 8, hier.sms, level="dram", lines=lines, misses=misses, broadcasts=one)
    assert plain.accesses[1].bytes == 4 * 32 and plan.accesses[1].bytes == 4
    assert plan.bandwidth_interval[1] == pytest.approx(plain.bandwidth_interval[1] / 32)
    assert 1 not in plan.lines  # one line a warp-instruction: no L1 line-at-a-time charge
    assert plan.accesses[2].bytes == plain.accesses[2].bytes  # the coalesced access is as it was


def test_walks_follow_the_address_register(instrs):
    body = [i for i in instrs if i.offset >= 0xA0]
    got = walks_of(body, {0xA0, 0xB0, 0xC0, 0xD0})
    assert got[0xA0] == Walk("R8", 0, 4)  # IADD3 R8, P0, R8, 0x4
    assert got[0xB0] == Walk("R12", 0, 0)  # not written in the loop: the same address each trip
    assert walks_of(body, {0xA0}) == {0xA0: got[0xA0]}  # only the loads asked for
    twice = next(iter(parse_sass(KERNEL.replace("BRA 0xa0", "IADD3 R8, R8, 0x8, RZ ;\n        /*0110*/ BRA 0xa0")).values())).instrs
    assert 0xA0 not in walks_of([i for i in twice if i.offset >= 0xA0], {0xA0})  # two writers: unknown


def test_walks_of_a_real_loop_go_through_the_copy_of_its_pointer():
    """PolyBench's atax kernel 1 (nvcc, unrolled by 16): each pointer is moved in a temporary
    (``IADD3 R16, P2, R10, 0x40``) and copied back after a load reused the temporary
    (``MOV R10, R16``); the loads' offsets are the unrolled iterations'."""
    from gpudissect.predict.validate import loop_body, read_measured

    doc = read_measured(DATA / "predict-validation.json.xz")
    rec = next(r for r in doc["corpus"] if r["name"] == "polybench_atax_kernel1")
    body, _ = loop_body({"name": rec["symbol"], "loop": rec["loop"]})
    loads = [i for i in body if i.opcode == "LDG"]
    got = walks_of(body, {i.offset for i in loads})
    assert {(w.base, w.step) for w in got.values()} == {("R10", 0x40), ("R8", 0x40)}
    assert sorted(w.offset for w in got.values() if w.base == "R8") == [4 * k for k in range(16)]


def test_the_corpus_loops_carry_their_lanes():
    """The stored records of real kernels: llm.c's layernorm mean reads a row per lane, its
    matmul_forward1 a row per lane beside a weight row the warp shares (its block is 32 x 8)."""
    from gpudissect.predict.validate import loop_body, read_measured

    doc = read_measured(DATA / "predict-validation.json.xz")
    line = hierarchy_from(load_result_set(DATA)).line

    def lines(name: str, block) -> list[int]:
        rec = next(r for r in doc["corpus"] if r["name"] == name)
        body, _ = loop_body({"name": rec["symbol"], "loop": rec["loop"]})
        got = lines_of(Lanes.from_json(rec["loop"]["lanes"]), body, block, line, width)
        return sorted(got.values())

    assert lines("llm_c_layernorm_mean", (32, 1, 1)) == [32] * 16
    assert lines("llm_c_matmul_forward1", (32, 8, 1)) == [1] * 16 + [32] * 16
    # coalesced and broadcast: its 32 loads and the 16 stores of its unrolled y[i] update
    assert lines("polybench_atax_kernel2", (128, 1, 1)) == [1] * (32 + 16)


def test_predict_refuses_a_bad_block(tmp_path):
    from typer.testing import CliRunner

    from gpudissect.cli import app

    r = CliRunner().invoke(app, ["predict", str(tmp_path / "k.cubin"), "--block", "32,0"])
    assert r.exit_code == 2 and "--block 32,0: expected X[,Y[,Z]]" in r.output


def test_the_l1_lines_are_a_bound_and_a_rate_cap(instrs, forms):
    """v0's bounds and advise's cap read the same limit: the SM's L1 rate over the lines."""
    from gpudissect.predict.memory import L1_LINES, bandwidth_pressures, rate_cap

    rs = load_result_set(DATA)
    tables, hier = tables_from(rs), hierarchy_from(rs)
    body = [i for i in instrs if i.offset >= 0xA0]
    lines = lines_of(Lanes(forms), body, (256, 1, 1), hier.line, width)
    plan = memory_plan(body, tables, hier, 16, hier.sms, level="dram", lines=lines)
    l1 = hier.levels["L1"].read.share(hier.sms)
    assert plan.level_intervals()[L1_LINES] == pytest.approx(32 * hier.line * tables.schedulers / l1)
    assert bandwidth_pressures(plan, 4)[f"bandwidth {L1_LINES}"] == pytest.approx(4 * 32 * hier.line * 4 / l1)
    cap, level = rate_cap(plan, tables.schedulers)
    assert level == L1_LINES and cap == pytest.approx(l1 / (32 * hier.line))  # iterations per clock per SM


def test_a_store_and_an_offset_address_get_the_form_of_their_register():
    """A store's address is its first operand (its data follows it), an address may carry an
    offset; a shared-memory access is no global one (no form)."""
    text = """
.text.st:
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   IMAD.WIDE R2, R0, 0x8, R4 ;
        /*0020*/                   STG.E.64 desc[UR4][R2.64+0x10], R6 ;
        /*0030*/                   LDG.E R8, desc[UR4][R2.64-0x8] ;
        /*0040*/                   LDS R9, [R2+0x4] ;
        /*0050*/                   BRA 0x20 ;
"""
    ins = next(iter(parse_sass(text).values())).instrs
    got = address_forms(ins, 0x20, [i for i in ins if i.offset >= 0x20])
    assert got == {0x20: Form((("x", 8),)), 0x30: Form((("x", 8),))}


WALK = """
.text.walk:
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   IMAD R5, R0, c[0x0][0x218], RZ ;
        /*0020*/                   IMAD.WIDE R8, R5, 0x4, R10 ;
        /*0030*/                   LDG.E R26, desc[UR4][R8.64] ;
        /*0040*/                   LDG.E R27, desc[UR4][R8.64+0x4] ;
        /*0050*/                   FADD R30, R26, R30 ;
        /*0060*/                   FADD R31, R27, R31 ;
        /*0070*/                   IADD3 R8, P0, R8, 0x8, RZ ;
        /*0080*/                   BRA 0x30 ;
"""


def test_a_walking_load_misses_where_its_sector_is_new():
    """A row per lane, 8 bytes a trip in two loads: the simulation pays the DRAM's latency on the
    trips that enter a new L2 fill, the L2's where only the L1 sector is new, the L1's on the
    others; the second load of a trip that opened a sector waits for that sector's fill."""
    from gpudissect.predict.loop_model import loop_model
    from gpudissect.predict.memory import Where
    from gpudissect.predict.sched import _run

    rs = load_result_set(DATA)
    tables, hier = tables_from(rs), hierarchy_from(rs)
    ins = next(iter(parse_sass(WALK).values())).instrs
    body = [i for i in ins if i.offset >= 0x30]
    where = Where(hier, hier.sms, level="dram").with_lanes(Lanes(address_forms(ins, 0x30, body)), body, (32, 1, 1))
    assert where.walks == {0x30: Walk("R8", 0, 8), 0x40: Walk("R8", 4, 8)}
    lm = loop_model("walk", body, tables, 1, where)
    trace = []
    _run(*lm.run_args(None, tables), 40, 0.0, lm.plan, trace=trace)
    issue = {(t.iteration, t.index): t.cycle for t in trace}
    lat = {n: hier.levels[n].latency for n in ("L1", "L2", "DRAM")}
    f1, f2 = hier.fills["L1"], hier.fills["L2"]
    for t in range(40):
        addr = 8 * t
        first = addr % f1 == 0  # this trip's first load opens an L1 sector
        want = lat["DRAM"] if addr % f2 == 0 else lat["L2"] if first else lat["L1"]
        # the first FADD waits for the first load (issued at its cycle, synchronous: L1 lines)
        assert issue[(t, 2)] >= issue[(t, 0)] + want - 1e-9
        if first:  # the second load's data is in the same sector: it waits for the same fill
            assert issue[(t, 3)] >= issue[(t, 0)] + want - 1e-9
        else:
            assert issue[(t, 2)] <= issue[(t, 0)] + lat["L1"] + 8


def test_a_broadcast_needs_an_address_the_code_computed():
    """A register the code before the loop never wrote (a listing without its prologue) is taken
    as shared by the lanes in a form, but it is no evidence of a broadcast: only an address
    computed from what the lanes do share (a parameter from the constant bank) is one."""
    from gpudissect.predict.lanes import unseen_addresses

    text = """
.text.b:
        /*0000*/                   S2R R3, SR_CTAID.X ;
        /*0010*/                   LDC.64 R14, c[0x0][0x210] ;
        /*0020*/                   IMAD.WIDE R12, R3, 0x4, R14 ;
        /*0030*/                   IMAD.WIDE R8, R3, 0x4, R10 ;
        /*0040*/                   LDG.E R26, desc[UR4][R12.64] ;
        /*0050*/                   LDG.E R27, desc[UR4][R8.64] ;
        /*0060*/                   FADD R30, R26, R27 ;
        /*0070*/                   BRA 0x40 ;
"""
    ins = next(iter(parse_sass(text).values())).instrs
    body = [i for i in ins if i.offset >= 0x40]
    forms = address_forms(ins, 0x40, body)
    assert forms[0x40].uniform and forms[0x50].uniform  # both shared by the lanes as forms
    unseen = unseen_addresses(ins, 0x40, body)
    assert unseen == {0x50}  # R10 was never written
    assert broadcasts_of(Lanes(forms, unseen), body, (256, 1, 1)) == {0x40}
    assert broadcasts_of(Lanes(forms), body, (256, 1, 1)) == {0x40, 0x50}


def test_a_memory_consumer_of_a_walking_load_waits_for_its_sector_not_its_level():
    """A copy loop (the loaded value stored): the store waits for the load's result as the
    simulation found it trip by trip (an L1 hit on most trips), not for the level's latency."""
    from gpudissect.predict.loop_model import loop_model
    from gpudissect.predict.memory import Where
    from gpudissect.predict.sched import _run

    rs = load_result_set(DATA)
    tables, hier = tables_from(rs), hierarchy_from(rs)
    text = WALK.replace("LDG.E R27, desc[UR4][R8.64+0x4] ;", "STG.E desc[UR4][R12.64], R26 ;")
    ins = next(iter(parse_sass(text).values())).instrs
    body = [i for i in ins if i.offset >= 0x30]
    where = Where(hier, hier.sms, level="dram").with_lanes(Lanes(address_forms(ins, 0x30, body)), body, (32, 1, 1))
    lm = loop_model("copy", body, tables, 1, where)
    trace = []
    _run(*lm.run_args(None, tables), 24, 0.0, lm.plan, trace=trace)
    issue = {(t.iteration, t.index): t.cycle for t in trace}
    gaps = [issue[(t, 1)] - issue[(t, 0)] for t in range(24)]
    dram = hier.levels["DRAM"].latency
    assert max(gaps) >= dram - 1e-9  # the trips that open a sector wait for the DRAM
    assert sum(g < dram / 2 for g in gaps) >= 18  # the others do not


def test_the_warps_of_a_block_share_a_broadcasts_sectors():
    """Every warp of the block reads the same address: the fill one warp started serves the
    others (they wait for it, they do not start their own)."""
    from gpudissect.predict.loop_model import loop_model
    from gpudissect.predict.memory import Where
    from gpudissect.predict.sched import _run

    rs = load_result_set(DATA)
    tables, hier = tables_from(rs), hierarchy_from(rs)
    text = """
.text.bc:
        /*0000*/                   S2R R3, SR_CTAID.X ;
        /*0010*/                   LDC.64 R14, c[0x0][0x210] ;
        /*0020*/                   IMAD.WIDE R12, R3, 0x4, R14 ;
        /*0030*/                   LDG.E R26, desc[UR4][R12.64] ;
        /*0040*/                   FADD R30, R26, R30 ;
        /*0050*/                   IADD3 R12, P0, R12, 0x4, RZ ;
        /*0060*/                   BRA 0x30 ;
"""
    ins = next(iter(parse_sass(text).values())).instrs
    body = [i for i in ins if i.offset >= 0x30]
    where = Where(hier, hier.sms, level="dram").with_lanes(Lanes(address_forms(ins, 0x30, body)), body, (256, 1, 1))
    lm = loop_model("bc", body, tables, 8, where, block_warps=8)
    assert lm.plan.walk_shared == {0} and lm.plan.block_group == 2
    trace = []
    _run(*lm.run_args(None, tables), 16, 0.0, lm.plan, trace=trace)
    fadd = {(t.warp, t.iteration): t.cycle for t in trace if t.index == 1}
    load = {(t.warp, t.iteration): t.cycle for t in trace if t.index == 0}
    dram = hier.levels["DRAM"].latency
    # the later warp's first load finds the fill in flight: it is ready when the earlier one's is
    first, second = sorted((0, 1), key=lambda wp: load[(wp, 0)])
    assert fadd[(second, 0)] - load[(second, 0)] < dram
    assert abs(fadd[(second, 0)] - fadd[(first, 0)]) <= 8  # a few issue slots apart


def test_a_load_after_its_pointers_update_is_one_step_on():
    text = """
.text.w2:
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   IMAD.WIDE R8, R0, 0x4, R10 ;
        /*0020*/                   LDG.E R26, desc[UR4][R8.64] ;
        /*0030*/                   IADD3 R8, P0, R8, 0x8, RZ ;
        /*0040*/                   LDG.E R27, desc[UR4][R8.64+-0x4] ;
        /*0050*/                   BRA 0x20 ;
"""
    ins = next(iter(parse_sass(text).values())).instrs
    body = [i for i in ins if i.offset >= 0x20]
    got = walks_of(body, {0x20, 0x40})
    # the second load reads the element after the first one's: 4 bytes on, not 4 bytes back
    assert got == {0x20: Walk("R8", 0, 8), 0x40: Walk("R8", 4, 8)}
