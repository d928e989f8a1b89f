"""The predictor's SASS analysis on real nvcc -O3 sm_90 code (issue 32), GPU-free.

Every case reads a cubin of corpus/hecbench/ (public HeCBench kernels, built by nvcc 13.0 with
corpus/build_corpus.py on a developer's machine: fetched code and what is built from it are never
committed, corpus/README.md; a clean clone skips these, and tests/test_predict_corpus_records.py
checks the same rules on the real loops the committed validation recorded). Expected facts are derived from the SASS itself
(the operands, the branch targets) or from the tables the test reads, never typed from a
measurement; each test also checks that the pattern it guards is present, so that it can fail.
"""

from __future__ import annotations

import re
import statistics
import tomllib
from functools import cache
from pathlib import Path

import pytest

from gpudissect.kernel.dataflow import dependence_graph, reads, writes
from gpudissect.kernel.sass import SassInstr, branch_target
from gpudissect.predict.bounds import pressures
from gpudissect.predict.loops import Loop, innermost_loops
from gpudissect.predict.source import Program, read_input
from gpudissect.predict.tables import load_tables, tables_from
from gpudissect.report.read.results import ResultSet

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "hecbench"
H200 = Path(__file__).resolve().parents[1] / "data" / "h200"


@cache
def _program(name: str) -> Program:
    from gpudissect.kernel.toolchain import ToolchainMissing

    cubin = CORPUS / f"{name}.sm_90.cubin"
    if not cubin.is_file():
        pytest.skip(f"no {cubin.name}: the corpus is built locally (corpus/README.md)")
    try:
        return read_input(cubin, "sm_90")
    except ToolchainMissing:
        pytest.skip("no nvdisasm")


def _loops(name: str) -> list[Loop]:
    prog = _program(name)
    (kernel,) = prog.kernels
    return innermost_loops(kernel, prog.kernels[kernel], prog.labels.get(kernel, {}))


def _kernels() -> list[dict]:
    return tomllib.loads((CORPUS / "kernels.toml").read_text())["kernel"]


def _next_reg(reg: str) -> str:
    m = re.fullmatch(r"(U?R)(\d+)", reg)
    assert m, reg
    return f"{m.group(1)}{int(m.group(2)) + 1}"


# --- 1. IMAD.WIDE's factors are 32-bit ---------------------------------------------------------

def test_imad_wide_reads_no_pair_of_its_factors():
    body = list(_loops("hecbench_softmax2")[2].body)  # the division loop: IMAD.WIDE addressing
    edges = dependence_graph(body)
    checked = 0
    for j, ins in enumerate(body):
        if ins.opcode != "IMAD" or "WIDE" not in ins.modifiers:
            continue
        factor, addend = ins.operands[1], ins.operands[3]
        ghost = _next_reg(factor)
        assert ghost not in reads(ins) and {addend, _next_reg(addend)} <= reads(ins)
        assert not [e for e in edges if e.dst == j and e.reg == ghost]
        checked += any(ghost in writes(i) for i in body)  # the loop writes it: a false edge was possible
    assert checked >= 2


# --- 2. a writer under the reader's guard ends the search --------------------------------------

def _guarded_reads(body: list[SassInstr]):
    """(reader index, register, same-guard writer index, other writer index) where the search
    from the reader meets a writer under its own guard before another writer of the register."""
    n = len(body)
    for j, ins in enumerate(body):
        if not ins.predicate:
            continue
        for reg in reads(ins):
            order = [(i, 0) for i in range(j - 1, -1, -1)] + [(i, 1) for i in range(n - 1, j - 1, -1)]
            hits = [(i, d) for i, d in order if reg in writes(body[i])]
            if len(hits) > 1 and body[hits[0][0]].predicate == ins.predicate:
                between = [i for i, _ in order[:order.index(hits[0])]]
                if not any(set(re.findall(r"P\d+", ins.predicate)) & writes(body[i]) for i in between):
                    yield j, reg, hits[0], hits[1:]


