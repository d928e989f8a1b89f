"""The sync suite's part of the HTML report, from its summary: the contention tables of global
and shared atomics (chip-wide and per-SM rates at the plateau), barrier and fence costs and
launch costs. Values as the suite stored them; '-' where it stored none."""

from __future__ import annotations

from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.present.tabular import Cell, ReportTable


def atomic_table(summary: dict, space: str) -> ReportTable | None:
    a = (summary.get("atomic") or {}).get(space)
    if not a:
        return None
    modes = a["modes"]
    t = ReportTable(f"sync-atomic-{space}", f"{space.capitalize()} atomics vs contention: lane-ops/clk chip-wide "
                    "(per SM) at the plateau", ["op", *modes],
                    note="; ".join(f"{m}: {a['mode_text'][m]}" for m in modes) + ". Each cell: the rate at the "
                         "fewest warps/SM within 5% of the sweep's peak (@warps); * the sweep was still rising. "
                         "Global: all SMs' work over the slowest SM's time .. the median SM's own rate x SMs "
                         "(the L2 serves SMs unequally).",
                    code=(0,), scroll=True)
    for op in a["ops"]:
        row = []
        for m in modes:
            c = a["cells"].get(f"{op}|{m}") or {}
            if c.get("chip") is None:
                row.append("-")
                continue
            mark = "" if c.get("saturated", True) else "*"
            hi = f"..{fmt_num(c['chip_hi'], 4)}" if c.get("chip_hi") is not None else ""
            row.append(Cell(f"{fmt_num(c['chip'], 4)}{hi} ({fmt_num(c['per_sm'], 3)}) @{c.get('plateau_warps')}{mark}",
                            c["chip"]))
        t.add(Cell(op), *row)
    return t


def barrier_table(summary: dict) -> ReportTable | None:
    b = summary.get("barrier") or {}
    if not b:
        return None
    keys = sorted({k for v in b.values() for k in v["cycles"]}, key=int)
    t = ReportTable("sync-barriers", "Barriers: cycles per barrier vs warps (bar.sync.n: participating warps of a "
                    "32-warp block)", ["barrier", *keys], code=(0,), scroll=True)
    for kind, v in b.items():
        t.add(Cell(kind), *[fmt_num(v["cycles"].get(k), 4) for k in keys])
    return t


def fence_table(summary: dict) -> ReportTable | None:
    f = summary.get("fence") or {}
    if not f:
        return None
    keys = list(next(iter(f.values())))
    t = ReportTable("sync-fences", "Fences: cycles per fence (alone / after a store; warps per block)",
                    ["fence", *keys], code=(0,))
    for kind, sw in f.items():
        t.add(Cell(kind), *[fmt_num(sw.get(k), 4) for k in keys])
    return t


def launch_table(summary: dict) -> ReportTable | None:
    grid = (summary.get("launch") or {}).get("grid") or {}
    if not grid:
        return None
    t = ReportTable("sync-launch", "Launch costs of an empty kernel (us per launch)",
                    ["blocks", "launch + sync (host wall)", "launch + sync (events)", "back-to-back", "graph replay"],
                    numeric=(0,))
    for g, v in grid.items():
        t.add(Cell(g), *[fmt_num(v.get(k), 4) for k in ("sync-wall", "sync-event", "stream", "graph")])
    return t


def report_section(doc: dict, rs) -> dict:
    summary = doc.get("summary") or {}
    tables = [t for t in (atomic_table(summary, "global"), atomic_table(summary, "shared"), barrier_table(summary),
                          fence_table(summary), launch_table(summary)) if t]
    return {"key_tables": tables[:1], "tables": tables[1:]}
