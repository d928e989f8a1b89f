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

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache

from gpudissect.catalog.model import CATALOG_DIR

TENSOR_TOML = CATALOG_DIR / "tensor.toml"


@dataclass(frozen=True)
class MmaVariant:
    name: str
    ptx: str
    shape: tuple[int, int, int]
    atype: str
    btype: str
    ctype: str
    dtype: str
    min_arch: int
    regs: dict
    flops: int
    groups: int = 1
    # "mma" (mma.sync), "wmma" (wmma.mma) or "mma.sp" (sparse A: the PTX takes two more
    # operands, a metadata register holding ``sp_meta`` and the selector ``sp_sel``)
    form: str = "mma"
    sp_meta: int | None = None
    sp_sel: int = 0

    @property
    def kind(self) -> str:
        return "mma"

    @property
    def sparse(self) -> bool:
        return self.sp_meta is not None


@dataclass(frozen=True)
class WgmmaVariant:
    name: str
    atype: str
    btype: str
    dtype: str
    k: int
    n_step: int
    a_from_registers: bool
    transpose_args: bool
    scale_args: bool
    extra: str = ""
    min_arch: str = "sm_90a"

    @property
    def kind(self) -> str:
        return "wgmma"

    def d_regs(self, n: int) -> int:
        elems = 64 * n // 128
        return elems // 2 if self.dtype == "f16" else elems

    def flops(self, n: int) -> int:
        return 2 * 64 * n * self.k

    def instr(self, n: int, a_regs: bool) -> str:
        tag = f".{self.extra}" if self.extra else ""
        return f"wgmma.mma_async.sync.aligned.m64n{n}k{self.k}.{self.dtype}.{self.atype}.{self.btype}{tag}"


@dataclass(frozen=True)
class LdstVariant:
    name: str
    op: str  # ldmatrix | stmatrix | wmma.load | wmma.store
    ptx: str
    shape: str
    matrices: int
    trans: bool
    regs: int
    bytes: int
    min_arch: str
    # wmma.load / wmma.store only (derived from the wmma.mma entries, see wmma_ldst_variants):
    frag: str = ""  # a | b | c | d
    layout: str = ""  # row | col (memory layout of the matrix)
    elem: str = ""  # element type
    rows: int = 0
    cols: int = 0
    ldm: int = 0  # leading dimension in elements (no padding)
    cls: str = ".b32"  # PTX register class of the fragment registers

    @property
    def kind(self) -> str:
        return "ldst"

    @property
    def wmma(self) -> bool:
        return self.op.startswith("wmma.")

    @property
    def atype(self) -> str:
        """Key of the datasheet-peak table: data movement has none."""
        return "b16" if self.shape == "m8n8" else "b8"


def _wmma_layouts(ptx: str) -> tuple[str, str]:
    m = re.search(r"\.(row|col)\.(row|col)\.", ptx)
    if not m:
        raise ValueError(f"no A/B layouts in {ptx!r}")
    return m.group(1), m.group(2)


def wmma_ldst_variants(mma: list[MmaVariant], bits: dict[str, int]) -> list[LdstVariant]:
    """The wmma.load.{a,b,c} / wmma.store.d variants implied by the wmma.mma entries of the
    catalog: each (fragment, shape, memory layout, type) once, with the fragment's register
    count from the entry (A/B in the entry's layouts, C/D in both), in shared memory."""
    out: dict[str, LdstVariant] = {}
    for v in mma:
        if v.form != "wmma":
            continue
        m, n, k = v.shape
        la, lb = _wmma_layouts(v.ptx)
        shape = f"m{m}n{n}k{k}"
        cands = [("a", v.atype, la, v.regs["a"], m, k), ("b", v.btype, lb, v.regs["b"], k, n)]
        for lay in ("row", "col"):
            cands += [("c", v.ctype, lay, v.regs["c"], m, n), ("d", v.dtype, lay, v.regs["d"], m, n)]
        for frag, typ, lay, regs, rows, cols in cands:
            op = "wmma.store" if frag == "d" else "wmma.load"
            name = f"{op}.{frag}.{shape}.{lay}.{typ}"
            if name in out:
                continue
            out[name] = LdstVariant(
                name=name, op=op, ptx=f"{op}.{frag}.sync.aligned.{lay}.{shape}.shared.{typ}", shape=shape,
                matrices=1, trans=False, regs=regs, bytes=rows * cols * bits[typ] // 8,
                min_arch=f"sm_{v.min_arch}", frag=frag, layout=lay, elem=typ, rows=rows, cols=cols,
                ldm=cols if lay == "row" else rows, cls={"f32": ".f32", "f64": ".f64"}.get(typ, ".b32"))
    return list(out.values())


