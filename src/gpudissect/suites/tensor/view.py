"""One row per tensor-core variant (and throughput group) from the tensor suite's records:
SASS, dependent-accumulator latency, peak rate, work per cycle per SM, throughput and % of the
clock-scaled datasheet peak, as the suite stored them (None where it stored none); and the
tensor suite's part of the HTML report (peaks per instruction form and type, findings as
tables).

Units follow what a variant does: floating-point types in FLOP and TFLOP/s, integer and
binary types (s8, u8, s4, u4, b1) in OP and TOP/s, fragment loads and stores (ldmatrix,
stmatrix, wmma.load/store, whose suite 'FLOP' are bytes moved) in B and TB/s. The numbers are
the suite's; only their labels differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from gpudissect.report.present.fmt import fmt_num, fmt_sig, fmt_tera
from gpudissect.report.present.markdown import (
    NOT_MEASURED,
    TimingContext,
    TimingSection,
    conclusions,
    md_table,
    summary_of,
)
from gpudissect.report.present.tabular import Cell, ReportTable
from gpudissect.suites.tensor.analyse import record_group

INT_TYPES = frozenset({"s8", "u8", "s4", "u4", "b1"})
LDST_OPS = ("ldmatrix", "stmatrix", "wmma.load", "wmma.store")


@dataclass(frozen=True)
class OpKind:
    name: str  # float | int | bytes
    per_cycle: str  # unit of the suite's flop_per_cycle_sm
    rate: str  # unit of the suite's tflops


FLOAT = OpKind("float", "FLOP/cycle/SM", "TFLOP/s")
INTEGER = OpKind("int", "OP/cycle/SM", "TOP/s")
BYTES = OpKind("bytes", "B/cycle/SM", "TB/s")


@cache
def _catalog() -> dict[str, tuple[str, str]]:
    """variant name -> (form, input types) from the tensor catalog."""
    from gpudissect.catalog.tensor import load_tensor_catalog

    cat = load_tensor_catalog()
    forms = {"mma": "mma.sync", "wmma": "wmma.mma", "mma.sp": "mma.sp"}
    out: dict[str, tuple[str, str]] = {}
    for v in cat.mma:
        out[v.name] = (forms.get(v.form, v.form), _pair(v.atype, v.btype))
    for v in cat.wgmma:
        out[v.name] = ("wgmma.sp" if v.sparse else "wgmma", _pair(v.atype, v.btype))
    for v in cat.ldst:
        out[v.name] = (v.op, v.elem or v.atype)
    return out


def _pair(a: str, b: str) -> str:
    return a if a == b else f"{a}×{b}"


def form_and_inputs(variant: str) -> tuple[str, str]:
    """(instruction form, input element types) of a variant: the catalog's, or read from the
    name for one the catalog does not hold."""
    try:
        known = _catalog().get(variant)
    except (OSError, ValueError, KeyError):  # an unreadable catalog: fall back on the name
        known = None
    if known:
        return known
    form = next((op for op in LDST_OPS if variant.startswith(op + ".")), None)
    if form is None:
        form = ("wgmma.sp" if variant.startswith("wgmma.sp.") else "wgmma") if variant.startswith("wgmma") \
            else variant.split(".")[0].split("::")[0]
        if form == "mma":
            form = "mma.sync"
    types = [t for t in re.split(r"[.:]", variant) if re.fullmatch(r"[sub]\d+|f\d+|bf16|tf32|e\dm\d", t)]
    return form, (types[1] if len(types) > 1 else (types[0] if types else ""))


def op_kind(variant: str) -> OpKind:
    form, inputs = form_and_inputs(variant)
    if form in LDST_OPS:
        return BYTES
    return INTEGER if set(inputs.split("×")) & INT_TYPES else FLOAT


def tensor_rows(records: list[dict]) -> list[dict]:
    lat: dict[str, float] = {}
    lat_group: dict[tuple[str, str], float] = {}  # (variant, group): the latency of that N and A source
    status: dict[str, str] = {}
    sass: dict[str, list[str]] = {}
    for r in records:
        v = r.get("variant") or ""
        if r.get("measure") == "latency" and r.get("value") is not None:
            lat[v] = min(lat.get(v, float("inf")), float(r["value"]))
            lat_group[(v, record_group(r.get("params") or {}))] = float(r["value"])
        elif r.get("measure") == "sass_map":
            status[v] = (r.get("params") or {}).get("status") or ""
        if r.get("sass"):
            sass.setdefault(v, r["sass"])
    rows = []
    seen = set()
    for r in records:
        v = r.get("variant") or ""
        if r.get("measure") != "throughput_peak":
            continue
        p = r.get("params") or {}
        seen.add(v)
        rows.append({"variant": v, "group": p.get("group"), "status": status.get(v),
                     "sass": " + ".join(r.get("sass") or sass.get(v) or []),
                     "latency": lat_group.get((v, p.get("group") or ""), lat.get(v)),
                     "rate": r.get("value"), "unit": r.get("unit"), "flop_per_cycle_sm": p.get("flop_per_cycle_sm"),
                     "tflops": p.get("tflops"), "pct_of_peak": p.get("pct_of_peak"),
                     "flags": ", ".join(sorted({f.split(":")[0] for f in r.get("flags") or []})),
                     "a_from": p.get("a_from"), "n": p.get("n")})
    for v in list(lat) + list(status):
        if v not in seen:
            seen.add(v)
            rows.append({"variant": v, "group": None, "status": status.get(v),
                         "sass": " + ".join(sass.get(v) or []), "latency": lat.get(v), "rate": None,
                         "unit": None, "flop_per_cycle_sm": None, "tflops": None, "pct_of_peak": None,
                         "flags": "", "a_from": None, "n": None})
    return rows


ANY_TYPE = "any (best)"


def _peak_key(variant: str) -> tuple[str, str]:
    """Math: (form, input types); fragment loads and stores: (op, any type)."""
    form, inputs = form_and_inputs(variant)
    return (form, ANY_TYPE) if form in LDST_OPS else (form, inputs)


def peak_rows(rows: list[dict]) -> list[dict]:
    """Per (instruction form, input types), the row of the highest throughput (all rows of a
    group share one datasheet peak, so it is also the highest % of peak), in catalog order;
    loads and stores one row per instruction, over all types."""
    best: dict[tuple[str, str], dict] = {}
    for r in rows:
        if r["tflops"] is None:
            continue
        key = _peak_key(r["variant"])
        if key not in best or r["tflops"] > best[key]["tflops"]:
            best[key] = r
    return [{**r, "form": k[0], "inputs": k[1]} for k, r in best.items()]


def _num(v, digits: int = 4) -> Cell:
    return Cell(fmt_num(v, digits), v if isinstance(v, (int, float)) else None)


def _work_cells(r: dict) -> list[Cell]:
    """The per-cycle work and the throughput, each with the unit of the variant's kind."""
    k = op_kind(r["variant"])
    fpc, tf = r["flop_per_cycle_sm"], r["tflops"]
    per = Cell(f"{fmt_sig(fpc, 4)} {k.per_cycle}" if fpc is not None else "-", fpc)
    return [per, Cell(fmt_tera(tf, k.rate), tf)]


