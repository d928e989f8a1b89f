"""Analysis of the behaviour probes (pure functions over traces; no GPU; the occupancy rules
they are compared with are arch/occupancy.py), and the suite's summary.

Every probe is launched ``LAUNCHES`` times; each launch gives its own verdict from its own
traces, and a verdict is stated only when every launch gives the same one (:func:`agree`);
otherwise it is ``undetermined`` with each launch's verdict and numbers. Thresholds are module
constants; :func:`summarize` runs the analyses again on a run's stored results.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from gpudissect.bench.stats import components, max_concurrency

MIN_LAUNCHES = 3  # independent launches behind every verdict
UNDETERMINED = "undetermined"
BREADTH_FIRST = 0.95  # share of the first nsm blocks on distinct SMs
SLOWDOWN = 1.3  # schedulers: a pair slowed by this factor shares a scheduler
ADD = 0.75  # pipes: position of the pair's rate between the compete (0) and add (1) predictions
COMPETE = 0.25
GAP_MIN = 0.05  # the two predictions must differ by this share of the lower one to decide
BEYOND = 0.1  # a position this far outside [0, 1] (beyond the spread) is noted: neither model fits
LIMIT_TOL = 0.02  # the issue limit of the launches agrees within this share
LATE = 0.1  # issue order: a warp starting this share of its group's span after the first is late
FINISH_TOL = 0.05  # ... and waited for another warp when it starts at most this share after its end
MODE_SHARE = 0.75  # a launch's order verdict: the pattern of at least this share of (SM, rep, scheduler)


# ----------------------------------------------------------------- verdicts over launches
def agree(per_launch: list[dict], key: str = "verdict") -> dict:
    """The verdict of repeated launches: ``per_launch[i][key]`` is launch i's verdict (its
    other entries, the numbers behind it). Stated when at least MIN_LAUNCHES launches all give
    the same verdict; else ``undetermined`` with the reason. The evidence is kept either way."""
    vs = [d.get(key) for d in per_launch]
    if len(vs) < MIN_LAUNCHES:
        return {"verdict": UNDETERMINED, "agreed": False, "launches": len(vs),
                "why": f"{len(vs)} launches (at least {MIN_LAUNCHES} needed)", "per_launch": per_launch}
    if all(v == vs[0] for v in vs) and vs[0] is not None and not str(vs[0]).startswith(UNDETERMINED):
        return {"verdict": vs[0], "agreed": True, "launches": len(vs), "per_launch": per_launch}
    why = "launches disagree: " + "; ".join(f"{i}: {v}" for i, v in enumerate(vs))
    return {"verdict": UNDETERMINED, "agreed": False, "launches": len(vs), "why": why,
            "per_launch": per_launch}


def agree_values(values: list[float], tol: float) -> dict:
    """Numbers of repeated launches: their median when every one lies within ``tol`` (a share)
    of it, else undetermined."""
    vs = [float(v) for v in values if v is not None and math.isfinite(v)]
    per = [{"value": v} for v in values]
    if len(vs) < MIN_LAUNCHES or len(vs) < len(values):
        return {"verdict": UNDETERMINED, "agreed": False, "value": None, "per_launch": per,
                "why": f"{len(vs)} usable launches (at least {MIN_LAUNCHES} needed)"}
    med = float(np.median(vs))
    spread = max(abs(v - med) for v in vs) / abs(med) if med else float("inf")
    if spread <= tol:
        return {"verdict": round(med, 4), "agreed": True, "value": med, "spread": round(spread, 4),
                "per_launch": per}
    return {"verdict": UNDETERMINED, "agreed": False, "value": None, "spread": round(spread, 4),
            "why": f"launches spread by {spread:.1%} (> {tol:.0%})", "per_launch": per}


# ----------------------------------------------------------------- residency / dispatch


def residency(smid: np.ndarray, c0: np.ndarray, c1: np.ndarray) -> dict:
    """Blocks resident at once on each SM (from the per-SM clock64 of each block)."""
    per = {}
    for s in np.unique(smid):
        m = smid == s
        per[int(s)] = max_concurrency(c0[m].astype(np.int64), c1[m].astype(np.int64))
    vals = np.array(list(per.values())) if per else np.zeros(1, int)
    counts = np.bincount(vals)
    return {"per_sm": per, "max": int(vals.max()), "min": int(vals.min()),
            "mode": int(counts.argmax()), "sms": len(per)}


def timer_resolution(t: np.ndarray) -> int:
    d = np.diff(np.unique(t.astype(np.int64)))
    return int(d.min()) if len(d) else 0


def dispatch(lin: np.ndarray, smid: np.ndarray, g0: np.ndarray, g1: np.ndarray,
             nsm: int) -> dict:
    """Dispatch policy from per-block (linear id, SM, globaltimer start/end)."""
    o = np.argsort(lin, kind="stable")
    lin, smid, g0, g1 = lin[o], smid[o], g0[o].astype(np.int64), g1[o].astype(np.int64)
    n = len(lin)
    first_end = int(g1.min())
    wave = g0 < first_end
    k = min(n, nsm)
    head = smid[:k]
    distinct = len(np.unique(head)) / max(k, 1)
    same_next = float(np.mean(smid[1:k] == smid[:k - 1])) if k > 1 else 0.0
    if distinct >= BREADTH_FIRST:
        policy = "breadth-first: consecutive blocks go to different SMs, every SM gets one before any gets two"
    elif same_next > 0.5:
        policy = "depth-first: consecutive blocks fill one SM before the next"
    else:
        policy = "mixed"
    steps = ((head[1:].astype(int) - head[:-1].astype(int)) % max(nsm, 1)) if k > 1 else np.zeros(0, int)
    stride = int(np.bincount(steps).argmax()) if len(steps) else 0
    stride_share = float(np.mean(steps == stride)) if len(steps) else 0.0
    same_tpc = float(np.mean(head[1:] // 2 == head[:-1] // 2)) if k > 1 else 0.0
    # TPCs (smid // 2): spread over TPCs first, and the step between consecutive TPCs visited
    half = min(n, max(1, nsm // 2))
    tpc = smid[:k] // 2
    tpc_spread = len(np.unique(tpc[:half])) / half
    seq = [int(t) for i, t in enumerate(tpc) if i == 0 or t != tpc[i - 1]]
    tsteps = np.diff(seq) % max(1, (nsm + 1) // 2) if len(seq) > 1 else np.zeros(0, int)
    tpc_step = int(np.bincount(tsteps).argmax()) if len(tsteps) else 0
    res = timer_resolution(g0)
    tol = max(res, 1)
    inversions = float(np.mean(g0[1:] < g0[:-1] - tol)) if n > 1 else 0.0
    # refill: a later block starts on its SM after a block there ended; how long after, and
    # whether blocks in id order take the slots in the order they were freed
    later = np.flatnonzero(~wave)
    gaps, freed = [], []
    for i in later:
        m = (smid == smid[i]) & (g1 <= g0[i])
        if not m.any():
            continue
        e = g1[m].max()
        gaps.append(int(g0[i] - e))
        freed.append(int(e))
    agree_ = None
    if len(freed) > 1:
        f = np.array(freed)
        agree_ = float(np.mean(f[1:] >= f[:-1] - tol))
    out = {
        "policy": policy, "blocks": n, "first_wave_blocks": int(wave.sum()),
        "first_sms": [int(x) for x in head[: min(k, 64)]],
        "distinct_share_first_nsm": round(distinct, 4),
        "consecutive_same_sm": round(same_next, 4),
        "smid_stride_mode": stride, "smid_stride_share": round(stride_share, 4),
        "consecutive_same_tpc": round(same_tpc, 4),
        "distinct_tpc_share_first_half": round(tpc_spread, 4), "tpc_step_mode": tpc_step,
        "tpc_step_share": round(float(np.mean(tsteps == tpc_step)), 4) if len(tsteps) else 0.0,
        "tpc_steps_top": {int(v): int(c) for v, c in
                          sorted(zip(*np.unique(tsteps, return_counts=True), strict=True),
                                 key=lambda x: -x[1])[:3]},
        "start_inversions": round(inversions, 4), "timer_resolution_ns": res,
        "in_order": inversions < 0.02,
        "refill_gap_ns_median": float(np.median(gaps)) if gaps else None,
        "refill_gap_ns_p90": float(np.percentile(gaps, 90)) if gaps else None,
        "refill_fifo_agreement": None if agree_ is None else round(agree_, 4),
    }
    return out


# ----------------------------------------------------------------- which warps share a scheduler
def scheduler_groups(n_warps: int, pair_slowdown: dict[tuple[int, int], float]) -> dict:
    """Which warps share a scheduler, from the slowdown of warp pairs running together
    (pair time / solo time). Tests the rules 'w mod k' and 'w // k'."""
    compete = {p for p, s in pair_slowdown.items() if s >= SLOWDOWN}
    label = components(n_warps, sorted(compete))
    groups: dict[int, list[int]] = {}
    for w in range(n_warps):
        groups.setdefault(label[w], []).append(w)
    found = sorted(groups.values())
    rule, mod = None, None
    for k in (1, 2, 3, 4, 6, 8, 16):
        if k > n_warps:
            break
        by_mod = sorted([w for w in range(n_warps) if w % k == r] for r in range(k))
        div = sorted([w for w in range(n_warps) if w // max(1, n_warps // k) == r] for r in range(k))
        if found == by_mod:
            rule, mod = f"warp w -> scheduler (w mod {k})", k
            break
        if found == div and k > 1:
            rule = f"warp w -> scheduler (w // {n_warps // k})"
            break
    vals = np.array(list(pair_slowdown.values())) if pair_slowdown else np.zeros(1)
    return {"groups": found, "rule": rule, "mod": mod, "schedulers": len(found),
            "slowdown_competing": round(float(np.median([pair_slowdown[p] for p in compete])), 3) if compete else None,
            "slowdown_other": round(float(np.median([s for p, s in pair_slowdown.items() if p not in compete])), 3)
            if len(compete) < len(pair_slowdown) else None,
            "slowdown_max": round(float(vals.max()), 3)}


def pair_masks(n_warps: int) -> list[tuple[int, ...]]:
    """The warp sets the pair probe runs, one per block: every warp alone, then every pair."""
    return [(w,) for w in range(n_warps)] + [(a, b) for a in range(n_warps) for b in range(a + 1, n_warps)]


def sched_launch(starts: np.ndarray, ends: np.ndarray, sets: list[tuple[int, ...]], n_warps: int,
                 ffma: int) -> dict:
    """One launch of the pair probe: ``starts[b, r, w]`` / ``ends[b, r, w]`` the clocks of warp w
    of block b in kept repetition r (block b ran the warps ``sets[b]``). A set's time is its
    span (first start to last end: warps a scheduler runs one after the other are slowed as
    much as warps it interleaves), the median over the repetitions; a pair's slowdown is its
    time over the longer of its two solo times. The verdict: the groups."""
    def span(b: int, s: tuple[int, ...]) -> float:
        idx = list(s)
        return float(np.median(ends[b][:, idx].max(1) - starts[b][:, idx].min(1)))

    solo = {s[0]: span(b, s) for b, s in enumerate(sets) if len(s) == 1}
    slow = {(s[0], s[1]): span(b, s) / max(solo[s[0]], solo[s[1]])
            for b, s in enumerate(sets) if len(s) == 2}
    g = scheduler_groups(n_warps, slow)
    med_solo = float(np.median(list(solo.values())))
    return {"verdict": repr(g["groups"]), **g, "solo_cycles_median": med_solo,
            "solo_ffma_per_clk": round(ffma / med_solo, 3) if med_solo > 0 else None,
            "slowdown": {f"{a},{b}": round(float(v), 4) for (a, b), v in slow.items()}}


def extend_groups(groups: list[list[int]], mod: int | None, n_warps: int) -> list[list[int]]:
    """The groups of ``n_warps`` warps: by the measured rule 'w mod k' when one was found,
    else by repeating the measured grouping with its period."""
    if mod:
        return [[w for w in range(n_warps) if w % mod == r] for r in range(mod)]
    n0 = sum(len(g) for g in groups)
    return [sorted(w for w in range(n_warps) if (w % n0) in g) for g in groups]


# ----------------------------------------------------------------- the order warps issue in
ORDER_TEXT = {
    "together": "the {n} warps of a scheduler all start within {late:.0%} of the span and share its issue "
                "(interleaved)",
    "sequential": "greedy: the {n} warps of a scheduler run one at a time, each starting when the one "
                  "before it ends",
    "wait": "{k} of the {n} warps of each scheduler issue nothing, not even their first instruction, until "
            "other warps of their scheduler finish; the other {m} start together",
    "staggered": "{k} of the {n} warps of each scheduler start late without waiting for another to finish",
}


def order_group(starts: np.ndarray, ends: np.ndarray) -> dict:
    """The pattern of one scheduler's warps in one repetition, from each warp's start and end
    clock (the first and last instruction it issued in the timed region)."""
    s, e = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    span = int(e.max() - s.min())
    n = len(s)
    if span <= 0 or n < 2:
        return {"key": "invalid", "late": []}
    late = np.flatnonzero(s - s.min() > LATE * span)
    if not len(late):  # how far apart they finish, and whether the first to start finish first: evidence
        return {"key": "together", "late": [], "end_spread": float(e.max() - e.min()) / span,
                "order_tau": kendall(np.argsort(np.argsort(s, kind="stable")), np.argsort(np.argsort(e, kind="stable")))}
    tol = FINISH_TOL * span
    waited = all(any(e[j] <= s[i] + tol for j in range(n) if j != i) for i in late)
    if not waited:
        return {"key": f"staggered:{len(late)}", "late": late.tolist()}
    o = np.argsort(s, kind="stable")
    one_at_a_time = len(late) == n - 1 and all(s[o[i + 1]] >= e[o[i]] - tol for i in range(n - 1))
    return {"key": "sequential" if one_at_a_time else f"wait:{len(late)}", "late": late.tolist()}


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau of two rankings (+1: the same order, -1: reversed)."""
    n = len(a)
    if n < 2:
        return 0.0
    i, j = np.triu_indices(n, 1)
    return float(np.mean(np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])))


