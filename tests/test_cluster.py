"""Cluster suite (issue 18): the kernels assemble and carry the SASS they must; the topology,
residency, latency and rate analyses on synthetic traces with planted answers; the suite end to
end on a simulated GPU with planted GPCs, latencies and a refused size."""

from __future__ import annotations

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context, SuiteInputError
from gpudissect.bench.runner import run
from gpudissect.device.args import Buf
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.build import build_module
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.cluster import analyse as an
from gpudissect.suites.cluster import kernels as kn
from gpudissect.suites.cluster import suite as cs
from gpudissect.suites.cluster.checks import check_region

TARGET = make_target("sm_90")
HEADER = ptx_header(TARGET.ptx_isa, TARGET.arch)


# ----------------------------------------------------------------- kernels and their SASS
@pytest.fixture(scope="module")
def built():
    ks = kn.all_kernels(HEADER)
    out = build_module(ks[1:], TARGET.arch)
    out.update(build_module(ks[:1], TARGET.arch, region=False))
    return out


def test_every_kernel_assembles_with_the_expected_sass(built):
    for name, b in built.items():
        assert not isinstance(b, Exception), f"{name}: {b}"
        assert check_region(b) == [], name
    ops = {i.full for i in built["dsm_chase_n32"].region}
    assert "LD.E" in ops and "LDS" not in ops  # ld.shared::cluster: a generic load via the window
    assert {i.full for i in built["sm_chase_n32"].region} == {"LDS"}
    cbar = [i.full for i in built["cbar_relaxed_n8"].region]
    assert cbar.count("UCGABAR_ARV") == 8 and cbar.count("UCGABAR_WAIT") == 8
    assert "MEMBAR.ALL.GPU" in {i.full for i in built["cbar_default_n8"].region}
    assert "MEMBAR.ALL.GPU" not in set(cbar)
    assert [i.full for i in built["mapa_n32"].region].count("PRMT") == 32
    assert any(i.full == "LD.E.128" for i in built["dsm_ld128_u8"].region)


def test_check_region_flags_a_region_with_foreign_work(built):
    b = built["sm_chase_n32"]
    k = b.kernel
    bad = Kernel("sm_chase_n32", k.header, k.entry.replace("  ld.shared.u32 %p, [%p];",
                                                           "  ld.shared.u32 %p, [%p];\n  mul.lo.u32 %p, %p, %nth;", 1),
                 meta=k.meta)
    b2 = build_module([bad], TARGET.arch)["sm_chase_n32"]
    flags = check_region(b2)
    assert any("besides the work" in f for f in flags)
    short = Kernel("sm_chase_n32", k.header, k.entry.replace("  ld.shared.u32 %p, [%p];\n", "", 1), meta=k.meta)
    assert any("31 instances" in f for f in check_region(build_module([short], TARGET.arch)["sm_chase_n32"]))


# ----------------------------------------------------------------- topology and residency
def test_gpcs_union_find_joins_co_members_only():
    clusters = [[0, 1], [1, 2], [3, 4], [5]]
    assert an.gpcs(clusters, sms=[6]) == [[0, 1, 2], [3, 4], [5], [6]]
    assert an.gpcs([]) == []


def test_resident_clusters_counts_overlapping_cluster_intervals():
    # clusters 0 and 1 run together, 2 starts when 0 ends (touching: not at once), 3 overlaps 2
    cid = np.array([0, 0, 1, 1, 2, 2, 3])
    g0 = np.array([0, 5, 2, 2, 100, 100, 150])
    g1 = np.array([100, 90, 120, 120, 200, 200, 300])
    assert an.resident_clusters(cid, g0, g1) == 2
    assert an.predicted_resident([18, 16, 16], 8) == 6
    assert an.predicted_resident([18, 16, 16], 16) == 3
    assert an.predicted_resident([18, 16, 16], 9) == 4


def test_map_launch_sees_shared_sms_and_ranks():
    sm = np.array([0, 1, 2, 2])
    d = an.map_launch(sm, np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), np.zeros(4), np.ones(4))
    assert not d["distinct_sms"] and d["ranks_ok"] and d["clusters"] == 2


