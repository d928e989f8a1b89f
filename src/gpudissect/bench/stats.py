"""Statistics of clock samples: robust summaries, slope fits, per-SM spans."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gpudissect.kernel.timing import end_word, start_word


@dataclass
class Summary:
    median: float
    iqr: float
    min: float
    max: float
    n: int

    @property
    def rel_spread(self) -> float:
        return self.iqr / self.median if self.median else float("inf")


def median(values) -> float:
    """``np.median`` of a sample (any shape, taken flat), the same float, without numpy's
    per-call machinery: a sweep takes tens of thousands of medians of a few to a few hundred
    values, and the wrapper costs more than the sort. NaN where the sample holds one (as
    numpy); an empty sample is a ValueError."""
    a = np.sort(np.asarray(values, dtype=float), axis=None)
    n = a.size
    if n == 0:
        raise ValueError("median of an empty sample")
    if np.isnan(a[-1]):  # a sort puts NaNs last
        return float("nan")
    h = n // 2
    return float(a[h]) if n % 2 else float((a[h - 1] + a[h]) / 2)


def summarize(samples) -> Summary:
    a = np.asarray(samples, dtype=float)
    if a.size == 0:
        raise ValueError("no samples")
    q1, q3 = np.percentile(a, [25, 75])
    return Summary(float(np.median(a)), float(q3 - q1), float(a.min()), float(a.max()), int(a.size))


@dataclass
class Fit:
    slope: float
    intercept: float
    r2: float
    stderr: float
    xs: list[float]
    ys: list[float]

    def to_json(self) -> dict:
        return asdict(self)


def _two_xs(x: np.ndarray) -> None:
    if x.size < 2 or np.unique(x).size < 2:
        raise ValueError("need at least two distinct x values to fit a slope")


def fit_line(xs, ys) -> Fit:
    """Least-squares line through (x, y); the slope is the cost per unit, the intercept the
    fixed overhead (clock reads, pipeline drain). Closed form (the fits are of a few points,
    thousands of them per run: scipy's general wrapper costs more than the arithmetic)."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    _two_xs(x)
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy, sxy = float(dx @ dx), float(dy @ dy), float(dx @ dy)
    slope = sxy / sxx
    intercept = float(y.mean()) - slope * float(x.mean())
    resid = y - (intercept + slope * x)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        r2 = 0.0
    elif syy == 0.0 or bool((np.abs(resid) <= 1e-8 * max(1.0, float(np.abs(y).max()))).all()):
        r2 = 1.0  # the points lie on the line (a constant series included)
    else:
        r2 = min(1.0, sxy * sxy / (sxx * syy))
    n = x.size
    stderr = float(np.sqrt(float(resid @ resid) / (n - 2) / sxx)) if n > 2 else 0.0
    return Fit(float(slope), float(intercept), float(r2), stderr, x.tolist(), y.tolist())


SMID = -1  # a row's last word: its %smid (kernel/timing.py smid_word: after the kept repetitions)


def rep_cycles(times: np.ndarray, rep: int) -> np.ndarray:
    """Cycles of repetition ``rep`` for every warp (one row per warp): t1 - t0."""
    return (times[:, end_word(rep)].astype(np.int64) - times[:, start_word(rep)].astype(np.int64))


@dataclass
class SmStats:
    """Per-SM view of one repetition (vectorised: one pass over the warps, no per-SM loop)."""

    sm: np.ndarray  # SM ids
    warps: np.ndarray  # warps that ran on each SM
    span: np.ndarray  # cycles from the SM's first start to its last end
    overlap: np.ndarray  # True where all of the SM's warps were inside the region at one instant
    idle: np.ndarray  # share of the span in which no warp of the SM was inside its region


def per_sm(times: np.ndarray, rep: int) -> SmStats:
    """%clock64 is a per-SM counter, so spans are only formed within one SM. ``times`` has one
    row per warp (lane 0 writes it: the threads of a warp share the SM and run the region
    together)."""
    return per_sm_reps(times, [rep])[0]


def per_sm_reps(times: np.ndarray, reps) -> list[SmStats]:
    """:func:`per_sm` of each repetition of ``reps``, the rows grouped by SM once (a sort by SM
    and one reduction per column, in place of a ``ufunc.at`` per column and repetition: a
    throughput sweep takes tens of thousands of these)."""
    reps = list(reps)
    smid = times[:, SMID].astype(np.int64)
    order = np.argsort(smid, kind="stable")
    s = smid[order]
    starts = np.concatenate(([0], np.flatnonzero(s[1:] != s[:-1]) + 1))
    n = starts.size
    warps = np.diff(np.append(starts, s.size))
    inv = np.empty(s.size, dtype=np.int64)
    inv[order] = np.repeat(np.arange(n), warps)
    sms = s[starts]
    cols = [start_word(r) for r in reps] + [end_word(r) for r in reps]
    clk = np.ascontiguousarray(times[:, cols].astype(np.int64).T)  # a row per column of ``cols``
    by_sm = clk[:, order]
    lo, hi = np.minimum.reduceat(by_sm, starts, axis=1), np.maximum.reduceat(by_sm, starts, axis=1)
    out = []
    for j in range(len(reps)):
        k = len(reps) + j  # the end column of the repetition
        span = (hi[k] - lo[j]).astype(float)
        t0, t1 = clk[j], clk[k]
        out.append(SmStats(sms, warps, span, lo[k] > hi[j],
                           _idle(inv, t0, t1, n) / np.maximum(span, 1.0)))
    return out


def _idle(inv: np.ndarray, t0: np.ndarray, t1: np.ndarray, n: int) -> np.ndarray:
    """Cycles of each SM's span covered by no warp's window (the union of the windows has
    gaps): sort the warps by (SM, start); a start after every earlier end of its SM is a gap.
    Warps that run one after another (a greedy scheduler) leave no gap; a late start does."""
    a0 = t0 - t0.min()
    if a0.max(initial=0) < 1 << 40:  # one int64 key, SM then start: the lexsort's order, in one argsort
        order = np.argsort((inv.astype(np.int64) << 40) | a0, kind="stable")
    else:
        order = np.lexsort((t0, inv))
    g, a, b = inv[order], a0[order], t1[order] - t0.min()
    big = int(max(b.max(), 1)) + 1
    reach = np.maximum.accumulate(b + g * big)  # running end per SM (SM blocks never mix)
    gap = np.zeros(len(order), dtype=np.int64)
    same = g[1:] == g[:-1]
    gap[1:] = np.where(same, np.maximum(a[1:] + g[1:] * big - reach[:-1], 0), 0)
    return np.bincount(g, weights=gap, minlength=n).astype(float)


def sm_windows(times: np.ndarray, rep: int) -> list[tuple[int, int]]:
    """Per-warp (start, end) of repetition ``rep`` on the lowest-numbered SM, relative to its
    first start: the evidence kept beside a throughput figure."""
    w = times
    smid = w[:, SMID].astype(np.int64)
    m = smid == smid.min()
    t0 = w[m, start_word(rep)].astype(np.int64)
    t1 = w[m, end_word(rep)].astype(np.int64)
    base = t0.min()
    return list(zip((t0 - base).tolist(), (t1 - base).tolist(), strict=True))


# --- noise and fit checks derived from the repeats themselves ------------------------------
NOISE_TOL = 0.02  # a value whose 95% interval is wider than +-2% of it is flagged noisy
RESID_CYCLES = 2.0  # a fit point may miss the line by this many cycles ...
RESID_REL = 0.01  # ... or by this share of the largest measured value, whichever is larger


def robust_halfwidth(values) -> float:
    """Half-width of an approximate 95% interval of the median of ``values``: 1.96 x the
    median's standard error (1.2533 sigma / sqrt(n)) with sigma from the median absolute
    deviation, so one outlying repeat does not make a value noisy. 0 for a constant series."""
    a = np.asarray(values, dtype=float)
    if a.size < 2:
        return 0.0
    sigma = 1.4826 * median(np.abs(a - median(a)))
    return 1.96 * 1.2533 * sigma / np.sqrt(a.size)


def noise_flag(values, tol: float = NOISE_TOL) -> str | None:
    """``noisy: ...`` when the repeats of one value (e.g. the slope of each launch) leave it
    uncertain by more than ``tol`` of itself; None for a constant or tight series."""
    a = np.asarray(values, dtype=float)
    if a.size < 2:
        return None
    med = median(a)
    hw = robust_halfwidth(a)
    if hw == 0.0:
        return None
    rel = hw / abs(med) if med else float("inf")
    if rel <= tol:
        return None
    return f"noisy: +-{rel:.1%} (95% interval of the median of {a.size} repeats)"


def fit_flag(fit: Fit) -> str | None:
    """``poor-fit: ...`` when a point misses the fitted line by more than RESID_CYCLES or
    RESID_REL of the largest value (the cost is not linear in the instances: another effect
    grows with them)."""
    x, y = np.asarray(fit.xs, dtype=float), np.asarray(fit.ys, dtype=float)
    resid = np.abs(y - (fit.intercept + fit.slope * x))
    bound = max(RESID_CYCLES, RESID_REL * float(np.max(np.abs(y))))
    worst = float(resid.max()) if resid.size else 0.0
    if worst <= bound:
        return None
    return f"poor-fit: a point misses the line by {worst:.1f} cycles (> {bound:.1f}); r2={fit.r2:.4f}"


def slopes_per_repeat(xs, series: list[list[float]]) -> list[float]:
    """The slope of each repeat: ``series[i][j]`` is repeat i's value at ``xs[j]`` (each
    :func:`fit_line`'s slope, the same float, without the rest of its fit)."""
    rows = [ys for ys in series if len(ys) == len(xs)]
    if not rows:
        return []
    x = np.asarray(xs, dtype=float)
    _two_xs(x)
    dx = x - x.mean()
    sxx = float(dx @ dx)
    out = []
    for ys in rows:
        y = np.asarray(ys, dtype=float)
        out.append(float(dx @ (y - y.mean())) / sxx)
    return out


def components(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """The connected component of each of ``n`` nodes joined by ``edges`` (undirected): a label
    per node, equal within a component (scipy's connected_components)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if not edges:
        return list(range(n))
    a, b = zip(*edges, strict=True)
    graph = coo_matrix(([1] * len(edges), (a, b)), shape=(n, n))
    return [int(x) for x in connected_components(graph, directed=False)[1]]


RISE = 1.02  # a solo is saturated when more warps/chains raise its rate by less than this


def max_concurrency(start: np.ndarray, end: np.ndarray) -> int:
    """Most intervals [start, end) open at once (an end at t frees before a start at t)."""
    if len(start) == 0:
        return 0
    ev = np.concatenate([np.stack([end, np.zeros_like(end)], 1),
                         np.stack([start, np.ones_like(start)], 1)])
    order = np.lexsort((ev[:, 1], ev[:, 0]))
    delta = np.where(ev[order, 1] == 1, 1, -1)
    return int(np.cumsum(delta).max())


def slope_rates(spans1: dict, spans2: dict, units: float) -> list[float]:
    """Rates from two region lengths: ``spansN[(rep, sm)]`` the SM's span (cycles) at the
    shorter / longer length; ``units`` the work the longer one adds. One rate per (rep, SM)
    timed at both (the constant costs of a region cancel in the difference)."""
    out = []
    for k, a in spans1.items():
        b = spans2.get(k)
        if b is not None and b > a:
            out.append(units / (b - a))
    return out


def rate_stats(samples: list[float]) -> dict:
    if not samples:
        return {"rate": None, "hw": None, "n": 0}
    return {"rate": round(float(np.median(samples)), 5), "hw": round(robust_halfwidth(samples), 5),
            "n": len(samples)}


def saturation(rates: list[float | None]) -> dict:
    """Whether a solo rate has stopped rising: ``rates`` at configurations of growing
    parallelism (warps x chains) in one launch; saturated when the largest raises the one
    before it by less than RISE."""
    if len(rates) < 2 or rates[-1] is None or rates[-2] is None or rates[-2] <= 0:
        return {"saturated": False, "rise": None, "why": "fewer than two configurations timed"}
    rise = rates[-1] / rates[-2]
    ok = rise <= RISE
    return {"saturated": ok, "rise": round(rise, 4),
            **({} if ok else {"why": f"still rising: x{rise:.3f} from the last step of parallelism"})}


def sm_spans(times: np.ndarray, warps: int, reps: int) -> dict[tuple[int, int], float]:
    """(kept repetition, SM) -> span from the SM's first start to its last end, for SMs that
    held ``warps`` warps (the first repetition, cold, is dropped)."""
    out: dict[tuple[int, int], float] = {}
    for rep, st in zip(range(1, reps), per_sm_reps(times, range(1, reps)), strict=True):
        for sm, w, span in zip(st.sm, st.warps, st.span, strict=True):
            if w == warps:
                out[(rep, int(sm))] = float(span)
    return out
