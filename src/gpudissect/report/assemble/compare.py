"""Compare result sets (two GPUs, two drivers, two runs of one GPU, a GPU against a published
reference; or N of them, such as H100 vs H200 vs the A100 reference) quantity by quantity, each
set against the first, with the differences highlighted.

Every set is flattened to ``{key: Value}``:

* ``instr/<variant>/latency`` and ``instr/<variant>/throughput`` (instruction suite);
* ``quantity/<name>`` for the canonical quantities of ``data/metrics.toml`` (L1 latency, ...);
* ``<suite>/<variant>/<measure>[/<params>]`` for the records of the other suites;
* for a reference (``a100``): its tables mapped onto the same keys, each value citing its
  table and row, and the quantities of ``data/metrics.toml`` that name their place in it.
  Every reference figure carries its method (the reference's ``methods``, or a Table IV row's
  own): the H100 keys measured the same way, then the closest ones, each with why the methods
  agree or differ (``compare_with``). :func:`align_methods` puts each figure under the first of
  those keys that a measured set has, so a row always compares like with like or says why not.

A comparison is one row per key and one column per set (A, B, C, ...); each later column has its
relative difference to A. Two sets are the N = 2 case of the same code (headed 'A' and 'B').
The key view is the quantities of ``data/metrics.toml`` that have a ``group`` (latency,
bandwidth, sizes, tensor peaks, a few instructions), in the same rows.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, replace

from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.present.platform_fields import platform_differences
from gpudissect.report.read.metrics import all_metrics, key_quantities, metric_specs
from gpudissect.report.read.results import ResultSet
from gpudissect.suites import suite_module

SCHEMA = "gpudissect.compare/1"


@dataclass
class Value:
    value: float | None
    unit: str
    note: str = ""  # provenance of the value (reference table/row, flags, ...)
    text: str | None = None  # the value as published where it is not one number ("190-235")
    # a reference figure's places in a measured set, in order of preference: (key, note on the
    # method: same or why it differs); and measured keys to cite beside it
    candidates: tuple[tuple[str, str], ...] = ()
    also: tuple[str, ...] = ()


def _ref_value(row: dict, key: str = "cycles") -> tuple[float | None, str | None]:
    if row.get(key) is not None:
        return float(row[key]), None
    lo, hi = row.get(f"{key}_min"), row.get(f"{key}_max")
    text = row.get(f"{key}_text") or row.get("cycles_text")
    if lo is not None and hi is not None:
        return (lo + hi) / 2, text
    return None, text


def _candidates(compare_with: list[dict], **fields) -> tuple[tuple[str, str], ...]:
    """(key, method note) for each entry of a method's ``compare_with``, its key template
    filled with ``fields``."""
    out = []
    for c in compare_with:
        verdict = "same method" if c["same_method"] else "METHODS DIFFER"
        out.append((c["key"].format(**fields),
                    f"H100: {c['h100']}; {verdict}" + (f": {c['why']}" if c.get("why") else "")))
    return tuple(out)


def _method_value(ref: dict, method: str, v: float | None, note: str, text: str | None = None,
                  **fields) -> Value:
    """A reference figure measured by the reference's method ``method``, placed (before
    :func:`align_methods`) under that method's first key."""
    cands = _candidates(ref["methods"][method]["compare_with"], **fields)
    return Value(v, "cycles", f"{note}, method '{method}'", text, cands)


def _place(out: dict[str, Value], v: Value, dup_note: str) -> None:
    key = v.candidates[0][0] if v.candidates else ""
    if key in out:  # a figure for a place already taken (Table II before Table V): cite it there
        out[key].note += f"; also {dup_note}"
    else:
        out[key] = v


