"""The stall sweep below ptxas (studies/stall_patch.py): on real ptxas kernels of fma.rn.f32, run on
a stand-in GPU whose chain computes the right values only while the patched stall is at least a
planted pipeline latency; the sweep finds it, never stores a wrong result as a latency, and
declines a chain whose value does not move."""

from __future__ import annotations

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.catalog.model import load_catalog
from gpudissect.device.device import FakeDevice, LaunchResult
from gpudissect.kernel.control import kernel_controls
from gpudissect.suites.instructions.core import Plan, VariantWork, compile_work, timing_families
from gpudissect.suites.instructions.studies import stall_patch as sp
from gpudissect.suites.instructions.verify import autoverify_many

PLAN = Plan(latency_units=(16, 32, 48), tp_chains=(1,), tp_units=(32, 64), tp_warps=(4,), distances=(),
            reps=3, launches=1, tp_min_length=0)


@pytest.fixture(scope="module")
def work() -> VariantWork:
    sm90 = make_target("sm_90")
    v = load_catalog().get("fma.rn.f32")
    (rec,) = autoverify_many([v], sm90, jobs=1)
    w = VariantWork(v, rec, timing_families(v, rec, sm90, PLAN, 0, ()))
    compile_work([w], sm90, jobs=1)
    return w


class ChainGPU(FakeDevice):
    """The chain's sink is right while the smallest stall on its instructions is >= ``latency``,
    and moves with the chain's length unless ``fixed_point``; a region takes max(stall, latency)
    cycles per instance."""

    def __init__(self, chain_offsets: dict[str, list[int]], latency: int, fixed_point: bool = False):
        super().__init__(model=lambda *a: 0.0)
        self.offsets, self.latency, self.fixed_point = chain_offsets, latency, fixed_point
        self.period = 0  # the chain's values repeat with this period (0: never)
        self.moving: set[str] = set()  # kernels whose chain moves although fixed_point
        self.floor = 0  # the hardware holds an instance at least this many cycles whatever the stall
        self.moves_under = None  # or a test of the inputs under which the chain moves although fixed_point
        self.fails: tuple[int, Exception] | None = None  # (stall, error): raised below that stall

    def run(self, cubin, kernel, inputs, n_sink, reps, grid, block, launches=1):
        ctl = dict(kernel_controls(cubin)[kernel])
        offs = self.offsets[kernel]
        s = min(ctl[o].stall for o in offs[:-1])
        if self.fails is not None and s < self.fails[0]:
            raise self.fails[1]
        n = len(offs)
        fixed = self.fixed_point and kernel not in self.moving and not (self.moves_under and self.moves_under(inputs))
        step = 0 if fixed else n % self.period if self.period else n
        value = (hash((tuple(inputs), step)) & 0xFFFF_FFFF) + (s < self.latency)
        times = np.zeros((1, 2 * reps + 1), np.uint64)
        for r in range(reps):
            times[0, 2 * r], times[0, 2 * r + 1] = 1000 * (r + 1), 1000 * (r + 1) + n * max(s, self.latency, self.floor) + 40
        return [LaunchResult(times, np.full(32 * n_sink, value, np.uint64), 1e-5) for _ in range(launches)]


def _offsets(w: VariantWork, own=None) -> dict[str, list[int]]:
    bs = own if own is not None else sp.latency_family(w).built
    return {b.kernel.name: [i.offset for i, _c in sp.chain_instructions(b, "FFMA")] for b in bs}


def _all_offsets(w: VariantWork, kernels: dict) -> dict[str, list[int]]:
    """The chain offsets of the study's own kernels and of every edge strategy's."""
    offs = _offsets(w, kernels["own"])
    for strat in sp.EDGE_STRATEGIES:
        offs.update(_offsets(w, kernels[strat]))
    return offs


def test_own_kernels_one_instance_apart_are_built_and_swept(work):
    kernels = sp.prepare_kernels([work], make_target("sm_90"), PLAN, 1)["fma.rn.f32"]
    own = kernels["own"]
    assert [b.kernel.length for b in own] == list(sp.OWN_LENGTHS)
    for strat in sp.EDGE_STRATEGIES:
        assert [b.kernel.length for b in kernels[strat]] == list(sp.EDGE_LENGTHS)
    r = sp.sweep_variant(ChainGPU(_offsets(work, own), latency=3), work, PLAN, own)
    assert r.value == 3.0 and r.params["kernels"] == "own" and r.params["lengths"] == list(sp.OWN_LENGTHS)
    # a chain of period two (the same value at even lengths) still moves between 64 and 65
    even = ChainGPU(_offsets(work, own), latency=3)
    even.period = 2
    assert sp.sweep_variant(even, work, PLAN, own).value == 3.0
    assert sp.sweep_variant(even, work, PLAN).value is None  # the family's lengths are all even


