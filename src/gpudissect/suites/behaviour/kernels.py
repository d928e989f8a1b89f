"""PTX of the behaviour probes: block residency/dispatch, warp scheduling, pipes.

Every generator returns a :class:`~gpudissect.kernel.ptx.Kernel` under the module ``header``
(``kernel.ptx.ptx_header``); the kernels of a probe kind are compiled as one module
(``kernel.build.build_module``). The timed regions are written by ``kernel.timing.repeated``:
the region is the unrolled work alone (no loop counter, branch, store or barrier of the
harness between its two clock reads), repeated ``REPS`` times, all warps of the block released
together by a barrier before each repetition; lane 0 of each warp writes its row of
(start, end) per repetition and ``%smid`` after the loop (``row_words(REPS)`` u64 per warp,
rows in global warp order). Kernels:

* ``resid_r{L}(u64 rec, u64 spin, u64 vals)``: every block records, from thread 0,
  ``rec[block*8 + 0..7] = (globaltimer start, globaltimer end, clock64 start, clock64 end,
  %smid, %nsmid, ctaid.x | ctaid.y << 32, %warpid)`` around a spin of ``spin[block]`` SM
  cycles (u32 per linear block id). ``L`` values are loaded (volatile) before the spin and
  consumed after it, so they are live through it: that raises the kernel's register count
  (the cubin's actual count is read back, never assumed).
* ``sched_pair(u64 masks, u64 wid, u64 times)``: block ``b`` runs warp ``w`` when bit ``w``
  of ``masks[b]`` (u32) is set: ``SCHED_CHAINS`` independent FFMA chains of ``SCHED_LENGTH``
  each in the timed region; the other warps only meet the barrier of each repetition.
  Lane 0 of a running warp writes its row and ``wid[warp] = %warpid`` (u64).
* ``order_c{K}_n{L}(u64 wid, u64 times)``: every warp runs ``K`` independent FFMA chains of
  ``L`` each (K = 1: one dependent chain) in the timed region; lane 0 writes its row and
  ``wid[warp] = %warpid``.
* ``pipe_{tag}_k{K}_n{L}(u64 in, u64 out, u64 times)``: ``K`` chains of each catalog variant
  of the probe (the variant's PTX template, the catalog's operand values), ``L`` steps
  interleaved (chain 0 of every part, chain 1 of every part, ...); the chains' final values go
  to ``out`` (``n_sink`` u64 per thread).
"""

from __future__ import annotations

from gpudissect.catalog.model import LD_TYPE, REG_DECL, REG_PREFIX, Variant, fill
from gpudissect.catalog.operand_values import bits_for, chain_init_spec, operand_spec
from gpudissect.kernel.ptx import RUN_PROLOGUE, Kernel
from gpudissect.kernel.timing import Repeat, clock_read, repeated, row_words, timed

REC_WORDS = 8  # u64 per block in resid kernels
REPS = 4  # repetitions of each timed region in a launch; the first (cold) is dropped
SCHED_CHAINS = 8  # a warp alone with 8 independent FFMA chains can issue every cycle
SCHED_LENGTH = 64
# the registers and label of the repeated timed region (kernel/timing.py), as declared below
REPEAT = Repeat(times="%tp", label="$Lrep", pred="%loop", smid32="%sm", smid64="%toff", nounroll=True)
ROW = row_words(REPS)  # u64 per warp that the repeated region writes
# the barriers each repetition of kernel/timing.py's repeated region meets (a warp left out of
# the timed work meets as many)
BARRIERS = sum(1 for line in repeated([], "1", REPEAT, 1) if line.strip().startswith("bar.sync"))
MAXNREG = 64  # not binding (the kernels need fewer); without it ptxas schedules moves of the
# harness's timestamp registers (R2UR) between the two clock reads of some pipe kernels


