"""Conclusions of a tensor-suite run from its stored results (every number quoted is a
stored measurement): variant status, best throughput per variant against the clock-scaled
datasheet peak, per-SASS timing, numerics, fragment layouts (mma.sync and wmma)."""

from __future__ import annotations

from collections.abc import Callable

from gpudissect.store.db import Store
from gpudissect.suites.tensor.movm import conclusions as movm_conclusions
from gpudissect.suites.tensor.shape import latency_vs_shape, shape_conclusions


def _per_sass_line(name: str, d: dict) -> str:
    """One conclusion on a multi-SASS variant's per-SASS timing (per_sass.py)."""
    p = d["per_sass"]
    head = f"{name} ({' + '.join(d.get('sass') or [])})"
    if p["value"] is None:
        return f"{head}: per-SASS timing not measurable ({'; '.join(p['flags'])})"
    cum = ", ".join(f"{c:.0f}" for c in p["cumulative_cycles"] or [])
    return (f"{head}, split into {p['partner']}: {p['value']:.1f} cycles between the issue of consecutive "
            f"tensor SASS; cumulative cycles after each SASS {cum}, result used after "
            f"{p['cumulative_complete']:.0f}; the instruction itself: issued after {p['whole_issue']:.0f}, "
            f"result used after {p['whole_total']:.0f} cycles" + (f" [{'; '.join(p['flags'])}]" if p["flags"] else ""))


MOVERS = ("ldmatrix", "stmatrix", "wmma.load", "wmma.store")  # data movement: no tensor SASS
SAME = 0.02  # variants of identical SASS whose peaks differ by more than this are named


def record_group(params: dict) -> str:
    """The peak group a stored result belongs to: "mma", "ldst", or "<ss|rs>_n<N>" for wgmma
    (stored with the result; for an older record read from its kernel family's name)."""
    if params.get("group"):
        return str(params["group"])
    fam = str(params.get("family") or "")
    if fam.startswith("wg"):
        parts = fam.split("_")
        return f"{parts[1]}_{parts[2]}" if len(parts) > 2 else fam
    return "ldst" if fam.startswith("ls") else "mma"


def _config(p: dict) -> str:
    """A configuration in words (accumulators x warps, or x warpgroups for wgmma)."""
    if p.get("chains") is None or p.get("issuers") is None:
        return str(p.get("config") or "?")
    unit = "warpgroups" if p.get("n") else "warps"
    blocks = f" in {p['blocks_per_sm']} blocks" if (p.get("blocks_per_sm") or 1) > 1 else ""
    return f"{p['chains']} acc x {p['issuers']} {unit}/SM{blocks}"


def _saturation(p: dict) -> str:
    ns = next((f for f in p.get("flags") or [] if f.startswith("not-saturated")), None)
    if ns:
        return "NOT SATURATED (" + ns.removeprefix("not-saturated: ") + ")"
    return f"saturated: {p['saturation']}" if p.get("saturation") else "saturation not recorded"


def _flag_names(flags: list[str] | None, skip: tuple[str, ...] = ("not-saturated",)) -> str:
    """The names of a result's flags (clock-suspect, clock-changed, ...) as ' [a, b]', or ''."""
    names = sorted({f.split(":")[0] for f in flags or [] if not f.startswith(skip)})
    return f" [{', '.join(names)}]" if names else ""