def test_the_sweep_finds_a_planted_pipeline_latency_below_ptxas(work):
    assert sp.single_sass(work) == "FFMA"
    r = sp.sweep_variant(ChainGPU(_offsets(work), latency=3), work, PLAN)
    p = r.params
    assert p["ptxas_stall"] == 4  # ptxas's FFMA chain stall (tests/test_control.py)
    assert r.value == 3.0 and p["first_wrong_stall"] == 2 and not r.flags
    assert [d["stall"] for d in p["sweep"]] == [4, 3, 2, 1]  # two wrong in a row end it
    assert [d["correct"] for d in p["sweep"]] == [True, True, False, False]
    assert p["sweep"][0]["cycles_per_instance"] == pytest.approx(4.0) and p["sweep"][1]["cycles_per_instance"] == pytest.approx(3.0)
    assert "FFMA" in r.sass[0] and "[S04" in r.sass[0]


def test_correct_down_to_stall_1_is_flagged_and_a_fixed_point_gets_no_value(work):
    r = sp.sweep_variant(ChainGPU(_offsets(work), latency=1), work, PLAN)
    assert r.value == 1.0 and r.flags[0].startswith("correct-at-stall-1")
    r = sp.sweep_variant(ChainGPU(_offsets(work), latency=3, fixed_point=True), work, PLAN)
    assert r.value is None and "does not change" in r.flags[0]


def test_a_consumer_the_hardware_holds_back_is_flagged_and_never_called_a_one_cycle_latency(work):
    dev = ChainGPU(_offsets(work), latency=2)
    dev.floor = 5  # ptxas's stall is 4: at every stall the instance takes 5
    r = sp.sweep_variant(dev, work, PLAN)
    assert r.value == 2.0 and r.params["held_cycles"] == pytest.approx(5.0) and r.flags[0].startswith("held: at stall 2")
    dev = ChainGPU(_offsets(work), latency=1)
    dev.floor = 3  # right down to stall 1, but never faster than 3 cycles: no value, the bound said
    r = sp.sweep_variant(dev, work, PLAN)
    assert r.value is None and r.flags[0].startswith("not determined") and "at most that" in r.flags[0]
    assert r.params["held_cycles"] == pytest.approx(3.0)


def test_the_latency_is_the_smallest_stall_with_every_larger_one_right():
    sw = [{"stall": 6, "correct": True}, {"stall": 5, "correct": True}, {"stall": 4, "correct": False},
          {"stall": 3, "correct": True}]
    assert sp.hw_latency(sw) == 5  # a right answer below a wrong one does not count
    assert sp.hw_latency([{"stall": 4, "correct": False}]) is None
    assert sp.hw_latency([{"stall": 2, "error": "x"}]) is None


def test_conclusions_count_and_compare_with_ptxas():
    recs = [{"measure": "latency_hw", "value": 3.0, "params": {"ptxas_stall": 4}},
            {"measure": "latency_hw", "value": 4.0, "params": {"ptxas_stall": 4}},
            {"measure": "latency_hw", "value": None, "params": {"ptxas_stall": None, "scoreboard": [0]}}]
    (line,) = sp.conclusions(recs)
    assert "2 of 3" in line and "1 are below ptxas's stall (by 1 to 1 cycles" in line and "1 wait on a scoreboard" in line


def test_the_audit_accepts_only_a_verified_sweep():
    from gpudissect.audit import check_hw_latency

    sweep = [{"stall": 4, "correct": True}, {"stall": 3, "correct": True}, {"stall": 2, "correct": False}]
    ok = {"variant": "fma.rn.f32", "measure": "latency_hw", "value": 3.0, "params": {"ptxas_stall": 4, "sweep": sweep}}
    assert check_hw_latency([ok]) == []
    assert check_hw_latency([{**ok, "value": 2.0}])[0].startswith("[hw-latency]")  # 2 was wrong
    late = {**ok, "params": {"ptxas_stall": 6, "sweep": sweep}}
    assert "did not start at ptxas's stall" in check_hw_latency([late])[0]
    assert check_hw_latency([{**ok, "value": None}]) == []  # no latency claimed


