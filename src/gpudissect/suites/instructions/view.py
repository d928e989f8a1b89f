"""One row per instruction variant from the instruction suite's records.

Latency (slope of the dependent-chain sweep), peak throughput (max over configurations),
dependence distance (cycles per instruction against the distance between dependent
instructions), SASS of one instance and the flags of the measurements behind the numbers.
Values stay None where the suite stored none (unverified SASS, failed fit): never guessed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from gpudissect.report.present.fmt import fmt_num, home_note
from gpudissect.report.present.markdown import (
    NOT_MEASURED,
    TimingContext,
    TimingSection,
    conclusions,
)
from gpudissect.report.read.metrics import lookup
from gpudissect.suites.instructions.records import PAIR
from gpudissect.suites.instructions.studies import sass_steps as steps
from gpudissect.suites.instructions.studies.dependence_types import CONFIGS, CONTROL_OF, MODES
from gpudissect.suites.instructions.studies.guarded import GUARDS
from gpudissect.suites.instructions.studies.operand_latency import MEASURE
from gpudissect.suites.instructions.studies.sass_steps import CHECK as STEP_CHECK
from gpudissect.suites.instructions.studies.sass_steps import MEASURES as STEP_MEASURES
from gpudissect.suites.instructions.template import READ_READ, WRITE_WRITE

OPERAND_PREFIX = MEASURE.split("{")[0]  # latency_operand_<i>
GUARDED = GUARDS  # measure -> the guard's value


@dataclass
class InstrRow:
    variant: str
    cls: str
    sass: list[str] = field(default_factory=list)
    latency: float | None = None
    latency_flags: list[str] = field(default_factory=list)
    latency_kind: str = "latency"  # "issue interval" for instructions without a dependence chain
    latency_home: str = ""  # a global target's: the value is the near L2 home's (placement.home_note)
    ptxas_stall: float | None = None  # ptxas's stall cycles before the dependent instruction
    throughput: float | None = None  # warp-instructions / cycle / SM, at saturation
    throughput_flags: list[str] = field(default_factory=list)
    throughput_config: dict | None = None
    distance: dict[int, float | None] = field(default_factory=dict)  # distance -> cycles/instr
    strategy: str | None = None
    ptx_hash: str | None = None
    sass_hash: str | None = None
    # latency from each PTX source operand (1-based) and under a true / false guard, with flags
    operands: dict[int, tuple[float | None, list[str]]] = field(default_factory=dict)
    guarded: dict[bool, tuple[float | None, list[str]]] = field(default_factory=dict)
    # read-read and write-write configurations (studies/dependence_types.py): measure -> (value, flags)
    rw: dict[str, tuple[float | None, list[str]]] = field(default_factory=dict)
    rw_verdict: dict[str, str | None] = field(default_factory=dict)  # against the control (studies/dependence_types.py)

    @property
    def flags(self) -> list[str]:
        return sorted({f.split(":")[0] for f in self.latency_flags + self.throughput_flags})

    @property
    def sass_text(self) -> str:
        """The SASS of one instance, saying what else is in the number (glue, a companion that
        could not be removed)."""
        text = " + ".join(self.sass) or "-"
        notes = [f.split(": ", 1)[1].split(":")[0] if f.startswith("includes") else f
                 for f in self.latency_flags + self.throughput_flags
                 if f.startswith(("glue:", "includes companion:"))]
        return text + "".join(f" (includes {n})" for n in dict.fromkeys(notes))

    @property
    def latency_label(self) -> str:
        if self.latency is None:
            return ""
        notes = ([] if self.latency_kind == "latency" else [self.latency_kind]) + ([self.latency_home] if self.latency_home else [])
        return f" ({'; '.join(notes)})" if notes else ""

    @property
    def opcode(self) -> str:
        return self.variant.split(".")[0]

    def issue_interval(self, schedulers: int = 4) -> float | None:
        """Cycles between two warp-instructions of this kind on one scheduler at saturation
        (``schedulers`` / throughput per SM)."""
        return schedulers / self.throughput if self.throughput else None


def instruction_rows(records: list[dict]) -> list[InstrRow]:
    rows: dict[str, InstrRow] = {}
    for r in records:
        name = r.get("variant")
        if not name or r.get("measure") in STEP_MEASURES:  # the steps study's: one row per step, not the variant
            continue
        row = rows.get(name)
        if row is None:
            row = rows[name] = InstrRow(variant=name, cls=r.get("cls") or "", sass=list(r.get("sass") or []),
                                        strategy=r.get("strategy"))
        m = r.get("measure")
        flags = list(r.get("flags") or [])
        if m in ("latency", "issue_interval"):
            row.latency = r.get("value")
            row.latency_flags = flags
            row.latency_home = home_note(r.get("params"))
            row.latency_kind = m.replace("_", " ")
            row.ptxas_stall = (r.get("params") or {}).get("ptxas_stall_cycles")
            row.sass = list(r.get("sass") or row.sass)
            row.ptx_hash, row.sass_hash = r.get("ptx_hash"), r.get("sass_hash")
        elif m == "throughput_peak":
            row.throughput = r.get("value")
            row.throughput_flags = flags
            row.throughput_config = (r.get("params") or {}).get("smallest_within_2pct")
        elif m and m.startswith(OPERAND_PREFIX) and m.removeprefix(OPERAND_PREFIX).isdigit():
            row.operands[int(m.removeprefix(OPERAND_PREFIX))] = (r.get("value"), flags)
        elif m in GUARDED:
            commit = (r.get("params") or {}).get("guard_commit")  # ptxas lands the result under the guard
            row.guarded[GUARDED[m]] = (r.get("value"), flags + ([f"via {'+'.join(commit)}"] if commit else []))
        elif m in MODES:
            row.rw[m] = (r.get("value"), flags)
            if m in CONFIGS:
                row.rw_verdict[m] = (r.get("params") or {}).get("verdict")
        elif m == "distance":
            d = (r.get("params") or {}).get("distance")
            if d is not None:
                row.distance[int(d)] = r.get("value")
    return list(rows.values())


def _cell(v: tuple[float | None, list[str]] | None) -> str:
    if v is None:
        return ""
    val, flags = v
    bad = sorted({f.split(":")[0] for f in flags})
    return fmt_num(val, 3) + (f" ({', '.join(bad)})" if bad else "")


def simulator_rows(rs) -> list[InstrRow]:
    """The rows the simulator export fills its opcode-class slots from (report/assemble/simexport.py)."""
    return instruction_rows(rs.records("instructions"))


def configuration_lines(rows: list[InstrRow]) -> list[str]:
    """The timing reference's table of instruction configurations (issue 22, thesis section 2.5):
    per variant the write-read latency (the chain), read-read and write-write (studies/dependence_types.py), the
    chain under a predicate true / false at run time, and the latency from each source operand.
    [] when no row has any configuration beyond its latency."""
    rs = [r for r in rows if r.operands or r.guarded or r.rw]
    if not rs:
        return []
    n = max((i for r in rs for i in r.operands), default=0)
    L = ["## Instruction configurations", "",
         "Cycles per instance, one warp: write-read is the dependent chain (the latency); read-read "
         "a run of independent instances that all read one register in the same source slot; "
         "write-write a run that all write one register, none reading it (each under a run-time "
         "predicate, all true); both are one warp's slope over independent instances, so an upper "
         "bound (re-reading or re-writing the register needs no more than this), which ptxas's "
         "stall count between the instances can set (stored beside each: "
         "params.ptxas_stall_between_instances). Each is set against its control, the same "
         "instructions with no register shared, at one warp (the slopes, within their 95% "
         "intervals and the clock's resolution) and at every warp count of the run (the SM's "
         "rates, within their intervals): 'same' means sharing the register costs nothing the "
         "hardware shows, 'slower' / 'faster' that it does (params.one_warp, params.over_warps; "
         "a faster read-read: the control reads more distinct registers per instruction, which "
         "register-bank conflicts can slow, where the shared one can come from the operand reuse "
         "cache: the share of .reuse operands of each is in params.reuse_fraction); "
         "below-issue-limit: a one-warp slope under one SASS issue per cycle, no hardware's: the "
         "kernels of its lengths differ in more than their instances (ptxas balanced the "
         "instances over two pipes otherwise), not used; "
         "guard true / false the chain under a predicate that is true or "
         "false at run time ('via SEL', 'via @MOV': ptxas computes the instance unguarded and lands its "
         "result through those SASS under the guard, so the value is the guarded instruction's cost as "
         "compiled; params.guard_commit); op i the chain through source operand i alone (the others independent "
         "run-time values; the SASS data flow shows which slot it enters). Empty: not applicable "
         "or refused by verification (the suite stores why, e.g. ptxas turning a guarded write "
         "into a select).", "",
         "| PTX | SASS | write-read | read-read | its control | vs control | write-write | its control | "
         "vs control | guard true | guard false | "
         + "".join(f"op {i} | " for i in range(1, n + 1)), "|---|---|" + "---:|" * 3 + "---|" + "---:|" * 2
         + "---|" + "---:|" * (2 + n)]
    rr, ww = ({x: m for m, x in CONFIGS.items()}[k] for k in (READ_READ, WRITE_WRITE))
    tally: dict[str, dict[str, int]] = {rr: {}, ww: {}}
    for r in rs:
        for m in (rr, ww):
            if r.rw.get(m) and r.rw[m][0] is not None:
                key = r.rw_verdict.get(m) or "undetermined"
                tally[m][key] = tally[m].get(key, 0) + 1
        L.append(f"| `{r.variant}` | {r.sass_text} | {fmt_num(r.latency, 3)} | {_cell(r.rw.get(rr))} | "
                 f"{_cell(r.rw.get(CONTROL_OF[rr]))} | {r.rw_verdict.get(rr) or ''} | {_cell(r.rw.get(ww))} | "
                 f"{_cell(r.rw.get(CONTROL_OF[ww]))} | {r.rw_verdict.get(ww) or ''} | "
                 f"{_cell(r.guarded.get(True))} | {_cell(r.guarded.get(False))} | "
                 + "".join(f"{_cell(r.operands.get(i))} | " for i in range(1, n + 1)))
    summary = [f"{name} against its control: " + (", ".join(f"{k} {c}" for k, c in sorted(t.items())) or "none timed")
               for name, t in (("read-read", tally[rr]), ("write-write", tally[ww]))]
    return L[:3] + ["; ".join(summary) + ".", ""] + L[3:] + [""]


def stall_comparison(rows: list[InstrRow], tol: float = 0.5) -> tuple[list[InstrRow], list[InstrRow]]:
    """Single-SASS variants with both a measured latency and ptxas's stall count (its own
    latency model, kernel/control.py): (all of them, those that disagree by more than ``tol``
    cycles)."""
    both = [r for r in rows if r.latency is not None and r.ptxas_stall is not None
            and r.latency_kind == "latency"]
    return both, [r for r in both if abs(r.latency - r.ptxas_stall) > tol]


def by_class(rows: list[InstrRow]) -> dict[str, list[InstrRow]]:
    out: dict[str, list[InstrRow]] = {}
    for r in rows:
        out.setdefault(r.cls or "other", []).append(r)
    return dict(sorted(out.items()))


def compare_values(records: list[dict]) -> dict[str, tuple]:
    """What ``gpudissect compare`` sets side by side: latency, peak throughput and independent
    issue (cycles per instruction of one warp at the largest dependence distance) per variant,
    as (value, unit, flags or note)."""
    out: dict[str, tuple] = {}
    for r in instruction_rows(records):
        out[f"instr/{r.variant}/latency"] = (r.latency, "cycles", _flag_names(r.latency_flags))
        out[f"instr/{r.variant}/throughput"] = (r.throughput, "warp-instr/clk/SM",
                                                _flag_names(r.throughput_flags))
        # independent issue: one warp, the most interleaved independent chains measured
        d = max((k for k, v in r.distance.items() if v is not None), default=None)
        if d is not None:
            out[f"instr/{r.variant}/independent"] = (r.distance[d], "cycles", f"one warp, {d} independent chains")
    return out


def _flag_names(flags: list[str]) -> str:
    return ", ".join(sorted({f.split(":")[0] for f in flags or []}))


def report_section(doc: dict, rs) -> dict:
    """The instruction suite's part of the HTML report: the sortable instruction table."""
    rows = instruction_rows(doc.get("records") or [])
    sched = lookup(rs, "schedulers_per_sm")
    nsched = int(sched.value) if sched else 4
    return {
        "nsched": nsched,
        "nsched_src": f"measured: {sched.source}" if sched else "not measured: 4 assumed",
        "instr": [{
            "variant": r.variant, "cls": r.cls, "sass": r.sass_text,
            "lat": r.latency, "lat_s": fmt_num(r.latency, 3) + r.latency_label,
            "tp": r.throughput, "tp_s": fmt_num(r.throughput, 3),
            "ii": r.issue_interval(nsched), "ii_s": fmt_num(r.issue_interval(nsched), 3),
            "dist": ", ".join(f"{d}:{fmt_num(v, 3)}" for d, v in sorted(r.distance.items())),
            "flags": ", ".join(r.flags)} for r in rows],
        "classes": sorted({r.cls for r in rows}),
    }


