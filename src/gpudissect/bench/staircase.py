"""Plateaus and steps of a latency-vs-footprint curve (the memory staircase).

Method: optimal piecewise-constant segmentation of log(latency) (dynamic programming, cost =
squared error + a penalty per segment scaled by the noise level, estimated robustly from the
data's first differences); adjacent segments whose levels differ by less than ``min_rel`` are
merged; segments of at least ``min_points`` points are plateaus, the points between two
plateaus are the transition. A step is reported between consecutive plateaus with its
evidence: the last footprint on the lower plateau (the capacity estimate: the largest
working set still served at the lower level), the first on the upper one, both levels and
their ratio. Plateau end points further than max(min_rel, 3 sigma) from the plateau's
level are trimmed off (they belong to the transition).

The level change that counts as a step (``min_rel``) is either fixed (12 %: the cache
staircase, whose levels differ by tens of percent) or comes from the measured spread of the
repeats (:func:`spread_threshold`: ``SPREAD_K`` x the pooled relative spread of each point's
repeated launches), for small effects such as translation misses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

NOISE_FLOOR = 0.01  # log-units: 1 % relative noise assumed at least (noise-free synthetic data)
SPREAD_K = 5.0  # a step must exceed this many pooled relative spreads of the repeats
SPREAD_FLOOR = 0.005  # and at least 0.5 % (repeats that agree exactly still leave rounding)


@dataclass
class Plateau:
    x_first: float
    x_last: float
    level: float  # median latency on the plateau
    points: int
    spread: float  # relative (max - min) / level on the plateau


@dataclass
class Step:
    x_below: float  # last footprint on the lower plateau: capacity estimate
    x_above: float  # first footprint on the upper plateau
    level_below: float
    level_above: float
    ratio: float
    transition_points: int  # points strictly between the two plateaus
    transition: list[tuple[float, float]] | None = None  # those points (x, y): the evidence

    def to_json(self) -> dict:
        return asdict(self)


def _noise(z: np.ndarray, floor: float = NOISE_FLOOR) -> float:
    if z.size < 3:
        return floor
    d = np.diff(z)
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(floor, 1.4826 * mad / np.sqrt(2))


def segment(z: np.ndarray, penalty: float) -> list[tuple[int, int]]:
    """Optimal partition of z into constant segments [(start, end_exclusive)], minimizing
    SSE + penalty * segments (O(n^2) dynamic programming; n is a sweep, tens of points)."""
    n = z.size
    c1 = np.concatenate([[0.0], np.cumsum(z)])
    c2 = np.concatenate([[0.0], np.cumsum(z * z)])

    def sse(i: int, j: int) -> float:
        s = c1[j] - c1[i]
        return float(c2[j] - c2[i] - s * s / (j - i))

    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    prev = np.zeros(n + 1, dtype=int)
    for j in range(1, n + 1):
        for i in range(j):
            c = best[i] + sse(i, j) + penalty
            if c < best[j]:
                best[j], prev[j] = c, i
    segs = []
    j = n
    while j > 0:
        segs.append((int(prev[j]), j))
        j = int(prev[j])
    return segs[::-1]


def pooled_spread(samples) -> float:
    """Relative spread of repeated measurements, pooled over the points: per point the
    standard deviation of its repeats over their median, then the median over the points
    (one wild point does not set it). ``samples``: one list of repeats per point; points
    with fewer than two finite repeats do not count. 0 when no point has repeats."""
    rel = []
    for reps in samples:
        a = np.asarray([v for v in reps if v is not None and np.isfinite(v)], dtype=float)
        if a.size >= 2 and np.median(a) > 0:
            rel.append(float(np.std(a, ddof=1) / np.median(a)))
    return float(np.median(rel)) if rel else 0.0


def spread_threshold(samples, k: float = SPREAD_K, floor: float = SPREAD_FLOOR) -> float:
    """The relative level change that counts as a step: ``k`` x :func:`pooled_spread` of the
    repeats, at least ``floor``."""
    return max(floor, k * pooled_spread(samples))


def detect(xs, ys, min_rel: float = 0.12, min_points: int = 2,
           penalty_scale: float = 8.0, noise: float | None = None
           ) -> tuple[list[Plateau], list[Step]]:
    """Plateaus and steps of y(x) (x increasing, y > 0). ``min_rel``: the smallest relative
    level change kept as a step (:func:`spread_threshold` derives it from the repeats);
    ``noise``: a relative noise level measured from repeats, used beside the one estimated
    from the data's first differences (the larger wins) for the segmentation penalty."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.size != y.size or x.size == 0:
        return [], []
    order = np.argsort(x)
    x, y = x[order], y[order]
    ok = np.isfinite(y) & (y > 0)
    x, y = x[ok], y[ok]
    if x.size < min_points:
        return [], []
    z = np.log(y)
    # measured repeats replace the assumed 1 % floor (the data's own scatter still counts)
    sigma = _noise(z) if noise is None else max(_noise(z, 0.1 * SPREAD_FLOOR), noise)
    segs = segment(z, penalty_scale * sigma * sigma * max(1.0, np.log(z.size)))
    # merge neighbours whose levels differ by less than min_rel
    merged: list[list[int]] = []
    for a, b in segs:
        if merged:
            pa, pb = merged[-1]
            if abs(np.median(z[a:b]) - np.median(z[pa:pb])) < np.log1p(min_rel):
                merged[-1][1] = b
                continue
        merged.append([a, b])
    # trim end points that sit off their segment's level (the start of a ramp that the
    # penalty folded into a plateau)
    tol = max(np.log1p(min_rel), 3 * sigma)
    trimmed = []
    for a, b in merged:
        while b - a > 1:
            lev = np.median(z[a:b])
            if abs(z[b - 1] - lev) > tol:
                b -= 1
            elif abs(z[a] - lev) > tol:
                a += 1
            else:
                break
        trimmed.append((a, b))
    plateaus: list[tuple[int, int]] = [(a, b) for a, b in trimmed if b - a >= min_points]
    pl = []
    for a, b in plateaus:
        lev = float(np.median(y[a:b]))
        pl.append(Plateau(float(x[a]), float(x[b - 1]), lev, b - a,
                          float((y[a:b].max() - y[a:b].min()) / lev)))
    steps = []
    for (_a0, b0), (a1, _b1), p0, p1 in zip(plateaus, plateaus[1:], pl, pl[1:], strict=False):
        ratio = p1.level / p0.level
        if abs(np.log(ratio)) < np.log1p(min_rel):
            continue
        steps.append(Step(float(x[b0 - 1]), float(x[a1]), p0.level, p1.level, float(ratio),
                          int(a1 - b0), [(float(x[i]), float(y[i])) for i in range(b0, a1)]))
    return pl, steps


def refine_points(steps: list[Step], existing, per_step: int = 3) -> list[float]:
    """New sweep points (geometric) strictly inside each step's bracket, for resolution."""
    have = set(float(v) for v in existing)
    out: list[float] = []
    for s in steps:
        lo, hi = np.log(s.x_below), np.log(s.x_above)
        for t in np.linspace(lo, hi, per_step + 2)[1:-1]:
            v = float(np.exp(t))
            if all(abs(v / h - 1) > 0.02 for h in have):
                out.append(v)
                have.add(v)
    return out
