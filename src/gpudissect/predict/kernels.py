"""The real-kernel half of the validation set: inner loops of common kernels, written in PTX.

Each is the innermost loop of a per-thread kernel, as a compiler would emit it at -O3 with the
loop kept rolled (the harness adds the trip counter): a tiled SGEMM's k loop (a 4x4 register
tile fed from shared memory), a sum reduction and an online-softmax row loop over a global array,
a 1D 3-point and a 2D 5-point stencil, an FMA-heavy n-body interaction step (bodies in shared
memory), an integer hash and a warp's shared-memory transpose. Global data is a 16 KiB array at
the start of ``in`` (L1-resident after the first repetition), shared data a per-block buffer
(its contents do not matter to the timing of these instructions); and a wgmma GEMM mainloop
(``tensor_loops.wgmma_gemm``).
"""

from __future__ import annotations

import struct

from gpudissect.predict.harness import LoopSpec

N_DATA = 4096  # f32 elements of the global array
DATA = tuple(struct.unpack("<Q", struct.pack("<ff", 1.0 + (2 * i) / N_DATA, 1.0 + (2 * i + 1) / N_DATA))[0]
             for i in range(N_DATA // 2))
MASK = 4 * N_DATA - 1  # byte offsets wrap inside the array
CAL_SIZES = (2, 4, 8, 16, 32)  # independent FADDs in the branch-calibration loops
# stencils store each result into their own warp's place of ``out``: a warp's 32 sink rows (two
# u64 per thread) are 512 contiguous bytes, written 128 coalesced bytes per iteration in a ring
# (the sinks are written after the loop); no two warps, so no two SMs, write the same lines
WARP_RING = 512


def _gaddr(off: str, out: str) -> list[str]:
    """``out`` (u64) = ``in`` + ``off`` (u32 byte offset)."""
    return [f"  cvt.u64.u32 {out}, {off};", f"  add.u64 {out}, {out}, %in;"]


def _store_setup() -> list[str]:
    """%wb: the start of this warp's rows of ``out`` (lane 0's sink row); %so: this lane's byte
    offset in the warp's ring."""
    return ["  mul.wide.u32 %sp, %lane, 16;", "  sub.u64 %wb, %outp, %sp;", "  shl.b32 %so, %lane, 2;"]


def _store(reg: str) -> list[str]:
    """Store ``reg`` at this lane's place of its warp's ring (coalesced: 128 B per warp)."""
    return ["  cvt.u64.u32 %sp, %so;", "  add.u64 %sp, %sp, %wb;", f"  st.global.f32 [%sp], {reg};",
            "  add.u32 %so, %so, 128;", f"  and.b32 %so, %so, {WARP_RING - 1};"]


def sgemm() -> LoopSpec:
    fma = [f"  fma.rn.f32 %c{4 * i + j}, %a{i}, %b{j}, %c{4 * i + j};" for i in range(4) for j in range(4)]
    return LoopSpec(
        "pv_sgemm", "sgemm",
        decls=("  .reg .f32 %c<16>, %a<4>, %b<4>;", "  .reg .b32 %ao, %bo, %aa, %ba;"),
        setup=(*[f"  mov.f32 %c{i}, 0f00000000;" for i in range(16)],
               "  and.b32 %ao, %lane, 7;", "  shl.b32 %ao, %ao, 4;",
               "  shr.u32 %bo, %lane, 3;", "  shl.b32 %bo, %bo, 4;"),
        body=("  add.u32 %aa, %smb, %ao;", "  add.u32 %ba, %smb, %bo;",
              "  ld.shared.v4.f32 {%a0, %a1, %a2, %a3}, [%aa];",
              "  ld.shared.v4.f32 {%b0, %b1, %b2, %b3}, [%ba+4096];",
              *fma,
              "  add.u32 %ao, %ao, 256;", "  and.b32 %ao, %ao, 4095;",
              "  add.u32 %bo, %bo, 256;", "  and.b32 %bo, %bo, 4095;"),
        sinks=tuple((f"%c{i}", "f32") for i in range(16)), smem=8192)


def reduction() -> LoopSpec:
    return LoopSpec(
        "pv_reduce", "reduction",
        decls=("  .reg .f32 %s, %x;", "  .reg .b32 %o;", "  .reg .b64 %p;"),
        setup=("  mov.f32 %s, 0f00000000;", "  shl.b32 %o, %lane, 2;"),
        body=(*_gaddr("%o", "%p"), "  ld.global.f32 %x, [%p];", "  add.f32 %s, %s, %x;",
              "  add.u32 %o, %o, 128;", f"  and.b32 %o, %o, {MASK};"),
        sinks=(("%s", "f32"),), inputs=DATA)


def softmax() -> LoopSpec:
    return LoopSpec(
        "pv_softmax", "softmax",
        decls=("  .reg .f32 %m, %m1, %s, %x, %d, %e1, %e2;", "  .reg .b32 %o;", "  .reg .b64 %p;"),
        setup=("  mov.f32 %m, 0fFF800000;", "  mov.f32 %s, 0f00000000;", "  shl.b32 %o, %lane, 2;"),
        body=(*_gaddr("%o", "%p"), "  ld.global.f32 %x, [%p];",
              "  max.f32 %m1, %m, %x;",
              "  sub.f32 %d, %m, %m1;", "  mul.f32 %d, %d, 0f3FB8AA3B;", "  ex2.approx.ftz.f32 %e1, %d;",
              "  sub.f32 %d, %x, %m1;", "  mul.f32 %d, %d, 0f3FB8AA3B;", "  ex2.approx.ftz.f32 %e2, %d;",
              "  fma.rn.f32 %s, %s, %e1, %e2;", "  mov.f32 %m, %m1;",
              "  add.u32 %o, %o, 128;", f"  and.b32 %o, %o, {MASK};"),
        sinks=(("%m", "f32"), ("%s", "f32")), inputs=DATA)


def stencil1d() -> LoopSpec:
    return LoopSpec(
        "pv_stencil1d", "stencil",
        decls=("  .reg .f32 %xl, %xc, %xr, %y, %acc;", "  .reg .b32 %o, %so;", "  .reg .b64 %p, %sp, %wb;"),
        setup=("  mov.f32 %acc, 0f00000000;", "  shl.b32 %o, %lane, 2;", "  add.u32 %o, %o, 4;", *_store_setup()),
        body=(*_gaddr("%o", "%p"),
              "  ld.global.f32 %xl, [%p+-4];", "  ld.global.f32 %xc, [%p];", "  ld.global.f32 %xr, [%p+4];",
              "  mul.f32 %y, %xl, 0f3E800000;", "  fma.rn.f32 %y, %xc, 0f3F000000, %y;",
              "  fma.rn.f32 %y, %xr, 0f3E800000, %y;", *_store("%y"),
              "  add.f32 %acc, %acc, %y;",
              "  add.u32 %o, %o, 128;", f"  and.b32 %o, %o, {MASK - 8};", "  add.u32 %o, %o, 4;"),
        sinks=(("%acc", "f32"), ("%y", "f32")), inputs=DATA)


def stencil2d() -> LoopSpec:
    row = 256  # bytes per row of the 2D view (64 floats)
    return LoopSpec(
        "pv_stencil2d", "stencil",
        decls=("  .reg .f32 %xn, %xs, %xw, %xe, %xc, %y, %acc;", "  .reg .b32 %o, %so;", "  .reg .b64 %p, %sp, %wb;"),
        setup=("  mov.f32 %acc, 0f00000000;", "  shl.b32 %o, %lane, 2;", f"  add.u32 %o, %o, {row + 4};",
               *_store_setup()),
        body=(*_gaddr("%o", "%p"),
              f"  ld.global.f32 %xn, [%p+-{row}];", f"  ld.global.f32 %xs, [%p+{row}];",
              "  ld.global.f32 %xw, [%p+-4];", "  ld.global.f32 %xe, [%p+4];", "  ld.global.f32 %xc, [%p];",
              "  add.f32 %y, %xn, %xs;", "  add.f32 %y, %y, %xw;", "  add.f32 %y, %y, %xe;",
              "  fma.rn.f32 %y, %xc, 0fC0800000, %y;", *_store("%y"),
              "  add.f32 %acc, %acc, %y;",
              "  add.u32 %o, %o, 128;", f"  and.b32 %o, %o, {4 * N_DATA - 4 * row - 1 - 8};",
              f"  add.u32 %o, %o, {row + 4};"),
        sinks=(("%acc", "f32"), ("%y", "f32")), inputs=DATA)


def nbody() -> LoopSpec:
    return LoopSpec(
        "pv_nbody", "nbody",
        decls=("  .reg .f32 %px, %py, %pz, %pw, %xi, %yi, %zi, %dx, %dy, %dz, %r2, %inv, %i3, %f, %ax, %ay, %az;",
               "  .reg .b32 %o, %a;"),
        setup=("  mov.f32 %ax, 0f00000000;", "  mov.f32 %ay, 0f00000000;", "  mov.f32 %az, 0f00000000;",
               "  cvt.rn.f32.u32 %xi, %gt;", "  mul.f32 %yi, %xi, 0f3F000000;", "  mul.f32 %zi, %xi, 0f3E800000;",
               "  mov.u32 %o, 0;"),
        body=("  add.u32 %a, %smb, %o;", "  ld.shared.v4.f32 {%px, %py, %pz, %pw}, [%a];",
              "  sub.f32 %dx, %px, %xi;", "  sub.f32 %dy, %py, %yi;", "  sub.f32 %dz, %pz, %zi;",
              "  fma.rn.f32 %r2, %dx, %dx, 0f3C23D70A;", "  fma.rn.f32 %r2, %dy, %dy, %r2;",
              "  fma.rn.f32 %r2, %dz, %dz, %r2;", "  rsqrt.approx.ftz.f32 %inv, %r2;",
              "  mul.f32 %i3, %inv, %inv;", "  mul.f32 %i3, %i3, %inv;", "  mul.f32 %f, %pw, %i3;",
              "  fma.rn.f32 %ax, %dx, %f, %ax;", "  fma.rn.f32 %ay, %dy, %f, %ay;", "  fma.rn.f32 %az, %dz, %f, %az;",
              "  add.u32 %o, %o, 16;", "  and.b32 %o, %o, 4095;"),
        sinks=(("%ax", "f32"), ("%ay", "f32"), ("%az", "f32")), smem=4096)


def hash_loop() -> LoopSpec:
    return LoopSpec(
        "pv_hash", "hash",
        decls=("  .reg .b32 %h, %x, %t;",),
        setup=("  mov.u32 %h, 0x811C9DC5;", "  mov.u32 %x, %gt;"),
        body=("  mad.lo.u32 %x, %x, 1664525, 1013904223;",
              "  xor.b32 %h, %h, %x;", "  mul.lo.u32 %h, %h, 16777619;",
              "  shr.u32 %t, %h, 13;", "  xor.b32 %h, %h, %t;", "  mul.lo.u32 %h, %h, 1540483477;",
              "  shr.u32 %t, %h, 15;", "  xor.b32 %h, %h, %t;"),
        sinks=(("%h", "b32"), ("%x", "b32")))


def transpose() -> LoopSpec:
    return LoopSpec(
        "pv_transpose", "transpose",
        decls=("  .reg .f32 %v, %w, %acc;", "  .reg .b32 %r, %a, %b;"),
        setup=("  cvt.rn.f32.u32 %v, %gt;", "  mov.f32 %acc, 0f00000000;", "  mov.u32 %r, 0;"),
        body=("  mad.lo.u32 %a, %r, 33, %lane;", "  shl.b32 %a, %a, 2;", "  add.u32 %a, %a, %smb;",
              "  st.shared.f32 [%a], %v;", "  bar.warp.sync -1;",
              "  mad.lo.u32 %b, %lane, 33, %r;", "  shl.b32 %b, %b, 2;", "  add.u32 %b, %b, %smb;",
              "  ld.shared.f32 %w, [%b];", "  add.f32 %acc, %acc, %w;", "  add.f32 %v, %v, 0f3F800000;",
              "  add.u32 %r, %r, 1;", "  and.b32 %r, %r, 31;"),
        sinks=(("%acc", "f32"),), smem=32 * 33 * 4)


def real_loops() -> list[LoopSpec]:
    from gpudissect.predict.tensor_loops import wgmma_gemm

    return [sgemm(), reduction(), softmax(), stencil1d(), stencil2d(), nbody(), hash_loop(), transpose(),
            wgmma_gemm()]


def branch_calibration() -> list[LoopSpec]:
    """Loops of ``k`` independent FADD chains and nothing else (no scoreboard waits): what one
    warp spends per iteration beyond the stall counts of its instructions is the taken
    backward branch's cost. A microbenchmark of its own, not part of the validation set."""
    out = []
    for k in CAL_SIZES:
        regs = [f"%f{i}" for i in range(k)]
        out.append(LoopSpec(
            f"pv_cal_k{k}", "calibration",
            decls=(f"  .reg .f32 %f<{max(k, 1)}>, %inc;",),
            setup=("  ld.global.f32 %inc, [%in];", *[f"  cvt.rn.f32.u32 {r}, %gt;" for r in regs]),
            body=tuple(f"  add.f32 {r}, {r}, %inc;" for r in regs),
            sinks=tuple((r, "f32") for r in regs), inputs=DATA[:1]))
    return out