# --- the warps x distance throughput grid (studies/grid.py) -----------------------------------------

GRID_MEASURE = "grid"


@dataclass
class GridRow:
    """One variant's grid (measure ``grid``) and what it yields."""

    variant: str
    cls: str
    max_rate: float | None
    min_warps: dict | None  # {"warps", "distance"}
    warp_latency: float | None
    latency_from_grid: float | None
    instabilities: list[list]
    warps: list[int]
    distances: list[int]
    rates: list[list[float | None]]
    flags: list[str] = field(default_factory=list)
    latency: float | None = None  # the dependent chain's latency of the same run, beside it

    def normalised(self) -> list[list[float | None]] | None:
        """The grid over its maximum (None without one)."""
        if not self.max_rate:
            return None
        return [[None if x is None else x / self.max_rate for x in row] for row in self.rates]


def grid_rows(records: list[dict]) -> list[GridRow]:
    lat = {r.get("variant"): r.get("value") for r in records if r.get("measure") == "latency"}
    out = []
    for r in records:
        m = r.get("measure") or ""
        if m.removesuffix(PAIR) != GRID_MEASURE or not r.get("variant"):
            continue
        p = r.get("params") or {}
        name = r["variant"] + (" (with its companion)" if m != GRID_MEASURE else "")
        out.append(GridRow(name, r.get("cls") or "", r.get("value"), p.get("min_warps"),
                           p.get("warp_latency_cycles"), p.get("latency_from_grid"),
                           list(p.get("instabilities") or []), list(p.get("grid_warps") or []),
                           list(p.get("grid_distances") or []), (r.get("samples") or {}).get("rates") or [],
                           list(r.get("flags") or []), lat.get(r["variant"])))
    return out


