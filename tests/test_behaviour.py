"""Behaviour suite (issue 6): analyses on synthetic traces with planted policies, occupancy
rule maths, probe PTX that assembles, and the suite end to end on a simulated GPU."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from test_behaviour_verdicts import SimGPU

from gpudissect.arch import occupancy
from gpudissect.arch.target import Target, TargetError, make_target
from gpudissect.bench import stats
from gpudissect.bench.contract import Context, SuiteInputError
from gpudissect.bench.runner import run
from gpudissect.device.args import Buf
from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.behaviour import analyse as an
from gpudissect.suites.behaviour import suite as bh

TARGET = make_target("sm_90")
RULES = occupancy.occupancy_rules(TARGET)


# ----------------------------------------------------------------- a simulated block dispatcher
def simulate(n: int, nsm: int, cap: int, spins: np.ndarray, policy: str = "breadth",
             order: list[int] | None = None, refill: str = "fifo", ns_per_cycle: float = 0.5):
    """Per-block records (g0, g1, c0, c1, smid) of a planted dispatcher. ``policy``: breadth
    (one block per SM in ``order`` before any second) or depth (fill an SM to ``cap`` first);
    ``refill``: fifo (the SM that freed a slot first gets the next block) or fixed (block i
    waits for SM order[i % nsm])."""
    order = order or list(range(nsm))
    g0 = np.zeros(n, np.int64)
    sm = np.zeros(n, np.int64)
    dur = (spins.astype(np.int64) * ns_per_cycle).astype(np.int64) + 100
    first = min(n, nsm * cap)
    for i in range(first):
        sm[i] = order[i % nsm] if policy == "breadth" else order[i // cap]
        g0[i] = 10 * i  # dispatch takes 10 ns per block
    ends = [(g0[i] + dur[i], int(sm[i])) for i in range(first)]
    heapq.heapify(ends)
    per_sm: dict[int, list[int]] = {s: [] for s in range(nsm)}
    for i in range(first):
        heapq.heappush(per_sm[int(sm[i])], int(g0[i] + dur[i]))
    last = 0
    for i in range(first, n):
        if refill == "fifo":
            e, s = heapq.heappop(ends)
            heapq.heappop(per_sm[s])
        else:
            s = order[i % nsm]
            e = heapq.heappop(per_sm[s])
            ends.remove(next(x for x in ends if x[1] == s and x[0] == e))
            heapq.heapify(ends)
        start = max(e + 20, last)
        last = start
        g0[i], sm[i] = start, s
        heapq.heappush(ends, (start + dur[i], s))
        heapq.heappush(per_sm[s], int(start + dur[i]))
    g1 = g0 + dur
    return g0 + 1_000_000, g1 + 1_000_000, g0 * 2, g1 * 2, sm


def fake_launch_model(nsm: int, policy: str = "breadth", **sim):
    """A FakeDevice launch model: resid_* kernels through ``simulate`` with the capacity the
    occupancy rules give (16 registers assumed), the timed probes (sched_*, order_*, pipe_*)
    through the planted GPU of test_behaviour_verdicts.SimGPU."""
    timed = SimGPU(nsm, **sim)

    def model(kernel, grid, block, args, smem):
        threads = block if isinstance(block, int) else block[0]
        if kernel.startswith("resid_r"):
            gx, gy = (grid, 1) if isinstance(grid, int) else grid[:2]
            n = gx * gy
            spins = next(a for a in args if isinstance(a, Buf) and a.name == "spin").data
            cap = occupancy.predict_blocks(threads, 16, smem, RULES)["blocks"]
            if cap == 0:
                raise RuntimeError("CUDA_ERROR_INVALID_VALUE")
            g0, g1, c0, c1, sm = simulate(n, nsm, cap, spins, policy)
            lin = np.arange(n)
            rec = np.zeros((n, 8), np.uint64)
            rec[:, 0], rec[:, 1], rec[:, 2], rec[:, 3], rec[:, 4] = g0, g1, c0, c1, sm
            rec[:, 5] = nsm
            rec[:, 6] = (lin // gx).astype(np.uint64) << np.uint64(32) | (lin % gx).astype(np.uint64)
            return {"rec": rec.reshape(-1)}
        return timed(kernel, grid, block, args, smem)

    return model


# ----------------------------------------------------------------- occupancy rules
@pytest.mark.parametrize("threads,regs,smem,blocks,limiter", [
    (128, 32, 0, 16, "registers"),
    (128, 64, 0, 8, "registers"),
    (128, 168, 0, 3, "registers"),
    (128, 255, 0, 2, "registers"),
    (32, 16, 0, 32, "blocks"),
    (1024, 16, 0, 2, "threads"),
    (128, 16, 100 * 1024, 2, "shared_memory"),
    (128, 16, 227 * 1024, 1, "shared_memory"),
    (128, 16, 228 * 1024, 0, "shared_memory"),
    (1024, 128, 0, 0, "registers"),
])
def test_occupancy_rules(threads, regs, smem, blocks, limiter):
    p = occupancy.predict_blocks(threads, regs, smem, RULES)
    assert p["blocks"] == blocks
    assert limiter in p["limiters"]
    assert p["warps"] == blocks * (-(-threads // 32))


def test_occupancy_rules_unknown_arch():
    with pytest.raises(TargetError, match="sm_75"):
        occupancy.occupancy_rules(Target("sm_75", "sm_75", "9.0", {"target": {}}))


# ----------------------------------------------------------------- residency and dispatch
def test_max_concurrency_touching_intervals_do_not_overlap():
    assert stats.max_concurrency(np.array([0, 10, 20]), np.array([10, 20, 30])) == 1
    assert stats.max_concurrency(np.array([0, 5, 6]), np.array([10, 20, 30])) == 3


@pytest.mark.parametrize("cap", [1, 3])
def test_residency_recovers_planted_capacity(cap):
    rng = np.random.default_rng(0)
    spins = rng.integers(20000, 60000, 8 * 5 * cap)
    g0, g1, c0, c1, sm = simulate(len(spins), 8, cap, spins)
    r = an.residency(sm, c0, c1)
    assert r["max"] == cap and r["min"] == cap and r["sms"] == 8


def test_dispatch_recovers_breadth_first_order_and_fifo_refill():
    rng = np.random.default_rng(1)
    nsm = 16
    order = [2 * i for i in range(8)] + [2 * i + 1 for i in range(8)]  # 0,2,4,..,1,3,..
    spins = rng.integers(20000, 60000, nsm * 4)
    g0, g1, _c0, _c1, sm = simulate(len(spins), nsm, 1, spins, "breadth", order)
    d = an.dispatch(np.arange(len(spins)), sm, g0, g1, nsm)
    assert d["policy"].startswith("breadth-first")
    assert d["first_sms"][:16] == order
    assert d["smid_stride_mode"] == 2
    assert d["consecutive_same_tpc"] == 0.0
    assert d["distinct_tpc_share_first_half"] == 1.0  # one block per TPC first
    c = simulate(len(spins), nsm, 1, spins, "breadth", list(range(nsm)))  # 0, 1, 2, ...
    contiguous = an.dispatch(np.arange(len(spins)), c[4], c[0], c[1], nsm)
    assert contiguous["distinct_tpc_share_first_half"] == 0.5
    assert contiguous["consecutive_same_tpc"] == pytest.approx(8 / 15, abs=1e-3)
    assert d["in_order"] is True
    assert d["refill_fifo_agreement"] == 1.0
    assert d["refill_gap_ns_median"] == 20


def test_dispatch_distinguishes_depth_first_and_fixed_refill():
    rng = np.random.default_rng(2)
    nsm, cap = 8, 4
    spins = rng.integers(20000, 60000, nsm * cap * 3)
    g0, g1, _c0, _c1, sm = simulate(len(spins), nsm, cap, spins, "depth", refill="fixed")
    d = an.dispatch(np.arange(len(spins)), sm, g0, g1, nsm)
    assert d["policy"].startswith("depth-first")
    assert d["refill_fifo_agreement"] < 0.9


# ----------------------------------------------------------------- warp scheduling
def _pair_slowdown(W: int, group_of) -> dict:
    return {(a, b): (2.0 if group_of(a) == group_of(b) else 1.0)
            for a in range(W) for b in range(a + 1, W)}


def test_scheduler_groups_recovers_mod4():
    g = an.scheduler_groups(8, _pair_slowdown(8, lambda w: w % 4))
    assert g["rule"] == "warp w -> scheduler (w mod 4)"
    assert g["groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["slowdown_competing"] == 2.0 and g["slowdown_other"] == 1.0


def test_scheduler_groups_distinguishes_contiguous():
    g = an.scheduler_groups(8, _pair_slowdown(8, lambda w: w // 2))
    assert g["rule"] == "warp w -> scheduler (w // 2)"
    assert g["groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_scheduler_groups_no_contention():
    g = an.scheduler_groups(4, _pair_slowdown(4, lambda w: w))
    assert g["schedulers"] == 4 and g["slowdown_competing"] is None


# ----------------------------------------------------------------- PTX and the suite
def test_probe_ptx_assembles_and_registers_grow():
    from gpudissect.catalog.model import load_catalog
    from gpudissect.kernel.build import build_module
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.behaviour.kernels import (
        order_kernel,
        pipe_kernel,
        resid_kernel,
        sched_pair_kernel,
    )

    cat = load_catalog()
    h = ptx_header(TARGET.ptx_isa, TARGET.arch)
    m = build_module([resid_kernel(h, 0), resid_kernel(h, 90), sched_pair_kernel(h), order_kernel(h, 1, 128),
                      pipe_kernel(h, "t", [cat.get("fma.rn.f32"), cat.get("ex2.approx.ftz.f32")], 8, 16)],
                     TARGET.arch)
    assert m["resid_r90"].regs >= m["resid_r0"].regs + 70
    assert [i.opcode for i in m["sched_pair"].region] == ["FFMA"] * 512  # 8 chains x 64, nothing else
    assert [i.opcode for i in m["order_c1_n128"].region] == ["FFMA"] * 128
    ops = [i.opcode for i in m["pipe_t_k8_n16"].region]
    assert ops.count("FFMA") == 128 and ops.count("MUFU") == 128 and len(ops) == 256


def test_select_patterns():
    ps = bh.all_probes(8, quick=True)
    assert {p.kind for p in bh.select(ps, ["pipes"])} == {"pipes"}
    assert [p.name for p in bh.select(ps, ["scheduler:pairs"])] == ["scheduler:pairs"]
    assert all(p.name.startswith("occupancy:smem") for p in bh.select(ps, ["occupancy:smem=*"]))
    with pytest.raises(SuiteInputError, match="no behaviour probe"):
        bh.select(ps, ["nothing"])
    with pytest.raises(SuiteInputError, match="no behaviour probe"):
        get_suite("behaviour").validate(["nothing"], {})


def test_suite_end_to_end_on_simulated_gpu(tmp_path):
    dev = FakeDevice(sm_count=8, launch_model=fake_launch_model(8))
    store = Store(tmp_path / "b.db")
    pats = ["dispatch:1d-1perSM", "occupancy:threads=*", "occupancy:smem=227KiB", "scheduler",
            "pipes:fma.rn.f32+ex2.approx.ftz.f32"]
    rid = run(get_suite("behaviour"), Context(dev, store, TARGET), pats, resume=True).run_id
    s = store.get_meta(f"summary:{rid}")
    assert s["dispatch"]["dispatch:1d-1perSM"]["policy"].startswith("breadth-first")
    assert s["dispatch"]["dispatch:1d-1perSM"]["blocks_per_sm"] == 1
    assert s["scheduler"]["pairs"]["rule"] == "warp w -> scheduler (w mod 4)"
    assert s["scheduler"]["order"]["dep32"]["verdict"] == "wait:1"
    assert s["occupancy"]["occupancy:threads=32"]["measured_blocks"] == 32
    assert s["occupancy"]["occupancy:smem=227KiB"]["measured_blocks"] == 1
    assert set(s["pipes"]["solo"]) == {"fma.rn.f32", "ex2.approx.ftz.f32"}
    pair = s["pipes"]["pairs"]["fma.rn.f32+ex2.approx.ftz.f32"]
    assert pair["verdict"] == "add" and len(pair["per_launch"]) == bh.LAUNCHES
    assert any(c.startswith("occupancy:") for c in s["conclusions"])
    # resumable: a second call with the run unfinished skips what is done
    n = dev.calls
    with store.tx():
        store.db.execute("UPDATE runs SET finished=NULL WHERE id=?", (rid,))
    rid2 = run(get_suite("behaviour"), Context(dev, store, TARGET), pats, resume=True).run_id
    # no probe runs again: the one launch is the SM-clock kernel of the run's end (bench/clock.py)
    assert rid2 == rid and dev.calls == n + 1
    # the per-suite document draws its figures (timeline, occupancy, scheduler, pipes)
    from gpudissect.store.export import suite_document
    from gpudissect.suites.behaviour.figures import figures

    paths = figures(suite_document(store, rid), tmp_path / "fig")
    stems = {p.stem for p in paths}
    assert {"behaviour_timeline_1d-1perSM", "behaviour_occupancy", "behaviour_scheduler_pairs",
            "behaviour_pipes", "behaviour_issue_order"} <= stems
