"""The timed kernel of one validation loop (``predict --validate``), and the check that the loop
in its cubin is the loop that is predicted.

A loop body (PTX lines) becomes ``ITERS`` trips of a loop that ptxas is told not to unroll,
and that loop is the whole region timed by ``kernel/timing.py``'s repeated region (all warps of
the SM released together; ``REPS`` repetitions, the first one, with a cold instruction cache,
dropped). Cycles per iteration of a warp = its region's cycles / ``ITERS`` (the loop's entry and
exit, a few instructions, are 1/``ITERS`` of it). Parameters ``(u64 in, u64 out, u64 times)``
as ``Device.run`` passes them: ``in`` holds the kernel's inputs (initial values, data arrays)
and then the per-SM counters, ``out`` gets the loop's results (``n_sink`` u64 per thread), so
nothing the loop computes is dead.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudissect.kernel.ptx import RUN_PROLOGUE, Kernel
from gpudissect.kernel.sass import SassInstr
from gpudissect.kernel.timing import Repeat, SmSync, repeated, row_words
from gpudissect.predict.loops import Loop, branch_target, innermost_loops

ITERS = 1024  # trips of the loop in one timed region
REPS = 3  # repetitions of the region per launch; the first (cold) is dropped
REPEAT = Repeat(times="%tp", label="$Lrep", pred="%loop", smid32="%sm", smid64="%toff", nounroll=True,
                pin_start=True)  # no R2UR of the start clock in the region (kernel/timing.py)
LOOP_LABEL = "$Lpv"


@dataclass(frozen=True)
class LoopSpec:
    """One validation loop, in PTX: declarations, set-up before the timed region (may use
    ``%in`` (global u64), ``%outp`` (this thread's sink row), ``%gt`` (global thread id),
    ``%lane``, ``%ti`` (thread in block), ``%smb`` (u32 shared-memory base when ``smem``)),
    the loop body, and the registers whose final values are stored (with their st type)."""

    name: str
    category: str
    decls: tuple[str, ...]
    setup: tuple[str, ...]
    body: tuple[str, ...]
    sinks: tuple[tuple[str, str], ...]  # (register, st.global type: b16/b32/b64/f32 ...)
    inputs: tuple[int, ...] = ()  # u64 words of the 'in' buffer
    smem: int = 0  # static shared memory bytes per block
    meta: tuple[tuple[str, str], ...] = ()  # what generated it (mix, pattern, seed)
    smem_align: int = 16  # alignment of the shared buffer (1024: wgmma operand tiles)
    post: tuple[str, ...] = ()  # after the timed region, before the sinks are stored
    arch_specific: bool = False  # built for the architecture-specific target (wgmma)


def kernel_of(spec: LoopSpec, header: str) -> Kernel:
    """The timed kernel of ``spec`` (see the module's text)."""
    loop = [
        "  mov.u32 %pv_it, 0;",
        f"{LOOP_LABEL}:",
        '  .pragma "nounroll";',
        *spec.body,
        "  add.u32 %pv_it, %pv_it, 1;",
        f"  setp.lt.u32 %pv_p, %pv_it, {ITERS};",
        f"  @%pv_p bra {LOOP_LABEL};",
    ]
    smem = [f"  .shared .align {spec.smem_align} .b8 pv_smem[{spec.smem}];", "  mov.u32 %smb, pv_smem;"] if spec.smem else []
    store = [f"  st.global.{t} [%outp+{8 * i}], {r};" for i, (r, t) in enumerate(spec.sinks)]
    n_in = max(len(spec.inputs), 1)
    entry = "\n".join([
        f"// gpudissect predict --validate: {spec.category} {spec.name}",
        f".visible .entry {spec.name}(.param .u64 p_in, .param .u64 p_out, .param .u64 p_times)",
        "{",
        "  .reg .b64 %in, %outp, %tp, %t0, %t1, %toff, %sync;",
        "  .reg .b32 %ti, %nt, %ct, %gt, %gw, %rep, %sm, %lane, %smb, %pv_it;",
        "  .reg .pred %loop, %pv_p;",
        *spec.decls,
        *RUN_PROLOGUE,
        "  shr.u32 %gw, %gt, 5;",
        "  mov.u32 %lane, %laneid;",
        f"  mul.wide.u32 %toff, %gw, {8 * row_words(REPS)};",
        "  add.u64 %tp, %tp, %toff;",
        f"  mul.wide.u32 %toff, %gt, {8 * max(len(spec.sinks), 1)};",
        "  add.u64 %outp, %outp, %toff;",
        *smem,
        *spec.setup,
        f"  add.u64 %sync, %in, {8 * n_in};",  # the per-SM counters follow the inputs
        *repeated(loop, str(REPS), REPEAT, keep=REPS, sync=SmSync("%sync")),
        *spec.post,
        *store,
        "  ret;",
        "}",
        "",
    ])
    return Kernel(name=spec.name, header=header, entry=entry, variant=spec.name, measure="loop",
                  warps=0, reps=REPS, inputs=list(spec.inputs) or [0], n_sink=max(len(spec.sinks), 1),
                  smem=0, meta={"category": spec.category, **dict(spec.meta)})


class LoopNotFound(ValueError):
    """The cubin's timed region does not hold exactly the one loop that is predicted."""


def timed_loop(name: str, instrs: list[SassInstr], region: list[SassInstr], labels: dict[str, int]) -> Loop:
    """The innermost loop inside the timed region: there must be exactly one, and no other
    backward branch in the region (the loop is the whole of the timed work)."""
    if not region:
        raise LoopNotFound(f"{name}: empty timed region")
    lo, hi = region[0].offset, region[-1].offset
    inside = [lp for lp in innermost_loops(name, instrs, labels) if lo <= lp.start and lp.end <= hi]
    if len(inside) != 1:
        raise LoopNotFound(f"{name}: {len(inside)} innermost loops in the timed region, expected 1")
    lp = inside[0]
    if lp.refused:
        raise LoopNotFound(lp.refused)
    back = [i for i in region if not lp.start <= i.offset <= lp.end
            and (t := branch_target(i, labels)) is not None and t < i.offset]
    if back:
        raise LoopNotFound(f"{name}: another backward branch in the timed region at {back[0].offset:#06x}")
    ops = [o for i in lp.body for o in i.operands]
    if f"{ITERS:#x}" not in ops or "0x1" not in ops:
        raise LoopNotFound(f"{name}: the loop does not count to {ITERS:#x} in steps of 1 (unrolled?)")
    return lp

