"""PTX of the sync suite: atomics under contention, barriers, fences, and the kernels whose
launches are timed.

Timed kernels use ``kernel.timing.repeated`` (``REPS`` repetitions, the first dropped; lane 0
of each warp writes its row of (start, end) per repetition and ``%smid``, ``ROW`` u64 per warp,
rows in global warp order). The work under test is fully unrolled between the two clock reads;
a region holds ``length`` instances per thread, and every measure is a slope between two
lengths (the clock reads and the pipeline's fill and drain cancel). Kernels:

* ``atom_{space}_{op}_{mode}_n{L}(u64 buf, u64 in, u64 times)``: every block meets the others
  (:func:`grid_sync`) before each repetition; each thread runs ``L`` atomics
  (``OPS[op]``) on the address its contention ``mode`` gives it (``GLOBAL_MODES`` /
  ``SHARED_MODES``); returned values are folded into an accumulator in groups of ``GROUP``
  (ptxas reorders them: it keeps as many atomics in flight as ``MAXNREG`` registers allow,
  30-40 per thread) and the last are folded before the end clock: the region holds every
  atomic's completion. ``in[0]``: the operand
  (u64 bit pattern; for CAS the compare value, ``in[1]`` the new value); ``in[2]``: a zero
  (addresses ptxas cannot prove uniform); ``in[3]``: the grid rendezvous counter. ``red`` ops return
  nothing (their completion is not waited for; the slope is their sustained issue rate).
* ``lat_{space}_{op}_n{L}(u64 buf, u64 in, u64 times)``: one dependent chain per thread: the
  returned value (0: the memory is zero and the operand 0) is added to the next address; global
  chains start ``in[3]`` bytes into the buffer (one 128-B line per warp), and the placement probe
  ``PLACEMENT_OP`` (a dependent ld.global.cg chain) runs on the same lines.
* ``bar_{kind}_n{L}(u64 out, u32 n, u64 times)``: ``L`` barriers per warp (``BARRIERS``);
  ``n`` is the participating thread count of the kinds that take one.
* ``fence_{kind}_{st|nost}_n{L}(u64 buf, u64 times)``: ``L`` fences (``FENCES``), each after a
  store of its own (``st``) or alone (``nost``).
* ``launch_empty()``, ``pdl_primary()``, ``pdl_secondary()``: the launch-cost kernels (no
  parameters; nothing timed inside).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.timing import Repeat, repeated, row_words

REPS = 3  # repetitions of each timed region in a launch; the first (cold) is dropped
REPEAT = Repeat(times="%tp", label="$Lrep", pred="%loop", smid32="%sm", smid64="%toff", nounroll=True)
# the idle warps' region of bar.sync.n: as many block barriers per repetition, nothing timed
IDLE = Repeat(times="%tp", label="$Lidle_rep", pred="%loop", smid32="%sm", smid64="%toff", nounroll=True)
ROW = row_words(REPS)
GROUP = 8  # atomics per group of result registers (two groups in flight per thread)
LINE = 128  # bytes between the addresses of modes that give each its own L2 line
MAXNREG = 64  # 1024-thread blocks need <= 64 registers per thread


@dataclass(frozen=True)
class AtomOp:
    ptx: str  # the PTX opcode without the state space: "atom.add.u32" -> "atom.{sp}.add.u32"
    size: int  # operand bytes
    ret: bool  # returns a value (atom) or not (red)
    cas: bool = False


OPS: dict[str, AtomOp] = {
    "atom.add.u32": AtomOp("atom.{sp}.add.u32", 4, True),
    "red.add.u32": AtomOp("red.{sp}.add.u32", 4, False),
    "atom.add.f32": AtomOp("atom.{sp}.add.f32", 4, True),
    "atom.cas.b32": AtomOp("atom.{sp}.cas.b32", 4, True, cas=True),
    "atom.add.u64": AtomOp("atom.{sp}.add.u64", 8, True),
    "atom.add.f64": AtomOp("atom.{sp}.add.f64", 8, True),
}
GLOBAL_OPS = tuple(OPS)
SHARED_OPS = ("atom.add.u32", "red.add.u32", "atom.add.f32", "atom.cas.b32")
LAT_GLOBAL = ("atom.add.u32", "atom.cas.b32", "atom.add.f32", "atom.add.u64")
# The L2 placement probe of the global latency chains: a dependent ld.global.cg chain on the same
# line from the same SM (an L2 hit in the line's partition: near or far for that SM); not an
# atomic, so not in OPS (no throughput sweep of its own)
PLACEMENT_OP = "ld.cg.u32"
LAT_OPS: dict[str, AtomOp] = {**OPS, PLACEMENT_OP: AtomOp("ld.{sp}.cg.u32", 4, True)}
LAT_SHARED = ("atom.add.u32", "atom.cas.b32", "atom.add.f32")

# contention mode -> (description, byte offset of the thread's address as PTX over the u32
# registers %gw (global warp), %cta, %gt (global thread), %lane, %w (warp in block), %sz)
GLOBAL_MODES: dict[str, str] = {
    "one": "all lanes of all warps on one address",
    "uniform": "one address, provably uniform: ptxas makes it one atomic per warp",
    "warp": "one address per warp (each in its own 128-B line)",
    "block": "one address per block (each in its own 128-B line)",
    "lane": "32 addresses in one line (two for 8-B ops), shared by all warps",
    "distinct": "every thread its own address, a warp's in one line",
    "strided": "every thread its own address, each in its own 128-B line",
}
SHARED_MODES: dict[str, str] = {
    "one": "all lanes of the block on one address",
    "warp": "one address per warp",
    "distinct": "every thread its own word, no bank conflict",
    "conflict": "every thread its own word, the 32 lanes of a warp in one bank",
}
SMEM_BYTES = 32 * 32 * 8  # shared words the shared modes touch (32 warps x 32 lanes, 8-B stride)


def _offset(space: str, mode: str, size: int) -> list[str]:
    """%off (u32): the thread's byte offset for ``mode``."""
    # %z: a zero loaded from memory: an address ptxas cannot prove uniform across the warp
    # (a provably uniform one it turns into one atomic per warp: see mode "uniform")
    if space == "global":
        expr = {"one": ["mul.lo.u32 %off, %lane, %z;"],
                "uniform": ["mov.u32 %off, 0;"],
                "warp": [f"mul.lo.u32 %off, %gw, {LINE};"],
                "block": [f"mul.lo.u32 %off, %cta, {LINE};", "mad.lo.u32 %off, %lane, %z, %off;"],
                "lane": [f"mul.lo.u32 %off, %lane, {size};"],
                "distinct": [f"mul.lo.u32 %off, %gt, {size};"],
                "strided": [f"mul.lo.u32 %off, %gt, {LINE};"]}[mode]
    else:
        expr = {"one": ["mul.lo.u32 %off, %lane, %z;"],
                "warp": [f"mul.lo.u32 %off, %w, {size};"],
                "distinct": ["mad.lo.u32 %off, %w, 32, %lane;", f"mul.lo.u32 %off, %off, {size};"],
                "conflict": ["mad.lo.u32 %off, %lane, 32, %w;", "mul.lo.u32 %off, %off, 4;"]}[mode]
    return ["  " + e for e in expr]