# ----------------------------------------------------------------- latency and rates
def test_pair_latencies_and_distance():
    rows = []
    for src, tgt in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        lat = 30 if src == tgt else 200
        for L in (32, 128):
            for k in range(4):
                rows.append({"src": src, "tgt": tgt, "length": L, "cycles": 50 + L * lat + k, "src_sm": src,
                             "tgt_sm": tgt})
    p = an.pair_latencies(rows, 32, 128)
    assert p[(0, 1)]["latency"] == pytest.approx(200) and p[(1, 1)]["latency"] == pytest.approx(30)
    assert an.distance(p)["matters"] is False
    # plant a slower far pair: distance matters
    rows2 = [dict(r) for r in rows]
    for r in rows2:
        if r["src"] != r["tgt"]:
            r["tgt_sm"] = r["src_sm"] + (1 if r["src"] == 0 else 9)
            if r["src"] == 1:
                r["cycles"] = 50 + r["length"] * 260
    p2 = an.pair_latencies(rows2, 32, 128)
    d2 = an.distance(p2)
    assert d2["matters"] is True and d2["by_sm"]["SM id +-4 or more"]["median"] == pytest.approx(260, abs=0.1)


def test_block_rates_from_two_lengths():
    warps, blocks = 4, 3
    def times(span):
        t = np.zeros((warps * blocks, kn.ROW), np.int64)
        for r in range(kn.REPS):
            t[:, 2 * r] = 1000
            t[:, 2 * r + 1] = 1000 + span
        return t
    rates = an.block_rates(times(500), times(1500), warps, range(1, kn.REPS), 32_000)
    assert rates.shape == (kn.REPS - 1, blocks)
    assert an.median_rate(rates) == pytest.approx(32.0)
    assert an.median_rate(an.block_rates(times(500), times(500), warps, [1], 1)) is None


def test_patterns():
    assert an.pattern_targets("all-to-one", 4) == [0, 0, 0, 0]
    assert an.pattern_targets("pairs", 4) == [1, 0, 3, 2]
    assert an.pattern_targets("ring", 4) == [1, 2, 3, 0]
    with pytest.raises(ValueError, match="unknown pattern"):
        an.pattern_targets("star", 4)


def test_bad_input_and_refusals():
    with pytest.raises(SuiteInputError, match="no cluster probe"):
        get_suite("cluster").validate(["nothing"], {})
    get_suite("cluster").validate(["dsm:bw:ld:*"], {})
    assert cs.refused(RuntimeError("CUDA error CUDA_ERROR_INVALID_CLUSTER_SIZE")).endswith("INVALID_CLUSTER_SIZE")
    assert cs.refused(RuntimeError("faulted: CUDA error CUDA_ERROR_ILLEGAL_ADDRESS")) is None
    assert cs.refused(ValueError("bad argument")) is None


# ----------------------------------------------------------------- the suite on a simulated GPU
GPCS = [[0, 3, 6, 9, 12, 15], [1, 4, 7, 10, 13], [2, 5, 8, 11, 14]]  # planted: 6, 5, 5 SMs
NSM = 16
REMOTE, SELF, PLAIN, DSM_BW = 200, 40, 30, 32.0  # planted cycles and B/clk/SM


class ClusterGPU(FakeDevice):
    grid_in_clusters = True

    """A FakeDevice that keeps the cluster size of each launch for its model (a launch
    without clusters: size 1)."""

    def launch(self, cubin, kernel, grid, block, args, smem=0, launches=1, cluster=None):
        size = 1 if cluster is None else int(np.prod(cluster))
        if size > max(len(g) for g in GPCS):
            raise RuntimeError("CUDA error CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES")
        self.size = size
        return super().launch(cubin, kernel, grid, block, args, smem, launches, cluster)