def test_the_timing_reference_shows_ptxas_the_slope_and_the_true_latency_side_by_side():
    from gpudissect.suites.instructions.view import _hw_lines

    rec = {"variant": "fma.rn.f32", "measure": "latency_hw", "value": 3.0, "flags": [],
           "params": {"opcode": "FFMA", "ptxas_stall": 4, "latency_o3": 4.0,
                      "sweep": [{"stall": 4, "correct": True, "cycles_per_instance": 4.0},
                                {"stall": 3, "correct": True, "cycles_per_instance": 3.0},
                                {"stall": 2, "correct": False, "cycles_per_instance": 2.0}]}}
    lines = _hw_lines([rec])
    assert "| `fma.rn.f32` | FFMA | 4 | 4 | 3 | - | 4:4 3:3 2:2x |  |" in lines
    rec["params"]["held_cycles"] = 9.0
    assert "| `fma.rn.f32` | FFMA | 4 | 4 | 3 | 9 | 4:4 3:3 2:2x |  |" in _hw_lines([rec])
    assert _hw_lines([]) == []


def test_a_fixed_point_chain_is_swept_again_on_the_edge_to_its_companion(work):
    kernels = sp.prepare_kernels([work], make_target("sm_90"), PLAN, 1)["fma.rn.f32"]
    edge = kernels["companion-add-imm"]  # the second edge strategy: the first's chain stays put too
    dev = ChainGPU(_all_offsets(work, kernels), latency=3)
    dev.moving = {b.kernel.name for b in edge}  # only the ADD companion's chain moves
    dev.fixed_point = True
    r = sp.sweep_variant(dev, work, PLAN, kernels)
    assert r.value == 3.0 and "companion-add-imm" in r.params["kernels"] and r.params["consumer"]
    assert r.params["lengths"] == list(sp.EDGE_LENGTHS)


def test_a_chain_fixed_under_its_own_inputs_is_swept_under_seeded_random_ones_that_move_it(work):
    own = sp.prepare_kernels([work], make_target("sm_90"), PLAN, 1)["fma.rn.f32"]["own"]
    sets = sp.input_sets(list(own[0].kernel.inputs))
    assert sets == sp.input_sets(list(own[0].kernel.inputs))  # repeatable
    assert len({tuple(x) for _n, x in sets}) == len(sets) == 2 + sp.MORE_INPUT_SETS
    movers = {tuple(x) for _n, x in sets[5:7]}
    dev = ChainGPU(_offsets(work, own), latency=3, fixed_point=True)
    dev.moves_under = lambda inputs: tuple(inputs) in movers
    r = sp.sweep_variant(dev, work, PLAN, own)
    assert r.value == 3.0 and r.params["input_sets"] == [sets[5][0], sets[6][0]]
    assert r.params["input_sets_tried"] == 7
    dev.moves_under = lambda inputs: False  # nothing moves it: no value, and how many sets were tried
    r = sp.sweep_variant(dev, work, PLAN, own)
    assert r.value is None and f"under any of {len(sets)} input sets" in r.flags[0]


def test_a_variant_whose_core_kernels_failed_is_skipped_and_patched_cubins_are_dropped(work):
    from dataclasses import replace

    from gpudissect.store.db import Result

    dev = ChainGPU(_offsets(work), latency=3)
    r = sp.sweep_variant(dev, work, PLAN)
    assert dev.forgotten == sum(len(r.params["lengths"]) for _d in r.params["sweep"])  # every patched cubin
    hung = Result("fma.rn.f32", "latency", None, "cycles", "none",
                  flags=["error: WorkerFailed: hung: no answer after 1 s (run v0_l1_n48); worker killed"])
    failed = replace(work, results=[[hung]])
    (rec,), _ = sp.STUDY.measure_variant(dev, failed, None, PLAN, None)
    assert rec.value is None and rec.flags[0].startswith("skipped: a kernel of the variant failed the device worker")


def test_a_device_fault_ends_the_sweep_and_is_recorded(work):
    dev = ChainGPU(_offsets(work), latency=1)
    dev.fails = (3, RuntimeError("CUDA error CUDA_ERROR_ILLEGAL_INSTRUCTION"))
    r = sp.sweep_variant(dev, work, PLAN)
    sw = r.params["sweep"]
    assert [d["stall"] for d in sw] == [4, 3, 2] and "ILLEGAL_INSTRUCTION" in sw[-1]["error"]
    assert r.value == 3.0 and any(f.startswith("error: at stall 2") for f in r.flags)
    assert not any(f.startswith("correct-at-stall-1") for f in r.flags)


