"""The cluster suite's analyses, GPU-free (synthetic traces in the tests): GPCs from cluster
co-membership, clusters resident at once, chain latencies from two lengths, per-block rates
from two region lengths, the role of distance in remote latency."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpudissect.bench.stats import max_concurrency, robust_halfwidth, saturation

DISTANCE_TOL = 0.05  # groups of remote latency that differ by less than this share are alike
DISTANCE_MIN_CYCLES = 3.0  # ... or by fewer cycles than this


# ----------------------------------------------------------------- topology
def gpcs(clusters: Iterable[Iterable[int]], sms: Iterable[int] = ()) -> list[list[int]]:
    """Sets of SMs that ever shared a cluster (union-find over co-membership; a cluster never
    spans two GPCs, so each set lies inside one GPC, and sets that clusters of many sizes and
    placements joined are the GPCs). ``sms``: SMs seen alone (size 1) that stay their own set
    unless a cluster joins them. Largest first, then by lowest SM."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s in sms:
        find(int(s))
    for c in clusters:
        c = [int(x) for x in c]
        if not c:
            continue
        r = find(c[0])
        for x in c[1:]:
            rx = find(x)
            if rx != r:
                parent[rx] = r
    groups: dict[int, list[int]] = {}
    for x in parent:
        groups.setdefault(find(x), []).append(x)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: (-len(g), g[0]))


def cluster_members(smid: np.ndarray, cid: np.ndarray) -> dict[int, list[int]]:
    """Cluster id -> the SMs of its CTAs (one launch)."""
    out: dict[int, list[int]] = {}
    for s, c in zip(smid.tolist(), cid.tolist(), strict=True):
        out.setdefault(int(c), []).append(int(s))
    return out


def resident_clusters(cid: np.ndarray, g0: np.ndarray, g1: np.ndarray) -> int:
    """Clusters running at once: the most cluster intervals [first CTA start, last CTA end)
    open together (%globaltimer)."""
    ids = np.unique(cid)
    inv = np.searchsorted(ids, cid)
    start = np.full(len(ids), np.iinfo(np.int64).max)
    end = np.full(len(ids), np.iinfo(np.int64).min)
    np.minimum.at(start, inv, g0.astype(np.int64))
    np.maximum.at(end, inv, g1.astype(np.int64))
    return max_concurrency(start, end)


