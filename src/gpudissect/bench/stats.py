"""Statistics of clock samples: robust summaries, slope fits, per-SM spans."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

# thresholds for flags (a measurement beyond them is flagged, not presented as clean)
MAX_REL_SPREAD = 0.05  # IQR / median of repeated samples at one length
MIN_R2 = 0.995  # linear fit of cycles against chain length


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


def fit_line(xs, ys) -> Fit:
    """Least-squares line through (x, y); the slope is the cost per unit, the intercept the
    fixed overhead (clock reads, pipeline drain)."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.size < 2 or np.unique(x).size < 2:
        raise ValueError("need at least two distinct x values to fit a slope")
    r = stats.linregress(x, y)
    r2 = float(r.rvalue**2) if np.isfinite(r.rvalue) else (1.0 if np.allclose(y, y[0]) else 0.0)
    if np.allclose(y, r.intercept + r.slope * x):
        r2 = 1.0
    return Fit(float(r.slope), float(r.intercept), r2, float(r.stderr), x.tolist(), y.tolist())


def rep_cycles(times: np.ndarray, rep: int) -> np.ndarray:
    """Cycles of repetition ``rep`` for every thread: t1 - t0."""
    return (times[:, 2 * rep + 1].astype(np.int64) - times[:, 2 * rep].astype(np.int64))


@dataclass
class SmStats:
    """Per-SM view of one repetition (vectorised: one pass over the warps, no per-SM loop)."""

    sm: np.ndarray  # SM ids
    warps: np.ndarray  # warps that ran on each SM
    span: np.ndarray  # cycles from the SM's first start to its last end
    overlap: np.ndarray  # True where all of the SM's warps were inside the region at one instant


def per_sm(times: np.ndarray, rep: int) -> SmStats:
    """%clock64 is a per-SM counter, so spans are only formed within one SM. One row per warp
    (lane 0) is enough: the threads of a warp share the SM and run the region together."""
    w = times[::32]
    smid = w[:, -1].astype(np.int64)
    t0 = w[:, 2 * rep].astype(np.int64)
    t1 = w[:, 2 * rep + 1].astype(np.int64)
    sms, inv = np.unique(smid, return_inverse=True)
    n = sms.size
    big = np.iinfo(np.int64).max
    first0, last0 = np.full(n, big), np.full(n, -big)
    first1, last1 = np.full(n, big), np.full(n, -big)
    np.minimum.at(first0, inv, t0)
    np.maximum.at(last0, inv, t0)
    np.minimum.at(first1, inv, t1)
    np.maximum.at(last1, inv, t1)
    return SmStats(sms, np.bincount(inv, minlength=n), (last1 - first0).astype(float), first1 > last0)


def sm_windows(times: np.ndarray, rep: int) -> list[tuple[int, int]]:
    """Per-warp (start, end) of repetition ``rep`` on the lowest-numbered SM, relative to its
    first start: the evidence kept beside a throughput figure."""
    w = times[::32]
    smid = w[:, -1].astype(np.int64)
    m = smid == smid.min()
    t0 = w[m, 2 * rep].astype(np.int64)
    t1 = w[m, 2 * rep + 1].astype(np.int64)
    base = int(t0.min())
    return [(int(a - base), int(b - base)) for a, b in zip(t0, t1, strict=True)]