def class_grid(rows: list[GridRow]) -> tuple[list[int], list[int], list[list[float | None]]] | None:
    """The median over ``rows`` (of one shape: the most common) of each grid over its maximum."""
    import statistics

    shapes: dict[tuple, list[GridRow]] = {}
    for r in rows:
        if r.normalised() is not None and r.warps and r.distances:
            shapes.setdefault((tuple(r.warps), tuple(r.distances)), []).append(r)
    if not shapes:
        return None
    (ws, ds), same = max(shapes.items(), key=lambda kv: len(kv[1]))
    grids = [r.normalised() for r in same]
    med = [[statistics.median(v) if (v := [g[i][j] for g in grids if g[i][j] is not None]) else None
            for j in range(len(ds))] for i in range(len(ws))]
    return list(ws), list(ds), med


def grid_section(records: list[dict]) -> list[str]:
    """The timing reference's grid section: per class, each variant's maximum rate (MT), the
    fewest warps that reach it (MNW, at the smallest distance), the warp latency (WL), the
    latency the grid implies beside the dependent chain's, and its instabilities."""
    rows = grid_rows(records)
    if not rows:
        return []
    L = ["## Throughput grid (warps x dependence distance)", "",
         "Each variant's rate (warp-instructions per cycle per SM) over 1..32 warps per SM (one "
         "block per SM) and 1..8 independent chains per thread (thesis 7.3). MT: the largest cell; "
         "MNW: the fewest warps within 2% of MT (@ the smallest such distance); WL: cycles before "
         "the same warp issues again (1 / the rate of one warp at the largest distance); latency "
         "(grid): at distance 1 below saturation the rate of W warps is W / latency (all SMs busy: "
         "memory instructions contend); drops: cells where one more warp lowers the rate by more "
         "than 2% and the noise, and the warp counts they are at.", ""]
    by: dict[str, list[GridRow]] = {}
    for r in rows:
        by.setdefault(r.cls or "other", []).append(r)
    for cls, rs in sorted(by.items()):
        L += [f"### {cls}", "", "| PTX | MT | MNW | WL | latency (grid) | latency (chain) | drops | flags |",
              "|---|---:|---:|---:|---:|---:|---|---|"]
        for r in rs:
            mnw = f"{r.min_warps['warps']} @ d={r.min_warps['distance']}" if r.min_warps else "-"
            at = sorted({int(x[0]) for x in r.instabilities})
            drops = f"{len(r.instabilities)}" + (f" at W={','.join(map(str, at))}" if at else "")
            L.append(f"| `{r.variant}` | {fmt_num(r.max_rate, 3)} | {mnw} | {fmt_num(r.warp_latency, 3)} | "
                     f"{fmt_num(r.latency_from_grid, 3)} | {fmt_num(r.latency, 3)} | {drops} | "
                     f"{_flag_names(r.flags)} |")
        L.append("")
    return L