def resid_kernel(header: str, live: int) -> Kernel:
    """The residency / dispatch kernel with ``live`` extra live 32-bit values."""
    name = f"resid_r{live}"
    vdecl = [f"  .reg .b32 %v<{max(live, 1)}>;"]
    loads = [f"  ld.volatile.global.u32 %v{i}, [%vals+{4 * i}];" for i in range(live)]
    use = []
    for i in range(live):
        use.append(f"  xor.b32 %x, %v{i}, %cl;")
        use.append("  add.u32 %acc, %acc, %x;")
    e = "\n".join([
        f".visible .entry {name}(.param .u64 p_rec, .param .u64 p_spin, .param .u64 p_vals)",
        "{",
        "  .reg .b64 %rec, %spin, %vals, %g0, %g1, %c0, %c1, %cnow, %cend, %off, %w64;",
        "  .reg .b32 %ti, %bx, %by, %gx, %lin, %sm, %nsm, %cyc, %wid, %acc, %x, %cl;",
        "  .reg .pred %p0, %pl, %pm;",
        *vdecl,
        "  ld.param.u64 %rec, [p_rec];",
        "  ld.param.u64 %spin, [p_spin];",
        "  ld.param.u64 %vals, [p_vals];",
        "  cvta.to.global.u64 %rec, %rec;",
        "  cvta.to.global.u64 %spin, %spin;",
        "  cvta.to.global.u64 %vals, %vals;",
        "  mov.u64 %g0, %globaltimer;",
        *timed([
            "  mov.u32 %ti, %tid.x;",
            "  mov.u32 %bx, %ctaid.x;",
            "  mov.u32 %by, %ctaid.y;",
            "  mov.u32 %gx, %nctaid.x;",
            "  mad.lo.u32 %lin, %by, %gx, %bx;",
            "  setp.eq.u32 %p0, %ti, 0;",
            "  mul.wide.u32 %off, %lin, 4;",
            "  add.u64 %spin, %spin, %off;",
            "  ld.global.u32 %cyc, [%spin];",
            *loads,
            "  cvt.u64.u32 %cend, %cyc;",
            "  add.u64 %cend, %cend, %c0;",
            "$Lspin:",
            clock_read("%cnow"),
            "  setp.lt.u64 %pl, %cnow, %cend;",
            "  @%pl bra $Lspin;",
            "  bar.sync 0;",
        ], "%c0", "%c1"),
        "  mov.u64 %g1, %globaltimer;",
        "  cvt.u32.u64 %cl, %c1;",
        "  mov.u32 %acc, 0;",
        *use,
        "  setp.eq.u32 %pm, %acc, 0x9E3779B9;",
        "  @%pm st.global.u32 [%vals+4096], %acc;",
        "  @!%p0 bra $Ldone;",
        "  mov.u32 %sm, %smid;",
        "  mov.u32 %nsm, %nsmid;",
        "  mov.u32 %wid, %warpid;",
        f"  mul.wide.u32 %off, %lin, {8 * REC_WORDS};",
        "  add.u64 %rec, %rec, %off;",
        "  st.global.u64 [%rec], %g0;",
        "  st.global.u64 [%rec+8], %g1;",
        "  st.global.u64 [%rec+16], %c0;",
        "  st.global.u64 [%rec+24], %c1;",
        "  cvt.u64.u32 %w64, %sm;",
        "  st.global.u64 [%rec+32], %w64;",
        "  cvt.u64.u32 %w64, %nsm;",
        "  st.global.u64 [%rec+40], %w64;",
        "  cvt.u64.u32 %w64, %by;",
        "  shl.b64 %w64, %w64, 32;",
        "  cvt.u64.u32 %off, %bx;",
        "  or.b64 %w64, %w64, %off;",
        "  st.global.u64 [%rec+48], %w64;",
        "  cvt.u64.u32 %w64, %wid;",
        "  st.global.u64 [%rec+56], %w64;",
        "$Ldone:",
        "  ret;",
        "}",
        "",
    ])
    return Kernel(name, header, e, meta={"live": live})


