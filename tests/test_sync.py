"""Sync suite (issue 19): kernels that assemble into the SASS the expectations name, the
analyses on synthetic clocks with known answers (rates from two lengths, chain slopes, warp-sweep
saturation, the contention table), and the suite end to end on a simulated GPU."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context, SuiteInputError
from gpudissect.bench.runner import run
from gpudissect.device.args import Buf
from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.sync import analyse as an
from gpudissect.suites.sync import kernels as K
from gpudissect.suites.sync import suite as sy
from gpudissect.suites.sync.summary import summarize

TARGET = make_target("sm_90")


# ----------------------------------------------------------------- kernels and their SASS
@pytest.fixture(scope="module")
def built():
    """Every kernel of the full plan, compiled as the suite compiles them."""
    probes = sy.all_probes(8, quick=False)
    ctx = Context(FakeDevice(sm_count=8), None, TARGET)
    sy.SUITE.prepare(ctx, [sy.Item(p.name, p) for p in probes])
    return probes, ctx.state["built"]


def test_every_kernel_assembles_with_the_expected_sass(built):
    probes, b = built
    bad = {n: v for n, v in b.items() if isinstance(v, Exception)}
    assert not bad
    problems = [f for p in probes for f in sy.sass_flags(p, {n: b[n] for n in p.kernels}, "sm_90")]
    assert problems == []


def test_expected_sass_is_what_ptxas_emits(built):
    """Spot checks of what the expectations say (the discovered SASS), per kind of kernel."""
    _, b = built
    ops = {n: [an.full_op(i) for i in v.region] for n, v in b.items() if v.region}
    n = sy.ATOM_LENGTHS[0]
    assert ops[K.atom_name("global", "red.add.u32", "distinct", n)].count("REDG.E.ADD.STRONG.GPU") == n
    # red.shared has no SASS of its own, and the shared f32 add is a CAS loop
    assert "ATOMS.ADD" in ops[K.atom_name("shared", "red.add.u32", "one", n)]
    assert "ATOMS.CAST.SPIN" in ops[K.atom_name("shared", "atom.add.f32", "one", n)]
    # a provably uniform address is warp-aggregated; "one" (the same address, not provable) is not
    assert "VOTEU.ANY" in ops[K.atom_name("global", "atom.add.u32", "uniform", n)]
    assert "VOTEU.ANY" not in ops[K.atom_name("global", "atom.add.u32", "one", n)]
    assert "ERRBAR" in ops[K.fence_name("fence.sc.gpu", False, sy.FENCE_LENGTHS[0])]
    assert "BAR.ARV" in ops[K.bar_name("bar.arrive+sync", sy.BAR_LENGTHS[0])]


def test_a_wrong_region_is_flagged():
    exp = {"main": "ATOMG.E.ADD.STRONG.GPU", "per": 1, "with": ["IADD3"]}
    h = ["VIADD", "ISETP.GE.U32.AND"]
    ok = ["ATOMG.E.ADD.STRONG.GPU"] * 4 + ["IADD3", "VIADD"]
    assert an.check_region(ok, exp, 4, h, 2) == []
    assert "expected 4" in an.check_region(ok[1:], exp, 4, h, 2)[0]
    assert "unexpected" in an.check_region(ok + ["BAR.SYNC"], exp, 4, h, 2)[0]
    assert "loop-counter" in an.check_region(ok + ["VIADD"] * 2, exp, 4, h, 2)[0]


def test_bar_sync_n_idle_warps_meet_the_same_block_barriers():
    k = K.bar_kernel("", "bar.sync.n", 4)
    busy, idle = k.entry.split("$Lidle:\n")
    assert busy.count("bar.sync 0;") == idle.count("bar.sync 0;") > 0
    assert busy.count("bar.sync 1, %n;") == 4 and "bar.sync 1" not in idle


# ----------------------------------------------------------------- analyses, known answers
def _times(spans: dict[int, float], warps: int, reps: int = K.REPS) -> np.ndarray:
    """One row per warp (warps on each SM of ``spans``): every repetition lasts the SM's span."""
    rows = []
    for sm, span in spans.items():
        for w in range(warps):
            r = []
            for rep in range(reps):
                t0 = 10_000 * rep + 3 * w
                r += [t0, t0 + int(round(span)) - 3 * w]
            rows.append([*r, sm])
    return np.array(rows, dtype=np.int64)


