"""The measured memory hierarchy in the predictor (issue 32), GPU-free on the shipped H200 tables:
every expected figure is computed here from the tables' own values, none is typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudissect.kernel.sass import parse_sass
from gpudissect.predict import PredictError
from gpudissect.predict.bounds import predict
from gpudissect.predict.memory import (
    Hierarchy,
    bytes_moved,
    hierarchy_from,
    memory_plan,
    merged_plan,
)
from gpudissect.predict.sched import region_cycles
from gpudissect.predict.tables import tables_from
from gpudissect.report.read.results import load_result_set

DATA = Path(__file__).resolve().parents[1] / "data" / "h200"

SAXPY = """
.text.saxpy:
        /*0000*/                   LDG.E.CONSTANT R2, desc[UR6][R2.64] ;
        /*0010*/                   LDG.E R11, desc[UR6][R4.64] ;
        /*0020*/                   IADD3 R0, R0, UR4, RZ ;
        /*0030*/                   FFMA R11, R2, UR5, R11 ;
        /*0040*/                   STG.E desc[UR6][R4.64], R11 ;
        /*0050*/                   ISETP.GE.AND P0, PT, R0, UR8, PT ;
        /*0060*/               @!P0 BRA 0x0 ;
"""

SHARED = """
.text.sh:
        /*0000*/                   LDS R4, [R4+UR5] ;
        /*0010*/                   FADD R6, R6, R4 ;
        /*0020*/                   IADD3 R4, R4, 0x4, RZ ;
        /*0030*/                   BRA 0x0 ;
"""

WIDTHS = """
.text.w:
        /*0000*/                   LDG.E.128 R4, desc[UR6][R6.64] ;
        /*0010*/                   LDG.E.U8 R8, desc[UR6][R2.64] ;
        /*0020*/                   LDG.E.64 R10, desc[UR6][R2.64] ;
        /*0030*/                   LDG.E R12, desc[UR6][UR8.64] ;
        /*0040*/                   LDSM.16.M88.4 R16, [R3+UR4] ;
        /*0050*/                   STS.128 [R3], R4 ;
        /*0060*/                   LDC R1, c[0x0][0x28] ;
        /*0070*/                   LDC R2, c[0x3][R4] ;
"""


def body(text: str):
    return next(iter(parse_sass(text).values())).instrs


@pytest.fixture(scope="module")
def rs():
    return load_result_set(DATA)


@pytest.fixture(scope="module")
def tables(rs):
    return tables_from(rs)


@pytest.fixture(scope="module")
def hier(rs) -> Hierarchy:
    return hierarchy_from(rs)


def record(rs, variant: str, measure: str) -> dict:
    return next(r for r in rs.records("memory") if r["variant"] == variant and r["measure"] == measure)


def test_hierarchy_reads_the_measured_levels(rs, hier):
    """Each level's figures are the records predict.toml names, in their units; the staircase's
    capacities; the chip's bandwidth converted at the clock it was measured at."""
    dram = record(rs, "bandwidth/DRAM/read", "bandwidth")
    bw = hier.levels["DRAM"].read
    assert bw.scope == "chip" and bw.gb_s == dram["value"]
    assert bw.chip_bytes_per_clock == pytest.approx(dram["value"] * 1e9 / (dram["params"]["sm_mhz_kernel"] * 1e6))
    # the measurement's own per-SM figure agrees with the chip's rate shared by the SMs it ran on
    assert bw.share(hier.sms) == pytest.approx(dram["params"]["bytes_per_cycle_per_sm"], rel=0.01)
    l1 = record(rs, "bandwidth/L1/read", "bandwidth")
    assert hier.levels["L1"].read.share(1) == l1["params"]["bytes_per_cycle_per_sm"]
    summary = rs.docs["memory"]["summary"]
    assert hier.levels["L1"].capacity == summary["sizes"]["L1"]["bytes"]
    assert hier.levels["L2"].capacity == summary["sizes"]["L2"]["bytes"]
    assert hier.levels["DRAM"].latency == summary["l2"]["dram_cycles"]
    assert hier.levels["shared"].latency == record(rs, "latency/ld.shared", "latency")["value"]