def _types(op: AtomOp) -> tuple[str, str]:
    """(register type, PTX register-declaration type) of the operand."""
    if op.ptx.endswith("f32"):
        return "f32", ".f32"
    if op.ptx.endswith("f64"):
        return "f64", ".f64"
    return ("b64", ".b64") if op.size == 8 else ("b32", ".b32")


def _setup(space: str) -> list[str]:
    return ["  mov.u32 %ti, %tid.x;",
            "  mov.u32 %nt, %ntid.x;",
            "  mov.u32 %cta, %ctaid.x;",
            "  mad.lo.u32 %gt, %cta, %nt, %ti;",
            "  shr.u32 %gw, %gt, 5;",
            "  shr.u32 %w, %ti, 5;",
            "  mov.u32 %lane, %laneid;",
            "  ld.global.u32 %z, [%zp];",
            f"  mul.wide.u32 %toff, %gw, {8 * ROW};",
            "  add.u64 %tp, %tp, %toff;"]


_REGS = ["  .reg .b64 %tp, %bp, %ip, %zp, %t0, %t1, %toff, %a, %o64, %acc64;",
         "  .reg .b32 %ti, %nt, %cta, %gt, %gw, %w, %lane, %rep, %sm, %off, %acc, %z;",
         "  .reg .pred %loop, %pm;"]