def test_per_sm_rate_from_two_lengths():
    # 8 warps, 64 more lane-ops per thread in the long region, 4 lane-ops/clk: +1024 cycles
    w, dlen, rate = 8, 64, 4.0
    units = w * 32 * dlen
    t1 = _times({0: 500.0, 1: 500.0}, w)
    t2 = _times({0: 500.0 + units / rate, 1: 500.0 + units / rate}, w)
    r = an.per_sm_rate(t1, t2, w, K.REPS, units)
    assert r["rate"] == pytest.approx(rate)
    assert r["sms"] == 2


def test_chain_slope_recovers_cycles_per_instance():
    d1 = np.full(10, 40 + 24.0 * 32)
    d2 = np.full(10, 40 + 24.0 * 128)
    assert an.chain_slope(d1, d2, (32, 128)) == pytest.approx(24.0)
    assert an.chain_slope(np.array([]), d2, (32, 128)) is None


def test_saturation_of_a_warp_sweep():
    s = an.saturation([4, 8, 16, 32], [1.0, 2.0, 3.9, 4.0])
    assert s["saturated"] and s["plateau_warps"] == 16 and s["peak_warps"] == 32
    s = an.saturation([4, 8, 16, 32], [1.0, 2.0, 4.0, 8.0])
    assert not s["saturated"] and s["plateau_warps"] == 32
    s = an.saturation([4, 8, 16, 32], [4.0, 3.0, 2.0, 1.0])  # contention: more warps, less rate
    assert s["saturated"] and s["plateau_warps"] == 4 and s["peak"] == 4.0


def test_combine_flags_disagreeing_launches():
    assert an.combine([10.0, 10.0, 10.01])["flag"] is None
    assert an.combine([10.0, 14.0, 7.0])["flag"].startswith("noisy")
    assert an.combine([None])["value"] is None


def test_contention_table_text():
    cells = {("atom.add.u32", "one"): {"chip": 132.0, "per_sm": 1.0, "plateau_warps": 4, "saturated": True},
             ("atom.add.u32", "distinct"): {"chip": 4224.0, "per_sm": 32.0, "plateau_warps": 16, "saturated": False}}
    rows = an.contention_table(cells, ["atom.add.u32", "red.add.u32"], ["one", "distinct"])
    assert "132" in rows[2] and "(     1) @4" in rows[2] and "4224" in rows[2] and "@16*" in rows[2]
    assert rows[3].count("-") == 2


# ----------------------------------------------------------------- end to end on a simulated GPU
LD_NEAR, LD_FAR, ATOM_NEAR, ATOM_FAR = 260.0, 300.0, 480.0, 610.0  # planted cycles per step
MODE_RATE = {"one": 0.5, "uniform": 16.0, "warp": 2.0, "block": 1.0, "lane": 4.0, "distinct": 16.0,
             "strided": 8.0, "conflict": 1.0}  # planted lane-ops/clk per SM


