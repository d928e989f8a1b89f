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
(``2 * keep + 1`` u64). The kernel points ``Repeat.times`` at its warp's row. With
``Repeat.pin_start`` the start clock enters the shift register through a shuffle from lane 0
(the same value: a warp reads one clock): a clock value is warp-uniform, and without it ptxas
(13.0, for Hopper) moves the start clock into uniform registers with two ``R2UR`` inside the timed
region, at the region's start in one length and near its end in another (a few cycles of
difference between the kernels of a slope: one-warp slopes below one issue per cycle,
throughput slopes above the issue limit); SHFL takes no uniform register, so ptxas keeps the
value where the clock read put it (and drops the shuffle of a value it knows uniform). Where
the loop holds divergent code of the kernel's own, the shuffle's reconvergence puts a BSSY into
the region: those kernels leave it off.

Several blocks on one SM (more warps than a block holds) run their repetitions in step only
with :class:`SmSync`: before each repetition, after the block's barrier, warp 0 of each block
counts its block in at a per-SM counter in global memory and waits (outside the timed region)
until every block of the SM has come, or a deadline passes; then the block's barrier releases
its warps. Without it the blocks of an SM drift a repetition apart, and an SM's repetition
holds one block's work with the other's missing.
"""

from __future__ import annotations

import re
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
    # the start clock into the shift register through a shuffle from lane 0 (the module's text:
    # no R2UR of it inside the timed region); for kernels whose loop has no divergent code of
    # their own (the shuffle's reconvergence would put a BSSY into the region)
    pin_start: bool = False


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
    if r.pin_start:  # the start clock through a shuffle (see the module's text)
        shift += [f"  mov.b64 {{%tlo, %thi}}, {r.t0};",
                  "  shfl.sync.idx.b32 %tlo, %tlo, 0, 31, -1;",
                  "  shfl.sync.idx.b32 %thi, %thi, 0, 31, -1;",
                  f"  mov.b64 {ts[n - 2]}, {{%tlo, %thi}};"]
    else:
        shift += [f"  mov.b64 {ts[n - 2]}, {r.t0};"]
    shift += [f"  mov.b64 {ts[n - 1]}, {r.t1};"]
    return [
        "  {",
        f"  .reg .b64 %ts<{n}>;",
        "  .reg .b32 %tlane;",
        *(["  .reg .b32 %tlo, %thi;"] if r.pin_start else []),
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


# ----------------------------------------------------------------- the row's layout
# A warp's row (``row_words(keep)`` u64) as :func:`repeated` writes it: the kept repetitions
# oldest first, each its start then its end clock, then ``%smid``. ``tests/test_timing.py``
# checks these against the stores :func:`repeated` emits and :func:`cuda_repeated` emits them.
def start_word(k: int) -> int:
    """The word of a row holding the start clock of kept repetition ``k`` (0: the oldest)."""
    return 2 * k


def end_word(k: int) -> int:
    """The word of a row holding the end clock of kept repetition ``k``."""
    return 2 * k + 1


def smid_word(keep: int) -> int:
    """The word of a row holding the warp's ``%smid``."""
    return 2 * keep


# ----------------------------------------------------------------- the same in CUDA C++
def _cuda_asm(ptx: str) -> str:
    """A PTX instruction (operands ``%0``, ``%1``...) as the text of an inline asm statement:
    every other ``%`` (the special registers') doubled."""
    return re.sub(r"%(?!\d)", "%%", ptx.strip())


def cuda_clock_read(out: str, pinned: tuple[str, ...] = ()) -> str:
    """:func:`clock_read` as CUDA C++: the same PTX instruction (``mov.u64 %0, %clock64``, SASS
    ``CS2R Rx, SR_CLOCKLO``) in a volatile inline asm into the u64 ``out``. ``pinned``: asm
    operands (``'"+f"(x0)'``) of the work, read and written by the read as far as nvcc knows,
    so that nvcc moves none of the work across it; the read adds no instruction."""
    ops = "".join(f", {p}" for p in pinned)
    return f'asm volatile("{_cuda_asm(clock_read("%0", ""))}" : "=l"({out}){ops} :: "memory");'


def _ptx_barriers() -> int:
    """The barriers before each repetition of :func:`repeated` (without ``SmSync``)."""
    r = Repeat(times="%tp", label="$L", pred="%p", smid32="%s", smid64="%s64")
    return sum(1 for line in repeated([], "1", r, 1) if line.strip().startswith("bar.sync"))


