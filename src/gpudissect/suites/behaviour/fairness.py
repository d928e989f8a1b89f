"""Block -> SM fairness and determinism over repeated launches (pure functions; no GPU).

A launch's placement is its block -> SM map (``smid`` of each block in linear block order).
Per launch: the blocks each SM got (every SM of the GPU, idle ones included), their histogram,
whether the placement was *fair* (every SM got ``floor`` or ``ceil`` of grid / SMs blocks), the
waves each SM ran (per-SM ``clock64``: a block is in wave ``w + 1`` when a block of wave ``w``
on its SM ended before it started) and whether the blocks of later waves took the slots that
were freed first (``%globaltimer`` across SMs), and what an unfair placement costs: the most
blocks on one SM against the fair ``ceil(grid / SMs)`` (the makespan of blocks that each need
the SM's throughput) and the waves against the fair number; and whether the blocks did equal
work (:func:`equal_work`), the premise of the verdict. Over the launches: how often the exact
placement repeats (identical maps, each block's share of launches on its commonest SM, the
per-SM loads) and the verdict (fair in every launch or not; deterministic or not);
:func:`when_fair` sorts the verdicts of many configurations by what might explain them.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from gpudissect.suites.behaviour.analyse import (
    MIN_LAUNCHES,
    UNDETERMINED,
    residency,
    timer_resolution,
)

SPREAD = 1.1  # equal work: the blocks' timed windows (clock64) within this ratio of each other
OUTLIVE = 1.25  # ... and the makespan at most this times (waves x the median window): blocks
# whose real life exceeds their window (work after it, or resources freed late) break it


# ----------------------------------------------------------------- one launch
def loads(smid: np.ndarray, nsm: int) -> np.ndarray:
    """Blocks per SM for SMs ``0 .. nsm - 1`` (idle SMs 0; an SM id beyond widens the range)."""
    smid = np.asarray(smid, dtype=np.int64)
    return np.bincount(smid, minlength=max(nsm, int(smid.max()) + 1 if len(smid) else 0))


def histogram(load: np.ndarray) -> dict[int, int]:
    """Blocks on an SM -> how many SMs got that many (0 included when an SM was idle)."""
    h = np.bincount(np.asarray(load, dtype=np.int64))
    return {int(k): int(v) for k, v in enumerate(h) if v}


def fair_range(blocks: int, nsm: int) -> tuple[int, int]:
    """The blocks per SM of a fair placement: floor and ceil of blocks / SMs."""
    return blocks // nsm, -(-blocks // nsm)


def waves(smid: np.ndarray, c0: np.ndarray, c1: np.ndarray) -> np.ndarray:
    """Each block's wave on its SM, from the SM's own clock: 0 when no block of its SM had
    ended when it started, else 1 + the highest wave among the blocks of its SM that had."""
    smid, c0, c1 = (np.asarray(x, dtype=np.int64) for x in (smid, c0, c1))
    w = np.zeros(len(smid), dtype=np.int64)
    for s in np.unique(smid):
        idx = np.flatnonzero(smid == s)
        idx = idx[np.argsort(c0[idx], kind="stable")]
        for j, b in enumerate(idx):
            before = idx[:j][c1[idx[:j]] <= c0[b]]
            w[b] = 1 + int(w[before].max()) if len(before) else 0
    return w


def refill_first_freed(smid: np.ndarray, g0: np.ndarray, g1: np.ndarray, wave: np.ndarray,
                       tol: int) -> dict:
    """Whether the blocks of later waves (in start order) took the slot freed first: at each
    such block's start, the slots freed (a block ended) and not yet taken again; it takes its
    SM's earliest one, a *hit* when no other free slot was freed more than ``tol`` earlier."""
    smid, g0, g1, wave = (np.asarray(x, dtype=np.int64) for x in (smid, g0, g1, wave))
    ends = np.argsort(g1, kind="stable")
    refills = [int(b) for b in np.argsort(g0, kind="stable") if wave[b] > 0]
    pending: list[int] = []
    j = hits = unmatched = 0
    for b in refills:
        while j < len(ends) and g1[ends[j]] <= g0[b]:
            pending.append(int(ends[j]))
            j += 1
        mine = [a for a in pending if smid[a] == smid[b]]
        if not mine:
            unmatched += 1
            continue
        take = min(mine, key=lambda a: g1[a])
        hits += int(g1[take] <= min(g1[a] for a in pending) + tol)
        pending.remove(take)
    n = len(refills) - unmatched
    return {"refills": len(refills), "unmatched": unmatched,
            "first_freed_share": round(hits / n, 4) if n else None}


