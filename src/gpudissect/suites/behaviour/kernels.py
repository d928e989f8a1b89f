"""PTX of the behaviour probes (issue 6): block residency/dispatch, warp scheduling, pipes.

Every generator returns a :class:`~gpudissect.kernel.ptx.Kernel` under the module ``header``
(``kernel.ptx.ptx_header``); the kernels of a probe kind are compiled as one module
(``kernel.build.build_module``). Kernels:

* ``resid_r{L}(u64 rec, u64 spin, u64 vals)``: every block records, from thread 0,
  ``rec[block*8 + 0..7] = (globaltimer start, globaltimer end, clock64 start, clock64 end,
  %smid, %nsmid, ctaid.x | ctaid.y << 32, %warpid)`` around a spin of ``spin[block]`` SM
  cycles (u32 per linear block id). ``L`` values are loaded (volatile) before the spin and
  consumed after it, so they are live through it: that raises the kernel's register count
  (the cubin's actual count is read back, never assumed).
* ``sched_pair(u64 rec, u32 mask, u32 iters)``: warp ``w`` of the block runs when bit ``w``
  of ``mask`` is set: ``iters`` x (8 independent FFMA chains x 4) between two %clock64
  reads; lane 0 writes ``rec[w*4 + 0..3] = (start, end, %smid, %warpid)``.
* ``sched_order(u64 rec)``: every warp runs ``SEGMENTS`` segments of 8 independent FFMAs,
  each followed by a %clock64 read; lane 0 writes the ``SEGMENTS`` stamps, then %warpid.
* ``pipe_<tag>(u64 in, u64 out, u64 rec, u32 iters)``: catalog variants' chains (the
  variant's PTX template, with the catalog's operand values) interleaved in one loop, timed
  by two %clock64 reads per warp; lane 0 writes ``rec[w*3 + 0..2] = (start, end, %smid)``.

The clock reads come from ``kernel.timing``.
"""

from __future__ import annotations

from gpudissect.catalog.model import LD_TYPE, REG_DECL, REG_PREFIX, Variant, fill
from gpudissect.catalog.values import bits_for, chain_init_spec, operand_spec
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.timing import clock_read, timed

REC_WORDS = 8  # u64 per block in resid kernels
SCHED_CHAINS = 8
SCHED_UNROLL = 4
SEGMENTS = 24
ORDER_FFMA = 8
# register classes of the catalog (catalog.model.REG_CLASS): declaration, name prefix, load type


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


def _timed_loop(body: list[str]) -> list[str]:
    """``body`` repeated %iters times (never unrolled) between two %clock64 reads (%c0, %c1)."""
    return ["  mov.u32 %i, 0;",
            *timed(["$Lloop:", '  .pragma "nounroll";', *body, "  add.u32 %i, %i, 1;",
                    "  setp.lt.u32 %pl, %i, %iters;", "  @%pl bra $Lloop;"], "%c0", "%c1")]


def _ffma_block(regs: list[str]) -> list[str]:
    return [f"  fma.rn.f32 {r}, {r}, %fa, %fb;" for r in regs]


