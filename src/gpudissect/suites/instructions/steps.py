"""Per-SASS steps of multi-SASS CUDA-core instructions (issue 22; thesis section 6.2).

ptxas expands many PTX instructions (``mul.lo.u64``, ``div.u32``, ``rem.u32``, conversions, ...)
into several SASS instructions. There is no SASS assembler, so a step cannot be timed alone:
it is timed by a *proxy*, a catalog variant whose verified SASS per instance is exactly that
one instruction (opcode and modifiers), measured in the same run. Where none exists, a variant
of that instruction plus moves of its chain (glue), else one of the same base opcode only (other
modifiers), stands in and is flagged as not exact; a step with none is reported with its SASS
named and no number. With a few patterns the run times the proxies too (``proxy_references``,
from the shipped map).

Per multi-SASS variant, from the run's own results (the suite's ``derive`` phase, no GPU):

* one ``sass_step`` result per step: its SASS, count per instance, proxy, the proxy's latency
  and peak rate (with their spreads) and the ids of the results they come from;
* one ``sass_step_sum`` result: the steps' latency along the expansion's dependence path (the
  critical path through the verified SASS of the variant's own latency chain, the kernel that
  the whole's latency cites, ``predict/graph.py``; per instance) against the whole's measured
  latency, and the steps' issue cost (sum over steps of count / rate on each execution unit,
  the busiest unit) against the whole's measured cost per instance (1 / peak rate), each with
  the spread of its repeats and a verdict: ``match`` within the spread, else by how much and
  which way (``steps-exceed``: the whole is faster than its steps, e.g. ptxas overlapped them or
  a proxy's chain is slower than the step inside the expansion; ``steps-below``: the whole
  costs more than its steps show, e.g. issue or scheduling stalls the proxies' chains lack),
  ``lower-bound`` where a step has no proxy (counted as 0).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpudissect.bench.limits import Limits, load_limits, parse_sass
from gpudissect.bench.stats import fit_line, robust_halfwidth
from gpudissect.kernel.region import KINDS, MOVE_RE, RegionNotFound, find_region
from gpudissect.kernel.sass import REG_RE, SassInstr
from gpudissect.kernel.sass import parse_sass as parse_sass_text
from gpudissect.predict.graph import dependence_graph, reads
from gpudissect.predict.tables import UNTRUSTED
from gpudissect.store.db import Result

MEASURE = "sass_step"
CHECK = "sass_step_sum"
MEASURES = (MEASURE, CHECK)
RATE_UNIT = "warp_instr/cycle/SM"
# catalog classes whose expansions are not CUDA-core arithmetic (memory, ordering, warp-wide
# and special-register work): their steps are other units' business
NOT_CUDA_CORE = ("atomic", "memory", "sync", "warp", "special", "misc", "tensor")
# flags of a result that is not a clean measurement (predict/tables.py's, and the suite's own)
NOT_CLEAN = UNTRUSTED + ("poor-fit", "error", "sm-idle", "non-positive", "clock-changed",
                         "includes companion")
# the window of a chain region whose critical path is traced: so many instructions, at least so
# many instances (the slope is fitted over its middle half)
WINDOW, WINDOW_INSTANCES = 96, 8
LAT_STAT = "the proxy's latency (slope of median cycles vs chain length), this run"
SUM_STAT = ("critical path of the steps' proxy latencies through the dependence graph of the "
            "whole's verified latency-chain SASS, per instance")


def _clean(r: dict) -> bool:
    return r.get("value") is not None and not any(str(f).startswith(NOT_CLEAN) for f in r.get("flags") or [])


def single_sass(sass: list[str] | None) -> str | None:
    """The one SASS instruction of a variant whose instance is exactly one (count 1), else None."""
    ops = parse_sass(sass or [])
    return ops[0][0] if len(ops) == 1 and ops[0][1] == 1.0 else None


def base(op: str) -> str:
    return op.split(".")[0]


MATCHES = ("exact", "exact-with-moves", "opcode-only")  # best first; only "exact" is exact


@dataclass(frozen=True)
class Pick:
    """One measured number of a step, from one proxy variant's result of this run."""

    variant: str
    match: str  # one of MATCHES
    sass: str  # the proxy's own SASS (without its moves)
    value: float
    halfwidth: float
    id: int | None
    moves: tuple[str, ...] = ()  # the moves in the proxy's chain (exact-with-moves)

    def to_json(self) -> dict:
        return {"id": self.id, "variant": self.variant, "match": self.match, "sass": self.sass,
                "value": self.value, "halfwidth": self.halfwidth, **({"moves": list(self.moves)} if self.moves else {})}


