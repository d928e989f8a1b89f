"""Does tensor-core latency depend on the shape? (issue 22) Computed from the tensor suite's
latencies per variant and record group (analyse.summarize_run's ``variants``): the variants of
one family (the same instruction, types and layout; only the shape differs: ``m16n8k16`` in an
mma name, ``n128`` in a wgmma group) side by side, with the verdict and, where the latency grows,
the cycles per doubling of the shape's work (a fit of latency against log2(m*n*k))."""

from __future__ import annotations

import math
import re

import numpy as np

SAME_CYCLES = 1.0  # a family whose latencies span no more than this: independent of shape
_MNK = re.compile(r"\bm(\d+)n(\d+)k(\d+)\b")
_N = re.compile(r"^(?P<pre>.*?)_?n(?P<n>\d+)$")


def shape_of(name: str, group: str) -> tuple[str, str, float] | None:
    """(family, shape, work per instruction m*n*k or n) of one latency, or None when neither the
    name nor the group names a shape."""
    m = _MNK.search(name)
    if m:
        fam = name[:m.start()] + "*" + name[m.end():]
        return f"{fam} [{group}]", m[0], float(int(m[1]) * int(m[2]) * int(m[3]))
    g = _N.match(group)
    if g:
        return f"{name} [{g['pre'] or group}]", f"n{g['n']}", float(g["n"])
    return None


def latency_vs_shape(variants: dict[str, dict], skip: tuple[str, ...] = ()) -> dict[str, dict]:
    """Family -> {shapes: {shape: cycles}, depends: bool, span, cycles_per_doubling} for every
    family with at least two shapes timed (``skip``: name prefixes left out, e.g. data movers)."""
    fams: dict[str, dict[str, tuple[float, float]]] = {}
    for name, d in variants.items():
        if name.startswith(skip):
            continue
        for group, lat in (d.get("latency_cycles") or {}).items():
            s = shape_of(name, group)
            if s is not None and lat is not None:
                fams.setdefault(s[0], {})[s[1]] = (s[2], float(lat))
    out = {}
    for fam, shapes in sorted(fams.items()):
        if len(shapes) < 2:
            continue
        order = sorted(shapes.items(), key=lambda kv: kv[1][0])
        lats = [lat for _, (_, lat) in order]
        span = max(lats) - min(lats)
        row: dict = {"shapes": {k: lat for k, (_, lat) in order}, "span": round(span, 3),
                     "depends": span > SAME_CYCLES}
        works = [math.log2(w) for _, (w, _) in order]
        if row["depends"] and len(set(works)) > 1:
            row["cycles_per_doubling"] = round(float(np.polyfit(works, lats, 1)[0]), 3)
        out[fam] = row
    return out


def shape_conclusions(table: dict[str, dict]) -> list[str]:
    """One line overall, then one per pattern of latencies (families with the same shapes and
    latencies share a line)."""
    if not table:
        return []
    dep = [f for f, r in table.items() if r["depends"]]
    out = [f"tensor latency vs shape: {len(dep)} of {len(table)} instruction families timed at two or more "
           f"shapes change latency with the shape (more than {SAME_CYCLES:g} cycle apart); "
           f"{len(table) - len(dep)} do not"]
    patterns: dict[tuple, list[str]] = {}
    for fam, r in table.items():
        patterns.setdefault(tuple(r["shapes"].items()), []).append(fam)
    for pat, fams in patterns.items():
        r = table[fams[0]]
        names = ", ".join(fams[:3]) + (f" and {len(fams) - 3} more" if len(fams) > 3 else "")
        shapes = ", ".join(f"{s} {lat:g}" for s, lat in pat)
        verdict = (f"depends on shape ({r['cycles_per_doubling']:+g} cycles per doubling of the work)"
                   if r.get("cycles_per_doubling") is not None else
                   "depends on shape" if r["depends"] else "independent of shape")
        out.append(f"{names}: {shapes} cycles: {verdict}")
    return out