def summarize_run(store: Store, run_id: int) -> dict:
    """Conclusions from the stored results (every number quoted is a stored measurement)."""
    rs = store.results(run_id)
    variants: dict[str, dict] = {}
    layouts: dict[str, dict] = {}
    wmma_frags: dict[str, dict] = {}
    for r in rs:
        if r["measure"] == "movm_layout":  # movm.py: its own line below
            continue
        d = variants.setdefault(r["variant"], {})
        p = r["params"] or {}
        if r["measure"] == "sass_map":
            d["status"] = p.get("status")
            d["sass"] = r["sass"]
            if p.get("reason"):
                d["reason"] = p["reason"]
        elif r["measure"] == "latency" and r["value"] is not None:
            d.setdefault("latency_cycles", {})[record_group(p)] = round(r["value"], 2)
        elif r["measure"] == "issue_interval" and r["value"] is not None:
            d["issue_interval"] = {"cycles": round(r["value"], 3), "chains": p.get("chains"), "flags": r["flags"]}
        elif r["measure"] == "throughput_peak" and r["value"] is not None:
            d.setdefault("peak", {})[p["group"]] = {
                "instr_per_cycle_sm": round(r["value"], 4), "flop_per_cycle_sm": p.get("flop_per_cycle_sm"),
                "tflops": p.get("tflops"), "pct_of_peak": p.get("pct_of_peak"),
                "observed_sm_mhz": p.get("observed_sm_mhz"), "config": p.get("best_family"), "flags": r["flags"],
                **{k: p.get(k) for k in ("chains", "issuers", "warps", "blocks_per_sm", "n", "saturation",
                                         "cycles_per_instr_per_scheduler", "cycles_per_instr_per_sm", "data",
                                         "smallest_within_2pct")}}
        elif r["measure"] == "throughput_data" and r["value"] is not None:
            d.setdefault("data", {})[p.get("data")] = {
                "instr_per_cycle_sm": r["value"], "group": record_group(p), "flags": r["flags"],
                "tflops": ((r["samples"] or {}).get("peak") or {}).get("tflops"),
                **{k: p.get(k) for k in ("chains", "issuers", "warps", "blocks_per_sm", "n", "data_default")}}
        elif r["measure"] == "throughput_sustained" and r["value"] is not None:
            d.setdefault("sustained", {})[p.get("order")] = {
                "tflops": r["value"], "flags": r["flags"],
                "after_mhz": (p.get("sm_mhz_kernel_after") or {}).get("sm_mhz_kernel"),
                "in_kernel_mhz": (p.get("sm_mhz_in_kernel") or {}).get("median"),
                **{k: p.get(k) for k in ("data", "implied_sm_mhz", "gpu_ms", "reps", "target_ms", "nvml")}}
        elif r["measure"] == "per_sass":
            d["per_sass"] = {"value": r["value"], "flags": r["flags"], **{k: p.get(k) for k in (
                "partner", "cumulative_cycles", "cumulative_complete", "intervals", "whole_issue", "whole_total")}}
        elif r["measure"] == "numerics" and p.get("cases"):
            d["numerics"] = {k: c["outcome"] for k, c in p["cases"].items()}
        elif r["measure"] == "layout" and p.get("op", "").startswith("wmma."):
            wmma_frags[r["variant"]] = p | {"flags": r["flags"], "value": r["value"]}
        elif r["measure"] == "layout":
            layouts[r["variant"]] = {"matches_reference": p.get("matches_reference"),
                                     "differences": p.get("n_differences"), "flags": r["flags"]}
    conc = []
    by_status: dict[str, list[str]] = {}
    for name, d in variants.items():
        by_status.setdefault(d.get("status") or "?", []).append(name)
    for st, names in sorted(by_status.items()):
        conc.append(f"{len(names)} variants {st}" + (f": {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}"
                                                     if st != "native" else ""))
    best_wg: dict[str, tuple] = {}
    for name, d in variants.items():
        for g, p in (d.get("peak") or {}).items():
            key = p.get("tflops") if p.get("tflops") is not None else p.get("flop_per_cycle_sm")
            if key is None:
                continue
            cur = best_wg.get(name)
            if cur is None or key > cur[2]:
                best_wg[name] = (g, p, key)
    for name, (g, p, _) in best_wg.items():
        lat = (variants[name].get("latency_cycles") or {}).get(g)
        if name.startswith(MOVERS):
            rate = (f" ({p['tflops']:.1f} TB/s over all SMs at {p['observed_sm_mhz']:.0f} MHz)"
                    if p.get("tflops") is not None else "")
            conc.append(f"{name}: {p['instr_per_cycle_sm']:.3f} instr/cycle/SM = {p['flop_per_cycle_sm']:.0f} "
                        f"bytes/cycle/SM{rate}"
                        + (f"; latency {lat:.1f} cycles incl. the address add tree" if lat is not None else "")
                        + f"; {_saturation(p)}{_flag_names(p['flags'])} ({variants[name].get('sass')})")
            continue
        conc.append(_peak_line(name, g, p, lat, variants[name]))
    native = {n: d.get("sass") or [] for n, d in variants.items()
              if d.get("status") == "native" and not n.startswith(MOVERS)}
    single = [n for n, sl in native.items() if len(sl) == 1 and sl[0].startswith("1*")]
    multi = [n for n in native if n not in single]
    timed = [n for n in multi if variants[n].get("per_sass")]
    if native:
        conc.append(f"{len(single)} of {len(native)} native variants map to exactly one SASS instruction per PTX "
                    "instruction (per-SASS timing then equals the instruction's latency and throughput)"
                    + (f"; {len(multi)} map to several ({len(timed)} timed per SASS below)"
                       + (f"; not timed per SASS: {', '.join(n for n in multi if n not in timed)}"
                          if len(timed) < len(multi) else "") if multi else ""))
    conc += [_per_sass_line(n, variants[n]) for n in timed]
    conc += wgmma_conclusions(variants)
    conc += sparse_conclusions(variants)
    conc += same_sass_conclusions(variants)
    conc += data_conclusions(variants)
    for name, d in variants.items():
        if d.get("numerics"):
            conc.append(f"{name} numerics (D[0][0] of designed inputs): "
                        + "; ".join(f"{k}: {o}" for k, o in d["numerics"].items()))
    if layouts:
        ok = [n for n, d in layouts.items() if d["matches_reference"]]
        bad = [n for n, d in layouts.items() if d["matches_reference"] is False]
        conc.append(f"fragment layouts: {len(ok)} mma variants match the PTX reference layout "
                    f"(up to the unobservable relabelling of rows/cols/k), {len(bad)} differ"
                    + (f": {', '.join(bad)}" if bad else ""))
    conc += wmma_fragment_conclusions(wmma_frags)
    by_shape = latency_vs_shape(variants, skip=MOVERS)  # shape.py: does latency depend on shape?
    conc += shape_conclusions(by_shape)
    conc += movm_conclusions(rs)  # type: ignore[arg-type]
    layouts.update({n: {"matches_reference": None, "matches_tiled_mma": p.get("value") == 1.0,
                        "tiling": p.get("tiling_text"), "coverage": p.get("coverage"), "flags": p["flags"]}
                    for n, p in wmma_frags.items()})
    return {"conclusions": conc, "variants": variants, "layouts": layouts, "latency_vs_shape": by_shape}