@dataclass
class TensorCatalog:
    types: dict[str, int]
    mma: list[MmaVariant] = field(default_factory=list)
    wgmma: list[WgmmaVariant] = field(default_factory=list)
    ldst: list[LdstVariant] = field(default_factory=list)


@cache
def load_tensor_catalog(path: str | None = None) -> TensorCatalog:
    raw = tomllib.loads((TENSOR_TOML if path is None else __import__("pathlib").Path(path)).read_text())
    types = {k: int(v["bits"]) for k, v in raw["types"].items()}
    mma = [MmaVariant(**{**d, "shape": tuple(d["shape"])}) for d in raw.get("mma", [])]
    wg = [WgmmaVariant(**d) for d in raw.get("wgmma", [])]
    ld = [LdstVariant(**d) for d in raw.get("ldst", [])]
    ld += wmma_ldst_variants(mma, types)
    return TensorCatalog(types, mma, wg, ld)


@dataclass
class TensorKernel:
    name: str
    ptx: str  # a complete module (header + one entry)
    variant: str
    measure: str  # latency | throughput | probe
    chains: int
    length: int
    warps: int
    n_in_words: int
    per_instance: int = 1  # PTX tensor instructions per (chain, round)
    meta: dict = field(default_factory=dict)
    smem: int = 0

    @property
    def units(self) -> int:
        return self.chains * self.length

    @property
    def head(self) -> str:
        return self.ptx[: self.ptx.index(".visible .entry")]

    @property
    def entry(self) -> str:
        return self.ptx[self.ptx.index(".visible .entry"):]


def header(isa: str = "9.0", target: str = "sm_90a") -> str:
    return f".version {isa}\n.target {target}\n.address_size 64\n"


def _regdecl(v: MmaVariant) -> tuple[str, str]:
    """(PTX register class, prefix) of the C/D fragment of an mma variant."""
    if v.ctype == "f64":
        return ".f64", "%fd"
    if v.ctype == "f32":
        return ".f32", "%f"
    return ".b32", "%rc"


def _ab_decl(v: MmaVariant) -> tuple[str, str]:
    return (".f64", "%fa") if v.atype == "f64" else (".b32", "%ra")


def _sink(lines: list[str], regs: list[str], cls: str) -> None:
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


def _prologue(name: str, extra_decl: list[str]) -> list[str]:
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


def _epilogue(lines: list[str], body: list[str], reps_words: str = "%reps") -> list[str]:
    """The repetition loop around ``body`` with the clock reads, then the stores."""
    out = list(lines)
    out += [
        "  shl.b32 %w, %reps, 1;",
        "  add.u32 %w, %w, 1;",
        "  mul.wide.u32 %off, %gtid, %w;",
        "  shl.b64 %off, %off, 3;",
        "  add.u64 %tptr, %times, %off;",
        "  mov.u32 %rep, 0;",
        "LOOP:",
        "  bar.sync 0;",
        "  mov.u64 %t0, %clock64;",
        *body,
        "  mov.u64 %t1, %clock64;",
        "  st.global.u64 [%tptr], %t0;",
        "  st.global.u64 [%tptr+8], %t1;",
        "  add.u64 %tptr, %tptr, 16;",
        "  add.u32 %rep, %rep, 1;",
        f"  setp.lt.u32 %lp, %rep, {reps_words};",
        "  @%lp bra LOOP;",
        "  mov.u32 %xsmid, %smid;",
        "  cvt.u64.u32 %a64, %xsmid;",
        "  st.global.u64 [%tptr], %a64;",
    ]
    return out


