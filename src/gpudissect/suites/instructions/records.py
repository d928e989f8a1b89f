"""The records of the instruction suite: how a pair's measure is named, and the one rule by
which two of its numbers are the same.

A number measured with the variant's chain and its companion (an instruction added to every
instance so that the chain cannot fold) is stored under its measure with :data:`PAIR` appended;
the companion removal (``companion.py``, the per-operand study) derives the instruction's own.

The uncertainty of a record (:func:`uncertainty`) is its own: the 95% half-width of the median of
its per-repeat slopes or rates (``bench/stats.py`` ``robust_halfwidth``, the interval its noise
flag is judged by), floored at the clock's resolution (:func:`resolution`: %clock64 is read in
whole cycles, so a slope over chain lengths spanning L instances cannot resolve less than 1/L
cycle per instance). Two numbers are the same when their difference lies within its 95% interval
(:func:`same_within`): the core's below-issue-limit flag, signed against unsigned
(``conclusions.py``), a configuration against its control and the value classes all judge by it.
"""

from __future__ import annotations

import math

from gpudissect.bench.stats import robust_halfwidth

PAIR = "_with_companion"  # the measure suffix of a number of the chain with its companion
# the named floor of a record's uncertainty (:func:`resolution`): a physical limit, not a threshold
RESOLUTION = "one %clock64 cycle over the span of the fitted chain lengths"
CONFIDENCE = "95% interval"  # what :func:`uncertainty` states (robust_halfwidth's)


def repeats(r: dict) -> list[float]:
    """A record's own repeats of its value: the slope (latency chains) or the rate (throughput)
    of each (launch, repetition); [] when it holds none."""
    s = r.get("samples")
    if not isinstance(s, dict):
        return []
    return [float(x) for x in (s.get("slope_per_repeat") or s.get("rate_per_repeat") or [])]


def resolution(r: dict) -> float:
    """The least change of ``r``'s value that whole-cycle clock reads can show (RESOLUTION): one
    cycle over the span of the fitted lengths, in the value's unit. A latency is the slope itself
    (1/span cycles); a value k/slope (a rate) or slope/k moves by value/slope per cycle of slope.
    0 without a fit of two distinct lengths."""
    fit = r.get("fit") or {}
    xs = fit.get("xs") or []
    slope, v = fit.get("slope"), r.get("value")
    if len(xs) < 2 or not slope or v is None or max(xs) == min(xs):
        return 0.0
    return abs(v) / abs(slope) / (max(xs) - min(xs))


def _own_uncertainty(r: dict) -> float | None:
    reps = repeats(r)
    if len(reps) < 2:
        return None
    return max(float(robust_halfwidth(reps)), resolution(r))


def index(records) -> dict[tuple[str, str], list[dict]]:
    """(variant, measure) -> records, for :func:`uncertainty` of derived values."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        out.setdefault((r.get("variant"), r.get("measure")), []).append(r)  # type: ignore[arg-type]
    return out


def _matching(rows: list[dict], value) -> dict | None:
    return next((x for x in rows if value is not None and x.get("value") is not None
                 and math.isclose(x["value"], value, rel_tol=1e-9, abs_tol=1e-12)), None)


def uncertainty(r: dict, idx: dict[tuple[str, str], list[dict]] | None = None) -> float | None:
    """Half-width of the 95% interval of ``r``'s value (CONFIDENCE): ``robust_halfwidth`` of its
    own repeats, floored at its clock resolution (:func:`resolution`). A value derived from other
    records (``idx``: :func:`index` of the run's records) takes theirs: a latency with its
    companion removed (pair minus companion: the two half-widths in quadrature); a peak
    throughput (its best configuration's throughput record, of the variant whose SASS stands for
    it where it borrows one, scaled as its value is). None where no repeats give a spread."""
    if r.get("value") is None:
        return None
    own = _own_uncertainty(r)
    if own is not None or idx is None:
        return own
    p = r.get("params") or {}
    m = str(r.get("measure") or "")
    comp = p.get("companion")
    if isinstance(comp, dict) and "pair" in p:
        pair = _matching(idx.get((r["variant"], m + PAIR), []), p["pair"])
        ref = _matching(idx.get((comp.get("variant"), "latency"), []), comp.get("latency"))
        parts = [_own_uncertainty(x) if x else None for x in (pair, ref)]
        return None if None in parts else math.hypot(*parts)  # type: ignore[arg-type]
    best = p.get("best")
    if m.removesuffix(PAIR) == "throughput_peak" and isinstance(best, dict):
        src = p.get("same_sass_as") or r["variant"]
        tp = "throughput" + (PAIR if m.endswith(PAIR) else "")
        cand = next((x for x in idx.get((src, tp), [])
                     if all((x.get("params") or {}).get(k) == best.get(k) for k in ("chains", "warps"))), None)
        u = _own_uncertainty(cand) if cand and cand.get("value") else None
        return None if u is None else u * abs(r["value"] / cand["value"])  # type: ignore[index]
    return None


def same_within(a: float, ua: float | None, b: float, ub: float | None) -> bool | None:
    """Whether two independently measured values are the same: their difference lies within
    its 95% interval (the two half-widths of :func:`uncertainty` in quadrature). None
    (undetermined) when either has no interval."""
    if ua is None or ub is None:
        return None
    return abs(a - b) <= math.hypot(ua, ub)