def order_text(key: str, n: int) -> str:
    base, _, k = key.partition(":")
    if base not in ORDER_TEXT:
        return key
    kk = int(k) if k else 0
    return ORDER_TEXT[base].format(n=n, k=kk, m=n - kk, late=LATE)


def order_launch(starts: np.ndarray, ends: np.ndarray, smid: np.ndarray, wid: np.ndarray,
                 groups: list[list[int]]) -> dict:
    """One launch of an order workload: ``starts[b, r, w]`` / ``ends[b, r, w]`` the clocks of warp
    w of block b in kept repetition r (one block per SM). Every (block, repetition, scheduler)
    gets a pattern (:func:`order_group`); the launch's verdict is the pattern of at least
    MODE_SHARE of them, else 'mixed' with the two commonest. Evidence: the counts, which warps
    started late, and the per-warp windows of the block on the lowest SM."""
    keys: Counter = Counter()
    late_sets: Counter = Counter()
    orders: list[Counter] = [Counter() for _ in groups]
    spreads, taus = [], []
    nb, nr, _ = starts.shape
    for b in range(nb):
        for r in range(nr):
            late: list[int] = []
            for gi, g in enumerate(groups):
                d = order_group(starts[b, r, g], ends[b, r, g])
                keys[d["key"]] += 1
                if "end_spread" in d:
                    spreads.append(d["end_spread"])
                    taus.append(d["order_tau"])
                late += [g[i] for i in d["late"]]
                orders[gi][tuple(g[i] for i in np.argsort(starts[b, r, g], kind="stable"))] += 1
            late_sets[tuple(sorted(late))] += 1
    total = sum(keys.values())
    (top, cnt), *_ = keys.most_common(1) or [("invalid", 0)]
    share = cnt / total if total else 0.0
    if share >= MODE_SHARE:
        verdict = top
    else:
        verdict = "mixed: " + " / ".join(sorted(k for k, _ in keys.most_common(2)))
    b0 = int(np.argmin(smid)) if len(smid) else 0
    windows = []
    for r in range(nr):
        base = int(starts[b0, r].min())
        windows.append([[[int(w), int(wid[b0, w]), int(starts[b0, r, w] - base), int(ends[b0, r, w] - base)]
                         for w in g] for g in groups])
    start_order = []
    for c in orders:
        (o, n), *_ = c.most_common(1) or [((), 0)]
        start_order.append({"order": [int(w) for w in o], "share": round(n / max(sum(c.values()), 1), 4)})
    return {"verdict": verdict, "share": round(share, 4), "patterns": dict(keys.most_common()),
            "start_order": start_order,
            # of the cases where all start together: how far apart their ends lie (share of the
            # span) and whether the first to start finish first (Kendall's tau, start vs end order)
            "end_spread": None if not spreads else {"median": round(float(np.median(spreads)), 4),
                                                    "p10": round(float(np.percentile(spreads, 10)), 4),
                                                    "p90": round(float(np.percentile(spreads, 90)), 4)},
            "start_end_tau_median": None if not taus else round(float(np.median(taus)), 3),
            "late_warps": {",".join(map(str, k)) or "-": v for k, v in late_sets.most_common(4)},
            "cases": total, "windows_lowest_sm": windows, "lowest_sm": int(smid[b0]) if len(smid) else None}


