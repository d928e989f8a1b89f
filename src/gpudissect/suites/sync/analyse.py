"""Analyses of the sync suite (pure functions of clock samples, tested on synthetic data):
rates from two region lengths, cycles per instance from a chain's slope, saturation of a
warp sweep, the SASS expectations of the architecture's ``sync_sass.toml``, and the contention
table."""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpudissect.arch.target import arch_table
from gpudissect.bench.stats import fit_line, noise_flag, rate_stats, slope_rates, sm_spans
from gpudissect.kernel.sass import SassInstr

PLATEAU = 0.95  # a warp count reaches the plateau when its rate is within 5% of the sweep's peak
RISE = 1.05  # the sweep is saturated when its last doubling of warps raised the rate by less


# ----------------------------------------------------------------- SASS expectations
def expectations(arch: str) -> dict:
    """What ptxas emits for the suite's timed regions on ``arch`` (``sync_sass.toml`` of its
    folder; ``sm_XXa`` reads ``sm_XX``): per table (atom, lat, bar, fence, launch) and key."""
    return arch_table(arch, "sync_sass")


def full_op(ins: SassInstr) -> str:
    """``OPCODE.MOD1.MOD2`` as the expectations name it."""
    return ".".join([ins.opcode, *ins.modifiers])


def check_region(ops: list[str], expect: dict, instances: int, harness: list[str], harness_max: int) -> list[str]:
    """What a timed region (its full opcodes) breaks of ``expect`` (main x per per instance,
    companions, at most ``harness_max`` harness instructions): one line each, [] when it holds."""
    c = Counter(ops)
    out = []
    want = expect.get("per", 1) * instances
    if c.get(expect["main"], 0) != want:
        out.append(f"{c.get(expect['main'], 0)} x {expect['main']}, expected {want}")
    allowed = {expect["main"], *expect.get("with", [])}
    other = {k: v for k, v in c.items() if k not in allowed}
    n_harness = sum(v for k, v in other.items() if k in harness)
    extra = {k: v for k, v in other.items() if k not in harness}
    if extra:
        out.append(f"unexpected SASS {dict(sorted(extra.items()))}")
    if n_harness > harness_max:
        out.append(f"{n_harness} loop-counter instructions (at most {harness_max})")
    return out


def sass_problems(region: list[SassInstr], table: str, key: str, instances: int, arch: str) -> list[str]:
    e = expectations(arch)
    exp = e.get(table, {}).get(key)
    if exp is None:
        return [f"no expectation for {table}:{key} on {arch}"]
    return check_region([full_op(i) for i in region], exp, instances, e["harness"], e["harness_max"])


# ----------------------------------------------------------------- rates and slopes
def per_sm_rate(times1: np.ndarray, times2: np.ndarray, warps: int, reps: int, units: float) -> dict:
    """Work per clock per SM from two region lengths (``units``: the work per SM the longer adds):
    the median over (SM, repetition) of units / (span2 - span1), with its spread and the SMs."""
    s1, s2 = sm_spans(times1, warps, reps), sm_spans(times2, warps, reps)
    r = rate_stats(slope_rates(s1, s2, units))
    return {**r, "sms": len({sm for _r, sm in s2})}


def chip_rate(times1: np.ndarray, times2: np.ndarray, warps: int, reps: int, units_per_sm: float) -> dict:
    """Work per clock of the whole chip when every SM starts a repetition together (a grid
    rendezvous before each): a repetition lasts as long as its slowest SM, so per kept
    repetition the rate is (SMs x units_per_sm) / (slowest span at the long length - slowest
    at the short one); the median over repetitions. ``fairness``: the fastest SM's span over
    the slowest's at the long length (1: every SM got the same share)."""
    s1, s2 = sm_spans(times1, warps, reps), sm_spans(times2, warps, reps)
    rates, fair, n = [], [], 0
    for rep in range(1, reps):
        a = [v for (r, _sm), v in s1.items() if r == rep]
        b = [v for (r, _sm), v in s2.items() if r == rep]
        if not a or not b or max(b) <= max(a):
            continue
        n = len(b)
        rates.append(n * units_per_sm / (max(b) - max(a)))
        fair.append(min(b) / max(b))
    if not rates:
        return {"rate": None, "sms": n, "fairness": None}
    return {"rate": float(np.median(rates)), "sms": n, "fairness": round(float(np.median(fair)), 4)}


def row_durations(times: np.ndarray, rows: np.ndarray | slice, reps: int) -> np.ndarray:
    """t1 - t0 of the chosen warps (rows) for every kept repetition."""
    t = times[rows]
    return np.concatenate([t[:, 2 * r + 1].astype(np.int64) - t[:, 2 * r].astype(np.int64)
                           for r in range(1, reps)]).astype(float)


