"""A list-scheduling simulation of one scheduler (SM sub-partition) running a loop.

``w`` warps share the scheduler. Each warp issues its body in order, one instruction per cycle
for the whole scheduler; an instruction waits until the results it reads are ready (its
producers' issue + latency, from the dependence graph, loop-carried edges from the previous
iteration) and until its unit accepts another instruction (every ``schedulers / rate``
cycles). Among the warps that can issue, the one that issued least recently goes first.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudissect.predict.bounds import Prediction, latency
from gpudissect.predict.tables import Tables


@dataclass(frozen=True)
class Slot:
    warp: int
    iteration: int
    index: int  # in the body
    issue: int  # cycle
    ready: float  # cycle its result is ready
    waited: str  # what held it back ("" / "issue" / "dep R5" / "pipe fma")


def simulate(pred: Prediction, tables: Tables, iterations: int = 16) -> list[Slot]:
    n, w = pred.n_instr, pred.warps_per_scheduler
    lat = [latency(e) for e in pred.entries]
    interval = [tables.schedulers / e.rate if e.rate and e.unit != "issue" else 0.0 for e in pred.entries]
    deps: dict[int, list] = {}
    for e in pred.edges:
        deps.setdefault(e.dst, []).append(e)
    issued: dict[tuple[int, int, int], int] = {}  # (warp, iteration, index) -> cycle
    pos = [(0, 0)] * w  # each warp's next (iteration, index)
    unit_free: dict[str, float] = {}
    last_issue = [-1] * w
    out: list[Slot] = []
    cycle = 0
    while any(it < iterations for it, _ in pos):
        best = None  # (warp, reason)
        soonest = float("inf")
        for wp in sorted(range(w), key=lambda x: last_issue[x]):
            it, j = pos[wp]
            if it >= iterations:
                continue
            t, why = float(last_issue[wp] + 1), "issue"
            for e in deps.get(j, []):
                k = it - e.distance
                if k >= 0:
                    r = issued[(wp, k, e.src)] + lat[e.src]
                    if r > t:
                        t, why = r, f"dep {e.reg}"
            unit = pred.entries[j].unit
            if interval[j] and unit_free.get(unit, 0.0) > t:
                t, why = unit_free[unit], f"pipe {unit}"
            if t <= cycle:
                late = cycle > last_issue[wp] + 1
                best = (wp, (why if t == cycle else "issue") if late else "")
                break
            soonest = min(soonest, t)
        if best is None:
            cycle = int(-(-soonest // 1))  # next cycle something can issue
            continue
        wp, why = best
        it, j = pos[wp]
        issued[(wp, it, j)] = cycle
        if interval[j]:
            unit = pred.entries[j].unit
            unit_free[unit] = max(unit_free.get(unit, 0.0), cycle) + interval[j]
        out.append(Slot(wp, it, j, cycle, cycle + lat[j], why))
        last_issue[wp] = cycle
        pos[wp] = (it + 1, 0) if j + 1 == n else (it, j + 1)
        cycle += 1
    return out


def steady_cycles(slots: list[Slot], iterations: int) -> float:
    """Cycles per iteration of warp 0 over the second half of the simulated iterations."""
    first = {s.iteration: s.issue for s in slots if s.warp == 0 and s.index == 0}
    a, b = iterations // 2, iterations - 1
    return (first[b] - first[a]) / (b - a) if b > a else float("nan")
