"""Model v0: steady-state cycles per iteration of one loop, and the two baselines.

For ``warps`` resident warps per SM spread over the SM's schedulers, the busiest scheduler holds
``w = ceil(warps / schedulers)``. Cycles per iteration (of each warp) is the largest of

* the recurrence bound: the loop-carried dependence cycle with the largest latency per
  iteration it spans (its latencies summed / its loop-carried edges);
* the issue bound: body instructions x w / the scheduler's issue rate;
* each pipe's bound: w x the sum over its instructions of 1 / (its rate per scheduler).

The latency of one pass is the critical path of one iteration (its dataflow, no issue limit).
Baselines, computed from the same tables: the sum of the body's latencies (an instruction with
no result, or an unknown latency, counts one issue cycle) and the largest pipe pressure, issue
included, with dependences ignored (as llvm-mca does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from gpudissect.kernel.dataflow import Edge, dependence_graph
from gpudissect.kernel.sass import SassInstr
from gpudissect.predict.memory import MemoryPlan, bandwidth_pressures
from gpudissect.predict.tables import Entry, Tables

UNKNOWN_LATENCY = 1.0  # what an unknown latency counts as: the next issue cycle (a lower bound)


@dataclass
class Prediction:
    loop: str
    warps: int
    warps_per_scheduler: int
    n_instr: int
    cycles_per_iter: float
    bound: str  # what binds: "issue", "pipe <unit>", "recurrence"
    bounds: dict[str, float]  # every bound by name
    recurrence: list[int]  # body indices of the binding dependence cycle ([] when none)
    one_pass: float  # critical path of one iteration
    sum_latency: float  # baseline
    max_pipe_pressure: float  # baseline (llvm-mca style)
    entries: list[Entry]
    edges: list[Edge]
    unknown: dict[str, tuple[str, ...]] = field(default_factory=dict)  # opcode -> what is missing

    @property
    def lower_bound(self) -> bool:
        """An unknown latency counted as one cycle: the answer is at least this."""
        return any("latency" in m for m in self.unknown.values())


def latency(e: Entry) -> float:
    return e.latency if e.latency is not None else UNKNOWN_LATENCY


def max_cycle_ratio(n: int, edges: list[tuple[int, int, float, int]]) -> tuple[float, list[int]]:
    """Largest (sum of weights) / (sum of distances) over the cycles of a graph whose every
    cycle has a positive distance, and one cycle that reaches it (node list); (0, []) when the
    graph has no cycle. Parametric search: for a trial ratio r, a cycle of positive weight under
    ``w - r * d`` (Bellman-Ford) is a cycle above r; r then jumps to that cycle's exact ratio."""

    def cycle_above(r: float) -> list[tuple[int, int, float, int]] | None:
        dist = [0.0] * n
        pred: list[tuple[int, int, float, int] | None] = [None] * n
        last = -1
        for _ in range(n + 1):
            last = -1
            for e in edges:
                s, t, w, d = e
                if dist[s] + w - r * d > dist[t] + 1e-9:
                    dist[t] = dist[s] + w - r * d
                    pred[t] = e
                    last = t
            if last < 0:
                return None
        v = last
        for _ in range(n):  # walk back into the cycle
            v = pred[v][0]  # type: ignore[index]
        cyc, u = [], v
        while True:
            e = pred[u]
            cyc.append(e)  # type: ignore[arg-type]
            u = e[0]  # type: ignore[index]
            if u == v:
                return cyc[::-1]

    best, nodes, r = 0.0, [], 0.0
    while True:
        cyc = cycle_above(r)
        if cyc is None:
            return best, nodes
        ratio = sum(e[2] for e in cyc) / sum(e[3] for e in cyc)
        if ratio <= r + 1e-12:  # numerical floor
            return best, nodes
        best, nodes, r = ratio, [e[0] for e in cyc], ratio


def critical_path(body_lat: list[float], edges: list[Edge]) -> float:
    """Longest dataflow path through one iteration (in-iteration edges only)."""
    finish = [0.0] * len(body_lat)
    preds: dict[int, list[int]] = {}
    for e in edges:
        if e.distance == 0:
            preds.setdefault(e.dst, []).append(e.src)
    for j, lat in enumerate(body_lat):
        finish[j] = max((finish[i] for i in preds.get(j, [])), default=0.0) + lat
    return max(finish, default=0.0)


def pressures(entries: list[Entry], tables: Tables, w: int, memory: MemoryPlan | None = None) -> dict[str, float]:
    """Cycles per iteration each resource needs on the busiest scheduler: ``issue`` and
    ``pipe <unit>`` for every unit with a known rate; with a memory plan, ``bandwidth <level>``
    for every level with a measured bandwidth (:func:`memory.bandwidth_pressures`)."""
    out = {"issue": len(entries) * w / tables.issue_per_scheduler}
    for e in entries:
        if e.rate is not None and e.unit != "issue":
            key = f"pipe {e.unit}"
            out[key] = out.get(key, 0.0) + w * tables.schedulers / e.rate
    if memory is not None:
        out.update(bandwidth_pressures(memory, w))
    return out


def predict(name: str, body: list[SassInstr] | tuple[SassInstr, ...], tables: Tables,
            warps: int = 4, memory: MemoryPlan | None = None) -> Prediction:
    """``memory``: the loop's memory plan (:func:`memory.memory_plan`): its latencies at their
    levels replace the tables' and its bandwidth bounds join the pipes'."""
    if warps < 1:
        raise ValueError(f"warps must be at least 1 (got {warps})")
    w = math.ceil(warps / tables.schedulers)
    entries = [tables.entry(i.full, bool(i.n_dests())) for i in body]
    if memory is not None:
        entries = [replace(e, latency=memory.latency[j], latency_source=f"memory level {memory.accesses[j].level}")
                   if j in memory.latency else e for j, e in enumerate(entries)]
    edges = dependence_graph(list(body))
    lat = [latency(e) for e in entries]
    ratio, cyc = max_cycle_ratio(len(body), [(e.src, e.dst, lat[e.src], e.distance) for e in edges])
    bounds = {"recurrence": ratio, **pressures(entries, tables, w, memory)}
    pipe_only = {k: v for k, v in bounds.items() if k != "recurrence"}
    order = ["recurrence", *sorted(pipe_only, key=lambda k: (k != "issue", k))]
    bound = max(order, key=lambda k: (bounds[k], -order.index(k)))
    unknown = {e.full: e.missing for e in entries if e.missing}
    return Prediction(
        loop=name, warps=warps, warps_per_scheduler=w, n_instr=len(body),
        cycles_per_iter=bounds[bound], bound=bound, bounds=bounds, recurrence=cyc,
        one_pass=critical_path(lat, edges),
        sum_latency=sum(latency(e) if e.latency is not None else 1.0 for e in entries),
        max_pipe_pressure=max(pipe_only.values()),
        entries=entries, edges=edges, unknown=unknown)