def sched_pair_kernel(header: str) -> Kernel:
    chains = [f"%f{i}" for i in range(SCHED_CHAINS)]
    body = []
    for _ in range(SCHED_UNROLL):
        body += _ffma_block(chains)
    sink = [f"  add.f32 %fs, %fs, {r};" for r in chains]
    e = "\n".join([
        ".visible .entry sched_pair(.param .u64 p_rec, .param .u32 p_mask, .param .u32 p_iters)",
        "{",
        "  .reg .b64 %rec, %c0, %c1, %off, %w64;",
        "  .reg .b32 %ti, %w, %mask, %iters, %i, %bit, %sm, %wid, %lane, %fbits;",
        f"  .reg .f32 %f<{SCHED_CHAINS}>, %fa, %fb, %fs;",
        "  .reg .pred %pa, %pl, %p0, %pm;",
        "  ld.param.u64 %rec, [p_rec];",
        "  ld.param.u32 %mask, [p_mask];",
        "  ld.param.u32 %iters, [p_iters];",
        "  cvta.to.global.u64 %rec, %rec;",
        "  mov.u32 %ti, %tid.x;",
        "  shr.u32 %w, %ti, 5;",
        "  shr.u32 %bit, %mask, %w;",
        "  and.b32 %bit, %bit, 1;",
        "  setp.eq.u32 %pa, %bit, 0;",
        "  @%pa bra $Lout;",
        "  mov.u32 %lane, %laneid;",
        "  cvt.rn.f32.u32 %fa, %lane;",
        "  mul.f32 %fa, %fa, 0f3A800000;",
        "  add.f32 %fa, %fa, 0f3F7FF000;",
        "  mov.f32 %fb, 0f3C000000;",
        *[f"  add.f32 %f{i}, %fa, 0f3F{0x800000 + i * 0x1000:06X};" for i in range(SCHED_CHAINS)],
        *_timed_loop(body),
        "  mov.f32 %fs, 0f00000000;",
        *sink,
        "  mov.b32 %fbits, %fs;",
        "  setp.eq.u32 %pm, %fbits, 0x7F800001;",
        "  @%pm st.global.u32 [%rec], %fbits;",
        "  setp.ne.u32 %p0, %lane, 0;",
        "  @%p0 bra $Lout;",
        "  mov.u32 %sm, %smid;",
        "  mov.u32 %wid, %warpid;",
        "  mul.wide.u32 %off, %w, 32;",
        "  add.u64 %rec, %rec, %off;",
        "  st.global.u64 [%rec], %c0;",
        "  st.global.u64 [%rec+8], %c1;",
        "  cvt.u64.u32 %w64, %sm;",
        "  st.global.u64 [%rec+16], %w64;",
        "  cvt.u64.u32 %w64, %wid;",
        "  st.global.u64 [%rec+24], %w64;",
        "$Lout:",
        "  ret;",
        "}",
        "",
    ])
    return Kernel("sched_pair", header, e, meta={"chains": SCHED_CHAINS, "unroll": SCHED_UNROLL})


def sched_order_kernel(header: str) -> Kernel:
    chains = [f"%f{i}" for i in range(ORDER_FFMA)]
    body = []
    for s in range(SEGMENTS):
        body += _ffma_block(chains)
        body.append(clock_read(f"%t{s}"))
    stores = [f"  st.global.u64 [%rec+{8 * s}], %t{s};" for s in range(SEGMENTS)]
    sink = [f"  add.f32 %fs, %fs, {r};" for r in chains]
    e = "\n".join([
        ".visible .entry sched_order(.param .u64 p_rec)",
        "{",
        f"  .reg .b64 %rec, %off, %w64, %t<{SEGMENTS}>;",
        "  .reg .b32 %ti, %w, %wid, %lane, %fbits;",
        f"  .reg .f32 %f<{ORDER_FFMA}>, %fa, %fb, %fs;",
        "  .reg .pred %p0, %pm;",
        "  ld.param.u64 %rec, [p_rec];",
        "  cvta.to.global.u64 %rec, %rec;",
        "  mov.u32 %ti, %tid.x;",
        "  shr.u32 %w, %ti, 5;",
        "  mov.u32 %lane, %laneid;",
        "  cvt.rn.f32.u32 %fa, %lane;",
        "  mul.f32 %fa, %fa, 0f3A800000;",
        "  add.f32 %fa, %fa, 0f3F7FF000;",
        "  mov.f32 %fb, 0f3C000000;",
        *[f"  add.f32 %f{i}, %fa, 0f3F{0x800000 + i * 0x1000:06X};" for i in range(ORDER_FFMA)],
        "  bar.sync 0;",
        *body,
        "  mov.f32 %fs, 0f00000000;",
        *sink,
        "  mov.b32 %fbits, %fs;",
        "  setp.eq.u32 %pm, %fbits, 0x7F800001;",
        "  @%pm st.global.u32 [%rec], %fbits;",
        "  setp.ne.u32 %p0, %lane, 0;",
        "  @%p0 bra $Lout;",
        "  mov.u32 %wid, %warpid;",
        f"  mul.wide.u32 %off, %w, {8 * (SEGMENTS + 1)};",
        "  add.u64 %rec, %rec, %off;",
        *stores,
        "  cvt.u64.u32 %w64, %wid;",
        f"  st.global.u64 [%rec+{8 * SEGMENTS}], %w64;",
        "$Lout:",
        "  ret;",
        "}",
        "",
    ])
    return Kernel("sched_order", header, e,
                  meta={"segments": SEGMENTS, "ffma_per_segment": ORDER_FFMA})


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


