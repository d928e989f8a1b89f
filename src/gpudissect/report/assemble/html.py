"""The HTML report: one self-contained file (inline CSS, JS and pictures; no network).

What a reader needs comes first: each suite's key table (instructions, memory levels, tensor
peaks, behaviour verdicts), its findings as a table, its figures; the raw dumps (summary data,
records, the suite's own wording of single-variant findings) follow folded away in closed
``<details>``. Numbers are formatted (units, dates) by :mod:`gpudissect.report.present.fmt`, never
changed. With other result sets to compare with (``report --compare``), a GPU comparison
follows the key quantities: the key view of :mod:`gpudissect.report.assemble.compare`, then the full
comparison folded away.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from gpudissect.arch.target import facts_line
from gpudissect.fleet.page import fleet_section
from gpudissect.report.assemble import compare as cmp
from gpudissect.report.assemble.suite_figures import Figure, figures_by_suite
from gpudissect.report.present.fmt import (
    fmt_keyed,
    fmt_num,
    fmt_quantity,
    fmt_seconds,
    fmt_timestamp,
)
from gpudissect.report.present.json_html import render_value
from gpudissect.report.present.platform_fields import platform_text
from gpudissect.report.present.tabular import Cell, ReportTable
from gpudissect.report.read.metrics import all_metrics
from gpudissect.report.read.results import ResultSet
from gpudissect.suites import suite_module

MAX_RECORD_ROWS = 1500
SUBJECT_MAX = 90  # a finding's text before its first ': ' is its subject when no longer


def _params_short(p: dict | None) -> str:
    if not p:
        return ""
    out = {}
    for k, v in p.items():
        if isinstance(v, list) and len(v) > 8:
            v = f"[{len(v)} values]"
        elif isinstance(v, dict) and len(json.dumps(v)) > 80:
            v = "{...}"
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            v = fmt_keyed(k, v)
        out[k] = v
    s = ", ".join(f"{k}={v}" for k, v in out.items())
    return s if len(s) < 160 else s[:157] + "..."


def _records_table(records: list[dict]) -> dict:
    rows = []
    for r in records[:MAX_RECORD_ROWS]:
        value_s, unit = fmt_quantity(r.get("value"), r.get("unit"))
        rows.append({"variant": r.get("variant") or "", "measure": r.get("measure") or "",
                     "params": _params_short(r.get("params")), "value": r.get("value"),
                     "value_s": value_s, "unit": unit, "statistic": r.get("statistic") or "",
                     "flags": "; ".join(r.get("flags") or []), "sass": " + ".join(r.get("sass") or [])})
    return {"rows": rows, "total": len(records), "shown": len(rows)}


def _when(t) -> str:
    return fmt_timestamp(t)


def split_finding(text: str) -> tuple[str, str]:
    """(subject, finding): the text before the first ': ' where that is short, else ''."""
    head, sep, rest = text.partition(": ")
    return (head, rest) if sep and len(head) <= SUBJECT_MAX else ("", text)


def findings_table(key: str, findings: list[str]) -> ReportTable:
    t = ReportTable(f"{key}-findings", "Findings", ["subject", "finding"], wrap=(0, 1), sortable=False)
    for f in findings:
        subject, text = split_finding(f)
        t.add(Cell(subject, cls="subject"), text)
    return t


def clocks_text(c: dict | None) -> str:
    """A clocks record of the provenance in one line (NVML's clocks, the SM clock measured in
    a kernel, temperature, power, when)."""
    if not c:
        return "-"
    parts = [f"SM {fmt_num(c.get('sm_mhz'))} MHz (NVML; max {fmt_num(c.get('sm_max_mhz'))})"]
    if c.get("sm_mhz_kernel") is not None:
        parts.append(f"{fmt_num(c['sm_mhz_kernel'])} MHz measured in a kernel "
                     f"({fmt_num(c.get('sm_mhz_kernel_min'))}-{fmt_num(c.get('sm_mhz_kernel_max'))})")
    if c.get("mem_mhz") is not None:
        parts.append(f"memory {fmt_num(c['mem_mhz'])} MHz")
    if c.get("temp_c") is not None:
        parts.append(f"{fmt_num(c['temp_c'])} °C")
    if c.get("power_w") is not None:
        parts.append(f"{fmt_num(c['power_w'])} W")
    if c.get("time") is not None:
        parts.append(f"at {fmt_timestamp(c['time'])}")
    return ", ".join(parts)


def timing_text(t: dict | None) -> str:
    """The runner's timing split of a suite run: total, then compile, GPU, store, analysis."""
    if not t:
        return "-"
    names = {"compile_s": "compile", "gpu_s": "GPU", "store_s": "store", "analysis_s": "analysis"}
    split = ", ".join(f"{n} {fmt_seconds(t[k])}" for k, n in names.items() if t.get(k) is not None)
    total = fmt_seconds(t.get("total_s")) if t.get("total_s") is not None else ""
    return f"{total} ({split})" if total and split else (total or split or "-")