def reference_values(ref: dict) -> dict[str, Value]:
    out: dict[str, Value] = {}
    t = ref["tables"]
    name = ref["name"]
    cols = t["II"]["methods"]  # Table II column -> method
    for row in t["II"]["rows"]:
        for var in row.get("variants") or []:
            for col, method in cols.items():
                _place(out, _method_value(ref, method, float(row[col]), f"{name} Table II row {row['row']} "
                                          f"({t['II']['columns'][col]})", variant=var),
                       f"Table II row {row['row']}: {row[col]}")
    for row in t["V"]["rows"]:
        v, text = _ref_value(row)
        for var in row.get("variants") or []:
            _place(out, _method_value(ref, t["V"]["method"], v, f"{name} Table V row {row['row']} "
                                      f"({row['sass']})", text, variant=var),
                   f"Table V row {row['row']}: {row['cycles_text']} ({row['sass']})")
    for row in t["IV"]["rows"]:
        cands = _candidates(row["compare_with"])
        out[cands[0][0]] = Value(float(row["cycles"]), "cycles",
                                 f"{name} Table IV row {row['row']} ({row['memory']}; method: {row['method']})",
                                 None, cands, tuple(row.get("also") or ()))
    unit = t["III"].get("throughput_unit", "")
    for row in t["III"]["rows"]:
        method = f"method '{t['III']['method']}'"
        out[f"tensor/{row['ptx']}/latency"] = Value(float(row["cycles"]), "cycles",
                                                    f"{ref['name']} Table III row {row['row']} ({row['sass_count']}x {row['sass']}), {method}")
        v, text = _ref_value(row, "throughput")
        out[f"tensor/{row['ptx']}/tflops"] = Value(v, unit, f"{ref['name']} Table III row {row['row']}, {method}", text)
    _spec_quantities(out)
    return out


def _globs(pattern) -> list[str]:
    return list(pattern) if isinstance(pattern, (list, tuple)) else [pattern]


def _from_reference(out: dict[str, Value], src: dict) -> Value | None:
    """A ``reference`` source of data/metrics.toml: the reference's value under the first key
    its globs match, or with ``best = "max"`` the highest."""
    hits = [(k, v) for k, v in sorted(out.items()) if v.value is not None
            and any(fnmatch.fnmatchcase(k, g) for g in _globs(src["reference"]))]
    if not hits:
        return None
    best = src.get("best") == "max"
    k, v = max(hits, key=lambda kv: kv[1].value) if best else hits[0]
    more = f", highest of {len(hits)}" if best and len(hits) > 1 else ""
    return Value(v.value, v.unit, f"{v.note} ({k}{more})", v.text)


def _spec_quantities(out: dict[str, Value]) -> None:
    """``quantity/<name>`` for the quantities of data/metrics.toml with a ``reference`` source
    (where no table row named the quantity itself)."""
    for name, spec in metric_specs().items():
        if f"quantity/{name}" in out:
            continue
        for src in spec.get("from", []):
            v = _from_reference(out, src) if "reference" in src else None
            if v is not None:
                out[f"quantity/{name}"] = v
                break


def align_methods(vmaps: list[dict[str, Value]]) -> list[dict[str, Value]]:
    """Each reference figure (a Value with ``candidates``) moved to the first of its keys that a
    measured set has (the same method first, then the closest), its note saying which and why;
    a figure none of whose keys is measured stays at its first. Figures whose first key is
    measured are placed before those that fall back, so a fallback never displaces them.
    Values already aligned (no candidates) pass unchanged."""
    measured = [m for m in vmaps if not any(v.candidates for v in m.values())]
    have = set().union(*(m.keys() for m in measured)) if measured else set()
    out = []
    for m in vmaps:
        if not any(v.candidates for v in m.values()):
            out.append(m)
            continue
        new = {k: v for k, v in m.items() if not v.candidates}
        pending = [v for v in m.values() if v.candidates]
        pending.sort(key=lambda v: v.candidates[0][0] not in have)  # stable: same-method first
        for v in pending:
            free = [c for c in v.candidates if c[0] not in new]
            key, why = next((c for c in free if c[0] in have), free[0] if free else v.candidates[0])
            also = [f"{k} {show_value(x[k])}" for k in v.also for x in measured[:1] if x.get(k)]
            note = f"{v.note}; {why}" + (f"; measured beside it: {', '.join(also)}" if also else "")
            new[key] = replace(v, note=note, candidates=(), also=())
        out.append(new)
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


