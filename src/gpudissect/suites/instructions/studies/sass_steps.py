"""Per-SASS steps of multi-SASS CUDA-core instructions (issue 22; thesis section 6.2), a study
of the instruction suite (:data:`STUDY`).

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
* one ``sass_step_sum`` result: the steps' *issue schedule* against the whole's measured
  latency, and the steps' issue cost (sum over steps of count / rate on each execution unit,
  the busiest unit) against the whole's measured cost per instance (1 / peak rate), each with
  the spread of its repeats and a verdict: ``match`` within the spreads and resolutions, else
  by how much and which way (``steps-exceed``: the whole is faster than its steps;
  ``steps-below``: the whole costs more than its steps show), ``lower-bound`` where a step
  has no proxy (counted as 0).

The issue schedule (:func:`issue_schedule`). A warp of these GPUs issues in order, and nothing but
ptxas's control codes (``kernel/control.py``) holds a consumer back: the stall count of each
instruction (cycles before the next may issue: ptxas's latency model of fixed-latency SASS) and,
for variable-latency SASS (MUFU, conversions, ...), a scoreboard that the consumer waits on. So
the whole's chain latency is that schedule, not the dataflow path through the steps' latencies:
where ptxas holds a consumer longer than the producer's measured latency, or issues independent
work in between, the whole is slower than the dataflow path. The schedule is simulated over the
whole's timed region (the SASS of the kernel that the whole's latency cites, with the control
codes of the recompiled PTX, :func:`whole_controls`): each instruction issues its predecessor's
stall count after that one (at least one cycle), and no earlier than each waited scoreboard's
producer issue plus that producer's measured proxy latency; the compared value is the slope of
the issue times per instance over the middle half of the region (:func:`positions`). The issue
rules (the fewest cycles between two instructions, when a read barrier is released) are the
predictor's (``predict/sched.py``: ``issue_gap``, ``read_release``), defined once for both. It
matches where it lies within the whole's spread (robust halfwidth of its per-repeat slopes) and
clock resolution (one cycle over its shortest chain) plus the schedule's own: the proxies' halfwidths carried through its
scoreboard waits, and one cycle over the instances its slope spans (issue times are whole
cycles). ``region_cycles`` (the schedule of the whole region) against ``whole_kernel_cycles``
(that kernel's measured cycles) checks the schedule on the one kernel it is of. The old value, the critical path of the steps' proxy latencies through the region's
dependence graph (``kernel/dataflow.py``), stays as ``dataflow_latency``; without control codes
(no PTX in the store, no ptxas, a recompiled SASS that differs) it is the compared value, flagged.

What the schedule leaves out is hardware that ptxas does not encode: a step whose proxy latency
exceeds the stall ptxas puts between it and its consumer (measured IMAD.HI 9 cycles, ptxas's
stall 6) makes the whole slower than the schedule; those rows stay ``steps-below`` and name the
edges (``latency_exceeds_ptxas_stall``), and the schedule with every consumer also held for its
producers' measured latencies (``measured_holds_latency``) bounds that part.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gpudissect.arch.limits import Limits, load_limits, parse_sass
from gpudissect.bench.stats import fit_line, robust_halfwidth
from gpudissect.kernel.build import Built
from gpudissect.kernel.control import Control, attach, controls_of
from gpudissect.kernel.dataflow import dependence_graph, reads, writes
from gpudissect.kernel.region import KINDS, MOVE_RE, RegionNotFound, find_region
from gpudissect.kernel.sass import REG_RE, SassInstr
from gpudissect.kernel.sass import parse_sass as parse_sass_text
from gpudissect.predict.sched import issue_gap, read_release
from gpudissect.report.read import shipped
from gpudissect.report.read.results import UNTRUSTED
from gpudissect.store.db import Result
from gpudissect.suites.instructions.core import PEAK_TOL, VariantStudy

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
SUM_STAT = ("the steps' issue schedule, per instance: the slope of the issue times of the whole's verified "
            "latency-chain SASS, issued in order under ptxas's control codes (each instruction its "
            "predecessor's stall count after it, and no earlier than the measured proxy latency of the step "
            "whose scoreboard it waits on)")
DATAFLOW_STAT = ("critical path of the steps' proxy latencies through the dependence graph of the "
                 "whole's verified latency-chain SASS, per instance (no control codes: see the flags)")
Pairs = list[tuple[SassInstr, Control]]


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
        mid = middle_half(self.nodes, position)
        if mid is None:
            return None
        xs = [position[i] for i in mid]
        return (fit_line(xs, [self.finish[i] for i in mid]).slope,
                max(0.0, fit_line(xs, [self.spread[i] for i in mid]).slope))


def middle_half(nodes: list[int], position: list[float]) -> list[int] | None:
    """The ``nodes`` whose instance position lies in the middle half of the region's (the
    steady state a per-instance slope is fitted over), None when they span fewer than two
    positions."""
    if not nodes:
        return None
    lo, hi = position[0], position[-1]
    mid = [i for i in nodes if lo + (hi - lo) / 4 <= position[i] <= lo + 3 * (hi - lo) / 4]
    return mid if len({position[i] for i in mid}) >= 2 else None


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
    ``kernel/dataflow.py`` reads every register operand of a ``.WIDE`` instruction as a pair (the
    model of the predictor, kept for the verdict); the ISA's IMAD.WIDE multiplies two 32-bit
    sources (only its addend and result are pairs, ``SassInstr.source_slots``): the path under
    both is stored."""
    if "WIDE" not in ins.modifiers:
        return set(reads(ins))
    return {r for _, rs in ins.source_slots() for r in rs} | set(REG_RE.findall(ins.predicate))