# ----------------------------------------------------------------- FFMA probes (schedulers)
def _ffma_setup(chains: int) -> list[str]:
    """%fa (lane-dependent, so no two lanes agree), %fb and ``chains`` distinct chain values."""
    return ["  mov.u32 %lane, %laneid;",
            "  cvt.rn.f32.u32 %fa, %lane;",
            "  mul.f32 %fa, %fa, 0f3A800000;",
            "  add.f32 %fa, %fa, 0f3F7FF000;",
            "  mov.f32 %fb, 0f3C000000;",
            *[f"  add.f32 %f{i}, %fa, 0f3F{0x800000 + i * 0x1000:06X};" for i in range(chains)]]


def _ffma_body(chains: int, length: int) -> list[str]:
    body = []
    for _ in range(length):
        body += [f"  fma.rn.f32 %f{i}, %f{i}, %fa, %fb;" for i in range(chains)]
    return body


def _ffma_tail(chains: int) -> list[str]:
    """After the timed loop: the chains folded into one value, stored only if it is an
    impossible NaN pattern (the chains stay live; nothing is written in practice), and
    lane 0 writes ``wid[warp] = %warpid``."""
    return ["  mov.f32 %fs, 0f00000000;",
            *[f"  add.f32 %fs, %fs, %f{i};" for i in range(chains)],
            "  mov.b32 %fbits, %fs;",
            "  setp.eq.u32 %pm, %fbits, 0x7F800001;",
            "  @%pm st.global.u32 [%widp], %fbits;",
            "  setp.ne.u32 %p0, %lane, 0;",
            "  @%p0 bra $Lout;",
            "  mov.u32 %wid, %warpid;",
            "  cvt.u64.u32 %w64, %wid;",
            "  mul.wide.u32 %off, %gw, 8;",
            "  add.u64 %widp, %widp, %off;",
            "  st.global.u64 [%widp], %w64;"]


def _warp_rows(extra: list[str]) -> list[str]:
    """%gw: this warp's global index; %tp: its row of the times buffer."""
    return ["  mov.u32 %ti, %tid.x;",
            "  mov.u32 %nt, %ntid.x;",
            "  mov.u32 %ct, %ctaid.x;",
            "  mad.lo.u32 %gt, %ct, %nt, %ti;",
            "  shr.u32 %gw, %gt, 5;",
            "  shr.u32 %w, %ti, 5;",
            f"  mul.wide.u32 %toff, %gw, {8 * ROW};",
            "  add.u64 %tp, %tp, %toff;",
            *extra]


_FFMA_REGS = ["  .reg .b64 %tp, %widp, %t0, %t1, %toff, %off, %w64, %mp;",
              "  .reg .b32 %ti, %nt, %ct, %gt, %gw, %w, %rep, %sm, %lane, %wid, %fbits, %mask, %bit;",
              "  .reg .pred %loop, %p0, %pm, %pa;"]


def sched_pair_kernel(header: str) -> Kernel:
    """Warp pairs (and solos) by mask, one mask per block (``masks[ctaid.x]``)."""
    c = SCHED_CHAINS
    e = "\n".join([
        ".visible .entry sched_pair(.param .u64 p_masks, .param .u64 p_wid, .param .u64 p_times)",
        "{",
        *_FFMA_REGS,
        f"  .reg .f32 %f<{c}>, %fa, %fb, %fs;",
        "  ld.param.u64 %tp, [p_times];",
        "  ld.param.u64 %mp, [p_masks];",
        "  ld.param.u64 %widp, [p_wid];",
        "  cvta.to.global.u64 %tp, %tp;",
        "  cvta.to.global.u64 %mp, %mp;",
        "  cvta.to.global.u64 %widp, %widp;",
        *_warp_rows(["  mul.wide.u32 %off, %ct, 4;",
                     "  add.u64 %mp, %mp, %off;",
                     "  ld.global.u32 %mask, [%mp];",
                     "  shr.u32 %bit, %mask, %w;",
                     "  and.b32 %bit, %bit, 1;",
                     "  setp.eq.u32 %pa, %bit, 0;"]),
        *_ffma_setup(c),
        "  @%pa bra $Lidle;",
        *repeated(_ffma_body(c, SCHED_LENGTH), str(REPS), REPEAT, keep=REPS),
        *_ffma_tail(c),
        "  bra.uni $Lout;",
        # a warp left out meets the barriers of every repetition, nothing else
        "$Lidle:",
        "  mov.u32 %rep, 0;",
        "$Lidle_loop:",
        *["  bar.sync 0;"] * BARRIERS,
        "  add.u32 %rep, %rep, 1;",
        f"  setp.lt.u32 %loop, %rep, {REPS};",
        "  @%loop bra $Lidle_loop;",
        "$Lout:",
        "  ret;",
        "}",
        "",
    ])
    return Kernel("sched_pair", header, e, chains=c, length=SCHED_LENGTH, warps=0, reps=REPS,
                  meta={"chains": c, "length": SCHED_LENGTH})