# ----------------------------------------------------------------- pipes


def pair_predictions(ra: float, rb: float, fa: float, issue: float) -> tuple[float, float]:
    """Combined rates (instructions of both per clock) a pair would reach: (add, compete).
    ``ra``/``rb``: the saturated solo rates; ``fa``: a's share of the pair's instructions;
    ``issue``: the issue limit (all instructions per clock). Add: the parts overlap, bounded by
    the slower part's own time and the issue limit; compete: they take turns on one pipe."""
    fb = 1.0 - fa
    t_add = max(fa / ra, fb / rb, 1.0 / issue)
    t_comp = fa / ra + fb / rb
    return 1.0 / t_add, 1.0 / t_comp


def pair_verdict(ra: float, rb: float, rab: float, fa: float, issue: float,
                 hw_a: float = 0.0, hw_b: float = 0.0, hw_ab: float = 0.0) -> dict:
    """One launch's verdict on a pair: where its combined rate lies between the compete
    prediction (0) and the add prediction (1), with the spread of the repeats (the halfwidths of
    the three rates) deciding: a verdict whose band straddles a threshold is not given."""
    r_add, r_comp = pair_predictions(ra, rb, fa, issue)
    gap = r_add - r_comp
    rel = max(hw_a / ra if ra else 0.0, hw_b / rb if rb else 0.0)
    u = hw_ab + rel * r_add  # the pair's own spread and the solos' carried into the predictions
    out = {"rate": round(rab, 4), "add": round(r_add, 4), "compete": round(r_comp, 4),
           "issue_limit": round(issue, 4), "spread": round(u, 4)}
    if gap <= max(GAP_MIN * r_comp, 4 * u):
        return {**out, "verdict": "indistinct", "position": None,
                "why": f"add and compete predict {r_add:.3f} and {r_comp:.3f}: closer than the spread allows"}
    x = (rab - r_comp) / gap
    dx = u / gap
    out["position"] = round(x, 3)
    if x - dx > 1 + BEYOND:
        out["note"] = ("faster than the add prediction: a solo's saturated rate is not its pipe's limit "
                       "(the pair runs its instructions faster than the solo does)")
    elif x + dx < -BEYOND:
        out["note"] = "slower than the compete prediction: the two interfere more than one shared pipe would"
    if x - dx >= ADD:
        v = "add"
    elif x + dx <= COMPETE:
        v = "compete"
    elif x - dx > COMPETE and x + dx < ADD:
        v = "partial"
    else:
        v = f"{UNDETERMINED}: within the spread (position {x:.2f} +- {dx:.2f})"
    return {**out, "verdict": v}


