"""GPU-free tests of the memory suite: chains, step detection, SASS checks, analysis,
figures, and the whole suite on a FakeDevice with a synthetic memory hierarchy."""

from __future__ import annotations

import json

import bw_synth
import numpy as np
import pytest

from gpudissect.bench.staircase import detect, refine_points
from gpudissect.device.args import Buf
from gpudissect.device.device import FakeDevice
from gpudissect.suites.memory import analyse as am
from gpudissect.suites.memory import kernels as gm

KiB, MiB = 1 << 10, 1 << 20

# --- chain builder


@pytest.mark.parametrize("order", ["random", "strided"])
def test_chain_is_one_cycle_in_bounds(order):
    ch = gm.build_chain(64 * KiB, 128, order, seed=3)
    assert ch.nodes == 512 and ch.footprint == 64 * KiB
    seen, cur = set(), 0
    for _ in range(ch.nodes):
        assert cur not in seen
        seen.add(cur)
        cur = int(ch.next[cur])
    assert cur == 0 and len(seen) == ch.nodes  # one cycle through all nodes
    offs = ch.next.astype(np.int64) * ch.spacing
    assert offs.max() + 8 <= ch.footprint and offs.min() >= 0
    if order == "strided":
        assert (np.diff(ch.next[:-1].astype(np.int64)) == 1).all() and ch.next[-1] == 0
    words = ch.byte_offsets()
    assert words.nbytes == ch.footprint
    assert words[ch.spacing // 4] == ch.next[1] * ch.spacing


def test_chain_refuses_bad_input():
    with pytest.raises(gm.ChainError, match="exceeds the free device memory"):
        gm.build_chain(1 << 30, 128, limit=1 << 29)
    with pytest.raises(gm.ChainError, match="multiple of 8"):
        gm.build_chain(4096, 12)
    with pytest.raises(gm.ChainError, match="fewer than 2 nodes"):
        gm.build_chain(128, 128)
    ch = gm.build_chain(4096, 64)
    bad = gm.Chain(ch.next.copy(), 64, 4096, "random")
    bad.next[0] = 64  # outside
    with pytest.raises(gm.ChainError):
        gm.validate_chain(bad, np.arange(64, dtype=np.uint32))
    two = gm.Chain(np.array([1, 0, 3, 2], dtype=np.uint32), 64, 256, "random")
    with pytest.raises(gm.ChainError, match="single cycle"):
        gm.validate_chain(two, np.arange(4, dtype=np.uint32))


# --- step detection

def _stair(x, noise, seed=0):
    rng = np.random.default_rng(seed)

    def f(v):
        if v <= 192 * KiB:
            return 33.0
        if v <= 384 * KiB:  # gradual transition, as random chains give
            return 33 + 230 * (v - 192 * KiB) / (192 * KiB)
        if v <= 48 * MiB:
            return 263.0
        if v <= 96 * MiB:
            return 263 + 300 * (v - 48 * MiB) / (48 * MiB)
        return 563.0
    return np.array([f(v) for v in x]) * (1 + noise * rng.standard_normal(len(x)))


@pytest.mark.parametrize("noise,seed", [(0.0, 0), (0.03, 1), (0.05, 2)])
def test_detect_finds_known_steps(noise, seed):
    x = 4096 * 2 ** (np.arange(0, 36) / 2)
    pl, st = detect(x, _stair(x, noise, seed), min_points=3)
    assert len(st) == 2, st
    assert 128 * KiB <= st[0].x_below <= 192 * KiB < st[0].x_above <= 400 * KiB
    assert 32 * MiB <= st[1].x_below <= 48 * MiB < st[1].x_above <= 100 * MiB
    assert st[0].ratio == pytest.approx(263 / 33, rel=0.15)
    assert len(pl) == 3


def test_detect_flat_curve_has_no_steps():
    x = 4096 * 2 ** (np.arange(0, 20) / 2)
    y = 40 * (1 + 0.03 * np.random.default_rng(5).standard_normal(x.size))
    assert detect(x, y, min_points=3)[1] == []


def test_refine_points_inside_bracket():
    x = 4096 * 2 ** (np.arange(0, 36) / 2)
    _, st = detect(x, _stair(x, 0.0), min_points=3)
    new = refine_points(st, x, 3)
    for s in st:
        inside = [v for v in new if s.x_below < v < s.x_above]
        assert len(inside) >= 2
    assert len(new) == sum(1 for v in new if any(s.x_below < v < s.x_above for s in st))
    assert all(min(abs(v / h - 1) for h in x) > 0.02 for v in new)  # no repeats


# --- analysis helpers

def test_bank_degrees():
    assert am.bank_degrees(4, 4) == {"degree_warp": 1, "wavefronts_phase": 1}
    assert am.bank_degrees(8, 4)["degree_warp"] == 2
    assert am.bank_degrees(128, 4)["degree_warp"] == 32
    assert am.bank_degrees(0, 4)["degree_warp"] == 1  # broadcast
    d = am.bank_degrees(8, 8)  # 256 contiguous bytes: 2 words per bank over the warp
    assert d == {"degree_warp": 2, "wavefronts_phase": 2}
    d = am.bank_degrees(16, 16)
    assert d == {"degree_warp": 4, "wavefronts_phase": 4}


def test_knee_and_two_groups():
    k = am.knee([8, 16, 32, 64, 128, 256, 512], [40, 45, 55, 80, 250, 252, 249])
    assert k["bytes"] == 128
    assert am.knee([8, 16, 32], [40, 40, 41])["bytes"] is None
    g = am.two_groups([200] * 60 + [230] * 70)
    assert g["bimodal"] and g["near_sms"] == 60 and g["far_mean"] == pytest.approx(230)
    assert not am.two_groups(list(np.linspace(200, 203, 100)))["bimodal"]


# --- SASS of the generated kernels (ptxas + nvdisasm run here)

def test_generated_kernels_verify():
    from gpudissect.arch.target import make_target
    from gpudissect.suites.memory.launcher import Kernels
    from gpudissect.suites.memory.plan import QUICK_PLAN

    k = Kernels(make_target("sm_90"), QUICK_PLAN)
    timed = [n for n, kern in k.kernels.items() if "path" in kern.meta]
    assert set(timed) <= set(k.built)
    bad = {n: c.problems for n, c in k.checks.items() if not c.ok}
    assert not bad, bad
    assert k.checks["chase_nc"].counts == {"LDG.E.64.CONSTANT": pytest.approx(128, abs=128)}
    assert any("CONSTANT" in s for s in k.checks["chase_nc"].counts)
    assert any("STRONG.GPU" in s for s in k.checks["chase_cg"].counts)
    assert set(k.checks["chase_sts"].counts) == {"STS", "LDS"}


def test_check_rejects_wrong_load_kind():
    from gpudissect.kernel.sass import SassInstr
    from gpudissect.suites.memory.checks import check_region

    ld = SassInstr(0, "LDG", ("E", "64", "STRONG", "GPU"), ("R2", "desc[UR4][R2.64]"))
    st = SassInstr(0, "STG", ("E",), ("desc[UR4][R4.64]", "R2"))
    ok = check_region("ld.global.cg", [ld] * gm.UNROLL, "sm_90")
    assert ok.ok
    assert not check_region("ld.global.ca", [ld] * gm.UNROLL, "sm_90").ok  # wrong cache operator
    assert not check_region("ld.global.cg", [ld] * gm.UNROLL + [st], "sm_90").ok  # extra memory access
    assert not check_region("ld.global.cg", [ld] * 3, "sm_90").ok  # too few loads


# --- the suite on a fake device with a synthetic hierarchy

L1, L2, LINE = 192 * KiB, 24 * MiB, 128


class FakeHierarchy:
    def __init__(self):
        self.spacing, self.footprint = 64, 4096

    def latency(self, kernel, warm):
        if warm == 0:  # cold strided pass
            hit, miss = (30, 250) if kernel == "chase_ca" else (250, 600)
            return hit + (miss - hit) * min(1.0, self.spacing / LINE)
        f = self.footprint
        if self.spacing >= 1 << 20:  # page sweep: few lines, all L2 hits; TLB misses past 64 MiB
            return 250.0 if f <= 64 * MiB else 350.0
        if kernel == "chase_ca" and f <= L1:
            return 30.0
        return 250.0 if f <= L2 else (600.0 if f <= 64 * MiB else 750.0)

    def __call__(self, kernel, grid, block, args, smem):
        if kernel == "scatter":
            self.footprint = args[0].nbytes
            self.spacing = int(args[3])
            return {}
        if kernel == "link":  # the TLB study's page chains (one page per >= 2 MiB)
            self.footprint, self.spacing = args[0].nbytes, 1 << 21
            return {}
        if kernel == "l2probe":  # two partitions: SM parity against line parity
            lines = args[4].data.astype(np.int64) // 128
            sm = np.arange(grid) % 4
            out = np.zeros(3 * grid, dtype=np.uint64)
            out[0::3] = ((250 + 40 * ((sm % 2) != (lines % 2))) * int(args[3]) * gm.UNROLL).astype(np.uint64)
            out[2::3] = sm
            return {"out": out}
        if kernel.startswith("chase"):
            warm, iters = int(args[2]), int(args[3])
            lat = {"chase_lds": 30, "chase_sts": 50, "chase_ldl": 40}.get(kernel)
            if lat is None and kernel.startswith("chase_ldc"):
                lat = 20
            lat = lat or self.latency(kernel, warm)
            out = np.zeros(3 * grid, dtype=np.uint64)
            out[0::3] = int(lat * iters * gm.UNROLL) + np.arange(grid) % 2 * iters * gm.UNROLL * 20
            out[2::3] = np.arange(grid)
            return {"out": out}
        if kernel.startswith("bank_w"):
            width = int(kernel[6:]) // 8
            d = am.bank_degrees(int(args[1]), width)["wavefronts_phase"]
            out = np.zeros(3, dtype=np.uint64)
            out[0] = int((24 + 2 * d) * int(args[2]) * gm.UNROLL)
            return {"bankout": out}
        if kernel.startswith(bw_synth.PREFIX):  # bandwidth streams: a saturating synthetic rate
            return bw_synth.outputs(kernel, grid, block, args, sms=4)
        return {"_gpu_ms": [1.0, 0.9, 0.9]}


def _run(dev, store, patterns, plan):
    """The memory suite through the one run loop, with ``plan`` instead of the full one."""
    from gpudissect.arch.target import make_target
    from gpudissect.bench.contract import Context
    from gpudissect.bench.runner import run
    from gpudissect.suites import get_suite

    ctx = Context(dev, store, make_target("sm_90"), options={"plan": plan})
    return run(get_suite("memory"), ctx, patterns).run_id


@pytest.mark.slow  # seconds of runs on a fake device: the fast tier stays under 5 minutes on 2 cores
def test_suite_on_fake_device(tmp_path):
    from gpudissect.store.db import Store
    from gpudissect.store.export import suite_document
    from gpudissect.suites.memory.plan import Plan

    plan = Plan(sweep_max=512 * MiB, per_octave=2, refine=2, max_nodes=1 << 15, warm_cap=1 << 12,
                const_footprints=(2048,), strides=(8, 16, 32, 64, 128, 256, 512),
                bank_strides=(0, 1, 2, 4, 8, 32), bw_launches=3, lat_launches=2)
    dev = FakeDevice(launch_model=FakeHierarchy(), free_bytes=2 << 30)
    store = Store(tmp_path / "m.db")
    run_id = _run(dev, store, None, plan)
    doc = suite_document(store, run_id)
    s = doc["summary"]
    assert s["latency"]["ld.shared"] == pytest.approx(30)
    assert s["latency"]["tex"] is not None  # chase_tex through a texture object
    lo, hi = s["sizes"]["L1"]["bracket"]
    assert lo <= L1 < hi and hi / lo < 1.5  # refined around the step
    lo, hi = s["sizes"]["L2"]["bracket"]
    assert lo <= L2 < hi
    assert s["line_sizes"]["L1"]["bytes"] == LINE
    assert len(s["tlb"]["steps"]) == 1 and 32 * MiB <= s["tlb"]["reach_bytes"][0] <= 64 * MiB
    # the TLB step (600 -> 750 past 64 MiB) is set aside as translation, not taken for an L2 level
    assert [lv["name"] for lv in s["l2"]["levels"]] == ["L2"]
    assert [t["levels_cycles"] for t in s["l2"]["translation_steps"]] == [[600.0, 750.0]]
    pages = [r["params"]["footprint"] for r in doc["records"] if r["variant"] == "tlb/2MiB"
             and r["value"] is not None]
    # the page sweep spans most of the free memory, past the cache sweeps' sweep_max
    assert max(pages) > 512 * MiB
    assert s["bank_conflicts"]["w32"]["fit"]["rule"] == "wavefronts_phase" or \
        s["bank_conflicts"]["w32"]["fit"]["wavefronts_phase"]["r2"] > 0.99
    assert s["bank_conflicts"]["w128"]["fit"]["rule"] == "wavefronts_phase"
    assert s["nearfar"]["bimodal"]
    assert s["bandwidth"]["DRAM/read"]["GB/s"] > 0 and "DRAM/read_over_copy" in s["bandwidth"]
    assert len(s["conclusions"]) >= 8
    # resumable: a second call with the run finished starts a new run; items are all stored
    items = {r["variant"].split("/")[0] for r in doc["records"]}
    assert {"latency", "sweep", "stride", "l2map", "tlb", "bandwidth", "bank"} <= items
    json.dumps(doc)
    # figures from the document
    from gpudissect.suites.memory.figures import figures

    paths = figures(doc, tmp_path / "fig")
    names = {p.name for p in paths}
    for stem in ("memory_staircase", "memory_bandwidth", "memory_bank_conflicts"):
        assert f"{stem}.png" in names and f"{stem}.svg" in names
    assert all(p.stat().st_size > 1000 for p in paths)


def test_failing_benchmark_is_contained(tmp_path):
    from gpudissect.store.db import Store
    from gpudissect.suites.memory.plan import QUICK_PLAN

    def broken(kernel, grid, block, args, smem):
        if kernel == "chase_cv":
            raise RuntimeError("boom")
        return FakeHierarchy()(kernel, grid, block, args, smem)

    dev = FakeDevice(launch_model=broken)
    store = Store(tmp_path / "m.db")
    run_id = _run(dev, store, ["latency/*"], QUICK_PLAN)
    recs = {r["variant"]: r for r in store.results(run_id)}
    assert recs["latency/ld.global.cv"]["value"] is None
    assert any("boom" in f for f in recs["latency/ld.global.cv"]["flags"])
    assert recs["latency/ld.global.cg"]["value"] is not None


def test_buf_sizes_used_by_suite_are_valid():
    assert Buf("x", nbytes=64).nbytes == 64
