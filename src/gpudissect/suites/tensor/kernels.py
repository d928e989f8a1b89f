"""PTX for the tensor-core suite (mma.sync and wgmma.mma_async), from ``catalog/tensor.toml``.

Timing kernels (ABI ``.entry k(.param .u64 in, .param .u64 out, .param .u64 times)``):

* ``in``: u32 words; word 0 = repetitions of the timed region, words 1.. = operand bit
  patterns (mma: A, B, C fragment words; wgmma: the words copied into shared memory);
* ``out``: one u32 per thread (xor of the final accumulators, so nothing is dead code);
* ``times``: ``2*reps + 1`` u64 per thread: (start, end) ``%clock64`` per repetition, then %smid.

The timed region of an mma kernel is ``length`` rounds of ``chains`` independent
accumulator chains (D = A*B + D); latency = 1 chain, one warp; throughput = many chains x
warps. A wgmma kernel's timed region is ``wgmma.fence``, ``length`` rounds of ``accs``
wgmma (each into its own accumulator), a ``commit_group`` per round, and ``wait_group 0``;
latency adds ``wait_group 0`` after every round.

Probe kernels (``probe_kernel``) load per-(warp, lane) A/B/C fragment words, run one mma
and store D: the host designs the experiments (fragment layout inference).
"""

from __future__ import annotations

from gpudissect.arch.target import Target
from gpudissect.catalog.tensor import LdstVariant, MmaVariant, WgmmaVariant, element
from gpudissect.kernel.mma import (
    SP_META_REG,
    entry_finish,
    entry_prologue,
    mma_instr,
    random_words,
    sink_accumulators,
    sparse_meta_decl,
    tensor_header,
    timed_region,
)
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.wgmma import descriptor, wg_sbo


def _regdecl(v: MmaVariant) -> tuple[str, str]:
    """(PTX register class, prefix) of the C/D fragment of an mma variant."""
    cls = element(v.ctype).reg_class
    return cls, {".f64": "%fd", ".f32": "%f"}.get(cls, "%rc")


def _ab_decl(v: MmaVariant) -> tuple[str, str]:
    """(PTX register class, prefix) of the A and B fragments of an mma variant."""
    cls = element(v.atype).reg_class
    return cls, "%fa" if cls == ".f64" else "%ra"


def _text(lines: list[str]) -> str:
    """A kernel's entry text."""
    return "\n".join(lines) + "\n"


def mma_kernel(v: MmaVariant, name: str, measure: str, chains: int, length: int, warps: int,
               target: Target, stamps: bool = False) -> Kernel:
    """A timing kernel: ``chains`` accumulator chains of ``length`` dependent mma each
    (``stamps``: with the block clock stamps of a sustained run, kernel/mma.py timed_region)."""
    cc, cp = _regdecl(v)
    ac, ap = _ab_decl(v)
    ra, rb, rcn = v.regs["a"], v.regs["b"], v.regs["c"]
    if v.regs["d"] != rcn:
        raise ValueError(f"{v.name}: D and C fragments differ in size; cannot chain")
    decl = [f"  .reg {ac} {ap}<{ra + rb}>;", f"  .reg {cc} {cp}<{rcn * chains}>;"]
    lines = entry_prologue(name, decl) + sparse_meta_decl(v)
    wide = ac == ".f64"
    word = element(v.atype).reg_bytes
    a = [f"{ap}{i}" for i in range(ra)]
    b = [f"{ap}{ra + i}" for i in range(rb)]
    for i, r in enumerate(a + b):
        lines.append(f"  ld.global.{'f64' if wide else 'u32'} {r}, [%in+{8 + i * word}];")
    cbase = 8 + (ra + rb) * word
    cword = element(v.ctype).reg_bytes
    creg = [[f"{cp}{ch * rcn + i}" for i in range(rcn)] for ch in range(chains)]
    for ch in range(chains):
        for i, r in enumerate(creg[ch]):
            ty = {".f64": "f64", ".f32": "f32"}.get(cc, "u32")
            lines.append(f"  ld.global.{ty} {r}, [%in+{cbase + (i + ch) % rcn * cword}];")
    body = []
    for _ in range(length):
        for ch in range(chains):
            body.append(mma_instr(v, creg[ch], a, b, creg[ch]))
    out = timed_region(lines, body, stamps)
    sink: list[str] = []
    sink_accumulators(sink, [r for ch in creg for r in ch], cc)
    return Kernel(name, tensor_header(target), _text(entry_finish(out, sink)), v.name, measure, chains, length,
                  warps)