RATE_UNIT = "instr/cycle/SM"


def _rate_cell(r: dict) -> Cell:
    """The measured rate; its unit is in the header unless a record says otherwise."""
    if r["rate"] is None:
        return Cell("-")
    unit = "" if r["unit"] in (None, "", RATE_UNIT) else f" {r['unit']}"
    return Cell(fmt_num(r["rate"], 4) + unit, r["rate"])


def peaks_table(rows: list[dict]) -> ReportTable:
    t = ReportTable("tensor-peaks", "Tensor peaks: best variant per instruction form and input type",
                    ["form", "inputs", "best variant", "SASS", "latency (cycles)", f"rate ({RATE_UNIT})",
                     "work per cycle per SM", "throughput", "% of peak", "flags"],
                    note="Throughput over all SMs at the observed SM clock: TFLOP/s for floating-point "
                         "types, TOP/s for integer and binary types, TB/s for fragment loads and stores "
                         "(bytes moved). % of peak: of the datasheet peak scaled to that clock (the dense "
                         "figure; mma.sp and wgmma.sp: the sparse one) ('-' where the architecture's tensor_peaks.toml "
                         "has none for the GPU or type: s4/u4, b1, loads and stores). Every "
                         "variant is in the table below.",
                    numeric=(4, 5, 6, 7, 8), code=(2, 3), wrap=(2, 3, 9))
    for r in peak_rows(rows):
        t.add(r["form"], r["inputs"], Cell(r["variant"]), Cell(r["sass"] or "-"), _num(r["latency"], 3),
              _rate_cell(r), *_work_cells(r), _num(r["pct_of_peak"], 3), Cell(r["flags"], cls="flags"))
    return t


def variants_table(rows: list[dict]) -> ReportTable:
    t = ReportTable("tensor-variants", "All tensor variants: latency, throughput, % of peak",
                    ["variant", "group", "status", "SASS", "latency (cycles)", f"rate ({RATE_UNIT})",
                     "work per cycle per SM", "throughput", "% of peak", "flags"],
                    note="Latency: dependent accumulator chain (cycles; wgmma: of the row's N and A source). Rate: "
                         "instructions per cycle per SM at the best configuration of the group (wgmma: "
                         "per N and A source). Click a header to sort.",
                    numeric=(4, 5, 6, 7, 8), code=(0, 3), wrap=(0, 1, 3, 9), scroll=True)
    for r in rows:
        t.add(Cell(r["variant"]), r["group"] or "", r["status"] or "", Cell(r["sass"] or "-"),
              _num(r["latency"]), _rate_cell(r), *_work_cells(r), _num(r["pct_of_peak"]),
              Cell(r["flags"], cls="flags"))
    return t


