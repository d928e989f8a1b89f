"""The text ``predict`` prints: the answer per loop, the tables it used, the timeline."""

from __future__ import annotations

from gpudissect.kernel.control import Control
from gpudissect.kernel.sass import SassInstr
from gpudissect.predict.bounds import Prediction
from gpudissect.predict.timeline import Slot


def _f(x: float) -> str:
    return f"{x:.4g}"


def summary(p: Prediction, body: tuple[SassInstr, ...], controls: dict[int, Control] | None) -> list[str]:
    ge = ">= " if p.lower_bound else ""
    lines = [f"{p.loop}: {p.n_instr} instructions, {p.warps} warps/SM ({p.warps_per_scheduler} per scheduler)",
             f"  cycles/iteration per warp: {ge}{_f(p.cycles_per_iter)}  (bound: {p.bound})",
             "  bounds: " + ", ".join(f"{k} {_f(v)}" for k, v in p.bounds.items())]
    if p.recurrence:
        lines.append("  recurrence: " + " -> ".join(f"{body[i].full}@{body[i].offset:#06x}" for i in p.recurrence))
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


def table_lines(p: Prediction) -> list[str]:
    seen: dict[str, str] = {}
    for e in p.entries:
        if e.full not in seen:
            lat = "-" if e.latency is None else _f(e.latency)
            rate = "-" if e.rate is None else _f(e.rate)
            seen[e.full] = (f"    {e.full:<28} latency {lat:>6} [{e.latency_source}]  "
                            f"rate {rate:>6}/clk/SM on {e.unit} [{e.rate_source}]")
    return ["  tables:", *seen.values()]


def timeline_lines(p: Prediction, body: tuple[SassInstr, ...], slots: list[Slot],
                   controls: dict[int, Control] | None, iteration: int) -> list[str]:
    mine = [s for s in slots if s.warp == 0 and s.iteration == iteration]
    if not mine:
        return []
    t0 = mine[0].issue
    head = f"  timeline of warp 0, iteration {iteration} (cycles from its first issue)"
    lines = [head, f"    {'offset':<7}{'issue':>6}{'ready':>7}  {'waited on':<14}{'ctrl' if controls else ''}"]
    for s in mine:
        ins = body[s.index]
        ctrl = str(controls.get(ins.offset, "")) if controls else ""
        text = ins.text.split("*/", 1)[-1].strip() if "*/" in ins.text else ins.full
        lines.append(f"    {ins.offset:#06x} {s.issue - t0:>6}{s.ready - t0:>7.4g}  {s.waited:<14}"
                     f"{ctrl + '  ' if ctrl else ''}{text}")
    return lines
