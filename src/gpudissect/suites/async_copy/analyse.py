"""Analysis of the async suite's timings (pure functions of arrays: tested on synthetic data).

* chains: the cycles of each kept repetition of the lead warp; per launch the median over
  repetitions at each of two lengths, the cost per instance is the slope between them;
* streams: the kept repetitions timed as one grid-wide window (:func:`stream_window`): all
  their bytes over the globaltimer span from the first warp's start of the first kept
  repetition to the last warp's end of the last; the per-repetition rates
  (:func:`stream_rate`) are evidence only: the repetitions are not synchronised across the
  grid, so a warp that runs ahead starts repetition r while a slower one still moves r - 1's
  bytes, and each repetition's span grows by that lag (it grows with r) although the DRAM
  never idles; the configurations of a sweep give the best rate and whether it had stopped
  rising.
"""

from __future__ import annotations

import numpy as np

from gpudissect.bench.stats import fit_line, noise_flag

RISE = 1.05  # a sweep is saturated when its last step raises the rate by less than this


def rep_columns(rows: np.ndarray, reps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(clock0, clock1, globaltimer0, globaltimer1) as (warps, reps) int64 arrays."""
    w = rows[:, : 4 * reps].astype(np.int64).reshape(len(rows), reps, 4)
    return w[:, :, 0], w[:, :, 1], w[:, :, 2], w[:, :, 3]


def chain_cycles(rows: np.ndarray, reps: int, warp: int = 0) -> list[float]:
    """Cycles of the kept repetitions (the first, cold, dropped) of ``warp``'s region."""
    c0, c1, _g0, _g1 = rep_columns(rows, reps)
    return [float(x) for x in (c1[warp, 1:] - c0[warp, 1:])]


def chain_slope(lengths: tuple[int, int], per_launch: list[tuple[list[float], list[float]]]) -> dict:
    """Cost per instance from two chain lengths: per launch, the slope between the medians of
    the kept repetitions at each length; the value is the median of the launches' slopes."""
    slopes, inter = [], []
    for short, long_ in per_launch:
        if not short or not long_:
            continue
        f = fit_line(list(lengths), [float(np.median(short)), float(np.median(long_))])
        slopes.append(f.slope)
        inter.append(f.intercept)
    if not slopes:
        return {"value": None, "slopes": [], "intercepts": [], "flags": ["error: no usable launch"]}
    flags = [f for f in (noise_flag(slopes),) if f]
    value = float(np.median(slopes))
    if value <= 0:
        flags.append(f"unphysical: cost per instance {value:.2f} cycles <= 0 (the chain did not grow "
                     "with its length)")
    return {"value": value, "slopes": slopes, "intercepts": inter, "flags": flags}


def stream_rate(rows: np.ndarray, reps: int, nbytes: int) -> list[float]:
    """Bytes per ns (GB/s) of each kept repetition: all ``nbytes`` over the span from the first
    warp's start to the last warp's end (globaltimer, one clock for the chip); rows that were
    never written (zero timestamps) are ignored."""
    _c0, _c1, g0, g1 = rep_columns(rows, reps)
    ok = g1[:, 0] > 0
    out = []
    for r in range(1, reps):
        span = float(g1[ok, r].max() - g0[ok, r].min()) if ok.any() else 0.0
        out.append(nbytes / span if span > 0 else float("nan"))
    return out


def stream_window(rows: np.ndarray, reps: int, nbytes: int) -> dict:
    """The kept repetitions (1..reps-1) as one region: ``(reps - 1) * nbytes`` over the span from
    the first warp's start of repetition 1 to the last warp's end of the last (GB/s), and the
    window's lag at its start (the latest start of repetition 1 after the earliest, as a share
    of the span: bytes of repetition 0 that slower warps still moved inside the window, not
    counted, so the rate is a lower bound by at most about that share). Rows never written are
    ignored; ``gbps`` None where no span."""
    _c0, _c1, g0, g1 = rep_columns(rows, reps)
    ok = g1[:, 0] > 0
    if not ok.any() or reps < 2:
        return {"gbps": None, "span_ns": None, "start_lag": None}
    first, last = g0[ok, 1], g1[ok, reps - 1]
    span = float(last.max() - first.min())
    if span <= 0:
        return {"gbps": None, "span_ns": span, "start_lag": None}
    return {"gbps": (reps - 1) * nbytes / span, "span_ns": span,
            "start_lag": round(float(first.max() - first.min()) / span, 4)}


def all_at_once(rows: np.ndarray, reps: int, smid_col: int | None = None) -> bool:
    """Whether on every SM all warps of a launch ran each kept repetition's region at once (the
    latest start before the earliest end, %clock64 of that SM): False when a second wave (CTAs
    that could not be resident together) or a warp held back split them. ``smid_col``: the
    column of %smid (default: after the 4 words of every repetition); rows never written are
    ignored."""
    c0, c1, _g0, g1 = rep_columns(rows, reps)
    sm = rows[:, 4 * reps if smid_col is None else smid_col].astype(np.int64)
    ok = g1[:, 0] > 0
    for r in range(1, reps):
        for s in np.unique(sm[ok]):
            w = ok & (sm == s)
            if c0[w, r].max() >= c1[w, r].min():
                return False
    return True


def saturation(rates: dict[int, float]) -> dict:
    """The best rate over a sweep of CTAs per SM, and whether it had stopped rising: saturated
    when the best is not at the sweep's end, or the last step raised it by less than RISE."""
    keys = sorted(k for k, v in rates.items() if v is not None and np.isfinite(v))
    if not keys:
        return {"best": None, "at": None, "saturated": False, "rise": None}
    best = max(keys, key=lambda k: rates[k])
    rise = rates[keys[-1]] / rates[keys[-2]] if len(keys) > 1 and rates[keys[-2]] > 0 else None
    saturated = best != keys[-1] or (rise is not None and rise < RISE)
    return {"best": float(rates[best]), "at": best, "saturated": bool(saturated),
            "rise": None if rise is None else round(float(rise), 4)}


def fraction(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def first_reaching(points: dict[int, float], target: float, share: float = 0.9) -> int | None:
    """The smallest x whose value reaches ``share`` of ``target`` (None: none does)."""
    xs = sorted(x for x, v in points.items() if v is not None and v >= share * target)
    return xs[0] if xs else None