def cuda_repeated(body: list[str], count: int, keep: int, times: str,
                  pinned: tuple[str, ...] = (), indent: str = "  ") -> list[str]:
    """:func:`repeated` as CUDA C++ (for a kernel nvcc builds): ``body`` (C++ statements)
    timed ``count`` times (at most ``keep``) in a loop nvcc must not unroll, the block's
    warps released by as many barriers (``__syncthreads``) as :func:`repeated` meets, the
    region delimited by :func:`cuda_clock_read` (``pinned``: the work's variables, see there),
    the timestamps in a shift register until after the loop, then lane 0 (``%laneid``) of
    each warp writes its row at ``times`` (a ``unsigned long long*`` expression: the warp's
    row) in the layout of :func:`start_word`, :func:`end_word` and :func:`smid_word`. No
    :class:`SmSync` (one block per SM). The repetition counter's step reads the end clock (it
    adds ``t1_ >> 63``: 0 for 2^63 cycles): without that, ptxas (CUDA 13.0, for Hopper) computes
    the step and the loop's test inside the timed region, before the work."""
    if not 1 <= count <= keep:
        raise ValueError(f"count {count} outside 1..keep ({keep})")
    n = 2 * keep
    i2 = indent * 2
    # ts: the row's timestamps in registers, in the row's layout
    shift = [f"{i2}ts_[{w(k)}] = ts_[{w(k + 1)}];" for k in range(keep - 1) for w in (start_word, end_word)]
    shift += [f"{i2}ts_[{start_word(keep - 1)}] = t0_;", f"{i2}ts_[{end_word(keep - 1)}] = t1_;"]
    stores = [f"{i2}tp_[{w(k)}] = ts_[{w(k)}];" for k in range(keep) for w in (start_word, end_word)]
    return [
        f"{indent}{{",
        f"{indent}unsigned long long ts_[{n}] = {{0}};",
        f"{indent}unsigned rep_ = 0;",
        f"{indent}#pragma unroll 1",
        f"{indent}do {{",
        *[f"{i2}__syncthreads();" for _ in range(_ptx_barriers())],
        f"{i2}unsigned long long t0_, t1_;",
        f"{i2}{cuda_clock_read('t0_', pinned)}",
        *[f"{i2}{line}" for line in body],
        f"{i2}{cuda_clock_read('t1_', pinned)}",
        *shift,
        f"{i2}rep_ += 1u + (unsigned)(t1_ >> 63);",
        f"{indent}}} while (rep_ < {count}u);",
        f"{indent}unsigned lane_;",
        f'{indent}asm volatile("{_cuda_asm("mov.u32 %0, %laneid;")}" : "=r"(lane_));',
        f"{indent}if (lane_ == 0) {{",
        f"{i2}unsigned long long* tp_ = {times};",
        *stores,
        f"{i2}unsigned sm_;",
        f'{i2}asm volatile("{_cuda_asm("mov.u32 %0, %smid;")}" : "=r"(sm_));',
        f"{i2}tp_[{smid_word(keep)}] = sm_;",
        f"{indent}}}",
        f"{indent}}}",
    ]


# ----------------------------------------------------------------- block stamps of a long launch
# A timing kernel run for a long time (a sustained run) can measure the SM clock it ran at
# itself: thread 0 of each block reads ``%globaltimer`` and the 32-bit ``%clock`` just before the
# repetition loop and again just after it (outside every timed region: no 64-bit ``%clock64``
# read, which delimits the timed region in the SASS, kernel/region.py; a 32-bit read is not one)
# and stores them after the warps' rows (bench/clock.py stamp_clock reads them).
STAMP_WORDS = 5  # per block: clock at start, clock at end (32-bit), globaltimer at start, at end, smid


def stamp_ptx(times: str, row_bytes: int, end: bool) -> list[str]:
    """PTX of one stamp (``end``: after the loop, else before it) of thread 0 of the block, into
    ``times`` (u64 register: the rows' base) + (warps of the grid x ``row_bytes``) + block x
    ``8 * STAMP_WORDS``: (clock0, clock1, globaltimer0, globaltimer1, smid) u64 words."""
    out = [
        "  {",
        "  .reg .b32 %stk<4>;",
        "  .reg .b64 %std<3>;",
        "  .reg .pred %stp;",
        "  mov.u32 %stk0, %tid.x;",
        "  setp.eq.u32 %stp, %stk0, 0;",
        "  mov.u32 %stk1, %nctaid.x;",
        "  mov.u32 %stk2, %ntid.x;",
        "  mul.lo.u32 %stk1, %stk1, %stk2;",
        "  shr.u32 %stk1, %stk1, 5;",
        f"  mul.wide.u32 %std0, %stk1, {row_bytes};",
        f"  add.u64 %std0, %std0, {times};",
        "  mov.u32 %stk1, %ctaid.x;",
        f"  mul.wide.u32 %std1, %stk1, {8 * STAMP_WORDS};",
        "  add.u64 %std0, %std0, %std1;",
    ]
    if not end:  # globaltimer first, clock last: the clock span lies inside the globaltimer span
        out += ["  mov.u64 %std1, %globaltimer;",
                "  mov.u32 %stk3, %clock;",
                "  cvt.u64.u32 %std2, %stk3;",
                "  @%stp st.global.u64 [%std0+16], %std1;",
                "  @%stp st.global.u64 [%std0], %std2;"]
    else:
        out += ["  mov.u32 %stk3, %clock;",
                "  mov.u64 %std1, %globaltimer;",
                "  cvt.u64.u32 %std2, %stk3;",
                "  @%stp st.global.u64 [%std0+8], %std2;",
                "  @%stp st.global.u64 [%std0+24], %std1;",
                "  mov.u32 %stk3, %smid;",
                "  cvt.u64.u32 %std2, %stk3;",
                "  @%stp st.global.u64 [%std0+32], %std2;"]
    return out + ["  }"]