def test_a_worker_failure_in_the_sweep_is_recorded_not_raised(work):
    """A patched kernel that kills the worker (a fault, a hang) ends that sweep; the variant's
    other results and the suite go on (the worker device restarts on its next call)."""
    from gpudissect.device.worker import WorkerFailed

    dev = ChainGPU(_offsets(work), latency=1)
    dev.fails = (4, WorkerFailed("faulted: CUDA_ERROR_ILLEGAL_INSTRUCTION (run x); worker killed"))
    r = sp.sweep_variant(dev, work, PLAN)
    assert [d["stall"] for d in r.params["sweep"]] == [4, 3] and "WorkerFailed" in r.params["sweep"][-1]["error"]
    assert r.value == 4.0 and any("WorkerFailed" in f for f in r.flags)


def _hw_store(path):
    from gpudissect.store.db import Result, Store

    st = Store(path)
    rid = st.start_run("instructions", FakeDevice().info, "ptxas x", "sm_90", {}, {}, "0")
    sweep = [{"stall": 4, "correct": True, "cycles_per_instance": 4.0},
             {"stall": 3, "correct": True, "cycles_per_instance": 3.0},
             {"stall": 2, "correct": False, "cycles_per_instance": 2.0},
             {"stall": 1, "error": "RuntimeError: CUDA_ERROR_ILLEGAL_INSTRUCTION"}]
    st.save(rid, "fma.rn.f32", [
        Result("fma.rn.f32", "latency", 4.02, "cycles", "slope", sass=["FFMA"]),
        Result("fma.rn.f32", sp.MEASURE, 3.0, "cycles", sp.METHOD, sass=["FFMA R1, R1, R2, R3  [S04 ...]"],
               params={"opcode": "FFMA", "ptxas_stall": 4, "latency_o3": 4.02, "sweep": sweep},
               flags=["error: at stall 1: RuntimeError: CUDA_ERROR_ILLEGAL_INSTRUCTION"])])
    st.finish_run(rid, {}, {})
    return st


def test_show_lists_the_true_latency_with_its_unit_label_and_sweep(tmp_path):
    from typer.testing import CliRunner

    from gpudissect.cli import app

    _hw_store(tmp_path / "hw.db").close()
    res = CliRunner().invoke(app, ["show", "fma.rn.f32", "--db", str(tmp_path / "hw.db")], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    rows = {r[0]: r[1:] for r in ([c.strip() for c in line.split("│")[1:-1]] for line in res.output.splitlines()
                                  if line.startswith("│"))}
    assert rows["latency_hw"][:2] == ["3", "cycles"]
    assert "latency_hw: true latency below ptxas" in res.output
    assert "FFMA: ptxas stall 4, -O3 slope 4.02, sweep 4:4 3:3 2:2x 1:-!" in res.output


def test_the_gpu_check_script_prints_each_true_latency_with_its_sweep(tmp_path, capsys):
    """scripts/check_below_ptxas.py (run by scripts/check_below_ptxas.sh after the suite on a GPU) on a stored record."""
    import runpy
    from pathlib import Path

    _hw_store(tmp_path / "hw.db").close()
    script = Path(__file__).resolve().parents[1] / "scripts" / "check_below_ptxas.py"
    main = runpy.run_path(str(script))["main"]
    assert main(str(tmp_path / "hw.db")) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("fma.rn.f32"))
    assert line.split()[1:4] == ["3", "4", "4.020"]
    assert "4:ok:4 3:ok:3 2:wrong:2 1:error:-" in line and "audit: no problem" in out
    assert "1 are below ptxas's stall (by 1 to 1 cycles" in out


def test_the_record_shows_the_patched_control_bits_at_the_latency_and_at_the_first_wrong_stall(work):
    r = sp.sweep_variant(ChainGPU(_offsets(work), latency=3), work, PLAN)
    p = r.params
    assert [d["control"][:3] for d in p["sweep"]] == ["S04", "S03", "S02", "S01"]  # read back from each patched cubin
    assert "FFMA R" in p["sass_at_hw"] and "[S03" in p["sass_at_hw"]
    assert "[S02" in p["sass_at_first_wrong"]
    right = sp.sweep_variant(ChainGPU(_offsets(work), latency=1), work, PLAN)
    assert "[S01" in right.params["sass_at_hw"] and right.params["sass_at_first_wrong"] is None