# --- per-SASS steps of multi-SASS instructions (studies/sass_steps.py) -------------------------------------


def _step_cell(st: dict) -> str:
    mark = "" if st.get("match") == "exact" else ("?" if st.get("match") == "none" else "*")
    n = st.get("count") or 1
    return (f"{st['sass']}{'' if n == 1 else f' x{n:g}'} <- {st.get('proxy') or 'no proxy'}{mark} "
            f"({fmt_num(st.get('latency'), 3)}, {fmt_num(st.get('rate'), 3)})")


def steps_section(records: list[dict], arch: str | None) -> list[str]:
    """The timing reference's section on the per-SASS steps of multi-SASS CUDA-core instructions:
    per variant its steps (proxy, latency, rate), the steps' dependence-path latency and busiest
    unit's issue cost against the whole's, and the verdicts."""
    rows = [r for r in records if r.get("measure") == STEP_CHECK and (r.get("params") or {}).get("steps")]
    if not rows:
        return []
    L = ["## Per-SASS steps of multi-SASS instructions", "",
         "Each SASS step of a multi-SASS CUDA-core instruction timed by a proxy: a variant of the same "
         "run whose verified SASS is exactly that instruction (* not exact: the proxy's chain holds moves "
         "too, or only the opcode matches; ? no proxy). Step cells: SASS <- proxy (latency cycles, rate "
         "warp-instr/clk/SM). " + steps.section_note(arch) + " Cost: the busiest "
         "unit's cycles per instance (sum of count / rate) against 1 / the whole's peak rate. Verdicts: "
         "match (within the tolerance), steps-exceed / steps-below (by how much: see the flags), "
         "lower-bound (a step without a proxy counted as 0).", "",
         "| PTX | steps | schedule / whole latency (cycles) | latency verdict | cost / whole (cycles, unit) "
         "| throughput verdict |", "|---|---|---:|---|---:|---|"]
    for r in sorted(rows, key=lambda r: r["variant"]):
        p = r["params"]
        cells = "; ".join(_step_cell(st) for st in p["steps"])
        lat = f"{fmt_num(p.get('path_latency'), 3)} / {fmt_num(p.get('whole_latency'), 3)}"
        cost = f"{fmt_num(p.get('busiest_cost'), 3)} / {fmt_num(p.get('whole_cost'), 3)} ({p.get('busiest_unit')})"
        L.append(f"| `{r['variant']}` | {cells} | {lat} | {p.get('latency_verdict')} | {cost} | "
                 f"{p.get('throughput_verdict')} |")
    line = steps.conclusion(records)
    return L + (["", line, ""] if line else [""])


