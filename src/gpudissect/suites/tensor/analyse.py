"""Conclusions of a tensor-suite run from its stored results (every number quoted is a
stored measurement): variant status, best throughput per variant against the clock-scaled
datasheet peak, per-SASS timing, numerics, fragment layouts (mma.sync and wmma)."""

from __future__ import annotations

from collections.abc import Callable

from gpudissect.store.db import Store


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


def summarize_run(store: Store, run_id: int) -> dict:
    """Conclusions from the stored results (every number quoted is a stored measurement)."""
    rs = store.results(run_id)
    variants: dict[str, dict] = {}
    layouts: dict[str, dict] = {}
    wmma_frags: dict[str, dict] = {}
    for r in rs:
        d = variants.setdefault(r["variant"], {})
        if r["measure"] == "sass_map":
            d["status"] = r["params"].get("status")
            d["sass"] = r["sass"]
            if r["params"].get("reason"):
                d["reason"] = r["params"]["reason"]
        elif r["measure"] == "latency" and r["value"] is not None:
            fam = r["params"].get("family", "")
            d.setdefault("latency_cycles", {})[fam] = round(r["value"], 2)
        elif r["measure"] == "throughput_peak" and r["value"] is not None:
            p = r["params"]
            d.setdefault("peak", {})[p["group"]] = {
                "instr_per_cycle_sm": round(r["value"], 4), "flop_per_cycle_sm": p.get("flop_per_cycle_sm"),
                "tflops": p.get("tflops"), "pct_of_peak": p.get("pct_of_peak"),
                "observed_sm_mhz": p.get("observed_sm_mhz"), "config": p.get("best_family"), "flags": r["flags"]}
        elif r["measure"] == "per_sass":
            d["per_sass"] = {"value": r["value"], "flags": r["flags"], **{k: r["params"].get(k) for k in (
                "partner", "cumulative_cycles", "cumulative_complete", "intervals", "whole_issue", "whole_total")}}
        elif r["measure"] == "numerics" and r["params"].get("cases"):
            d["numerics"] = {k: c["outcome"] for k, c in r["params"]["cases"].items()}
        elif r["measure"] == "layout" and r["params"].get("op", "").startswith("wmma."):
            wmma_frags[r["variant"]] = r["params"] | {"flags": r["flags"], "value": r["value"]}
        elif r["measure"] == "layout":
            layouts[r["variant"]] = {"matches_reference": r["params"].get("matches_reference"),
                                     "differences": r["params"].get("n_differences"), "flags": r["flags"]}
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
            if p.get("tflops") is None:
                continue
            cur = best_wg.get(name)
            if cur is None or p["tflops"] > cur[1]["tflops"]:
                best_wg[name] = (g, p)
    for name, (g, p) in best_wg.items():
        pct = f", {p['pct_of_peak']:.1f}% of the clock-scaled datasheet peak" if p.get("pct_of_peak") else ""
        lat = variants[name].get("latency_cycles") or {}
        lat_s = f"; latency {min(lat.values()):.1f} cycles" if lat else ""
        if name.startswith(MOVERS):
            conc.append(f"{name}: {p['instr_per_cycle_sm']:.3f} instr/cycle/SM = {p['flop_per_cycle_sm']:.0f} "
                        f"bytes/cycle/SM ({p['tflops']:.1f} TB/s over all SMs at {p['observed_sm_mhz']:.0f} MHz)"
                        + (f"; latency {min(lat.values()):.1f} cycles incl. the address add tree" if
                           (lat := variants[name].get("latency_cycles") or {}) else "")
                        + f" ({variants[name].get('sass')})")
            continue
        conc.append(f"{name} [{g}]: {p['flop_per_cycle_sm']:.0f} FLOP/cycle/SM, {p['tflops']:.1f} TFLOP/s at "
                    f"{p['observed_sm_mhz']:.0f} MHz{pct}{lat_s} ({variants[name].get('sass')})")
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
    for name in ("wgmma.f32.f16", "wgmma.f32.bf16", "wgmma.f16.f16"):
        pk = {g: p for g, p in (variants.get(name, {}).get("peak") or {}).items() if p.get("pct_of_peak")}
        if not pk:
            continue
        g, p = max(pk.items(), key=lambda x: x[1]["pct_of_peak"])
        verdict = "reaches" if p["pct_of_peak"] >= 90 else "falls short of"
        per_n = ", ".join(f"{gg.split('_', 1)[1]}: {pp['pct_of_peak']:.0f}%" for gg, pp in sorted(pk.items()))
        conc.append(f"{name} {verdict} 90% of the clock-scaled dense peak: best {p['pct_of_peak']:.1f}% "
                    f"({g}, {p['config']}); per N and A source: {per_n}")
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
    layouts.update({n: {"matches_reference": None, "matches_tiled_mma": p.get("value") == 1.0,
                        "tiling": p.get("tiling_text"), "coverage": p.get("coverage"), "flags": p["flags"]}
                    for n, p in wmma_frags.items()})
    return {"conclusions": conc, "variants": variants, "layouts": layouts}


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
