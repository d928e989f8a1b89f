"""Model v1: one scheduler issuing a loop as the hardware is told to by ptxas's control codes.

On sm_70 and later a warp does not check fixed-latency dependences: ptxas's stall count on each
instruction says how many cycles the warp waits before its next instruction, and a
variable-latency instruction (memory, MUFU, conversions, ...) sets a scoreboard (its write
barrier) that a consumer's wait mask names; a read barrier guards the source registers of an
instruction still reading them (a store). So one warp's schedule is the control codes' plus the
scoreboards' waits, and ``w`` warps share the scheduler's issue slot (one per cycle) and its
pipes. The scheduler is greedy (the behaviour suite's verdict on the H100: warps that can
issue back to back run one at a time; dependent ones interleave): it issues from the warp that
issued last while that one can issue, else from the oldest warp that can. What this takes from
the tables: the latency of each variable-latency producer (the
scoreboard is released that many cycles after issue) and each pipe's rate (the pipe accepts
one instruction every ``schedulers / rate`` cycles). A read barrier is released when the pipe
has taken the instruction (its issue interval, at least one cycle). Without control codes (a
SASS listing) the dependence graph with the tables' latencies stands in for both.

A taken branch costs the warp more than a short stall count (the fetch is redirected): the
tables hold no such number, so ``predict --validate`` measures it with loops of their own
(independent FADDs and the branch; :func:`branch_cost`): the cycles from the branch's issue to
the loop's first instruction. The model waits that long after the body's last instruction, or
its stall count where that is longer (it hides the redirect: measured on the tensor loops,
whose branches carry stall counts of 12 to 15), and as long after a forward branch the common
path takes (``plan.taken``: the guard over a slow path left out of the body).

A block barrier (``plan.barriers``: BAR.SYNC) holds a warp until every simulated warp of its
block has issued it, then the tables' measured cycles per barrier at the block's size
(``plan.barrier_cycles``). A load that walks its data (``plan.walks``) takes, trip by trip, the
latency of the nearest level that holds its sector (``memory.py``).

Time is not rounded to whole cycles: a table latency is a mean over a chain (17.04 cycles is
mostly 17), and rounding each wait up would add the fraction's remainder to every step.

:func:`region_cycles` is a whole region of ``trips`` trips of every warp, start to end (the
validation's measure, and what ``predict INPUT`` prints); :func:`simulate_controls` warp 0's
steady state; :func:`issue_trace` every issued slot of a run with what held it back (the
``--timeline`` view and the binding resource, :func:`binding`).

The issue rules are defined once here and shared with the instruction suite's per-SASS steps
(``suites/instructions/studies/sass_steps.py``): :func:`issue_gap` (the fewest cycles between two
instructions of a warp) and :func:`read_release` (when a read barrier is released).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpudissect.kernel.control import N_BARRIERS, Control
from gpudissect.kernel.dataflow import Edge
from gpudissect.predict import PredictError
from gpudissect.predict.bounds import latency
from gpudissect.predict.tables import Entry
from gpudissect.predict.tensor_model import TensorPlan


def issue_intervals(entries: list[Entry], schedulers: int) -> list[float]:
    return [schedulers / e.rate if e.rate and e.unit != "issue" else 0.0 for e in entries]


def issue_gap(stall: int) -> float:
    """Cycles from one instruction of a warp to its next: the stall count, at least one (a
    scheduler issues one instruction per cycle; real -O3 loops never carry stall 0)."""
    return max(1.0, stall)


def read_release(issue: float, interval: float = 0.0) -> float:
    """The cycle a read barrier set by an instruction issued at ``issue`` is released: when its
    pipe has taken it (``interval``: the pipe's issue interval), at least one cycle after issue."""
    return issue + max(1.0, interval)


def _taken(stall: int, branch: float) -> float:
    """Cycles from the taken backward branch to the loop's first instruction: the fetch is
    redirected ``branch`` cycles after the branch issues, hidden by a longer stall count."""
    return max(issue_gap(stall), branch)


@dataclass(frozen=True)
class Issued:
    """One issued instruction of a simulated run (:func:`issue_trace`)."""

    warp: int
    iteration: int
    index: int  # in the body
    cycle: float  # issue
    ready: float  # issue + its latency (its result's ready cycle)
    held: str  # what it waited on beyond the warp's one-cycle gap ("" none; see :func:`_run`)
    unit: str = "issue"  # the pipe it occupies
    interval: float = 0.0  # for so many cycles (0: none)


SLOT = "issue slot"  # the scheduler issued another warp's instruction (or this one's)
BRANCH = "taken branch"
STALL = "stall count"
BARRIER = "block barrier"  # the warp waited at a BAR.SYNC for its block (plan.barriers)


def _run(entries: list[Entry], edges: list[Edge], controls: list[Control] | None, schedulers: int,
         w: int, iterations: int, branch: float, plan: TensorPlan | None = None,
         trace: list[Issued] | None = None) -> tuple[list[float], float]:
    """Every warp runs ``iterations`` trips; (warp 0's start of each trip, the cycle the last
    warp is done). ``plan``: the tensor SASS's timings (:mod:`tensor`). ``trace``: each issued
    instruction is appended to it, with what held it (:func:`held`)."""
    n = len(entries)
    lat = [latency(e) for e in entries]
    interval = issue_intervals(entries, schedulers)
    units = [e.unit for e in entries]
    plan = plan or TensorPlan()
    for j, v in plan.latency.items():
        lat[j] = v
    for j, v in plan.unit_interval.items():
        interval[j] = v
        units[j] = plan.unit_name.get(j) or ("tensor (SM)" if j in plan.asynchronous else "tensor")
    # an mma.sync waits for its accumulator's previous writer (tensor latency), beside the stall counts
    chain: dict[int, list[Edge]] = {}
    for e in edges:
        if e.dst in plan.latency and e.src in plan.latency and e.dst not in plan.asynchronous \
                and e.src not in plan.asynchronous:
            chain.setdefault(e.dst, []).append(e)
    issued: list[dict[tuple[int, int], float]] = [{} for _ in range(w)]
    groups: list[list[float]] = [[] for _ in range(w)]  # completion of each warp's outstanding wgmma groups
    waits = [c.waits for c in controls] if controls is not None else None
    deps: dict[int, list[Edge]] = {}
    for e in edges:
        deps.setdefault(e.dst, []).append(e)
    nxt = [0.0] * w  # earliest next issue of each warp (stall counts)
    sb = [[0.0] * N_BARRIERS for _ in range(w)]  # scoreboard release times
    done: list[dict[tuple[int, int], float]] = [{} for _ in range(w)]  # (iter, idx) -> ready (no controls)
    it, pos = [0] * w, [0] * w
    unit_free: dict[str, float] = {}
    starts: list[float] = []
    active = list(range(w))  # in age order: the oldest first
    cur, cycle, end = 0, 0.0, 0.0
    mine: dict[int, Issued] = {}  # each warp's last issued instruction (the trace's)

    arrived: dict[tuple[int, int, int], list[float]] = {}  # (block, trip, barrier index) -> arrivals
    group = plan.block_group or w

    def block(wp: int) -> tuple[int, int]:
        """(the block of warp ``wp``, its warps in the simulation)."""
        b = wp // group
        return b, min(group, w - b * group)

    def barrier(wp: int) -> float:
        """When warp ``wp`` may go on after the barrier it issued last (0: none before it; inf:
        not all of its block has arrived)."""
        j = pos[wp] - 1
        if j < 0 or j not in plan.barriers:
            return 0.0
        b, size = block(wp)
        got = arrived.get((b, it[wp], j), [])
        # the measured cycles per barrier are a back-to-back loop's period, its warps' arrivals
        # (one issue slot each on this scheduler) included: the release comes that much sooner
        return max(got) + max(1.0, plan.barrier_cycles - size) if len(got) >= size else math.inf

    def ready(wp: int) -> float:
        j = pos[wp]
        t = max(nxt[wp], barrier(wp)) if plan.barriers else nxt[wp]
        if waits is not None:
            for b in waits[j]:
                t = max(t, sb[wp][b])
        else:
            for e in deps.get(j, ()):
                k = it[wp] - e.distance
                if k >= 0:
                    t = max(t, done[wp][(k, e.src)])
        for e in chain.get(j, ()):
            k = it[wp] - e.distance
            if k >= 0 and (k, e.src) in issued[wp]:
                t = max(t, src_ready(wp, k, e.src))
        if j in plan.depbar and len(groups[wp]) > plan.depbar[j]:
            t = max(t, sorted(groups[wp])[len(groups[wp]) - plan.depbar[j] - 1])
        if interval[j] and j not in plan.asynchronous:  # a wgmma waits in the unit's queue, not the warp
            t = max(t, unit_free.get(units[j], 0.0))
        return t

    def held(wp: int, t: float) -> str:
        """What made ``t`` warp ``wp``'s ready cycle (the first of ready's terms that reaches
        it): ``STALL``/``BRANCH``, ``scoreboard <setter>``, ``dep <producer>`` (no control
        codes), ``tensor <producer>``, ``wgmma group``, ``pipe <unit>``; "" at the one-cycle gap."""
        j = pos[wp]
        if wp not in mine or t <= mine[wp].cycle + 1:
            return ""
        if plan.barriers and barrier(wp) >= t:
            return BARRIER
        if t <= nxt[wp]:
            return BRANCH if j == 0 else STALL
        for b in waits[j] if waits is not None else ():
            if sb[wp][b] >= t:
                return "scoreboard " + _setter(trace or [], controls or [], wp, b, t, interval, entries)
        for e in deps.get(j, ()) if waits is None else ():
            if it[wp] >= e.distance and done[wp][(it[wp] - e.distance, e.src)] >= t:
                return f"dep {entries[e.src].full}"
        for e in chain.get(j, ()):
            k = it[wp] - e.distance
            if k >= 0 and (k, e.src) in issued[wp] and src_ready(wp, k, e.src) >= t:
                return f"tensor {entries[e.src].full}"
        if interval[j] and j not in plan.asynchronous and unit_free.get(units[j], 0.0) >= t:
            return f"pipe {units[j]}"
        return "wgmma group"

    filled: dict[tuple, float] = {}  # a walk's sectors (whose, register, fill, sector) -> ready
    walked: dict[tuple[int, int, int], float] = {}  # (warp, trip, index) -> a walking load's result

    def src_ready(wp: int, k: int, src: int) -> float:
        """When instruction ``src`` of warp ``wp``'s trip ``k`` had its result."""
        return walked.get((wp, k, src), issued[wp][(k, src)] + lat[src])

    def result(wp: int, j: int, cycle: float, start: float) -> float:
        """When the result is ready: an asynchronous unit's result waits in its queue (the
        unit's start + latency), a synchronous one's from issue. A walking load (``plan.walks``)
        whose sector a nearer level holds (or is filling) takes that level's latency (or the
        fill's end); where it misses, its sector is filled in every level nearer than its own.
        A warp's sectors are its own; a broadcast's (``plan.walk_shared``) its block's."""
        own = (start if j in plan.asynchronous else cycle) + lat[j]
        if j not in plan.walks:
            return own
        base, off, step, hits = plan.walks[j]
        addr = off + it[wp] * step
        whose = ("block", block(wp)[0]) if j in plan.walk_shared else ("warp", wp)
        keys = [(whose, base, fill, addr // fill) for fill, _ in hits]
        got = next((max(cycle + hit, filled[k]) for k, (_, hit) in zip(keys, hits, strict=True)
                    if k in filled), own)
        for k in keys:
            filled.setdefault(k, got)
        walked[(wp, it[wp], j)] = got
        return got

    while active:
        if it[cur] < iterations and ready(cur) <= cycle:  # greedy: the warp that issued last
            pick = cur
        else:  # then the oldest that can issue
            times = [(ready(wp), wp) for wp in active]
            pick = next((wp for t, wp in times if t <= cycle), -1)
            if pick < 0:
                cycle = max(cycle, min(t for t, _ in times))
                if math.isinf(cycle):
                    raise PredictError("the simulated warps wait at a barrier that not all of their block reaches")
                continue
        j = pos[pick]
        if trace is not None:
            r = ready(pick)
            trace.append(Issued(pick, it[pick], j, cycle, cycle + lat[j], SLOT if r < cycle else held(pick, r),
                                units[j], interval[j]))
            mine[pick] = trace[-1]
        if pick == 0 and j == 0:
            starts.append(cycle)
        start = max(unit_free.get(units[j], 0.0), cycle)
        if interval[j]:
            unit_free[units[j]] = start + interval[j]
        if chain or plan.latency:
            issued[pick][(it[pick], j)] = cycle
        if j in plan.barriers:
            arrived.setdefault((block(pick)[0], it[pick], j), []).append(cycle)
        if j in plan.closes_group:
            groups[pick].append(start + lat[j])
        if j in plan.depbar:
            groups[pick] = [g for g in groups[pick] if g > cycle]
        last = j + 1 == n
        if controls is not None:
            c = controls[j]
            nxt[pick] = cycle + (_taken(c.stall, branch) if last or j in plan.taken else issue_gap(c.stall))
            if c.write_barrier is not None:
                sb[pick][c.write_barrier] = max(sb[pick][c.write_barrier], result(pick, j, cycle, start))
            if c.read_barrier is not None:
                sb[pick][c.read_barrier] = max(sb[pick][c.read_barrier], read_release(cycle, interval[j]))
        else:
            nxt[pick] = cycle + (_taken(0, branch) if last or j in plan.taken else 1)
            done[pick][(it[pick], j)] = result(pick, j, cycle, start)
        hold = plan.operand_cycles.get(j, 0.0)  # a bank conflict: the scheduler reads on
        if hold:
            nxt[pick] = max(nxt[pick], cycle + 1 + hold)
        cur = pick
        if j + 1 == n:
            pos[pick] = 0
            it[pick] += 1
            if it[pick] >= iterations:
                active.remove(pick)
                end = max(end, nxt[pick])
        else:
            pos[pick] = j + 1
        cycle += 1
    return starts, end


def _setter(trace: list[Issued], controls: list[Control], wp: int, b: int, t: float, interval: list[float],
            entries: list[Entry]) -> str:
    """The SASS of warp ``wp`` (the latest issued) whose release of scoreboard ``b`` is ``t``
    or later: ``OPCODE`` for its write barrier (its result), ``OPCODE (read)`` for its read
    barrier (its sources)."""
    for s in reversed(trace):
        if s.warp != wp:
            continue
        c = controls[s.index]
        if c.write_barrier == b and s.ready >= t:
            return entries[s.index].full
        if c.read_barrier == b and read_release(s.cycle, interval[s.index]) >= t:
            return f"{entries[s.index].full} (read)"
    return "?"


def simulate_controls(entries: list[Entry], edges: list[Edge], controls: list[Control] | None,
                      schedulers: int, w: int, iterations: int = 16, branch: float = 0.0) -> float:
    """Steady cycles per iteration of warp 0 of ``w`` sharing a scheduler (the second half of
    ``iterations`` trips); ``branch``: cycles from the taken backward branch that ends the body
    to the loop's first instruction, where longer than the branch's stall count (measured:
    :func:`branch_cost`)."""
    starts, _ = _run(entries, edges, controls, schedulers, w, iterations, branch)
    a, b = len(starts) // 2, len(starts) - 1
    return (starts[b] - starts[a]) / (b - a) if b > a else float("nan")


SHORT = 64  # trips of the two simulated runs a region's cycles are drawn from


def region_cycles(entries: list[Entry], edges: list[Edge], controls: list[Control] | None,
                  schedulers: int, w: int, trips: int, branch: float = 0.0,
                  plan: TensorPlan | None = None) -> float:
    """Cycles per trip of a region in which each of ``w`` warps runs ``trips`` trips, start to
    the last warp's end (what the validation measures). Under the greedy policy the warps end
    apart, and the last ones run with fewer beside them: the region is longer than ``w``
    warps' steady state. Simulated for ``SHORT`` and ``2 * SHORT`` trips (runs of thousands
    of trips cost seconds each); the region grows by the same cycles per trip after that."""
    if trips <= 2 * SHORT:
        return _run(entries, edges, controls, schedulers, w, trips, branch, plan)[1] / trips
    e1 = _run(entries, edges, controls, schedulers, w, SHORT, branch, plan)[1]
    e2 = _run(entries, edges, controls, schedulers, w, 2 * SHORT, branch, plan)[1]
    return (e1 + (trips - SHORT) * (e2 - e1) / SHORT) / trips


def branch_cost(extras: list[float]) -> float | None:
    """The taken-branch redirect from the calibration loops: the median over them of (the
    branch's stall count + measured - simulated without a redirect); None without any."""
    if not extras:
        return None
    xs = sorted(extras)
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def issue_trace(entries: list[Entry], edges: list[Edge], controls: list[Control] | None, schedulers: int,
                w: int, trips: int = SHORT, branch: float = 0.0, plan: TensorPlan | None = None) -> list[Issued]:
    """Every instruction issued while each of ``w`` warps runs ``trips`` trips, in issue order,
    with what held it (the same simulation as :func:`region_cycles`)."""
    trace: list[Issued] = []
    _run(entries, edges, controls, schedulers, w, trips, branch, plan, trace)
    return trace


def binding(trace: list[Issued]) -> tuple[str, dict[str, float]]:
    """What held issue back most in the steady state (the whole trips in the middle half of the
    run's cycles, from one loop head issued to another): the share of its cycles that each
    throughput resource is busy (the issue slot: one instruction a cycle; each pipe: its
    instructions' issue intervals) and that the scheduler idles waiting on each latency (stall
    counts, a scoreboard's producer, a dependence, the taken branch: an idle stretch counts for
    what held the instruction that ends it; a wait on a pipe is in the pipe's busy share). (The
    largest, every share, largest first; ties go to the issue slot.)"""
    heads = [s.cycle for s in trace if s.index == 0 and trace[-1].cycle / 4 <= s.cycle <= 3 * trace[-1].cycle / 4]
    if len(heads) < 2 or heads[-1] <= heads[0]:
        return SLOT, {}
    cycles: dict[str, float] = {SLOT: 0.0}
    for prev, s in zip(trace, trace[1:], strict=False):
        if not heads[0] < s.cycle <= heads[-1]:
            continue
        cycles[SLOT] += 1
        if s.interval:
            cycles[f"pipe {s.unit}"] = cycles.get(f"pipe {s.unit}", 0.0) + s.interval
        idle = s.cycle - prev.cycle - 1
        if idle > 0 and s.held not in ("", SLOT) and not s.held.startswith("pipe "):
            cycles[s.held] = cycles.get(s.held, 0.0) + idle
    order = sorted(cycles, key=lambda k: (-cycles[k], k != SLOT, k))
    return order[0], {k: min(1.0, cycles[k] / (heads[-1] - heads[0])) for k in order}