# --- wgmma -------------------------------------------------------------------------------


def wgmma_kernel(v: WgmmaVariant, name: str, measure: str, n: int, accs: int, length: int,
                 warpgroups: int, a_regs: bool, target: Target, stamps: bool = False) -> Kernel:
    """``length`` rounds of ``accs`` wgmma (one accumulator each) per warpgroup (``stamps``: with
    the block clock stamps of a sustained run)."""
    if n % v.n_step or not 8 <= n <= 256:
        raise ValueError(f"{v.name}: N={n} not in 8..256 step {v.n_step}")
    if a_regs and not v.a_from_registers:
        raise ValueError(f"{v.name}: A from registers not allowed for this type")
    dr = v.d_regs(n)
    dcls = ".f32" if v.dtype == "f32" else ".b32"
    dp = "%f" if v.dtype == "f32" else "%rc"
    sbo_a, sbo_b = wg_sbo(v.k_bytes("a")), wg_sbo(v.k_bytes("b"))
    a_bytes = 64 // 8 * sbo_a
    smem_bytes = a_bytes + 256 // 8 * sbo_b
    decl = [
        f"  .reg {dcls} {dp}<{dr * accs}>;",
        "  .reg .b32 %ra<4>, %sa, %i, %val;",
        "  .reg .b64 %descA, %descB, %sbase, %p64;",
        "  .reg .pred %sp;",
        f"  .shared .align 1024 .b8 smem[{smem_bytes}];",
    ]
    if v.sparse:
        decl.append(f"  .reg .b32 {SP_META_REG};")
    lines = entry_prologue(name, decl)
    if v.sparse:
        lines.append(f"  mov.b32 {SP_META_REG}, {v.sp_meta:#x};")
    # fill shared memory: thread t copies words t, t+ntid, ... from in[1 + (w % 256)]
    lines += [
        "  mov.u32 %i, %xtid;",
        "FILL:",
        "  and.b32 %w, %i, 255;",
        "  add.u32 %w, %w, 1;",
        "  mul.wide.u32 %off, %w, 4;",
        "  add.u64 %p64, %in, %off;",
        "  ld.global.u32 %val, [%p64];",
        "  mov.u32 %sa, smem;",
        "  shl.b32 %w, %i, 2;",
        "  add.u32 %sa, %sa, %w;",
        "  st.shared.u32 [%sa], %val;",
        "  add.u32 %i, %i, %xntid;",
        f"  setp.lt.u32 %sp, %i, {smem_bytes // 4};",
        "  @%sp bra FILL;",
        "  fence.proxy.async.shared::cta;",
        "  bar.sync 0;",
        "  mov.u32 %sa, smem;",
        "  cvt.u64.u32 %sbase, %sa;",
        # descriptors: A at smem, B after A
        "  shr.u64 %descA, %sbase, 4;",
        "  and.b64 %descA, %descA, 16383;",
        f"  or.b64 %descA, %descA, {descriptor(0, sbo=sbo_a)};",
        f"  add.u64 %descB, %sbase, {a_bytes};",
        "  shr.u64 %descB, %descB, 4;",
        "  and.b64 %descB, %descB, 16383;",
        f"  or.b64 %descB, %descB, {descriptor(0, sbo=sbo_b)};",
    ]
    for i in range(4):
        lines.append(f"  ld.global.u32 %ra{i}, [%in+{4 + 4 * i}];")
    dreg = [[f"{dp}{a * dr + i}" for i in range(dr)] for a in range(accs)]
    for a in range(accs):
        for i, r in enumerate(dreg[a]):
            lines.append(f"  mov.b32 {r}, %ra{i % 4};" if dcls == ".b32" else f"  mov.b32 {r}, 0;")
    ins = v.instr(n, a_regs)
    if a_regs:
        aop = "{%ra0, %ra1, %ra2, %ra3}"
        tail = ", 1, 1, 1, 0" if v.transpose_args else (", 1, 1, 1" if v.scale_args else ", 1")
    else:
        aop = "%descA"
        tail = ", 1, 1, 1, 0, 0" if v.transpose_args else (", 1, 1, 1" if v.scale_args else ", 1")
    if v.sparse:  # the metadata and the sparsity selector come before scale-d
        tail = f", {SP_META_REG}, {v.sp_sel}{tail}"
    body = ["  wgmma.fence.sync.aligned;"]
    for _ in range(length):
        for a in range(accs):
            body.append(f"  {ins} {{{', '.join(dreg[a])}}}, {aop}, %descB{tail};")
        body.append("  wgmma.commit_group.sync.aligned;")
        if measure == "latency":
            body.append("  wgmma.wait_group.sync.aligned 0;")
    if measure != "latency":
        body.append("  wgmma.wait_group.sync.aligned 0;")
    out = timed_region(lines, body, stamps)
    sink: list[str] = []
    sink_accumulators(sink, [r for d in dreg for r in d], dcls)
    return Kernel(name, tensor_header(target), _text(entry_finish(out, sink)), v.name, measure, accs, length,
                  4 * warpgroups, meta={"n": n, "a_from": "registers" if a_regs else "shared",
                                        "warpgroups": warpgroups, "accs": accs})