# ----------------------------------------------------------------- the timing reference
def _rows(ctx: TimingContext) -> list[InstrRow]:
    """The instruction rows of the result set, made once for every section."""
    return ctx.once("instruction_rows", lambda: instruction_rows(ctx.rs.records("instructions")))


def _per_class_lines(ctx: TimingContext) -> list[str]:
    """The medians of each instruction class (after the instruction table, class by class)."""
    rows, nsched = _rows(ctx), ctx.nsched
    L: list[str] = []
    if rows:
        L += ["### Per class (instruction suite)", "",
              "Median over the variants of a class whose value was measured.", "",
              "| class | variants | median latency (cycles) | median throughput (warp-instr/clk/SM) "
              "| median issue interval (cycles) |", "|---|---:|---:|---:|---:|"]
        for cls, rs_ in by_class(rows).items():
            lat = [r.latency for r in rs_ if r.latency is not None]
            tp = [r.throughput for r in rs_ if r.throughput is not None]
            ii = [r.issue_interval(nsched) for r in rs_ if r.throughput]
            L.append(f"| {cls} | {len(rs_)} | {fmt_num(statistics.median(lat)) if lat else '-'} | "
                     f"{fmt_num(statistics.median(tp)) if tp else '-'} | "
                     f"{fmt_num(statistics.median(ii)) if ii else '-'} |")
        L.append("")

    return L