def _summary_line(rs: ResultSet, prov: dict) -> str:
    """GPU, SMs, architecture, driver, SM clock and run date, for the top of the page."""
    c = prov.get("clocks_before") or {}
    started = [(rs.docs[s].get("provenance") or {}).get("started") for s in rs.suites()]
    started = [t for t in started if isinstance(t, (int, float))]
    bits = [f"{prov.get('sm_count')} SMs" if prov.get("sm_count") else "", prov.get("arch") or "",
            f"driver {prov['driver']}" if prov.get("driver") else "",
            f"SM clock {fmt_num(c['sm_mhz'])} MHz" if c.get("sm_mhz") is not None else "",
            f"measured {fmt_timestamp(min(started))}" if started else "", rs.quick_note()]
    return " · ".join(b for b in bits if b)


def _figure_groups(figs: list[Figure]) -> tuple[list[Figure], dict[str, list[Figure]]]:
    shown = [f for f in figs if not f.meta.get("group")]
    groups: dict[str, list[Figure]] = {}
    for f in figs:
        if f.meta.get("group"):
            groups.setdefault(f.meta["group"], []).append(f)
    return shown, groups


def _metric_rows(rs: ResultSet) -> list[dict]:
    rows = []
    for name, found in all_metrics(rs).items():
        if found is None:
            rows.append({"name": name, "found": None})
            continue
        value_s, unit = fmt_quantity(found.value, found.unit)
        rows.append({"name": name, "found": found, "value_s": value_s, "unit": unit})
    return rows


def _suite_entry(s: str, rs: ResultSet, figs: list[Figure]) -> dict:
    doc = rs.docs[s]
    summary = dict(doc.get("summary") or {})
    conclusions = list(summary.pop("conclusions", []) or [])
    prov = doc.get("provenance") or {}
    shown, groups = _figure_groups(figs)
    entry = {"name": s, "summary": summary, "summary_html": render_value(summary) if summary else None,
             "provenance": prov, "started": _when(prov.get("started")), "finished": _when(prov.get("finished")),
             "timing": timing_text(prov.get("timing")), "figures": shown, "figure_groups": groups,
             "n_records": len(doc.get("records") or []), "key_tables": [], "tables": [],
             "findings": conclusions, "findings_more": [], "findings_more_title": ""}
    # a suite's own part of its section (its key table, findings, tables), through the registry
    section = getattr(suite_module(s, "view"), "report_section", None)
    if section is not None:
        entry.update(section(doc, rs))
    entry["findings_table"] = findings_table(s, entry["findings"]) if entry["findings"] else None
    if "instr" not in entry:
        entry["records"] = _records_table(doc.get("records") or [])
    return entry


MAX_COMPARE_ROWS = 2000  # rows of the folded full comparison (gpudissect compare --full --html writes all)


def _compare_cells(r: cmp.Row) -> list[Cell]:
    """A comparison row as cells: the quantity, each set's value, the unit, each later set's
    difference to the first, the notes; a set's value and difference marked where it differs."""
    mark = ["differs" if d else "" for d in r.diffs]
    values = [Cell(cmp.show_value(v), v.value if v is not None else None, mark[i]) for i, v in enumerate(r.values)]
    rels = [Cell(cmp.rel_text(r, i) or ("differs" if r.diffs[i] else ""), r.rels[i], mark[i])
            for i in range(1, len(r.values))]
    quantity = Cell(r.label, cls="subject") if r.label else Cell(r.key)
    notes = "; ".join(dict.fromkeys(v.note for v in r.values if v is not None and v.note))  # each once
    return [quantity, *values, Cell(r.unit), *rels, Cell(notes, cls="note")]


