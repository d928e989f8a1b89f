"""The cluster suite's part of the HTML report, from its summary: the topology and residency,
launch cost, DSM latency, bandwidth and atomics, mapa and cluster barriers."""

from __future__ import annotations

from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.present.tabular import Cell, ReportTable


def key_table(summary: dict) -> ReportTable:
    t = ReportTable("cluster-findings", "Cluster findings", ["finding"], wrap=(0,), sortable=False)
    for c in summary.get("conclusions") or []:
        t.add(c)
    return t


def residency_table(summary: dict) -> ReportTable | None:
    res = summary.get("residency") or {}
    if not res:
        return None
    t = ReportTable("cluster-residency", "Clusters resident at once (one CTA per SM)",
                    ["size", "resident (launch 0)", "per launch", "the sets found would hold", "SMs used per launch",
                     "refused"], numeric=(0, 1, 3), sortable=False)
    for s, d in sorted(res.items(), key=lambda kv: int(kv[0])):
        t.add(Cell(str(s), int(s)), fmt_num(d.get("resident")), str(d.get("per_launch") or "-"),
              fmt_num(d.get("predicted_from_gpcs")), str(d.get("sms_used") or "-"), d.get("refused") or "-")
    return t


def latency_table(summary: dict) -> ReportTable | None:
    lat = (summary.get("dsm_latency") or {}).get("sizes") or {}
    if not lat:
        return None
    t = ReportTable("cluster-dsm-latency", "DSM latency (cycles per dependent ld.shared::cluster)",
                    ["cluster size", "remote median", "remote min", "remote max", "own CTA via window",
                     "distance matters", "by SM-id relation"], numeric=(0, 1, 2, 3, 4), sortable=False)
    for s, d in sorted(lat.items(), key=lambda kv: int(kv[0])):
        dist = d.get("distance") or {}
        t.add(Cell(str(s), int(s)), fmt_num(d.get("remote_median")), fmt_num(d.get("remote_min")),
              fmt_num(d.get("remote_max")), fmt_num(d.get("self_window")),
              "-" if dist.get("matters") is None else ("yes" if dist["matters"] else "no"),
              "; ".join(f"{k}: {v['median']} (n={v['n']})" for k, v in (dist.get("by_sm") or {}).items()))
    return t


def bandwidth_table(summary: dict) -> ReportTable | None:
    bw = summary.get("dsm_bandwidth") or {}
    if not bw:
        return None
    t = ReportTable("cluster-dsm-bw", "DSM bandwidth (bytes per clock per SM)",
                    ["probe", "value", "warps", "saturated", "at the target SM", "sweep (warps: rate)"],
                    code=(0,), numeric=(1, 2, 4), sortable=False)
    for k, d in bw.items():
        t.add(Cell(k), fmt_num(d.get("value")), fmt_num(d.get("warps")), "yes" if d.get("saturated") else "NO",
              fmt_num(d.get("per_target")), ", ".join(f"{w}: {fmt_num(r)}" for w, r in d.get("sweep") or []))
    return t


def report_section(doc: dict, rs) -> dict:
    s = doc.get("summary") or {}
    tables = [t for t in (residency_table(s), latency_table(s), bandwidth_table(s)) if t]
    return {"key_tables": [key_table(s)], "tables": tables}
