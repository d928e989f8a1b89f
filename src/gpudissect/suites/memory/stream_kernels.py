"""The bandwidth benchmarks' stream kernels (PTX), which ``bandwidth.py`` sizes, launches
and reads.

Timing. Every warp reads ``%globaltimer`` (ns, one clock for the chip) and ``%clock64`` (its
SM's cycles) before and after its timed region (``kernel/timing.py``): the region holds the
stream loop and nothing of the harness. Lane 0 of each warp writes (t0, t1, g0, g1, smid, sink)
after the region.

Kernel ABI, ``bwk_<op>_<bits>_x<ilp>(src u64, dst u64, out u64, trips u32, passes u32,
warm u32, ctamul u32, stride u32, smask u32)``: warp w of block b owns chunk
``g = b * ctamul + w`` (ctamul 0: every block walks the same block-local slice, the L1 and
shared layouts; ctamul = warps per block: the grid walks one slice, L2 and device memory); a
chunk is ``ilp`` accesses of ``bits`` per lane, 32 lanes side by side (every access of a warp
is one contiguous, coalesced ``32 * bits / 8`` bytes; the ilp accesses of a trip sit at fixed
offsets from one pointer). A trip moves the warp ``stride`` bytes on (shared: modulo the
block's buffer, ``smask + 1`` bytes); ``trips`` trips are one pass over the footprint;
``warm`` passes run untimed, ``passes`` passes are timed. ``dst`` is the copy's destination.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.timing import timed

KiB = 1 << 10
PREFIX = "bwk_"
SMEM_BYTES = 16 * KiB  # shared buffer per block (power of two; 8 blocks of it fit an SM)
OUT_WORDS = 6  # u64 per warp: t0, t1, g0, g1, smid, sink


@dataclass(frozen=True)
class Op:
    """One stream operation: its load and/or store PTX (None: not done), state space, and
    whether its chunks are block-local (every block walks the same slice)."""

    key: str
    load: str | None
    store: str | None
    space: str  # shared | global
    local: bool


OPS = {
    "lds": Op("lds", "ld.shared", None, "shared", True),
    "sts": Op("sts", None, "st.shared", "shared", True),
    "ldca": Op("ldca", "ld.global.ca", None, "global", True),
    "ldcg": Op("ldcg", "ld.global.cg", None, "global", False),
    "stcg": Op("stcg", None, "st.global.cg", "global", False),
    "cpcg": Op("cpcg", "ld.global.cg", "st.global.cg", "global", False),
    # the DRAM read with a 256-byte L2 prefetch hint (the footprint check)
    "ldpf": Op("ldpf", "ld.global.cg.L2::256B", None, "global", False),
    # L2 read where every SM reads the same lines (block-local chunks, .cg: not kept in L1),
    # the shape of published L2 benchmarks whose blocks re-read a small shared array
    "ldcgs": Op("ldcgs", "ld.global.cg", None, "global", True),
}
WIDTHS = {32: (".u32", 1), 64: (".v2.u32", 2), 128: (".v4.u32", 4)}  # bits: (PTX type, regs)


def kernel_name(op: str, bits: int, ilp: int) -> str:
    return f"{PREFIX}{op}_{bits}_x{ilp}"


def parse_name(name: str) -> tuple[str, int, int]:
    """(op, bits, ilp) of a stream kernel's name."""
    op, bits, ilp = name.removeprefix(PREFIX).split("_")
    return op, int(bits), int(ilp.removeprefix("x"))


def check_path(op: str, bits: int) -> str:
    """The key of the kernel's SASS expectation in the architecture's ``memory_paths.toml``."""
    return f"stream.{op}.{bits}"


def chunk_bytes(bits: int, ilp: int) -> int:
    """Bytes one warp moves per trip (per direction)."""
    return ilp * 32 * bits // 8


def _regs(prefix: str, j: int, n: int) -> str:
    regs = [f"%{prefix}{j}_{c}" for c in range(n)]
    return regs[0] if n == 1 else "{" + ", ".join(regs) + "}"


def _trip(op: Op, bits: int, ilp: int, label: str) -> list[str]:
    """One pass: ``trips`` trips of ``ilp`` accesses (all loads issued before any use)."""
    ty, n = WIDTHS[bits]
    step = 32 * bits // 8
    sh = op.space == "shared"
    out = ["    mov.u32 %k, %trips;", *(["    mov.u32 %so, %so0;"] if sh else
                                          ["    mov.u64 %p, %base;", "    mov.u64 %q, %dbase;"]),
           f"{label}:", '    .pragma "nounroll";']
    if sh:
        out.append("    add.u32 %sa, %so, %sl;")
    addr = "%sa" if sh else "%p"
    for j in range(ilp):
        if op.load:
            out.append(f"    {op.load}{ty} {_regs('v', j, n)}, [{addr}+{j * step}];")
    for j in range(ilp):
        if op.store and op.load:
            out.append(f"    {op.store}{ty} [%q+{j * step}], {_regs('v', j, n)};")
        elif op.store:
            out.append(f"    {op.store}{ty} [{addr}+{j * step}], {_regs('w', 0, n)};")
    if op.load and not op.store:  # every loaded word feeds the sink (else ptxas narrows)
        for j in range(ilp):
            for c in range(n):
                out.append(f"    xor.b32 %acc, %acc, %v{j}_{c};")
    if sh:
        out += ["    add.u32 %so, %so, %stride;", "    and.b32 %so, %so, %smask;"]
    else:
        out.append("    add.u64 %p, %p, %st;")
        if op.store and op.load:
            out.append("    add.u64 %q, %q, %st;")
    out += ["    sub.u32 %k, %k, 1;", "    setp.ne.u32 %pr, %k, 0;", f"    @%pr bra {label};"]
    return out