def _ptxas_lines(ctx: TimingContext) -> list[str]:
    rows = _rows(ctx)
    L: list[str] = ["## ptxas's latency model against the measurement", ""]
    both, differ = stall_comparison(rows)
    if both:
        L += ["For fixed-latency instructions ptxas writes its own latency model into the SASS: the "
              "stall cycles of each instruction's control code before a dependent one may issue "
              "(decoded from the cubin, kernel/control.py). Below, the measured dependent-chain "
              f"latency beside it: {len(both) - len(differ)} of {len(both)} single-SASS variants agree "
              "within half a cycle (by construction: a chain as ptxas scheduled it waits ptxas's stall; "
              "the pipeline's own latency is the stall sweep's, below, where measured); "
              f"the {len(differ)} that differ:", "",
              "| PTX | SASS | measured latency (cycles) | ptxas stall (cycles) | difference |",
              "|---|---|---:|---:|---:|"]
        for r in sorted(differ, key=lambda r: -abs((r.latency or 0) - (r.ptxas_stall or 0))):
            L.append(f"| `{r.variant}` | {r.sass_text} | {fmt_num(r.latency, 3)} | "
                     f"{fmt_num(r.ptxas_stall, 3)} | {fmt_num((r.latency or 0) - (r.ptxas_stall or 0), 3)} |")
        L.append("")
    else:
        L += [f"{NOT_MEASURED} (no single-SASS latency with ptxas's stall count in the results).", ""]
    return L + _hw_lines(ctx.rs.records("instructions"))