def _peak_line(name: str, g: str, p: dict, lat: float | None, d: dict) -> str:
    """One variant's peak: work per cycle and per second at the clock measured in a kernel,
    % of the datasheet figure, its configuration and saturation, and the latency of the same
    group (same N and A source for wgmma)."""
    pct = f", {p['pct_of_peak']:.1f}% of the clock-scaled datasheet peak" if p.get("pct_of_peak") else ""
    rate = (f", {p['tflops']:.1f} TFLOP/s at {p['observed_sm_mhz']:.0f} MHz (SM clock measured in a kernel)"
            if p.get("tflops") is not None else "")
    lat_s = (f"; latency {lat:.1f} cycles" + (f" ({g})" if g != "mma" else "")) if lat is not None else ""
    iss = d.get("issue_interval")
    one = f"; one warp alone issues one every {iss['cycles']:.2f} cycles" if iss else ""
    per = (f"; one every {p['cycles_per_instr_per_scheduler']:.2f} cycles per scheduler"
           if p.get("cycles_per_instr_per_scheduler") else "")
    sm = p.get("smallest_within_2pct") or {}
    small = (f" (already within 2% at {_config({**p, **sm})})"
             if sm and (sm.get("chains"), sm.get("issuers")) != (p.get("chains"), p.get("issuers")) else "")
    return (f"{name} [{g}]: {p['flop_per_cycle_sm']:.0f} FLOP/cycle/SM{rate}{pct}{_flag_names(p['flags'])}; "
            f"best at {_config(p)}{small}, {_saturation(p)}{per}{one}{lat_s} ({d.get('sass')})")


def _n_order(g: str) -> tuple[str, int]:
    src, _, n = g.partition("_n")
    return src, int(n) if n.isdigit() else 0


def _smem_bytes(name: str, group: str) -> int | None:
    """Operand bytes one wgmma of ``group`` reads from shared memory: B (N x K), and A
    (64 x K, or K/2 when sparse) when it comes from shared memory ('ss'); from the catalog."""
    from gpudissect.catalog.tensor import load_tensor_catalog

    v = next((w for w in load_tensor_catalog().wgmma if w.name == name), None)
    src, _, n = group.partition("_n")
    if v is None or not n.isdigit():
        return None
    return int(n) * v.k_bytes("b") + (64 * v.k_bytes("a") if src == "ss" else 0)


