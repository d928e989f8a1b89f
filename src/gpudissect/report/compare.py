"""Compare two result sets (two GPUs, two drivers, two runs of one GPU, or a GPU against a
published reference) quantity by quantity, with the differences highlighted.

Both sides are flattened to ``{key: Value}``:

* ``instr/<variant>/latency`` and ``instr/<variant>/throughput`` (instruction suite);
* ``quantity/<name>`` for the canonical quantities of ``data/metrics.toml`` (L1 latency, ...);
* ``<suite>/<variant>/<measure>[/<params>]`` for the records of the other suites;
* for a reference (``a100``): its tables mapped onto the same keys, each value citing its
  table and row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gpudissect.report.fmt import fmt_num
from gpudissect.report.load import ResultSet
from gpudissect.report.metrics import all_metrics
from gpudissect.suites import suite_module

SCHEMA = "gpudissect.compare/1"


@dataclass
class Value:
    value: float | None
    unit: str
    note: str = ""  # provenance of the value (reference table/row, flags, ...)
    text: str | None = None  # the value as published where it is not one number ("190-235")


def _ref_value(row: dict, key: str = "cycles") -> tuple[float | None, str | None]:
    if row.get(key) is not None:
        return float(row[key]), None
    lo, hi = row.get(f"{key}_min"), row.get(f"{key}_max")
    text = row.get(f"{key}_text") or row.get("cycles_text")
    if lo is not None and hi is not None:
        return (lo + hi) / 2, text
    return None, text


def reference_values(ref: dict) -> dict[str, Value]:
    out: dict[str, Value] = {}
    t = ref["tables"]
    for row in t["V"]["rows"]:
        v, text = _ref_value(row)
        for var in row.get("variants") or []:
            key = f"instr/{var}/latency"
            if key in out:  # a PTX listed twice in Table V: keep the first, cite both
                out[key].note += f"; also row {row['row']}: {row['cycles_text']} ({row['sass']})"
                continue
            out[key] = Value(v, "cycles", f"{ref['name']} Table V row {row['row']} ({row['sass']}; "
                             "cycles per instruction, paper's method)", text)
    for row in t["II"]["rows"]:
        for var in row.get("variants") or []:
            out[f"instr/{var}/latency"] = Value(float(row["dependent_cpi"]), "cycles",
                                                f"{ref['name']} Table II row {row['row']} (CPI, dependent)")
            out[f"instr/{var}/cpi_independent"] = Value(float(row["independent_cpi"]), "cycles",
                                                        f"{ref['name']} Table II row {row['row']} (CPI, independent)")
    for row in t["IV"]["rows"]:
        out[f"quantity/{row['metric']}"] = Value(float(row["cycles"]), "cycles",
                                                 f"{ref['name']} Table IV row {row['row']} ({row['memory']})")
    unit = t["III"].get("throughput_unit", "")
    for row in t["III"]["rows"]:
        out[f"tensor/{row['ptx']}/latency"] = Value(float(row["cycles"]), "cycles",
                                                    f"{ref['name']} Table III row {row['row']} ({row['sass_count']}x {row['sass']})")
        v, text = _ref_value(row, "throughput")
        out[f"tensor/{row['ptx']}/tflops"] = Value(v, unit, f"{ref['name']} Table III row {row['row']}", text)
    return out


def _flags(flags) -> str:
    return ", ".join(sorted({f.split(":")[0] for f in flags or []}))


def measured_values(rs: ResultSet) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for name, f in all_metrics(rs).items():
        if f is not None:
            out[f"quantity/{name}"] = Value(f.value, f.unit, f.source)
    for s in rs.suites():
        # a suite's own comparable values (its view, through the registry), else every record
        own = getattr(suite_module(s, "view"), "compare_values", None)
        if own is not None:
            out.update({k: Value(*v) for k, v in own(rs.records(s)).items()})
            continue
        for r in rs.records(s):
            p = {k: v for k, v in (r.get("params") or {}).items() if not isinstance(v, (list, dict))}
            key = f"{s}/{r.get('variant')}/{r.get('measure')}" + (f"/{json.dumps(p, sort_keys=True)}" if p else "")
            out[key] = Value(r.get("value"), r.get("unit") or "", _flags(r.get("flags")))
    return out


def values(rs: ResultSet) -> dict[str, Value]:
    return reference_values(rs.reference) if rs.reference else measured_values(rs)


@dataclass
class Row:
    key: str
    a: Value | None
    b: Value | None
    rel: float | None  # (b - a) / a
    differs: bool


def compare(a: ResultSet, b: ResultSet, threshold: float = 0.10, include_one_sided: bool = False) -> list[Row]:
    va, vb = values(a), values(b)
    keys = sorted(set(va) | set(vb)) if include_one_sided else sorted(set(va) & set(vb))
    rows = []
    for k in keys:
        x, y = va.get(k), vb.get(k)
        rel = None
        if x and y and x.value is not None and y.value is not None and x.value != 0:
            rel = (y.value - x.value) / abs(x.value)
        differs = rel is not None and abs(rel) >= threshold
        if x and y and (x.value is None) != (y.value is None):
            differs = True
        rows.append(Row(k, x, y, rel, differs))
    return rows


def _show(v: Value | None) -> str:
    if v is None:
        return ""
    if v.text and v.value is not None:
        return f"{v.text}"
    return fmt_num(v.value)


def compare_document(a: ResultSet, b: ResultSet, rows: list[Row], threshold: float) -> dict:
    def side(v: Value | None):
        return None if v is None else {"value": v.value, "unit": v.unit, "note": v.note, "text": v.text}

    return {"schema": SCHEMA, "a": {"label": a.label, "gpu": a.gpu, "source": a.source},
            "b": {"label": b.label, "gpu": b.gpu, "source": b.source}, "threshold": threshold,
            "caveats": (a.reference or b.reference or {}).get("source", {}).get("caveats", []),
            "rows": [{"key": r.key, "a": side(r.a), "b": side(r.b), "rel_diff": r.rel, "differs": r.differs}
                     for r in rows]}


def compare_markdown(a: ResultSet, b: ResultSet, rows: list[Row], threshold: float) -> str:
    L = [f"# {a.gpu} ({a.label}) vs {b.gpu} ({b.label})", "",
         f"A: `{a.source}`; B: `{b.source}`. Differences of {threshold:.0%} or more (relative to A) "
         "are in **bold**; 'range' values from a reference compare at their midpoint.", ""]
    ref = a.reference or b.reference
    if ref:
        L += [f"Reference: {ref['source']['citation']}.", ""] + [f"* {c}" for c in ref["source"].get("caveats", [])] + [""]
    L += ["| quantity | A | B | unit | B vs A | notes |", "|---|---:|---:|---|---:|---|"]
    for r in rows:
        unit = (r.a or r.b).unit if (r.a or r.b) else ""
        rel = "" if r.rel is None else f"{r.rel:+.0%}"
        if r.differs:
            rel = f"**{rel or 'differs'}**"
        notes = "; ".join(x for x in ((r.a.note if r.a else ""), (r.b.note if r.b else "")) if x)
        L.append(f"| `{r.key}` | {_show(r.a)} | {_show(r.b)} | {unit} | {rel} | {notes} |")
    n = sum(r.differs for r in rows)
    L += ["", f"{len(rows)} quantities compared, {n} differ by {threshold:.0%} or more.", ""]
    return "\n".join(L)


def compare_html(a: ResultSet, b: ResultSet, rows: list[Row], threshold: float) -> str:
    from markupsafe import escape

    body = []
    for r in rows:
        unit = (r.a or r.b).unit if (r.a or r.b) else ""
        rel = "" if r.rel is None else f"{r.rel:+.0%}"
        notes = "; ".join(x for x in ((r.a.note if r.a else ""), (r.b.note if r.b else "")) if x)
        cls = ' class="differs"' if r.differs else ""
        body.append(f"<tr{cls}><td><code>{escape(r.key)}</code></td><td>{escape(_show(r.a))}</td>"
                    f"<td>{escape(_show(r.b))}</td><td>{escape(unit)}</td><td>{escape(rel)}</td>"
                    f"<td>{escape(notes)}</td></tr>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>gpudissect compare</title><style>"
            "body{font:14px system-ui,sans-serif;margin:1em 2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ddd;padding:2px 6px}tr.differs td{background:#ffe08a}"
            "</style></head><body>"
            f"<h1>{escape(a.gpu)} ({escape(a.label)}) vs {escape(b.gpu)} ({escape(b.label)})</h1>"
            f"<p>Highlighted: differences of {threshold:.0%} or more relative to A.</p>"
            "<table><tr><th>quantity</th><th>A</th><th>B</th><th>unit</th><th>B vs A</th><th>notes</th></tr>"
            + "".join(body) + "</table></body></html>\n")
