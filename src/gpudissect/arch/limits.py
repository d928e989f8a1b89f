"""Physical throughput limits of an SM, to check measured instruction throughputs against.

The limits are reference data (``data/arch/<arch>/limits.toml``): the SM's issue limit
(warp schedulers x one warp-instruction per clock) and per-pipe limits keyed by SASS opcode
patterns, each with its source. They only CHECK a measurement: a measured throughput above the
binding limit is a failure of the method (warps that did not overlap, work the compiler removed,
a wrong SASS count), never a property of the GPU. They are never reported as a measurement.

Unit throughout: warp-instructions of the PTX instruction per clock per SM.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

from gpudissect.arch.target import TargetError, arch_table

UNIT = "warp-instr/clk/SM"
BRANCHES = frozenset({"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "BSSY", "BSYNC", "BREAK"})
_COUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*\*\s*(\S+)\s*$")  # "0.5*IADD3"


class LimitsError(ValueError):
    """An architecture without limits data, or limits data that contradict themselves."""


@dataclass(frozen=True)
class Pipe:
    name: str
    unit: str  # rows with the same unit share one execution unit
    pattern: re.Pattern
    warp_instr_per_clk: float
    lanes_per_sm: int | None
    source: str


@dataclass(frozen=True)
class UnitGroup:
    """Opcodes that share an execution unit with no documented rate (``[[unit]]`` rows): they
    add up there, but no limit comes from it."""

    name: str
    pattern: re.Pattern
    source: str


@dataclass(frozen=True)
class Limits:
    arch: str
    issue: float  # warp-instructions per clock per SM, any instruction
    schedulers: int
    issue_source: str
    pipes: tuple[Pipe, ...]
    units: tuple[UnitGroup, ...] = ()

    def pipe_of(self, opcode: str) -> Pipe | None:
        """The first pipe row whose pattern matches the full SASS opcode, or None."""
        return next((p for p in self.pipes if p.pattern.search(opcode)), None)

    def unit_of(self, opcode: str) -> str:
        """The execution unit the full SASS opcode occupies: its pipe row's unit, else the first
        ``[[unit]]`` row that matches, else its base opcode (every form of one opcode, LDS and
        LDS.128, is one unit: never a unit per modifier)."""
        pipe = self.pipe_of(opcode)
        if pipe is not None:
            return pipe.unit
        group = next((u for u in self.units if u.pattern.search(opcode)), None)
        return group.name if group is not None else opcode.split(".")[0]


@dataclass(frozen=True)
class Limit:
    """The binding limit on one PTX instruction's throughput."""

    value: float  # warp-instructions of the PTX instruction per clock per SM
    pipe: str  # "fp32", "alu", ... or "issue"
    unit: str  # execution unit of the pipe ("issue" for the issue limit)
    per_instance: float  # SASS instructions on that unit (or in all) per PTX instance
    pipe_rate: float  # the unit's own limit in warp-instructions of its SASS per clock per SM
    lanes_per_sm: int | None
    source: str

    def describe(self) -> str:
        if self.pipe == "issue":
            what = f"issue limit, {self.pipe_rate:g} warp-instr/clk/SM"
        else:
            lanes = f", {self.lanes_per_sm} lanes/SM" if self.lanes_per_sm else ""
            what = f"{self.pipe} pipe{lanes}"
        if self.per_instance != 1:
            what += f", {self.per_instance:g} SASS on it per instance"
        return f"{what}; source {self.source}"


