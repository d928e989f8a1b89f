"""Dependence graph of one loop iteration, with loop-carried edges.

Nodes are the body's instructions in program order. An edge ``i -> j`` says ``j`` reads a
register ``i`` writes (general, uniform and predicate registers; a ``.64`` operand such as
``R2.64`` is the pair R2, R3). ``distance`` is 0 when ``i`` comes first in the same iteration
and 1 when the value comes from the previous iteration (loop-carried). A predicated writer does
not end the search: the value may come from it or from the writer before it, so both give an
edge. Only true (read-after-write) dependences: write-after-read and write-after-write order is
kept by the hardware's in-order issue and by scoreboards, which v0 does not model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudissect.kernel.sass import SassInstr

_PAIR_RE = re.compile(r"\b(U?R)(\d+)\.64\b")


def _pairs(tokens: tuple[str, ...]) -> list[str]:
    """The second registers of ``.64`` operands (``R2.64`` -> R3)."""
    out = []
    for tok in tokens:
        for pre, n in _PAIR_RE.findall(tok):
            out.append(f"{pre}{int(n) + 1}")
    return out


def writes(ins: SassInstr) -> set[str]:
    return set(ins.dests()) | set(_pairs(ins.operands[: ins.n_dests()]))


def reads(ins: SassInstr) -> set[str]:
    return set(ins.sources()) | set(_pairs(ins.operands[ins.n_dests():]))


@dataclass(frozen=True)
class Edge:
    src: int  # producer (index in the body)
    dst: int  # consumer
    reg: str
    distance: int  # 0: same iteration, 1: from the previous iteration


def dependence_graph(body: list[SassInstr] | tuple[SassInstr, ...]) -> list[Edge]:
    """Read-after-write edges of one iteration of ``body`` plus the loop-carried ones."""
    w = [writes(i) for i in body]
    n = len(body)
    edges: list[Edge] = []
    for j, ins in enumerate(body):
        for reg in sorted(reads(ins)):
            # this iteration's writers before j, then the previous iteration's from the end
            order = [(i, 0) for i in range(j - 1, -1, -1)] + [(i, 1) for i in range(n - 1, j - 1, -1)]
            for i, dist in order:
                if reg in w[i]:
                    edges.append(Edge(i, j, reg, dist))
                    if not body[i].predicate:
                        break
    return edges