def _finish(out: list[str], sink: list[str]) -> list[str]:
    return out + sink + [
        "  mul.wide.u32 %off, %gtid, 4;",
        "  add.u64 %a64, %out, %off;",
        "  st.global.u32 [%a64], %acc;",
        "  ret;",
        "}",
    ]


SP_META_REG = "%spmeta"


def _sp_decl(v: MmaVariant) -> list[str]:
    """Declaration and value of the sparsity metadata register (sparse variants only)."""
    if not v.sparse:
        return []
    return [f"  .reg .b32 {SP_META_REG};", f"  mov.b32 {SP_META_REG}, {v.sp_meta:#x};"]


def mma_instr(v: MmaVariant, d: list[str], a: list[str], b: list[str], c: list[str]) -> str:
    tail = f", {SP_META_REG}, {v.sp_sel}" if v.sparse else ""
    return (f"  {v.ptx} {{{', '.join(d)}}}, {{{', '.join(a)}}}, {{{', '.join(b)}}}, "
            f"{{{', '.join(c)}}}{tail};")


def mma_kernel(v: MmaVariant, name: str, measure: str, chains: int, length: int, warps: int,
               isa: str = "9.0", target: str = "sm_90a") -> TensorKernel:
    """A timing kernel: ``chains`` accumulator chains of ``length`` dependent mma each."""
    cc, cp = _regdecl(v)
    ac, ap = _ab_decl(v)
    ra, rb, rcn = v.regs["a"], v.regs["b"], v.regs["c"]
    if v.regs["d"] != rcn:
        raise ValueError(f"{v.name}: D and C fragments differ in size; cannot chain")
    decl = [f"  .reg {ac} {ap}<{ra + rb}>;", f"  .reg {cc} {cp}<{rcn * chains}>;"]
    lines = _prologue(name, decl) + _sp_decl(v)
    wide = ac == ".f64"
    word = 8 if wide else 4
    a = [f"{ap}{i}" for i in range(ra)]
    b = [f"{ap}{ra + i}" for i in range(rb)]
    for i, r in enumerate(a + b):
        lines.append(f"  ld.global.{'f64' if wide else 'u32'} {r}, [%in+{8 + i * word}];")
    cbase = 8 + (ra + rb) * word
    cword = 8 if cc == ".f64" else 4
    creg = [[f"{cp}{ch * rcn + i}" for i in range(rcn)] for ch in range(chains)]
    for ch in range(chains):
        for i, r in enumerate(creg[ch]):
            ty = {".f64": "f64", ".f32": "f32"}.get(cc, "u32")
            lines.append(f"  ld.global.{ty} {r}, [%in+{cbase + (i + ch) % rcn * cword}];")
    body = []
    for _ in range(length):
        for ch in range(chains):
            body.append(mma_instr(v, creg[ch], a, b, creg[ch]))
    out = _epilogue(lines, body)
    sink: list[str] = []
    _sink(sink, [r for ch in creg for r in ch], cc)
    ptx = header(isa, target) + "\n".join(_finish(out, sink)) + "\n"
    n_words = 2 + (ra + rb) * word // 4 + rcn * cword // 4
    return TensorKernel(name, ptx, v.name, measure, chains, length, warps, n_words)


# --- wgmma -------------------------------------------------------------------------------

# K-major, no swizzle: core matrices of 8 rows x 16 bytes; K extent is 32 bytes for every
# type (16 f16, 8 tf32, 32 fp8/int8, 256 b1) = 2 core matrices along K.
WG_LBO = 128  # bytes between the two core matrices along K
WG_SBO = 256  # bytes between core matrices along M/N (8 rows)
WG_A_BYTES = 64 // 8 * WG_SBO  # 2 KiB
WG_B_BYTES_MAX = 256 // 8 * WG_SBO  # 8 KiB