def test_same_guard_writer_ends_the_dependence_search():
    found = 0
    for lp in _loops("hecbench_mv_dense"):  # `if (matrix[..] != 0) temp += ...`: @P LDG, @P FFMA
        body = list(lp.body)
        edges = dependence_graph(body)
        for j, reg, (i, dist), others in _guarded_reads(body):
            into = {(e.src, e.distance) for e in edges if e.dst == j and e.reg == reg}
            assert into == {(i, dist)}, (lp.name, body[j].text, reg)
            found += 1
            assert others  # an older writer the old rule would also have linked
    assert found >= 2


def test_no_carried_edge_past_a_same_guard_load():
    lp = _loops("hecbench_mv_dense")[0]  # unrolled by 4: @P5 LDG R15 ... @P5 FFMA R0, R23, R15, R0
    body = list(lp.body)
    edges = dependence_graph(body)
    guarded = 0
    for j, ins in enumerate(body):
        if ins.opcode != "FFMA" or not ins.predicate:
            continue
        loaded = {r for i in range(j) if body[i].opcode == "LDG" and body[i].predicate == ins.predicate
                  for r in writes(body[i])}
        into = [e for e in edges if e.dst == j and e.reg in loaded]
        assert into and all(e.distance == 0 and body[e.src].opcode == "LDG" for e in into), ins.text
        guarded += any(r in writes(i) for r in loaded for i in body[j + 1:])  # a later writer exists
    assert guarded >= 1


# --- 3. the warp-collective fallback is no loop -------------------------------------------------

def test_collective_fallback_jump_is_not_a_loop():
    prog = _program("hecbench_welford")
    (kernel,) = prog.kernels
    instrs, labels = prog.kernels[kernel], prog.labels.get(kernel, {})
    assert any(i.full == "WARPSYNC.COLLECTIVE" for i in instrs)
    # the backward jumps whose range holds an unconditional EXIT: present in the SASS ...
    jumps = [(t, i.offset) for i in instrs if (t := branch_target(i, labels)) is not None and t < i.offset
             and any(x.opcode == "EXIT" and not x.predicate for x in instrs if t <= x.offset <= i.offset)]
    assert jumps
    # ... but not loops: the one innermost loop is the element loop
    loops = innermost_loops(kernel, instrs, labels)
    assert len(loops) == 1
    assert not any((lp.start, lp.end) in jumps for lp in loops)
    assert not any(i.opcode == "EXIT" and not i.predicate for lp in loops for i in lp.body)


# --- 4. the slow-path CALL of an fp32 division --------------------------------------------------

@pytest.mark.parametrize("name, index, calls", [
    ("hecbench_softmax2", 2, 1), ("hecbench_welford", 0, 1), ("hecbench_softmax", 5, 4)])
def test_division_loop_predicts_its_common_path(name: str, index: int, calls: int):
    prog = _program(name)
    (kernel,) = prog.kernels
    labels = prog.labels.get(kernel, {})
    lp = _loops(name)[index]
    assert lp.refused is None and lp.common_path
    assert sum(i.opcode == "CALL" for i in lp.left_out) == calls
    assert not any(i.opcode == "CALL" for i in lp.body)
    # what is left out is exactly what the predicated branches over the CALLs skip
    full = [i for i in prog.kernels[kernel] if lp.start <= i.offset <= lp.end]
    skipped = set()
    for b in full:
        t = branch_target(b, labels)
        if b.predicate and t is not None and b.offset < t and any(
                c.opcode == "CALL" and b.offset < c.offset < t for c in full):
            skipped |= {i.offset for i in full if b.offset < i.offset < t}
    assert {i.offset for i in lp.left_out} == skipped
    assert len(lp.body) + len(lp.left_out) == len(full)


# --- 5. one unit per opcode, not per form --------------------------------------------------------

