"""The one place that times a region of a kernel: how the clock is read around the work, and
where the timestamps go. Every suite's generator builds its timed region from these pieces,
and ``kernel/region.py`` finds the same two clock reads in the SASS, so a correction to the
timing method is made here once for every suite.

Two shapes exist:

* :func:`timed`: one region, ``body`` between two 64-bit ``%clock64`` reads (the body may be a
  loop of its own: the memory chases and the behaviour probes time ``iters`` trips);
* :func:`repeated`: the region repeated ``count`` times in a loop that is never unrolled, all
  warps of the block released together by a barrier before each repetition; the first
  repetition runs with a cold instruction cache and is dropped by the analysis. Per thread the
  timestamps are (start, end) per repetition, then ``%smid``.
"""

from __future__ import annotations

from dataclasses import dataclass


def clock_read(reg: str, indent: str = "  ") -> str:
    """A 64-bit SM clock read (SASS ``CS2R Rx, SR_CLOCKLO``: the region delimiter)."""
    return f"{indent}mov.u64 {reg}, %clock64;"


def timed(body: list[str], t0: str, t1: str, indent: str = "  ") -> list[str]:
    """``body`` between two clock reads into ``t0`` and ``t1``."""
    return [clock_read(t0, indent), *body, clock_read(t1, indent)]


@dataclass(frozen=True)
class Repeat:
    """The registers and label of a :func:`repeated` region, as the kernel declares them."""

    times: str  # u64: this thread's timestamp slots (advanced by 16 bytes per repetition)
    label: str  # loop label
    pred: str  # loop predicate
    smid32: str  # u32 scratch for %smid
    smid64: str  # u64 scratch for %smid
    rep: str = "%rep"  # u32 repetition counter
    t0: str = "%t0"
    t1: str = "%t1"
    nounroll: bool = False  # an explicit .pragma "nounroll" on the loop


def repeated(body: list[str], count: str, r: Repeat, after: list[str] | None = None) -> list[str]:
    """``body`` timed ``count`` times (a literal or a register); ``after``: the kernel's own
    instructions after each repetition's end clock (folding results, not timed)."""
    return [
        f"  mov.u32 {r.rep}, 0;",
        f"{r.label}:",
        *(['  .pragma "nounroll";'] if r.nounroll else []),
        "  bar.sync 0;",
        *timed(body, r.t0, r.t1),
        *(after or []),
        f"  st.global.u64 [{r.times}], {r.t0};",
        f"  st.global.u64 [{r.times}+8], {r.t1};",
        f"  add.u64 {r.times}, {r.times}, 16;",
        f"  add.u32 {r.rep}, {r.rep}, 1;",
        f"  setp.lt.u32 {r.pred}, {r.rep}, {count};",
        f"  @{r.pred} bra {r.label};",
        f"  mov.u32 {r.smid32}, %smid;",
        f"  cvt.u64.u32 {r.smid64}, {r.smid32};",
        f"  st.global.u64 [{r.times}], {r.smid64};",
    ]