def critical_path(instrs: list[SassInstr], latency: Callable[[str], tuple[float, float] | None],
                  narrow_wide: bool = False) -> CriticalPath:
    """Longest read-after-write path through straight-line SASS (``kernel/dataflow.py``'s edges):
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


@dataclass
class Schedule:
    """The in-order issue schedule of a region under ptxas's control codes: each instruction's
    issue cycle, what bound it (``stall``: its predecessor's stall count; ``scoreboard``: the
    release of a scoreboard it waits on; ``data``: a producer's measured latency, only with
    ``holds``), the scoreboard waits (setter of a write barrier, the instruction that waited on
    it) and the SASS whose latency was unknown (counted as 0)."""

    issue: list[float]
    bound: list[str]
    waits: list[tuple[int, int]]
    unknown: set[str]

    def per_instance(self, position: list[float]) -> tuple[float, float] | None:
        """The schedule's cycles per instance (slope of the issue times against the instance
        position, middle half of the region) and its resolution: issue times are whole cycles,
        so one cycle over the instances the fit spans."""
        mid = middle_half(list(range(len(self.issue))), position)
        if mid is None:
            return None
        xs = [position[i] for i in mid]
        return fit_line(xs, [self.issue[i] for i in mid]).slope, 1.0 / (max(xs) - min(xs))


def issue_schedule(pairs: Pairs, latency_of: Callable[[str], float | None],
                   holds: list[list[int]] | None = None) -> Schedule:
    """Issue cycle of each instruction of straight-line SASS paired with its control codes,
    one warp issuing in order (sm_70+), under the predictor's issue rules (``predict/sched.py``,
    one definition for both): ``t[0] = 0``, ``t[j] = max(t[j-1] + issue_gap(stall[j-1]),
    release of each scoreboard j waits on)``. A write barrier set by ``k`` is released at
    ``t[k] + latency_of(k's full opcode)`` (the producer's measured latency; None: 0, named in
    ``unknown``), a read barrier at ``read_release(t[k])`` (one cycle after issue, the pipe's
    interval unknown here: it never delays an in-order consumer); a scoreboard counts: set by
    several, a wait is for the last release of all since the previous wait. A wait on a scoreboard no instruction of the region set is free
    (set before the region). ``holds[j]``: producers ``j`` also waits for, ``t[k] +
    latency_of(k)`` each (the hardware interlock that ptxas's stalls stand in for; None: only
    the codes)."""
    issue: list[float] = []
    bound: list[str] = []
    waits: list[tuple[int, int]] = []
    unknown: set[str] = set()
    board: dict[int, list[tuple[float, int]]] = {}  # scoreboard -> outstanding (release cycle, setter)
    for j, (ins, ctl) in enumerate(pairs):
        now, why = (issue[-1] + issue_gap(pairs[j - 1][1].stall), "stall") if j else (0.0, "stall")
        for b in ctl.waits:
            for rel, k in board.pop(b, []):
                if pairs[k][1].write_barrier == b:
                    waits.append((k, j))
                if rel > now:
                    now, why = rel, "scoreboard"
        for k in (holds[j] if holds else ()):
            lat = latency_of(pairs[k][0].full)
            if lat is not None and issue[k] + lat > now:
                now, why = issue[k] + lat, "data"
        issue.append(now)
        bound.append(why)
        if ctl.read_barrier is not None:
            board.setdefault(ctl.read_barrier, []).append((read_release(now), j))
        if ctl.write_barrier is not None:
            lat = latency_of(ins.full)
            if lat is None:
                unknown.add(ins.full)
            board.setdefault(ctl.write_barrier, []).append((now + (lat or 0.0), j))
    return Schedule(issue, bound, waits, unknown)


def producers(instrs: list[SassInstr]) -> list[list[int]]:
    """Per instruction, the earlier instructions whose result it reads (``kernel/dataflow.py``'s
    register model and its same-iteration edges: a predicated writer does not end the search;
    IMAD.WIDE's sources as 32-bit, :func:`wide_reads`), in one pass."""
    last: dict[str, list[int]] = {}
    out = []
    for j, ins in enumerate(instrs):
        out.append(sorted({k for r in wide_reads(ins) for k in last.get(r, ())}))
        for r in writes(ins):
            last[r] = last.get(r, []) + [j] if ins.predicate else [j]
    return out


def schedule_edges(pairs: Pairs, sched: Schedule, prods: list[list[int]], latency_of: Callable[[str], float | None],
                   position: list[float]) -> dict[str, list[dict]]:
    """Where ptxas's schedule and the steps' measured latencies disagree, per (producer,
    consumer) SASS over the middle half of the region: ``ptxas_stall_exceeds_latency``, a
    consumer held by the stall before it (more than one cycle) later than the measured latency
    of each fixed-latency producer needs (the schedule costs more than the dataflow path);
    ``latency_exceeds_ptxas_stall``, a consumer that ptxas issues before its producer's measured
    latency has passed (hardware stall ptxas does not encode: the whole can be slower than the
    schedule). Each with ptxas's cycles between them (the fewest seen), the measured latency and
    how often per instance."""
    mid = middle_half(list(range(len(pairs))), position) or []
    span = (position[mid[-1]] - position[mid[0]]) if mid else 0.0
    found: dict[tuple[str, str, str], list] = {}
    t = sched.issue
    for j in mid:
        ready = [(t[k] + lat, pairs[k][1].write_barrier is None, k, lat) for k in prods[j]
                 if (lat := latency_of(pairs[k][0].full)) is not None]
        fixed = [x for x in ready if x[1]]  # a scoreboarded producer is the schedule's own wait
        if fixed and t[j] < max(fixed)[0]:
            kind, (_, _, k, lat) = "latency_exceeds_ptxas_stall", max(fixed)
        elif ready and sched.bound[j] == "stall" and j and pairs[j - 1][1].stall > 1 and t[j] > max(ready)[0]:
            kind, (_, _, k, lat) = "ptxas_stall_exceeds_latency", max(ready)
        else:
            continue
        e = found.setdefault((kind, pairs[k][0].full, pairs[j][0].full), [t[j] - t[k], lat, 0])
        e[0], e[2] = min(e[0], t[j] - t[k]), e[2] + 1
    out: dict[str, list[dict]] = {"ptxas_stall_exceeds_latency": [], "latency_exceeds_ptxas_stall": []}
    for (kind, a, b), (cyc, lat, n) in found.items():
        out[kind].append({"producer": a, "consumer": b, "ptxas_cycles": cyc, "measured_latency": lat,
                          "per_instance": round(n / span, 3) if span else None})
    for v in out.values():
        v.sort(key=lambda e: (-(e["per_instance"] or 0) * abs(e["ptxas_cycles"] - e["measured_latency"]),
                              e["producer"], e["consumer"]))
    return out


def _edge_text(e: dict) -> str:
    return f"{e['producer']} -> {e['consumer']} (ptxas {e['ptxas_cycles']:g}, measured {e['measured_latency']:.3g})"


_LABEL_RE = re.compile(r"\.L_x_\d+")


def same_sass(a: str, b: str) -> bool:
    """Two kernels' SASS texts are the same program: equal up to nvdisasm's branch-label numbers
    (``.L_x_<n>`` counts over the whole module, so a kernel compiled with others gets other
    numbers; the targets are the same offsets)."""
    return _LABEL_RE.sub(".L_x", a) == _LABEL_RE.sub(".L_x", b)


def built_controls(b: Built) -> tuple[Pairs | None, str]:
    """The timed region of a kernel of this run's build paired with its control codes, read
    from the very cubin that was measured (nothing recompiled or disassembled again); (None,
    why) where its region is not found."""
    funcs = parse_sass_text(b.sass)
    if len(funcs) != 1:
        return None, f"its SASS holds {len(funcs)} functions, not 1"
    (f,) = funcs.values()
    try:
        return attach(find_region(f.instrs), controls_of(b.cubin, b.kernel.name)), ""
    except (RegionNotFound, KeyError, ValueError) as e:
        return None, f"no control codes for its timed region: {e}"[:300]


def whole_controls(row: dict, kernel_text: Callable[[str], str | None], arch: str) -> tuple[Pairs | None, str]:
    """The timed region of the kernel that the whole's latency ``row`` cites, paired with its
    control codes: its stored PTX recompiled alone with the project's cached toolchain (ptxas at
    the row's strategy's -O level, the suite's -O3 where it names none), accepted only where the
    kernel's SASS is the stored one (:func:`same_sass`). (None, why) otherwise."""
    from gpudissect.kernel.toolchain import compile_ptx, disassemble

    ptx = kernel_text(row["ptx_hash"]) if row.get("ptx_hash") else None
    stored = kernel_text(row["sass_hash"]) if row.get("sass_hash") else None
    if not ptx or not stored:
        return None, "the PTX or SASS of the whole's latency kernel is not in the store"
    opt = 3  # the suite's level, unless the row's strategy names another
    if row.get("strategy"):
        try:
            from gpudissect.suites.instructions.strategies import strategy

            opt = strategy(row["strategy"]).opt
        except (KeyError, OSError, ValueError):
            pass
    try:
        cub = compile_ptx(ptx, arch, opt).cubin
        funcs = parse_sass_text(disassemble(cub))
    except Exception as e:  # noqa: BLE001 - no toolchain, a PTX it rejects: the old method
        return None, f"recompiling its PTX failed: {type(e).__name__}: {e}"[:300]
    if len(funcs) != 1:
        return None, f"its recompiled PTX holds {len(funcs)} kernels, not 1"
    (name, f), = funcs.items()
    if not same_sass("\n".join(i.text for i in f.instrs), stored):
        return None, f"its PTX recompiled at -O{opt} gives other SASS than the stored"
    try:
        return attach(find_region(f.instrs), controls_of(cub, name)), ""
    except (RegionNotFound, KeyError, ValueError) as e:
        return None, f"no control codes for its timed region: {e}"[:300]


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
            incomplete: list[str], inexact: list[str], what: str, below: str | None = None,
            exceed: str | None = None) -> tuple[str, list[str]]:
    """The word and flags of one comparison of the steps with the whole: ``match`` within the sum
    of both halfwidths and ``floor`` (the comparison's own resolution); else ``steps-exceed`` /
    ``steps-below`` by how much (``below`` / ``exceed``: the explanation, instead of the generic
    one); ``lower-bound`` when steps without a number (``incomplete``, counted as 0) leave the
    steps short; ``not checked`` without both numbers. ``inexact``: steps timed by a proxy that
    is not exactly their SASS (the verdict says so)."""
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
        return "steps-exceed", [f"steps-exceed: {what}: steps {gap} more than the whole: " + (
            exceed or "the expansion overlaps what its proxies time apart (ptxas scheduling, forwarding), or a "
                      "proxy's own chain is slower than the step") + note]
    return "steps-below", [f"steps-below: {what}: steps {gap} less than the whole: " + (
        below or "the expansion costs more than its steps' proxies show (a dependence between pipes, issue or "
                 "scheduling stalls the proxies' chains lack)") + note]


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
                  rate_tol: float = 0.0, controls: Pairs | None = None, controls_why: str = "") -> list[Result]:
    """The ``sass_step`` results of one whole (its latency row ``row``, peak row ``peak``) and
    its ``sass_step_sum`` check (``controls``: its timed region's control codes, see
    :func:`check_variant`)."""
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
    out.append(check_variant(row, peak, steps, proxies, idx, limits, sass_text, rate_tol, controls, controls_why))
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