def equal_work(g0: np.ndarray, g1: np.ndarray, c0: np.ndarray, c1: np.ndarray, n_waves: int,
               spin: int | None = None) -> dict:
    """Whether the blocks did equal work, the premise of the fairness verdict (unequal blocks
    make a fair dispatcher give unequal loads): their windows (``c1 - c0``, SM cycles) alike
    within SPREAD; the median window at most OUTLIVE x ``spin`` (the cycles each block was
    told to spin: a longer window holds other work, whose length the probe does not set); and
    the launch no longer than OUTLIVE x (its waves x the median window in globaltimer ns), else
    the blocks lived beyond the window they recorded (seen only where a later wave shows when
    a slot was freed)."""
    win = (np.asarray(c1, dtype=np.int64) - np.asarray(c0, dtype=np.int64)).astype(float)
    ns = (np.asarray(g1, dtype=np.int64) - np.asarray(g0, dtype=np.int64)).astype(float)
    if not len(win) or win.min() <= 0 or np.median(ns) <= 0:
        return {"equal": False, "why": "empty or non-positive block windows"}
    spread = float(win.max() / win.min())
    makespan = float(np.max(g1) - np.min(g0))
    outlive = makespan / (max(n_waves, 1) * float(np.median(ns)))
    over = float(np.median(win)) / spin if spin else None
    out = {"equal": spread <= SPREAD and outlive <= OUTLIVE and (over is None or over <= OUTLIVE),
           "window_cycles_median": float(np.median(win)), "window_spread": round(spread, 4),
           "window_over_spin": None if over is None else round(over, 4), "block_ns_median": float(np.median(ns)),
           "makespan_over_waves_x_block": round(outlive, 4)}
    if spread > SPREAD:
        out["why"] = f"block windows spread {spread:.2f}x (> {SPREAD}x)"
    elif over is not None and over > OUTLIVE:
        out["why"] = (f"the median block window is {over:.2f}x the {spin} cycles spun (> {OUTLIVE}x): other work "
                      "sets the blocks' length")
    elif outlive > OUTLIVE:
        out["why"] = (f"the launch took {outlive:.2f}x its waves x the median block window (> {OUTLIVE}x): "
                      "blocks lived beyond the window they recorded")
    return out