# --- ldmatrix / stmatrix ------------------------------------------------------------------

LDST_SMEM = 32 * 1024
STORE_CHAIN_OFFSET = 128  # bytes between the places of independent store chains


def _ldst_init(v: LdstVariant, reg: str) -> str:
    """A per-thread start value of a fragment register (so nothing is constant-folded)."""
    if v.cls == ".f64":
        return f"  cvt.rn.f64.u32 {reg}, %xtid;"
    return f"  mov.b32 {reg}, %xtid;"


def as_words(regs: list[str], cls: str, word: str, tmp64: str) -> tuple[list[str], list[str]]:
    """Fragment registers of class ``cls`` as b32 words ``{word}0``, ``{word}1``, ... (the low
    word of an f64 register, through the b64 temporary ``tmp64``): the lines and the words."""
    lines, words = [], []
    for i, r in enumerate(regs):
        if cls == ".f64":
            lines += [f"  mov.b64 {tmp64}, {r};", f"  cvt.u32.u64 {word}{i}, {tmp64};"]
        else:
            lines.append(f"  mov.b32 {word}{i}, {r};")
        words.append(f"{word}{i}")
    return lines, words


def _ldst_addr(v: LdstVariant, c: int, regs: list[str]) -> list[str]:
    """The latency chain's next address: the lane's address plus the sum of every loaded
    register (all zero): the next load waits for the whole fragment, and no register is
    dead (ptxas would otherwise narrow the load). The sum is a tree of ``len(regs)`` adds."""
    lines, words = as_words(regs, v.cls, "%lw", "%lq")
    words.append("%la")
    n = len(regs)
    while len(words) > 1:
        nxt = []
        for j in range(0, len(words) - 1, 2):
            t = f"%ad{c}" if len(words) == 2 else f"%lw{n}"
            n += 1
            lines.append(f"  add.u32 {t}, {words[j]}, {words[j + 1]};")
            nxt.append(t)
        if len(words) % 2:
            nxt.append(words[-1])
        words = nxt
    return lines