@dataclass
class Proxy:
    """What times one step: a latency and a peak rate, each from the best proxy variant of
    this run that has it clean (exact SASS first; the two may come from different variants)."""

    step: str  # the step's SASS (opcode with modifiers)
    latency: Pick | None = None
    rate: Pick | None = None
    alternates: list[str] = field(default_factory=list)

    @property
    def variant(self) -> str | None:
        return (self.latency or self.rate).variant if (self.latency or self.rate) else None

    @property
    def match(self) -> str:
        """The worst match of the two numbers ("none" when neither exists)."""
        got = [p.match for p in (self.latency, self.rate) if p is not None]
        return max(got, key=MATCHES.index) if got else "none"

    def evidence(self) -> dict:
        return {"latency": self.latency and self.latency.to_json(), "throughput_peak": self.rate and self.rate.to_json()}


def _mods(op: str) -> set[str]:
    return set(op.split(".")[1:])


class ProxyIndex:
    """Clean single-SASS results of one run, by their SASS: the candidates for proxies. A
    throughput_peak row counts by its own SASS (``params.own_sass``: the suite's throughput
    family without glue) where it has one; a row whose SASS is one instruction plus moves of
    the chain (glue) is ``exact-with-moves``."""

    def __init__(self, rows: list[dict]):
        self.rows: dict[str, dict[str, list[tuple[str, dict, tuple[str, ...]]]]] = {"latency": {}, "throughput_peak": {}}
        self.tp: dict[tuple[str, int, int], dict] = {}  # (variant, chains, warps) -> throughput row
        for r in rows:
            m = r.get("measure")
            if m == "throughput":
                p = r.get("params") or {}
                self.tp[(r["variant"], p.get("chains"), p.get("warps"))] = r
            if m not in self.rows or not _clean(r):
                continue
            sass = r.get("sass") or []
            own = (r.get("params") or {}).get("own_sass") if m == "throughput_peak" else None
            if own and single_sass(own):
                sass = own
            ops = parse_sass(sass)
            moves = tuple(f"{c:g}*{op}" for op, c in ops if MOVE_RE.match(op))
            core = [(op, c) for op, c in ops if not MOVE_RE.match(op)]
            if len(core) == 1 and core[0][1] == 1.0 and (len(ops) == 1 or moves):
                self.rows[m].setdefault(core[0][0], []).append(("exact" if len(ops) == 1 else "exact-with-moves",
                                                                r, moves))

    def rate_halfwidth(self, r: dict) -> float:
        """The halfwidth of a peak rate: the repeats of its best configuration."""
        best = (r.get("params") or {}).get("best") or {}
        t = self.tp.get((r["variant"], best.get("chains"), best.get("warps")))
        reps = ((t or {}).get("samples") or {}).get("rate_per_repeat") or []
        return robust_halfwidth(reps) if reps else 0.0

    def _pick(self, step: str, measure: str) -> tuple[Pick | None, list[str]]:
        table = self.rows[measure]
        cands = []
        for op, entries in table.items():
            if op == step:
                cands += [(MATCHES.index(tier), 0, 0, _extras(r), r["variant"], op, tier, r, mv)
                          for tier, r, mv in entries]
            elif base(op) == base(step):  # same opcode: the fewest modifiers the step lacks, then
                # the fewest of the step's it lacks (IMAD.MOV.U32 is timed by IMAD, not IMAD.HI.U32)
                extra, lack = len(_mods(op) - _mods(step)), len(_mods(step) - _mods(op))
                cands += [(2, extra, lack, _extras(r), r["variant"], op, "opcode-only", r, mv)
                          for _, r, mv in entries]
        if not cands:
            return None, []
        cands.sort(key=lambda c: c[:6])
        *_, op, tier, r, mv = cands[0]
        if measure == "latency":
            reps = (r.get("samples") or {}).get("slope_per_repeat") or []
            hw = robust_halfwidth(reps) if reps else 0.0
        else:
            hw = self.rate_halfwidth(r)
        others = [c[4] + ("" if c[6] == "exact" else f" ({c[6]}: {c[5]})") for c in cands[1:]]
        return Pick(r["variant"], tier, op, float(r["value"]), hw, r.get("id"), mv), others

    def find(self, step: str) -> Proxy:
        """The proxy of ``step``: per number, a variant of exactly that SASS (without glue or a
        companion first, then by name); else that SASS with moves of its chain; else the same
        opcode with the most shared modifiers (``opcode-only``, not exact); else none."""
        lat, lo = self._pick(step, "latency")
        rate, ro = self._pick(step, "throughput_peak")
        return Proxy(step, lat, rate, list(dict.fromkeys(lo + ro)))


