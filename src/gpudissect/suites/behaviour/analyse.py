"""Analysis of the behaviour probes (pure functions over traces; no GPU), the occupancy rules
they are compared with, and the suite's summary.

Each function takes the raw traces a probe recorded and returns a dict with a ``policy`` /
``conclusion`` string and the numbers behind it. Thresholds are module constants.
:func:`summarize` runs them again on a run's stored traces and states the conclusions.
"""

from __future__ import annotations

import math
import tomllib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpudissect.suites.behaviour.kernels import SEGMENTS
from gpudissect.target import TargetError

if TYPE_CHECKING:
    from gpudissect.store.db import Store
    from gpudissect.target import Target

BREADTH_FIRST = 0.95  # share of the first nsm blocks on distinct SMs
COMPETE = 0.7  # pipes: share of the shorter solo time that a pair adds (1: fully serial)
INDEPENDENT = 0.3
ISSUE_BOUND = 0.9  # a pair whose issue rate is this close to the issue limit is undecidable
SLOWDOWN = 1.3  # schedulers: a pair slowed by this factor shares a scheduler


# ----------------------------------------------------------------- occupancy rules
def occupancy_rules(target: Target) -> dict:
    """The CUDA occupancy rules of the target's architecture (the data file its facts name)."""
    return _rules(target.data_file("occupancy"), target.base)


