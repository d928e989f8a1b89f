"""The async suite's part of the HTML report, from its summary: the conclusions, then the
latency/cost table and the bandwidth table. Values as the suite stored them; '-' where none."""

from __future__ import annotations

from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.present.tabular import Cell, ReportTable


def conclusions_table(summary: dict) -> ReportTable:
    t = ReportTable("async-conclusions", "Asynchronous copies: conclusions", ["#", "conclusion"],
                    wrap=(1,), sortable=False)
    for i, line in enumerate(summary.get("conclusions") or [], 1):
        t.add(Cell(str(i), i), line)
    return t


def latency_table(summary: dict) -> ReportTable | None:
    rows = {**{f"op:{k}": v for k, v in (summary.get("costs") or {}).items()}, **(summary.get("latency") or {})}
    if not rows:
        return None
    t = ReportTable("async-latency", "Costs and latencies (cycles, slope over two chain lengths)",
                    ["probe", "cycles"], code=(0,), numeric=(1,), scroll=True)
    for name, v in rows.items():
        t.add(Cell(name), Cell(fmt_num(v, 4), v))
    return t


def bandwidth_table(summary: dict) -> ReportTable | None:
    bw = summary.get("bandwidth") or {}
    if not bw:
        return None
    t = ReportTable("async-bandwidth", "Bandwidth at saturation (GB/s; best over CTAs per SM)",
                    ["probe", "GB/s", "B/clk/SM", "CTAs/SM", "saturated", "flags"],
                    code=(0,), numeric=(1, 2, 3), wrap=(5,), scroll=True)
    for name, d in bw.items():
        t.add(Cell(name), Cell(fmt_num(d.get("gbps"), 4), d.get("gbps")),
              Cell(fmt_num(d.get("bytes_per_clk_per_sm"), 3), d.get("bytes_per_clk_per_sm")),
              fmt_num(d.get("ctas_per_sm")), "-" if d.get("saturated") is None else ("yes" if d["saturated"] else "no"),
              "; ".join(d.get("flags") or []) or "-")
    return t


def wgmma_table(summary: dict) -> ReportTable | None:
    wg = summary.get("wgmma") or {}
    if not wg:
        return None
    t = ReportTable("async-wgmma", "wgmma fed from TMA-written, swizzled shared memory",
                    ["probe", "value", "unit", "% of peak", "% of wgmma-only", "flags"],
                    code=(0,), numeric=(1, 3, 4), wrap=(5,), scroll=True)
    for name, d in wg.items():
        t.add(Cell(name), Cell(fmt_num(d.get("value"), 4), d.get("value")), d.get("unit") or "-",
              Cell(fmt_num(d.get("pct_of_peak"), 3), d.get("pct_of_peak")),
              Cell(fmt_num(d.get("pct_of_wgmma_only"), 3), d.get("pct_of_wgmma_only")),
              "; ".join(d.get("flags") or []) or "-")
    return t


def report_section(doc: dict, rs) -> dict:
    summary = doc.get("summary") or {}
    tables = [t for t in (latency_table(summary), bandwidth_table(summary), wgmma_table(summary)) if t]
    return {"key_tables": [conclusions_table(summary)], "tables": tables}