def compete_groups(names: list[str], compete: set[frozenset[str]]) -> list[list[str]]:
    """The pipe groups: the largest sets of variants that compete pairwise (maximal cliques of
    the compete relation; a variant competing with none is a group of its own). On pipes the
    groups are disjoint; overlapping groups say the relation is not transitive (a resource other
    than one pipe per group is shared), see :func:`overlaps`."""
    adj = {n: {m for m in names if m != n and frozenset((n, m)) in compete} for n in names}
    out: list[list[str]] = []

    def grow(r: set[str], p: set[str], x: set[str]) -> None:  # Bron-Kerbosch
        if not p and not x:
            out.append(sorted(r))
            return
        for v in sorted(p):
            grow(r | {v}, p & adj[v], x & adj[v])
            p = p - {v}
            x = x | {v}

    grow(set(), set(names), set())
    return sorted(out)


def overlaps(groups: list[list[str]]) -> list[str]:
    """Variants that lie in more than one group."""
    seen = Counter(v for g in groups for v in g)
    return sorted(v for v, n in seen.items() if n > 1)


def pipes_verdicts(solos: dict[str, dict], pairs: dict[tuple[str, str], dict],
                   schedulers: int | None) -> dict:
    """Pipe groups and the issue limit from the stored pipe probes.

    ``solos[v]``: ``{"launches": [{"rate", "hw", "issue", "saturated", ...}], "sass_per_instance"}``
    (the rate at the largest configuration, the one the pairs run; SASS of the variant per clock
    per SM); ``pairs[(a, b)]``: ``{"launches": [{"rate", "hw", "issue"}], "share_a"}`` (the
    combined rate of both parts' SASS; a's share of them). Per launch: the issue limit is the
    highest issue rate a saturated probe reached; each pair's verdict uses that launch's solos."""
    n = min([len(d["launches"]) for d in [*solos.values(), *pairs.values()]] or [0])
    limits, reached = [], []
    for i in range(n):
        best, who = 0.0, None
        for v, d in solos.items():
            ln = d["launches"][i]
            if ln.get("saturated") and ln.get("issue") and ln["issue"] > best:
                best, who = ln["issue"], v
        for (a, b), d in pairs.items():
            ln = d["launches"][i]
            if solos[a]["launches"][i].get("saturated") and solos[b]["launches"][i].get("saturated") \
                    and ln.get("issue") and ln["issue"] > best:
                best, who = ln["issue"], f"{a}+{b}"
        limits.append(best or None)
        reached.append(who)
    lim = agree_values(limits, LIMIT_TOL)
    for d, who in zip(lim["per_launch"], reached, strict=True):
        d["reached_by"] = who
        if schedulers and d["value"]:
            d["per_scheduler"] = round(d["value"] / schedulers, 4)
    if lim["agreed"] and schedulers:
        lim["per_scheduler"] = round(lim["value"] / schedulers, 4)
    verdicts = {}
    for (a, b), d in pairs.items():
        per = []
        for i in range(n):
            sa, sb, p = solos[a]["launches"][i], solos[b]["launches"][i], d["launches"][i]
            if not (sa.get("saturated") and sb.get("saturated")):
                bad = [v for v, s in ((a, sa), (b, sb)) if not s.get("saturated")]
                per.append({"verdict": f"{UNDETERMINED}: solo not saturated ({', '.join(bad)})"})
                continue
            if not (p.get("rate") and sa.get("rate") and sb.get("rate") and limits[i]):
                per.append({"verdict": f"{UNDETERMINED}: a rate is missing"})
                continue
            per.append(pair_verdict(sa["rate"], sb["rate"], p["rate"], d["share_a"], limits[i],
                                    sa.get("hw") or 0.0, sb.get("hw") or 0.0, p.get("hw") or 0.0))
        verdicts[f"{a}+{b}"] = agree(per)
    names = sorted(solos)
    groups = compete_groups(names, {frozenset(k.split("+", 1)) for k, v in verdicts.items()
                                    if v["verdict"] == "compete"})
    open_ = sorted(k for k, v in verdicts.items() if not v["agreed"])
    capped = sorted(k for k, v in verdicts.items() if v["verdict"] == "add" and lim["agreed"]
                    and v["per_launch"][0].get("add") is not None
                    and v["per_launch"][0]["add"] >= (1 - LIMIT_TOL) * lim["value"])
    return {"pairs": verdicts, "groups": groups, "overlapping": overlaps(groups), "undetermined_pairs": open_,
            "issue_limit": {**lim, "capped_pairs": capped}}


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