def launch_stats(smid: np.ndarray, g0: np.ndarray, g1: np.ndarray, c0: np.ndarray, c1: np.ndarray,
                 nsm: int, spin: int | None = None) -> tuple[dict, np.ndarray, np.ndarray]:
    """One launch: loads and their histogram, fairness, waves, refill order and the cost of
    the placement against a fair one (per-block arrays in linear block order); with the loads
    (blocks per SM) and each block's wave."""
    n = len(smid)
    load = loads(smid, nsm)
    lo, hi = fair_range(n, len(load))
    w = waves(smid, c0, c1)
    res = residency(np.asarray(smid), np.asarray(c0), np.asarray(c1))
    most = int(load.max())
    n_waves = int(w.max()) + 1 if n else 0
    fair_waves = -(-hi // max(res["max"], 1))
    g0, g1 = np.asarray(g0, dtype=np.int64), np.asarray(g1, dtype=np.int64)
    return {
        "blocks": n, "sms": len(load), "fair": bool(load.min() >= lo and most <= hi),
        "max": most, "min": int(load.min()), "mean": round(float(load.mean()), 4),
        "idle": int(np.sum(load == 0)), "histogram": histogram(load), "fair_max": hi,
        "excess": round(most / hi, 4) if hi else None,  # the busiest SM's blocks / the fair most
        "loss": round(1 - hi / most, 4) if most else 0.0,  # share of the makespan lost (work-bound)
        "resident_max": res["max"], "waves": n_waves, "fair_waves": fair_waves,
        "later_wave_blocks": int(np.sum(w > 0)),
        "refill": refill_first_freed(smid, g0, g1, w, max(timer_resolution(g0), 1)),
        "makespan_ns": int(g1.max() - g0.min()) if n else 0,
        "work": equal_work(g0, g1, c0, c1, n_waves, spin),
    }, load, w


# ----------------------------------------------------------------- over launches
def repeats(maps: list[np.ndarray], nsm: int) -> dict:
    """How often a placement repeats over launches (each map: the SM of every block)."""
    L = len(maps)
    keys = [np.asarray(m, dtype=np.int64).tobytes() for m in maps]
    cnt = Counter(keys)
    M = np.stack([np.asarray(m, dtype=np.int64) for m in maps]) if L else np.zeros((0, 0), np.int64)
    same = [Counter(M[:, j].tolist()).most_common(1)[0][1] / L for j in range(M.shape[1])] if L else []
    lds = Counter(loads(m, nsm).tobytes() for m in maps)
    hists = Counter(tuple(sorted(histogram(loads(m, nsm)).items())) for m in maps)
    return {"launches": L, "distinct_maps": len(cnt), "identical_all": len(cnt) == 1,
            "modal_share": round(cnt.most_common(1)[0][1] / L, 4) if L else None,
            "consecutive_identical_share": round(float(np.mean([keys[i] == keys[i - 1] for i in range(1, L)])), 4)
            if L > 1 else None,
            "same_sm_share": round(float(np.mean(same)), 4) if same else None,
            "distinct_loads": len(lds), "distinct_histograms": len(hists)}


def verdict(per_launch: list[dict], rep: dict) -> dict:
    """Fair (every SM floor or ceil of grid / SMs in every launch) and deterministic (the same
    map in every launch), stated from at least MIN_LAUNCHES launches."""
    L = len(per_launch)
    if L < MIN_LAUNCHES:
        return {"verdict": UNDETERMINED, "agreed": False, "fair": None, "deterministic": None,
                "fair_share": None, "why": f"{L} launches (at least {MIN_LAUNCHES} needed)"}
    k = sum(1 for d in per_launch if d["fair"])
    fair = "fair" if k == L else ("unfair" if k == 0 else f"fair in {k} of {L} launches")
    det = "deterministic" if rep["identical_all"] else (
        f"not deterministic ({rep['distinct_maps']} distinct maps in {L} launches, blocks on their "
        f"commonest SM in {rep['same_sm_share']:.0%})")
    return {"verdict": f"{fair}, {det}", "agreed": True, "fair": k == L, "deterministic": rep["identical_all"],
            "fair_share": round(k / L, 4)}


def mean_histogram(per_launch: list[dict]) -> dict[int, float]:
    """Blocks on an SM -> SMs that got that many, the mean over launches."""
    tot: Counter = Counter()
    for d in per_launch:
        tot.update({int(k): v for k, v in d["histogram"].items()})
    L = max(len(per_launch), 1)
    return {k: round(v / L, 3) for k, v in sorted(tot.items())}


def when_fair(rows: list[dict]) -> dict[str, dict]:
    """Which configurations were fair in every launch, grouped by what may explain it: the
    grid a multiple of the SMs or not, and whether every launch ran in one wave (measured).
    ``rows``: {"name", "grid", "sms", "waves" (the most over launches), "fair", "deterministic"}."""
    groups: dict[str, dict] = {}
    for r in rows:
        if r.get("fair") is None:
            continue
        mult = "grid a multiple of the SMs" if r["grid"] % r["sms"] == 0 else "grid not a multiple of the SMs"
        fits = "one wave" if r["waves"] == 1 else "more than one wave"
        for key in (mult, fits, f"{mult}, {fits}"):
            g = groups.setdefault(key, {"configurations": 0, "fair": 0, "deterministic": 0, "unfair": []})
            g["configurations"] += 1
            g["fair"] += int(r["fair"])
            g["deterministic"] += int(bool(r["deterministic"]))
            if not r["fair"]:
                g["unfair"].append(r["name"])
    return groups


# ----------------------------------------------------------------- compact samples
def encode_ids(a: np.ndarray) -> str:
    """Small non-negative integers as one string: ``"<width>:"`` then fixed-width hex."""
    a = np.asarray(a, dtype=np.int64)
    top = int(a.max()) if len(a) else 0
    width = max(1, math.ceil(max(top, 1).bit_length() / 4))
    return f"{width}:" + "".join(f"{int(x):0{width}x}" for x in a)


def decode_ids(s: str) -> np.ndarray:
    width_s, body = s.split(":", 1)
    w = int(width_s)
    return np.array([int(body[i:i + w], 16) for i in range(0, len(body), w)], dtype=np.int64)
