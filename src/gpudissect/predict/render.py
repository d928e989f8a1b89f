"""The text ``predict`` prints: the answer per loop, the tables it used, the timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudissect.kernel.control import Control
from gpudissect.kernel.sass import SassInstr
from gpudissect.predict.bounds import Prediction
from gpudissect.predict.loop_model import barriers_of
from gpudissect.predict.sched import BRANCH, SLOT, STALL, Issued

if TYPE_CHECKING:
    from gpudissect.predict.loop_model import Model


def _f(x: float) -> str:
    return f"{x:.4g}"


def resource(held: str) -> str:
    """A resource of the simulation (``Issued.held``, :func:`sched.binding`) in words."""
    kind, _, what = held.partition(" ")
    words = {SLOT: "the issue slot (one instruction per cycle per scheduler)",
             STALL: "ptxas's stall counts (fixed-latency dependences)",
             BRANCH: "the taken branch (fetch redirect)", "wgmma group": "the wait for a wgmma group"}
    if held in words:
        return words[held]
    return {"scoreboard": f"a scoreboard wait on {what}", "dep": f"the result of {what} (dependence graph)",
            "tensor": f"the accumulator of {what}", "pipe": f"the {what} pipe"}.get(kind, held)


def summary(p: Prediction, body: tuple[SassInstr, ...], controls: dict[int, Control] | None,
            model: Model) -> list[str]:
    ge = ">= " if p.lower_bound else ""
    how = "ptxas's control codes" if controls else "the dependence graph (no control codes)"
    lines = [f"{p.loop}: {p.n_instr} instructions, {p.warps} warps/SM ({p.warps_per_scheduler} per scheduler)",
             f"  cycles/iteration per warp: {ge}{_f(model.cycles)}  (model v1: {_warps(p.warps_per_scheduler)} on one "
             f"scheduler under {how}, a region of {model.trips} trips, as predict --validate scores it)",
             f"  binding: {resource(model.binding)}{_shares(model.shares)}",
             f"  v0, largest bound: {ge}{_f(p.cycles_per_iter)} ({p.bound}); bounds: "
             + ", ".join(f"{k} {_f(v)}" for k, v in p.bounds.items())]
    if p.recurrence:
        lines.append("  v0 recurrence: " + " -> ".join(f"{body[i].full}@{body[i].offset:#06x}" for i in p.recurrence))
    lines.append(f"  one pass (critical path): {ge}{_f(p.one_pass)} cycles")
    lines.append(f"  baselines: sum of latencies {_f(p.sum_latency)}, max pipe pressure {_f(p.max_pipe_pressure)}")
    if controls:
        stalls = sum(controls[i.offset].stall for i in body if i.offset in controls)
        lines.append(f"  ptxas's static schedule (sum of stall counts): {stalls} cycles/iteration, one warp")
    for op, miss in sorted(p.unknown.items()):
        what = " and ".join(miss)
        tail = " (counted as 1 cycle: a lower bound)" if "latency" in miss else " (issue limit only)"
        lines.append(f"  unknown: {op}: no {what} in the tables{tail}")
    return lines


def loop_facts(lp, memory=None, rare: tuple[int, float, float] | None = None, plan=None,
               block_warps: int | None = None, resident: int | None = None) -> list[str]:
    """What the loop is beside its cycles: its role among the kernel's loops, the counter step
    (source iterations per trip = step / the source loop's stride), the common path (``rare``:
    (every, the common path's cycles, the whole body's) where the caller weighted the skippable
    instructions), the level its memory instructions were taken at, and its block barriers
    (``plan``: the simulation's, ``block_warps``: the warps they hold together, ``resident``: the
    warps per SM)."""
    out = []
    bars = len(barriers_of(list(lp.body)))
    if bars and plan is not None and plan.barriers:
        size, note = block_warps or 0, ""
        if resident is not None and size > resident:
            size, note = resident, f" (--warps {resident} is fewer than the block's {block_warps}: taken as the block)"
        out.append(f"  {len(plan.barriers)} block barrier{'s' if len(plan.barriers) > 1 else ''}: each holds the "
                   f"block's {size} warps until the last arrives{note}; {plan.barrier_cycles:.4g} cycles per barrier "
                   "back to back (the sync suite's bar.sync at that block size; --block: the block's shape)")
    elif bars:
        out.append(f"  {bars} block barriers: the tables hold no barrier measurement (the sync suite's): "
                   "the warps are not held together at them")
    role = {"main": "main loop (a shorter remainder copy follows: this one is the hot loop)",
            "remainder": "remainder loop (a tail of an unrolled main loop: cold when trips divide the unroll)"}
    if lp.role:
        out.append(f"  role: {role[lp.role]}")
    if lp.counter_step is not None:
        out.append(f"  counter step per trip: {lp.counter_step} (source iterations per trip = {lp.counter_step} / the "
                   "source loop's stride in the same unit)")
    else:
        out.append("  counter step per trip: not a constant (a register step or no counter found)")
    if lp.left_out:
        out.append(f"  common path: {len(lp.left_out)} instructions of a guarded slow path (CALL) left out")
    if lp.skippable and rare:
        every, common, full = rare
        out.append(f"  {len(lp.skippable)} instructions a forward branch may skip run once every {every} trips "
                   f"(--rare-every): the common path {common:.4g} cycles/trip, the whole body {full:.4g}")
    elif lp.skippable:
        out.append(f"  {len(lp.skippable)} instructions a forward branch may skip are counted on every trip "
                   "(--rare-every N: once every N trips)")
    if memory is not None and memory.accesses:
        lv = sorted({f"{a.space} at {a.level}" for a in memory.accesses.values() if a.level})
        out.append("  memory: " + ", ".join(lv) + (f" (missing: {'; '.join(memory.missing)})" if memory.missing else ""))
        if memory.lines:
            n = sorted(set(memory.lines.values()))
            out.append(f"  {len(memory.lines)} accesses spread their lanes over {'/'.join(map(str, n))} lines per "
                       "warp-instruction: the L1 takes them a line at a time (--block: the block's shape)")
        if memory.miss:
            m = sorted(set(memory.miss.values()))
            out.append(f"  {len(memory.miss)} loads give every lane a line of its own or every lane one address: "
                       f"{'/'.join(f'{x:.3g}' for x in m)} of their accesses reach the level (one per L1 fill), "
                       "the others hit the L1"
                       + (f"; the simulation follows the sectors of the {len(memory.walks)} whose address moves "
                          "by a constant per trip" if memory.walks else ""))
    return out


def _warps(w: int) -> str:
    return f"{w} warp" + ("" if w == 1 else "s")


def _shares(shares: dict[str, float]) -> str:
    """`` (62% of ...; then the fma pipe 30%, ...)``: the share of the steady state's cycles the
    binding resource is busy or waited on (:func:`sched.binding`), and the next two's."""
    top = list(shares.items())[:3]
    if not top:
        return ""
    rest = ", ".join(f"{resource(k)} {v:.0%}" for k, v in top[1:])
    return f" (busy or waited on {top[0][1]:.0%} of the simulated steady state's cycles" + (
        f"; then {rest})" if rest else ")")


