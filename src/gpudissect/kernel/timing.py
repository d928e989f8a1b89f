"""The one place that times a region of a kernel: how the clock is read around the work, and
where the timestamps go. Every suite's generator builds its timed region from these pieces,
and ``kernel/region.py`` finds the same two clock reads in the SASS, so a correction to the
timing method is made here once for every suite.

Two shapes exist:

* :func:`timed`: one region, ``body`` between two 64-bit ``%clock64`` reads (the body may be a
  loop of its own: the memory chases and the behaviour probes time ``iters`` trips);
* :func:`repeated`: the region repeated ``count`` times in a loop that is never unrolled, all
  warps of the block released together before each repetition by two barriers in a row (on
  the H100 a warp runs on past a barrier and blocks only at the next one: behind one barrier,
  warps that arrive early run their region before a late one comes); the first repetition
  runs with a cold instruction cache and is dropped by the analysis.

Nothing of the harness runs between the two clock reads of a repetition: the timestamps stay in
registers (a shift register of the last ``keep`` repetitions) and lane 0 of each warp writes
them after the loop, one row per warp: (start, end) per kept repetition, then ``%smid``
(``2 * keep + 1`` u64). The kernel points ``Repeat.times`` at its warp's row.

Several blocks on one SM (more warps than a block holds) run their repetitions in step only
with :class:`SmSync`: before each repetition, after the block's barrier, warp 0 of each block
counts its block in at a per-SM counter in global memory and waits (outside the timed region)
until every block of the SM has come, or a deadline passes; then the block's barrier releases
its warps. Without it the blocks of an SM drift a repetition apart, and an SM's repetition
holds one block's work with the other's missing.
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


@dataclass(frozen=True)
class SmSync:
    """A per-SM rendezvous of the blocks of an SM before each repetition. ``counters``: a u64
    register holding the address of zeroed u32 words indexed by ``%smid`` (at least ``%nsmid``
    of them, zeroed before each launch). The blocks per SM: the grid over ``%nsmid``, at least
    one. ``deadline``: SM cycles a block waits at most (an SM given fewer blocks than the rest)."""

    counters: str
    deadline: int = 200_000


def _sm_sync(s: SmSync, rep: str) -> tuple[list[str], list[str]]:
    """(set-up before the loop, wait after each repetition's block barrier). Warp 0 of each
    block waits, all its lanes together (a lane that reached the block barrier while another
    of its warp still waited would count its warp in early): each lane adds one to the SM's
    counter and the warp polls it until 32 x the blocks per SM x the repetitions so far have
    come. Only 32-bit clock reads (``%clock``) for the deadline: the 64-bit reads delimit the
    timed region."""
    setup = [
        "  .reg .b64 %scnt;",
        "  .reg .b32 %ssm, %snb, %snsm, %sbps, %starget, %sseen, %sclk0, %sclk;",
        "  .reg .pred %swarp0, %sdone;",
        "  mov.u32 %ssm, %smid;",
        "  mul.wide.u32 %scnt, %ssm, 4;",
        f"  add.u64 %scnt, %scnt, {s.counters};",
        "  mov.u32 %snb, %nctaid.x;",
        "  mov.u32 %snsm, %nsmid;",
        "  div.u32 %sbps, %snb, %snsm;",
        "  max.u32 %sbps, %sbps, 1;",
        "  shl.b32 %sbps, %sbps, 5;",  # 32 lanes of warp 0 per block
        "  mov.u32 %sseen, %tid.x;",
        "  setp.lt.u32 %swarp0, %sseen, 32;",
    ]
    wait = [
        "  @!%swarp0 bra $Lsync_done;",
        "  red.global.add.u32 [%scnt], 1;",
        f"  add.u32 %starget, {rep}, 1;",
        "  mul.lo.u32 %starget, %starget, %sbps;",
        "  mov.u32 %sclk0, %clock;",
        "$Lsync_spin:",
        "  ld.volatile.global.u32 %sseen, [%scnt];",
        "  setp.ge.u32 %sdone, %sseen, %starget;",
        "  @%sdone bra $Lsync_done;",
        "  mov.u32 %sclk, %clock;",
        "  sub.u32 %sclk, %sclk, %sclk0;",
        f"  setp.gt.u32 %sdone, %sclk, {s.deadline};",
        "  @%sdone bra $Lsync_done;",
        "  bra $Lsync_spin;",
        "$Lsync_done:",
        "  bar.sync 0;",
    ]
    return setup, wait


def row_words(keep: int) -> int:
    """u64 words per warp that :func:`repeated` writes."""
    return 2 * keep + 1


def repeated(body: list[str], count: str, r: Repeat, keep: int,
             after: list[str] | None = None, sync: SmSync | None = None) -> list[str]:
    """``body`` timed ``count`` times (a literal or a register, at most ``keep``: the
    timestamps of the last ``keep`` repetitions are kept); ``after``: the kernel's own
    instructions after each repetition's end clock (folding results, not timed); ``sync``:
    the blocks of an SM start each repetition together (see the module's text)."""
    setup, wait = _sm_sync(sync, r.rep) if sync is not None else ([], [])
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
        *setup,
        f"  mov.u32 {r.rep}, 0;",
        f"{r.label}:",
        *(['  .pragma "nounroll";'] if r.nounroll else []),
        "  bar.sync 0;",
        *wait,
        # a second barrier: a warp passes a barrier it arrives at and blocks only at the next
        # one until the first is complete (measured on the H100: with one barrier, warps that
        # arrived early ran their whole region before a late warp came); behind two, every warp
        # starts after all have arrived at the last but one
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