def _schedule(pairs: Pairs, lat: Callable[[str], tuple[float, float] | None], pos: list[float]) -> dict | None:
    """The steps' issue schedule of the whole's region (:func:`issue_schedule`) per instance, and
    what splits its difference from the whole: ``value``; ``halfwidth``, how far the proxies'
    halfwidths on the scoreboard waits move it (the schedule with every latency at value +
    halfwidth); ``resolution``; ``measured_holds_latency``, the schedule with each consumer also
    held for its producers' measured latencies (ptxas's stalls where the hardware needs more,
    :func:`schedule_edges`); the edges; ``scoreboarded``, the SASS whose scoreboard an
    instruction of the fitted middle half waits on, and ``missing``, those without a latency
    (a wait before it moves the intercept, not the slope). None when too short to fit."""
    nominal: Callable[[str], float | None] = lambda op: (lat(op) or (None,))[0]  # noqa: E731
    upper: Callable[[str], float | None] = lambda op: (v[0] + v[1]) if (v := lat(op)) else None  # noqa: E731
    sched = issue_schedule(pairs, nominal)
    per = sched.per_instance(pos)
    if per is None:
        return None
    hi = issue_schedule(pairs, upper).per_instance(pos)
    prods = producers([i for i, _ in pairs])
    held = issue_schedule(pairs, nominal, prods).per_instance(pos)
    edges = schedule_edges(pairs, sched, prods, nominal, pos)
    fitted = set(middle_half(list(range(len(pairs))), pos) or [])
    waited = {pairs[k][0].full for k, j in sched.waits if j in fitted}
    return {"value": per[0], "halfwidth": max(0.0, hi[0] - per[0]) if hi else 0.0, "resolution": per[1],
            "measured_holds_latency": held[0] if held else None, "scoreboarded": sorted(waited),
            "missing": sorted(waited & sched.unknown), "region_cycles": sched.issue[-1] + issue_gap(pairs[-1][1].stall),
            "controls": "ptxas's control codes of the whole's kernel, its stored PTX recompiled (same SASS)",
            **edges}