def table_lines(p: Prediction) -> list[str]:
    seen: dict[str, str] = {}
    for e in p.entries:
        if e.full not in seen:
            lat = "-" if e.latency is None else _f(e.latency)
            rate = "-" if e.rate is None else _f(e.rate)
            seen[e.full] = (f"    {e.full:<28} latency {lat:>6} [{e.latency_source}]  "
                            f"rate {rate:>6}/clk/SM on {e.unit} [{e.rate_source}]")
    return ["  tables:", *seen.values()]


def timeline_lines(body: tuple[SassInstr, ...], trace: list[Issued], controls: dict[int, Control] | None,
                   iteration: int) -> list[str]:
    """Warp 0's ``iteration`` of model v1's simulated run (``trace``)."""
    mine = [s for s in trace if s.warp == 0 and s.iteration == iteration]
    if not mine:
        return []
    t0 = mine[0].cycle
    head = f"  timeline of warp 0, iteration {iteration} of model v1's run (cycles from its first issue)"
    lines = [head, f"    {'offset':<7}{'issue':>7}{'ready':>7}  {'waited on':<22}{'ctrl' if controls else ''}"]
    for s in mine:
        ins = body[s.index]
        ctrl = str(controls.get(ins.offset, "")) if controls else ""
        text = ins.text.split("*/", 1)[-1].strip() if "*/" in ins.text else ins.full
        lines.append(f"    {ins.offset:#06x} {_f(s.cycle - t0):>7}{_f(s.ready - t0):>7}  {s.held:<22}"
                     f"{ctrl + '  ' if ctrl else ''}{text}")
    return lines