# --- rows ---------------------------------------------------------------------------------------
@dataclass
class Row:
    """One quantity across the sets: its value in each (None: not in that set), each value's
    relative difference to the first set's, and whether it differs by the threshold or more."""
    key: str
    values: list[Value | None]
    rels: list[float | None]  # (v - first) / |first|; None for the first set and where not computable
    diffs: list[bool]  # differs from the first set; False for the first set
    label: str = ""  # the key view's name of the quantity ("L1 latency")

    @property
    def a(self) -> Value | None:
        return self.values[0]

    @property
    def b(self) -> Value | None:
        return self.values[1]

    @property
    def rel(self) -> float | None:
        """B against A (the two-way comparison's one difference)."""
        return self.rels[1]

    @property
    def differs(self) -> bool:
        return any(self.diffs)

    @property
    def partial(self) -> bool:
        """Some later sets differ from the first and some do not: the cells say which."""
        return self.differs and not all(self.diffs[1:])

    @property
    def unit(self) -> str:
        return next((v.unit for v in self.values if v is not None), "")

    @property
    def notes(self) -> str:
        return "; ".join(v.note for v in self.values if v is not None and v.note)


def _rel(first: Value | None, v: Value | None) -> float | None:
    if first and v and first.value is not None and v.value is not None and first.value != 0:
        return (v.value - first.value) / abs(first.value)
    return None


def _differs(first: Value | None, v: Value | None, rel: float | None, threshold: float) -> bool:
    if rel is not None and abs(rel) >= threshold:
        return True
    return bool(first and v and (first.value is None) != (v.value is None))  # measured on one side only


def make_row(key: str, vals: list[Value | None], threshold: float, label: str = "") -> Row:
    rels = [None] + [_rel(vals[0], v) for v in vals[1:]]
    diffs = [False] + [_differs(vals[0], v, r, threshold) for v, r in zip(vals[1:], rels[1:], strict=True)]
    return Row(key, vals, rels, diffs, label)


def compare_maps(vmaps: list[dict[str, Value]], threshold: float = 0.10,
                 include_one_sided: bool = False) -> list[Row]:
    """One row per key in every set (``include_one_sided``: in any set), sorted by key."""
    vmaps = align_methods(vmaps)
    keysets = [set(m) for m in vmaps]
    keys = set().union(*keysets) if include_one_sided else set.intersection(*keysets)
    return [make_row(k, [m.get(k) for m in vmaps], threshold) for k in sorted(keys)]


def key_rows(vmaps: list[dict[str, Value]], threshold: float = 0.10) -> list[Row]:
    """The key view: a row for each quantity of data/metrics.toml with a ``group``, in the
    groups' order, wherever at least one set has it."""
    vmaps = align_methods(vmaps)
    rows = []
    for name, spec in key_quantities().items():
        vals = [m.get(f"quantity/{name}") for m in vmaps]
        if any(v is not None for v in vals):
            rows.append(make_row(f"quantity/{name}", vals, threshold, spec.get("label") or name))
    return rows


def compare_sets(sets: list[ResultSet], threshold: float = 0.10, include_one_sided: bool = False) -> list[Row]:
    return compare_maps([values(s) for s in sets], threshold, include_one_sided)


def compare(a: ResultSet, b: ResultSet, threshold: float = 0.10, include_one_sided: bool = False) -> list[Row]:
    return compare_sets([a, b], threshold, include_one_sided)


