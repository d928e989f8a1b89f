"""Analysis of the memory suite: sizes from the staircase (L1; the L2 as its near and far
partition levels), fill granularity from stride sweeps and line size from capacity against
node spacing, the per-SM L2 partition map, the TLB study, bandwidth figures, the
shared-memory bank-conflict rule, and the conclusions.

Works on store/export records (dicts with variant, measure, value, params, samples, flags)."""

from __future__ import annotations

import numpy as np

from gpudissect.bench.staircase import detect, pooled_spread, spread_threshold
from gpudissect.bench.stats import fit_line
from gpudissect.suites.memory import bandwidth as bwm
from gpudissect.suites.memory import texture as tex

KiB, MiB = 1 << 10, 1 << 20
BANKS, BANK_BYTES = 32, 4


def human(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


# --- bank conflicts

def bank_degrees(stride: int, width: int, lanes: int = 32, smem: int = 32 * KiB,
                 banks: int = BANKS, bank_bytes: int = BANK_BYTES) -> dict:
    """Conflict degrees of a warp access where lane l reads ``width`` bytes at
    ``(l * stride) mod smem`` from ``banks`` banks of ``bank_bytes`` (a hypothesis: the
    defaults are the model the probes' parameters are labelled with; :func:`bank_geometry`
    tests every geometry against the measured cycles): the most distinct bank words any bank
    must deliver over the whole warp (``degree_warp``), and the sum over phases of one
    bank row of requests (``banks * bank_bytes / width`` lanes each) of the per-phase maximum
    (``wavefronts_phase``)."""
    def degree(ls: range) -> int:
        per_bank: dict[int, set[int]] = {}
        for lane in ls:
            a = (lane * stride) % smem // width * width
            for w in range(a // bank_bytes, (a + width - 1) // bank_bytes + 1):
                per_bank.setdefault(w % banks, set()).add(w)
        return max(len(v) for v in per_bank.values())

    per_phase = max(1, banks * bank_bytes // width)
    phases = [range(s, min(lanes, s + per_phase)) for s in range(0, lanes, per_phase)]
    return {"degree_warp": degree(range(lanes)),
            "wavefronts_phase": sum(degree(ph) for ph in phases)}


def bank_rule(rows: list[dict]) -> dict:
    """Fit cycles = a + b * model for both conflict models; the better fit is the rule."""
    ok = [r for r in rows if r.get("value") is not None]
    if len(ok) < 3:
        return {"rule": None, "why": "fewer than 3 measured configurations"}
    y = [r["value"] for r in ok]
    out = {}
    for model in ("degree_warp", "wavefronts_phase"):
        xs = [r["params"][model] for r in ok]
        if len(set(xs)) < 2:
            out[model] = None
            continue
        f = fit_line(xs, y)
        out[model] = {"intercept": f.intercept, "cycles_per_wavefront": f.slope, "r2": f.r2}
    fits = {m: v for m, v in out.items() if v}
    if not fits:
        return {"rule": None, "why": "no variation of the conflict degree", **out}
    best = max(fits, key=lambda m: fits[m]["r2"])
    return {"rule": best, **out}


GEOMETRY_BANKS = range(2, 129)  # bank counts tried by the conflict-sweep fit ...
GEOMETRY_BANK_BYTES = (4, 8, 16)  # ... and bank widths
GEOMETRY_RESID = 4.0  # every other geometry's worst residual must be this many times the best's ...
GEOMETRY_MIN_RESID = 0.5  # ... and at least half a cycle (a smaller miss is rounding)
REPEAT_TOL = 0.02  # two strides "cost the same" within this relative difference


def _geometry_score(tables: dict[str, list[dict]], banks: int, bank_bytes: int) -> dict | None:
    """Per access width the line cycles = a + b x degree_warp under one geometry; the score
    is the mean r2 over the widths (None when a width has no variation or a slope <= 0)."""
    fits, worst = {}, 0.0
    for w, rows in tables.items():
        xs = [bank_degrees(r["stride_bytes"], r["width_bytes"], banks=banks,
                           bank_bytes=bank_bytes)["degree_warp"] for r in rows]
        if len(set(xs)) < 2:
            return None
        f = fit_line(xs, [r["cycles"] for r in rows])
        if f.slope <= 0:
            return None
        miss = max(abs(r["cycles"] - f.intercept - f.slope * x) for r, x in zip(rows, xs, strict=True))
        fits[w] = {"intercept": f.intercept, "cycles_per_degree": f.slope, "r2": f.r2,
                   "max_residual": miss}
        worst = max(worst, miss)
    return {"banks": banks, "bank_bytes": bank_bytes, "fits": fits, "max_residual": worst,
            "score": float(np.mean([f["r2"] for f in fits.values()]))}


def _repeats(tables: dict[str, list[dict]], period: int) -> list[dict]:
    """Pairs of measured strides of one width ``period`` bytes (a multiple) apart that cost
    the same cycles: the conflict pattern repeating at banks x bank bytes."""
    out = []
    for w, rows in tables.items():
        by = {r["stride_bytes"]: r["cycles"] for r in rows}
        for s, c in sorted(by.items()):
            for k in (1, 2):
                t = s + k * period
                if t in by and abs(by[t] - c) <= REPEAT_TOL * c:
                    out.append({"width": w, "stride_bytes": s, "repeat_stride_bytes": t,
                                "cycles": c, "repeat_cycles": by[t]})
    return out


def bank_geometry(records: list[dict]) -> dict:
    """The bank count and bank width from the conflict sweep (``bank/w<bits>`` records:
    stride_bytes, width_bytes, cycles per warp access): every geometry of GEOMETRY_BANKS x
    GEOMETRY_BANK_BYTES predicts each probe's conflict degree; the one whose degrees explain
    the cycles best (mean r2 of a line per access width) is the answer when every other
    geometry misses some probe of some width by GEOMETRY_RESID x the best's worst residual at
    that width and at least GEOMETRY_MIN_RESID cycles (each is ruled out by a probe it
    mispredicts). ``repeats``: measured strides one period (banks x bank
    bytes) apart that cost the same (the pattern repeating). ``limit_bytes_per_cycle``: banks x
    bank bytes, what the banks deliver per cycle at one word each."""
    tables: dict[str, list[dict]] = {}
    for r in records:
        p = r.get("params") or {}
        if (r["variant"].startswith("bank/") and r.get("value") is not None
                and p.get("stride_bytes") is not None and p.get("width_bytes")):
            tables.setdefault(r["variant"].split("/")[1], []).append(
                {"stride_bytes": int(p["stride_bytes"]), "width_bytes": int(p["width_bytes"]),
                 "cycles": float(r["value"])})
    tables = {w: rows for w, rows in tables.items() if len(rows) >= 3}
    if not tables:
        return {"banks": None, "why": "no access width with 3 or more measured strides"}
    scored = [g for b in GEOMETRY_BANKS for bb in GEOMETRY_BANK_BYTES
              if (g := _geometry_score(tables, b, bb)) is not None]
    if not scored:
        return {"banks": None, "why": "no geometry gives the cycles a rising conflict degree"}
    scored.sort(key=lambda g: -g["score"])
    best = scored[0]
    floor = {w: max(GEOMETRY_RESID * f["max_residual"], GEOMETRY_MIN_RESID) for w, f in best["fits"].items()}
    close = [g for g in scored[1:] if all(g["fits"][w]["max_residual"] < floor[w] for w in floor)]
    rival = close[0] if close else max(scored[1:], key=lambda g: g["score"], default=None)
    out = {"banks": best["banks"], "bank_bytes": best["bank_bytes"], "score": best["score"],
           "fits": best["fits"], "widths": sorted(tables), "geometries_tried": len(scored),
           "limit_bytes_per_cycle": best["banks"] * best["bank_bytes"],
           "max_residual": best["max_residual"],
           "runner_up": ({"banks": rival["banks"], "bank_bytes": rival["bank_bytes"],
                          "score": rival["score"], "max_residual": rival["max_residual"]}
                         if rival else None),
           "repeats": _repeats(tables, best["banks"] * best["bank_bytes"])}
    if close:
        out.update(banks=None, ambiguous=[[g["banks"], g["bank_bytes"]] for g in [best, *close]],
                   why=f"{best['banks']} banks of {best['bank_bytes']} B and {rival['banks']} of "
                       f"{rival['bank_bytes']} B fit every probe equally well: "
                       "add strides that tell them apart")
    return out


def bank_conclusion(g: dict) -> list[str]:
    if not g.get("banks"):
        return [f"Shared-memory banks: not determined ({g.get('why', 'not measured')})."] if g else []
    fits = "; ".join(f"{w}: {f['intercept']:.1f} + {f['cycles_per_degree']:.2f} x degree (r2 {f['r2']:.3f})"
                     for w, f in g["fits"].items())
    rep = g.get("repeats") or []
    period = g["banks"] * g["bank_bytes"]
    rep_txt = (f"; the pattern repeats every {period} B of lane stride: "
               + ", ".join(f"{r['width']} stride {r['stride_bytes']} B {r['cycles']:.1f} = stride "
                           f"{r['repeat_stride_bytes']} B {r['repeat_cycles']:.1f}" for r in rep[:4])
               if rep else f"; no measured stride pair {period} B apart to show the repeat")
    ru = g.get("runner_up")
    return [f"Shared memory has {g['banks']} banks of {g['bank_bytes']} bytes ({period} B per bank row): "
            f"of {g['geometries_tried']} bank count x bank width geometries, its conflict degrees explain "
            f"the stride sweep best (cycles per warp access = {fits})"
            + (f"; the next best, {ru['banks']} banks of {ru['bank_bytes']} B, misses a probe by "
               f"{ru['max_residual']:.2f} cycles" if ru else "")
            + rep_txt + "."]


# --- stores and shared throughput per width

# a store has no result register: its latency is (1) the store -> dependent load round trip
# through one word minus the same load's own chase latency in the same run, and (2) seed 000's
# method (its Fig. 3): one store alone between two clock reads (store_span/<path>)
STORE_ROUND_TRIPS = {"st.shared": ("st.shared+ld.shared", "ld.shared"),
                     "st.global": ("st.global+ld.global", "ld.global.cv")}


def store_latencies(lat: dict, records: list[dict]) -> dict:
    """Per store path: ``round_trip_extra`` (cycles a dependent load of the stored word waits
    beyond its own latency) and ``span`` (seed 000's one-store region) with ``empty_span``
    (the clock pair alone, same run) and ``span_over_empty``."""
    out: dict[str, dict] = {}
    for st, (rt, ld) in STORE_ROUND_TRIPS.items():
        if lat.get(rt) is not None and lat.get(ld) is not None:
            out.setdefault(st, {}).update(
                round_trip=lat[rt], load=lat[ld], load_path=ld, round_trip_extra=lat[rt] - lat[ld],
                round_trip_method=f"chain of {rt} through one word (the load's result is the next "
                                  f"address) minus the {ld} chase of the same run")
    for r in records:
        if r["variant"].startswith("store_span/") and r.get("value") is not None:
            e = (r.get("params") or {}).get("empty_span")
            out.setdefault(r["variant"].split("/", 1)[1], {}).update(
                span=r["value"], empty_span=e, span_over_empty=None if e is None else r["value"] - e,
                span_method="seed 000 Fig. 3: one store alone between two clock reads")
    return out


def _store_conclusion(st: dict) -> list[str]:
    c = []
    for path, v in st.items():
        parts = []
        if "span" in v:
            parts.append(f"seed 000's method (one {path} alone between two clock reads) {v['span']:.1f} "
                         f"cycles, the clock pair alone {v['empty_span']:.1f}: the second clock read "
                         f"comes {v['span_over_empty']:.1f} cycles later behind the store")
        if "round_trip" in v:
            x = v["round_trip_extra"]
            parts.append(f"a dependent load of the stored word: {path} + load round trip "
                         f"{v['round_trip']:.1f} cycles against the {v['load_path']} chase {v['load']:.1f}: "
                         f"the load waits {x:+.1f} cycles for the store"
                         + (" [below the load's own latency: the method is broken]" if x < 0 else ""))
        if parts:
            c.append(f"{path} store latency (a store has no result register): " + "; ".join(parts) + ".")
    return c


def _per_width_conclusion(bw: dict, geo: dict) -> list[str]:
    c = []
    limit = geo.get("limit_bytes_per_cycle") if geo.get("banks") else None
    for level, widths in (bw.get("per_width") or {}).items():
        cells = []
        for bits, v in widths.items():
            if v.get("bytes_per_cycle_per_sm") is None:
                cells.append(f"{bits}-bit not measured ({v.get('flag')})")
                continue
            b = v["best"]
            cells.append(f"{bits}-bit {v['bytes_per_cycle_per_sm']:.1f} (ILP {b['ilp']} x {b['warps']} warps/SM"
                         + (f"; {v['flag']}" if v.get("flag") else "") + ")")
        over = [bits for bits, v in widths.items() if limit and (v.get("bytes_per_cycle_per_sm") or 0)
                > limit * (1 + bwm.PEAK_TOL)]
        bound = ("" if not limit else
                 f"; the banks' bound ({geo['banks']} banks x {geo['bank_bytes']} B per cycle) is {limit} B/clk/SM"
                 + (f": {', '.join(over)}-bit ABOVE it (a method error)" if over else
                    f"; every width reaches at least {min(v['bytes_per_cycle_per_sm'] / limit for v in widths.values() if v.get('bytes_per_cycle_per_sm')):.1%} of it"))
        c.append(f"Shared {level.split('/')[1]} throughput per access width, saturated over ILP x warps "
                 f"(B/clk/SM): " + ", ".join(cells) + bound + ".")
    return c


# --- near/far

def two_groups(vals: list[float]) -> dict:
    """Split per-SM latencies at their largest gap; report whether the split is meaningful
    (gap above 3 % of the median and both groups at least 10 % of the SMs)."""
    v = np.sort(np.asarray(vals, dtype=float))
    if v.size < 4:
        return {"bimodal": False, "why": "fewer than 4 SMs"}
    gaps = np.diff(v)
    i = int(np.argmax(gaps))
    lo, hi = v[: i + 1], v[i + 1:]
    med = float(np.median(v))
    bimodal = bool(gaps[i] > 0.03 * med and min(lo.size, hi.size) >= 0.1 * v.size)
    return {"bimodal": bimodal, "near_mean": float(lo.mean()), "far_mean": float(hi.mean()),
            "near_sms": int(lo.size), "far_sms": int(hi.size), "gap": float(gaps[i]),
            "threshold": float((lo[-1] + hi[0]) / 2),
            "min": float(v[0]), "max": float(v[-1]), "median": med}


def partition_map(sms: list[int], matrix: list[list[float | None]]) -> dict:
    """Which SMs see which L2 lines as near. The SM x line latency matrix is modelled as
    SM offset + line offset + a near/far term: after removing the SM and line means, a
    two-partition L2 leaves a rank-one pattern (side(SM) x home(line), signs) whose leading
    singular vectors give each SM's side and each line's home; ``var_explained``: its share
    of the variance left. Near: the cells where an SM meets a line of its own side (the
    faster median). The split counts when that pattern dominates (>= 50 %), at least 90 % of
    the SMs have their near median below their far median and both groups (of SMs and of
    lines) hold at least 10 %. Otherwise, SMs whose mean latencies split in two
    (:func:`two_groups`) whatever the line form a position split (not by address)."""
    m = np.array([[np.nan if v is None else float(v) for v in row] for row in matrix], dtype=float)
    if m.ndim != 2 or m.size == 0 or len(sms) != m.shape[0] or not np.isfinite(m).any():
        return {"split": False, "why": "no SM x line matrix"}
    n_sm, n_line = m.shape
    ok = np.isfinite(m)
    row, col, grand = np.nanmean(m, 1), np.nanmean(m, 0), float(np.nanmean(m))
    filled = np.where(ok, m, row[:, None] + col[None, :] - grand)
    resid = filled - filled.mean(1, keepdims=True) - filled.mean(0, keepdims=True) + filled.mean()
    base = {"sms": n_sm, "lines": n_line, "median": float(np.nanmedian(m)),
            "min": float(np.nanmin(m)), "max": float(np.nanmax(m))}
    u, sv, vt = np.linalg.svd(resid, full_matrices=False)
    var1 = float(sv[0] ** 2 / (sv ** 2).sum()) if (sv ** 2).sum() > 0 else 0.0
    side = np.where(u[:, 0] >= 0, 1.0, -1.0)
    home = np.where(vt[0] >= 0, 1.0, -1.0)
    if (side > 0).sum() < (side < 0).sum():  # side A: the larger group (a stable orientation)
        side, home = -side, -home
    same = np.outer(side, home) > 0
    near = same if np.median(m[same & ok]) <= np.median(m[~same & ok]) else ~same

    def med(mask_row: np.ndarray, i: int) -> float:
        v = m[i][mask_row & ok[i]]
        return float(np.median(v)) if v.size else np.nan
    sm_near = np.array([med(near[i], i) for i in range(n_sm)])
    sm_far = np.array([med(~near[i], i) for i in range(n_sm)])
    consistent = float(np.mean(sm_near < sm_far))
    mid = (sm_near + sm_far) / 2
    agree = float(np.mean(((m < mid[:, None]) == near)[ok]))
    a_idx = [i for i in range(n_sm) if side[i] > 0]
    b_idx = [i for i in range(n_sm) if side[i] < 0]
    near_a = [j for j in range(n_line) if near[a_idx[0], j]] if a_idx else []
    near_b = [j for j in range(n_line) if j not in near_a]
    split = (var1 >= 0.5 and consistent >= 0.9 and min(len(a_idx), len(b_idx)) >= 0.1 * n_sm
             and min(len(near_a), len(near_b)) >= 0.1 * n_line)
    if split:
        return {**base, "split": True, "address_dependent": True, "var_explained": var1,
                "sm_consistent": consistent, "agreement": agree,
                "side_a": [int(sms[i]) for i in a_idx], "side_b": [int(sms[i]) for i in b_idx],
                "lines_near_a": len(near_a), "lines_near_b": len(near_b), "lines_split": n_line,
                "near_cycles": float(np.median(m[near & ok])), "far_cycles": float(np.median(m[~near & ok])),
                "far_minus_near": float(np.median(m[~near & ok]) - np.median(m[near & ok])),
                "sm_near_range": [float(np.nanmin(sm_near)), float(np.nanmax(sm_near))],
                "sm_far_range": [float(np.nanmin(sm_far)), float(np.nanmax(sm_far))],
                "sm_order": [int(sms[i]) for i in a_idx + b_idx], "line_order": near_a + near_b}
    g = two_groups(np.nanmedian(m, 1).tolist())
    if not g.get("bimodal"):
        return {**base, "split": False, "var_explained": var1, "sm_consistent": consistent,
                "why": f"no address pattern (its share of the variance {var1:.0%}, SMs consistent "
                       f"{consistent:.0%}) and the SMs' mean latencies do not split in two"}
    rows = np.nanmedian(m, 1)
    fast = [i for i in range(n_sm) if rows[i] <= g["threshold"]]
    slow = [i for i in range(n_sm) if rows[i] > g["threshold"]]
    a, b = fast, slow  # side A: the faster SMs, whatever the line
    return {**base, "split": True, "address_dependent": False, "var_explained": var1,
            "side_a": [int(sms[i]) for i in a], "side_b": [int(sms[i]) for i in b],
            "near_cycles": float(np.nanmedian(m[fast])), "far_cycles": float(np.nanmedian(m[slow])),
            "far_minus_near": float(np.nanmedian(m[slow]) - np.nanmedian(m[fast])),
            "lines_split": 0, "sm_order": [int(sms[i]) for i in a + b], "line_order": list(range(n_line))}


# --- line sizes

def knee(strides: list[int], ys: list[float], frac: float = 0.85) -> dict | None:
    """Smallest stride whose cold-pass latency reaches ``frac`` of the way from the smallest
    stride's latency to the plateau (median of the two largest strides)."""
    pts = sorted((s, y) for s, y in zip(strides, ys, strict=True) if y is not None)
    if len(pts) < 3:
        return None
    s = [p[0] for p in pts]
    y = [p[1] for p in pts]
    top = float(np.median(y[-2:]))
    bottom = y[0]
    if top <= bottom * 1.1:
        return {"bytes": None, "why": "latency does not grow with stride (no fill granularity seen)"}
    for si, yi in zip(s, y, strict=True):
        if yi - bottom >= frac * (top - bottom):
            return {"bytes": int(si), "low_cycles": bottom, "plateau_cycles": top,
                    "evidence": {str(a): b for a, b in zip(s, y, strict=True)}}
    return None


# --- summary

def _by(records: list[dict], prefix: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        if r["variant"].startswith(prefix):
            out.setdefault(r["variant"], []).append(r)
    return out


def staircase(records: list[dict]) -> dict:
    out = {}
    for variant, rows in _by(records, "sweep/").items():
        pts = sorted((r["params"]["footprint"], r["value"], r.get("samples") or []) for r in rows
                     if r.get("value") is not None and "footprint" in (r.get("params") or {}))
        if not pts:
            continue
        plateaus, steps = detect([p[0] for p in pts], [p[1] for p in pts], min_rel=STAIR_MIN_REL,
                                 min_points=3)
        out[variant] = {"points": len(pts),
                        "plateaus": [vars(p) for p in plateaus],
                        "steps": [s.to_json() for s in steps],
                        "spread_rel": pooled_spread([p[2] for p in pts]),
                        "curve": [[p[0], p[1]] for p in pts]}
    return out


STAIR_MIN_REL = 0.2  # cache levels differ by far more; a flat stretch of a gradual transition
# (a random chain just past a capacity keeps some hits) is not a level
LEVEL_TOL = 0.03  # a point is on a level within 3 % of it (or 3 launch spreads, if larger)


def crossing(curve: list, lo: float, hi: float, start: float) -> float | None:
    """The footprint at which latency, rising from level ``lo`` to ``hi`` after ``start``,
    crosses their midpoint (interpolated in log footprint): the capacity of the lower level
    where the transition is gradual (hashed sets, random order); for a sharp LRU cliff it
    lies between the last point on the level and the first above it."""
    mid = (lo + hi) / 2
    pts = [(x, y) for x, y in curve if x >= start]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if y0 < mid <= y1:
            t = (mid - y0) / (y1 - y0)
            return float(2 ** (np.log2(x0) + t * (np.log2(x1) - np.log2(x0))))
    return None


def _level_span(curve: list, level: float, start: float, tol: float) -> tuple[float, float | None]:
    """(last footprint on ``level`` counting from ``start``, the first one off it after
    that); points before the first one on the level (the end of the transition into it)
    are skipped."""
    last, off, seen = start, None, False
    for x, y in curve:
        if x < start:
            continue
        if abs(y / level - 1) <= tol:
            last, seen = x, True
        elif seen:
            off = x
            break
    return last, off


def _first_on(curve: list, level: float, after: float, tol: float) -> float | None:
    return next((x for x, y in curve if x > after and abs(y / level - 1) <= tol), None)


def _step_json(s: dict, source: str) -> dict:
    return {"bytes": s["x_below"], "bracket": [s["x_below"], s["x_above"]],
            "levels_cycles": [s["level_below"], s["level_above"]], "source": source}


L2_SWEEPS = ("sweep/ca-strided", "sweep/cg-random", "sweep/ca-random")  # the L2 model's, in order


def _translation(a: dict, b: dict, tlb_steps: list[dict]) -> dict | None:
    """The TLB level (if any) that explains the staircase step from plateau a to b: its reach
    bracket overlaps the step's and its miss cost is at least 2/3 of the step."""
    for t in tlb_steps:
        lo, hi = t["bracket"]
        if lo < b["x_first"] and a["x_last"] < hi and b["level"] - a["level"] <= 1.5 * t["miss_cycles"]:
            return t
    return None


def _onchip(variant: str, st: dict, tlb_steps: list[dict] | None = None
            ) -> tuple[list[dict], dict | None, dict | None, list[dict]]:
    """(the L2 plateaus, the L1 plateau, the device-memory plateau, the translation steps set
    aside) of a sweep: the last plateau is device memory, a .ca sweep's first one is L1;
    those between are L2 levels. A top step that a TLB level explains is translation: the
    plateau below it is device memory."""
    pl = list(st.get("plateaus") or [])
    first = 1 if "/ca-" in variant else 0
    aside = []
    while len(pl) >= first + 3 and (t := _translation(pl[-2], pl[-1], tlb_steps or [])):
        aside.append({"bracket": [pl[-2]["x_last"], pl[-1]["x_first"]],
                      "levels_cycles": [pl[-2]["level"], pl[-1]["level"]], "tlb_reach": t["reach_bytes"]})
        pl.pop()
    if len(pl) < first + 2:
        return [], (pl[0] if first and pl else None), None, aside
    return pl[first:-1], (pl[0] if first else None), pl[-1], aside


def l2_levels(variant: str, st: dict, tlb_steps: list[dict] | None = None) -> dict | None:
    """The L2 of one sweep as levels: the first L2 plateau is the near partition (an SM's
    own half), the last the far one (between them, intermediate levels); each with its
    latency, the last footprint it serves (its size) and the bracket up to the next level.
    L2 capacity: where the last on-chip level ends (the step into device memory)."""
    levels, l1, dram, aside = _onchip(variant, st, tlb_steps)
    if not levels or dram is None:
        return None
    pl = st["plateaus"]
    curve = st.get("curve") or []
    tol = max(LEVEL_TOL, 3 * float(st.get("spread_rel") or 0.0))
    out = []
    for i, lv in enumerate(levels):
        nxt = pl[pl.index(lv) + 1]
        name = ("L2" if len(levels) == 1 else "L2 near" if i == 0
                else "L2 far" if i == len(levels) - 1 else f"L2 level {i + 1}")
        last, _ = _level_span(curve, lv["level"], lv["x_first"], tol) if curve else (lv["x_last"], None)
        reach = _first_on(curve, nxt["level"], last, tol) if curve else None
        cap = crossing(curve, lv["level"], nxt["level"], lv["x_first"]) if curve else None
        out.append({"name": name, "latency_cycles": lv["level"], "bytes": int(round(cap)) if cap else last,
                    "last_on_level": last, "from_bytes": lv["x_first"],
                    "bracket": [last, reach or nxt["x_first"]], "points": lv["points"],
                    "estimate": "midpoint crossing to the next level" if cap else "last point on the level"})
    return {"source": variant, "levels": out, "capacity_bytes": out[-1]["bytes"],
            "capacity_bracket": out[-1]["bracket"],
            "dram_cycles": dram["level"], "l1_cycles": l1["level"] if l1 else None,
            "translation_steps": aside}


def l2_model(stair: dict, reported: float | None, pmap: dict | None,
             tlb_steps: list[dict] | None = None) -> dict:
    """The L2 from the staircase (the first of :data:`L2_SWEEPS` with a device-memory step;
    the others cross-check), compared with the driver's L2 size, with the per-SM map;
    staircase steps that a TLB level explains are set aside (:func:`_onchip`)."""
    models = {v: m for v in L2_SWEEPS if v in stair and (m := l2_levels(v, stair[v], tlb_steps))}
    if not models:
        return {"why": "no sweep shows an L2 level below a device-memory step"}
    main = next(iter(models.values()))
    out = {**main, "crosscheck": {v: {"capacity_bytes": m["capacity_bytes"],
                                      "capacity_bracket": m["capacity_bracket"],
                                      "levels": [(lv["name"], lv["latency_cycles"], lv["last_on_level"])
                                                 for lv in m["levels"]]}
                                  for v, m in models.items() if v != main["source"]}}
    lv = main["levels"]
    pen = []
    if main.get("l1_cycles") is not None:
        pen.append({"miss": "L1", "to": lv[0]["name"], "cycles": lv[0]["latency_cycles"] - main["l1_cycles"]})
    for a, b in zip(lv, lv[1:], strict=False):
        pen.append({"miss": a["name"], "to": b["name"], "cycles": b["latency_cycles"] - a["latency_cycles"]})
    pen.append({"miss": lv[-1]["name"], "to": "device memory", "cycles": main["dram_cycles"] - lv[-1]["latency_cycles"]})
    out["miss_penalties"] = pen
    if len(lv) > 1:
        out["near_fraction"] = lv[0]["bytes"] / main["capacity_bytes"]
    if reported:
        cap = main["capacity_bytes"]
        out["reported_bytes"] = float(reported)
        out["capacity_over_reported"] = cap / float(reported)
        # the capacity is the last footprint still served on chip: it cannot exceed the L2
        out["within_reported"] = bool(cap <= 1.02 * float(reported))
    if pmap and pmap.get("split"):
        out["probe"] = {k: pmap.get(k) for k in ("near_cycles", "far_cycles", "far_minus_near",
                                                 "address_dependent", "agreement")}
        out["probe"]["sms"] = [len(pmap.get("side_a") or []), len(pmap.get("side_b") or [])]
        _name_by_placement(out, float(pmap["near_cycles"]), float(pmap["far_cycles"]))
    return out


MIXTURE_TOL = 0.05  # a plateau this far below the per-SM map's near hit is no L2 level of its own
BOTH = "L2 (both partitions)"  # a first L2 plateau between the map's near and far hits
BEYOND = "L2 beyond the far hit"  # a last on-chip plateau above every hit of the map


def _name_by_placement(l2: dict, near: float, far: float) -> None:
    """Hold the staircase's levels against the per-SM map's placement-controlled hits (``near``,
    ``far``): a plateau below the near hit is a mixture of L1 hits and L2 hits (the chase's lines
    partly still in L1), not an L2 level, and is named so; ``l2["placement"]`` says, for the
    first and the last L2 level, whether each lies between the two hits (lines of both
    partitions: the hit averaged over them), or above both (not a plain hit of either)."""
    mix = "L1/L2 mixture (below the L2 near hit)"
    before = [lv["name"] for lv in l2.get("levels") or []]
    for lv in l2.get("levels") or []:
        if lv["latency_cycles"] < (1 - MIXTURE_TOL) * near:
            lv["name"] = mix
    for x in (l2.get("crosscheck") or {}).values():
        x["levels"] = [(mix if lat < (1 - MIXTURE_TOL) * near else n, lat, last) for n, lat, last in x["levels"]]
    lv = [v for v in l2.get("levels") or [] if v["name"] != mix]
    if not lv:
        return

    def where(lat: float) -> str:
        if lat < (1 - MIXTURE_TOL) * near:
            return "below"
        if lat <= (1 + MIXTURE_TOL) * far:
            return "between" if lat > (1 + MIXTURE_TOL) * near else "near"
        return "above"
    if where(lv[0]["latency_cycles"]) == "between":
        lv[0]["name"] = BOTH
    if len(lv) > 1 and where(lv[-1]["latency_cycles"]) == "above":
        lv[-1]["name"] = BEYOND
    renamed = dict(zip(before, [v["name"] for v in l2.get("levels") or []], strict=True))
    for pen in l2.get("miss_penalties") or []:  # the penalties name the levels as the staircase does
        pen["miss"], pen["to"] = renamed.get(pen["miss"], pen["miss"]), renamed.get(pen["to"], pen["to"])
    l2["placement"] = {"near_cycles": near, "far_cycles": far,
                       "first": {"name": lv[0]["name"], "cycles": lv[0]["latency_cycles"],
                                 "where": where(lv[0]["latency_cycles"])},
                       "last": {"name": lv[-1]["name"], "cycles": lv[-1]["latency_cycles"],
                                "where": where(lv[-1]["latency_cycles"]), "from_bytes": lv[-1]["from_bytes"]}}


def _placement_conclusions(l2: dict) -> list[str]:
    """What the staircase's levels are, held against the per-SM map's near and far hits."""
    pl = l2.get("placement")
    if not pl:
        return []
    near, far = pl["near_cycles"], pl["far_cycles"]
    c = []
    f = pl["first"]
    if f["where"] == "between":
        c.append(f"The staircase's first L2 level ({f['name']}, {f['cycles']:.0f} cycles) lies between the per-SM "
                 f"map's near ({near:.0f}) and far ({far:.0f}) hits: one SM's chase over many lines meets lines of "
                 "both partitions, so this level is the L2 hit averaged over them, not the near partition alone; "
                 "the placement-controlled figures are the map's.")
    elif f["where"] == "near":
        c.append(f"The staircase's first L2 level ({f['cycles']:.0f} cycles) is the per-SM map's near hit "
                 f"({near:.0f}).")
    last = pl["last"]
    if last["where"] == "above" and last["name"] != f["name"]:
        rep = l2.get("reported_bytes")
        share = f" ({last['from_bytes'] / rep:.0%} of the driver's L2 size)" if rep else ""
        c.append(f"The staircase's last L2 level ({last['name']}, {last['cycles']:.0f} cycles from "
                 f"{human(last['from_bytes'])}{share}) is above every hit of the per-SM map (far {far:.0f}): "
                 f"it is not a plain hit of either partition; its mechanism is not established by this suite "
                 f"(evidence: +{last['cycles'] - far:.0f} cycles over a far hit, "
                 f"{l2['dram_cycles'] - last['cycles']:.0f} below device memory).")
    return c


def sizes_from(stair: dict, l2: dict | None = None) -> dict:
    """L1: the first step of a .ca staircase (strided chain preferred: sharper). L2: the
    capacity of the L2 model (the end of its last on-chip level) and its near partition."""
    sizes: dict = {}
    for variant in ("sweep/ca-strided", "sweep/ca-random"):
        st = stair.get(variant)
        if st and st["steps"]:
            sizes["L1"] = _step_json(st["steps"][0], f"first step of {variant}")
            break
    if l2 and l2.get("levels"):
        lv = l2["levels"]
        sizes["L2"] = {"bytes": l2["capacity_bytes"], "bracket": l2["capacity_bracket"],
                       "levels_cycles": [lv[-1]["latency_cycles"], l2["dram_cycles"]],
                       "source": f"end of the last on-chip level of {l2['source']}"}
        if len(lv) > 1:
            sizes["L2_near"] = {"bytes": lv[0]["bytes"], "bracket": lv[0]["bracket"],
                                "levels_cycles": [lv[0]["latency_cycles"], lv[1]["latency_cycles"]],
                                "source": f"end of the first L2 level of {l2['source']}"}
        for v, c in (l2.get("crosscheck") or {}).items():
            sizes.setdefault("L2_crosscheck", {"bytes": c["capacity_bytes"], "source": v})
    return sizes


# --- TLB

TLB_LEVEL_POINTS = 3  # rises separated by a shorter plateau are one gradual transition


def _merge_rises(steps: list[dict], xs: list[float]) -> list[dict]:
    """Join consecutive rises whose plateau between them holds fewer than TLB_LEVEL_POINTS
    points: one level running out gradually (a narrow page stride, where several pages share
    an entry and the random order spreads the reuse distance), not several levels."""
    out: list[dict] = []
    for st in steps:
        prev = out[-1] if out else None
        between = sum(1 for x in xs if prev and prev["bytes_above"] <= x <= st["bytes_below"])
        if prev and prev["miss_cycles"] > 0 and st["miss_cycles"] > 0 and between < TLB_LEVEL_POINTS:
            out[-1] = {**prev, "pages_above": st["pages_above"], "bytes_above": st["bytes_above"],
                       "level_above": st["level_above"], "miss_cycles": st["level_above"] - prev["level_below"],
                       "transition": (prev.get("transition") or []) + [[prev["bytes_above"], prev["level_above"]]]
                       + (st.get("transition") or []), "merged": prev.get("merged", 1) + 1}
        else:
            out.append(dict(st))
    return out


def tlb_study(records: list[dict]) -> dict:
    """Per page stride: latency against pages visited; steps found with a threshold from
    the spread of the launches (each its own page order and lines). A rise is a translation
    level running out: its reach is the last footprint before it (at the smallest stride),
    its entries the fewest pages at which any stride steps, its miss cost the level change.
    No rise at any stride: misses are hidden (or the reach exceeds every chain), with the
    evidence."""
    series: dict[str, dict] = {}
    for variant, rows in _by(records, "tlb/").items():
        pts = sorted((r["params"]["pages"], r["params"]["footprint"], r["value"], r.get("samples") or [])
                     for r in rows if r.get("value") is not None and "pages" in (r.get("params") or {}))
        if len(pts) < 3:
            continue
        stride = int(rows[0]["params"]["page_stride"])
        samples = [p[3] for p in pts]
        spread, thr = pooled_spread(samples), spread_threshold(samples)
        ys = [p[2] for p in pts]
        pl, st = detect([p[1] for p in pts], ys, min_rel=thr, min_points=2, noise=spread)
        steps = [{"pages_below": int(round(x.x_below / stride)), "pages_above": int(round(x.x_above / stride)),
                  "bytes_below": x.x_below, "bytes_above": x.x_above, "level_below": x.level_below,
                  "level_above": x.level_above, "miss_cycles": x.level_above - x.level_below,
                  "transition": x.transition} for x in st]
        steps = _merge_rises(steps, [p[1] for p in pts])
        tail = None
        if pl and pts[-1][1] > pl[-1].x_last and ys[-1] > pl[-1].level * (1 + thr):
            # the largest chains rise above the last plateau: a level may run out here (one
            # point above it is not a plateau; reported as such)
            after = [p for p in pts if p[1] > pl[-1].x_last]
            tail = {"pages_below": int(round(pl[-1].x_last / stride)), "pages": [p[0] for p in after],
                    "level_below": pl[-1].level, "values": [p[2] for p in after],
                    "rise_cycles": ys[-1] - pl[-1].level}
        series[variant] = {"stride": stride, "points": len(pts), "pages_max": pts[-1][0],
                           "footprint_max": pts[-1][1], "spread_rel": spread, "threshold_rel": thr,
                           "range_rel": max(ys) / min(ys) - 1, "plateaus": [vars(x) for x in pl],
                           "rises": [x for x in steps if x["miss_cycles"] > 0],
                           "falls": [x for x in steps if x["miss_cycles"] <= 0], "tail_rise": tail}
    out: dict = {"series": series, "steps": [], "reach_bytes": [],
                 "method": "chains over N pages (random page order, lines kept in L2, .cg), per "
                           "page stride; step threshold = max(0.5 %, 5 x the pooled spread of "
                           "the launches)"}
    if not series:
        out["note"] = "TLB study not measured"
        return out
    by_stride = sorted(series.values(), key=lambda x: x["stride"])
    out["tail_rises"] = {human(x["stride"]): x["tail_rise"] for x in by_stride if x["tail_rise"]}
    ref = next((x for x in by_stride if x["rises"]), None)
    if ref is None:
        big = max(by_stride, key=lambda x: x["footprint_max"])
        out["hidden"] = True
        out["evidence"] = {human(x["stride"]): {"pages_max": x["pages_max"], "footprint_max": x["footprint_max"],
                                                "range_rel": x["range_rel"], "threshold_rel": x["threshold_rel"]}
                           for x in by_stride}
        out["note"] = (f"no translation step at any page stride up to {big['pages_max']} pages "
                       f"({human(big['footprint_max'])}): latency varies by at most "
                       f"{max(x['range_rel'] for x in by_stride):.1%} over each chain range, below "
                       "the step thresholds ("
                       + ", ".join(f"{human(x['stride'])}: {x['threshold_rel']:.1%}" for x in by_stride)
                       + "); misses are hidden or the reach exceeds every chain")
        return out
    out["hidden"] = False
    for lv in _tlb_levels(by_stride):
        by = lv["by_stride"]
        narrow = min(by)  # the narrowest stride showing the level: its footprint is the reach
        rise = by[narrow]
        sharp = [m for m in by.values() if m["pages_below"] <= 1.5 * lv["entries"]]
        level = {"reach_bytes": rise["bytes_below"], "bracket": [rise["bytes_below"], rise["bytes_above"]],
                 "stride": narrow, "entries": lv["entries"],
                 "bytes_per_entry": rise["bytes_below"] / lv["entries"],
                 "miss_cycles": float(np.median([m["miss_cycles"] for m in sharp or by.values()])),
                 "level_below": rise["level_below"], "level_above": rise["level_above"],
                 "by_stride": {human(st): {"pages": [m["pages_below"], m["pages_above"]],
                                           "miss_cycles": m["miss_cycles"], "merged": m.get("merged", 1)}
                               for st, m in sorted(by.items())},
                 # the fields of the page sweep's steps (kept for readers of earlier documents)
                 "x_below": rise["bytes_below"], "x_above": rise["bytes_above"]}
        out["steps"].append(level)
        out["reach_bytes"].append(rise["bytes_below"])
    return out


def _join(a: dict, b: dict) -> dict:
    """One rise from ``a``'s start to ``b``'s end (a level running out gradually)."""
    return {**a, "pages_above": b["pages_above"], "bytes_above": b["bytes_above"],
            "level_above": b["level_above"], "miss_cycles": b["level_above"] - a["level_below"],
            "merged": a.get("merged", 1) + b.get("merged", 1)}


def _tlb_levels(by_stride: list[dict]) -> list[dict]:
    """Translation levels from the rises of every stride, widest stride first. A level of E
    entries each covering P bytes steps at E pages for strides >= P (one entry per page: a
    sharp step, the stride is entry-limited) and at E x P bytes for narrower ones (several
    pages per entry: a gradual rise). A stride's rise belongs to the widest-reaching level
    whose entries fit below it; a second rise of the same stride on that level is a new
    level only if the stride is entry-limited there (its first step came at the entries),
    else it is the rest of the gradual rise and is joined to it."""
    levels: list[dict] = []  # {"entries": E, "by_stride": {stride: rise}}
    for x in sorted(by_stride, key=lambda v: -v["stride"]):
        stride = x["stride"]
        for rise in x["rises"]:
            fit = [lv for lv in levels if lv["entries"] <= 1.5 * rise["pages_below"]]
            lv = fit[-1] if fit else None
            if lv is None:
                levels.append({"entries": rise["pages_below"], "by_stride": {stride: rise}})
                continue
            own = lv["by_stride"].get(stride)
            if own is None:
                lv["by_stride"][stride] = rise
                lv["entries"] = min(lv["entries"], rise["pages_below"])
            elif own["pages_below"] <= 1.5 * lv["entries"]:
                levels.append({"entries": rise["pages_below"], "by_stride": {stride: rise}})
            else:
                lv["by_stride"][stride] = _join(own, rise)
    return sorted(levels, key=lambda v: v["entries"])


# --- line size from capacity against node spacing

def _curve_of(rows: list[dict]) -> list[list[float]]:
    return [[x, y] for x, y in sorted((r["params"]["footprint"], r["value"]) for r in rows
                                      if r.get("value") is not None and "footprint" in (r.get("params") or {}))]


def cache_lines(records: list[dict], sizes: dict, l2: dict | None = None) -> dict:
    """Line (allocation) size per level: a strided chain at node spacing s > line allocates
    one line per node, so its capacity (the midpoint crossing of its step) moves from C to
    C x s / line; line = s / ratio. L1: the reference C is the same item's sweep at the fill
    granularity; L2: the staircase's near-partition and total capacities (the crossings of
    the spaced chain between the same levels). A ratio within 20 % of 1: the line is at
    least s (not resolved)."""
    out: dict = {}
    by = _by(records, "line/")
    for level in ("L1", "L2"):
        ser = {int(v.split("@")[1]): rows for v, rows in by.items() if v.startswith(f"line/{level}@")}
        if not ser:
            continue
        ref_sp = next((sp for sp, rows in ser.items()
                       if any((r.get("params") or {}).get("reference") for r in rows)), None)
        pairs: list[tuple[str, float | None, float | None, float | None]] = []  # key, lo, hi, reference
        if level == "L1" and ref_sp:
            ref_curve = _curve_of(ser[ref_sp])
            pl, _ = detect([p[0] for p in ref_curve], [p[1] for p in ref_curve], min_points=2) \
                if len(ref_curve) >= 4 else ([], [])
            if len(pl) >= 2:
                pairs.append(("step", pl[0].level, pl[1].level,
                              crossing(ref_curve, pl[0].level, pl[1].level, pl[0].x_first)))
        elif l2 and l2.get("levels"):
            lv = l2["levels"]
            for a, b in zip(lv, lv[1:], strict=False):
                pairs.append((f"{a['name']} -> {b['name']}", a["latency_cycles"], b["latency_cycles"], a["bytes"]))
            pairs.append((f"{lv[-1]['name']} -> device memory", lv[-1]["latency_cycles"], l2["dram_cycles"],
                          l2["capacity_bytes"]))
        ests, evidence = [], {}
        for sp, rows in sorted(ser.items()):
            if sp == ref_sp:
                continue
            curve = _curve_of(rows)
            for key, lo, hi, ref in pairs:
                cap = crossing(curve, lo, hi, curve[0][0]) if curve else None
                if not cap or not ref:
                    continue
                ratio = cap / ref
                est = sp / ratio if ratio > 1.2 else None
                evidence[f"{sp} B spacing, {key}"] = {"capacity_bytes": cap, "reference_bytes": ref,
                                                      "ratio": ratio, "line_estimate": est}
                if est:
                    ests.append(est)
        if ests:
            raw = float(np.median(ests))
            out[level] = {"bytes": int(2 ** round(np.log2(raw))), "estimate": raw, "evidence": evidence,
                          "method": "capacity step against node spacing (one line allocated per node)"}
        else:
            out[level] = {"bytes": None, "evidence": evidence,
                          "why": "no capacity step moved with the node spacing (line not resolved)"}
    return out


# --- summary

def _noisy(records: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        if any(str(f).startswith("noisy") for f in r.get("flags") or []):
            key = r["variant"].split("@")[0]
            out[key] = out.get(key, 0) + 1
    return out


def summarize(records: list[dict]) -> dict:
    """The memory suite's summary and conclusions from one run's stored records."""
    lat = {}
    for r in records:
        if r["variant"].startswith("latency/"):
            lat[r["variant"].split("/", 1)[1]] = r["value"]
    stair = staircase(records)
    pmap: dict = {}
    for r in records:
        if r["variant"].startswith("l2map/") and isinstance(r.get("samples"), dict):
            pmap = partition_map(r["samples"].get("sm") or [], r["samples"].get("latency") or [])
    reported = next((r["value"] for r in records if r["variant"] == "device/l2_size_reported"), None)
    tlb = tlb_study(records)
    l2 = l2_model(stair, reported, pmap, tlb.get("steps"))
    sizes = sizes_from(stair, l2)
    fills = {}
    for variant, rows in _by(records, "stride/").items():
        k = knee([r["params"]["stride"] for r in rows if "stride" in r["params"]],
                 [r["value"] for r in rows if "stride" in r["params"]])
        if k:
            fills[variant.split("/")[1]] = {**k, "what": "fill (sector) granularity: the bytes a miss "
                                                          "brings in, not the line (tag) size"}
    lines = cache_lines(records, sizes, l2)
    bw = bwm.summarize(records)
    texture = tex.summarize(records)
    geo = bank_geometry(records)
    stores = store_latencies(lat, records)
    banks = {}
    for variant, rows in _by(records, "bank/").items():
        if geo.get("banks"):  # the conflict degrees of the measured geometry, not the labels'
            rows = [{**r, "params": {**r["params"], **bank_degrees(
                r["params"]["stride_bytes"], r["params"]["width_bytes"], banks=geo["banks"],
                bank_bytes=geo["bank_bytes"])}} for r in rows
                if (r.get("params") or {}).get("width_bytes")]
        banks[variant.split("/")[1]] = {
            "table": [{"stride_bytes": r["params"].get("stride_bytes"),
                       "degree_warp": r["params"].get("degree_warp"),
                       "wavefronts_phase": r["params"].get("wavefronts_phase"),
                       "cycles": r["value"]} for r in rows if r.get("params")],
            "fit": bank_rule(rows)}
    nearfar = {}
    if pmap.get("split"):
        nearfar = {"bimodal": True, "near_mean": pmap["near_cycles"], "far_mean": pmap["far_cycles"],
                   "near_sms": len(pmap["side_a"]), "far_sms": len(pmap["side_b"]),
                   "median": pmap["median"], "address_dependent": pmap["address_dependent"]}
    elif pmap:
        nearfar = {"bimodal": False, "median": pmap.get("median"), "min": pmap.get("min"),
                   "max": pmap.get("max"), "why": pmap.get("why")}
    noisy = _noisy(records)
    return {"conclusions": conclusions(lat, sizes, fills, lines, tlb, bw, banks, l2, pmap, noisy)
            + _store_conclusion(stores) + _per_width_conclusion(bw, geo) + bank_conclusion(geo)
            + tex.conclusions(texture),
            "store_latency": stores, "bank_geometry": geo, "banks": geo.get("banks"),
            "bank_bytes": geo.get("bank_bytes"),
            "latency": lat, "staircase": stair, "sizes": sizes, "l2": l2, "texture": texture,
            "line_sizes": fills, "fill_granularity": fills, "cache_lines": lines, "tlb": tlb,
            "l2map": pmap, "nearfar": nearfar, "noisy_points": noisy,
            "bandwidth": bw, "bank_conflicts": banks,
            "figures": ["memory_staircase", "memory_l2_map", "memory_tlb", "memory_line_sizes",
                        "memory_bandwidth", "memory_bank_conflicts", "memory_bandwidth_occupancy",
                        "memory_dram_footprint"]}


def _levels_text(l2: dict) -> str:
    return "; ".join(f"{lv['name']} {lv['latency_cycles']:.0f} cycles, size {human(lv['bytes'])} "
                     f"(on the level to {human(lv['last_on_level'])})" for lv in l2["levels"])


def _l2_conclusions(l2: dict, pmap: dict, tlb: dict) -> list[str]:
    c = []
    if not l2.get("levels"):
        return [f"L2: {l2.get('why', 'not measured')}."]
    lv = l2["levels"]
    lo, hi = l2["capacity_bracket"]
    cap = l2["capacity_bytes"]
    c.append(f"L2 ({l2['source']}): {_levels_text(l2)}; device memory {l2['dram_cycles']:.0f} cycles "
             f"from {human(hi)}. L2 capacity (where the last on-chip level ends: half-way to device "
             f"memory): {human(cap)} (last point on the level {human(lo)}, first at device memory "
             f"{human(hi)}).")
    if len(lv) > 1:
        c.append(f"L2 partitions: the near level ends at {human(lv[0]['bytes'])}, "
                 f"{l2['near_fraction']:.0%} of the capacity; the far level serves up to "
                 f"{human(lv[-1]['bytes'])} at {lv[-1]['latency_cycles']:.0f} cycles"
                 + (f" (one SM's chain; slower than a far-partition hit in the per-SM map, "
                    f"{l2['probe']['far_cycles']:.0f} cycles: not plain far hits)"
                    if (l2.get("probe") or {}).get("far_cycles") and lv[-1]["latency_cycles"]
                    > 1.25 * l2["probe"]["far_cycles"] else "") + ".")
    else:
        c.append("L2: one on-chip level only (no near/far split resolved in the staircase).")
    if l2.get("reported_bytes"):
        rep = l2["reported_bytes"]
        ok = "within" if l2["within_reported"] else "ABOVE"
        c.append(f"L2 size reported by the driver: {human(rep)}; measured capacity {human(cap)} "
                 f"= {l2['capacity_over_reported']:.0%} of it ({ok} the reported size).")
    for v, x in (l2.get("crosscheck") or {}).items():
        lo2, hi2 = x.get("capacity_bracket") or [None, None]
        c.append(f"L2 cross-check {v}: "
                 + ", ".join(f"{n} {lat:.0f} cycles (on the level to {human(b)})" for n, lat, b in x["levels"])
                 + f"; device memory from {human(hi2)}.")
    c.append("Miss penalties (staircase plateaus): "
             + ", ".join(f"{p['miss']} miss -> {p['to']} +{p['cycles']:.0f}" for p in l2["miss_penalties"]) + ".")
    for t in l2.get("translation_steps") or []:
        c.append(f"The staircase step {t['levels_cycles'][0]:.0f} -> {t['levels_cycles'][1]:.0f} cycles "
                 f"between {human(t['bracket'][0])} and {human(t['bracket'][1])} is translation (the TLB "
                 f"study's level reaching {human(t['tlb_reach'])}), not a cache level.")
    return c


def _map_conclusions(pmap: dict) -> list[str]:
    if not pmap:
        return []
    if not pmap.get("split"):
        return [f"Per-SM L2 map ({pmap.get('sms', '?')} SMs x {pmap.get('lines', '?')} lines): no "
                f"two-group split ({pmap.get('why', '')}); latency {pmap.get('min', 0):.0f}–"
                f"{pmap.get('max', 0):.0f} cycles."]
    a, b = len(pmap["side_a"]), len(pmap["side_b"])
    head = (f"Per-SM L2 map ({pmap['sms']} SMs x {pmap['lines']} lines, .cg one-line chases; "
            f"the near/far pattern holds {pmap.get('var_explained', 0):.0%} of the variance left after "
            f"SM and line means" + (f", {pmap['agreement']:.1%} of cells on their side"
                                    if pmap.get("agreement") is not None else "") + "): ")
    if pmap["address_dependent"]:
        nr, fr = pmap.get("sm_near_range") or [0, 0], pmap.get("sm_far_range") or [0, 0]
        return [head + f"{a} SMs see {pmap['lines_near_a']} lines as near and {b} SMs the other "
                f"{pmap['lines_near_b']}: near hits {pmap['near_cycles']:.0f} cycles, far hits "
                f"{pmap['far_cycles']:.0f} (+{pmap['far_minus_near']:.0f}): two L2 partitions, "
                f"{a}/{b} SMs attached to each. Per SM the near median ranges {nr[0]:.0f}–{nr[1]:.0f} "
                f"and the far one {fr[0]:.0f}–{fr[1]:.0f} cycles (the SM's position on the chip)."]
    return [head + f"the same {b} SMs are slower ({pmap['far_cycles']:.0f} against "
            f"{pmap['near_cycles']:.0f} cycles) for every line: the split follows the SMs' "
            "position, not the address (no line is far for one group and near for the other)."]


def _tlb_conclusions(tlb: dict) -> list[str]:
    c = []
    for k, t in enumerate(tlb.get("steps", [])):
        per = (f" = {t['entries']} entries of about {human(t['bytes_per_entry'])} each (the fewest "
               "pages any stride steps at: wider strides need one entry per page)"
               if t.get("bytes_per_entry") else "")
        c.append(f"TLB level {k + 1}: reach {human(t['reach_bytes'])} at a {human(t['stride'])} page "
                 f"stride (the rise is complete by {human(t['bracket'][1])}){per}; a miss costs "
                 f"{t['miss_cycles']:.0f} cycles ({t['level_below']:.0f} -> {t['level_above']:.0f}); "
                 "steps by stride: " + ", ".join(f"{s} at {v['pages'][0]}–{v['pages'][1]} pages "
                                                 f"(+{v['miss_cycles']:.0f})" for s, v in t["by_stride"].items()) + ".")
    for s, t in (tlb.get("tail_rises") or {}).items():
        c.append(f"TLB: at the {s} stride the largest chains rise above the last plateau "
                 f"({t['level_below']:.0f} cycles up to {t['pages_below']} pages; "
                 + ", ".join(f"{v:.0f} at {n}" for n, v in zip(t["pages"], t["values"], strict=True))
                 + " pages): a further level may run out there (free memory ends the sweep).")
    if tlb.get("note"):
        c.append("TLB: " + tlb["note"] + ".")
    return c


def conclusions(lat, sizes, fills, lines, tlb, bw, banks, l2, pmap, noisy) -> list[str]:
    c = []
    got = {k: v for k, v in lat.items() if v is not None}
    if got:
        c.append("Pointer-chase latency (cycles, hot 2 KiB chain): "
                 + ", ".join(f"{k} {v:.0f}" for k, v in got.items()) + ".")
    missing = [k for k, v in lat.items() if v is None]
    if missing:
        c.append("Not measured (see flags): " + ", ".join(missing) + ".")
    if "L1" in sizes:
        s = sizes["L1"]
        lo, hi = s["bracket"]
        c.append(f"L1: latency stays at {s['levels_cycles'][0]:.0f} cycles up to {human(lo)} and "
                 f"reaches {s['levels_cycles'][1]:.0f} at {human(hi)} ({s['source']}): capacity "
                 f"between {human(lo)} and {human(hi)}.")
    c += _l2_conclusions(l2, pmap, tlb)
    c += _map_conclusions(pmap)
    c += _placement_conclusions(l2)
    if pmap and pmap.get("split") and got.get("ld.global.cg") is not None:
        c.append(f"L2 hit latency, three figures: near {pmap['near_cycles']:.0f} and far {pmap['far_cycles']:.0f} "
                 f"cycles (the per-SM map: each SM to the lines of its own / the other partition, placement "
                 f"controlled; the key quantities), and {got['ld.global.cg']:.0f} for the hot 2 KiB .cg chain "
                 "above, whose lines lie in both partitions (not placed).")
    c += _tlb_conclusions(tlb)
    for lvl, k in fills.items():
        if k.get("bytes"):
            c.append(f"{lvl} fill (sector) granularity {k['bytes']} B: a cold pass reaches its miss "
                     f"latency ({k['plateau_cycles']:.0f} cycles, from {k['low_cycles']:.0f}) at a "
                     f"{k['bytes']} B stride (what one miss brings in; not the line size).")
    for lvl, k in lines.items():
        if k.get("bytes"):
            c.append(f"{lvl} line (allocation) size {k['bytes']} B (estimate {k['estimate']:.0f} B): "
                     "the capacity step of wider node spacings moves up by spacing / line.")
        else:
            c.append(f"{lvl} line size: not measured ({k.get('why')}).")
    c += bwm.conclusions(bw)
    for w, b in banks.items():
        f = b["fit"]
        if f.get("rule"):
            m = f[f["rule"]]
            other = "wavefronts_phase" if f["rule"] == "degree_warp" else "degree_warp"
            o = f.get(other)
            c.append(f"Shared {w}: cycles = {m['intercept']:.1f} + {m['cycles_per_wavefront']:.2f}"
                     f" x {f['rule']} (r2 {m['r2']:.3f}"
                     + (f"; the other model r2 {o['r2']:.3f}" if o else "") + ").")
    if noisy:
        c.append("Noisy points (launch spread above 2 %): "
                 + ", ".join(f"{k} {n}" for k, n in sorted(noisy.items())) + ".")
    return c