def ldst_kernel(v: LdstVariant, name: str, measure: str, chains: int, length: int, warps: int,
                target: Target) -> Kernel:
    """Loads (ldmatrix, wmma.load): ``chains`` chains in which each address is the sum of
    the previous result's registers added to the lane's address (shared memory is zero, so
    the address stays; the latency therefore includes a small add tree, see _ldst_addr);
    stores (stmatrix, wmma.store): independent stores (throughput only), each chain to its
    own place. Each warp uses its own 1 KiB of shared memory; ldmatrix /
    stmatrix lane l addresses row l (16-byte rows), wmma addresses the warp's matrix
    (leading dimension ``v.ldm``, no padding)."""
    load = v.op in ("ldmatrix", "wmma.load")
    decl = [f"  .reg .b32 %sa, %i, %la, %lw<{2 * v.regs + 2}>, %ad<{chains}>;", "  .reg .b64 %lq;",
            f"  .reg {v.cls} %d<{v.regs * chains}>;",
            "  .reg .pred %sp;", f"  .shared .align 128 .b8 smem[{LDST_SMEM}];"]
    lines = entry_prologue(name, decl)
    lines += [
        "  mov.u32 %i, %xtid;",
        "FILL:",
        "  mov.u32 %sa, smem;",
        "  shl.b32 %w, %i, 2;",
        "  add.u32 %sa, %sa, %w;",
        "  st.shared.u32 [%sa], 0;",
        "  add.u32 %i, %i, %xntid;",
        f"  setp.lt.u32 %sp, %i, {LDST_SMEM // 4};",
        "  @%sp bra FILL;",
        "  bar.sync 0;",
        "  mov.u32 %sa, smem;",
    ]
    if v.wmma:
        lines.append("  mov.u32 %la, 0;")
    else:
        lines += ["  and.b32 %w, %xtid, 31;", "  shl.b32 %la, %w, 4;"]  # lane's row: 16 bytes
    lines += [
        "  shr.u32 %w, %xtid, 5;",
        "  shl.b32 %w, %w, 10;",  # warp's 1 KiB
        "  add.u32 %la, %la, %w;",
        "  add.u32 %la, %la, %sa;",
    ]
    d = [[f"%d{c * v.regs + i}" for i in range(v.regs)] for c in range(chains)]
    for c in range(chains):
        # stores: each chain writes its own place (128 B apart: the same banks), so no two
        # consecutive stores repeat one address and ptxas cannot drop them as redundant
        lines.append(f"  add.u32 %ad{c}, %la, {c * STORE_CHAIN_OFFSET};" if not load and c
                     else f"  mov.u32 %ad{c}, %la;")
        lines += [_ldst_init(v, r) for r in d[c]]
    stride = f", {v.ldm}" if v.wmma else ""
    body = []
    for _ in range(length):
        for c in range(chains):
            regs = "{" + ", ".join(d[c]) + "}"
            if load:
                body.append(f"  {v.ptx} {regs}, [%ad{c}]{stride};")
                body += _ldst_addr(v, c, d[c])
            else:
                body.append(f"  {v.ptx} [%ad{c}], {regs}{stride};")
    out = timed_region(lines, body)
    sink: list[str] = []
    sink_accumulators(sink, [r for c in d for r in c], v.cls)
    sink_accumulators(sink, [f"%ad{c}" for c in range(chains)], ".b32")
    return Kernel(name, tensor_header(target), _text(entry_finish(out, sink)), v.name, measure, chains, length,
                  warps)


# --- probe kernel (fragment layouts) ------------------------------------------------------

def probe_kernel(v: MmaVariant, name: str, target: Target) -> Kernel:
    """One mma per warp; thread (global) t loads its A, B, C fragment words from
    ``in + 4*t*W`` (W = words per thread, 64-bit operands as 2 words) and stores its D words
    to ``out + 4*t*Wd``. ``times`` is unused (kept for the common ABI)."""
    cc, cp = _regdecl(v)
    ac, ap = _ab_decl(v)
    ra, rb, rcn, rd = v.regs["a"], v.regs["b"], v.regs["c"], v.regs["d"]
    wide = ac == ".f64"
    ab_words = (ra + rb) * element(v.atype).reg_words
    c_words = rcn * element(v.ctype).reg_words
    d_words = rd * element(v.ctype).reg_words
    lines = [
        f".visible .entry {name}(.param .u64 in, .param .u64 out, .param .u64 times)",
        "{",
        "  .reg .b32 %xtid, %xntid, %xctaid, %gtid;",
        "  .reg .b64 %in, %out, %off, %p;",
        f"  .reg {ac} {ap}<{ra + rb}>;",
        f"  .reg {cc} {cp}<{rcn + rd}>;",
        *sparse_meta_decl(v),
        "  ld.param.u64 %in, [in];",
        "  ld.param.u64 %out, [out];",
        "  cvta.to.global.u64 %in, %in;",
        "  cvta.to.global.u64 %out, %out;",
        "  mov.u32 %xtid, %tid.x;",
        "  mov.u32 %xntid, %ntid.x;",
        "  mov.u32 %xctaid, %ctaid.x;",
        "  mad.lo.u32 %gtid, %xctaid, %xntid, %xtid;",
        f"  mul.wide.u32 %off, %gtid, {4 * (ab_words + c_words)};",
        "  add.u64 %p, %in, %off;",
    ]
    step = element(v.atype).reg_bytes
    regs_ab = [f"{ap}{i}" for i in range(ra + rb)]
    for i, r in enumerate(regs_ab):
        lines.append(f"  ld.global.{'f64' if wide else 'u32'} {r}, [%p+{i * step}];")
    cstep = element(v.ctype).reg_bytes
    cty = {".f64": "f64", ".f32": "f32"}.get(cc, "u32")
    cregs = [f"{cp}{i}" for i in range(rcn)]
    dregs = [f"{cp}{rcn + i}" for i in range(rd)]
    for i, r in enumerate(cregs):
        lines.append(f"  ld.global.{cty} {r}, [%p+{4 * ab_words + i * cstep}];")
    lines.append(mma_instr(v, dregs, regs_ab[:ra], regs_ab[ra:], cregs))
    lines += [f"  mul.wide.u32 %off, %gtid, {4 * d_words};", "  add.u64 %p, %out, %off;"]
    for i, r in enumerate(dregs):
        lines.append(f"  st.global.{cty} [%p+{i * cstep}], {r};")
    lines += ["  ret;", "}"]
    return Kernel(name, tensor_header(target), _text(lines), v.name, "probe",
                  meta={"ab_words": ab_words, "c_words": c_words, "d_words": d_words})


