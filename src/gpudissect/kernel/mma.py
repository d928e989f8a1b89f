"""The tensor-core kernel skeleton shared by everything that times mma.sync or wgmma (the
tensor suite, the async suite's wgmma feed, the predictor's tensor loops): the timing ABI
``.entry k(.param .u64 in, .param .u64 out, .param .u64 times)`` with its prologue, the
repeated timed region (kernel/timing.py) and the accumulator sink; the mma.sync instruction
text; random operand words."""

from __future__ import annotations

import numpy as np

from gpudissect.arch.target import Target
from gpudissect.catalog.tensor import MmaVariant, element
from gpudissect.kernel.ptx import ptx_header
from gpudissect.kernel.timing import Repeat, repeated, row_words, stamp_ptx

# the repetition loop of the timing kernels (kernel/timing.py), in the registers prologue declares
TIMED_REPS = 3  # repetitions of a timing kernel's region (word 0 of 'in'); the first is dropped
REPEAT = Repeat(times="%tptr", label="LOOP", pred="%lp", smid32="%xsmid", smid64="%a64")


def tensor_arch(target: Target) -> str:
    """The architecture every tensor kernel is written and compiled for: the
    architecture-specific one (wgmma needs it; mma.sync compiles to the same code)."""
    return target.for_features(specific=True)


def tensor_header(target: Target) -> str:
    return ptx_header(target.ptx_isa, tensor_arch(target))


def sink_accumulators(lines: list[str], regs: list[str], cls: str) -> None:
    """xor the accumulators into %acc (u32)."""
    for r in regs:
        if cls == ".f64":
            lines.append(f"  mov.b64 %sk64, {r};")
            lines.append("  cvt.u32.u64 %sk, %sk64;")
        elif cls == ".f32":
            lines.append(f"  mov.b32 %sk, {r};")
        else:
            lines.append(f"  mov.b32 %sk, {r};")
        lines.append("  xor.b32 %acc, %acc, %sk;")


def entry_prologue(name: str, extra_decl: list[str]) -> list[str]:
    return [
        f".visible .entry {name}(.param .u64 in, .param .u64 out, .param .u64 times)",
        "{",
        "  .reg .b32 %xtid, %xntid, %xctaid, %gtid, %reps, %rep, %xsmid, %acc, %sk, %w;",
        "  .reg .b64 %in, %out, %times, %tptr, %t0, %t1, %a64, %sk64, %off;",
        "  .reg .pred %lp;",
        *extra_decl,
        "  ld.param.u64 %in, [in];",
        "  ld.param.u64 %out, [out];",
        "  ld.param.u64 %times, [times];",
        "  cvta.to.global.u64 %in, %in;",
        "  cvta.to.global.u64 %out, %out;",
        "  cvta.to.global.u64 %times, %times;",
        "  mov.u32 %xtid, %tid.x;",
        "  mov.u32 %xntid, %ntid.x;",
        "  mov.u32 %xctaid, %ctaid.x;",
        "  mad.lo.u32 %gtid, %xctaid, %xntid, %xtid;",
        "  ld.global.u32 %reps, [%in];",
        "  mov.u32 %acc, 0;",
    ]


def timed_region(lines: list[str], body: list[str], stamps: bool = False) -> list[str]:
    """This warp's row of timestamps, then ``body`` timed ``%reps`` (= TIMED_REPS) times
    (kernel/timing.py). ``stamps``: the whole repetition loop between the block stamps of
    kernel/timing.py (thread 0 of each block, 32-bit clock and globaltimer, outside the timed
    regions; stored after the rows: the 'times' buffer needs STAMP_WORDS u64 per block more)."""
    row = 8 * row_words(TIMED_REPS)
    return [
        *lines,
        "  shr.u32 %w, %gtid, 5;",
        f"  mul.wide.u32 %off, %w, {row};",
        "  add.u64 %tptr, %times, %off;",
        *(stamp_ptx("%times", row, end=False) if stamps else []),
        *repeated(body, "%reps", REPEAT, keep=TIMED_REPS),
        *(stamp_ptx("%times", row, end=True) if stamps else []),
    ]


def entry_finish(out: list[str], sink: list[str]) -> list[str]:
    return out + sink + [
        "  mul.wide.u32 %off, %gtid, 4;",
        "  add.u64 %a64, %out, %off;",
        "  st.global.u32 [%a64], %acc;",
        "  ret;",
        "}",
    ]


SP_META_REG = "%spmeta"


def sparse_meta_decl(v: MmaVariant) -> list[str]:
    """Declaration and value of the sparsity metadata register (sparse variants only)."""
    if not v.sparse:
        return []
    return [f"  .reg .b32 {SP_META_REG};", f"  mov.b32 {SP_META_REG}, {v.sp_meta:#x};"]


def mma_instr(v: MmaVariant, d: list[str], a: list[str], b: list[str], c: list[str]) -> str:
    tail = f", {SP_META_REG}, {v.sp_sel}" if v.sparse else ""
    return (f"  {v.ptx} {{{', '.join(d)}}}, {{{', '.join(a)}}}, {{{', '.join(b)}}}, "
            f"{{{', '.join(c)}}}{tail};")


def random_words(typ: str, n: int, seed: int = 0) -> list[int]:
    """``n`` random finite operand words (shared-memory tiles of the wgmma kernels, fragment
    registers): magnitudes in [0.5, 1) with random signs for floats, random bytes for
    integers/bits."""
    rng = np.random.default_rng(seed)
    if typ == "f64":
        vals = rng.uniform(0.5, 1.0, size=-(-n // 2)) * rng.choice([-1.0, 1.0], size=-(-n // 2))
        return [int(x) for x in vals.astype(np.float64).view(np.uint32)[:n]]
    if typ in ("f16", "bf16", "e4m3", "e5m2"):
        vals = rng.uniform(0.5, 1.0, size=2 * n) * rng.choice([-1.0, 1.0], size=2 * n)
        if typ == "f16":
            h = vals.astype(np.float16).view(np.uint16).astype(np.uint32)
        elif typ == "bf16":
            h = (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.uint32)
        else:  # fp8: sign | exponent for [0.5, 1) | random mantissa
            _, mbits, bias = element(typ).minifloat
            e = bias - 1
            mant = rng.integers(0, 1 << mbits, size=4 * n)
            sign = rng.integers(0, 2, size=4 * n)
            b = (sign << 7) | (e << mbits) | mant
            b = b.reshape(n, 4).astype(np.uint32)
            return [int(x) for x in (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24))]
        h = h.reshape(n, 2)
        return [int(x) for x in (h[:, 0] | (h[:, 1] << 16))]
    if typ in ("tf32", "f32"):
        vals = rng.uniform(0.5, 1.0, size=n) * rng.choice([-1.0, 1.0], size=n)
        return [int(x) for x in vals.astype(np.float32).view(np.uint32)]
    return [int(x) for x in rng.integers(0, 1 << 32, size=n, dtype=np.uint64)]