# ----------------------------------------------------------------- instruction fetch
ICACHE_RISE = 0.15  # a region's warm cycles per instruction this much above the level's: a new level


def icache_levels(code_bytes: list[int], cpi: list[float], rise: float = ICACHE_RISE) -> list[dict]:
    """The levels of the instruction-fetch staircase: regions of growing code size (``code_bytes``,
    ascending) and their warm cycles per instruction (``cpi``, a loop over the region that has
    run once). A level is a run of sizes whose cost stays within ``rise`` of the level's lowest;
    each level: its cost (median over its sizes), the largest region on it (``to_bytes``, a lower
    bound of what that fetch level holds) and the smallest region beyond it (``next_bytes``, an
    upper bound; None for the last level measured). Sizes without a value are skipped."""
    pts = [(b, c) for b, c in zip(code_bytes, cpi, strict=True) if c is not None and np.isfinite(c)]
    levels: list[dict] = []
    cur: list[tuple[int, float]] = []
    for b, c in pts:
        if cur and c > min(x for _b, x in cur) * (1 + rise):
            levels.append(_level(cur, b))
            cur = []
        cur.append((b, c))
    if cur:
        levels.append(_level(cur, None))
    return levels


def _level(pts: list[tuple[int, float]], nxt: int | None) -> dict:
    return {"cpi": round(float(np.median([c for _b, c in pts])), 4), "from_bytes": pts[0][0],
            "to_bytes": pts[-1][0], "next_bytes": nxt, "sizes": len(pts)}