def _group_text(name: str, g: str, p: dict, lat: float | None) -> str:
    """One wgmma group: % of peak, its own latency, the shared-memory operand bytes per cycle
    at its rate, and whether it is saturated."""
    by = _smem_bytes(name, g)
    parts = ([f"latency {lat:.0f}"] if lat is not None else []) + (
        [f"{by * p['instr_per_cycle_sm']:.0f} B/cycle of operands from shared memory"] if by else [])
    return (f"{g}: {p['pct_of_peak']:.0f}%" + (f" ({', '.join(parts)})" if parts else "")
            + (" NOT SATURATED" if any(f.startswith("not-saturated") for f in p["flags"]) else ""))


def wgmma_conclusions(variants: dict[str, dict]) -> list[str]:
    """Per wgmma variant: the best group against 90% of its datasheet figure, and every N and
    A source with its own throughput and its own latency (the same N, never another's)."""
    out = []
    for name, d in variants.items():
        if not name.startswith("wgmma"):
            continue
        pk = {g: p for g, p in (d.get("peak") or {}).items() if p.get("pct_of_peak")}
        if not pk:
            continue
        g, p = max(pk.items(), key=lambda x: x[1]["pct_of_peak"])
        verdict = "reaches" if p["pct_of_peak"] >= 90 else "falls short of"
        lat = d.get("latency_cycles") or {}
        per_n = ", ".join(_group_text(name, gg, pp, lat.get(gg))
                          for gg, pp in sorted(pk.items(), key=lambda x: _n_order(x[0])))
        kind = "sparse" if name.startswith("wgmma.sp.") else "dense"
        out.append(f"{name} {verdict} 90% of the clock-scaled {kind} datasheet peak: best {p['pct_of_peak']:.1f}% "
                   f"({g}, {_config(p)}); per A source and N (latency in cycles of the same N): {per_n}")
    return out


