"""The warps x distance throughput grid (issue 22, thesis 7.3): what it yields on synthetic grids
with known answers (MT, MNW, WL, latency from the grid, instabilities), the per-SM spans of a
launch, the measurement end to end on synthetic clocks (FakeDevice), a batch of launches
through a worker, and the grid in the store, the timing reference and its figure."""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest

from gpudissect.arch.limits import parse_sass
from gpudissect.arch.target import make_target
from gpudissect.catalog.model import load_catalog
from gpudissect.device.device import FakeDevice, RunSpec
from gpudissect.suites.instructions.block_rates import block_spans, cell_rate, launch_spans
from gpudissect.suites.instructions.core import measure_work
from gpudissect.suites.instructions.studies.grid import (
    GRID,
    analyse,
    instabilities,
    latency_from_grid,
    min_warps,
    warp_latency,
)
from gpudissect.suites.instructions.suite import Plan, prepare_works
from gpudissect.suites.instructions.verify import autoverify_many

WARPS = list(range(1, 33))
DISTS = list(range(1, 9))


def model_rate(W: int, d: int, lat: float = 4.0, reissue: float = 2.0, peak: float = 4.0) -> float:
    """A pipe of ``peak`` warp-instr/clk/SM over 4 schedulers: W*d chains of latency ``lat``,
    one warp issues at most every ``reissue`` cycles, and the busiest scheduler (ceil(W/4)
    warps) sets the SM's pace."""
    return min(W * d / lat, W / reissue, peak * W / (4 * math.ceil(W / 4)))


def grid(**kw) -> np.ndarray:
    return np.array([[model_rate(W, d, **kw) for d in DISTS] for W in WARPS])


def test_derived_quantities_of_a_known_grid():
    r = grid()
    hw = np.zeros_like(r)
    out = analyse(r, hw, WARPS, DISTS)
    assert out["max_rate"] == pytest.approx(4.0)
    assert out["max_at"] == {"warps": 8, "distance": 2}
    assert out["min_warps"] == {"warps": 8, "distance": 2}  # 4 warps stop at 1 / reissue each
    assert out["warp_latency_cycles"] == pytest.approx(2.0)
    assert out["latency_from_grid"] == pytest.approx(4.0)
    got = {(w, d): drop for w, d, drop in out["instabilities"]}
    assert got[(9, 2)] == pytest.approx(0.25)  # 3 warps on one scheduler: 4 * 9/12
    assert (9, 1) not in got  # distance 1 is still latency bound at 9 warps: no drop
    assert (5, 2) not in got and (8, 2) not in got
    assert all(w % 4 == 1 for w, _ in got)  # drops only where a warp is added to a full round


def test_other_latencies_and_reissue_are_found():
    r = grid(lat=24.0, reissue=1.0, peak=2.0)
    assert latency_from_grid(r, WARPS, DISTS) == pytest.approx(24.0)
    assert warp_latency(r, WARPS, DISTS) == pytest.approx(3.0)  # 8 chains of 24 cycles: 8/24
    assert min_warps(r, WARPS, DISTS) == (8, 6)  # 8*6/24 = 2


def test_drops_within_the_noise_are_not_instabilities():
    r = np.array([[1.0], [0.9], [0.99], [1.0]])
    ws, ds = [1, 2, 3, 4], [1]
    quiet = np.full_like(r, 0.01)
    assert instabilities(r, quiet, ws, ds) == [(2, 1, 0.1)]
    loud = np.full_like(r, 0.06)
    assert instabilities(r, loud, ws, ds) == []
    small = np.array([[1.0], [0.99], [1.0], [1.0]])  # 1% < the 2% tolerance
    assert instabilities(small, np.zeros_like(small), ws, ds) == []


def test_missing_cells_and_rows():
    r = np.full((3, 2), np.nan)
    out = analyse(r, r, [2, 4, 8], [1, 2])
    assert out["max_rate"] is None and out["min_warps"] is None
    assert out["warp_latency_cycles"] is None and out["latency_from_grid"] is None
    assert out["instabilities"] == []


def test_block_spans_use_blocks_alone_on_their_sm():
    reps, W = 3, 2
    rows = []
    for b, sm in enumerate([0, 1, 1]):  # blocks 1 and 2 share SM 1: excluded
        for wi in range(W):
            row = []
            for rep in range(reps):
                start = 1000 * rep + wi  # the second warp starts a cycle later
                row += [start, start + 100 + 10 * b + wi]
            rows.append(row + [sm])
    t = np.array(rows, dtype=np.uint64)
    # block 0: first start 1000*rep, last end 1000*rep + 1 + 101: 102 cycles
    assert block_spans(t, W, reps).tolist() == [102.0, 102.0]