def chain_slope(d1: np.ndarray, d2: np.ndarray, lengths: tuple[int, int]) -> float | None:
    """Cycles per instance of a chain: the line through the medians of the region durations at
    two lengths (the region's constant costs are the intercept)."""
    if d1.size == 0 or d2.size == 0:
        return None
    return fit_line(list(lengths), [float(np.median(d1)), float(np.median(d2))]).slope


def combine(values: list[float | None]) -> dict:
    """The launches' values of one point: median, the values, and a noise flag."""
    vals = [float(v) for v in values if v is not None and np.isfinite(v)]
    if not vals:
        return {"value": None, "per_launch": [], "flag": "error: no launch gave a value"}
    return {"value": float(np.median(vals)), "per_launch": [round(v, 4) for v in vals],
            "flag": noise_flag(vals)}


def saturation(warps: list[int], rates: list[float | None]) -> dict:
    """A warp sweep: the peak rate, the fewest warps within PLATEAU of it, and whether it has
    stopped rising (the last doubling raised it by less than RISE: a fall counts as stopped)."""
    pts = [(w, r) for w, r in zip(warps, rates, strict=True) if r is not None and r > 0]
    if not pts:
        return {"peak": None, "peak_warps": None, "plateau_warps": None, "saturated": False, "rise": None}
    peak_w, peak = max(pts, key=lambda p: p[1])
    plateau_w = min(w for w, r in pts if r >= PLATEAU * peak)
    rise = pts[-1][1] / pts[-2][1] if len(pts) >= 2 else None
    return {"peak": peak, "peak_warps": peak_w, "plateau_warps": plateau_w,
            "saturated": rise is not None and rise < RISE, "rise": None if rise is None else round(rise, 4)}


# ----------------------------------------------------------------- the contention table
def contention_table(cells: dict[tuple[str, str], dict], ops: list[str], modes: list[str],
                     unit: str = "lane-ops/clk") -> list[str]:
    """Text rows: one per op, one column per mode: 'chip[..chip_hi] (per SM) @plateau warps'
    ('-' where missing; '*' after a value whose sweep had not stopped rising)."""
    w0 = max(len(o) for o in ops) if ops else 4
    width = 28
    head = f"{'op':<{w0}} | " + " | ".join(f"{m:>{width}}" for m in modes)
    rows = [f"{unit}: chip-wide (per SM) @ warps/SM reaching 95% of the peak", head]
    for o in ops:
        parts = []
        for m in modes:
            c = cells.get((o, m))
            if not c or c.get("chip") is None:
                parts.append(f"{'-':>{width}}")
                continue
            mark = "" if c.get("saturated", True) else "*"
            v = _g(c["chip"]) + (f"..{_g(c['chip_hi'])}" if c.get("chip_hi") is not None else "")
            parts.append(f"{v:>13} ({_g(c['per_sm']):>6}) @{c.get('plateau_warps')}{mark}".rjust(width))
        rows.append(f"{o:<{w0}} | " + " | ".join(parts))
    return rows


def _g(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


SPLIT_SIGMAS = 4.0  # two groups: their medians this many times the groups' spread (MAD-based) apart
SPLIT_GAP_SIGMAS = 2.0  # ... and the gap between them at least this many times the spread
SPLIT_FLOOR = 1.0  # cycles: the least spread assumed (a chain's slope is no finer than this)


def two_groups(values: list[float]) -> dict:
    """Split latencies into a low and a high group at their widest gap (each group at least
    two values): ``bimodal`` when the groups' medians lie SPLIT_SIGMAS x the groups' spread
    (1.4826 x the larger median absolute deviation, at least SPLIT_FLOOR) apart and the gap
    itself exceeds SPLIT_GAP_SIGMAS x the spread. Returns the threshold, the
    indices of each group, their medians, the gap and the spread; not bimodal: every index low."""
    v = np.asarray(values, dtype=float)
    out = {"bimodal": False, "low": list(range(v.size)), "high": [], "gap": None, "spread": None,
           "threshold": None, "low_median": float(np.median(v)) if v.size else None, "high_median": None}
    if v.size < 4:
        return out
    order = np.argsort(v)
    s = v[order]
    gaps = np.diff(s)[1:-1]  # cuts leaving at least two values on each side
    cut = int(np.argmax(gaps)) + 2  # the first index of the high group in sorted order
    lo, hi = s[:cut], s[cut:]
    mad = max(float(np.median(np.abs(lo - np.median(lo)))), float(np.median(np.abs(hi - np.median(hi)))))
    spread = max(1.4826 * mad, SPLIT_FLOOR)
    gap = float(hi[0] - lo[-1])
    out.update(gap=gap, spread=spread)
    if gap > SPLIT_GAP_SIGMAS * spread and float(np.median(hi) - np.median(lo)) > SPLIT_SIGMAS * spread:
        out.update(bimodal=True, low=sorted(order[:cut].tolist()), high=sorted(order[cut:].tolist()),
                   threshold=float((lo[-1] + hi[0]) / 2), low_median=float(np.median(lo)),
                   high_median=float(np.median(hi)))
    return out