def _schedule_reasons(sp: dict) -> tuple[str, str]:
    """The explanations of a schedule below and above the whole (for :func:`verdict`)."""
    slow = sp["latency_exceeds_ptxas_stall"]
    held = sp["measured_holds_latency"]
    if slow:
        below = ("hardware stall ptxas does not encode: a step's measured latency exceeds the cycles ptxas's "
                 f"stall counts give its consumer: {'; '.join(_edge_text(e) for e in slow[:4])}"
                 + (f"; with each consumer also held for its producers' measured latencies the schedule gives "
                    f"{held:.4g}" if held is not None else ""))
    else:
        below = ("the whole waits longer than ptxas's issue schedule with the steps' measured latencies, and no "
                 "step's measured latency exceeds ptxas's stalls: a stall that neither shows")
    own, mine = sp.get("whole_kernel_cycles"), sp["region_cycles"]
    if own is not None and mine <= own:  # ptxas's stall counts are a floor: the hardware cannot beat them
        exceed = (f"the cited kernel's own measured cycles ({own:.6g}) hold its schedule ({mine:.6g} for the "
                  "region): the schedule's slope per instance, of this one kernel, differs from the whole's "
                  "slope across the kernels of all its chain lengths")
    elif sp["scoreboarded"]:
        exceed = (f"a scoreboarded SASS's proxy latency ({', '.join(sp['scoreboarded'])}) exceeds its "
                  "consumer's wait inside the expansion")
    else:
        exceed = ("ptxas's stall counts, a floor the hardware cannot beat, put the region above the kernel's "
                  "measured cycles: the schedule or the region's instance positions do not fit the timed kernel")
    return below, exceed