def sim_model(nsm: int):
    def model(kernel, grid, block, args, smem):
        warps = block // 32
        m = re.search(r"_n(\d+)$", kernel)
        n = int(m[1]) if m else 0
        times = next((a for a in args if isinstance(a, Buf) and a.name == "times"), None)
        if times is None:
            return {}
        if kernel.startswith("atom_"):
            mode = kernel.split("_")[-2]
            span = 300 + n * warps * 32 / MODE_RATE[mode]
        elif kernel.startswith("lat_g_"):  # planted: every third candidate line in the far partition
            ain = next(a for a in args if isinstance(a, Buf) and a.name == "ain")
            far = (int(ain.data[3]) // sy.PLACE_STRIDE) % 3 == 0
            per = (LD_FAR if far else LD_NEAR) if "ld_cg" in kernel else (ATOM_FAR if far else ATOM_NEAR)
            span = 50 + per * n
        elif kernel.startswith("lat_"):
            span = 50 + 700.0 * n
        elif kernel.startswith("bar_"):
            span = 20 + (10 + 2 * warps) * n
        else:
            span = 30 + 100.0 * n
        t = _times({sm: span for sm in range(grid)}, warps)
        return {"times": t.astype(np.uint64).ravel()}
    return model


def test_suite_end_to_end_on_simulated_gpu(tmp_path):
    nsm = 4
    dev = FakeDevice(sm_count=nsm, launch_model=sim_model(nsm))
    store = Store(tmp_path / "s.db")
    pats = ["atomic:global:atom.add.u32:*", "latency:global:atom.add.u32", "barrier:bar.sync", "fence:membar.gl",
            "launch:grid=1"]
    rid = run(get_suite("sync"), Context(dev, store, TARGET), pats, resume=True).run_id
    rs = {r["variant"]: r for r in store.results(rid)}
    one = rs["atomic:global:atom.add.u32:one"]
    assert one["value"] == pytest.approx(MODE_RATE["one"] * nsm)
    assert one["fit"]["saturated"] and one["fit"]["plateau_warps"] == sy.WARPS[0]
    assert rs["atomic:global:atom.add.u32:distinct"]["value"] == pytest.approx(MODE_RATE["distinct"] * nsm)
    lat = [r for r in store.results(rid) if r["variant"] == "latency:global:atom.add.u32"]
    by = {r["measure"]: r for r in lat}
    assert by["latency"]["value"] == pytest.approx(ATOM_FAR)  # the first line: far in the planted map
    assert by["latency"]["params"]["line_side"] == "far"
    assert by["latency_l2_near"]["value"] == pytest.approx(ATOM_NEAR)
    assert by["latency_l2_far"]["value"] == pytest.approx(ATOM_FAR)
    assert by["latency_l2_far"]["fit"]["side_per_line"].count("far") == len(range(0, sy.PLACE_LINES, 3))
    assert by["latency_l2_near"]["fit"]["atom_agrees_lines"] == sy.PLACE_LINES
    bar = rs["barrier:bar.sync"]["fit"]["sweep"]
    assert bar["4"]["cycles"] == pytest.approx(18.0) and bar["32"]["cycles"] == pytest.approx(74.0)
    assert rs["fence:membar.gl"]["value"] == pytest.approx(100.0)
    assert rs["launch:grid=1:stream"]["value"] is not None
    assert not [f for r in rs.values() for f in r["flags"] if f.startswith(("sass:", "error"))]
    s = summarize(store, rid)
    assert s["atomic"]["global"]["cells"]["atom.add.u32|one"]["chip"] == pytest.approx(2.0)
    assert any("contention table" in c for c in s["conclusions"])
    assert s["latency_l2"]["global:atom.add.u32"] == {"near": pytest.approx(ATOM_NEAR), "far": pytest.approx(ATOM_FAR)}
    assert any("near 480.0, far 610.0" in c for c in s["conclusions"])


def test_placement_without_two_groups_is_unplaced(tmp_path):
    """Lines whose loads all hit at one latency give no near/far values, and say why."""
    def model(kernel, grid, block, args, smem):
        if kernel.startswith("lat_g_"):
            n = int(re.search(r"_n(\d+)$", kernel)[1])
            t = _times({0: 50 + 280.0 * n}, block // 32)
            return {"times": t.astype(np.uint64).ravel()}
        return sim_model(1)(kernel, grid, block, args, smem)
    store = Store(tmp_path / "s.db")
    rid = run(get_suite("sync"), Context(FakeDevice(sm_count=1, launch_model=model), store, TARGET),
              ["latency:global:atom.add.u32"], resume=True).run_id
    by = {r["measure"]: r for r in store.results(rid)}
    assert by["latency"]["value"] == pytest.approx(280.0)
    assert by["latency_l2_near"]["value"] is None and by["latency_l2_far"]["value"] is None
    assert by["latency_l2_near"]["flags"][-1].startswith("unplaced: the ld.global.cg chains")


def test_two_groups_splits_only_at_a_real_gap():
    rng = np.random.default_rng(1)
    near, far = 267 + rng.normal(0, 1.5, 20), 298 + rng.normal(0, 1.5, 12)
    g = an.two_groups([*near, *far])
    assert g["bimodal"] and g["high"] == list(range(20, 32)) and 280 < g["threshold"] < 290
    assert not an.two_groups(list(280 + rng.normal(0, 3, 32)))["bimodal"]  # one group: no split
    assert not an.two_groups([270.0, 300.0, 301.0])["bimodal"]  # too few values to call two groups
    # an H200's loads over 16 lines from one SM (H200 93214692, 2026-11-28): wide groups, a clear gap
    ld = [272, 312, 283, 317, 322, 282, 327, 313, 315, 275, 304, 275, 283, 320, 317, 280]
    g = an.two_groups(ld)
    assert g["bimodal"] and g["high"] == [i for i, v in enumerate(ld) if v > 300]


def test_a_failing_item_does_not_stop_the_suite(tmp_path):
    def model(kernel, grid, block, args, smem):
        if "membar_gl" in kernel:
            raise RuntimeError("CUDA error CUDA_ERROR_ILLEGAL_ADDRESS")
        return sim_model(2)(kernel, grid, block, args, smem)
    dev = FakeDevice(sm_count=2, launch_model=model)
    store = Store(tmp_path / "s.db")
    rid = run(get_suite("sync"), Context(dev, store, TARGET), ["fence:membar.gl", "fence:membar.cta"],
              resume=True).run_id
    rs = {r["variant"]: r for r in store.results(rid)}
    assert rs["fence:membar.gl"]["value"] is None and rs["fence:membar.gl"]["flags"]
    assert rs["fence:membar.cta"]["value"] == pytest.approx(100.0)


def test_bad_pattern_is_refused():
    with pytest.raises(SuiteInputError):
        get_suite("sync").validate(["nosuch:*"], {})


def test_report_section_and_figures(tmp_path):
    from gpudissect.suites.sync import figures, view

    nsm = 4
    dev = FakeDevice(sm_count=nsm, launch_model=sim_model(nsm))
    store = Store(tmp_path / "s.db")
    rid = run(get_suite("sync"), Context(dev, store, TARGET),
              ["atomic:global:red.add.u32:*", "atomic:shared:atom.add.u32:one", "barrier:bar.red.popc",
               "launch:grid=1"], resume=True).run_id
    doc = {"summary": summarize(store, rid), "provenance": {"gpu_name": "sim"}}
    sec = view.report_section(doc, [])
    assert sec["key_tables"][0].key == "sync-atomic-global"
    assert any(t.key == "sync-barriers" for t in sec["tables"])
    paths = figures.figures(doc, tmp_path / "fig")
    assert any(p.name == "sync_atomic_contention.png" for p in paths)


def test_chip_rate_is_set_by_the_slowest_sm():
    # SM 1 gets half SM 0's share of a contended unit: the chip's repetition ends with SM 1
    w, dlen = 4, 32
    units = w * 32 * dlen
    t1 = _times({0: 100.0, 1: 100.0}, w)
    t2 = _times({0: 100.0 + units / 2.0, 1: 100.0 + units / 1.0}, w)
    r = an.chip_rate(t1, t2, w, K.REPS, units)
    assert r["rate"] == pytest.approx(2 * units / units)  # 2 SMs' work over the slow SM's time
    assert r["fairness"] == pytest.approx((100 + units / 2) / (100 + units), rel=1e-3)
    assert an.per_sm_rate(t1, t2, w, K.REPS, units)["rate"] == pytest.approx(1.5)  # the median misleads


def test_atomic_kernels_meet_at_a_grid_rendezvous_outside_the_region():
    e = K.atom_kernel("", "global", "atom.add.u32", "distinct", 8).entry
    assert e.count("red.global.add.u32 [%gcnt], 1;") == 2
    start, end = e.index("mov.u64 %t0, %clock64;"), e.index("mov.u64 %t1, %clock64;")
    assert "%gcnt" not in e[start:end]