def comparison_table(sets: list[ResultSet], rows: list[cmp.Row], key: str, title: str, **kw) -> ReportTable:
    n = len(sets)
    heads = cmp.named_headings(sets)
    t = ReportTable(key, title, ["quantity", *heads, "unit", *(f"{cmp.letter(i)} vs A" for i in range(1, n)),
                                 "notes"], numeric=(*range(1, n + 1), *range(n + 2, 2 * n + 1)),
                    wrap=(0, 2 * n + 1), **kw)
    for r in rows:
        t.add(*_compare_cells(r))
    return t


def comparison_context(rs: ResultSet, others: list[ResultSet], threshold: float) -> dict | None:
    """The report's GPU comparison: this result set (A) against ``others`` (B, C, ...): the key
    quantities, and every quantity the sets have in common (folded)."""
    if not others:
        return None
    sets = [rs, *others]
    vmaps = [cmp.values(s) for s in sets]
    full = cmp.compare_maps(vmaps, threshold)
    shown = full[:MAX_COMPARE_ROWS]
    more = (f" The first {len(shown)} of {len(full)} rows; gpudissect compare --full --html writes all."
            if len(full) > len(shown) else "")
    return {
        "sets": [{"column": cmp.letter(i), "name": n, "source": s.source}
                 for i, (s, n) in enumerate(zip(sets, cmp.set_names(sets), strict=True))],
        "threshold": f"{threshold:.0%}",
        "references": [r["source"] for r in cmp.references(sets)],
        "key": comparison_table(sets, cmp.key_rows(vmaps, threshold), "compare-key", "Key quantities side by side",
                                sortable=False),
        "full": comparison_table(sets, shown, "compare-all", "Every quantity in common", collapsed=True,
                                 scroll=True, code=(0,), note=f"{len(full)} quantities in common, "
                                 f"{sum(r.differs for r in full)} differ.{more}"),
    }


def _pct(x: float | None) -> Cell:
    return Cell("-" if x is None else f"{100 * x:.1f}%", x)


def validation_tables(analysis: dict) -> list[ReportTable]:
    """``predict --validate``'s error table per group (the model beside the baselines) and the
    tensor-core model's loops, predicted beside measured."""
    from gpudissect.predict.validate import METHODS

    stats, rows = analysis.get("stats") or {}, analysis.get("rows") or []
    t = ReportTable("validation-errors", "Error per group (cycles per loop trip)",
                    ["group", "n", "model MAPE", "within 5%", "within 10%", "Kendall's tau", "bounds MAPE",
                     "sum-of-latencies MAPE", "max-pipe MAPE"], numeric=tuple(range(1, 9)), sortable=False,
                    note="model: the scheduler simulation from ptxas's control codes and the tables (tensor SASS "
                         "from the per-SASS tensor timings); bounds: the largest of the recurrence, issue and pipe "
                         "bounds; the two baselines as llvm-mca's and a latency sum would answer.")
    from gpudissect.predict.validate import group_order

    for g in group_order(stats):
        m = stats[g]["model"]
        tau = m.get("tau")
        t.add(Cell(g, cls="subject"), Cell(str(m["n"]), m["n"]), _pct(m["mape"]), _pct(m["within5"]),
              _pct(m["within10"]), Cell("-" if tau is None else f"{tau:.2f}", tau),
              *[_pct(stats[g][k]["mape"]) for k in METHODS[1:]])
    out = [t]
    tensor = [r for r in rows if "tensor_missing" in r]
    if tensor:
        tt = ReportTable("validation-tensor", "Tensor-core model: predicted against measured",
                         ["loop", "category", "point", "warps per SM", "measured", "model", "error", "tables lack"],
                         numeric=(3, 4, 5, 6), code=(0,), wrap=(7,),
                         note="cycles per trip of the whole SM (its first warp's start to its last warp's end / "
                              "trips); the model takes each tensor SASS's latency, issue interval and the SM's "
                              "rate from the tensor suite (seed 001's per-SASS timings).")
        for r in tensor:
            err = (r["model"] - r["measured"]) / r["measured"]
            tt.add(r["loop"], r["category"], r["point"], Cell(str(r["warps"]), r["warps"]),
                   Cell(fmt_num(r["measured"]), r["measured"]), Cell(fmt_num(r["model"]), r["model"]),
                   Cell(f"{100 * err:+.1f}%", err), ", ".join(sorted(r["tensor_missing"])))
        out.append(tt)
    return out