def per_sass_table(records: list[dict]) -> ReportTable | None:
    rows = [r for r in records if r.get("measure") == "per_sass"]
    if not rows:
        return None
    t = ReportTable("tensor-per-sass", "Instructions that become several tensor SASS: timing per SASS",
                    ["variant", "tensor SASS", "timed as steps of", "cycles between SASS",
                     "cycles after each SASS", "result used after", "whole: issued / result after", "flags"],
                    note="Clock reads between the steps of the equivalent mma.sync sequence (one warp; "
                         "median over rounds).", numeric=(3, 5), code=(0, 1, 2), wrap=(0, 1, 2, 4, 7),
                    scroll=True)
    for r in rows:
        p = r.get("params") or {}
        sass = ", ".join(f"{n}×{op}" for op, n in (p.get("tensor_sass") or {}).items()) or " + ".join(r.get("sass") or [])
        t.add(Cell(r["variant"]), Cell(sass), Cell(p.get("partner") or "-"), _num(r.get("value"), 3),
              ", ".join(fmt_num(x, 3) for x in p.get("cumulative_cycles") or []) or "-",
              _num(p.get("cumulative_complete"), 3),
              f"{fmt_num(p.get('whole_issue'), 3)} / {fmt_num(p.get('whole_total'), 3)}",
              Cell(", ".join(sorted({f.split(':')[0] for f in r.get("flags") or []})), cls="flags"))
    return t


def numerics_table(records: list[dict]) -> ReportTable | None:
    rows = [r for r in records if r.get("measure") == "numerics" and (r.get("params") or {}).get("cases")]
    if not rows:
        return None
    cases: list[str] = []
    for r in rows:
        cases += [c for c in r["params"]["cases"] if c not in cases]
    t = ReportTable("tensor-numerics", "Accumulation numerics (D[0][0] of designed inputs)",
                    ["variant", *[c.replace("_", " ") for c in cases]], code=(0,),
                    wrap=tuple(range(len(cases) + 1)))
    for r in rows:
        got = r["params"]["cases"]
        t.add(Cell(r["variant"]), *[(got.get(c) or {}).get("outcome") or "-" for c in cases])
    return t


def _subject(text: str) -> str:
    return text.split(" ", 1)[0].rstrip(":")


def split_findings(conclusions: list[str], variants: set[str]) -> tuple[list[str], list[str]]:
    """(findings about the suite as a whole, findings about one variant each: their numbers
    are in the tables)."""
    general, per_variant = [], []
    for c in conclusions:
        (per_variant if _subject(c) in variants else general).append(c)
    return general, per_variant


def relabel(text: str) -> str:
    """A finding about one integer or binary variant with its throughput in TOP/s and OP (the
    suite's text says TFLOP/s and FLOP for every type); the numbers are unchanged."""
    if op_kind(_subject(text)) is not INTEGER:
        return text
    return text.replace("TFLOP/s", "TOP/s").replace("FLOP/cycle/SM", "OP/cycle/SM")


def report_section(doc: dict, rs) -> dict:
    """The tensor suite's part of the HTML report: the peaks per form and type first, then
    findings as tables, then every variant."""
    records = doc.get("records") or []
    rows = tensor_rows(records)
    conclusions = list((doc.get("summary") or {}).get("conclusions") or [])
    general, per_variant = split_findings(conclusions, {r.get("variant") or "" for r in records})
    tables = [peaks_table(rows)]
    tables += [t for t in (per_sass_table(records), numerics_table(records)) if t is not None]
    return {"key_tables": tables[:1], "tables": tables[1:] + [variants_table(rows)],
            "findings": general, "findings_more": [relabel(c) for c in per_variant],
            "findings_more_title": "Findings about single variants, as the suite wrote them "
                                   "(their numbers are in the tables; integer types relabelled TOP/s)"}


# ----------------------------------------------------------------- the timing reference
def _tensor_lines(ctx: TimingContext) -> list[str]:
    rs = ctx.rs
    L: list[str] = ["## Tensor cores", ""]
    trows = tensor_rows(rs.records("tensor"))
    if trows or summary_of(rs, "tensor"):
        L += conclusions(rs, "tensor") + [""]
        L += md_table([{"variant": f"`{r['variant']}`", "group": r["group"], "SASS": r["sass"],
                        "latency (cycles)": r["latency"], "rate (instr/clk/SM)": r["rate"],
                        "FLOP/clk/SM": r["flop_per_cycle_sm"], "TFLOP/s": r["tflops"],
                        "% of peak": r["pct_of_peak"], "flags": r["flags"]} for r in trows])
    else:
        L += [f"Tensor-core latency and throughput: {NOT_MEASURED} (tensor suite).", ""]

    return L


TIMING_SECTIONS = (TimingSection(60, _tensor_lines),)
