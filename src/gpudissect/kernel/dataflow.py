"""Dependence graph of one loop iteration, with loop-carried edges.

Nodes are the body's instructions in program order. An edge ``i -> j`` says ``j`` reads a
register ``i`` writes (general, uniform and predicate registers; the registers an operand names
are :meth:`SassInstr.sources` and :meth:`SassInstr.dests`: a ``.64`` address such as ``R2.64``
is the pair R2, R3, IMAD.WIDE's factors are 32-bit). ``distance`` is 0 when ``i`` comes first in
the same iteration and 1 when the value comes from the previous iteration (loop-carried).

The search for a register's writer walks back from the reader (this iteration, then the previous
one from the end) and ends at a writer that surely ran whenever the reader does: an unpredicated
one, or one under the reader's own guard (the same predicate text, ``@P2`` and ``@P2`` or
``@!P1`` and ``@!P1``) whose predicate nothing between them rewrites. Any other predicated
writer may not have run, so it gives an edge and the search goes on. Only true
(read-after-write) dependences: write-after-read and write-after-write order is kept by the
hardware's in-order issue and by scoreboards, which v0 does not model.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudissect.kernel.sass import REG_RE, SassInstr

UNGUARDED = ("", "@PT")  # guards that always hold


def writes(ins: SassInstr) -> set[str]:
    return set(ins.dests())


def reads(ins: SassInstr) -> set[str]:
    return set(ins.sources())


@dataclass(frozen=True)
class Edge:
    src: int  # producer (index in the body)
    dst: int  # consumer
    reg: str
    distance: int  # 0: same iteration, 1: from the previous iteration


def _search_order(j: int, n: int) -> list[tuple[int, int]]:
    """(index, distance) of the possible writers for a read at ``j``, nearest first."""
    return [(i, 0) for i in range(j - 1, -1, -1)] + [(i, 1) for i in range(n - 1, j - 1, -1)]


def _ends_search(writer: SassInstr, reader: SassInstr, guard_rewritten: bool) -> bool:
    """The writer surely ran whenever the reader runs (module docstring)."""
    if writer.predicate in UNGUARDED:
        return True
    return writer.predicate == reader.predicate and not guard_rewritten


def dependence_graph(body: list[SassInstr] | tuple[SassInstr, ...]) -> list[Edge]:
    """Read-after-write edges of one iteration of ``body`` plus the loop-carried ones."""
    w = [writes(i) for i in body]
    n = len(body)
    edges: list[Edge] = []
    for j, ins in enumerate(body):
        guard = set(REG_RE.findall(ins.predicate))
        for reg in sorted(reads(ins)):
            rewritten = False  # the reader's guard predicate is written between writer and reader
            for i, dist in _search_order(j, n):
                if reg in w[i]:
                    edges.append(Edge(i, j, reg, dist))
                    if _ends_search(body[i], ins, rewritten):
                        break
                rewritten = rewritten or bool(guard & w[i])
    return edges