def test_missing_levels_are_reported_not_invented(rs, hier):
    """What the tables lack is named; a level whose records are absent has no figure."""
    assert any(m.startswith("constant bandwidth") for m in hier.missing)
    assert any(m.startswith("L1 write bandwidth") for m in hier.missing)
    spec = {"L1": {"latency": "latency/nope", "read": "bandwidth/nope", "bandwidth_per": "sm",
                   "capacity": "sizes.nope.bytes"}}
    h = hierarchy_from(rs, spec)
    lv = h.levels["L1"]
    assert lv.latency is None and lv.read is None and lv.capacity is None
    assert {m.split(":")[0] for m in h.missing} >= {"L1 latency", "L1 read bandwidth", "L1 capacity"}


def test_footprint_beyond_a_missing_capacity_gives_no_level(rs, tables):
    h = hierarchy_from(rs, {"L1": {"latency": "latency/ld.global.ca"}})
    plan = memory_plan(body(SAXPY), tables, h, 32, 132, footprint=1e9)
    assert any("L2 capacity not measured" in m for m in plan.missing)  # a footprint places in L2 or DRAM
    assert all(a.level is None for a in plan.accesses.values() if a.space == "global")
    assert not plan.latency and not plan.unit_interval


def test_bytes_per_warp_instruction():
    b = body(WIDTHS)
    assert [bytes_moved(i) for i in b] == [16 * 32, 1 * 32, 8 * 32, 32, 4 * 128, 16 * 32, 32, 4 * 32]


def test_footprint_picks_the_level_from_the_measured_capacities(tables, hier):
    sms = hier.sms
    l1_all = hier.levels["L1"].capacity * sms
    l2 = hier.levels["L2"].capacity
    b = body(SAXPY)
    lv = {fp: memory_plan(b, tables, hier, 32, sms, footprint=fp).accesses[1].level
          for fp in (1024, l1_all, l2, l2 + 1)}
    # within the L1s together is no L1 hit (no reuse is seen): only --level l1 says so
    assert lv == {1024: "L2", l1_all: "L2", l2: "L2", l2 + 1: "DRAM"}
    assert memory_plan(b, tables, hier, 32, sms, level="l1").accesses[1].level == "L1"
    # a store writes through the L1: its level is the L2 at least
    assert memory_plan(b, tables, hier, 32, sms, level="l1").accesses[4].level == "L2"
    with pytest.raises(PredictError):
        memory_plan(b, tables, hier, 32, sms, level="l3")


def test_l2_and_dram_latencies_are_the_tables(tables, hier):
    b = body(SAXPY)
    l2 = memory_plan(b, tables, hier, 32, hier.sms, level="l2")
    dram = memory_plan(b, tables, hier, 32, hier.sms, level="dram")
    assert l2.latency[1] == hier.levels["L2"].latency
    assert dram.latency[1] == hier.levels["DRAM"].latency
    assert dram.latency[1] > l2.latency[1] > tables.entry("LDG.E").latency
    assert {1} <= dram.asynchronous and 4 not in dram.asynchronous  # a store waits at issue


def test_saxpy_at_dram_is_bound_by_the_measured_dram_rate(tables, hier):
    """Three 128-byte warp-accesses per iteration (two reads, one write) at DRAM: the bound and
    the simulation give the rate the measured DRAM read and write bandwidths allow."""
    b = body(SAXPY)
    warps, sms = 64, hier.sms
    plan = memory_plan(b, tables, hier, warps, sms, level="dram")
    p = predict("saxpy", b, tables, warps, memory=plan)
    dram = hier.levels["DRAM"]
    per_sm_cycles = warps * (2 * 128 / dram.read.share(sms) + 128 / dram.write.share(sms))
    assert p.bound == "bandwidth DRAM"
    assert p.cycles_per_iter == pytest.approx(per_sm_cycles)
    # the chip's bytes per second at that rate is the measured DRAM bandwidth, not above it
    bytes_s = 3 * 128 * warps * sms / p.cycles_per_iter * dram.read.sm_mhz * 1e6
    assert dram.write.gb_s * 1e9 <= bytes_s <= dram.read.gb_s * 1e9
    sim = region_cycles(p.entries, p.edges, None, tables.schedulers, p.warps_per_scheduler, 256, 0.0,
                        merged_plan(None, plan))
    assert sim >= 0.99 * p.cycles_per_iter
    assert sim <= 1.25 * p.cycles_per_iter  # the queue, not the latency, binds with 64 warps