def _extras(r: dict) -> int:
    return sum(str(f).startswith(("glue", "companion", "same SASS")) for f in r.get("flags") or [])


def is_candidate(row: dict) -> str | None:
    """Why a whole's latency row is not a multi-SASS CUDA-core variant to split, or None."""
    ops = parse_sass(row.get("sass") or [])
    if sum(c for _, c in ops) < 2:
        return "fewer than 2 SASS per instance"
    if (row.get("cls") or "").split(".")[0] in NOT_CUDA_CORE:
        return f"class {row.get('cls')}: not CUDA-core arithmetic"
    for op, _ in ops:
        kinds = [k for k, rx in KINDS.items() if rx.match(base(op))]
        if kinds:
            return f"{op}: {kinds[0]} SASS in the expansion"
    if any(str(f).startswith(("companion", "includes companion")) for f in row.get("flags") or []):
        return "measured with a companion"
    return None


@dataclass
class CriticalPath:
    """The critical path of straight-line SASS: its length and halfwidth (cycles), the
    instructions on it (indices, in order), their finish times, the SASS with no latency
    (counted as 0)."""

    length: float
    halfwidth: float
    nodes: list[int]
    finish: list[float]
    spread: list[float]  # the halfwidth accumulated along the path to each instruction
    missing: set[str]

    def per_instance(self, position: list[float]) -> tuple[float, float] | None:
        """The path's steady-state cycles per instance of a chain and their halfwidth: the slopes
        of the finish times (and halfwidths) of its instructions in the middle half of the region
        against their instance position (``position[i]``: instance number of instruction i), so
        that what the start, the hoisted setup and the end of the region add falls into the
        intercept, as in the measured slope over chain lengths."""
        if not self.nodes:
            return None
        lo, hi = position[0], position[-1]
        mid = [i for i in self.nodes if lo + (hi - lo) / 4 <= position[i] <= lo + 3 * (hi - lo) / 4]
        if len({position[i] for i in mid}) < 2:
            return None
        xs = [position[i] for i in mid]
        return (fit_line(xs, [self.finish[i] for i in mid]).slope,
                max(0.0, fit_line(xs, [self.spread[i] for i in mid]).slope))