def atom_name(space: str, op: str, mode: str, length: int) -> str:
    return f"atom_{space[0]}_{op.replace('.', '_')}_{mode}_n{length}"


def lat_name(space: str, op: str, length: int) -> str:
    return f"lat_{space[0]}_{op.replace('.', '_')}_n{length}"


def _addr(space: str) -> list[str]:
    """%a: the thread's address (global: buf + %off; shared: smem + %off)."""
    if space == "global":
        return ["  cvt.u64.u32 %o64, %off;", "  add.u64 %a, %bp, %o64;"]
    return ["  cvt.u64.u32 %o64, %off;", "  mov.u64 %a, smem;", "  add.u64 %a, %a, %o64;"]


def _operands(op: AtomOp) -> list[str]:
    """%v (the operand; CAS: the compare value) and %nv (CAS: the new value) from ``in``."""
    w = 8 * op.size
    return [f"  ld.global.u{w} %vb, [%ip];", f"  ld.global.u{w} %nb, [%ip+8];",
            f"  mov.b{w} %v, %vb;", f"  mov.b{w} %nv, %nb;"]


def _atom_ins(op: AtomOp, space: str, dst: str | None) -> str:
    ins = op.ptx.format(sp="global" if space == "global" else "shared")
    if ins.startswith("ld."):  # the placement probe's load (PLACEMENT_OP)
        return f"  {ins} {dst}, [%a];"
    if not op.ret:
        return f"  {ins} [%a], %v;"
    if op.cas:
        return f"  {ins} {dst}, [%a], %v, %nv;"
    return f"  {ins} {dst}, [%a], %v;"


def _fold(op: AtomOp, regs: list[str]) -> list[str]:
    """Fold returned values into the accumulator (bits as integers: no FP rounding question)."""
    out = []
    for r in regs:
        if op.size == 8:
            out += [f"  mov.b64 %fb64, {r};", "  add.u64 %acc64, %acc64, %fb64;"]
        else:
            out += [f"  mov.b32 %fb32, {r};", "  add.u32 %acc, %acc, %fb32;"]
    return out