def _dense_partner(name: str) -> str | None:
    """The dense mma.sync of a sparse mma.sp variant: the same types at half the logical K
    (the same multiplications per instruction), from the catalog."""
    from gpudissect.catalog.tensor import load_tensor_catalog

    cat = {v.name: v for v in load_tensor_catalog().mma}
    v = cat.get(name)
    if v is None or not v.sparse:
        return None
    m, n, k = v.shape
    return next((d.name for d in cat.values() if d.form == "mma" and d.shape == (m, n, k // 2)
                 and (d.atype, d.btype, d.ctype, d.dtype) == (v.atype, v.btype, v.ctype, v.dtype)), None)


def sparse_conclusions(variants: dict[str, dict]) -> list[str]:
    """Each measured mma.sp against its dense mma.sync partner: the ratio of their logical
    FLOP rates at the peaks, their cycles per instruction per scheduler, and one warp's issue
    interval (is the sparse rate twice the dense one?)."""
    out = []
    for name, d in variants.items():
        p = (d.get("peak") or {}).get("mma")
        dense = _dense_partner(name) if p else None
        q = (variants.get(dense or "", {}).get("peak") or {}).get("mma")
        if not (p and q and p.get("flop_per_cycle_sm") and q.get("flop_per_cycle_sm")):
            continue
        ratio = p["flop_per_cycle_sm"] / q["flop_per_cycle_sm"]
        verdict = ("twice the dense rate (within 2%)" if ratio >= 2 * (1 - SAME)
                   else f"NOT twice the dense rate: {ratio:.2f}x")
        ia, ib = d.get("issue_interval"), variants[dense].get("issue_interval")
        sched = (f"; per scheduler one every {p['cycles_per_instr_per_scheduler']:.2f} cycles ({d.get('sass')}) vs "
                 f"{q['cycles_per_instr_per_scheduler']:.2f} ({variants[dense].get('sass')})"
                 if p.get("cycles_per_instr_per_scheduler") and q.get("cycles_per_instr_per_scheduler") else "")
        one = f"; one warp alone: one every {ia['cycles']:.2f} vs {ib['cycles']:.2f} cycles" if ia and ib else ""
        flags = [f"{n} not saturated" for n, x in ((name, p), (dense, q))
                 if any(f.startswith("not-saturated") for f in x["flags"])]
        out.append(f"{name}: {p['flop_per_cycle_sm']:.0f} FLOP/cycle/SM of the logical shape = {ratio:.2f}x the "
                   f"dense {dense} ({q['flop_per_cycle_sm']:.0f}, the same multiplications per instruction): "
                   f"{verdict}{sched}{one}" + (f" [{'; '.join(flags)}]" if flags else ""))
    for name, d in variants.items():  # wgmma.sp against the dense wgmma of the same types, best groups
        dense = name.replace("wgmma.sp.", "wgmma.", 1)
        if not name.startswith("wgmma.sp.") or dense not in variants:
            continue
        best = [max((x for x in (v.get("peak") or {}).values() if x.get("flop_per_cycle_sm")
                     and not any(f.startswith("not-saturated") for f in x["flags"])),
                    key=lambda x: x["flop_per_cycle_sm"], default=None) for v in (d, variants[dense])]
        if best[0] and best[1]:
            ratio = best[0]["flop_per_cycle_sm"] / best[1]["flop_per_cycle_sm"]
            verdict = ("twice the dense rate (within 2%)" if ratio >= 2 * (1 - SAME)
                       else f"NOT twice the dense rate: {ratio:.2f}x")
            out.append(f"{name}: best saturated {best[0]['flop_per_cycle_sm']:.0f} FLOP/cycle/SM of the logical shape "
                       f"({_config(best[0])}, N={best[0].get('n')}) = {ratio:.2f}x the dense {dense} "
                       f"({best[1]['flop_per_cycle_sm']:.0f}, N={best[1].get('n')}): {verdict}")
    return out


def same_sass_conclusions(variants: dict[str, dict]) -> list[str]:
    """Variants that compile to identical SASS should run at the same rate: how many groups of
    them agree within SAME, and which differ."""
    by: dict[tuple, list[tuple[str, float]]] = {}
    for name, d in variants.items():
        p = (d.get("peak") or {}).get("mma")
        if d.get("status") == "native" and p and d.get("sass"):
            by.setdefault(tuple(sorted(d["sass"])), []).append((name, p["instr_per_cycle_sm"]))
    groups = {s: v for s, v in by.items() if len(v) > 1}
    if not groups:
        return []
    bad = []
    for s, vs in groups.items():
        lo, hi = min(vs, key=lambda x: x[1]), max(vs, key=lambda x: x[1])
        if hi[1] > (1 + SAME) * lo[1]:
            bad.append(f"{' + '.join(s)}: {lo[0]} {lo[1]:.4g} vs {hi[0]} {hi[1]:.4g} instr/cycle/SM")
    return [f"identical SASS, same rate: {len(groups) - len(bad)} of {len(groups)} groups of variants sharing "
            f"their SASS agree within {SAME:.0%}" + (f"; differ: {'; '.join(bad)}" if bad else "")]


def data_conclusions(variants: dict[str, dict]) -> list[str]:
    """The peak configurations timed again with zero and with random operand data."""
    out = []
    for name, d in variants.items():
        dd = d.get("data") or {}
        z, r = dd.get("zero"), dd.get("random")
        if not (z and r):
            continue
        rel = r["instr_per_cycle_sm"] / z["instr_per_cycle_sm"] - 1
        tf = (f"; {z['tflops']:.1f} vs {r['tflops']:.1f} TFLOP/s at the SM clock measured in a kernel"
              if z.get("tflops") and r.get("tflops") else "")
        fl = sorted({f.split(":")[0] for x in (z, r) for f in x["flags"]})
        line = (f"{name} [{z['group']}, {_config(z)}]: zero operands {z['instr_per_cycle_sm']:.4g}, random "
                f"{r['instr_per_cycle_sm']:.4g} instr/cycle/SM ({rel:+.1%} with random data){tf}"
                + (f" [{', '.join(fl)}]" if fl else ""))
        out.append(line + _sustained_text(d.get("sustained") or {}))
    return out


def _sustained_text(runs: dict) -> str:
    """The sustained runs (zero, random, zero again) of a variant's peak configuration."""
    if not runs:
        return ""
    parts = []
    for order in sorted(runs):
        x = runs[order]
        ik = f", SM clock {x['in_kernel_mhz']:.0f} MHz measured in it" if x.get("in_kernel_mhz") else ""
        clk = f", {x['implied_sm_mhz']:.0f} MHz implied" if x.get("implied_sm_mhz") else ""
        aft = f", {x['after_mhz']:.0f} MHz in a kernel right after" if x.get("after_mhz") else ""
        nv = x.get("nvml") or {}
        pw = (f", {nv['power_w_median']:.0f} W median ({nv['power_w_max']:.0f} max), throttle reasons: "
              f"{', '.join(nv.get('throttle_reasons') or []) or 'none'}" if nv.get("nvml") == "sampled" else "")
        parts.append(f"{x['data']}{' again' if order > 2 else ''} {x['tflops']:.1f} TFLOP/s{ik}{clk}{aft}{pw}"
                     + _flag_names(x.get("flags")))
    zeros = [x["tflops"] for o, x in sorted(runs.items()) if x.get("data") == "zero" and x.get("tflops")]
    rand = next((x for x in runs.values() if x.get("data") == "random" and x.get("tflops")), None)
    rel = ""
    if zeros and rand:  # against the zero runs on either side: their drift bounds what the data explains
        diff = rand["tflops"] / (sum(zeros) / len(zeros)) - 1
        drift = zeros[-1] / zeros[0] - 1
        rel = (f" (random {diff:+.1%} against the mean of the zero runs"
               + (f"; the zero runs differ by {drift:+.1%}"
                  + (": within that drift, no effect of the data shown" if abs(diff) <= abs(drift) else "")
                  if len(zeros) > 1 else "") + ")")
    ms = next(iter(runs.values())).get("target_ms")
    return f"; sustained about {ms:.0f} ms per run: " + "; ".join(parts) + rel


def wmma_fragment_conclusions(frags: dict[str, dict]) -> list[str]:
    """What the wmma fragment experiments show, from their stored parameters."""
    if not frags:
        return []
    done = {n: p for n, p in frags.items() if p.get("slots") and not p["flags"]}
    tiled = [n for n, p in done.items() if p.get("value") == 1.0]
    flipped = [n for n in tiled if (done[n].get("tiling") or {}).get("transposed")]
    out = [f"wmma fragment layouts (unspecified by the PTX ISA) observed for {len(done)} of {len(frags)} "
           f"wmma.load/store variants; {len(tiled) - len(flipped)} equal the stated mma.sync layouts tiled"
           + (f", {len(flipped)} equal them tiled and transposed (element (row, col) where the mma "
              f"layout puts (col, row)): {', '.join(flipped)}" if flipped else "")
           + (f"; not tiled: {', '.join(n for n in done if n not in tiled)}" if len(tiled) < len(done) else "")]
    dup = sorted({f"{p['frag'].upper()} {p['elem']} ({p['coverage']['copies_max']}x)"
                  for p in done.values() if p["coverage"]["copies_max"] > 1})
    if dup:
        out.append("wmma fragments holding every element more than once: " + ", ".join(dup))
    same, pairs = _same_slots(done, lambda n, p: p["op"] == "wmma.load" and p["frag"] == "c",
                              lambda n: n.replace("wmma.load.c.", "wmma.store.d."))
    if pairs:
        out.append(f"wmma.load.c and wmma.store.d use the same fragment layout in {same} of "
                   f"{pairs} (shape, type, memory layout) cases")
    same, pairs = _same_slots(done, lambda n, p: p["layout"] == "row", lambda n: n.replace(".row.", ".col."))
    if pairs:
        out.append(f"the memory layout (row/col) leaves the fragment unchanged in {same} of "
                   f"{pairs} fragment kinds")
    return out


def _same_slots(done: dict[str, dict], pick: Callable[[str, dict], bool],
                partner: Callable[[str], str]) -> tuple[int, int]:
    """Of the fragments ``pick`` selects that have a ``partner`` observed too: how many hold
    the same layout as it, and how many pairs there are."""
    pairs = [(p, done[partner(n)]) for n, p in done.items() if pick(n, p) and partner(n) in done]
    return sum(p["slots"] == q["slots"] for p, q in pairs), len(pairs)
