"""One row per instruction variant from the instruction suite's records.

Latency (slope of the dependent-chain sweep), peak throughput (max over configurations),
dependence distance (cycles per instruction against the distance between dependent
instructions), SASS of one instance and the flags of the measurements behind the numbers.
Values stay None where the suite stored none (unverified SASS, failed fit): never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudissect.report.fmt import fmt_num
from gpudissect.report.metrics import lookup
from gpudissect.suites.instructions.operands import GUARDS, MEASURE

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
        return "" if self.latency_kind == "latency" or self.latency is None else f" ({self.latency_kind})"

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
        if not name:
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
            row.guarded[GUARDED[m]] = (r.get("value"), flags)
        elif m == "distance":
            d = (r.get("params") or {}).get("distance")
            if d is not None:
                row.distance[int(d)] = r.get("value")
    return list(rows.values())


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
    """What ``gpudissect compare`` sets side by side: latency and peak throughput per variant,
    as (value, unit, flags)."""
    out: dict[str, tuple] = {}
    for r in instruction_rows(records):
        out[f"instr/{r.variant}/latency"] = (r.latency, "cycles", _flag_names(r.latency_flags))
        out[f"instr/{r.variant}/throughput"] = (r.throughput, "warp-instr/clk/SM",
                                                _flag_names(r.throughput_flags))
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