def check_variant(row: dict, peak: dict | None, steps: list[tuple[str, float]], proxies: dict[str, Proxy],
                  idx: ProxyIndex, limits: Limits, sass_text: str | None, rate_tol: float = 0.0,
                  controls: Pairs | None = None, controls_why: str = "") -> Result:
    """The steps against the whole: latency as the steps' issue schedule under the control codes
    of the whole's timed region (``controls``: its instructions paired with their codes; without
    them, ``controls_why`` says why and the dataflow path is compared), issue cost per unit."""
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
    path_value, statistic = None, "none"
    if region is None or not lengths:
        word, fl = "not checked", ["not checked: latency: the SASS of the whole's latency kernel is not in the store"]
    else:
        cut = middle(len(region), max(WINDOW, round(WINDOW_INSTANCES * len(region) / lengths[-1])))
        window = region[cut]
        path = critical_path(window, lat)
        pos = positions(region, dict(steps), lengths[-1])
        per = path.per_instance(pos[cut])
        dataflow, dataflow_hw = per if per is not None else (None, 0.0)
        if any("WIDE" in i.modifiers for i in window):  # the same with 32-bit sources of IMAD.WIDE
            narrow = critical_path(window, lat, narrow_wide=True).per_instance(pos[cut])
            params["dataflow_latency_wide_32bit_sources"] = narrow[0] if narrow else None
        on_path = {window[i].full for i in path.nodes}
        stepped = {op for op, _ in steps}
        params.update(dataflow_latency=dataflow, dataflow_latency_halfwidth=dataflow_hw,
                      dataflow_path_sass=sorted(on_path), region_instructions=len(region),
                      region_instances=lengths[-1], window_instructions=len(window),
                      outside_steps=sorted({i.full for i in region} - stepped), sass_hash=row.get("sass_hash"))
        if controls is not None and [i.text for i, _ in controls] != [i.text for i in region]:
            controls, controls_why = None, "the control codes are not of the stored region's SASS"
        # the schedule's latencies: the steps' proxies, and for the region's other SASS (hoisted
        # setup such as a divisor's reciprocal) a proxy found the same way
        others = {op: idx.find(op) for op in {i.full for i in region} - stepped}
        sched = _schedule(controls, _proxy_latency({**others, **proxies}), pos) if controls is not None else None
        if sched is None:  # the old comparison: the dataflow path, flagged
            controls_why = controls_why or "its timed region spans too few instances for a schedule"
            path_value, path_hw, floor = dataflow, dataflow_hw, 0.0
            incomplete, inexact, what = sorted(path.missing & stepped), _not_exact(proxies, "latency", on_path), \
                "latency (dataflow path)"
            below = exceed = None
            flags.append(f"no-schedule: latency: no control codes ({controls_why}): the steps' dataflow path is "
                         "compared, which leaves out ptxas's in-order issue schedule (a whole above it is expected)")
            statistic = DATAFLOW_STAT if path_value is not None else "none"
            params["latency_method"] = "dataflow"
        else:
            path_value, path_hw, floor, sp = sched["value"], sched["halfwidth"], sched["resolution"], sched
            cyc = ((row.get("samples") or {}).get("cycles_per_repeat") or {}).get(str(lengths[-1])) or []
            sp["whole_kernel_cycles"] = float(statistics.median(cyc)) if cyc else None
            params.update({k: v for k, v in sp.items() if k not in ("value", "halfwidth")},
                          latency_method="issue schedule", scoreboarded_proxies={
                              op: (others.get(op) or proxies[op]).variant for op in sp["scoreboarded"]},
                          schedule_minus_dataflow=path_value - dataflow if dataflow is not None else None)
            incomplete, what = sp["missing"], "latency (issue schedule)"
            inexact = _not_exact({**others, **proxies}, "latency", set(sp["scoreboarded"]))
            below, exceed = _schedule_reasons(sp)
            statistic = SUM_STAT
        params.update(path_latency=path_value, path_latency_halfwidth=path_hw)
        # the whole's resolution: one clock tick over the shortest chain; the schedule's: one cycle
        # over the instances its slope spans (its issue times are whole cycles)
        params["latency_tolerance"] = {"whole_halfwidth": float(whole_hw), "whole_resolution": 1 / min(lengths),
                                       "steps_halfwidth": path_hw, "steps_resolution": floor}
        word, fl = verdict(path_value, path_hw, whole, whole_hw, 1 / min(lengths) + floor, incomplete, inexact,
                           what, below, exceed)
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
    return Result(name, CHECK, path_value, "cycles", statistic,
                  params=params, flags=flags + tfl, sass=list(row.get("sass") or []), cls=row.get("cls") or "")