def atom_body(op: AtomOp, space: str, length: int) -> list[str]:
    """``length`` atomics; results in two banks of GROUP registers, a bank folded just before
    it is reused and both at the end (inside the region: it ends when all have returned)."""
    if not op.ret:
        return [_atom_ins(op, space, None) for _ in range(length)]
    body: list[str] = []
    groups = -(-length // GROUP)
    pending: dict[int, list[str]] = {}
    for g in range(groups):
        bank = g % 2
        if bank in pending:
            body += _fold(op, pending.pop(bank))
        regs = [f"%r{bank}_{j}" for j in range(min(GROUP, length - g * GROUP))]
        body += [_atom_ins(op, space, r) for r in regs]
        pending[bank] = regs
    for bank in sorted(pending, key=lambda b: (b != (groups % 2), b)):
        body += _fold(op, pending[bank])
    return body


def _decls(op: AtomOp) -> list[str]:
    _, dt = _types(op)
    ib = ".b64" if op.size == 8 else ".b32"
    return [f"  .reg {dt} %v, %nv, %r0_<{GROUP}>, %r1_<{GROUP}>, %rl;",
            f"  .reg {ib} %vb, %nb;",
            "  .reg .b32 %fb32;",
            "  .reg .b64 %fb64;"]


def _entry(name: str, params: str, lines: list[str], shared: bool) -> str:
    smem = [f"  .shared .align 8 .b8 smem[{SMEM_BYTES}];"] if shared else []
    return "\n".join([f".visible .entry {name}({params})", f".maxnreg {MAXNREG}", "{", *smem, *lines, "}", ""])


def _sink(op: AtomOp) -> list[str]:
    """The accumulator stored only if it holds an impossible pattern (kept live, never written
    in practice)."""
    return ["  cvt.u64.u32 %toff, %acc;",
            "  add.u64 %acc64, %acc64, %toff;",
            "  setp.eq.u64 %pm, %acc64, 0x9E3779B97F4A7C15;",
            "  @%pm st.global.u64 [%ip+16], %acc64;"]


GRID_DEADLINE = 400_000_000  # SM cycles a block waits at most at a grid rendezvous (a safety:
# all blocks are resident; a repetition under heavy contention lasts ~30M cycles)


def grid_sync(target: str, tag: str) -> list[str]:
    """A rendezvous of every block of the grid (one block per SM, all resident), outside any
    timed region: thread 0 counts its block in at the u32 ``[%gcnt]`` and polls it until
    ``target`` (a register) blocks have come, or GRID_DEADLINE passes; the block's barriers of
    kernel/timing.py then release its warps. Every SM starts a repetition within the poll's
    latency of the others, so the chip's time for a repetition is its slowest SM's span."""
    return [f"  @!%lead0 bra $Lgs_done{tag};",
            "  red.global.add.u32 [%gcnt], 1;",
            "  mov.u32 %gc0, %clock;",
            f"$Lgs_spin{tag}:",
            "  ld.volatile.global.u32 %gseen, [%gcnt];",
            f"  setp.ge.u32 %gdone, %gseen, {target};",
            f"  @%gdone bra $Lgs_done{tag};",
            "  mov.u32 %gc1, %clock;",
            "  sub.u32 %gc1, %gc1, %gc0;",
            f"  setp.gt.u32 %gdone, %gc1, {GRID_DEADLINE};",
            f"  @%gdone bra $Lgs_done{tag};",
            f"  bra $Lgs_spin{tag};",
            f"$Lgs_done{tag}:"]


_GSYNC_SETUP = ["  .reg .b64 %gcnt;",
                "  .reg .b32 %gnb, %gtarget, %gseen, %gc0, %gc1;",
                "  .reg .pred %lead0, %gdone;",
                "  setp.eq.u32 %lead0, %ti, 0;",
                "  mov.u32 %gnb, %nctaid.x;",
                "  add.u64 %gcnt, %ip, 24;"]  # in[3]: the rendezvous counter (zero at launch)
# after repetition %rep: (%rep + 2) x the blocks have come (the first rendezvous precedes the loop)
_GSYNC_AFTER = ["  add.u32 %gtarget, %rep, 2;", "  mul.lo.u32 %gtarget, %gtarget, %gnb;",
                *grid_sync("%gtarget", "r")]


def _zero_shared(space: str, op: AtomOp) -> list[str]:
    """Shared memory holds what an earlier kernel left there: each thread zeroes its word
    before the block's first atomic (the latency chain adds each returned value to the next
    address and every CAS expects 0, as the zeroed global buffer gives them), then the block
    waits for all its threads' stores; outside any timed region."""
    if space == "global":
        return []
    w = 8 * op.size
    zero = "%z" if w == 32 else "%o64"
    return ([] if w == 32 else ["  cvt.u64.u32 %o64, %z;"]) + [f"  st.shared.b{w} [%a], {zero};", "  bar.sync 0;"]


def _prologue(op: AtomOp, space: str, mode: str) -> list[str]:
    """An atomic kernel's opening: its registers, the buffers (atomics, inputs, times), the
    zeroed word, this thread's address for ``mode`` and the operands."""
    return [
        *_REGS, *_decls(op),
        "  ld.param.u64 %bp, [p_buf];",
        "  ld.param.u64 %ip, [p_in];",
        "  ld.param.u64 %tp, [p_times];",
        "  cvta.to.global.u64 %bp, %bp;",
        "  cvta.to.global.u64 %ip, %ip;",
        "  cvta.to.global.u64 %tp, %tp;",
        "  add.u64 %zp, %ip, 16;",
        *_setup(space), *_offset(space, mode, op.size), *_addr(space), *_operands(op),
        *_zero_shared(space, op),
        "  mov.u32 %acc, 0;",
        "  mov.u64 %acc64, 0;",
    ]


def atom_kernel(header: str, space: str, opname: str, mode: str, length: int) -> Kernel:
    op = OPS[opname]
    name = atom_name(space, opname, mode, length)
    lines = [
        *_prologue(op, space, mode),
        *_GSYNC_SETUP, *grid_sync("%gnb", "0"),
        *repeated(atom_body(op, space, length), str(REPS), REPEAT, REPS, after=_GSYNC_AFTER),
        *_sink(op),
        "  ret;",
    ]
    e = _entry(name, ".param .u64 p_buf, .param .u64 p_in, .param .u64 p_times", lines, space == "shared")
    return Kernel(name, header, e, variant=f"{op.ptx.format(sp=space)}", measure="throughput", length=length,
                  warps=0, reps=REPS, meta={"space": space, "op": opname, "mode": mode})


def lat_body(op: AtomOp, space: str, length: int) -> list[str]:
    """A dependent chain: each atomic's returned value (0) is added to the next address."""
    body = []
    for _ in range(length):
        body.append(_atom_ins(op, space, "%rl"))
        if op.size == 8:
            body += ["  mov.b64 %fb64, %rl;", "  add.u64 %a, %a, %fb64;"]
        else:
            body += ["  mov.b32 %fb32, %rl;", "  cvt.u64.u32 %o64, %fb32;", "  add.u64 %a, %a, %o64;"]
    return body


def lat_kernel(header: str, space: str, opname: str, length: int) -> Kernel:
    """Global chains start at the byte offset ``in[3]`` into the buffer (the line whose L2
    placement the suite sweeps; 0: the buffer's first line)."""
    op = LAT_OPS[opname]
    name = lat_name(space, opname, length)
    line = ["  .reg .b64 %lineoff;", "  ld.global.u64 %lineoff, [%ip+24];",
            "  add.u64 %a, %a, %lineoff;"] if space == "global" else []
    lines = [
        *_prologue(op, space, "distinct"),
        *line,
        *repeated(lat_body(op, space, length), str(REPS), REPEAT, REPS),
        "  mov.b64 %acc64, %a;",
        *_sink(op),
        "  ret;",
    ]
    e = _entry(name, ".param .u64 p_buf, .param .u64 p_in, .param .u64 p_times", lines, space == "shared")
    return Kernel(name, header, e, variant=op.ptx.format(sp=space), measure="latency", length=length, warps=1,
                  reps=REPS, meta={"space": space, "op": opname})


# ----------------------------------------------------------------- barriers
# kind -> (the PTX of one step; ``{n}``: the participating-thread register; %part / %prod:
# predicates set from %w and %n; description)
BARRIERS: dict[str, tuple[list[str], str]] = {
    "bar.sync": (["  bar.sync 0;"], "bar.sync 0, all warps of the block"),
    "barrier.sync": (["  barrier.sync 0;"], "barrier.sync 0 (not .aligned), all warps"),
    "barrier.sync.aligned": (["  barrier.sync.aligned 0;"], "barrier.sync.aligned 0, all warps"),
    "bar.sync.n": (["  bar.sync 1, %n;"],
                   "bar.sync 1, n: the first n/32 warps of a 32-warp block take part (the others "
                   "run an empty region beside them)"),
    "bar.arrive+sync": (["  @%prod bar.sync 1, %n;", "  @!%prod bar.arrive 1, %n;",
                         "  @%prod bar.arrive 2, %n;", "  @!%prod bar.sync 2, %n;"],
                        "producer/consumer hand-off on named barriers 1 and 2 (half the warps each): "
                        "one step = one round trip"),
    "bar.red.popc": (["  bar.red.popc.u32 %rc, 0, %pv;"], "bar.red.popc.u32 0, all warps"),
    "bar.red.and": (["  bar.red.and.pred %qv, 0, %pv;"], "bar.red.and.pred 0, all warps"),
    "bar.red.or": (["  bar.red.or.pred %qv, 0, %pv;"], "bar.red.or.pred 0, all warps"),
}


def _bar_regions(kind: str, body: list[str]) -> list[str]:
    """The timed region of every warp; for bar.sync.n, the warps left out branch (before any
    region) to a region of their own with no work: both meet the same block barriers of the
    repetitions (kernel/timing.py), so the block stays in step."""
    if kind != "bar.sync.n":
        return repeated(body, str(REPS), REPEAT, REPS)
    return ["  @!%part bra $Lidle;", *repeated(body, str(REPS), REPEAT, REPS), "  bra $Lbar_end;",
            "$Lidle:", *repeated([], str(REPS), IDLE, REPS), "$Lbar_end:"]


def bar_name(kind: str, length: int) -> str:
    return "bar_" + kind.replace(".", "_").replace("+", "_") + f"_n{length}"


def bar_kernel(header: str, kind: str, length: int) -> Kernel:
    step, _desc = BARRIERS[kind]
    name = bar_name(kind, length)
    lines = [
        *_REGS,
        "  .reg .b32 %n, %rc, %nw;",
        "  .reg .pred %part, %prod, %pv, %qv;",
        "  ld.param.u64 %bp, [p_out];",
        "  ld.param.u32 %n, [p_n];",
        "  ld.param.u64 %tp, [p_times];",
        "  cvta.to.global.u64 %bp, %bp;",
        "  cvta.to.global.u64 %tp, %tp;",
        "  mov.u64 %zp, %bp;",
        *_setup("global"),
        "  shr.u32 %nw, %n, 5;",
        "  setp.lt.u32 %part, %w, %nw;",  # bar.sync.n: the first n/32 warps
        "  shr.u32 %nw, %nw, 1;",
        "  setp.lt.u32 %prod, %w, %nw;",  # bar.arrive+sync: the first half produce
        "  and.b32 %rc, %lane, 1;",
        "  setp.eq.u32 %pv, %rc, 0;",
        "  mov.u32 %rc, 0;",
        "  setp.ne.u32 %qv, %lane, %lane;",
        *_bar_regions(kind, step * length),
        "  selp.u32 %acc, 1, 0, %qv;",
        "  add.u32 %acc, %acc, %rc;",
        "  setp.eq.u32 %pm, %acc, 0x9E3779B9;",
        "  @%pm st.global.u32 [%bp], %acc;",
        "  ret;",
    ]
    e = _entry(name, ".param .u64 p_out, .param .u32 p_n, .param .u64 p_times", lines, False)
    return Kernel(name, header, e, variant=kind, measure="barrier", length=length, warps=0, reps=REPS,
                  meta={"kind": kind})


# ----------------------------------------------------------------- fences
FENCES = ("membar.cta", "membar.gl", "membar.sys", "fence.sc.cta", "fence.sc.gpu", "fence.sc.sys",
          "fence.acq_rel.cta", "fence.acq_rel.gpu", "fence.acq_rel.sys")


def fence_name(kind: str, store: bool, length: int) -> str:
    return "fence_" + kind.replace(".", "_") + ("_st" if store else "_nost") + f"_n{length}"


def fence_kernel(header: str, kind: str, store: bool, length: int) -> Kernel:
    name = fence_name(kind, store, length)
    step = (["  st.global.u32 [%a], %gt;"] if store else []) + [f"  {kind};"]
    lines = [
        *_REGS,
        "  ld.param.u64 %bp, [p_buf];",
        "  ld.param.u64 %tp, [p_times];",
        "  cvta.to.global.u64 %bp, %bp;",
        "  cvta.to.global.u64 %tp, %tp;",
        "  mov.u64 %zp, %bp;",
        *_setup("global"), *_offset("global", "distinct", 4), *_addr("global"),
        *repeated(step * length, str(REPS), REPEAT, REPS),
        "  ret;",
    ]
    e = _entry(name, ".param .u64 p_buf, .param .u64 p_times", lines, False)
    return Kernel(name, header, e, variant=kind, measure="fence", length=length, warps=0, reps=REPS,
                  meta={"kind": kind, "store": store})


# ----------------------------------------------------------------- launch costs
PDL_SPIN = 20_000  # SM cycles the primary kernel of a PDL pair spins (a design choice: long
# enough that the secondary's launch can hide behind it)


def launch_kernels(header: str) -> list[Kernel]:
    """``launch_empty`` (does nothing); ``pdl_primary`` (lets its dependents launch at once, then
    spins PDL_SPIN cycles); ``pdl_secondary`` (waits for the primary grid, then ends)."""
    empty = ".visible .entry launch_empty()\n{\n  ret;\n}\n"
    primary = "\n".join([
        ".visible .entry pdl_primary()", "{",
        "  .reg .b64 %c0, %c1, %end;", "  .reg .pred %p;",
        "  griddepcontrol.launch_dependents;",
        "  mov.u64 %c0, %clock64;",
        f"  add.u64 %end, %c0, {PDL_SPIN};",
        "$Lspin:",
        "  mov.u64 %c1, %clock64;",
        "  setp.lt.u64 %p, %c1, %end;",
        "  @%p bra $Lspin;",
        "  ret;", "}", ""])
    secondary = "\n".join([".visible .entry pdl_secondary()", "{", "  griddepcontrol.wait;", "  ret;", "}", ""])
    return [Kernel("launch_empty", header, empty, variant="launch", measure="launch"),
            Kernel("pdl_primary", header, primary, variant="pdl", measure="launch"),
            Kernel("pdl_secondary", header, secondary, variant="pdl", measure="launch")]