def _hw_lines(records: list[dict]) -> list[str]:
    """Below ptxas (studies/stall_patch.py): ptxas's stall, the -O3 slope and the true latency
    (the smallest patched stall at which the chain still computes right) side by side."""
    hw = sorted((r for r in records if r.get("measure") == "latency_hw"), key=lambda r: r["variant"])
    if not hw:
        return []
    L = ["### Below ptxas: the pipeline's latency with the stall patched", "",
         "Each single-SASS chain run again with ptxas's stall count lowered in the cubin's control bits, "
         "one cycle at a time, its output checked against the unpatched kernel's (two lengths, the first two "
         "input sets under which the chain's value moves with its length): the true latency is the smallest stall at which it, and every larger stall, still computes "
         "the same values. The sweep: stall:cycles per instance, `x` where the values were wrong, `!` where "
         "the launch failed. `A -> B`: a chain whose value stays put, swept with a companion B after each "
         "instance: the latency of the edge from A to B. *Held*: the cycles an instance took at the true latency "
         "beyond its other instructions' stalls, where above that stall (the hardware held the consumer).", "",
         "| PTX | SASS | ptxas stall | -O3 slope | true latency | held | sweep | flags |",
         "|---|---|---:|---:|---:|---:|---|---|"]
    for r in hw:
        p = r.get("params") or {}
        sweep = " ".join(f"{d['stall']}:{fmt_num(d.get('cycles_per_instance'), 3)}"
                         + ("" if d.get("correct") else "x" if d.get("correct") is False else "!")
                         for d in p.get("sweep") or [])
        sass = p.get("opcode", "-") + (f" -> {', '.join(p['consumer'])}" if p.get("consumer") else "")
        L.append(f"| `{r['variant']}` | {sass} | {fmt_num(p.get('ptxas_stall'), 3)} | "
                 f"{fmt_num(p.get('latency_o3'), 3)} | {fmt_num(r.get('value'), 3)} | {fmt_num(p.get('held_cycles'), 3)} | "
                 f"{sweep or '-'} | "
                 f"{', '.join(f.split(':')[0] for f in r.get('flags') or [])} |")
    return L + [""]


def _configuration_lines(ctx: TimingContext) -> list[str]:
    """The instruction configurations: write-read, read-read, write-write, under a guard, and
    per source operand."""
    return configuration_lines(_rows(ctx))


def _grid_lines(ctx: TimingContext) -> list[str]:
    return grid_section(ctx.rs.records("instructions"))


def _steps_lines(ctx: TimingContext) -> list[str]:
    return steps_section(ctx.rs.records("instructions"), ctx.rs.provenance().get("arch"))


def _conclusion_lines(ctx: TimingContext) -> list[str]:
    ic = conclusions(ctx.rs, "instructions")  # value classes, signed vs unsigned (conclusions.py)
    return ["## Instruction conclusions", "", *ic, ""] if ic else []


def _timings_by_class(ctx: TimingContext) -> list[str]:
    rows, nsched = _rows(ctx), ctx.nsched
    L: list[str] = ["## Instruction timings by class", ""]
    if not rows:
        L += [f"{NOT_MEASURED} (instruction suite).", ""]
    dists = sorted({d for r in rows for d in r.distance})
    for cls, rs_ in by_class(rows).items():
        L += [f"### {cls}", "",
              "| PTX | SASS (one instance) | cycles (latency) | throughput | issue interval | "
              + "".join(f"d={d} | " for d in dists) + "flags |",
              "|---|---|---:|---:|---:|" + "---:|" * len(dists) + "---|"]
        for r in rs_:
            L.append(f"| `{r.variant}` | {r.sass_text} | {fmt_num(r.latency, 3)}{r.latency_label} | "
                     f"{fmt_num(r.throughput, 3)} | {fmt_num(r.issue_interval(nsched), 3)} | "
                     + "".join(f"{fmt_num(r.distance.get(d), 3)} | " for d in dists)
                     + f"{', '.join(r.flags)} |")
        L.append("")
    return L


# where the sections stand (report/present/markdown.py TimingSection): the instruction table
# first of every suite's sections, then the class medians; the configurations, the throughput
# grid and the per-SASS steps (long dumps) after every other suite's tables
TIMING_SECTIONS = (TimingSection(1, _timings_by_class), TimingSection(2, _per_class_lines),
                   TimingSection(30, _ptxas_lines), TimingSection(73, _conclusion_lines),
                   TimingSection(110, _configuration_lines), TimingSection(111, _grid_lines),
                   TimingSection(112, _steps_lines))