def step_results(rows: list[dict], kernel_text: Callable[[str], str | None], limits: Limits,
                 rate_tol: float = 0.0,
                 controls: Callable[[dict], tuple[Pairs | None, str]] | None = None) -> list[Result]:
    """Every multi-SASS CUDA-core variant of a run's rows, split into its steps and checked
    (``rate_tol``: the relative tolerance of a peak rate; ``controls``: a whole's latency row ->
    its timed region with control codes, or (None, why), e.g. :func:`whole_controls`)."""
    idx = ProxyIndex(rows)
    peak = {r["variant"]: r for r in rows if r.get("measure") == "throughput_peak"}
    out: list[Result] = []
    for r in rows:
        if r.get("measure") != "latency" or r.get("value") is None or is_candidate(r) is not None:
            continue
        pairs, why = controls(r) if controls is not None else (None, "no control codes asked for")
        out += split_variant(r, peak.get(r["variant"]), idx, limits,
                             kernel_text(r["sass_hash"]) if r.get("sass_hash") else None, rate_tol, pairs, why)
    return out


def section_note(arch: str) -> str:
    """The timing reference's note on the steps' issue schedule, for the architecture of the data
    (None: not named)."""
    return SECTION_NOTE.format(arch=f"An {arch} warp" if arch else "A warp")