@cache
def load_limits(arch: str) -> Limits:
    """The limits of ``data/arch/<arch>/limits.toml`` (``sm_XXa`` reads ``sm_XX``)."""
    m = re.fullmatch(r"(sm_\d+)[a-z]?", arch or "")
    if not m:
        raise LimitsError(f"architecture '{arch}' is not of the form sm_XX")
    path = f"{m.group(1)}/limits.toml"
    try:
        lim = arch_table(arch, "limits")
    except TargetError as e:
        raise LimitsError(f"no architecture data for {arch}: {e}") from None
    if "issue" not in lim:
        raise LimitsError(f"{path}: no limits with an [issue] table")
    refs = lim.get("sources", {})

    def cite(text: str) -> str:
        tags = dict.fromkeys(re.findall(r"\[(\w+)\]", text))
        unknown = [t for t in tags if t not in refs]
        if unknown:
            raise LimitsError(f"{path}: source tag(s) {unknown} not in [sources]")
        urls = "; ".join(f"{t}: {refs[t]['url']}" for t in tags)
        return f"{text} ({urls})" if urls else text

    issue = lim["issue"]
    pipes = []
    for row in lim.get("pipe", []):
        rate = float(row["warp_instr_per_clk"])
        lanes = row.get("lanes_per_sm")
        if lanes is not None and not math.isclose(lanes / 32, rate):
            raise LimitsError(f"{path}: pipe {row['name']}: {lanes} lanes/SM is not "
                              f"{rate} warp-instr/clk")
        if not row.get("source"):
            raise LimitsError(f"{path}: pipe {row['name']} has no source")
        pipes.append(Pipe(row["name"], row.get("unit", row["name"]), re.compile(row["sass"]),
                          rate, lanes, cite(row["source"])))
    units = []
    for row in lim.get("unit", []):
        if not row.get("source"):
            raise LimitsError(f"{path}: unit {row['name']} has no source")
        units.append(UnitGroup(row["name"], re.compile(row["sass"]), cite(row["source"])))
    return Limits(lim.get("arch", m.group(1)), float(issue["warp_instr_per_clk"]),
                  int(issue.get("schedulers_per_sm", 0)), cite(issue["source"]), tuple(pipes),
                  tuple(units))


def parse_sass(sass: list[str]) -> list[tuple[str, float]]:
    """(opcode, count per instance) of a variant's SASS list: ["IMAD.WIDE.U32", "0.5*IADD3"]."""
    out = []
    for s in sass or []:
        m = _COUNT.match(s)
        out.append((m.group(2), float(m.group(1))) if m else (s.strip(), 1.0))
    return [(op, c) for op, c in out if op and c > 0]


def limit_for(sass: list[str], arch: str) -> Limit | None:
    """The binding limit on the throughput of a PTX instruction whose one instance is ``sass``.

    Per execution unit: its limit divided by the count of its SASS per instance (rows sharing a
    unit add up); and the issue limit divided by the total SASS count per instance. The smallest
    binds. Opcodes no pipe matches count towards the issue limit only. None for no SASS, and
    for SASS with a branch or call: the instructions that run then depend on the data (a slow
    path not taken, a loop taken several times), so the static count is not what issues."""
    lim = load_limits(arch)
    ops = parse_sass(sass)
    total = sum(c for _, c in ops)
    if total <= 0 or any(op.split(".")[0] in BRANCHES for op, _ in ops):
        return None
    best = Limit(lim.issue / total, "issue", "issue", total, lim.issue, None, lim.issue_source)
    # cycles per instance on each unit (a unit's rows may have different rates)
    cycles: dict[str, float] = {}
    count: dict[str, float] = {}
    first: dict[str, Pipe] = {}
    for op, c in ops:
        p = lim.pipe_of(op)
        if p is None:
            continue
        cycles[p.unit] = cycles.get(p.unit, 0.0) + c / p.warp_instr_per_clk
        count[p.unit] = count.get(p.unit, 0.0) + c
        first.setdefault(p.unit, p)
    for unit, cyc in cycles.items():
        value = 1.0 / cyc
        # a pipe at the issue limit binds rather than the issue limit: it says more
        if value < best.value or (best.pipe == "issue" and math.isclose(value, best.value)):
            p = first[unit]
            best = Limit(value, p.name, unit, count[unit], p.warp_instr_per_clk, p.lanes_per_sm,
                         p.source)
    return best


def checked_sass(sass: list[str] | None, params: dict | None) -> list[str]:
    """The SASS a throughput record's limit is of: its family's own mix per instance
    (``params["own_sass"]``, where ptxas split the work otherwise than in the map), else the SASS
    the record cites."""
    return (params or {}).get("own_sass") or sass or []


def check(value: float, limit: Limit, tolerance: float = 0.02) -> str | None:
    """A flag text when ``value`` exceeds ``limit`` by more than ``tolerance`` (relative):
    ``exceeds-limit: 4.2 > 4 warp-instr/clk/SM (fp32 pipe, 128 lanes/SM; source ...)``."""
    if value is None or not math.isfinite(value):
        return None
    if value <= limit.value * (1.0 + tolerance):
        return None
    return f"exceeds-limit: {value:.4g} > {limit.value:.4g} {UNIT} ({limit.describe()})"
