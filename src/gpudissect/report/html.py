"""The HTML report: one self-contained file (inline CSS, JS and pictures; no network)."""

from __future__ import annotations

import datetime as _dt
import json
import tempfile
from pathlib import Path

from markupsafe import Markup, escape

from gpudissect.report.figures import suite_figures
from gpudissect.report.fmt import fmt_num
from gpudissect.report.load import ResultSet
from gpudissect.report.metrics import all_metrics
from gpudissect.suites import suite_module

MAX_RECORD_ROWS = 1500
MAX_LIST = 200


def render_value(v, depth: int = 0) -> Markup:
    """Any JSON value as HTML: dicts as key/value tables, lists of dicts as tables."""
    if isinstance(v, dict):
        if not v:
            return Markup("<i>{}</i>")
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{render_value(x, depth + 1)}</td></tr>"
                       for k, x in v.items())
        return Markup(f'<table class="kv">{rows}</table>')
    if isinstance(v, list):
        if v and all(isinstance(x, dict) for x in v):
            cols: list[str] = []
            for x in v[:MAX_LIST]:
                for k in x:
                    if k not in cols:
                        cols.append(k)
            head = "".join(f"<th>{escape(c)}</th>" for c in cols)
            body = "".join("<tr>" + "".join(f"<td>{render_value(x.get(c), depth + 1)}</td>" for c in cols)
                           + "</tr>" for x in v[:MAX_LIST])
            more = f"<p class=note>{len(v) - MAX_LIST} more rows in the JSON</p>" if len(v) > MAX_LIST else ""
            return Markup(f'<table class="grid"><tr>{head}</tr>{body}</table>{more}')
        items = ", ".join(str(render_value(x, depth + 1)) for x in v[:MAX_LIST])
        more = f", ... ({len(v)} items)" if len(v) > MAX_LIST else ""
        return Markup(f"[{items}{escape(more)}]")
    return escape(fmt_num(v))


def _params_short(p: dict | None) -> str:
    if not p:
        return ""
    out = {}
    for k, v in p.items():
        if isinstance(v, list) and len(v) > 8:
            v = f"[{len(v)} values]"
        elif isinstance(v, dict) and len(json.dumps(v)) > 80:
            v = "{...}"
        out[k] = v
    s = ", ".join(f"{k}={v}" for k, v in out.items())
    return s if len(s) < 160 else s[:157] + "..."


def _records_table(records: list[dict]) -> dict:
    rows = []
    for r in records[:MAX_RECORD_ROWS]:
        rows.append({"variant": r.get("variant") or "", "measure": r.get("measure") or "",
                     "params": _params_short(r.get("params")), "value": r.get("value"),
                     "value_s": fmt_num(r.get("value")), "unit": r.get("unit") or "",
                     "statistic": r.get("statistic") or "",
                     "flags": "; ".join(r.get("flags") or []), "sass": " + ".join(r.get("sass") or [])})
    return {"rows": rows, "total": len(records), "shown": len(rows)}


def _when(t) -> str:
    try:
        return _dt.datetime.fromtimestamp(float(t), _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError):
        return "-"


def build_context(rs: ResultSet, data_dir: Path | None, workdir: Path) -> dict:
    warnings: list[str] = []
    suites = []
    for s in rs.suites():
        doc = rs.docs[s]
        summary = dict(doc.get("summary") or {})
        conclusions = summary.pop("conclusions", []) or []
        prov = doc.get("provenance") or {}
        entry = {"name": s, "conclusions": conclusions, "summary": summary,
                 "summary_html": render_value(summary) if summary else None,
                 "provenance": prov, "started": _when(prov.get("started")),
                 "finished": _when(prov.get("finished")),
                 "figures": suite_figures(s, doc, workdir, data_dir, warnings),
                 "n_records": len(doc.get("records") or []), "summary_open": True}
        # a suite's own part of its section (tables of its own rows), through the registry
        section = getattr(suite_module(s, "view"), "report_section", None)
        if section is not None:
            entry.update(section(doc, rs))
        if "instr" not in entry:
            entry["records"] = _records_table(doc.get("records") or [])
        suites.append(entry)
    metrics = [{"name": k, "found": v} for k, v in all_metrics(rs).items()]
    prov = rs.provenance()
    return {"rs": rs, "gpu": rs.gpu, "prov": prov, "suites": suites, "metrics": metrics,
            "warnings": warnings, "generated": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "extras": {k: render_value(v) for k, v in rs.extras.items()}, "fmt": fmt_num,
            "render": render_value}


def render_html(rs: ResultSet, data_dir: Path | None = None) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("gpudissect.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    tpl = env.get_template("report.html.j2")
    with tempfile.TemporaryDirectory() as td:
        ctx = build_context(rs, data_dir, Path(td))
        return tpl.render(**ctx)


def write_html(rs: ResultSet, out: Path, data_dir: Path | None = None) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(rs, data_dir))
    return out