def _rate_rs(rates: dict[str, float]) -> ResultSet:
    recs = [{"variant": f"v{k}", "measure": "throughput_peak", "value": v, "unit": "", "flags": [],
             "sass": [op]} for k, (op, v) in enumerate(rates.items())]
    doc = {"schema": "gpudissect.suite/1", "suite": "instructions", "summary": {},
           "provenance": {"arch": "sm_90", "gpu_name": "Synthetic"}, "records": recs}
    return ResultSet("syn", "synthetic", {"instructions": doc})


def test_load_forms_add_up_on_one_unit():
    lp = _loops("hecbench_mv_csr")[1]  # LDG.E.64 (column index) and LDG.E (value, x) forms
    forms = sorted({i.full for i in lp.body if i.opcode == "LDG"})
    assert len(forms) >= 2
    rates = {f: 0.25 * (k + 1) for k, f in enumerate(forms)}  # synthetic, one per form
    t = tables_from(_rate_rs(rates), {})
    entries = [t.entry(i.full, bool(i.n_dests())) for i in lp.body]
    p = pressures(entries, t, 1)
    want = sum(t.schedulers / rates[i.full] for i in lp.body if i.opcode == "LDG")
    assert not [k for k in p if k.startswith("pipe LDG")]
    assert p["pipe lsu"] == pytest.approx(want)


def test_shared_memory_forms_share_the_lsu_unit():
    t = load_tables(H200)
    units = {op: t.entry(op).unit for op in ("LDS", "LDS.128", "LDS.64", "LDS.U8", "STS.128", "SHFL.BFLY")}
    assert set(units.values()) == {"lsu"}, units


# --- 6. latencies derived from the pipe row ------------------------------------------------------

def test_missing_latencies_come_from_the_pipe_row():
    t = load_tables(H200)
    ops = {i.full for name in ("hecbench_softmax", "hecbench_mv_csr", "hecbench_softmax2")
           for lp in _loops(name) for i in lp.body}
    derived = [op for op in ops if t.entry(op).latency_source.startswith("derived")]
    assert any(op.startswith("LEA") for op in derived)  # the address arithmetic of the loops
    for op in derived:
        pipe = t.limits.pipe_of(op)
        per_base: dict[str, list[float]] = {}
        for key, vals in t.latency.items():
            if t.limits.pipe_of(key) is pipe:
                per_base.setdefault(key.split(".")[0], []).extend(v for v, _ in vals)
        assert op not in t.latency and t.entry(op).latency == pytest.approx(
            statistics.median(statistics.median(v) for v in per_base.values()))
        assert f"via pipe {pipe.name}:" in t.entry(op).latency_source
    assert "latency" in t.entry("MOV").missing  # no pipe row: left missing, never a stall count


# --- 7. counter steps and remainder loops -------------------------------------------------------

def test_counter_step_and_remainder_roles():
    soft = _loops("hecbench_softmax")
    assert [lp.counter_step for lp in soft[:3]] == [-16, -4, -1]
    assert [lp.role for lp in soft[:3]] == ["main", "remainder", "remainder"]
    csr = _loops("hecbench_mv_csr")
    assert [(lp.counter_step, lp.role) for lp in csr] == [(1, "remainder"), (16, "main")]
    assert _loops("hecbench_softmax2")[2].role is None  # its neighbour is another source loop


def test_corpus_descriptions_match_the_sass():
    """kernels.toml's measured loop is predictable, and its unroll is the counter step over the
    source stride where the step is a constant."""
    stride = {"hecbench_softmax": 1, "hecbench_softmax2": 32, "hecbench_mv_csr": 1}
    kernels = _kernels()
    assert len(kernels) >= 5
    for k in kernels:
        lp = _loops(k["name"])[k["loop"]]
        assert lp.refused is None, lp.refused
        assert k["symbol"] in lp.kernel
        if k["name"] in stride:
            assert abs(lp.counter_step) // stride[k["name"]] == k["unroll"]