def wmma_frag_probe(v: LdstVariant, name: str, target: Target) -> Kernel:
    """Fragment-layout probe of a wmma.load / wmma.store variant, one warp per block (one
    design pass per block), global memory, no arithmetic: the data move is observed raw.

    wmma.load: block b loads the matrix image at ``in + b*image`` and stores its fragment
    registers raw to ``out + ((b*32 + lane)*regs + r)*W``; wmma.store: block b loads the
    registers from ``in`` at that place and stores the matrix image to ``out + b*image``
    (W = 8 bytes for f64 registers, else 4; image = rows x ldm elements or its transpose)."""
    W = element(v.elem).reg_bytes
    img = v.bytes
    st = {".f64": "f64", ".f32": "f32"}.get(v.cls, "u32")
    ptx = v.ptx.replace(".shared.", ".global.")
    regs = [f"%d{i}" for i in range(v.regs)]
    lines = [
        f".visible .entry {name}(.param .u64 in, .param .u64 out, .param .u64 times)",
        "{",
        "  .reg .b32 %lane, %blk, %slot;",
        "  .reg .b64 %in, %out, %mat, %frag, %o;",
        f"  .reg {v.cls} %d<{v.regs}>;",
        "  ld.param.u64 %in, [in];",
        "  ld.param.u64 %out, [out];",
        "  cvta.to.global.u64 %in, %in;",
        "  cvta.to.global.u64 %out, %out;",
        "  mov.u32 %lane, %tid.x;",
        "  mov.u32 %blk, %ctaid.x;",
        f"  mul.wide.u32 %o, %blk, {img};",
        f"  add.u64 %mat, {'%in' if v.op == 'wmma.load' else '%out'}, %o;",
        "  mad.lo.u32 %slot, %blk, 32, %lane;",
        f"  mul.wide.u32 %o, %slot, {v.regs * W};",
        f"  add.u64 %frag, {'%out' if v.op == 'wmma.load' else '%in'}, %o;",
    ]
    rl = "{" + ", ".join(regs) + "}"
    if v.op == "wmma.load":
        lines.append(f"  {ptx} {rl}, [%mat], {v.ldm};")
        lines += [f"  st.global.{st} [%frag+{i * W}], {r};" for i, r in enumerate(regs)]
    else:
        lines += [f"  ld.global.{st} {r}, [%frag+{i * W}];" for i, r in enumerate(regs)]
        lines.append(f"  {ptx} [%mat], {rl}, {v.ldm};")
    lines += ["  ret;", "}"]
    return Kernel(name, tensor_header(target), _text(lines), v.name, "probe",
                  meta={"image_bytes": img, "reg_bytes": W})


# --- operand values ----------------------------------------------------------------------

def operand_words(typ: str, regs: int, value: str = "one") -> list[int]:
    """u32 words for ``regs`` registers of type ``typ`` holding "one" values (finite,
    non-trivial, no overflow in the timing kernels) or zeros (f64: two words per register)."""
    e = element(typ)
    reg = e.one_word if value == "one" else 0
    if reg is None:
        raise KeyError(typ)
    return [reg >> (32 * i) & 0xFFFFFFFF for i in range(e.reg_words)] * regs


DATA = ("one", "zero", "random")  # operand data of a timing kernel (word patterns, see fragment_words)


def fragment_words(typ: str, regs: int, data: str, seed: int = 0) -> list[int]:
    """u32 words for ``regs`` fragment registers of type ``typ`` holding ``data``: "one"
    values, zeros, or random finite values (random_words)."""
    if data not in DATA:
        raise ValueError(f"operand data {data!r}: one of {', '.join(DATA)}")
    if data == "random":
        return random_words(typ, regs * element(typ).reg_words, seed)
    return operand_words(typ, regs, data)