def pipe_kernel(header: str, tag: str, parts: list[tuple[Variant, int]], unroll: int = 4) -> Kernel:
    """``parts``: (variant, chains) whose chains run interleaved in one loop of ``unroll``
    steps per iteration (the catalog's PTX template of each variant, its operand values)."""
    lines: list[str] = []
    inputs: list[int] = []
    counts: dict[str, int] = {}
    decl: dict[str, int] = {c: 0 for c in REG_PREFIX}

    def new(cls: str) -> str:
        n = decl[cls]
        decl[cls] = n + 1
        return f"{REG_PREFIX[cls]}{n}"

    def load(cls: str, bits: int) -> str:
        slot = len(inputs)
        inputs.append(bits)
        r = new(cls)
        lines.append(f"  ld.global.{LD_TYPE[cls]} {r}, [%in+{8 * slot}];")
        return r

    chains: list[tuple[Variant, str, dict[str, str]]] = []
    for v, k in parts:
        why = pipe_usable(v)
        if why:
            raise ValueError(f"{v.name}: {why}")
        c = v.chain_operand
        assert c is not None
        fixed = {}
        for op in v.sources:
            if op is c:
                continue
            fixed[op.name] = load(op.reg_class, bits_for(op.ptype, operand_spec(op, v)))
        for j in range(k):
            r = load(c.reg_class, bits_for(c.ptype, chain_init_spec(c, j + 7 * len(chains), v)))
            chains.append((v, r, fixed))
        counts[v.name] = counts.get(v.name, 0) + k * unroll
    body = []
    for _ in range(unroll):
        for v, r, fixed in chains:
            c = v.chain_operand
            assert c is not None
            m = dict(fixed)
            m[c.name] = r
            m[v.dest.name] = r
            body.append("  " + fill(v.ptx, m))
    store = []
    for i, (_v, r, _f) in enumerate(chains):
        cls = next(c for c, p in REG_PREFIX.items() if r.startswith(p) and r[len(p):].isdigit())
        store.append(f"  st.global.{LD_TYPE[cls]} [%outp+{8 * i}], {r};")
    name = f"pipe_{tag}"
    e = "\n".join([
        f".visible .entry {name}(.param .u64 p_in, .param .u64 p_out, .param .u64 p_rec, "
        ".param .u32 p_iters)",
        "{",
        *[f"  .reg {REG_DECL[c]} {REG_PREFIX[c]}<{max(n, 1)}>;" for c, n in decl.items()],
        "  .reg .b64 %in, %outp, %rec, %c0, %c1, %off, %w64;",
        "  .reg .b32 %ti, %w, %i, %iters, %lane, %sm;",
        "  .reg .pred %pl, %pz;",
        "  ld.param.u64 %in, [p_in];",
        "  ld.param.u64 %outp, [p_out];",
        "  ld.param.u64 %rec, [p_rec];",
        "  ld.param.u32 %iters, [p_iters];",
        "  cvta.to.global.u64 %in, %in;",
        "  cvta.to.global.u64 %outp, %outp;",
        "  cvta.to.global.u64 %rec, %rec;",
        "  mov.u32 %ti, %tid.x;",
        "  shr.u32 %w, %ti, 5;",
        "  mov.u32 %lane, %laneid;",
        *lines,
        "  bar.sync 0;",
        *_timed_loop(body),
        f"  mul.wide.u32 %off, %ti, {8 * max(len(chains), 1)};",
        "  add.u64 %outp, %outp, %off;",
        *store,
        "  setp.ne.u32 %pz, %lane, 0;",
        "  @%pz bra $Lout;",
        "  mov.u32 %sm, %smid;",
        "  mul.wide.u32 %off, %w, 24;",
        "  add.u64 %rec, %rec, %off;",
        "  st.global.u64 [%rec], %c0;",
        "  st.global.u64 [%rec+8], %c1;",
        "  cvt.u64.u32 %w64, %sm;",
        "  st.global.u64 [%rec+16], %w64;",
        "$Lout:",
        "  ret;",
        "}",
        "",
    ])
    return Kernel(name, header, e, inputs=inputs, n_sink=len(chains),
                  meta={"per_iter": counts, "unroll": unroll,
                        "parts": [[v.name, k] for v, k in parts]})
