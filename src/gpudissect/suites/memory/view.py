"""The memory suite's part of the HTML report, from its summary: one row per memory level
(latency, capacity, fill (sector) granularity, line size, bandwidth; the L2 as its near and
far partition levels where the staircase resolves them), the latency of every load path, the
TLB study and the shared-memory bank-conflict rule. Values as the suite stored them, in
readable units (KiB/MiB/GiB, TB/s); '-' where it stored none."""

from __future__ import annotations

from gpudissect.report.present.fmt import fmt_bandwidth, fmt_bytes, fmt_num
from gpudissect.report.present.markdown import (
    NOT_MEASURED,
    TimingContext,
    TimingSection,
    conclusions,
    find_key,
    quantity_rows,
    structured,
    summary_of,
)
from gpudissect.report.present.tabular import Cell, ReportTable
from gpudissect.suites.memory import analyse as am

# level: (load path of its hit latency, key in "sizes", key in "line_sizes", bandwidth prefix)
LEVELS = {
    "L1": ("ld.global.ca", "L1", "L1", "L1/"),
    "L2": ("ld.global.cg", "L2", "L2", "L2/"),
    "DRAM": (None, None, None, "DRAM/"),
    "shared": ("ld.shared", None, None, "shared/"),
}


def _get(d, *path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _bytes_cell(v) -> Cell:
    return Cell(fmt_bytes(v) if v is not None else "-", v)


def _capacity(size: dict | None) -> Cell:
    """'last size before the step – first size after it' (the bracket the sweep found)."""
    if not size or size.get("bytes") is None:
        return Cell("-")
    est, bracket = size["bytes"], size.get("bracket") or []
    lo = bracket[0] if bracket else est
    hi = bracket[1] if len(bracket) > 1 else None
    text = fmt_bytes(lo) if hi is None or hi == lo else f"{fmt_bytes(lo)} – {fmt_bytes(hi)}"
    if lo != est:  # an estimate inside the bracket (the L2: half-way to the next level)
        text = f"{fmt_bytes(est)} ({text})"
    return Cell(text, est)


def _notes(summary: dict, level: str) -> str:
    m = summary.get("l2map") or {}
    l2 = summary.get("l2") or {}
    last = ("L2 far", am.BEYOND)  # the staircase's last on-chip level (analyse._name_by_placement)
    if level.startswith("L2") and level not in last and m.get("split"):
        kind = "by address" if m.get("address_dependent") else "by SM only, not by address"
        return (f"per-SM map ({kind}): {len(m.get('side_a') or [])}/{len(m.get('side_b') or [])} SMs; "
                f"near hits {fmt_num(m.get('near_cycles'), 3)}, far hits {fmt_num(m.get('far_cycles'), 3)} cycles"
                + (f"; driver reports {fmt_bytes(l2['reported_bytes'])}" if l2.get("reported_bytes") else ""))
    if level.startswith("L2") and l2.get("reported_bytes") and level in ("L2", *last):
        return (f"capacity {l2.get('capacity_over_reported', 0):.0%} of the {fmt_bytes(l2['reported_bytes'])} "
                "the driver reports")
    if level == "DRAM":
        tlb = summary.get("tlb") or {}
        steps = tlb.get("steps") or []
        if steps:
            return "TLB: " + "; ".join(f"reach {fmt_bytes(t['reach_bytes'])}, miss +{fmt_num(t['miss_cycles'], 3)} "
                                       "cycles" for t in steps)
        if tlb.get("note"):
            return "TLB: " + tlb["note"]
    return ""


def _rows(summary: dict) -> list[tuple[str, float | None, dict | None, int | None, int | None, str | None]]:
    """(level, latency, size, fill granularity, line size, bandwidth prefix) per table row: the
    L2 as the staircase's levels (near, far) when it resolved them, else one row."""
    fill = summary.get("fill_granularity") or summary.get("line_sizes") or {}
    line = summary.get("cache_lines") or {}
    rows = []
    for level, (path, size_key, line_key, bw_key) in LEVELS.items():
        lat = _latency(summary, level, path)
        size = _get(summary, "sizes", size_key) if size_key else None
        f = _get(fill, line_key, "bytes") if line_key else None
        ln = _get(line, line_key, "bytes") if line_key else None
        lv = _get(summary, "l2", "levels") or []
        if level == "L2" and len(lv) > 1:
            for i, x in enumerate(lv):
                sz = {"bytes": x["bytes"], "bracket": x["bracket"]}
                rows.append((x["name"], x["latency_cycles"], sz, f, ln, bw_key if i == 0 else None))
            continue
        rows.append((level, lat, size, f, ln, bw_key))
    return rows


def _bw(bandwidth: dict, key: str) -> Cell:
    b = bandwidth.get(key)
    gbs = b.get("GB/s") if isinstance(b, dict) else None
    if gbs is None:
        return Cell("-")
    bpc = b.get("bytes_per_cycle_per_sm")
    return Cell(fmt_bandwidth(gbs) + (f" ({fmt_num(bpc, 3)} B/clk/SM)" if bpc is not None else ""), gbs)


def _latency(summary: dict, level: str, path: str | None):
    if path is not None:
        return _get(summary, "latency", path)
    if level == "DRAM":  # the level above the L2's last step of the staircase (as metrics.toml)
        cyc = _get(summary, "sizes", "L2", "levels_cycles")
        return cyc[1] if isinstance(cyc, list) and len(cyc) > 1 else None
    return None


def levels_table(summary: dict) -> ReportTable:
    t = ReportTable("memory-levels", "Memory levels",
                    ["level", "latency (cycles)", "capacity", "fill (sector) granularity", "line size",
                     "read bandwidth", "write bandwidth", "copy bandwidth", "notes"],
                    note="Latency: pointer chase, hot chain; L2 near/far and DRAM: the plateaus of the "
                         "footprint staircase. Capacity: last footprint on the level and first after it; "
                         "for the L2 levels the estimate half-way to the next level first (L2 near: "
                         "an SM's own partition; L2 far: the whole L2). Fill granularity: "
                         "what one miss brings in (stride sweep); line size: allocation unit (capacity "
                         "against node spacing), '-' where not resolved. Bandwidth: chip full, bytes "
                         "per cycle per SM in brackets.",
                    numeric=(1, 2, 3, 4, 5, 6, 7), wrap=(8,), sortable=False)
    bw = summary.get("bandwidth") or {}
    for level, lat, size, fill, line, bw_key in _rows(summary):
        cells = [_bw(bw, bw_key + k) if bw_key else Cell("-") for k in ("read", "write", "copy")]
        t.add(level, Cell(fmt_num(lat, 4), lat), _capacity(size), _bytes_cell(fill),
              _bytes_cell(line), *cells, Cell(_notes(summary, level), cls="note"))
    return t


def paths_table(summary: dict) -> ReportTable | None:
    lat = summary.get("latency") or {}
    if not lat:
        return None
    t = ReportTable("memory-paths", "Latency of every load path (pointer chase, hot chain)",
                    ["load path", "latency (cycles)"], numeric=(1,), code=(0,))
    for path, v in lat.items():
        t.add(Cell(path), Cell(fmt_num(v, 4), v))
    return t


def bank_table(summary: dict) -> ReportTable | None:
    bank = summary.get("bank_conflicts") or {}
    if not bank:
        return None
    t = ReportTable("memory-banks", "Shared-memory bank conflicts: fitted rule per access width",
                    ["access", "rule", "cycles at degree 0", "cycles per extra wavefront", "r²"],
                    numeric=(2, 3, 4), sortable=False)
    for width, b in bank.items():
        fit = b.get("fit") or {}
        rule = fit.get("rule")
        f = fit.get(rule) if isinstance(fit.get(rule), dict) else {}
        t.add(width, rule or "-", Cell(fmt_num(f.get("intercept"), 3)),
              Cell(fmt_num(f.get("cycles_per_wavefront"), 3)), Cell(fmt_num(f.get("r2"), 4)))
    return t


def stated_table(summary: dict) -> ReportTable | None:
    """The shared-memory geometry, store latencies (both methods) and shared throughput per
    access width, as the suite states them (summary bank_geometry, store_latency,
    bandwidth.per_width)."""
    geo = summary.get("bank_geometry") or {}
    st = summary.get("store_latency") or {}
    pw = (summary.get("bandwidth") or {}).get("per_width") or {}
    if not (geo or st or pw):
        return None
    t = ReportTable("memory-stated", "Shared memory and stores: banks, store latency, throughput per width",
                    ["quantity", "value", "unit", "method"], numeric=(1,), wrap=(3,), sortable=False)
    if geo.get("banks"):
        t.add("banks", Cell(str(geo["banks"]), geo["banks"]), "banks",
              Cell(f"best of {geo['geometries_tried']} bank count x width geometries for the conflict sweep",
                   cls="note"))
        t.add("bank width", Cell(str(geo["bank_bytes"]), geo["bank_bytes"]), "bytes", Cell("the same fit", cls="note"))
    for path, v in st.items():
        if v.get("span") is not None:
            t.add(f"{path} (one store alone)", Cell(fmt_num(v["span"], 3), v["span"]), "cycles",
                  Cell(f"{v['span_method']}; clock pair alone {fmt_num(v.get('empty_span'), 3)}", cls="note"))
        if v.get("round_trip_extra") is not None:
            t.add(f"{path} -> dependent load", Cell(fmt_num(v["round_trip_extra"], 3), v["round_trip_extra"]),
                  "cycles", Cell(v["round_trip_method"], cls="note"))
    for level, widths in pw.items():
        for bits, v in widths.items():
            x = v.get("bytes_per_cycle_per_sm")
            t.add(f"{level} {bits}-bit", Cell(fmt_num(x, 4), x), "B/clk/SM",
                  Cell(v.get("flag") or v.get("evidence") or "", cls="note"))
    return t


def tlb_table(summary: dict) -> ReportTable | None:
    """The TLB study per page stride: pages reached, the step threshold from the launches'
    spread, the largest change seen and the steps (reach, miss cost)."""
    series = (summary.get("tlb") or {}).get("series") or {}
    if not series:
        return None
    t = ReportTable("memory-tlb", "TLB study: latency against pages visited, per page stride",
                    ["page stride", "pages (up to)", "footprint (up to)", "step threshold",
                     "largest change", "steps: pages, miss cost"], numeric=(1, 2, 3, 4), wrap=(5,),
                    sortable=False)
    for x in sorted(series.values(), key=lambda v: v["stride"]):
        steps = "; ".join(f"{st['pages_below']}–{st['pages_above']} pages: "
                          f"{fmt_num(st['level_below'], 3)} -> {fmt_num(st['level_above'], 3)} cycles"
                          for st in x["rises"] + x["falls"]) or "none"
        t.add(fmt_bytes(x["stride"]), Cell(str(x["pages_max"]), x["pages_max"]),
              _bytes_cell(x["footprint_max"]), Cell(f"{x['threshold_rel']:.1%}", x["threshold_rel"]),
              Cell(f"{x['range_rel']:.1%}", x["range_rel"]), Cell(steps, cls="note"))
    return t


def report_section(doc: dict, rs) -> dict:
    summary = doc.get("summary") or {}
    tables = [t for t in (paths_table(summary), tlb_table(summary), bank_table(summary),
                          stated_table(summary)) if t is not None]
    return {"key_tables": [levels_table(summary)], "tables": tables}


# ----------------------------------------------------------------- the timing reference
def _memory_lines(ctx: TimingContext) -> list[str]:
    rs = ctx.rs
    L: list[str] = ["## Memory", ""]
    L += quantity_rows(rs, [("l1_latency", "L1 hit latency"), ("l2_latency", "L2 hit latency"),
                             ("dram_latency", "device memory latency"),
                             ("smem_ld_latency", "shared memory load latency"),
                             ("smem_st_latency", "shared memory store latency (seed 000's one-store span)"),
                             ("smem_st_roundtrip", "shared store -> dependent load, beyond the load"),
                             ("gmem_st_latency", "clock span around one global store (seed 000's method; not its completion)"),
                             ("gmem_st_roundtrip", "global store -> dependent load, beyond the load"),
                             ("smem_banks", "shared memory banks"), ("smem_bank_bytes", "shared memory bank width"),
                             *((f"smem_{rw}_{b}", f"shared {rw} throughput, {b}-bit accesses")
                               for rw in ("read", "write") for b in (32, 64, 128)),
                             ("const_latency", "constant cache latency"),
                             ("tex_latency", "texture fetch latency"),
                             ("l1_size", "L1 capacity"), ("l2_size", "L2 capacity"),
                             ("local_latency", "local memory latency"),
                             ("l1_sector", "L1 sector (fill granularity)"), ("l2_sector", "L2 sector (fill granularity)"),
                             ("l1_line", "L1 line (tag) size"), ("l2_line", "L2 line (tag) size"),
                             ("dram_bandwidth_sustained", "device memory read bandwidth (sustained)"),
                             ("dram_bandwidth", "device memory read bandwidth (burst)"),
                             ("l2_bandwidth_sustained", "L2 read bandwidth (sustained)"),
                             ("l2_bandwidth", "L2 read bandwidth (burst)"), ("l1_bandwidth", "L1 read bandwidth")])
    L += conclusions(rs, "memory") + [""]

    return L


def _bank_lines(ctx: TimingContext) -> list[str]:
    rs = ctx.rs
    L: list[str] = ["## Bank conflicts", ""]
    mem = summary_of(rs, "memory")
    banks = find_key(mem, "bank_conflicts", "bank_conflict", "banks_table")
    if banks:
        L += ["Cycles of one warp's shared-memory access against the N-way conflict degree "
              "(memory suite).", ""]
        L += structured(banks, "access")
        L += conclusions(rs, "memory", ("bank",))
        L.append("")
    else:
        L += [f"Shared-memory bank-conflict rule: {NOT_MEASURED} (memory suite).", ""]

    return L


TIMING_SECTIONS = (TimingSection(40, _memory_lines), TimingSection(50, _bank_lines))