def test_many_launches_at_once_give_each_launch_its_own_spans():
    rng = np.random.default_rng(1)
    runs = []
    for W, sms in ((1, [0, 1, 2]), (3, [0, 0, 1]), (2, [5, 6])):  # the second: two blocks on SM 0
        t = rng.integers(0, 1000, size=(len(sms) * W, 7)).astype(np.uint64)
        t[:, 1::2][:, :3] += np.uint64(5000)  # ends after starts
        t[:, -1] = np.repeat(sms, W)
        runs.append((t, W))
    together = launch_spans(runs, 3)
    for (t, W), got in zip(runs, together, strict=True):
        assert got.tolist() == block_spans(t, W, 3).tolist()
    assert together[0].size == 2 and together[1].size == 2  # block 2 of the second alone on SM 1


def _spans_by_hand(t: np.ndarray, W: int, reps: int) -> np.ndarray:
    """block_spans written plainly: per repetition after the first, the median (numpy's) over
    the blocks alone on their SM of the first start to the last end of the block's warps."""
    blocks = [t[k * W:(k + 1) * W] for k in range(t.shape[0] // W)]
    sms = [int(b[0, -1]) for b in blocks]
    alone = [b for b, sm in zip(blocks, sms, strict=True) if sms.count(sm) == 1]
    if reps < 2 or not alone:
        return np.empty(0)
    return np.array([np.median([float(int(b[:, 2 * r + 1].max()) - int(b[:, 2 * r].min())) for b in alone])
                     for r in range(1, reps)])


def test_launch_spans_are_the_plain_per_block_reduction_to_the_last_bit():
    rng = np.random.default_rng(11)
    for _ in range(200):
        reps = int(rng.integers(1, 5))
        runs = []
        for _ in range(int(rng.integers(1, 5))):
            W, sms = int(rng.integers(1, 4)), int(rng.integers(1, 7))
            rows = int(rng.integers(0, 3 * sms + 1)) * W + int(rng.integers(0, W))  # a ragged tail too
            t = np.zeros((rows, 2 * reps + 1), dtype=np.uint64)
            t[:, 0:-1:2] = rng.integers(1000, 5000, size=(rows, reps))
            t[:, 1:-1:2] = t[:, 0:-1:2] + rng.integers(0, 300, size=(rows, reps)).astype(np.uint64)
            t[:, -1] = rng.integers(0, sms, size=rows)
            runs.append((t, W))
        for (t, W), got in zip(runs, launch_spans(runs, reps), strict=True):
            want = _spans_by_hand(t, W, reps)
            assert got.shape == want.shape and np.array_equal(got, want)


def test_cell_rate_is_work_over_the_median_span():
    rate, per = cell_rate(8, [4.0, 5.0, 4.0])
    assert rate == pytest.approx(2.0)
    assert per == pytest.approx([2.0, 1.6, 2.0])
    assert cell_rate(8, []) == (None, [])


# --- end to end on synthetic clocks --------------------------------------------------------

PLAN = Plan(tp_min_length=0, latency_units=(32, 64), tp_chains=(1, 2), tp_units=(64, 128), tp_warps=(4,),
            distances=(2,), distance_units=(32, 64), reps=3, launches=1,
            grid_warps=(1, 2, 3, 4, 5, 8, 9), grid_distances=(1, 2, 3))


@pytest.fixture(scope="module")
def work():
    target = make_target("sm_90", "13.0")
    v = load_catalog().get("add.u32")
    recs = autoverify_many([v], target, jobs=1)
    return prepare_works([v], recs, target, PLAN, jobs=1)[0], target


def fake_cycles(peak: float):
    def model(kernel: str, chains: int, length: int, warps: int) -> float:
        return length * chains * warps / model_rate(warps, chains, peak=peak)
    return model


def test_grid_families_cover_the_distances_the_throughput_families_do_not(work):
    w, _ = work
    grid_fams = [f for f in w.families if f.measure == GRID]
    assert [f.chains for f in grid_fams] == [3]
    assert all(not f.error and f.built and f.sass for f in grid_fams)


def test_grid_measured_from_synthetic_clocks(work):
    w, target = work
    out = measure_work(FakeDevice(fake_cycles(peak=1.5), sm_count=3), w, PLAN, target)
    g = next(r for r in out.results if r.measure == GRID)
    want = np.array([[model_rate(W, d, peak=1.5) for d in PLAN.grid_distances] for W in PLAN.grid_warps])
    assert np.allclose(np.array(g.samples["rates"], dtype=float), want, rtol=5e-3)
    assert g.value == pytest.approx(1.5, rel=5e-3)
    assert g.params["min_warps"] == {"warps": 4, "distance": 2}
    assert g.params["latency_from_grid"] == pytest.approx(4.0, rel=5e-3)
    # W=1, d=3: one warp has one scheduler, a quarter of the pipe's 1.5
    assert g.params["warp_latency_cycles"] == pytest.approx(1 / 0.375, rel=5e-3)
    # a fifth (ninth) warp puts two (three) on one scheduler: 1.5 * 5/8, 1.5 * 9/12
    assert [x[:2] for x in g.params["instabilities"]] == [[5, 1], [5, 2], [5, 3], [9, 1], [9, 2], [9, 3]]
    assert g.ptx_hash and g.sass and not any(f.startswith("exceeds-limit") for f in g.flags)
    # one region per column: the longest of at most max(grid_units) = 128 instances per thread
    assert g.params["lengths"] == {"1": 128, "2": 64, "3": 42}


def test_a_cell_above_the_pipe_limit_is_flagged(work):
    w, target = work
    out = measure_work(FakeDevice(fake_cycles(peak=100.0), sm_count=3), w, PLAN, target)
    g = next(r for r in out.results if r.measure == GRID)
    assert any(f.startswith("exceeds-limit") for f in g.flags)


def ten_per_length(kernel: str, chains: int, length: int, warps: int) -> float:
    return 10.0 * length


def test_run_many_through_a_worker():
    from gpudissect.device.worker import WorkerDevice

    dev = WorkerDevice(factory=functools.partial(FakeDevice, ten_per_length, sm_count=2))
    try:
        specs = [RunSpec("k_t1_n8", (1, 2), 1, 2, 2, 64, launches=2), RunSpec("k_t2_n16", (), 1, 3, 2, 32)]
        got = dev.run_many(b"cubin", specs)
    finally:
        dev.close()
    assert [len(g) for g in got] == [2, 1]
    assert got[0][0].times.shape == (4, 5) and got[1][0].times.shape == (2, 7)
    assert int(got[1][0].times[0, 1] - got[1][0].times[0, 0]) == 160


def test_a_run_stores_the_grid_and_the_reference_shows_it(sweep, tmp_path):
    from gpudissect.report.assemble.timing_reference import timing_reference
    from gpudissect.store.db import Store
    from gpudissect.suites.instructions.core import QUICK_PLAN
    from gpudissect.suites.instructions.figures import grid_maps
    from gpudissect.suites.instructions.studies import grid as grid_study
    from gpudissect.suites.instructions.suite import InstructionsSuite
    from gpudissect.suites.instructions.view import grid_section

    store = Store(tmp_path / "g.db")
    # the quick plan's small axes in a full run (a quick run leaves the grid out)
    suite = InstructionsSuite(full=QUICK_PLAN, studies=(grid_study.STUDY,))
    sweep(FakeDevice(fake_cycles(peak=1.5), sm_count=2), store, ["add.u32"], suite=suite, quick=False)
    rows = [r for r in store.results(store.runs()[-1]["id"]) if r["measure"] == GRID
            and r["variant"] == "add.u32"]  # the run adds the companions' variants
    assert len(rows) == 1 and rows[0]["value"] == pytest.approx(1.5, rel=5e-3)
    assert rows[0]["params"]["grid_warps"] == [1, 2, 3, 4, 8, 16, 32]
    text = "\n".join(grid_section(rows))
    assert "### int" in text and re.search(r"`add.u32` \| 1\.5\d? \| 4 @ d=2 \|", text)
    assert grid_maps({"records": rows}, tmp_path / "fig")[0].name == "instructions_grid.png"
    assert timing_reference is not None


def test_warp_latency_is_per_sass_issue():
    # paired half precision: two PTX instances in one SASS; the scheduler issues SASS
    r = grid()
    out = analyse(r, np.zeros_like(r), WARPS, DISTS, sass_per_instance=0.5)
    assert out["warp_latency_per_instance"] == pytest.approx(2.0)
    assert out["warp_latency_cycles"] == pytest.approx(4.0)
    assert out["sass_per_instance"] == 0.5


def test_a_cell_is_held_to_the_limit_of_its_own_region(work):
    # the cell's limit is what the timed kernel's region issues (harness instructions included),
    # not the family's slope mix, which may count moves only the other length has
    w, target = work
    f = next(f for f in w.families if f.measure == "throughput" and f.chains == 1)
    b = f.built[0]
    assert set(f.region_sass) == {x.kernel.name for x in f.built}
    mix = parse_sass(f.region_sass[b.kernel.name])
    # add.u32: ptxas balances IADD3 and IMAD.IADD, one SASS per instance (in this region's own mix)
    assert {op for op, _ in mix} <= {"IADD3", "IMAD.IADD"}
    assert sum(c for _, c in mix) == pytest.approx(1.0, abs=0.05)
    saved = dict(f.region_sass)
    try:  # a region that issued 4 SASS per instance: the same rates now exceed its limit
        for k in f.region_sass:
            f.region_sass[k] = ["4*IADD3"]
        out = measure_work(FakeDevice(fake_cycles(peak=1.5), sm_count=3), w, PLAN, target)
        g = next(r for r in out.results if r.measure == GRID)
        assert any(x.startswith("exceeds-limit") for x in g.flags)
        assert g.params["region_sass"]["1"] == ["4*IADD3"]
    finally:
        f.region_sass.update(saved)
