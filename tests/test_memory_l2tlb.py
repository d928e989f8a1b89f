"""GPU-free tests of the memory suite's L2 partition model, per-SM L2 map, TLB study, line
size, repeated sweep points and the spread-derived step threshold: synthetic data with known
answers, and the suite end to end on a FakeDevice whose hierarchy has two L2 partitions, a
TLB of known reach and a known line size."""

from __future__ import annotations

import numpy as np
import pytest

from gpudissect.bench.staircase import detect, pooled_spread, spread_threshold
from gpudissect.bench.stats import noise_flag
from gpudissect.device.device import FakeDevice
from gpudissect.suites.memory import analyse as am
from gpudissect.suites.memory import kernels as gm

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


# --- a two-level L2 staircase (near/far partition) ------------------------------------------

NEAR, FAR, TOTAL = 24 * MiB, 48 * MiB, 48 * MiB  # the near level ends at 24 MiB, the L2 at 48


def _two_level(f: float) -> float:
    if f <= 200 * KiB:
        return 32.0
    if f <= NEAR:
        return 270.0
    if f <= FAR:
        return 520.0
    return 680.0


def _sweep_records(variant: str, xs, fn, noise=0.0, seed=0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for x in xs:
        reps = [fn(x) * (1 + noise * rng.standard_normal()) for _ in range(3)]
        out.append({"variant": variant, "measure": "latency_vs_footprint", "value": float(np.median(reps)),
                    "params": {"footprint": int(x)}, "samples": reps, "flags": []})
    return out


def _xs(lo=4096, hi=256 * MiB, per_octave=4):
    n = int(np.log2(hi / lo) * per_octave) + 1
    return sorted({int(lo * 2 ** (i / per_octave)) // 64 * 64 for i in range(n)})


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_two_level_l2_staircase_gives_near_far_sizes_latencies_and_total(noise):
    recs = _sweep_records("sweep/ca-strided", _xs(), _two_level, noise)
    s = am.summarize(recs + [{"variant": "device/l2_size_reported", "measure": "l2_cache_size",
                              "value": float(50 * MiB), "params": {}, "flags": []}])
    l2 = s["l2"]
    names = [lv["name"] for lv in l2["levels"]]
    assert names == ["L2 near", "L2 far"]
    near, far = l2["levels"]
    assert near["latency_cycles"] == pytest.approx(270, rel=0.03)
    assert far["latency_cycles"] == pytest.approx(520, rel=0.03)
    # the size: the midpoint crossing, inside [last point on the level, first on the next]
    for size, lv, br in ((NEAR, near["bytes"], near["bracket"]),
                         (TOTAL, l2["capacity_bytes"], l2["capacity_bracket"])):
        assert br[0] <= size < br[1] <= 1.3 * size and br[0] >= 0.75 * size
        assert br[0] <= lv <= br[1] and lv == pytest.approx(size, rel=0.2)
    assert l2["dram_cycles"] == pytest.approx(680, rel=0.03)
    assert l2["near_fraction"] == pytest.approx(NEAR / TOTAL, rel=0.25)
    # within the (synthetic) driver figure, and compared with it
    assert l2["within_reported"] and l2["capacity_over_reported"] < 1
    # the sizes the report and later items read: L2 = the whole L2, L2_near its first level
    assert s["sizes"]["L2"]["bytes"] == l2["capacity_bytes"]
    assert s["sizes"]["L2_near"]["bytes"] == near["bytes"]
    assert s["sizes"]["L2"]["levels_cycles"][1] == pytest.approx(680, rel=0.03)  # device memory
    pen = {p["miss"]: p["cycles"] for p in l2["miss_penalties"]}
    assert pen["L1"] == pytest.approx(270 - 32, rel=0.05)
    assert pen["L2 near"] == pytest.approx(250, rel=0.05)
    assert pen["L2 far"] == pytest.approx(160, rel=0.1)
    assert any("L2 partitions" in c for c in s["conclusions"])


def test_capacity_above_the_reported_size_is_not_within():
    recs = _sweep_records("sweep/cg-random", _xs(), _two_level)
    l2 = am.summarize(recs + [{"variant": "device/l2_size_reported", "measure": "l2_cache_size",
                               "value": float(32 * MiB), "params": {}, "flags": []}])["l2"]
    assert not l2["within_reported"] and l2["capacity_over_reported"] > 1


def test_one_level_l2_is_not_split():
    def one(f):
        return 32.0 if f <= 200 * KiB else 270.0 if f <= 40 * MiB else 680.0
    l2 = am.summarize(_sweep_records("sweep/ca-strided", _xs(), one))["l2"]
    assert [lv["name"] for lv in l2["levels"]] == ["L2"]
    lo, hi = l2["capacity_bracket"]
    assert lo <= 40 * MiB < hi and lo <= l2["capacity_bytes"] <= hi


# --- the per-SM L2 map ---------------------------------------------------------------------

def _matrix(n_sm=132, n_line=64, near=262.0, far=290.0, noise=1.5, by_address=True, seed=3):
    rng = np.random.default_rng(seed)
    side = rng.permutation(np.arange(n_sm) % 2)  # 66 / 66
    home = rng.permutation(np.arange(n_line) % 2) if by_address else np.zeros(n_line, dtype=int)
    m = np.where(side[:, None] == home[None, :], near, far) + noise * rng.standard_normal((n_sm, n_line))
    return list(range(n_sm)), m.tolist(), side, home


def test_partition_map_finds_the_sm_split_and_near_far_latencies():
    sms, m, side, home = _matrix()
    p = am.partition_map(sms, m)
    assert p["split"] and p["address_dependent"]
    assert sorted([len(p["side_a"]), len(p["side_b"])]) == [66, 66]
    a = set(p["side_a"])
    assert a == {s for s in sms if side[s] == side[p["side_a"][0]]}  # the true groups
    assert p["near_cycles"] == pytest.approx(262, abs=1)
    assert p["far_cycles"] == pytest.approx(290, abs=1)
    assert p["lines_near_a"] + p["lines_near_b"] == 64 and p["agreement"] > 0.99
    assert sorted(p["sm_order"]) == sms and sorted(p["line_order"]) == list(range(64))


def test_partition_map_uneven_split_and_missing_cells():
    sms, m, side, _ = _matrix(n_sm=100, seed=5)
    sides = np.array([1] * 70 + [0] * 30)
    rng = np.random.default_rng(1)
    home = rng.permutation(np.arange(40) % 2)
    m = np.where(sides[:, None] == home[None, :], 250.0, 300.0)[:, :40].tolist()
    m[3][7] = None
    p = am.partition_map(list(range(100)), m)
    assert p["split"] and sorted([len(p["side_a"]), len(p["side_b"])]) == [30, 70]
    assert len(p["side_a"]) == 70  # side A is the larger group


def test_partition_map_tells_a_position_effect_from_partitions():
    sms, m, _, _ = _matrix(by_address=False)
    p = am.partition_map(sms, m)
    assert p["split"] and not p["address_dependent"]
    assert any("position" in c for c in am._map_conclusions(p))


def test_partition_map_flat_matrix_has_no_split():
    rng = np.random.default_rng(0)
    m = (270 + rng.standard_normal((132, 32))).tolist()
    p = am.partition_map(list(range(132)), m)
    assert not p["split"] and "why" in p


# --- the TLB study ------------------------------------------------------------------------

def _tlb_records(stride: int, fn, top=64 * GiB, noise=0.002, seed=0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    n = 2
    pages = set()
    while n * stride <= top:
        pages.add(int(n))
        n = int(round(n * 2 ** 0.5)) if n > 2 else 3
    for n in sorted(pages):
        reps = [fn(n, stride) * (1 + noise * rng.standard_normal()) for _ in range(3)]
        out.append({"variant": f"tlb/{am.human(stride).replace(' ', '')}", "measure": "latency_vs_pages",
                    "value": float(np.median(reps)), "samples": reps, "flags": [],
                    "params": {"pages": n, "page_stride": stride, "footprint": n * stride}})
    return out


def test_tlb_step_at_a_known_reach_with_threshold_from_the_spread():
    entries, cost = 64, 12.0  # a small step (4 %): above 5 x a 0.2 % spread, below the old 12 %

    def lat(n, stride):
        return 280.0 + (cost if n > entries else 0.0)
    recs = sum((_tlb_records(s, lat, seed=i) for i, s in enumerate((2 * MiB, 32 * MiB))), [])
    t = am.tlb_study(recs)
    assert not t.get("hidden") and len(t["steps"]) == 1
    lv = t["steps"][0]
    assert lv["entries"] == pytest.approx(entries, rel=0.3) and lv["entries"] <= entries
    assert 0.7 * entries * 2 * MiB <= lv["reach_bytes"] <= entries * 2 * MiB
    assert lv["miss_cycles"] == pytest.approx(cost, rel=0.2)
    ser = t["series"]["tlb/2MiB"]
    assert ser["threshold_rel"] < 0.04 < 0.12  # the threshold came from the spread
    # the fixed 12 % threshold would have merged the levels
    xs = [r["params"]["footprint"] for r in recs if r["variant"] == "tlb/2MiB"]
    ys = [r["value"] for r in recs if r["variant"] == "tlb/2MiB"]
    assert detect(xs, ys)[1] == []


def test_flat_tlb_series_reads_hidden_with_evidence():
    recs = sum((_tlb_records(s, lambda n, st: 280.0, seed=i) for i, s in enumerate((2 * MiB, 512 * MiB))), [])
    t = am.tlb_study(recs)
    assert t["hidden"] and t["steps"] == []
    assert "no translation step" in t["note"]
    ev = t["evidence"]["2 MiB"]
    top = max(r["params"]["pages"] for r in recs if r["variant"] == "tlb/2MiB")
    assert ev["pages_max"] == top > 16384 and ev["range_rel"] < ev["threshold_rel"]


def test_noisy_tlb_series_sets_a_higher_threshold():
    def lat(n, stride):
        return 280.0 + (5.0 if n > 64 else 0.0)  # 1.8 % step
    quiet = am.tlb_study(_tlb_records(2 * MiB, lat, noise=0.001))
    loud = am.tlb_study(_tlb_records(2 * MiB, lat, noise=0.02))
    assert quiet["series"]["tlb/2MiB"]["threshold_rel"] < loud["series"]["tlb/2MiB"]["threshold_rel"]
    assert len(quiet["steps"]) == 1 and loud.get("hidden")


# --- spread, thresholds and noise flags --------------------------------------------------

def test_constant_series_is_never_noisy():
    assert noise_flag([300.0, 300.0, 300.0]) is None
    assert noise_flag([5.0] * 10) is None
    assert pooled_spread([[300.0] * 3, [280.0] * 3]) == 0.0
    assert spread_threshold([[300.0] * 3]) == pytest.approx(0.005)  # the floor


def test_spread_threshold_scales_with_the_repeats():
    rng = np.random.default_rng(0)
    tight = [list(300 * (1 + 0.001 * rng.standard_normal(3))) for _ in range(20)]
    wide = [list(300 * (1 + 0.01 * rng.standard_normal(3))) for _ in range(20)]
    assert spread_threshold(wide) > 3 * spread_threshold(tight)
    assert noise_flag([300, 330, 270, 310, 290]) is not None


# --- line size against fill granularity ---------------------------------------------------

def test_line_size_from_capacity_against_spacing():
    line, cap = 128, 256 * KiB

    def series(sp, ref=False):
        def lat(f):
            occupied = f * min(1.0, line / sp)  # one line allocated per node when sp > line
            return 32.0 if occupied <= cap else 280.0
        recs = _sweep_records(f"line/L1@{sp}", _xs(64 * KiB, 4 * MiB, 6), lat)
        for r in recs:
            r["params"].update(spacing=sp, reference=ref)
        return recs
    recs = series(32, ref=True) + series(192) + series(768)
    out = am.cache_lines(recs, {})
    assert out["L1"]["bytes"] == line
    assert out["L1"]["estimate"] == pytest.approx(line, rel=0.25)
    # a line at least as wide as every spacing: not resolved, said so
    same = series(32, ref=True) + [dict(r, variant=r["variant"].replace("@32", "@192"),
                                        params={**r["params"], "spacing": 192, "reference": False})
                                   for r in series(32)]
    assert am.cache_lines(same, {})["L1"]["bytes"] is None


# --- the page chain -----------------------------------------------------------------------

def test_page_chain_layout():
    o = gm.page_chain_offsets(10, 4 * MiB, 2 * MiB, 8, seed=2, shift=128)
    assert o[0] == 0 and o.size == 80 and np.unique(o).size == 80
    pages = o // (4 * MiB)
    assert set(pages.tolist()) == set(range(10))
    assert ((o % (4 * MiB)) < 2 * MiB).all() and (o % 64 == 0).all()
    # one fixed page order per round: the distance between two visits of a page is 10 nodes
    assert all(pages[i] == pages[i + 10] for i in range(70))
    assert sorted(pages[:10].tolist()) == list(range(10))
    gm.offset_chain(o, 10 * 4 * MiB)
    with pytest.raises(gm.ChainError):
        gm.offset_chain(o, 10 * 4 * MiB, limit=MiB)
    with pytest.raises(gm.ChainError):
        gm.offset_chain(np.array([0, 8, 8]), 4096)
    with pytest.raises(gm.ChainError):
        gm.offset_chain(np.array([8, 0]), 4096)
    with pytest.raises(gm.ChainError):
        gm.page_chain_offsets(4, MiB, 2 * MiB, 1)  # stride below the region


# --- the suite end to end on a fake two-partition hierarchy --------------------------------

class TwoPartitionGPU:
    """L1 192 KiB (30 cycles), L2 near 24 MiB (260), far to 48 MiB (520), DRAM 700; 128-byte
    lines (capacity by lines), 32-byte fill; a TLB of 32 entries per 2 MiB page (+40 cycles);
    per-SM map: SM parity against line parity (near 250 / far 290)."""

    L1, NEAR, TOTAL, LINE, TLB = 192 * KiB, 24 * MiB, 48 * MiB, 128, 32

    def __init__(self):
        self.footprint, self.spacing, self.pages = 4096, 64, 0

    def _lat(self, kernel: str, warm: int) -> float:
        if warm == 0:  # a cold strided pass: a miss brings 32 bytes
            hit, miss = (30, 260) if kernel == "chase_ca" else (260, 700)
            return hit + (miss - hit) * min(1.0, self.spacing / 32)
        if self.pages:
            return 260.0 + (40.0 if self.pages > self.TLB else 0.0)
        occ = self.footprint * min(1.0, self.LINE / self.spacing)
        if kernel == "chase_ca" and occ <= self.L1:
            return 30.0
        return 260.0 if occ <= self.NEAR else 520.0 if occ <= self.TOTAL else 700.0

    def __call__(self, kernel, grid, block, args, smem):
        if kernel == "scatter":
            self.footprint, self.spacing, self.pages = args[0].nbytes, int(args[3]), 0
            return {}
        if kernel == "link":
            offs = args[1].data.astype(np.int64)
            self.pages = int(np.unique(offs // (2 * MiB)).size)
            return {}
        out = np.zeros(3 * grid, dtype=np.uint64)
        if kernel == "l2probe":
            lines = args[4].data.astype(np.int64) // 128
            sm = np.arange(grid)
            lat = np.where(sm % 2 == lines % 2, 250, 290)
            out[0::3] = (lat * int(args[3]) * gm.UNROLL).astype(np.uint64)
            out[2::3] = sm
            return {"out": out}
        if kernel.startswith("chase"):
            warm, iters = int(args[2]), int(args[3])
            out[0::3] = int(self._lat(kernel, warm) * iters * gm.UNROLL)
            out[2::3] = np.arange(grid)
            return {"out": out}
        return {"_gpu_ms": [1.0]}


def test_suite_models_two_partitions_tlb_and_line_on_a_fake_device(tmp_path):
    from gpudissect.arch.target import make_target
    from gpudissect.bench.contract import Context
    from gpudissect.bench.runner import run
    from gpudissect.store.db import Store
    from gpudissect.store.export import suite_document
    from gpudissect.suites import get_suite
    from gpudissect.suites.memory.figures import figures
    from gpudissect.suites.memory.plan import Plan

    plan = Plan(sweep_max=256 * MiB, per_octave=2, refine=3, refine_per_octave=6, max_nodes=1 << 22,
                warm_cap=1 << 22, strides=(8, 16, 32, 64, 128, 256), const_footprints=(2048,),
                tlb_strides=(2 * MiB, 32 * MiB), l2map_lines=16, l2map_reps=2)
    dev = FakeDevice(launch_model=TwoPartitionGPU(), sm_count=8, free_bytes=8 << 30)
    store = Store(tmp_path / "m.db")
    ctx = Context(dev, store, make_target("sm_90"), options={"plan": plan})
    patterns = ["latency/ld.global.ca", "stride/*", "sweep/ca-strided", "sweep/cg-random", "tlb",
                "line/*", "l2map"]
    run_id = run(get_suite("memory"), ctx, patterns).run_id
    doc = suite_document(store, run_id)
    s = doc["summary"]
    # repeated points: every sweep point holds its launches
    pts = [r for r in doc["records"] if r["variant"].startswith("sweep/") and r["value"] is not None]
    assert pts and all(len(r["samples"]) == plan.sweep_launches for r in pts)
    assert all(not any(f.startswith("noisy") for f in r["flags"]) for r in pts)  # constant: never noisy
    l2 = s["l2"]
    # the planted staircase's last level (520) is above every hit of the planted map (250/290)
    assert [lv["name"] for lv in l2["levels"]] == ["L2 near", am.BEYOND]
    assert l2["placement"]["first"]["where"] == "near" and l2["placement"]["last"]["where"] == "above"
    assert any("not a plain hit of either partition" in c for c in s["conclusions"])
    near, far = l2["levels"]
    assert near["latency_cycles"] == pytest.approx(260) and far["latency_cycles"] == pytest.approx(520)
    assert near["bracket"][0] <= 24 * MiB < near["bracket"][1] <= 1.3 * 24 * MiB
    assert l2["capacity_bracket"][0] <= 48 * MiB < l2["capacity_bracket"][1] <= 1.3 * 48 * MiB
    assert near["bytes"] == pytest.approx(24 * MiB, rel=0.2)
    assert l2["capacity_bytes"] == pytest.approx(48 * MiB, rel=0.2)
    assert s["l2map"]["split"] and s["l2map"]["address_dependent"]
    assert sorted([len(s["l2map"]["side_a"]), len(s["l2map"]["side_b"])]) == [4, 4]
    assert s["l2map"]["near_cycles"] == pytest.approx(250) and s["l2map"]["far_cycles"] == pytest.approx(290)
    t = s["tlb"]
    assert len(t["steps"]) == 1 and t["steps"][0]["miss_cycles"] == pytest.approx(40)
    assert 16 * 2 * MiB <= t["steps"][0]["reach_bytes"] <= 32 * 2 * MiB
    assert s["fill_granularity"]["L1"]["bytes"] == 32  # the sector fill, not the line
    assert s["cache_lines"]["L1"]["bytes"] == 128
    assert s["cache_lines"]["L2"]["bytes"] == 128
    names = {p.name for p in figures(doc, tmp_path / "fig")}
    assert {"memory_l2_map.png", "memory_tlb.png", "memory_staircase.png"} <= names


def test_staircase_levels_are_named_against_the_per_sm_map():
    """A plateau below the map's near hit is an L1/L2 mixture; a first level between the near and
    far hits is the hit averaged over both partitions (issue 33: an H200 'L2 near' of 197 cycles)."""
    l2 = {"levels": [{"name": "L2 near", "latency_cycles": 282.0, "from_bytes": 1 << 20},
                     {"name": "L2 level 2", "latency_cycles": 353.0, "from_bytes": 24 << 20},
                     {"name": "L2 far", "latency_cycles": 513.0, "from_bytes": 32 << 20}],
          "crosscheck": {"sweep/ca-random": {"levels": [("L2 near", 197.0, 1 << 18), ("L2 level 2", 273.0, 1 << 24)]}},
          "dram_cycles": 661.0, "reported_bytes": 60 << 20}
    am._name_by_placement(l2, near=267.0, far=298.0)
    assert [lv["name"] for lv in l2["levels"]] == [am.BOTH, "L2 level 2", am.BEYOND]
    assert l2["crosscheck"]["sweep/ca-random"]["levels"][0][0].startswith("L1/L2 mixture")
    text = " ".join(am._placement_conclusions(l2))
    assert "between the per-SM map's near (267) and far (298)" in text and "not established" in text
    l2 = {"levels": [{"name": "L2 near", "latency_cycles": 268.0, "from_bytes": 1 << 20},
                     {"name": "L2 far", "latency_cycles": 299.0, "from_bytes": 24 << 20}], "dram_cycles": 600.0}
    am._name_by_placement(l2, near=267.0, far=298.0)  # plain near and far hits keep their names
    assert [lv["name"] for lv in l2["levels"]] == ["L2 near", "L2 far"]