# --- what the columns are called ------------------------------------------------------------------
def letter(i: int) -> str:
    """Column letter of the i-th set: A, B, ..., Z, AA, AB, ..."""
    return chr(65 + i) if i < 26 else letter(i // 26 - 1) + chr(65 + i % 26)


def set_name(rs: ResultSet) -> str:
    """A set as a column names it: its GPU without 'NVIDIA '; a reference marked so ("A100
    (reference)")."""
    gpu = rs.gpu.removeprefix("NVIDIA ").strip()
    if not rs.reference:
        return f"{gpu} (quick profile)" if rs.quick_suites() else gpu
    short = re.sub(r"\s*\(.*\)$", "", gpu) or gpu
    return f"{short} (reference)"


def set_names(sets: list[ResultSet]) -> list[str]:
    """Each set's name, with its label where two sets would have the same name."""
    names = [set_name(s) for s in sets]
    return [f"{n} [{s.label}]" if names.count(n) > 1 else n for n, s in zip(names, sets, strict=True)]


def headings(sets: list[ResultSet], terminal: bool = False) -> tuple[list[str], list[str]]:
    """(a heading per set, a heading per difference column). Two sets keep the two-way
    headings ('A', 'B'; on the terminal 'A: <label>'); more are named by their GPU
    ('A: H100 80GB HBM3', 'B: H200', 'C: A100 (reference)'). Differences: 'B vs A', ..."""
    letters = [letter(i) for i in range(len(sets))]
    if len(sets) == 2:
        heads = ([f"{c}: {s.label}" + (" (quick profile)" if s.quick_suites() else "")
                  for c, s in zip(letters, sets, strict=True)] if terminal else letters)
    else:
        heads = named_headings(sets)
    return heads, [f"{c} vs A" for c in letters[1:]]


def named_headings(sets: list[ResultSet]) -> list[str]:
    """'A: H100 80GB HBM3', 'B: H200', 'C: A100 (reference)', ..."""
    return [f"{letter(i)}: {n}" for i, n in enumerate(set_names(sets))]


def show_value(v: Value | None) -> str:
    if v is None:
        return ""
    if v.text and v.value is not None:
        return f"{v.text}"
    return fmt_num(v.value)


_show = show_value  # the name it had


def rel_text(r: Row, i: int) -> str:
    """The i-th set's difference to the first ('' for the first set and where none)."""
    return "" if r.rels[i] is None else f"{r.rels[i]:+.0%}"


def references(sets: list[ResultSet]) -> list[dict]:
    """The published references among the sets, each once."""
    refs: dict[str, dict] = {}
    for s in sets:
        if s.reference:
            refs.setdefault(s.reference.get("name", s.label), s.reference)
    return list(refs.values())


def _title(sets: list[ResultSet]) -> str:
    return " vs ".join(f"{s.gpu} ({s.label})" for s in sets)


def platform_of(rs: ResultSet) -> dict | None:
    """A measured set's platform as its (first suite's) provenance records it, with its driver;
    None where it records none (a reference, or a set of runs before platforms were recorded)."""
    if rs.reference:
        return None
    prov = rs.provenance()
    p = prov.get("platform")
    if not p:
        return None
    return {**p, **({"driver": prov["driver"]} if prov.get("driver") else {})}


def platform_lines(sets: list[ResultSet]) -> list[str]:
    """One line per later set whose platform differs from the first's: what differs, A's value
    first ('platform differs, A vs B: power limit 700 W vs 600 W; ECC on vs off')."""
    first = platform_of(sets[0])
    out = []
    for i, s in enumerate(sets[1:], 1):
        diffs = platform_differences(first, platform_of(s))
        if diffs:
            out.append(f"platform differs, A vs {letter(i)}: " + "; ".join(diffs))
    return out


# --- outputs ------------------------------------------------------------------------------------
def _side(v: Value | None) -> dict | None:
    return None if v is None else {"value": v.value, "unit": v.unit, "note": v.note, "text": v.text}


def _set_doc(s: ResultSet) -> dict:
    return {"label": s.label, "gpu": s.gpu, "source": s.source}


def _row_doc(r: Row) -> dict:
    d = {"key": r.key, "a": _side(r.a), "b": _side(r.b), "rel_diff": r.rel, "differs": r.differs, "unit": r.unit,
         "values": [_side(v) for v in r.values], "rel_diffs": r.rels, "differs_each": r.diffs}
    return {**d, "label": r.label} if r.label else d


def comparison_document(sets: list[ResultSet], rows: list[Row], threshold: float, view: str | None = None) -> dict:
    """The comparison as data: every set (``sets``, with its column letter and name), every row
    with each set's value (``values``), difference to the first (``rel_diffs``) and whether it
    differs (``differs_each``; ``differs``: any). ``a``, ``b`` and a row's ``a``, ``b``,
    ``rel_diff``: the first two sets (the two-way document's fields)."""
    names = set_names(sets)
    doc = {"schema": SCHEMA, "a": _set_doc(sets[0]), "b": _set_doc(sets[1]),
           "sets": [{"column": letter(i), "name": names[i], **_set_doc(s)} for i, s in enumerate(sets)],
           "threshold": threshold,
           "caveats": [c for ref in references(sets) for c in ref.get("source", {}).get("caveats", [])],
           "rows": [_row_doc(r) for r in rows]}
    if platform_lines(sets):
        doc["platform_differs"] = platform_lines(sets)
    return {**doc, "view": view} if view else doc


def _md_rel(r: Row, i: int) -> str:
    text = rel_text(r, i)
    return f"**{text or 'differs'}**" if r.diffs[i] else text


def comparison_markdown(sets: list[ResultSet], rows: list[Row], threshold: float) -> str:
    heads, rel_heads = headings(sets)
    legend = "; ".join(f"{letter(i)}: `{s.source}`" for i, s in enumerate(sets))
    L = [f"# {_title(sets)}", "",
         f"{legend}. Differences of {threshold:.0%} or more (relative to A) "
         "are in **bold**; 'range' values from a reference compare at their midpoint.", ""]
    L += [f"* {line}" for line in platform_lines(sets)] + ([""] if platform_lines(sets) else [])
    for ref in references(sets):
        L += [f"Reference: {ref['source']['citation']}.", ""]
        L += [f"* {c}" for c in ref["source"].get("caveats", [])] + [""]
        if ref.get("methods"):
            L += ["The reference's methods (each row's note names its method, the H100 measurement it is "
                  "set against, and whether the two are measured the same way):", ""]
            L += [f"* `{n}`: {m['seed']}" for n, m in ref["methods"].items()] + [""]
    n = len(sets)
    L += ["| quantity | " + " | ".join(heads) + " | unit | " + " | ".join(rel_heads) + " | notes |",
          "|---|" + "---:|" * n + "---|" + "---:|" * (n - 1) + "---|"]
    for r in rows:
        cells = [r.label or f"`{r.key}`", *map(show_value, r.values), r.unit,
                 *(_md_rel(r, i) for i in range(1, n)), r.notes]
        L.append("| " + " | ".join(cells) + " |")
    n_diff = sum(r.differs for r in rows)
    L += ["", f"{len(rows)} quantities compared, {n_diff} differ by {threshold:.0%} or more.", ""]
    return "\n".join(L)


def _html_rel(r: Row, i: int) -> str:
    from markupsafe import escape

    text = str(escape(rel_text(r, i)))
    return f"<b>{text or 'differs'}</b>" if r.partial and r.diffs[i] else text


def comparison_html(sets: list[ResultSet], rows: list[Row], threshold: float) -> str:
    from markupsafe import escape

    heads, rel_heads = headings(sets)
    body = []
    for r in rows:
        cls = ' class="differs"' if r.differs else ""
        quantity = escape(r.label) if r.label else f"<code>{escape(r.key)}</code>"
        cells = [quantity, *(escape(show_value(v)) for v in r.values), escape(r.unit),
                 *(_html_rel(r, i) for i in range(1, len(sets))), escape(r.notes)]
        body.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    ths = "".join(f"<th>{escape(h)}</th>" for h in ["quantity", *heads, "unit", *rel_heads, "notes"])
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>gpudissect compare</title><style>"
            "body{font:14px system-ui,sans-serif;margin:1em 2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ddd;padding:2px 6px}tr.differs td{background:#ffe08a}"
            "</style></head><body>"
            f"<h1>{' vs '.join(f'{escape(s.gpu)} ({escape(s.label)})' for s in sets)}</h1>"
            f"<p>Highlighted: differences of {threshold:.0%} or more relative to A.</p>"
            f"<table><tr>{ths}</tr>" + "".join(body) + "</table></body></html>\n")


# the two-way names of the outputs
def compare_document(a: ResultSet, b: ResultSet, rows: list[Row], threshold: float) -> dict:
    return comparison_document([a, b], rows, threshold)


def compare_markdown(a: ResultSet, b: ResultSet, rows: list[Row], threshold: float) -> str:
    return comparison_markdown([a, b], rows, threshold)


def compare_html(a: ResultSet, b: ResultSet, rows: list[Row], threshold: float) -> str:
    return comparison_html([a, b], rows, threshold)