def _place(nclusters: int, size: int, spins: np.ndarray):
    """Clusters in order onto the first GPC with ``size`` free SMs (earliest), one CTA per SM."""
    free = {s: 0 for g in GPCS for s in g}
    out = []
    for c in range(nclusters):
        best = None
        for g in GPCS:
            if len(g) < size:
                continue
            t = sorted(free[s] for s in g)[size - 1]
            sms = sorted(g, key=lambda s: free[s])[:size]
            if best is None or t < best[0]:
                best = (t, sms)
        t, sms = best
        for s in sms:
            free[s] = t + int(spins[c]) + 10
        out.append((t, sms))
    return out


def model_for(dev: ClusterGPU):
    def model(kernel, grid, block, args, smem):
        S = dev.size
        bufs = {a.name: a for a in args if isinstance(a, Buf)}
        if dev.grid_in_clusters:  # a cluster launch's grid counts clusters (cuda-core), else blocks
            grid *= S
        if kernel == "cl_map":
            ncl = grid // S
            spins = bufs["spin"].data if bufs["spin"].data is not None else np.zeros(ncl, np.uint32)
            rec = np.zeros((grid, kn.MAP_WORDS), np.uint64)
            for c, (t, sms) in enumerate(_place(ncl, S, spins)):
                for r, s in enumerate(sms):
                    rec[c * S + r] = [t + 1000, t + 1000 + int(spins[c]), 0, s, r, c, ncl, c * S + r]
            return {"rec": rec.reshape(-1)}
        warps = block // 32
        tg = bufs["tgt"].data
        placed = _place(grid // S, S, np.full(grid // S, 1, np.uint32))
        ids = np.zeros((grid, kn.IDS), np.uint64)
        span = np.zeros(grid)
        for blk in range(grid):
            c, r = divmod(blk, S)
            t = int(tg[r])
            ids[blk] = [r, t, placed[c][1][r], 0]
            n = int(kernel.rsplit("_", 1)[1][1:])
            if kernel.startswith("dsm_chase") or kernel.startswith("dsm_atomlat"):
                span[blk] = 50 + n * (SELF if r == t else REMOTE)
            elif kernel.startswith("sm_chase"):
                span[blk] = 50 + n * PLAIN
            elif kernel.startswith("mapa"):
                span[blk] = 20 + 2 * n
            elif kernel.startswith("cbar"):
                span[blk] = 50 + n * (100 + 10 * S)
            else:  # bandwidth / atomics: a rate that saturates at 8 warps
                bits = int(kernel.split("_")[1][2:]) if kernel.startswith(("dsm_ld", "dsm_st")) else 32
                work = warps * 32 * n * bits / 8
                span[blk] = 100 + work / (DSM_BW * min(warps, 8) / 8)
        times = np.zeros((grid * warps, kn.ROW), np.uint64)
        for rep in range(kn.REPS):
            times[:, 2 * rep] = 1000 * (rep + 1)
            times[:, 2 * rep + 1] = 1000 * (rep + 1) + np.repeat(span, warps).astype(np.uint64)
        return {"times": times.reshape(-1), "ids": ids.reshape(-1)}

    return model


@pytest.mark.parametrize("in_clusters", [True, False])
def test_suite_end_to_end_on_simulated_gpu(tmp_path, monkeypatch, in_clusters):
    monkeypatch.setattr(cs, "sizes_tried", lambda facts: [1, 2, 3, 4, 5, 6, 7])
    dev = ClusterGPU(sm_count=NSM)
    dev.grid_in_clusters = in_clusters
    dev.launch_model = model_for(dev)
    store = Store(tmp_path / "c.db")
    pats = ["map", "dsm:latency:size=2", "dsm:latency:size=3", "dsm:latency:size=7", "dsm:latency:local", "dsm:bw:ld:ring:128",
            "dsm:bw:st:all-to-one:32", "mapa", "barrier:relaxed"]
    rid = run(get_suite("cluster"), Context(dev, store, TARGET), pats, resume=True).run_id
    s = store.get_meta(f"summary:{rid}")
    assert sorted(map(sorted, s["topology"]["gpcs"])) == sorted(map(sorted, GPCS))
    res = s["residency"]
    assert res["2"]["resident"] == 3 + 2 + 2 == res["2"]["predicted_from_gpcs"]
    assert res["6"]["resident"] == 1
    assert "CLUSTER_OUT_OF_RESOURCES" in res["7"]["refused"]
    lat = s["dsm_latency"]
    assert lat["sizes"]["3"]["remote_median"] == pytest.approx(REMOTE)
    assert lat["sizes"]["3"]["self_window"] == pytest.approx(SELF)
    assert lat["plain_ld_shared"] == pytest.approx(PLAIN)
    assert lat["sizes"]["3"]["distance"]["matters"] is False
    bw = s["dsm_bandwidth"]["dsm:bw:ld:ring:128"]
    assert bw["value"] == pytest.approx(DSM_BW, rel=1e-3) and bw["saturated"]
    assert s["mapa"] == pytest.approx(2.0)
    assert s["barrier"]["relaxed"]["3"] == pytest.approx(130)
    assert any(c.startswith("topology:") for c in s["conclusions"])
    big = next(r for r in store.results(rid) if r["variant"] == "dsm:latency:size=7")
    assert big["value"] is None and big["flags"][0].startswith("refused: ") and "OUT_OF_RESOURCES" in big["flags"][0]
    grid = {r["params"]["grid_counts"] for r in store.results(rid)}
    assert grid == {"clusters" if in_clusters else "blocks"}
    # the report parts: the figure and the view
    from gpudissect.store.export import suite_document
    from gpudissect.suites.cluster.figures import figures
    from gpudissect.suites.cluster.view import report_section

    doc = suite_document(store, rid)
    stems = {p.stem for p in figures(doc, tmp_path / "fig")}
    assert {"cluster_topology", "cluster_dsm_latency"} <= stems
    sec = report_section(doc, None)
    assert sec["key_tables"] and len(sec["tables"]) == 3


def test_sweep_value_takes_the_most_warps_and_refuses_what_breaks_the_bound():
    v = an.sweep_value([64.0, 40.0, 20.2, 20.6, 20.3], 128)  # posted stores: a burst, then the sustained rate
    assert v["value"] == 20.3 and v["saturated"] and v["flags"] == []
    v = an.sweep_value([60.0, 110.0, 122.7, 134.6], 128)
    assert v["value"] is None and any(f.startswith("above-limit") for f in v["flags"])
    assert any(f.startswith("unsaturated") for f in v["flags"]) and v["measured_at_most_warps"] == 134.6
    assert an.readers_per_target(np.array([0, 1, 2, 3]), np.array([0, 0, 0, 0])) == 3
    assert an.readers_per_target(np.array([0, 1]), np.array([0, 1])) == 1


def test_the_gpc_statement_never_calls_sets_gpcs():
    """Issue 33: 12 sets against a documented 8 GPCs. The statement says what the data prove: the sets
    with the largest clusters, the left-over SMs and whether they act as one GPC (residency)."""
    from gpudissect.suites.cluster import analyse as an

    sizes, largest = [18, 18, 16, 16, 16, 16, 16, 8, 2, 2, 2, 2], [16] * 7 + [8, 2, 2, 2, 2]
    held = {s: an.predicted_resident(sizes, s) for s in range(1, 17)}  # as measured on an H200
    text = an.gpc_statement(sizes, largest, held)
    assert "the sets are not GPCs" in text and "7 sets of [16, 18] SMs hosted clusters of 16" in text
    assert "16 SMs in 5 sets" in text and "they do not act as one GPC for clusters of 16" in text
    assert "not determined by these data (12 at most)" in text
    # had the run held 8 clusters of 16, nothing would say the left-over SMs are not one GPC
    merged = [*sizes[:7], 16]
    as_one = {s: an.predicted_resident(merged, s) for s in range(1, 17)}
    assert "do not act as one GPC" not in an.gpc_statement(sizes, largest, as_one)
    assert an.gpc_statement([16, 16], [16, 16], {16: 2}).endswith("(the largest placed).")
