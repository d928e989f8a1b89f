"""The one place that times a region of a kernel: how the clock is read around the work, and
where the timestamps go. Every suite's generator builds its timed region from these pieces,
and ``kernel/region.py`` finds the same two clock reads in the SASS, so a correction to the
timing method is made here once for every suite.

Two shapes exist:

* :func:`timed`: one region, ``body`` between two 64-bit ``%clock64`` reads (the body may be a
  loop of its own: the memory chases and the behaviour probes time ``iters`` trips);
* :func:`repeated`: the region repeated ``count`` times in a loop that is never unrolled, all
  warps of the block released together by a barrier before each repetition; the first
  repetition runs with a cold instruction cache and is dropped by the analysis.

Nothing of the harness runs between the two clock reads of a repetition: the timestamps stay in
registers (a shift register of the last ``keep`` repetitions) and lane 0 of each warp writes
them after the loop, one row per warp: (start, end) per kept repetition, then ``%smid``
(``2 * keep + 1`` u64). The kernel points ``Repeat.times`` at its warp's row.
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

    times: str  # u64: this warp's row of timestamps (row_words(keep) u64)
    label: str  # loop label
    pred: str  # loop predicate
    smid32: str  # u32 scratch for %smid
    smid64: str  # u64 scratch for %smid
    rep: str = "%rep"  # u32 repetition counter
    t0: str = "%t0"
    t1: str = "%t1"
    nounroll: bool = False  # an explicit .pragma "nounroll" on the loop


def row_words(keep: int) -> int:
    """u64 words per warp that :func:`repeated` writes."""
    return 2 * keep + 1


def repeated(body: list[str], count: str, r: Repeat, keep: int,
             after: list[str] | None = None) -> list[str]:
    """``body`` timed ``count`` times (a literal or a register, at most ``keep``: the
    timestamps of the last ``keep`` repetitions are kept); ``after``: the kernel's own
    instructions after each repetition's end clock (folding results, not timed)."""
    n = 2 * keep
    ts = [f"%ts{i}" for i in range(n)]
    shift = [f"  mov.b64 {ts[i]}, {ts[i + 2]};" for i in range(n - 2)]
    shift += [f"  mov.b64 {ts[n - 2]}, {r.t0};", f"  mov.b64 {ts[n - 1]}, {r.t1};"]
    return [
        "  {",
        f"  .reg .b64 %ts<{n}>;",
        "  .reg .b32 %tlane;",
        "  .reg .pred %tlead;",
        *[f"  mov.b64 {t}, 0;" for t in ts],
        f"  mov.u32 {r.rep}, 0;",
        f"{r.label}:",
        *(['  .pragma "nounroll";'] if r.nounroll else []),
        "  bar.sync 0;",
        *timed(body, r.t0, r.t1),
        *(after or []),
        *shift,
        f"  add.u32 {r.rep}, {r.rep}, 1;",
        f"  setp.lt.u32 {r.pred}, {r.rep}, {count};",
        f"  @{r.pred} bra {r.label};",
        "  mov.u32 %tlane, %laneid;",
        "  setp.eq.u32 %tlead, %tlane, 0;",
        *[f"  @%tlead st.global.u64 [{r.times}+{8 * i}], {t};" for i, t in enumerate(ts)],
        f"  mov.u32 {r.smid32}, %smid;",
        f"  cvt.u64.u32 {r.smid64}, {r.smid32};",
        f"  @%tlead st.global.u64 [{r.times}+{8 * n}], {r.smid64};",
        "  }",
    ]
