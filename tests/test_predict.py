"""gpudissect predict (GPU-free): loop finder, dependence graph, model, baselines, bad input.

Every expected number is derived from the small synthetic tables below, never from the
committed measurements."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudissect.cli import app
from gpudissect.kernel.dataflow import dependence_graph
from gpudissect.kernel.sass import parse_sass
from gpudissect.predict import PredictError
from gpudissect.predict.bounds import predict
from gpudissect.predict.harness import ITERS
from gpudissect.predict.loops import innermost_loops, select_loops
from gpudissect.predict.sched import SLOT, binding, issue_trace, simulate_controls
from gpudissect.predict.source import from_sass_text, read_input
from gpudissect.predict.tables import tables_from
from gpudissect.report.read.results import ResultSet

FFMA_LAT, FFMA_RATE = 6.0, 2.0  # synthetic: deliberately not the H100's numbers
IADD_LAT, ISETP_LAT, LDG_LAT = 3.0, 5.0, 40.0


def _rec(variant: str, measure: str, value: float, sass: list[str]) -> dict:
    return {"variant": variant, "measure": measure, "value": value, "unit": "", "flags": [], "sass": sass}


def _records() -> dict[str, list[dict]]:
    return {
        "instructions": [
            _rec("fma.rn.f32", "latency", FFMA_LAT, ["FFMA"]),
            _rec("fma.rn.f32", "throughput_peak", FFMA_RATE, ["FFMA"]),
            _rec("add.u32", "latency", IADD_LAT, ["IADD3"]),
            _rec("setp.lt.s32", "latency", ISETP_LAT, ["ISETP.LT.AND"]),
            _rec("two.sass", "latency", 99.0, ["FFMA", "IADD3"]),  # not a single SASS: ignored
            {**_rec("bad", "latency", 77.0, ["FMUL"]), "flags": ["refused: no"]},  # untrusted
        ],
        "memory": [_rec("latency/ld.global.ca", "latency", LDG_LAT, ["LDG.E"])],
    }


def _rs() -> ResultSet:
    docs = {s: {"schema": "gpudissect.suite/1", "suite": s, "summary": {},
                "provenance": {"arch": "sm_90", "gpu_name": "Synthetic GPU"}, "records": r}
            for s, r in _records().items()}
    return ResultSet("syn", "synthetic", docs)


MEM = {"LDG": {"variant": "latency/ld.global.ca", "level": "L1 hit"}}


@pytest.fixture
def tables():
    return tables_from(_rs(), MEM)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "tables"
    d.mkdir()
    for s, doc in _rs().docs.items():
        (d / f"{s}.json").write_text(json.dumps(doc))
    return d


def _sass(body: str, name: str = "k") -> str:
    lines = [f".text.{name}:"]
    off = 0
    for ln in body.strip().splitlines():
        ln = ln.strip()
        if ln.endswith(":"):
            lines.append(ln)
            continue
        lines.append(f"        /*{off:04x}*/   {ln} ;")
        off += 16
    return "\n".join(lines)


CHAIN = _sass("""
MOV R0, RZ
.L_x_0:
FFMA R1, R1, R2, R3
@P0 BRA `(.L_x_0)
EXIT
""")
FOUR = _sass("""
.L_x_0:
FFMA R4, R4, R2, R3
FFMA R5, R5, R2, R3
FFMA R6, R6, R2, R3
FFMA R7, R7, R2, R3
@P0 BRA `(.L_x_0)
EXIT
""")


def _loop(text: str, i: int = 0):
    prog = from_sass_text(text)
    return select_loops(prog.kernels, prog.labels)[i]


def steady(p, tables) -> float:
    """Model v1's steady cycles per iteration of warp 0 without control codes (a SASS listing)."""
    return simulate_controls(p.entries, p.edges, None, tables.schedulers, p.warps_per_scheduler)


# --- the model on hand-made loops ------------------------------------------------------------