def descriptor(addr_bytes: int, lbo: int = WG_LBO, sbo: int = WG_SBO, swizzle: int = 0) -> int:
    """The 64-bit wgmma matrix descriptor (seed 004): start address, leading and stride byte
    offsets encoded as (x & 0x3FFFF) >> 4, swizzle mode in bits 62-63."""
    enc = lambda x: (x & 0x3FFFF) >> 4  # noqa: E731
    return enc(addr_bytes) | (enc(lbo) << 16) | (enc(sbo) << 32) | ((swizzle & 3) << 62)


def wgmma_kernel(v: WgmmaVariant, name: str, measure: str, n: int, accs: int, length: int,
                 warpgroups: int, a_regs: bool, isa: str = "9.0") -> TensorKernel:
    """``length`` rounds of ``accs`` wgmma (one accumulator each) per warpgroup."""
    if n % v.n_step or not 8 <= n <= 256:
        raise ValueError(f"{v.name}: N={n} not in 8..256 step {v.n_step}")
    if a_regs and not v.a_from_registers:
        raise ValueError(f"{v.name}: A from registers not allowed for this type")
    dr = v.d_regs(n)
    dcls = ".f32" if v.dtype == "f32" else ".b32"
    dp = "%f" if v.dtype == "f32" else "%rc"
    smem_bytes = WG_A_BYTES + WG_B_BYTES_MAX
    decl = [
        f"  .reg {dcls} {dp}<{dr * accs}>;",
        "  .reg .b32 %ra<4>, %sa, %i, %val;",
        "  .reg .b64 %descA, %descB, %sbase, %p64;",
        "  .reg .pred %sp;",
        f"  .shared .align 1024 .b8 smem[{smem_bytes}];",
    ]
    lines = _prologue(name, decl)
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
        # descriptors: A at smem, B at smem + 2 KiB
        "  shr.u64 %descA, %sbase, 4;",
        "  and.b64 %descA, %descA, 16383;",
        f"  or.b64 %descA, %descA, {descriptor(0)};",
        f"  add.u64 %descB, %sbase, {WG_A_BYTES};",
        "  shr.u64 %descB, %descB, 4;",
        "  and.b64 %descB, %descB, 16383;",
        f"  or.b64 %descB, %descB, {descriptor(0)};",
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
    body = ["  wgmma.fence.sync.aligned;"]
    for _ in range(length):
        for a in range(accs):
            body.append(f"  {ins} {{{', '.join(dreg[a])}}}, {aop}, %descB{tail};")
        body.append("  wgmma.commit_group.sync.aligned;")
        if measure == "latency":
            body.append("  wgmma.wait_group.sync.aligned 0;")
    if measure != "latency":
        body.append("  wgmma.wait_group.sync.aligned 0;")
    out = _epilogue(lines, body)
    sink: list[str] = []
    _sink(sink, [r for d in dreg for r in d], dcls)
    ptx = header(isa, "sm_90a") + "\n".join(_finish(out, sink)) + "\n"
    return TensorKernel(name, ptx, v.name, measure, accs, length, 4 * warpgroups, 257,
                        meta={"n": n, "a_from": "registers" if a_regs else "shared",
                              "warpgroups": warpgroups, "accs": accs}, smem=0)


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
                isa: str = "9.0") -> TensorKernel:
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
    lines = _prologue(name, decl)
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
    out = _epilogue(lines, body)
    sink: list[str] = []
    _sink(sink, [r for c in d for r in c], v.cls)
    _sink(sink, [f"%ad{c}" for c in range(chains)], ".b32")
    ptx = header(isa, "sm_90a") + "\n".join(_finish(out, sink)) + "\n"
    return TensorKernel(name, ptx, v.name, measure, chains, length, warps, 2)


# --- probe kernel (fragment layouts) ------------------------------------------------------

