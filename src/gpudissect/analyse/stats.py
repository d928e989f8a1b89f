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


def sm_spans(times: np.ndarray, rep: int, block: int) -> dict[int, tuple[float, int]]:
    """Per SM: (span in cycles from the first start to the last end, warps that ran there).

    %clock64 is a per-SM counter, so spans are only formed within one SM."""
    smid = times[:, -1].astype(np.int64)
    t0 = times[:, 2 * rep].astype(np.int64)
    t1 = times[:, 2 * rep + 1].astype(np.int64)
    out: dict[int, tuple[float, int]] = {}
    for sm in np.unique(smid):
        m = smid == sm
        warps = int(np.ceil(m.sum() / 32))
        out[int(sm)] = (float(t1[m].max() - t0[m].min()), warps)
    return out


def sm_warp_max(times: np.ndarray, rep: int) -> dict[int, tuple[float, int]]:
    """Per SM: (longest single-warp duration of repetition ``rep``, warps that ran there).

    Unlike the SM span, this is immune to warps leaving the barrier at different times:
    when all warps of an SM compete for one pipe, the longest warp lasts as long as the
    SM needs to issue everybody's work."""
    smid = times[:, -1].astype(np.int64)
    dur = rep_cycles(times, rep)
    out: dict[int, tuple[float, int]] = {}
    for sm in np.unique(smid):
        m = smid == sm
        out[int(sm)] = (float(dur[m].max()), int(np.ceil(m.sum() / 32)))
    return out


def sm_windows(times: np.ndarray, rep: int, sm: int | None = None) -> list[tuple[int, int]]:
    """Per-warp (start, end) of repetition ``rep`` on one SM (the lowest id by default),
    relative to the SM's first start: the evidence behind a throughput figure."""
    smid = times[:, -1].astype(np.int64)
    sm = int(smid.min()) if sm is None else sm
    idx = np.nonzero(smid == sm)[0][::32]
    t0 = times[idx, 2 * rep].astype(np.int64)
    t1 = times[idx, 2 * rep + 1].astype(np.int64)
    base = int(t0.min()) if t0.size else 0
    return [(int(a - base), int(b - base)) for a, b in zip(t0, t1, strict=True)]


def all_overlap(windows: list[tuple[int, int]]) -> bool:
    """True when every warp was inside its timed region at one common instant."""
    return bool(windows) and min(b for _, b in windows) > max(a for a, _ in windows)