def order_name(chains: int, length: int) -> str:
    return f"order_c{chains}_n{length}"


def bank_name(chains: int, length: int) -> str:
    return f"banks_c{chains}_n{length}"


def order_kernel(header: str, chains: int, length: int, registers: bool = False) -> Kernel:
    """Every warp: ``chains`` independent FFMA chains of ``length`` in the timed region.
    ``registers``: every source a register (the FFMA's register-register form: the register-bank
    probe rewrites its source fields), not an immediate."""
    name = bank_name(chains, length) if registers else order_name(chains, length)
    setup = _ffma_setup(chains) + (["  add.f32 %fb, %fb, %fa;"] if registers else [])
    e = "\n".join([
        f".visible .entry {name}(.param .u64 p_wid, .param .u64 p_times)",
        "{",
        *_FFMA_REGS,
        f"  .reg .f32 %f<{chains}>, %fa, %fb, %fs;",
        "  ld.param.u64 %tp, [p_times];",
        "  ld.param.u64 %widp, [p_wid];",
        "  cvta.to.global.u64 %tp, %tp;",
        "  cvta.to.global.u64 %widp, %widp;",
        *_warp_rows([]),
        *setup,
        *repeated(_ffma_body(chains, length), str(REPS), REPEAT, keep=REPS),
        *_ffma_tail(chains),
        "$Lout:",
        "  ret;",
        "}",
        "",
    ])
    return Kernel(name, header, e, chains=chains, length=length, warps=0, reps=REPS,
                  meta={"chains": chains, "length": length})


# ----------------------------------------------------------------- pipes
def pipe_usable(v: Variant) -> str | None:
    """Why a catalog variant cannot be used by the pipe kernel (None: usable)."""
    c = v.chain_operand
    if c is None:
        return "no chain operand"
    if v.dest.reg_class != c.reg_class or c.reg_class == "p":
        return "result and chain in different register classes"
    if any(o.ptype == "smem" for o in v.operands) or v.warp_collective:
        return "shared memory or warp-collective operand"
    return None


LANE = {"h": "%lane16", "r": "%lane", "rd": "%lane64"}


def pipe_name(tag: str, chains: int, length: int) -> str:
    return f"pipe_{tag}_k{chains}_n{length}"