def test_shared_loads_unchanged(tables, hier):
    """A shared load keeps the tables' latency and waits at issue; its 32-bit bandwidth interval
    is the LDS pipe's (the measured shared bandwidth and the LDS rate agree: the rate is the
    memory suite's own 32-bit configuration, predict.toml [shared_rates], not a wmma fragment's)."""
    b = body(SHARED)
    plan = memory_plan(b, tables, hier, 32, hier.sms, level="dram")
    e = tables.entry("LDS")
    assert plan.accesses[0].level == "shared"
    assert plan.latency[0] == e.latency
    assert not plan.asynchronous
    assert plan.unit_interval[0] == pytest.approx(tables.schedulers / e.rate, rel=0.01)
    assert e.rate_source.startswith("median of 1: memory bwconfig/shared/read 32-bit")
    share = hier.levels["shared"].read.share(hier.sms)
    assert tables.schedulers / e.rate == pytest.approx(32 * 4 * tables.schedulers / share, rel=0.02)
    plain = predict("sh", b, tables, 32)
    with_mem = predict("sh", b, tables, 32, memory=plan)
    assert with_mem.cycles_per_iter == pytest.approx(plain.cycles_per_iter, rel=0.01)


def test_the_fragment_rates_were_there_to_drop(rs):
    """The tensor suite's wmma fragment loads do compile to a plain LDS (the rate the tables used
    to give it): the rule above removes something real."""
    from gpudissect.predict.tables import WRAPPER

    assert any(r["variant"].startswith(WRAPPER) and r.get("measure") == "throughput_peak"
               and [x.split()[0] for x in (r.get("sass") or []) if x.split()[0].split(".")[0] == "LDS"]
               for r in rs.records("tensor"))


def test_merged_plan_keeps_the_tensor_plan(tables, hier):
    from gpudissect.predict.tensor_model import TensorPlan

    tp = TensorPlan(latency={9: 30.0}, unit_interval={9: 8.0}, asynchronous={9})
    plan = memory_plan(body(SAXPY), tables, hier, 32, hier.sms, level="dram")
    m = merged_plan(tp, plan)
    assert m.latency[9] == 30.0 and m.latency[1] == plan.latency[1]
    assert m.unit_name[1] == "memory DRAM" and 9 not in m.unit_name
    assert tp.latency == {9: 30.0}  # not changed in place
    assert merged_plan(tp, None) is tp


def test_hierarchy_without_a_stored_summary_analyses_the_records(rs, hier):
    """A result set whose memory document has no summary: the staircase is analysed from its
    records (the memory suite's own analysis) and gives the same capacities."""
    from gpudissect.report.read.results import ResultSet

    bare = ResultSet("bare", "bare", {s: ({**d, "summary": {}} if s == "memory" else d) for s, d in rs.docs.items()})
    h = hierarchy_from(bare)
    assert h.levels["L1"].capacity == hier.levels["L1"].capacity
    assert h.levels["DRAM"].latency == hier.levels["DRAM"].latency


def test_shared_rates_are_each_opcodes_best_configuration():
    from gpudissect.predict.tables import shared_rates

    def rec(bits, bpc, sass, flags=()):
        return {"variant": "bw/x", "measure": "bandwidth", "value": 1.0, "flags": list(flags), "sass": [sass],
                "params": {"bits": bits, "bytes_per_cycle_per_sm": bpc, "ilp": 1, "warps": 4}}

    got = shared_rates([rec(32, 64.0, "LDS"), rec(32, 120.0, "LDS"), rec(128, 100.0, "LDS.128"),
                        rec(32, 500.0, "LDS", flags=["noisy"]), rec(64, 90.0, "LDS.64")], ["bw/x"])
    assert got["LDS"][0] == pytest.approx(120.0 / 128)  # the best clean one, per 32 lanes x 4 bytes
    assert got["LDS.128"][0] == pytest.approx(100.0 / 512)
    assert got["LDS.64"][0] == pytest.approx(90.0 / 256)
    assert shared_rates([rec(32, 120.0, "LDS")], ["other"]) == {}