def middle(n_all: int, n: int) -> slice:
    """The middle ``n`` of ``n_all`` instructions of a region (all when fewer): a chain's steady
    state, where the dependence graph (O(n^2)) is traced on a window of several instances."""
    start = max(0, (n_all - n) // 2)
    return slice(start, start + n)


def positions(instrs: list[SassInstr], steps: dict[str, float], instances: int) -> list[float]:
    """The instance number of each instruction of a chain region of ``instances`` instances: the
    occurrences so far of an anchor, a step that occurs exactly once per instance in the region
    (ptxas may compile the timed kernel's instances to other counts than the map's); without one,
    the steps' instructions so far over their count per instance in the region. Instructions that
    are no step (hoisted setup, operand moves of the chain) never advance it."""
    counts = Counter(i.full for i in instrs if i.full in steps)
    anchor = next((op for op in sorted(counts) if counts[op] == instances), None)
    per = 1.0 if anchor else (sum(counts.values()) / instances or 1.0)
    out, seen = [], 0
    for ins in instrs:
        seen += ins.full == anchor if anchor else ins.full in steps
        out.append(seen / per)
    return out


def wide_reads(ins: SassInstr) -> set[str]:
    """The registers an instruction reads, with IMAD.WIDE's two 32-bit sources as such.
    ``kernel/sass.py`` reads every register operand of a ``.WIDE`` instruction as a pair (the
    model of the predictor, kept for the verdict); the ISA's IMAD.WIDE multiplies two 32-bit
    sources (only its addend and result are pairs): the path under both is stored."""
    srcs = set(reads(ins))
    if "WIDE" not in ins.modifiers:
        return srcs
    ops = ins.operands[ins.n_dests():]
    named = {r for tok in ops for r in REG_RE.findall(tok)}
    pairs = {f"{r[:len(r.rstrip('0123456789'))]}{int(r[len(r.rstrip('0123456789')):]) + 1}"
             for tok in ops[2:] for r in REG_RE.findall(tok) if r[-1].isdigit()}
    return {r for r in srcs if r in named or r in pairs} | ({ins.predicate.lstrip("@!")} & srcs)


def critical_path(instrs: list[SassInstr], latency: Callable[[str], tuple[float, float] | None],
                  narrow_wide: bool = False) -> CriticalPath:
    """Longest read-after-write path through straight-line SASS (``predict/graph.py``'s edges):
    each instruction finishes its latency after the latest of its producers (``latency(full
    opcode)`` -> (cycles, halfwidth), None when unknown: 0, named in ``missing``). The halfwidth
    adds along the path. ``narrow_wide``: IMAD.WIDE's two 32-bit sources read as such
    (:func:`wide_reads`), not as pairs."""
    preds: dict[int, list[int]] = {}
    true_reads = [wide_reads(i) if narrow_wide else None for i in instrs]
    for e in dependence_graph(instrs):
        if e.distance == 0 and (not narrow_wide or e.reg in true_reads[e.dst]):  # type: ignore[operator]
            preds.setdefault(e.dst, []).append(e.src)
    finish: list[float] = []
    hw: list[float] = []
    back: list[int | None] = []
    missing: set[str] = set()
    for j, ins in enumerate(instrs):
        lat = latency(ins.full)
        if lat is None:
            missing.add(ins.full)
            lat = (0.0, 0.0)
        src = max(preds.get(j, []), key=lambda i: (finish[i], hw[i]), default=None)
        finish.append((finish[src] if src is not None else 0.0) + lat[0])
        hw.append((hw[src] if src is not None else 0.0) + lat[1])
        back.append(src)
    if not instrs:
        return CriticalPath(0.0, 0.0, [], [], [], missing)
    end: int | None = max(range(len(instrs)), key=lambda j: (finish[j], hw[j]))
    nodes = []
    while end is not None:
        nodes.append(end)
        end = back[end]
    nodes.reverse()
    return CriticalPath(finish[nodes[-1]], hw[nodes[-1]], nodes, finish, hw, missing)


def issue_cost(steps: list[tuple[str, float]], proxies: dict[str, Proxy], limits: Limits
               ) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Cycles per instance each execution unit is busy with the steps (count / the proxy's rate,
    on the unit of the step's pipe row, else the step's own; the issue limit over all steps),
    their halfwidths, and the steps without a rate (left out: their unit's cost is a lower bound)."""
    cost: dict[str, float] = {"issue": sum(c for _, c in steps) / limits.issue}
    hw: dict[str, float] = {"issue": 0.0}
    missing = []
    for op, c in steps:
        r = proxies[op].rate
        pipe = limits.pipe_of(op)
        unit = pipe.unit if pipe is not None else op
        if r is None or not r.value:
            missing.append(op)
            continue
        cost[unit] = cost.get(unit, 0.0) + c / r.value
        hw[unit] = hw.get(unit, 0.0) + c * r.halfwidth / r.value ** 2
    return cost, hw, sorted(set(missing))


def verdict(steps: float | None, steps_hw: float, whole: float | None, whole_hw: float, floor: float,
            incomplete: list[str], inexact: list[str], what: str) -> tuple[str, list[str]]:
    """The word and flags of one comparison of the steps with the whole: ``match`` within the sum
    of both halfwidths and ``floor`` (the comparison's own resolution); else ``steps-exceed`` /
    ``steps-below`` by how much; ``lower-bound`` when steps without a number (``incomplete``,
    counted as 0) leave the steps short; ``not checked`` without both numbers. ``inexact``:
    steps timed by a proxy that is not exactly their SASS (the verdict says so)."""
    if steps is None or whole is None:
        return "not checked", [f"not checked: {what}: " + ("no steps" if steps is None else "the whole has no clean value")]
    diff, tol = steps - whole, steps_hw + whole_hw + floor
    note = f"; proxies not exact: {', '.join(inexact)}" if inexact else ""
    gap = f"{steps:.4g} vs {whole:.4g} (+-{tol:.2g}): by {abs(diff):.3g} ({abs(diff) / whole:.0%})"
    if incomplete and diff <= tol:
        return "lower-bound", [f"lower-bound: {what}: steps {gap}; steps without a proxy counted as 0: "
                               f"{', '.join(incomplete)}{note}"]
    if abs(diff) <= tol:
        return "match", [f"inexact: {what}: matches within the spread, with proxies not exact: "
                         f"{', '.join(inexact)}"] if inexact else []
    if diff > 0:
        return "steps-exceed", [f"steps-exceed: {what}: steps {gap} more than the whole: the expansion overlaps "
                                f"what its proxies time apart (ptxas scheduling, forwarding), or a proxy's own "
                                f"chain is slower than the step{note}"]
    return "steps-below", [f"steps-below: {what}: steps {gap} less than the whole: the expansion costs more than "
                           f"its steps' proxies show (a dependence between pipes, issue or scheduling stalls "
                           f"the proxies' chains lack){note}"]


def region_of(text: str | None) -> list[SassInstr] | None:
    """The timed region of a stored kernel's SASS text, or None."""
    if not text:
        return None
    funcs = parse_sass_text(text)
    instrs = next(iter(funcs.values())).instrs if funcs else []
    try:
        return find_region(instrs)
    except RegionNotFound:
        return None


def _step_flags(op: str, p: Proxy) -> list[str]:
    flags = []
    if p.latency is None and p.rate is None:
        flags.append(f"no-proxy: {op}: no clean single-SASS variant of this run is this SASS or its opcode")
    for what, pick in (("latency", p.latency), ("rate", p.rate)):
        if pick is None:
            if p.variant:
                flags.append(f"no-{what}: no clean {what} of a variant of {op} (or its opcode) in this run")
        elif pick.match == "opcode-only":
            flags.append(f"opcode-only: {what} of {op} from {pick.variant} ({pick.sass}): same opcode, other "
                         "modifiers (not exact)")
        elif pick.match == "exact-with-moves":
            flags.append(f"with-moves: {what} of {op} from {pick.variant}, whose chain also holds "
                         f"{' + '.join(pick.moves)} (not exact)")
    return flags


def split_variant(row: dict, peak: dict | None, idx: ProxyIndex, limits: Limits, sass_text: str | None,
                  rate_tol: float = 0.0) -> list[Result]:
    """The ``sass_step`` results of one whole (its latency row ``row``, peak row ``peak``) and
    its ``sass_step_sum`` check."""
    name, cls = row["variant"], row.get("cls") or ""
    steps = _merge(parse_sass(row.get("sass") or []))
    proxies = {op: idx.find(op) for op, _ in steps}
    out = []
    for op, c in steps:
        p = proxies[op]
        pipe = limits.pipe_of(op)
        lat = p.latency.value if p.latency else None
        out.append(Result(name, MEASURE, lat, "cycles", LAT_STAT if lat is not None else "none",
                          params={"step": op, "count": c, "proxy": p.variant, "match": p.match,
                                  "latency": lat, "latency_halfwidth": p.latency.halfwidth if p.latency else None,
                                  "rate": p.rate.value if p.rate else None, "rate_unit": RATE_UNIT,
                                  "rate_halfwidth": p.rate.halfwidth if p.rate else None,
                                  "unit": pipe.unit if pipe else None, "evidence": p.evidence(),
                                  "alternates": p.alternates[:8]},
                          flags=_step_flags(op, p), sass=[op], cls=cls))
    out.append(check_variant(row, peak, steps, proxies, idx, limits, sass_text, rate_tol))
    return out


def _merge(ops: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """One entry per SASS (a variant's SASS list may name one twice: two instructions)."""
    out: dict[str, float] = {}
    for op, c in ops:
        out[op] = out.get(op, 0.0) + c
    return list(out.items())


def _proxy_latency(proxies: dict[str, Proxy]) -> Callable[[str], tuple[float, float] | None]:
    def lat(op: str) -> tuple[float, float] | None:
        p = proxies.get(op)
        return (p.latency.value, p.latency.halfwidth) if p is not None and p.latency is not None else None
    return lat


def _not_exact(proxies: dict[str, Proxy], which: str, among: set[str] | None = None) -> list[str]:
    return sorted(op for op, p in proxies.items() if (among is None or op in among)
                  and getattr(p, which) is not None and getattr(p, which).match != "exact")


def check_variant(row: dict, peak: dict | None, steps: list[tuple[str, float]], proxies: dict[str, Proxy],
                  idx: ProxyIndex, limits: Limits, sass_text: str | None, rate_tol: float = 0.0) -> Result:
    """The steps against the whole: latency along the dependence path, issue cost per unit."""
    name = row["variant"]
    lat = _proxy_latency(proxies)
    params: dict = {"steps": [{"sass": op, "count": c, "proxy": proxies[op].variant, "match": proxies[op].match,
                               "latency": (lat(op) or (None,))[0],
                               "rate": proxies[op].rate.value if proxies[op].rate else None} for op, c in steps],
                    "serial_sum": sum(c * (lat(op) or (0.0,))[0] for op, c in steps)}
    reps = (row.get("samples") or {}).get("slope_per_repeat") or []
    whole = float(row["value"]) if _clean(row) else None
    whole_hw = robust_halfwidth(reps) if reps else 0.0
    lengths = (row.get("params") or {}).get("lengths") or []
    params.update(whole_latency=whole, whole_latency_halfwidth=whole_hw, whole_latency_id=row.get("id"))
    flags: list[str] = []
    region = region_of(sass_text)
    path_value = None
    if region is None or not lengths:
        word, fl = "not checked", ["not checked: latency: the SASS of the whole's latency kernel is not in the store"]
    else:
        cut = middle(len(region), max(WINDOW, round(WINDOW_INSTANCES * len(region) / lengths[-1])))
        window = region[cut]
        path = critical_path(window, lat)
        pos = positions(region, dict(steps), lengths[-1])[cut]
        per = path.per_instance(pos)
        path_value, path_hw = per if per is not None else (None, 0.0)
        if any("WIDE" in i.modifiers for i in window):  # the same with 32-bit sources of IMAD.WIDE
            narrow = critical_path(window, lat, narrow_wide=True).per_instance(pos)
            params["path_latency_wide_32bit_sources"] = narrow[0] if narrow else None
        on_path = {window[i].full for i in path.nodes}
        stepped = {op for op, _ in steps}
        params.update(path_latency=path_value, path_latency_halfwidth=path_hw, path_sass=sorted(on_path),
                      region_instructions=len(region), region_instances=lengths[-1], window_instructions=len(window),
                      outside_steps=sorted({i.full for i in region} - stepped), sass_hash=row.get("sass_hash"))
        # one clock tick over the shortest chain: the resolution of the whole's slope
        word, fl = verdict(path_value, path_hw, whole, whole_hw, 1 / min(lengths),
                           sorted(path.missing & stepped), _not_exact(proxies, "latency", on_path), "latency")
        if whole is not None and path_value is not None:
            params["latency_difference"] = path_value - whole
    flags += fl
    params["latency_verdict"] = word
    cost, cost_hw, no_rate = issue_cost(steps, proxies, limits)
    busiest = max(cost, key=lambda u: cost[u])
    rate = float(peak["value"]) if peak and _clean(peak) else None
    rate_hw = idx.rate_halfwidth(peak) if peak and rate else 0.0
    whole_cost = 1 / rate if rate else None
    params.update(unit_cost=cost, unit_cost_halfwidth=cost_hw, busiest_unit=busiest, busiest_cost=cost[busiest],
                  steps_rate=1 / cost[busiest], steps_without_rate=no_rate, whole_rate=rate,
                  whole_rate_halfwidth=rate_hw, whole_rate_id=peak.get("id") if peak else None, whole_cost=whole_cost)
    # the suite's own "at the peak" tolerance: a rate within it of the best is the peak
    tword, tfl = verdict(cost[busiest], cost_hw.get(busiest, 0.0), whole_cost,
                         rate_hw / rate ** 2 if rate else 0.0, rate_tol * (whole_cost or 0.0), no_rate,
                         _not_exact(proxies, "rate"), f"issue cost ({busiest})")
    params["throughput_verdict"] = tword
    if whole_cost is not None:
        params["cost_difference"] = cost[busiest] - whole_cost
    return Result(name, CHECK, path_value, "cycles", SUM_STAT if path_value is not None else "none",
                  params=params, flags=flags + tfl, sass=list(row.get("sass") or []), cls=row.get("cls") or "")


def step_results(rows: list[dict], kernel_text: Callable[[str], str | None], limits: Limits,
                 rate_tol: float = 0.0) -> list[Result]:
    """Every multi-SASS CUDA-core variant of a run's rows, split into its steps and checked
    (``rate_tol``: the relative tolerance of a peak rate)."""
    idx = ProxyIndex(rows)
    peak = {r["variant"]: r for r in rows if r.get("measure") == "throughput_peak"}
    out: list[Result] = []
    for r in rows:
        if r.get("measure") != "latency" or r.get("value") is None or is_candidate(r) is not None:
            continue
        out += split_variant(r, peak.get(r["variant"]), idx, limits,
                             kernel_text(r["sass_hash"]) if r.get("sass_hash") else None, rate_tol)
    return out


def shipped_map(arch: str) -> list[dict]:
    """The shipped PTX->SASS map of ``arch`` (``data/<arch>/map.json.gz`` of the repository), or
    nothing where it is not there (an installed package)."""
    path = Path(__file__).resolve().parents[4] / "data" / arch / "map.json.gz"
    try:
        return json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError):
        return []


def proxy_names(selected: list[str], records: list[dict]) -> list[str]:
    """The variants of the map records that would time the steps of the ``selected`` multi-SASS
    variants, chosen as in a run (:class:`ProxyIndex` over the map's verified SASS): what a run
    of a few patterns times too."""
    def row(r: dict) -> dict:
        flags = [f"{k}: {r[k]}" for k in ("glue", "companion") if r.get(k)]
        return {"variant": r["variant"], "measure": "latency", "value": 0.0, "sass": r.get("sass"), "flags": flags,
                "cls": r.get("cls")}

    idx = ProxyIndex([row(r) for r in records if r.get("verified")])
    by_name = {r["variant"]: r for r in records}
    out: list[str] = []
    for name in selected:
        r = by_name.get(name)
        if r is None or not r.get("verified") or r.get("companion") or is_candidate(row(r)) is not None:
            continue
        out += [p.variant for op, _ in parse_sass(r.get("sass") or []) if (p := idx.find(op)).variant]
    return [v for v in dict.fromkeys(out) if v not in selected]


def proxy_references(selected: list[str], arch: str) -> list[str]:
    """The proxies a run of the ``selected`` variants times too (from the shipped map)."""
    return proxy_names(selected, shipped_map(arch))


def derive(store, run_id: int, arch: str, rate_tol: float = 0.0) -> str | None:
    """Store the steps of every multi-SASS CUDA-core variant of a run (with the variant's own
    item), from its own results; None, or one line saying why not (never raises: a failure is
    one flagged result under item ``sass_steps``)."""
    try:
        res = step_results(store.results(run_id), store.kernel_text, load_limits(arch), rate_tol)
        by_variant: dict[str, list[Result]] = {}
        for r in res:  # stored with each variant's own item: an item's results stay its own
            by_variant.setdefault(r.variant, []).append(r)
        for name, rs in by_variant.items():
            store.save(run_id, name, rs)
    except Exception as e:  # noqa: BLE001 - a derived table never takes the run down
        why = f"error: sass steps: {type(e).__name__}: {e}"[:400]
        store.save(run_id, "sass_steps", [Result("sass_steps", CHECK, None, "cycles", "none", flags=[why])])
        return why
    return None