def test_a_scoreboarded_chain_gets_the_sweep_as_evidence_and_no_value():
    sm90 = make_target("sm_90")
    v = load_catalog().get("ex2.approx.ftz.f32")
    (rec,) = autoverify_many([v], sm90, jobs=1)
    w = VariantWork(v, rec, timing_families(v, rec, sm90, PLAN, 0, ()))
    compile_work([w], sm90, jobs=1)
    op = sp.single_sass(w)
    assert op == "MUFU.EX2"
    offs = {b.kernel.name: [i.offset for i, _c in sp.chain_instructions(b, op)] for b in sp.latency_family(w).built}
    r = sp.sweep_variant(ChainGPU(offs, latency=1), w, PLAN)
    assert r.value is None and r.params["scoreboard"]
    (flag,) = r.flags
    assert flag.startswith("scoreboard: MUFU.EX2 sets write barrier") and "computed right" in flag
    assert "cycles per instance" in flag and [d["correct"] for d in r.params["sweep"]] == [True] * len(r.params["sweep"])


def test_the_study_kernels_are_named_as_the_stand_in_gpu_reads_them(work):
    """..._<letter><chains>_n<length>: FakeDevice (the command line's fake GPUs) models them, so a
    fake run records 'not timed' (no values move), not an error."""
    from gpudissect.device.device import KERNEL_NAME

    sm90 = make_target("sm_90")
    names = []
    for strat in (None, *sp.EDGE_STRATEGIES):
        ks = sp.own_kernels(work, sm90, PLAN, 7, strat)
        assert all(KERNEL_NAME.search(k.name) for k in ks), [k.name for k in ks]
        names += [k.name for k in ks]
    assert len(set(names)) == len(names)


def test_a_chain_no_edge_moves_says_why_each_edge_gave_no_value(work):
    kernels = sp.prepare_kernels([work], make_target("sm_90"), PLAN, 1)["fma.rn.f32"]
    offs = _all_offsets(work, kernels)
    dev = ChainGPU(offs, latency=3, fixed_point=True)  # nothing moves, edges neither
    r = sp.sweep_variant(dev, work, PLAN, {**kernels, "companion-add-imm": "ptxas failed on the kernels"})
    assert r.value is None and r.params["kernels"] == "own"
    tried = r.params["edges_tried"]
    assert list(tried) == list(sp.EDGE_STRATEGIES)
    assert tried["companion-imm"].startswith(sp.FIXED) and tried["companion-add-imm"] == "ptxas failed on the kernels"


def test_edge_latencies_are_grouped_by_consumer_where_the_producer_matters():
    def rec(op, cons, v):
        return {"measure": sp.MEASURE, "value": v, "params": {"opcode": op, "consumer": [cons], "ptxas_stall": v}}

    lines = sp.conclusions([rec("FADD", "LOP3.LUT", 5.0), rec("FFMA", "LOP3.LUT", 5.0), rec("SHF.L.U32", "LOP3.LUT", 4.0),
                            rec("PRMT", "IADD3", 4.0)])
    assert lines[1] == "edges into LOP3.LUT (the stall patched on the producer): 4 cycles from SHF.L.U32; 5 cycles " \
                       "from FADD, FFMA."
    assert len(lines) == 2  # one producer into IADD3: nothing to compare


def test_an_edge_that_bounds_the_latency_is_kept_over_a_chain_at_a_fixed_point(work):
    kernels = sp.prepare_kernels([work], make_target("sm_90"), PLAN, 1)["fma.rn.f32"]
    offs = _all_offsets(work, kernels)
    dev = ChainGPU(offs, latency=1, fixed_point=True)
    dev.moving = {b.kernel.name for b in kernels["companion-imm"]}
    dev.floor = 12  # right down to stall 1 while the hardware holds each instance 12 cycles (its companion too)
    r = sp.sweep_variant(dev, work, PLAN, kernels)
    assert r.value is None and r.flags[0].startswith("not determined") and "companion-imm" in r.params["kernels"]
    assert r.params["edges_tried"] == {}


def test_the_sweeps_kernels_come_back_from_the_workers_with_their_regions(work, monkeypatch):
    """The timed region travels with each kernel (parsed where it was built): the measuring
    process does not parse any kernel's SASS again."""
    kernels = sp.prepare_kernels([work], make_target("sm_90"), PLAN, 1)["fma.rn.f32"]
    own = kernels["own"]
    assert own and all(b.region and not b.instrs for b in own)

    def no_parse(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(sp, "parse_sass", no_parse)
    assert [len(sp.chain_region(b)) for b in own] == [len(b.region) for b in own]