def test_dependent_chain_is_latency_bound(tables):
    lp = _loop(CHAIN)
    assert [i.opcode for i in lp.body] == ["FFMA", "BRA"]
    p = predict(lp.name, lp.body, tables, warps=4)
    assert p.bound == "recurrence"
    assert p.cycles_per_iter == FFMA_LAT  # one FFMA per iteration, carried: its latency
    assert p.bounds["issue"] == 2  # FFMA + BRA, one warp per scheduler, one issue/clk
    assert math.isclose(p.bounds["pipe fma"], 4 / FFMA_RATE)
    assert steady(p, tables) == FFMA_LAT


def test_independent_chains_are_issue_bound(tables):
    lp = _loop(FOUR)
    p = predict(lp.name, lp.body, tables, warps=16)  # 4 warps per scheduler
    assert p.warps_per_scheduler == 4
    assert p.bounds["recurrence"] == FFMA_LAT
    assert p.bounds["issue"] == 5 * 4
    assert math.isclose(p.bounds["pipe fma"], 4 * 4 * 4 / FFMA_RATE)  # 4 FFMA x 4 warps / (2/4 per sched)
    assert p.bound == "pipe fma" and p.cycles_per_iter == 32
    p4 = predict(lp.name, lp.body, tables, warps=4)
    assert p4.bound == "pipe fma" and p4.cycles_per_iter == 4 * 4 / FFMA_RATE
    assert steady(p4, tables) == p4.cycles_per_iter


def test_issue_bound_with_fast_pipe():
    rs = _rs()
    rs.docs["instructions"]["records"][1]["value"] = 4.0  # FFMA: one per clock per scheduler
    t = tables_from(rs, MEM)
    lp = _loop(FOUR)
    p = predict(lp.name, lp.body, t, warps=8)  # two warps per scheduler
    assert p.bounds["recurrence"] == FFMA_LAT and p.bounds["pipe fma"] == 4 * 2 * 4 / 4.0
    assert p.bound == "issue" and p.cycles_per_iter == 5 * 2  # 5 instructions x 2 warps
    assert steady(p, t) == 10
    # the binding resource: the issue slot, busy every cycle of the steady state; the fma pipe
    # takes 2 x 4 FFMAs of one cycle each in 10
    what, shares = binding(issue_trace(p.entries, p.edges, None, t.schedulers, 2))
    assert what == SLOT and shares == pytest.approx({SLOT: 1.0, "pipe fma": 0.8})


def test_binding_resource_of_a_chain_is_its_producer(tables):
    lp = _loop(CHAIN)
    p = predict(lp.name, lp.body, tables, warps=4)
    trace = issue_trace(p.entries, p.edges, None, tables.schedulers, 1)
    # per 6-cycle iteration: FFMA and BRA issue (2 cycles), 4 idle waiting for the FFMA's result
    what, shares = binding(trace)
    assert what == "dep FFMA" and math.isclose(shares[what], 4 / FFMA_LAT)
    assert math.isclose(shares[SLOT], 2 / FFMA_LAT)
    ffma = [s for s in trace if s.warp == 0 and s.index == 0]
    assert [s.cycle for s in ffma[:3]] == [0, FFMA_LAT, 2 * FFMA_LAT] and ffma[1].held == "dep FFMA"
    assert all(s.ready == s.cycle + FFMA_LAT for s in ffma)


def test_baselines_and_one_pass(tables):
    lp = _loop(FOUR)
    p = predict(lp.name, lp.body, tables, warps=4)
    assert p.sum_latency == 4 * FFMA_LAT + 1  # BRA: one issue cycle
    assert p.max_pipe_pressure == max(p.bounds["issue"], p.bounds["pipe fma"])
    assert p.one_pass == FFMA_LAT  # four independent FFMAs