@cache
def _rules(path: Path, arch: str) -> dict:
    table = tomllib.loads(path.read_text())
    if arch not in table:
        raise TargetError(f"no occupancy rules for {arch} in {path.name}")
    return table[arch]


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def predict_blocks(threads: int, regs: int, smem: int, rules: dict) -> dict:
    """Blocks per SM the occupancy rules predict (the calculator's method), and the limiter.
    ``regs``: registers per thread of the cubin; ``smem``: shared memory per block (bytes)."""
    warps = -(-threads // 32)
    lim: dict[str, int] = {
        "blocks": rules["max_blocks_per_sm"],
        "warps": rules["max_warps_per_sm"] // warps,
        "threads": rules["max_threads_per_sm"] // (warps * 32),
    }
    if regs > 0:
        per_warp = _round_up(regs * 32, rules["reg_alloc_unit"])
        if per_warp * warps > rules["max_regs_per_block"] or regs > rules["max_regs_per_thread"]:
            lim["registers"] = 0
        else:
            sp = rules.get("sub_partitions", 1)
            warps_per_sp = (rules["regs_per_sm"] // sp) // per_warp
            lim["registers"] = (warps_per_sp * sp) // warps
    need = _round_up(smem + rules["smem_reserved_per_block"], rules["smem_alloc_unit"])
    if smem > rules["max_smem_per_block"]:
        lim["shared_memory"] = 0
    elif smem > 0:
        lim["shared_memory"] = rules["smem_per_sm"] // need
    blocks = min(lim.values())
    limiter = sorted(k for k, v in lim.items() if v == blocks)
    return {"blocks": blocks, "warps": blocks * warps, "limiters": limiter, "limits": lim}


# ----------------------------------------------------------------- residency / dispatch
def max_concurrency(start: np.ndarray, end: np.ndarray) -> int:
    """Most intervals [start, end) open at once (an end at t frees before a start at t)."""
    if len(start) == 0:
        return 0
    ev = np.concatenate([np.stack([end, np.zeros_like(end)], 1),
                         np.stack([start, np.ones_like(start)], 1)])
    order = np.lexsort((ev[:, 1], ev[:, 0]))
    delta = np.where(ev[order, 1] == 1, 1, -1)
    return int(np.cumsum(delta).max())


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
    agree = None
    if len(freed) > 1:
        f = np.array(freed)
        agree = float(np.mean(f[1:] >= f[:-1] - tol))
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
        "refill_fifo_agreement": None if agree is None else round(agree, 4),
    }
    return out


# ----------------------------------------------------------------- warp scheduling
def scheduler_groups(n_warps: int, pair_slowdown: dict[tuple[int, int], float]) -> dict:
    """Which warps share a scheduler, from the slowdown of warp pairs running together
    (pair time / solo time). Tests the rules 'w mod k' and 'w // k'."""
    compete = {p for p, s in pair_slowdown.items() if s >= SLOWDOWN}
    parent = list(range(n_warps))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in compete:
        parent[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for w in range(n_warps):
        groups.setdefault(find(w), []).append(w)
    found = sorted(groups.values())
    rule = None
    for k in (1, 2, 3, 4, 6, 8, 16):
        if k > n_warps:
            break
        mod = sorted([w for w in range(n_warps) if w % k == r] for r in range(k))
        div = sorted([w for w in range(n_warps) if w // max(1, n_warps // k) == r] for r in range(k))
        if found == mod:
            rule = f"warp w -> scheduler (w mod {k})"
            break
        if found == div and k > 1:
            rule = f"warp w -> scheduler (w // {n_warps // k})"
            break
    vals = np.array(list(pair_slowdown.values())) if pair_slowdown else np.zeros(1)
    return {"groups": found, "rule": rule, "schedulers": len(found),
            "slowdown_competing": round(float(np.median([pair_slowdown[p] for p in compete])), 3) if compete else None,
            "slowdown_other": round(float(np.median([s for p, s in pair_slowdown.items() if p not in compete])), 3)
            if len(compete) < len(pair_slowdown) else None,
            "slowdown_max": round(float(vals.max()), 3)}


def issue_order(stamps: np.ndarray, groups: list[list[int]]) -> dict:
    """The order in which a scheduler picks ready warps, from per-warp time stamps
    (``stamps[w, s]``: clock after segment s of warp w). For each group of warps sharing a
    scheduler: the overlap of the warps' active spans (round-robin: the warps progress together;
    greedy: one runs ahead, the others wait) and the mean run of consecutive stamps by one warp."""
    per = []
    for g in groups:
        if len(g) < 2:
            continue
        s = stamps[g].astype(np.int64)
        lo, hi = s[:, 0], s[:, -1]
        spans = hi - lo
        ov = []
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                inter = min(hi[i], hi[j]) - max(lo[i], lo[j])
                ov.append(max(inter, 0) / max(min(spans[i], spans[j]), 1))
        flat = np.concatenate([np.stack([s[i], np.full(s.shape[1], i)], 1) for i in range(len(g))])
        flat = flat[np.lexsort((flat[:, 1], flat[:, 0]))]
        changes = int(np.sum(flat[1:, 1] != flat[:-1, 1]))
        run = len(flat) / (changes + 1)
        first = [g[i] for i in np.argsort(lo, kind="stable")]
        finish = [g[i] for i in np.argsort(hi, kind="stable")]
        per.append({"warps": g, "span_overlap": round(float(np.mean(ov)), 4), "mean_run": round(run, 3),
                    "start_order": first, "finish_order": finish})
    if not per:
        return {"policy": "undetermined (no scheduler shared by two warps)", "groups": []}
    ov = float(np.median([p["span_overlap"] for p in per]))
    run = float(np.median([p["mean_run"] for p in per]))
    segs = stamps.shape[1]
    if ov >= 0.6 and run <= max(2.0, segs / 4):
        pol = "round-robin: warps sharing a scheduler progress together (loose round robin)"
    elif ov <= 0.3:
        tau = float(np.mean([_kendall(p["finish_order"]) for p in per]))
        if tau >= 0.5:
            who = "the lowest-numbered ready warp (warps finish in ascending warp order)"
        elif tau <= -0.5:
            who = "the highest-numbered ready warp (warps finish in descending warp order)"
        else:
            who = "another ready warp (no fixed order by warp number)"
        pol = f"greedy: one warp issues until it stalls, then {who}"
    else:
        pol = "mixed: partial interleaving"
    tau = float(np.mean([_kendall(p["finish_order"]) for p in per]))
    return {"policy": pol, "span_overlap_median": round(ov, 4), "mean_run_median": round(run, 3),
            "finish_order_tau": round(tau, 3), "groups": per}


def _kendall(order: list[int]) -> float:
    """Kendall's tau of a sequence against ascending order (+1 ascending, -1 descending)."""
    n = len(order)
    if n < 2:
        return 0.0
    c = sum(1 if order[j] > order[i] else -1 for i in range(n) for j in range(i + 1, n))
    return c / (n * (n - 1) / 2)


# ----------------------------------------------------------------- pipes
def pipe_pairs(solo: dict[str, dict], pairs: dict[tuple[str, str], dict], schedulers: int = 4) -> dict:
    """Pipe groups from solo and paired runs.

    ``solo[v] = {"cycles": c, "issued": n}`` (warp-instructions of the whole loop, all SASS,
    issued per SM), ``pairs[(a, b)] = {"cycles": c, "issued": n}`` for the kernel running a's
    and b's chains together (the same chains as the solo kernels)."""
    issue = {}
    for v, d in solo.items():
        issue[v] = d["issued"] / d["cycles"]
    for p, d in pairs.items():
        issue["+".join(p)] = d["issued"] / d["cycles"]
    limit = max(issue.values()) / schedulers if issue else None
    verdicts = {}
    for (a, b), d in pairs.items():
        ta, tb, tab = solo[a]["cycles"], solo[b]["cycles"], d["cycles"]
        share = (tab - max(ta, tb)) / max(min(ta, tb), 1e-9)
        rate = d["issued"] / tab / schedulers
        bound = limit is not None and rate >= ISSUE_BOUND * limit
        if share >= COMPETE and not bound:
            v = "compete"
        elif share <= INDEPENDENT:
            v = "independent"
        elif bound:
            v = "issue-bound"
        else:
            v = "partial"
        verdicts[f"{a}+{b}"] = {"share": round(share, 3), "verdict": v,
                                "issue_per_scheduler": round(rate, 3),
                                "cycles": tab, "solo_cycles": [ta, tb]}
    names = sorted(solo)
    parent = {n: n for n in names}

    def find(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    for key, d in verdicts.items():
        if d["verdict"] == "compete":
            a, b = key.split("+", 1)
            parent[find(a)] = find(b)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(find(n), []).append(n)
    return {"groups": sorted(groups.values()), "pairs": verdicts,
            "issue_limit_per_scheduler": None if limit is None else round(limit, 3),
            "issue_rates_per_sm": {k: round(v, 3) for k, v in issue.items()}}


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


# ----------------------------------------------------------------- summary
def summarize(store: Store, run_id: int) -> dict:
    """The suite's conclusions, with the numbers behind them, from the run's stored results."""
    rs = store.results(run_id)
    out: dict = {"conclusions": [], "dispatch": {}, "scheduler": {}, "pipes": {}, "occupancy": {}}
    C = out["conclusions"]
    disp = [r for r in rs if r["measure"] == "dispatch" and r["value"] is not None]
    for r in disp:  # the analysis runs again on the stored raw traces
        sm = r["samples"]
        d = r["fit"]["dispatch"] = dispatch(np.array(sm["lin"]), np.array(sm["smid"]),
                                            np.array(sm["g0_ns"]), np.array(sm["g1_ns"]),
                                            r["fit"]["nsmid"])
        out["dispatch"][r["variant"]] = {**d, "blocks_per_sm": r["value"],
                                         "predicted_blocks_per_sm": r["fit"]["predicted"]["blocks"],
                                         "params": r["params"]}
    if disp:
        main = next((r for r in disp if r["variant"] == "dispatch:1d-1perSM"), disp[0])
        d = main["fit"]["dispatch"]
        C.append(f"dispatch ({main['variant']}, {d['blocks']} blocks): {d['policy']}; first SMs in block "
                 f"order {d['first_sms'][:24]}...; consecutive blocks on one TPC (smid//2) "
                 f"{100 * d['consecutive_same_tpc']:.0f}%; step between consecutive TPCs visited: "
                 f"{d['tpc_steps_top']} (step in TPCs: count)")
        for r in disp:
            d = r["fit"]["dispatch"]
            refill = ("" if d["refill_gap_ns_median"] is None else
                      f"; a freed slot is refilled after {d['refill_gap_ns_median']:.0f} ns median "
                      f"(p90 {d['refill_gap_ns_p90']:.0f}), blocks take freed slots in the order they "
                      f"were freed in {100 * d['refill_fifo_agreement']:.0f}% of consecutive blocks")
            grid_cap = -(-d["blocks"] // r["fit"]["sms_reported"])
            pred = r["fit"]["predicted"]["blocks"]
            capped = (f"; the grid ({d['blocks']} blocks) allows at most {grid_cap} per SM: blocks on "
                      f"{100 * d['distinct_tpc_share_first_half']:.0f}% distinct TPCs among the first "
                      "half-SM-count blocks, SMs used " + str(sorted(set(r["samples"]["smid"]))))\
                if grid_cap < pred else ""
            C.append(f"{r['variant']}: {int(r['value'])} blocks/SM at once (rules: "
                     f"{pred}{capped}), blocks start in id order: "
                     f"{'yes' if d['in_order'] else 'no'} ({100 * d['start_inversions']:.1f}% inversions, "
                     f"timer step {d['timer_resolution_ns']} ns){refill}")
    occ = [r for r in rs if r["measure"] == "occupancy"]
    dis = []
    for r in occ:
        q = r["params"]
        pred = (r["fit"] or {}).get("predicted", {})
        row = {"threads": q["threads"], "regs": q["regs"], "smem": q["smem"],
               "measured_blocks": r["value"], "predicted_blocks": pred.get("blocks"),
               "measured_warps": None if r["value"] is None else r["value"] * q["warps_per_block"],
               "predicted_warps": pred.get("warps"), "limiters": pred.get("limiters"),
               "flags": r["flags"]}
        out["occupancy"][r["variant"]] = row
        if r["value"] is not None and r["value"] != pred.get("blocks"):
            dis.append(f"{r['variant']} (regs {q['regs']}, smem {q['smem']} B, {q['threads']} threads): "
                       f"measured {int(r['value'])} blocks/SM, rules {pred.get('blocks')}")
    if occ:
        ok = sum(1 for r in occ if r["value"] is not None and r["value"] == r["fit"]["predicted"]["blocks"])
        C.append(f"occupancy: {ok}/{len(occ)} configurations match the CUDA occupancy rules"
                 + ("" if not dis else "; disagreements: " + "; ".join(dis)))
    pairs = next((r for r in rs if r["variant"] == "scheduler:pairs" and r["fit"]), None)
    if pairs:
        g = pairs["fit"]["groups"]
        out["scheduler"]["pairs"] = g
        C.append(f"schedulers: {g['schedulers']} groups of warps that slow each other "
                 f"({g['rule'] or 'no simple rule'}); groups {g['groups']}; pair slowdown "
                 f"{g['slowdown_competing']} (same group) vs {g['slowdown_other']} (different); one warp "
                 f"alone issues {pairs['fit']['solo_ffma_per_clk']} FFMA/clk")
    order = next((r for r in rs if r["variant"] == "scheduler:order" and r["fit"]), None)
    if order:  # the analysis runs again on the stored stamps, with the groups it used
        o = order["fit"] = issue_order(np.array(order["samples"]["stamps"]),
                                       [g["warps"] for g in order["fit"]["groups"]])
        out["scheduler"]["order"] = {k: v for k, v in o.items() if k != "groups"}
        C.append(f"warp issue order: {o['policy']} (span overlap {o.get('span_overlap_median')}, mean run "
                 f"of consecutive stamps by one warp {o.get('mean_run_median')} of {SEGMENTS}, finish "
                 f"order tau {o.get('finish_order_tau')}); %warpid of warps 0..: "
                 f"{order['samples']['warpid']}")
    pipes = [r for r in rs if r["measure"] == "pipes" and r["value"] is not None
             and not any(f.startswith(("sass:", "error:")) for f in r["flags"])]
    solo = {r["params"]["parts"][0]: {"cycles": r["value"], "issued": r["fit"]["issued_warp_instr"]}
            for r in pipes if len(r["params"]["parts"]) == 1}
    pr = {tuple(r["params"]["parts"]): {"cycles": r["value"], "issued": r["fit"]["issued_warp_instr"]}
          for r in pipes if len(r["params"]["parts"]) == 2
          and all(v in solo for v in r["params"]["parts"])}
    if solo:
        pp = pipe_pairs(solo, pr)
        rates = {r["params"]["parts"][0]: r["fit"]["per_variant"][r["params"]["parts"][0]]
                 for r in pipes if len(r["params"]["parts"]) == 1}
        out["pipes"] = {**pp, "solo": rates}
        C.append(f"pipes: groups that compete {pp['groups']}; issue limit "
                 f"{pp['issue_limit_per_scheduler']} warp-instr/clk per scheduler (max observed, all SASS "
                 "of the loop, 4 schedulers); " + ", ".join(
                     f"{k}: {v['verdict']} ({v['share']})" for k, v in pp["pairs"].items()))
    return out