# ----------------------------------------------------------------- register banks
BANK_EXTRA = 0.5  # cycles per instruction above the cheapest pair: the two sources conflict


def free_registers(dests: set[int], regs: int, per_class: int = 3, classes: int = 4, least: int = 2) -> list[int]:
    """Register indices below ``regs`` that no instruction of the regions writes (sources a patch
    may point at without creating a dependence): the lowest ``per_class`` of each residue modulo
    ``classes`` (a sample that puts several registers in every candidate bank; the banks
    themselves are what the costs show); [] when some residue has fewer than ``least``."""
    free = [r for r in range(regs) if r not in dests]
    picks = [[r for r in free if r % classes == m][:per_class] for m in range(classes)]
    return sorted(r for p in picks for r in p) if all(len(p) >= min(least, per_class) for p in picks) else []


def bank_groups(cost: dict[tuple[int, int], float], extra: float = BANK_EXTRA) -> dict:
    """Register banks from the cost per instruction of pairs of distinct source registers (the third
    source RZ, no reuse): two registers conflict when their pair costs more than ``extra`` cycles
    above the cheapest pair; the banks are the groups of registers joined by conflicts, and the
    rule ``index mod k`` is stated where the groups are exactly its residues."""
    regs = sorted({r for p in cost for r in p})
    if len(regs) < 2:
        return {"banks": None, "why": "fewer than two registers"}
    base = min(cost.values())
    edges = [(regs.index(a), regs.index(b)) for (a, b), c in cost.items() if a != b and c > base + extra]
    label = components(len(regs), edges)
    groups = sorted(sorted(regs[i] for i in range(len(regs)) if label[i] == g) for g in set(label))
    rule = next((k for k in (2, 4, 8) if sorted(sorted(r for r in regs if r % k == m) for m in range(k)
                                                  if any(r % k == m for r in regs)) == groups), None)
    return {"banks": len(groups), "groups": groups, "rule": f"bank = register index mod {rule}" if rule else None,
            "base_cycles": round(base, 4), "conflict_cycles": round(max(cost.values()) - base, 4),
            "conflicting_pairs": len(edges)}
