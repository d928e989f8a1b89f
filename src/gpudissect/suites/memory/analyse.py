"""Analysis of the memory suite: sizes from the staircase, line sizes from stride sweeps,
TLB reach, bandwidth figures, the shared-memory bank-conflict rule, and the conclusions.

Works on store/export records (dicts with variant, measure, value, params, samples, flags)."""

from __future__ import annotations

import numpy as np

from gpudissect.bench.stats import fit_line
from gpudissect.bench.steps import detect

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

def bank_degrees(stride: int, width: int, lanes: int = 32, smem: int = 32 * KiB) -> dict:
    """Conflict degrees of a warp access where lane l reads ``width`` bytes at
    ``(l * stride) mod smem``: the most distinct 4-byte words any bank must deliver over the
    whole warp (``degree_warp``), and the sum over phases of 128 bytes of requests
    (``32 * 4 / width`` lanes each) of the per-phase maximum (``wavefronts_phase``)."""
    def degree(ls: range) -> int:
        per_bank: dict[int, set[int]] = {}
        for lane in ls:
            a = (lane * stride) % smem // width * width
            for w in range(a // BANK_BYTES, (a + width) // BANK_BYTES):
                per_bank.setdefault(w % BANKS, set()).add(w)
        return max(len(v) for v in per_bank.values())

    per_phase = max(1, BANKS * BANK_BYTES // width)
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
            "min": float(v[0]), "max": float(v[-1]), "median": med}


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


# --- sizes used by later benchmarks

def bandwidth_footprints(sizes: dict, free: int) -> tuple[dict, dict]:
    """Footprints of the bandwidth runs from the measured sizes (flagged generic fallbacks
    where a size was not measured)."""
    flags: dict[str, list[str]] = {}
    l1 = (sizes.get("L1") or {}).get("bytes")
    l2 = (sizes.get("L2") or {}).get("bytes")
    if not l1:
        l1 = 64 * KiB
        flags["L1"] = ["fallback: L1 size not measured; generic 64 KiB footprint"]
    if not l2:
        l2 = 16 * MiB
        flags["L2"] = ["fallback: L2 size not measured; generic 16 MiB footprint"]
        flags["DRAM"] = ["fallback: DRAM footprint not derived from a measured L2 size"]
    dram = int(min(max(8 * l2, 256 * MiB), free // 3))
    return {"l1": int(l1), "l2": int(l2), "dram": dram}, flags


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
        pts = sorted((r["params"]["footprint"], r["value"]) for r in rows
                     if r.get("value") is not None and "footprint" in (r.get("params") or {}))
        if not pts:
            continue
        plateaus, steps = detect([p[0] for p in pts], [p[1] for p in pts], min_points=3)
        out[variant] = {"points": len(pts),
                        "plateaus": [vars(p) for p in plateaus],
                        "steps": [s.to_json() for s in steps]}
    return out


def _step_json(s: dict, source: str) -> dict:
    return {"bytes": s["x_below"], "bracket": [s["x_below"], s["x_above"]],
            "levels_cycles": [s["level_below"], s["level_above"]], "source": source}


def _overlaps(a: dict, b: dict) -> bool:
    return a["x_below"] < b["x_above"] and b["x_below"] < a["x_above"]


def sizes_from(stair: dict) -> tuple[dict, dict]:
    """L1: the first step of a .ca staircase (strided chain preferred: sharper).
    TLB: the steps of the page sweep (``sweep/cg-pages``: one node per ~1 MiB, so its few lines
    stay in L2 and any step is translation). L2: among the later steps of the strided .ca
    chain (else the random .cg chain) that no TLB step explains, the last one (into device
    memory); earlier ones are L2-internal levels. The random .cg chain is a cross-check."""
    sizes: dict = {}
    pages = stair.get("sweep/cg-pages")
    tlb_steps = pages["steps"] if pages else []
    tlb: dict = {"steps": tlb_steps, "reach_bytes": [t["x_below"] for t in tlb_steps],
                 "source": "sweep/cg-pages: random chain with one node per ~1 MiB region; the "
                           "data touched stays in L2, so each step is a translation level "
                           "running out of reach"}
    if pages and not tlb_steps:
        top = pages["plateaus"][-1]["x_last"] if pages["plateaus"] else None
        tlb["note"] = (f"no step in the page sweep up to {human(top)}: TLB reach is at least "
                       "that (or its misses cost too little to see)")
    elif not pages:
        tlb["note"] = "page sweep not measured"
    for variant in ("sweep/ca-strided", "sweep/ca-random"):
        st = stair.get(variant)
        if st and st["steps"]:
            sizes["L1"] = _step_json(st["steps"][0], f"first step of {variant}")
            break
    for variant, first in (("sweep/ca-strided", 1), ("sweep/cg-random", 0)):
        st = stair.get(variant)
        if not st:
            continue
        cand = [x for x in st["steps"][first:] if not any(_overlaps(x, t) for t in tlb_steps)]
        if cand:
            sizes["L2"] = _step_json(cand[-1], f"last step of {variant} not explained by a "
                                     "TLB step (into device memory)")
            sizes["L2"]["transition"] = cand[-1].get("transition")
            if len(cand) > 1:
                sizes["L2_inner_steps"] = cand[:-1]
            break
    cg = stair.get("sweep/cg-random")
    if cg and cg["steps"] and sizes.get("L2", {}).get("source", "").find("cg-random") < 0:
        cand = [x for x in cg["steps"] if not any(_overlaps(x, t) for t in tlb_steps)]
        if cand:
            sizes["L2_crosscheck"] = _step_json(cand[-1], "last non-TLB step of sweep/cg-random")
    return sizes, tlb


def summarize(records: list[dict]) -> dict:
    """The memory suite's summary and conclusions from one run's stored records."""
    lat = {}
    for r in records:
        if r["variant"].startswith("latency/"):
            lat[r["variant"].split("/", 1)[1]] = r["value"]
    stair = staircase(records)
    sizes, tlb = sizes_from(stair)
    lines = {}
    for variant, rows in _by(records, "stride/").items():
        k = knee([r["params"]["stride"] for r in rows if "stride" in r["params"]],
                 [r["value"] for r in rows if "stride" in r["params"]])
        if k:
            lines[variant.split("/")[1]] = k
    bw = {}
    for r in records:
        if r["variant"].startswith("bandwidth/"):
            p = r.get("params") or {}
            bw[r["variant"].split("/", 1)[1]] = {
                "GB/s": r["value"], "bytes_per_cycle_per_sm": p.get("bytes_per_cycle_per_sm"),
                "footprint": p.get("footprint"), "flags": r.get("flags") or []}
    dram_read = (bw.get("DRAM/read") or {}).get("GB/s")
    copy = (bw.get("DRAM/copy") or {}).get("GB/s")
    if dram_read and copy:
        bw["DRAM/read_over_copy"] = dram_read / copy
    banks = {}
    for variant, rows in _by(records, "bank/").items():
        banks[variant.split("/")[1]] = {
            "table": [{"stride_bytes": r["params"].get("stride_bytes"),
                       "degree_warp": r["params"].get("degree_warp"),
                       "wavefronts_phase": r["params"].get("wavefronts_phase"),
                       "cycles": r["value"]} for r in rows if r.get("params")],
            "fit": bank_rule(rows)}
    nearfar = {}
    for r in records:
        if r["variant"].startswith("nearfar/"):
            nearfar = {"median": r["value"], **((r.get("params") or {}).get("split") or {})}
    return {"conclusions": conclusions(lat, sizes, lines, tlb, bw, banks, nearfar, stair),
            "latency": lat, "staircase": stair, "sizes": sizes, "line_sizes": lines, "tlb": tlb,
            "bandwidth": bw, "bank_conflicts": banks, "nearfar": nearfar,
            "figures": ["memory_staircase", "memory_line_sizes", "memory_bandwidth",
                        "memory_bank_conflicts"]}


def conclusions(lat, sizes, lines, tlb, bw, banks, nearfar, stair) -> list[str]:
    c = []
    got = {k: v for k, v in lat.items() if v is not None}
    if got:
        c.append("Pointer-chase latency (cycles, hot 2 KiB chain): "
                 + ", ".join(f"{k} {v:.0f}" for k, v in got.items()) + ".")
    missing = [k for k, v in lat.items() if v is None]
    if missing:
        c.append("Not measured (see flags): " + ", ".join(missing) + ".")
    for name, s in sizes.items():
        if name in ("L1", "L2", "L2_crosscheck"):
            lo, hi = s["bracket"]
            mid = s.get("transition") or []
            label = {"L2_crosscheck": "L2 cross-check (.cg random chain)"}.get(name, name)
            c.append(f"{label}: latency stays at {s['levels_cycles'][0]:.0f} cycles up to "
                     f"{human(lo)} and reaches {s['levels_cycles'][1]:.0f} at {human(hi)} "
                     f"({s['source']}): capacity between {human(lo)} and {human(hi)}"
                     + (" (in between: " + ", ".join(f"{y:.0f} at {human(x)}" for x, y in mid)
                        + ")" if mid else "") + ".")
    if sizes.get("L2_inner_steps"):
        for s in sizes["L2_inner_steps"]:
            c.append(f"Below the L2 capacity, an intermediate step at {human(s['x_below'])}–"
                     f"{human(s['x_above'])} ({s['level_below']:.0f} -> {s['level_above']:.0f} "
                     "cycles): part of the L2 answers slower (a far L2 partition, or a "
                     "translation level).")
    for s in tlb.get("steps", []):
        c.append(f"TLB: in the page sweep latency steps from {s['level_below']:.0f} to "
                 f"{s['level_above']:.0f} cycles between {human(s['x_below'])} and "
                 f"{human(s['x_above'])} of footprint: a translation level reaches about "
                 f"{human(s['x_below'])}.")
    if tlb.get("note"):
        c.append("TLB: " + tlb["note"] + ".")
    for lvl, k in lines.items():
        if k.get("bytes"):
            c.append(f"{lvl} fill granularity {k['bytes']} B: cold-pass latency reaches its "
                     f"plateau ({k['plateau_cycles']:.0f} cycles, from {k['low_cycles']:.0f}) "
                     f"at a {k['bytes']} B stride.")
    for key, v in bw.items():
        if isinstance(v, dict) and v.get("GB/s"):
            bpc = v.get("bytes_per_cycle_per_sm")
            c.append(f"Bandwidth {key}: {v['GB/s']:.0f} GB/s"
                     + (f" ({bpc:.1f} B/cycle/SM)" if bpc else "")
                     + (f", footprint {human(v['footprint'])}" if v.get("footprint") else "")
                     + (" [" + "; ".join(v["flags"]) + "]" if v.get("flags") else "") + ".")
    if "DRAM/read_over_copy" in bw:
        c.append(f"DRAM read bandwidth is {bw['DRAM/read_over_copy']:.2f} x a device-to-device "
                 "copy kernel's (read + write bytes) in the same run.")
    for w, b in banks.items():
        f = b["fit"]
        if f.get("rule"):
            m = f[f["rule"]]
            other = "wavefronts_phase" if f["rule"] == "degree_warp" else "degree_warp"
            o = f.get(other)
            c.append(f"Shared {w}: cycles = {m['intercept']:.1f} + {m['cycles_per_wavefront']:.2f}"
                     f" x {f['rule']} (r2 {m['r2']:.3f}"
                     + (f"; the other model r2 {o['r2']:.3f}" if o else "") + ").")
    if nearfar.get("median") is not None:
        if nearfar.get("bimodal"):
            c.append(f"L2 near/far: per-SM latency to one address splits into {nearfar['near_sms']}"
                     f" SMs at {nearfar['near_mean']:.0f} and {nearfar['far_sms']} at "
                     f"{nearfar['far_mean']:.0f} cycles.")
        else:
            c.append(f"L2 near/far: per-SM latency to one address ranges {nearfar.get('min', 0):.0f}"
                     f"–{nearfar.get('max', 0):.0f} cycles (median {nearfar['median']:.0f}); "
                     "no clear two-group split.")
    return c
