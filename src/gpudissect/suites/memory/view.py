"""The memory suite's part of the HTML report, from its summary: one row per memory level
(latency, capacity, fill granularity, bandwidth), the latency of every load path and the
shared-memory bank-conflict rule. Values as the suite stored them, in readable units
(KiB/MiB/GiB, TB/s); '-' where it stored none."""

from __future__ import annotations

from gpudissect.report.fmt import fmt_bandwidth, fmt_bytes, fmt_num
from gpudissect.report.tabular import Cell, ReportTable

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
    lo, bracket = size["bytes"], size.get("bracket") or []
    hi = bracket[1] if len(bracket) > 1 else None
    text = fmt_bytes(lo) if hi is None or hi == lo else f"{fmt_bytes(lo)} – {fmt_bytes(hi)}"
    return Cell(text, lo)


def _notes(summary: dict, level: str) -> str:
    nf = summary.get("nearfar") or {}
    if level == "L2" and nf.get("bimodal"):
        return (f"near/far: {nf.get('near_sms')} SMs at {fmt_num(nf.get('near_mean'), 3)}, "
                f"{nf.get('far_sms')} at {fmt_num(nf.get('far_mean'), 3)} cycles (one address)")
    if level == "DRAM" and (summary.get("tlb") or {}).get("note"):
        return "TLB: " + summary["tlb"]["note"]
    return ""


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
    if level == "DRAM":  # the level above the L2 step of the staircase (as metrics.toml)
        cyc = _get(summary, "sizes", "L2", "levels_cycles")
        return cyc[1] if isinstance(cyc, list) and len(cyc) > 1 else None
    return None


def levels_table(summary: dict) -> ReportTable:
    t = ReportTable("memory-levels", "Memory levels",
                    ["level", "latency (cycles)", "capacity", "fill granularity", "read bandwidth",
                     "write bandwidth", "copy bandwidth", "notes"],
                    note="Latency: pointer chase, hot chain (DRAM: the level above the L2 step of the "
                         "footprint sweep). Capacity: last footprint before the latency step and first "
                         "after it. Bandwidth: chip full, bytes per cycle per SM in brackets.",
                    numeric=(1, 2, 3, 4, 5, 6), wrap=(7,), sortable=False)
    bw = summary.get("bandwidth") or {}
    for level, (path, size_key, line_key, bw_key) in LEVELS.items():
        lat = _latency(summary, level, path)
        size = _get(summary, "sizes", size_key) if size_key else None
        line = _get(summary, "line_sizes", line_key, "bytes") if line_key else None
        t.add(level, Cell(fmt_num(lat, 4), lat), _capacity(size), _bytes_cell(line),
              _bw(bw, bw_key + "read"), _bw(bw, bw_key + "write"), _bw(bw, bw_key + "copy"),
              Cell(_notes(summary, level), cls="note"))
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


def report_section(doc: dict, rs) -> dict:
    summary = doc.get("summary") or {}
    tables = [t for t in (paths_table(summary), bank_table(summary)) if t is not None]
    return {"key_tables": [levels_table(summary)], "tables": tables}