SECTION_NOTE = ("Latency: the steps' issue schedule against the whole's measured latency. {arch} issues "
                "in order and only ptxas's control codes hold a consumer back, so the schedule issues the "
                "whole's own timed SASS one instruction after another: each its predecessor's stall count "
                "later, and no earlier than the measured proxy latency of a variable-latency step whose "
                "scoreboard it waits on; the value is its slope per instance. Tolerance: the whole's spread "
                "and clock resolution plus the schedule's (the proxies' spreads on its scoreboard waits, one "
                "cycle over the instances it spans). steps-below with \"hardware stall ptxas does not "
                "encode\": a step's measured latency exceeds the stall ptxas gives its consumer.")


def conclusion(records: list[dict]) -> str | None:
    """One line over a run's ``sass_step_sum`` records: the latency verdicts of the steps' issue
    schedule against the wholes, with the causes the records name (None without records)."""
    rows = [r.get("params") or {} for r in records if r.get("measure") == CHECK and (r.get("params") or {}).get("steps")]
    if not rows:
        return None
    words = Counter(p.get("latency_verdict") for p in rows)
    hw = sum(p.get("latency_verdict") == "steps-below" and bool(p.get("latency_exceeds_ptxas_stall")) for p in rows)
    own = sum(p.get("latency_verdict") == "steps-exceed" and p.get("whole_kernel_cycles") is not None
              and p.get("region_cycles") is not None and p["region_cycles"] <= p["whole_kernel_cycles"] for p in rows)
    flow = Counter(p.get("latency_method") or "dataflow" for p in rows)  # records of before: the dataflow path
    parts = [f"{w} {n}" + (f" ({hw} a hardware stall ptxas does not encode)" if w == "steps-below" and hw else "")
             + (f" ({own} where the cited kernel's own cycles hold its schedule: a slope across lengths)"
                if w == "steps-exceed" and own else "")
             for w, n in sorted(words.items(), key=lambda kv: str(kv[0]))]
    if not flow.get("issue schedule"):
        return (f"Multi-SASS latency, the steps' dataflow path (no control codes: ptxas's in-order issue schedule "
                f"left out) against the whole, {len(rows)} variants: " + ", ".join(parts) + ".")
    tail = f"; {flow['dataflow']} without control codes, compared by the dataflow path" if flow.get("dataflow") else ""
    return (f"Multi-SASS latency, the steps' issue schedule (ptxas's stall counts and the measured latencies of "
            f"scoreboarded steps, over the whole's own SASS) against the whole, {len(rows)} variants: "
            + ", ".join(parts) + tail + ".")