def predicted_resident(gpc_sizes: list[int], size: int, per_sm: int = 1) -> int:
    """Clusters of ``size`` CTAs that GPCs of these SM counts hold at once, ``per_sm`` CTAs per
    SM (a cluster lies inside one GPC)."""
    return int(sum((n * per_sm) // size for n in gpc_sizes))


def map_launch(smid: np.ndarray, rank: np.ndarray, cid: np.ndarray, g0: np.ndarray, g1: np.ndarray) -> dict:
    """One launch of the placement kernel: clusters resident at once, whether every cluster's
    CTAs sat on distinct SMs, the SMs used, the start spread of the first wave."""
    mem = cluster_members(smid, cid)
    distinct = all(len(set(v)) == len(v) for v in mem.values())
    ranks_ok = all(sorted(rank[cid == c].tolist()) == list(range(int((cid == c).sum()))) for c in list(mem)[:64])
    return {"resident": resident_clusters(cid, g0, g1), "clusters": len(mem), "distinct_sms": distinct,
            "ranks_ok": ranks_ok, "sms_used": sorted({int(s) for s in smid.tolist()}),
            "start_spread_ns": int(np.sort(g0)[min(len(g0) - 1, len(mem))] - g0.min()) if len(g0) else 0}


# ----------------------------------------------------------------- latency
def chain_latency(c1: np.ndarray, c2: np.ndarray, l1: int, l2: int) -> float | None:
    """Cycles per chain step: the difference of the median region at two chain lengths; None
    when there is nothing to compare or the longer chain is not slower (no physical latency:
    the method failed, never a value)."""
    if len(c1) == 0 or len(c2) == 0 or l2 == l1:
        return None
    lat = float(np.median(c2) - np.median(c1)) / (l2 - l1)
    return lat if lat > 0 else None


def pair_latencies(rows: list[dict], l1: int, l2: int) -> dict[tuple[int, int], dict]:
    """``rows``: per block and kept repetition {src, tgt, length, cycles, src_sm, tgt_sm}; per
    (src rank, tgt rank): the latency (slope of medians), and per block of the longer length
    its own latency against the pair's median at the shorter one (with its SMs: distance)."""
    by: dict[tuple[int, int], dict[int, list]] = {}
    for r in rows:
        by.setdefault((r["src"], r["tgt"]), {}).setdefault(r["length"], []).append(r)
    out = {}
    for k, d in by.items():
        a = np.array([r["cycles"] for r in d.get(l1, [])], dtype=float)
        b = np.array([r["cycles"] for r in d.get(l2, [])], dtype=float)
        lat = chain_latency(a, b, l1, l2)
        if lat is None:
            continue
        base = float(np.median(a))
        per = [{"lat": round((r["cycles"] - base) / (l2 - l1), 3), "src_sm": r["src_sm"], "tgt_sm": r["tgt_sm"]}
               for r in d[l2]]
        out[k] = {"latency": round(lat, 3), "n": len(b), "hw": round(robust_halfwidth([p["lat"] for p in per]), 3),
                  "blocks": per}
    return out


def pair_halfwidth(lats: list[float]) -> float:
    """The 95% half-width of the median of one pair's per-block latencies."""
    return round(robust_halfwidth(lats), 3)


def relation(src_sm: int, tgt_sm: int) -> str:
    """How two SMs relate by id: the same SM, neighbours (ids differ by one), or farther."""
    d = abs(int(src_sm) - int(tgt_sm))
    return "same SM" if d == 0 else ("SM id +-1" if d == 1 else "SM id +-2..3" if d <= 3 else "SM id +-4 or more")


def distance(pairs: dict[tuple[int, int], dict]) -> dict:
    """Remote latency (src != tgt) grouped by rank distance and by SM-id relation of the two
    CTAs: medians per group, and whether the groups differ (by more than DISTANCE_TOL of the
    median and DISTANCE_MIN_CYCLES)."""
    by_rank: dict[int, list[float]] = {}
    by_sm: dict[str, list[float]] = {}
    for (s, t), d in pairs.items():
        if s == t:
            continue
        by_rank.setdefault(abs(s - t), []).append(d["latency"])
        for b in d["blocks"]:
            by_sm.setdefault(relation(b["src_sm"], b["tgt_sm"]), []).append(b["lat"])
    med_rank = {k: round(float(np.median(v)), 2) for k, v in sorted(by_rank.items())}
    med_sm = {k: {"median": round(float(np.median(v)), 2), "n": len(v)} for k, v in sorted(by_sm.items())}
    vals = [v["median"] for v in med_sm.values() if v["n"] >= 3] or list(med_rank.values())
    if not vals:
        return {"by_rank_distance": med_rank, "by_sm": med_sm, "matters": None}
    lo, hi = min(vals), max(vals)
    mid = float(np.median(vals))
    matters = (hi - lo) > max(DISTANCE_TOL * mid, DISTANCE_MIN_CYCLES)
    return {"by_rank_distance": med_rank, "by_sm": med_sm, "matters": bool(matters),
            "spread_cycles": round(hi - lo, 2)}


# ----------------------------------------------------------------- throughput
def block_spans(times: np.ndarray, warps: int, rep: int) -> np.ndarray:
    """Per block (``warps`` consecutive rows, one SM): cycles from its first warp's start to its
    last warp's end in repetition ``rep``."""
    t0 = times[:, 2 * rep].astype(np.int64).reshape(-1, warps)
    t1 = times[:, 2 * rep + 1].astype(np.int64).reshape(-1, warps)
    return (t1.max(1) - t0.min(1)).astype(float)


def block_rates(t_short: np.ndarray, t_long: np.ndarray, warps: int, reps: Iterable[int], units: float) -> np.ndarray:
    """Rates per (kept repetition, block): ``units`` (the work the longer region adds per
    block) over the difference of the block's spans at the two lengths; NaN where the longer
    one is not longer. Shape (reps, blocks)."""
    out = []
    for r in reps:
        d = block_spans(t_long, warps, r) - block_spans(t_short, warps, r)
        out.append(np.where(d > 0, units / np.maximum(d, 1e-9), np.nan))
    return np.array(out)


def median_rate(rates: np.ndarray, mask: np.ndarray | None = None) -> float | None:
    """Median over repetitions and the blocks of ``mask`` (None: all)."""
    a = rates if mask is None else rates[:, mask]
    a = a[np.isfinite(a)]
    return round(float(np.median(a)), 4) if a.size else None


def pattern_targets(pattern: str, size: int) -> list[int]:
    """The target rank of each rank of a cluster of ``size`` for a bandwidth pattern."""
    if pattern == "all-to-one":
        return [0] * size
    if pattern == "pairs":
        return [r ^ 1 if (r ^ 1) < size else r for r in range(size)]
    if pattern == "ring":
        return [(r + 1) % size for r in range(size)]
    if pattern == "self":
        return list(range(size))
    raise ValueError(f"unknown pattern '{pattern}'")


def shift_targets(shift: int, size: int) -> list[int]:
    return [(r + shift) % size for r in range(size)]


def readers_per_target(rank: np.ndarray, tgt: np.ndarray) -> int:
    """Most CTAs of one cluster (its ranks and their targets) aimed at one other CTA (1 when
    every CTA aims at itself)."""
    remote = tgt[rank != tgt]
    return int(np.bincount(remote).max()) if remote.size else 1


def sweep_value(rates: list[float | None], limit: float | None) -> dict:
    """The value of a warp sweep: the rate at the most warps (the saturated configuration),
    ``unsaturated`` when that last doubling still raised it by more than behaviour's RISE; a
    rate above ``limit`` (a physical bound of the path) is a failure of the method, never a
    value: None, flagged ``above-limit`` (the runner measures the item again)."""
    sat = saturation(rates[-2:])
    v = rates[-1] if rates else None
    flags = [] if sat["saturated"] else [f"unsaturated: {sat.get('why')}"]
    if v is not None and limit is not None and v > limit:
        flags.append(f"above-limit: {v:.4g} > {limit:g} (the shared-memory bound of the path): the method failed here")
        v = None
    return {"value": v, "flags": flags, "measured_at_most_warps": rates[-1] if rates else None, **sat}


def gpc_statement(sizes: list[int], largest: list[int], resident: dict[int, int]) -> str:
    """What the sets of SMs that shared a cluster say about the GPCs, from the data alone: the
    sets that hosted the largest clusters, the SMs never joined beyond a smaller size, and
    whether merging those (as one GPC) would have held more clusters at some size than the
    measured residency (then they do not act as one GPC for clusters of that size). Sets are
    never called GPCs: a GPC is one or more sets."""
    if not sizes:
        return ""
    top = max(largest)
    big = [i for i, b in enumerate(largest) if b == top]
    small = [i for i, b in enumerate(largest) if b < top]
    text = (f"sets against GPCs: a cluster never leaves its GPC, so each GPC is one or more of the {len(sizes)} sets "
            f"(the sets are not GPCs); {len(big)} sets of {sorted({sizes[i] for i in big})} SMs hosted clusters of "
            f"{top} (the largest placed)")
    if not small:
        return text + "."
    left = [sizes[i] for i in small]
    text += (f"; {sum(left)} SMs in {len(small)} sets ({left} SMs) were never joined beyond "
             f"{sorted({largest[i] for i in small})} CTAs")
    merged_more = [s for s, n in sorted(resident.items())
                   if predicted_resident([*(sizes[i] for i in big), sum(left)], s) > n == predicted_resident(sizes, s)]
    if merged_more:
        s = merged_more[-1]
        text += (f": as one GPC they would have held {predicted_resident([*(sizes[i] for i in big), sum(left)], s)} "
                 f"clusters of {s} at once, the run held {resident[s]} (what the sets predict), so they do not act "
                 f"as one GPC for clusters of {s}")
    return (text + f"; the GPC count is not determined by these data ({len(sizes)} at most); a documented count "
            f"below {len(sizes)} fits them only where the left-over SMs share GPCs that place no cluster larger "
            f"than {max(largest[i] for i in small)} across them.")