def pipe_kernel(header: str, tag: str, parts: list[Variant], chains: int, length: int) -> Kernel:
    """``chains`` chains of each variant of ``parts``, ``length`` steps, interleaved (the
    catalog's PTX template of each variant, its operand values; each chain starts from its
    own value plus the lane id, so that no two chains or lanes agree; the other sources are
    values in the kernel's constant array)."""
    lines: list[str] = []
    inputs: list[int] = []
    decl: dict[str, int] = {c: 0 for c in REG_PREFIX}

    def new(cls: str) -> str:
        n = decl[cls]
        decl[cls] = n + 1
        return f"{REG_PREFIX[cls]}{n}"

    def load(cls: str, bits: int, vary: bool = False) -> str:
        slot = len(inputs)
        inputs.append(bits)
        r = new(cls)
        lines.append(f"  ld.global.{LD_TYPE[cls]} {r}, [%in+{8 * slot}];")
        if vary:
            lines.append(f"  add.u{LD_TYPE[cls][1:]} {r}, {r}, {LANE[cls]};")
        return r

    consts: list[int] = []  # the values every instance reads besides its chain, in constant memory

    def const(cls: str, bits: int) -> str:
        """A value every lane and instance shares, read from the kernel's own initialised
        constant array: ptxas gives it to the instructions as a uniform register or a
        constant-bank operand, so it takes no vector-register bank read. Loaded into vector
        registers instead, the instances ptxas marks to yield (which lose the reuse cache) read
        three vector registers, and a solo's rate can fall below its pipe's for register-bank
        reasons (the DFMA solo did, against the instruction suite's rate)."""
        r = new(cls)
        lines.append(f"  ld.const.{LD_TYPE[cls]} {r}, [{cname}+{8 * len(consts)}];")
        consts.append(bits)
        return r

    cname = f"fixed_{tag}_k{chains}_n{length}"
    per_part: list[tuple[Variant, list[str], dict[str, str]]] = []
    for p, v in enumerate(parts):
        why = pipe_usable(v)
        if why:
            raise ValueError(f"{v.name}: {why}")
        c = v.chain_operand
        assert c is not None
        fixed = {op.name: const(op.reg_class, bits_for(op.ptype, operand_spec(op, v)))
                 for op in v.sources if op is not c}
        regs = [load(c.reg_class, bits_for(c.ptype, chain_init_spec(c, j + 7 * p * chains, v)), vary=True)
                for j in range(chains)]
        per_part.append((v, regs, fixed))
    body = []
    for _ in range(length):
        for j in range(chains):
            for v, regs, fixed in per_part:
                c = v.chain_operand
                assert c is not None
                body.append("  " + fill(v.ptx, {**fixed, c.name: regs[j], v.dest.name: regs[j]}))
    sinks = [r for _v, regs, _f in per_part for r in regs]
    store = []
    for i, r in enumerate(sinks):
        cls = next(c for c, p in REG_PREFIX.items() if r.startswith(p) and r[len(p):].isdigit())
        store.append(f"  st.global.{LD_TYPE[cls]} [%outp+{8 * i}], {r};")
    name = pipe_name(tag, chains, length)
    e = "\n".join([
        *([f".const .align 8 .b64 {cname}[{len(consts)}] = {{{', '.join(str(b) for b in consts)}}};"] if consts else []),
        f".visible .entry {name}(.param .u64 p_in, .param .u64 p_out, .param .u64 p_times)",
        f".maxnreg {MAXNREG}",
        "{",
        *[f"  .reg {REG_DECL[c]} {REG_PREFIX[c]}<{max(n, 1)}>;" for c, n in decl.items()],
        "  .reg .b64 %in, %outp, %tp, %t0, %t1, %toff, %lane64;",
        "  .reg .b32 %ti, %nt, %ct, %gt, %gw, %rep, %sm, %lane;",
        "  .reg .b16 %lane16;",
        "  .reg .pred %loop;",
        *RUN_PROLOGUE,
        "  shr.u32 %gw, %gt, 5;",
        "  mov.u32 %lane, %laneid;",
        "  cvt.u16.u32 %lane16, %lane;",
        "  cvt.u64.u32 %lane64, %lane;",
        f"  mul.wide.u32 %toff, %gw, {8 * ROW};",
        "  add.u64 %tp, %tp, %toff;",
        f"  mul.wide.u32 %toff, %gt, {8 * max(len(sinks), 1)};",
        "  add.u64 %outp, %outp, %toff;",
        *lines,
        *repeated(body, str(REPS), REPEAT, keep=REPS),
        *store,
        "  ret;",
        "}",
        "",
    ])
    return Kernel(name, header, e, chains=chains, length=length, warps=0, reps=REPS, inputs=inputs,
                  n_sink=len(sinks), meta={"parts": [v.name for v in parts]})