def load_shipped_map(arch: str) -> list[dict]:
    """The instruction records of the shipped PTX->SASS map of ``arch`` (report/read/shipped.py),
    or nothing where it is not there (an installed package)."""
    path = shipped.shipped_map(arch)
    try:
        rows = json.loads(gzip.decompress(path.read_bytes())) if path else []
    except (OSError, ValueError):
        return []
    return [r for r in rows if r.get("catalog", "instructions") == "instructions"]  # not another suite's


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
    return proxy_names(selected, load_shipped_map(arch))


def _compile_one(job: tuple[str, str, int]) -> None:
    from gpudissect.kernel.toolchain import compile_ptx, disassemble

    try:
        disassemble(compile_ptx(*job).cubin)
    except Exception:  # noqa: BLE001 - whole_controls says why, serially
        pass


def _prewarm(rows: list[dict], kernel_text: Callable[[str], str | None], arch: str) -> None:
    """The compile cache filled, in parallel processes, with the cited PTX of every whole's
    latency that is split into steps (:func:`is_candidate`; at -O3, the suite's level) and its
    disassembly, so that :func:`whole_controls` reads cached cubins and SASS instead of running
    ptxas and nvdisasm one kernel after another."""
    import os

    from gpudissect.kernel.parallel import pmap

    jobs = []
    for r in rows:
        if r.get("measure") == "latency" and r.get("ptx_hash") and is_candidate(r) is None:
            ptx = kernel_text(r["ptx_hash"])
            if ptx:
                jobs.append((ptx, arch, 3))
    if len(jobs) > 1:
        pmap(_compile_one, jobs, os.cpu_count() or 1)


def derive(store, run_id: int, arch: str, rate_tol: float = 0.0,
           built: dict[str, Built] | None = None) -> str | None:
    """Store the steps of every multi-SASS CUDA-core variant of a run (with the variant's own
    item), from its own results and the control codes of the wholes' kernels: those of this
    process's build where ``built`` (PTX hash -> kernel) has them (:func:`built_controls`), else
    their stored PTX recompiled (:func:`whole_controls`: ptxas and nvdisasm, no GPU; a resumed
    run); None, or one line saying why not (never raises: a failure is one flagged result under
    item ``sass_steps``)."""
    built = built or {}

    def controls(row: dict) -> tuple[Pairs | None, str]:
        b = built.get(row.get("ptx_hash") or "")
        return built_controls(b) if b is not None else whole_controls(row, store.kernel_text, arch)

    try:
        rows = store.results(run_id)
        _prewarm([r for r in rows if r.get("ptx_hash") not in built], store.kernel_text, arch)
        res = step_results(rows, store.kernel_text, load_limits(arch), rate_tol, controls)
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


class SassSteps(VariantStudy):
    """The per-SASS steps as a study of the instruction suite: the proxies a run of a few
    patterns times too, and the steps derived from the run's results."""

    def variants(self, selected: list[str], arch: str) -> list[str]:
        return proxy_references(selected, arch)

    def derive(self, ctx) -> None:
        built = {b.ptx_hash: b for w in ctx.state.get("works", {}).values() for f in w.families
                 if f.measure == "latency" and f.study is None for b in f.built}
        derive(ctx.store, ctx.run_id, ctx.target.arch, PEAK_TOL, built)


STUDY = SassSteps("sass_steps", needs=("latency", "throughput_peak"), adds=MEASURES)
