"""Where a one-warp chain's global-memory target lies, and what its timing says at each place.

A global access that must reach the line's home in the L2 (an atomic, a reduction) takes a time
that depends on the line: on an H200 (``a07a301b``), one thread's dependent
``atom.global.add.u32`` chain took 257-332 cycles per instance on half of the lines and 429-535
on the other half (48 lines for each of 132 SMs: ``scripts/atom_home.py``,
``data/h200/reliability/gmem-placements-a07a301b/``), the lines homed in the SM's own L2
partition and in the other; a dependent ``ld.global.cg`` chase, served from a copy in the near
partition, took 254-341 with no such split. One placement of the target is therefore near or
far by the allocator's choice, and a run that placed it elsewhere reported another latency
(190 cycles apart). The chain is timed at several placements of its target (the kernel's
``GMEM_SLOT`` input: bytes past the thread's output slot) and the slopes are split into levels
where they fall apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpudissect.bench.stats import median

PLACEMENTS = 24  # placements of a chain's global target
STRIDE = 4224  # bytes from one placement to the next: 33 lines of 128 B, a new page every few
ALIGN = 4096
LEVEL_GAP = 0.15  # two levels where sorted slopes jump by more than this part of the lower one


def offsets(n_sink: int, threads: int, n: int = PLACEMENTS) -> list[int]:
    """``n`` offsets of the target past each thread's output slot, all past every thread's slots
    (so the sinks stored after the region never overlap a target); the first is page-aligned."""
    base = -(-threads * max(n_sink, 1) * 8 // ALIGN) * ALIGN
    return [base + k * STRIDE for k in range(n)]


def out_bytes(offset: int, n_sink: int, threads: int) -> int:
    """The output buffer that holds the sinks and every thread's target at ``offset``."""
    return offset + threads * max(n_sink, 1) * 8


@dataclass(frozen=True)
class Levels:
    """The slopes of the placements split at their largest jump (when it is above LEVEL_GAP):
    ``near`` the placement index whose slope is the lower level's median (the record's timing),
    ``far`` the upper level's median slope (None: one level), ``far_share`` its share."""

    near: int
    far: float | None
    far_share: float
    slopes: list[float]

    def params(self, scale: float = 1.0) -> dict:
        """What the record says of its placements (``scale``: the record's value per slope)."""
        out: dict = {"placements": len(self.slopes)}
        if self.far is None:
            out["l2_home"] = "one level over the placements"
        else:
            out["l2_home"] = "near: the lower level of the placements"
            out["far_home"] = round(self.far * scale, 4)
            out["far_share"] = round(self.far_share, 3)
        return out


def levels(slopes: list[float]) -> Levels:
    """Split the placements' slopes into a near and a far level where sorted neighbours jump by
    more than LEVEL_GAP of the lower (the largest such jump); the near level's median placement
    is the record's. One level: the median placement of all. A placement without a finite
    slope takes no part."""
    order = sorted((i for i in range(len(slopes)) if math.isfinite(slopes[i])), key=lambda i: slopes[i])
    if not order:  # no placement gave a slope: the first's timing stands, with its flags
        return Levels(0, None, 0.0, list(slopes))
    s = [slopes[i] for i in order]
    jumps = [(s[k + 1] - s[k], k) for k in range(len(s) - 1) if s[k] > 0 and s[k + 1] - s[k] > LEVEL_GAP * s[k]]
    if not jumps:
        return Levels(order[(len(s) - 1) // 2], None, 0.0, list(slopes))
    _, k = max(jumps)
    lower, upper = order[: k + 1], s[k + 1 :]
    return Levels(lower[(len(lower) - 1) // 2], median(upper), len(upper) / len(s), list(slopes))