def stream_kernel(op_key: str, bits: int, ilp: int, header: str) -> Kernel:
    """The stream kernel of ``op`` with ``bits``-wide accesses, ``ilp`` of them per trip
    (``.maxnreg 255``: without it ptxas keeps registers few and issues the later loads of a
    trip only after the first ones returned, so fewer than ``ilp`` would be in flight)."""
    op = OPS[op_key]
    _, n = WIDTHS[bits]
    name = kernel_name(op_key, bits, ilp)
    chunk = chunk_bytes(bits, ilp)
    sh = op.space == "shared"
    vregs = [f"%v{j}_{c}" for j in range(ilp) for c in range(n)] if op.load else []
    wregs = [f"%w0_{c}" for c in range(n)]
    warm = _trip(op, bits, ilp, "WT")
    passes = ["R:", *_trip(op, bits, ilp, "TT"), "    sub.u32 %n, %n, 1;",
              "    setp.ne.u32 %pr, %n, 0;", "    @%pr bra R;"]
    if sh:
        setup = f"""    mov.u32 %sb, bwsbuf;
    mul.lo.u32 %so0, %gw, {chunk};
    and.b32 %so0, %so0, %smask;
    mul.lo.u32 %sl, %lane, {bits // 8};
    add.u32 %sl, %sl, %sb;"""
    else:
        setup = f"""    mul.wide.u32 %x, %gw, {chunk};
    mul.wide.u32 %y, %lane, {bits // 8};
    add.u64 %x, %x, %y;
    add.u64 %base, %src, %x;
    add.u64 %dbase, %dst, %x;
    cvt.u64.u32 %st, %stride;"""
    e = f"""
.visible .entry {name}(.param .u64 src, .param .u64 dst, .param .u64 out, .param .u32 trips, .param .u32 passes, .param .u32 warm, .param .u32 ctamul, .param .u32 stride, .param .u32 smask)
.maxnreg 255
{{
    .reg .u64 %src, %dst, %o, %base, %dbase, %p, %q, %st, %x, %y, %t0, %t1, %g0, %g1;
    .reg .u32 %trips, %n, %k, %ctamul, %stride, %smask, %th, %lane, %wp, %gw, %c, %acc, %sb, %so0, %so, %sl, %sa{''.join(', ' + r for r in vregs + wregs)};
    .reg .pred %pr, %nlead;
    {f'.shared .align 16 .b8 bwsbuf[{SMEM_BYTES}];' if sh else ''}
    ld.param.u64 %src, [src];
    ld.param.u64 %dst, [dst];
    ld.param.u32 %trips, [trips];
    ld.param.u32 %ctamul, [ctamul];
    ld.param.u32 %stride, [stride];
    ld.param.u32 %smask, [smask];
    mov.u32 %th, %tid.x;
    and.b32 %lane, %th, 31;
    shr.u32 %wp, %th, 5;
    mov.u32 %c, %ctaid.x;
    mad.lo.u32 %gw, %c, %ctamul, %wp;
{setup}
{chr(10).join(f'    add.u32 {w}, %th, {i};' for i, w in enumerate(wregs))}
    mov.u32 %acc, 0;
    ld.param.u32 %n, [warm];
WP:
    setp.eq.u32 %pr, %n, 0;
    @%pr bra WD;
{chr(10).join(warm)}
    sub.u32 %n, %n, 1;
    bra WP;
WD:
    ld.param.u32 %n, [passes];
    setp.ne.u32 %nlead, %lane, 0;
    mov.u64 %g0, %globaltimer;
{chr(10).join(timed(passes, '%t0', '%t1', '    '))}
    mov.u64 %g1, %globaltimer;
    @%nlead bra E;
    mov.u32 %k, %ntid.x;
    shr.u32 %k, %k, 5;
    mad.lo.u32 %k, %c, %k, %wp;
    mul.wide.u32 %x, %k, {8 * OUT_WORDS};
    ld.param.u64 %o, [out];
    add.u64 %o, %o, %x;
    st.global.u64 [%o], %t0;
    st.global.u64 [%o+8], %t1;
    st.global.u64 [%o+16], %g0;
    st.global.u64 [%o+24], %g1;
    mov.u32 %k, %smid;
    cvt.u64.u32 %x, %k;
    st.global.u64 [%o+32], %x;
    cvt.u64.u32 %x, %acc;
    st.global.u64 [%o+40], %x;
E:
    ret;
}}
"""
    return Kernel(name, header, e, variant=name, measure="bandwidth", length=ilp,
                  meta={"path": check_path(op_key, bits), "expect": op.space, "stream": True,
                        "op": op_key, "bits": bits, "ilp": ilp})


def kernels(header: str, widths: tuple[int, ...], ilps: tuple[int, ...]) -> list[Kernel]:
    """Every stream kernel of the sweep."""
    return [stream_kernel(op, b, i, header) for op in OPS for b in widths for i in ilps]