def test_unknown_opcodes_are_listed(tables):
    lp = _loop(_sass("""
.L_x_0:
BMSK R1, R1, R5
POPC R6, R1
STG.E desc[UR4][R2.64], R1
@P0 BRA `(.L_x_0)
"""))
    p = predict(lp.name, lp.body, tables, warps=4)
    assert p.unknown["BMSK"] == ("latency", "throughput")  # no record, no pipe row
    assert p.unknown["POPC"] == ("latency",)  # its rate: the bitcount pipe limit
    assert p.unknown["STG.E"] == ("throughput",)  # writes no register: no latency needed
    assert p.lower_bound
    assert "BRA" not in p.unknown


def test_memory_latency_from_the_memory_suite(tables):
    e = tables.entry("LDG.E.64", True)
    assert e.latency == LDG_LAT and "ld.global.ca" in e.latency_source
    # FMUL's only record is flagged refused: not used; its pipe row's measured opcode stands in
    fmul = tables.entry("FMUL", True)
    assert fmul.latency == FFMA_LAT and fmul.latency_source.startswith("derived: via pipe fp32: FFMA")
    assert tables.entry("ISETP.GE.U32.AND", True).latency == ISETP_LAT  # via the base opcode
    assert "limit" in tables.entry("IMAD", True).rate_source  # not measured here: the pipe limit


# --- loop finder and dependence graph --------------------------------------------------------

def test_innermost_only_and_calls_refused():
    text = _sass("""
.L_x_0:
IADD3 R0, R0, 0x1, RZ
.L_x_1:
FFMA R1, R1, R2, R3
@P1 BRA `(.L_x_1)
@P0 BRA `(.L_x_0)
.L_x_2:
CALL.REL.NOINC `(f)
@P2 BRA `(.L_x_2)
""")
    prog = from_sass_text(text)
    loops = innermost_loops("k", prog.kernels["k"], prog.labels["k"])
    assert [(lp.start, lp.end) for lp in loops] == [(0x10, 0x20), (0x40, 0x50)]
    assert loops[0].refused is None
    assert "CALL" in loops[1].refused and "cannot predict" in loops[1].refused


def test_graph_pairs_predicates_and_carried_edges():
    body = parse_sass(_sass("""
IMAD.WIDE R2, R0, 0x4, R2
LDG.E R4, desc[UR4][R2.64]
ISETP.GE.AND P0, PT, R4, UR6, PT
@P0 IADD3 R0, R0, 0x1, RZ
@!P0 BRA `(.L)
"""))["k"].instrs
    edges = {(e.src, e.dst, e.reg, e.distance) for e in dependence_graph(body)}
    assert (0, 1, "R3", 0) in edges  # R2.64 reads R2 and R3
    assert (1, 2, "R4", 0) in edges
    assert (2, 3, "P0", 0) in edges and (2, 4, "P0", 0) in edges
    assert (3, 0, "R0", 1) in edges  # loop-carried
    assert (0, 0, "R2", 1) in edges  # IMAD.WIDE writes the pair R2, R3 and reads it next time
    assert (3, 3, "R0", 1) in edges  # predicated write: the value may come from itself


PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 n)
{{
  .reg .f32 %f<8>;
  .reg .u32 %r<4>;
  .reg .u64 %rd<2>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  mov.f32 %f1, 0f3F800000;
  mov.f32 %f2, 0f3F000000;
  mov.f32 %f3, 0f3F400000;
  mov.u32 %r2, 0;
LOOP:
{body}
  add.u32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, %r1;
  @%p1 bra.uni LOOP;
  add.f32 %f1, %f1, %f3;
  st.global.f32 [%rd1], %f1;
  ret;
}}
"""


def _chains(recs: list, edges) -> set[frozenset[int]]:
    """Groups of FFMAs joined by FFMA->FFMA edges (the independent chains)."""
    ff = {i for i, ins in enumerate(recs) if ins.opcode == "FFMA"}
    parent = {i: i for i in ff}

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for e in edges:
        if e.src in ff and e.dst in ff:
            parent[find(e.src)] = find(e.dst)
    groups: dict[int, set[int]] = {}
    for i in ff:
        groups.setdefault(find(i), set()).add(i)
    return {frozenset(g) for g in groups.values()}


@pytest.mark.parametrize("body,chains", [
    ("  fma.rn.f32 %f1, %f1, %f2, %f2;", 1),
    ("  fma.rn.f32 %f1, %f1, %f2, %f2;\n  fma.rn.f32 %f3, %f3, %f2, %f2;", 2),
])
def test_compiled_loop(tmp_path: Path, tables, body: str, chains: int):
    from gpudissect.kernel.toolchain import ToolchainMissing

    src = tmp_path / "k.ptx"
    src.write_text(PTX.format(body=body))
    try:
        prog = read_input(src, "sm_90")
    except ToolchainMissing:
        pytest.skip("no ptxas/nvdisasm")
    assert prog.arch == "sm_90" and prog.controls["k"]
    lp = select_loops(prog.kernels, prog.labels, "k")[0]
    edges = dependence_graph(list(lp.body))
    assert len(_chains(list(lp.body), edges)) == chains
    p = predict(lp.name, lp.body, tables, warps=4)
    per_chain = sum(i.opcode == "FFMA" for i in lp.body) // chains  # ptxas may unroll
    assert p.bounds["recurrence"] == per_chain * FFMA_LAT


# --- bad input through the CLI ---------------------------------------------------------------

def _cli(*args: str):
    return CliRunner().invoke(app, ["predict", *args])


def test_cli_sass_listing(tmp_path: Path, data_dir: Path):
    f = tmp_path / "k.sass"
    f.write_text(CHAIN)
    r = _cli(str(f), "--data", str(data_dir), "--timeline")
    assert r.exit_code == 0, r.output
    # model v1 over a region of ITERS trips: every trip FFMA_LAT cycles, the last one ends 2
    # cycles after its FFMA (the branch, then the redirect, counted 0: no validation data)
    region = ((ITERS - 1) * FFMA_LAT + 2) / ITERS
    assert f"cycles/iteration per warp: {region:.4g}  (model v1: 1 warp on one scheduler" in r.output
    assert "binding: the result of FFMA (dependence graph) (busy or waited on 67% of" in r.output
    assert f"v0, largest bound: {FFMA_LAT:g} (recurrence)" in r.output
    assert "taken branch: 0 cycles beyond its stall count (no predict-validation.json.xz or predict-validation.json.gz" in r.output
    assert "timeline of warp 0" in r.output and "dep FFMA" in r.output


def test_cli_bad_inputs(tmp_path: Path, data_dir: Path):
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    r = _cli(str(junk), "--data", str(data_dir))
    assert r.exit_code == 2 and "not a cubin, PTX file or SASS listing" in r.output
    r = _cli(str(tmp_path / "missing.sass"), "--data", str(data_dir))
    assert r.exit_code == 2 and "cannot read" in r.output
    other = tmp_path / "other.sass"
    other.write_text("\t.target\tsm_80\n" + CHAIN)
    r = _cli(str(other), "--data", str(data_dir))
    assert r.exit_code == 2 and "sm_80" in r.output and "sm_90" in r.output
    calls = tmp_path / "calls.sass"
    calls.write_text(_sass(".L_x_0:\nCALL.REL.NOINC `(f)\n@P0 BRA `(.L_x_0)"))
    r = _cli(str(calls), "--data", str(data_dir))
    assert r.exit_code == 1 and "cannot predict a loop with calls" in r.output
    r = _cli(str(other), "--data", str(data_dir), "--kernel", "nope")
    assert r.exit_code == 2


def test_select_errors():
    prog = from_sass_text(CHAIN)
    with pytest.raises(PredictError, match="no loop 3"):
        select_loops(prog.kernels, prog.labels, "k", 3)
    with pytest.raises(PredictError, match="no loop"):
        select_loops(*(lambda p: (p.kernels, p.labels))(from_sass_text(_sass("EXIT"))))