def probe_kernel(v: MmaVariant, name: str, isa: str = "9.0", target: str = "sm_90a") -> TensorKernel:
    """One mma per warp; thread (global) t loads its A, B, C fragment words from
    ``in + 4*t*W`` (W = words per thread, 64-bit operands as 2 words) and stores its D words
    to ``out + 4*t*Wd``. ``times`` is unused (kept for the common ABI)."""
    cc, cp = _regdecl(v)
    ac, ap = _ab_decl(v)
    ra, rb, rcn, rd = v.regs["a"], v.regs["b"], v.regs["c"], v.regs["d"]
    wide = ac == ".f64"
    ab_words = (ra + rb) * (2 if wide else 1)
    c_words = rcn * (2 if cc == ".f64" else 1)
    d_words = rd * (2 if cc == ".f64" else 1)
    lines = [
        f".visible .entry {name}(.param .u64 in, .param .u64 out, .param .u64 times)",
        "{",
        "  .reg .b32 %xtid, %xntid, %xctaid, %gtid;",
        "  .reg .b64 %in, %out, %off, %p;",
        f"  .reg {ac} {ap}<{ra + rb}>;",
        f"  .reg {cc} {cp}<{rcn + rd}>;",
        *_sp_decl(v),
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
    step = 8 if wide else 4
    regs_ab = [f"{ap}{i}" for i in range(ra + rb)]
    for i, r in enumerate(regs_ab):
        lines.append(f"  ld.global.{'f64' if wide else 'u32'} {r}, [%p+{i * step}];")
    cstep = 8 if cc == ".f64" else 4
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
    ptx = header(isa, target) + "\n".join(lines) + "\n"
    return TensorKernel(name, ptx, v.name, "probe", 1, 1, 1, ab_words + c_words,
                        meta={"ab_words": ab_words, "c_words": c_words, "d_words": d_words})


def wmma_frag_probe(v: LdstVariant, name: str, isa: str = "9.0", target: str = "sm_90a") -> TensorKernel:
    """Fragment-layout probe of a wmma.load / wmma.store variant, one warp per block (one
    design pass per block), global memory, no arithmetic: the data move is observed raw.

    wmma.load: block b loads the matrix image at ``in + b*image`` and stores its fragment
    registers raw to ``out + ((b*32 + lane)*regs + r)*W``; wmma.store: block b loads the
    registers from ``in`` at that place and stores the matrix image to ``out + b*image``
    (W = 8 bytes for f64 registers, else 4; image = rows x ldm elements or its transpose)."""
    W = 8 if v.cls == ".f64" else 4
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
    return TensorKernel(name, header(isa, target) + "\n".join(lines) + "\n", v.name, "probe", 1, 1, 1, 0,
                        meta={"image_bytes": img, "reg_bytes": W})


# --- operand values ----------------------------------------------------------------------

# a 32-bit word of "one" values per type (timing kernels: finite, non-trivial, no overflow)
ONE_WORD = {
    "f16": 0x3C003C00, "bf16": 0x3F803F80, "tf32": 0x3F800000, "f32": 0x3F800000,
    "e4m3": 0x38383838, "e5m2": 0x3C3C3C3C, "s8": 0x01010101, "u8": 0x01010101,
    "s4": 0x11111111, "u4": 0x11111111, "b1": 0x55555555, "s32": 1,
}


def operand_words(typ: str, regs: int, value: str = "one") -> list[int]:
    """u32 words for ``regs`` registers of type ``typ`` (f64: two words per register)."""
    if typ == "f64":
        one = [0, 0x3FF00000] if value == "one" else [0, 0]
        return one * regs
    if value == "zero":
        return [0] * regs
    return [ONE_WORD[typ]] * regs


def random_words(typ: str, n: int, seed: int = 0) -> list[int]:
    """Random finite operand words (shared-memory tiles of the wgmma kernels): magnitudes
    in [0.5, 1) with random signs for floats, random bytes for integers/bits."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if typ in ("f16", "bf16", "e4m3", "e5m2"):
        import numpy as np  # noqa: F811

        vals = rng.uniform(0.5, 1.0, size=2 * n) * rng.choice([-1.0, 1.0], size=2 * n)
        if typ == "f16":
            h = vals.astype(np.float16).view(np.uint16).astype(np.uint32)
        elif typ == "bf16":
            h = (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.uint32)
        else:  # fp8: sign | exponent for [0.5, 1) | random mantissa
            bias, mbits = (7, 3) if typ == "e4m3" else (15, 2)
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