def validation_context(rs: ResultSet, workdir: Path, warnings: list[str]) -> dict | None:
    """The section "How well the tables predict real code": ``predict --validate``'s
    measurements beside the data, their error tables and the predicted-vs-measured figure (the
    one beside the data, else drawn here)."""
    v = rs.validation or {}
    analysis = v.get("analysis") or {}
    if not analysis.get("stats"):
        return None
    from gpudissect.predict.validate import figure as draw

    gpu = v.get("gpu") or {}
    png = Path(rs.source) / "predict-validation.png"
    if not png.is_file() and analysis.get("rows"):
        png = workdir / "predict-validation.png"
        try:
            draw(analysis["rows"], png, f"gpudissect predict --validate: {gpu.get('name', '?')}")
        except Exception as e:  # a figure that cannot be drawn never takes the report down
            warnings.append(f"validation figure: {type(e).__name__}: {e}")
    figs = []
    if png.is_file():
        uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
        figs.append(Figure("predict", png.name, "image/png", uri))
    bc = (analysis.get("calibration") or {}).get("branch_cycles")
    return {"gpu": gpu.get("name", "?"), "uuid": gpu.get("uuid", "?"), "loops": len(v.get("loops") or []),
            "points": len(analysis.get("rows") or []), "tables": validation_tables(analysis), "figures": figs,
            "branch": "none measured" if bc is None else f"{bc:.2f} cycles", "errors": analysis.get("errors") or []}


def report_steps(rs: ResultSet) -> int:
    """How many times :func:`build_context` and :func:`render_html` call ``progress``."""
    return len(rs.suites()) + 2


def build_context(rs: ResultSet, data_dir: Path | None, workdir: Path,
                  compare_with: list[ResultSet] | None = None, threshold: float = 0.10,
                  progress: Callable[[str], None] | None = None) -> dict:
    """The template's context; ``progress(step)`` after each suite's figures and after the
    tables (:func:`report_steps` in all, with the page's rendering)."""
    warnings: list[str] = []
    step = progress or (lambda _s: None)
    figures = figures_by_suite({s: rs.docs[s] for s in rs.suites()}, workdir, data_dir, warnings,
                               progress=lambda s: step(f"figures of {s}"))
    suites = [_suite_entry(s, rs, figures[s]) for s in rs.suites()]
    prov = rs.provenance()
    ctx = {"rs": rs, "gpu": rs.gpu, "prov": prov, "suites": suites, "metrics": _metric_rows(rs),
           "comparison": comparison_context(rs, compare_with or [], threshold),
           "fleet": fleet_section(rs),  # a fleet's results database: its fleet page
           "validation": validation_context(rs, workdir, warnings),
           "warnings": warnings, "generated": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
           "summary_line": _summary_line(rs, prov),
           "arch_facts": facts_line(prov.get("arch")).replace("`", ""), "clocks_before": clocks_text(prov.get("clocks_before")),
           "clocks_after": clocks_text(prov.get("clocks_after")),
           "platform": platform_text(prov.get("platform")), "prov_html": render_value(prov),
           "extras": {k: render_value(v) for k, v in rs.extras.items()}, "fmt": fmt_num,
           "render": render_value}
    step("tables")
    return ctx


def render_html(rs: ResultSet, data_dir: Path | None = None, compare_with: list[ResultSet] | None = None,
                threshold: float = 0.10, progress: Callable[[str], None] | None = None) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("gpudissect.report.assemble", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    tpl = env.get_template("report.html.j2")
    with tempfile.TemporaryDirectory() as td:
        ctx = build_context(rs, data_dir, Path(td), compare_with, threshold, progress)
        page = tpl.render(**ctx)
    if progress:
        progress("page")
    return page


def write_html(rs: ResultSet, out: Path, data_dir: Path | None = None, compare_with: list[ResultSet] | None = None,
               threshold: float = 0.10, progress: Callable[[str], None] | None = None) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(rs, data_dir, compare_with, threshold, progress))
    return out
