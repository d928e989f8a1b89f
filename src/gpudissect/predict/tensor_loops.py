"""Tensor-core loops of ``predict --validate``: the validation set of the tensor-core model
(seed 001, section 5: a model from per-SASS tensor timings checked against measured GEMM
cycles) and the wgmma GEMM mainloop of the real-kernel set.

* ``tensor_mma``: ``chains`` independent accumulators of one mma.sync shape and type, each
  multiplied once per trip (D = A B + D: a loop-carried chain through the accumulator);
* ``tensor_wgmma``: a warpgroup's tile loop: ``wgmma.fence``, ``K_STEPS`` wgmma m64nNk16 into
  one accumulator (the K steps of a 64-wide K tile in shared memory), ``commit_group``,
  ``wait_group 0``;
* ``wgmma_gemm`` (a real kernel's loop): a GEMM mainloop over a ring of two shared-memory
  stages: the stage's descriptors computed from its address, ``wgmma.fence``, four wgmma
  m64n128k16, ``commit_group``, ``wait_group 1`` (one group kept in flight, as CUTLASS's
  mainloop does), a final ``wait_group 0`` after the timed loop.

Operand tiles are K-major without swizzle, laid out and described by the async suite's
``wgmma_kernels`` (its descriptors and constants), filled with the type's one-word before the
timed region. wgmma loops need the architecture-specific target and a warpgroup: they run at 4
and 8 warps per SM and at the fullest occupancy.
"""

from __future__ import annotations

from gpudissect.catalog.tensor import MmaVariant, WgmmaVariant, element, load_tensor_catalog
from gpudissect.kernel.mma import mma_instr
from gpudissect.kernel.wgmma import A_TILE, K_STEPS, M_WG, ROW_BYTES, desc_regs
from gpudissect.predict.harness import LoopSpec

# (catalog variant, independent accumulators): >= 3 shapes and types of mma.sync
MMA_LOOPS = (("mma.sync.m16n8k16.f32.f16.f32", 1), ("mma.sync.m16n8k16.f32.f16.f32", 4),
             ("mma.sync.m16n8k8.f32.tf32.f32", 2), ("mma.sync.m16n8k32.s32.s8.s32", 2),
             ("mma.sync.m16n8k8.f16.f16.f16", 4), ("mma.sync.m8n8k4.f64.f64.f64", 2))
LDSM_VARIANT = "mma.sync.m16n8k16.f32.f16.f32"  # the ldmatrix-fed loop's
WGMMA_VARIANT = "wgmma.f32.f16"
WGMMA_NS = (64, 128, 256)  # N of the tile loops (m64nNk16, f32 += f16 x f16)
GEMM_N = 128  # the mainloop's N (two stages of A and B fit the 48 KiB of static shared memory)
GEMM_STAGES = 2
FILL_THREADS = 128  # threads of a block that fill the tiles (a warpgroup: every wgmma block has one)
FILL_STEP = 16 * FILL_THREADS  # bytes one round of st.shared.v4 covers
WGMMA_POINTS = ("4", "8", "full")


def _variant(name: str, kind: str) -> MmaVariant | WgmmaVariant:
    cat = load_tensor_catalog()
    for v in (cat.mma if kind == "mma" else cat.wgmma):
        if v.name == name:
            return v
    raise ValueError(f"{name}: not in the tensor catalog")


def _st_type(cls: str) -> str:
    return {".f64": "f64", ".f32": "f32"}.get(cls, "b32")


def _mov(cls: str, reg: str, word: int) -> str:
    return f"  mov.b64 {reg}, {word:#x};" if cls == ".f64" else f"  mov.b32 {reg}, {word:#x};"


def _operands(ac: str, regs: list[str], one: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Loads of the A and B fragment registers from ``in`` (not constants: ptxas would
    rematerialise those inside the loop), and the words of ``in`` they read."""
    if ac == ".f64":
        return tuple(f"  ld.global.f64 {r}, [%in+{8 * i}];" for i, r in enumerate(regs)), (one,) * len(regs)
    words = (one | one << 32,) * (-(-len(regs) // 2))
    return tuple(f"  ld.global.b32 {r}, [%in+{4 * i}];" for i, r in enumerate(regs)), words


def mma_loop(name: str, chains: int) -> LoopSpec:
    """``chains`` accumulators of the mma.sync variant ``name``, one mma each per trip."""
    v = _variant(name, "mma")
    if v.regs["d"] != v.regs["c"]:
        raise ValueError(f"{name}: D and C fragments differ in size; cannot chain")
    ac, cc = element(v.atype).reg_class, element(v.ctype).reg_class
    ra, rb, rc = v.regs["a"], v.regs["b"], v.regs["c"]
    a = [f"%ta{i}" for i in range(ra)]
    b = [f"%ta{ra + i}" for i in range(rb)]
    c = [[f"%tc{ch * rc + i}" for i in range(rc)] for ch in range(chains)]
    loads, words = _operands(ac, a + b, int(element(v.atype).one_word))
    tag = name.replace("mma.sync.", "").replace(".", "_")
    return LoopSpec(
        f"pv_mma_{tag}_c{chains}", "tensor_mma",
        decls=(f"  .reg {ac} %ta<{ra + rb}>;", f"  .reg {cc} %tc<{rc * chains}>;"),
        setup=(*loads, *[_mov(cc, r, 0) for ch in c for r in ch]), inputs=words,
        body=tuple(mma_instr(v, c[ch], a, b, c[ch]) for ch in range(chains)),
        sinks=tuple((r, _st_type(cc)) for ch in c for r in ch),
        meta=(("variant", name), ("chains", str(chains))))


def _fill(smem: int, word: int, threads: int = FILL_THREADS) -> list[str]:
    """Threads 0..``threads``-1 of the block write ``word`` over the ``smem`` bytes, then the
    tiles are made visible to the async proxy and the block waits for them."""
    out = [f"  setp.lt.u32 %fq, %ti, {threads};", "  shl.b32 %fa, %ti, 4;", "  add.u32 %fa, %fa, %smb;",
           f"  mov.b32 %fw, {word:#x};"]
    out += [f"  @%fq st.shared.v4.b32 [%fa+{r * 16 * threads}], {{%fw, %fw, %fw, %fw}};"
            for r in range(smem // (16 * threads))]
    return out + ["  fence.proxy.async.shared::cta;", "  bar.sync 0;"]


def _wgmma(v: WgmmaVariant, n: int, d: list[str], kk: int) -> str:
    return f"  {v.instr(n, False)} {{{', '.join(d)}}}, %dA{kk}, %dB{kk}, 1, 1, 1, 0, 0;"


def _wg_decls(v: WgmmaVariant, n: int) -> tuple[str, ...]:
    return (f"  .reg .f32 %wd<{v.d_regs(n)}>;", f"  .reg .b64 %dA<{K_STEPS}>, %dB<{K_STEPS}>;",
            "  .reg .b32 %fa, %fw, %sa, %sb, %so;", "  .reg .pred %fq;")


def _smem(n: int, stages: int) -> int:
    need = stages * (A_TILE + n * ROW_BYTES)
    return -(-need // FILL_STEP) * FILL_STEP


def wgmma_loop(n: int) -> LoopSpec:
    """A warpgroup's tile loop of ``K_STEPS`` chained wgmma m64n``n``k16 and wait_group 0."""
    v = _variant(WGMMA_VARIANT, "wgmma")
    d = [f"%wd{i}" for i in range(v.d_regs(n))]
    smem = _smem(n, 1)
    return LoopSpec(
        f"pv_wgmma_n{n}", "tensor_wgmma", decls=_wg_decls(v, n),
        setup=(*_fill(smem, int(element(v.atype).one_word)), "  mov.u32 %sa, %smb;", f"  add.u32 %sb, %sa, {A_TILE};",
               *desc_regs("%dA", "%sa", "none", M_WG), *desc_regs("%dB", "%sb", "none", n),
               *[f"  mov.f32 {r}, 0f00000000;" for r in d]),
        body=("  wgmma.fence.sync.aligned;", *[_wgmma(v, n, d, kk) for kk in range(K_STEPS)],
              "  wgmma.commit_group.sync.aligned;", "  wgmma.wait_group.sync.aligned 0;"),
        sinks=tuple((r, "f32") for r in d), smem=smem, smem_align=1024,
        meta=(("variant", WGMMA_VARIANT), ("n", str(n)), ("k_steps", str(K_STEPS)), ("wait", "0")),
        arch_specific=True)


def wgmma_gemm() -> LoopSpec:
    """The GEMM mainloop (see the module's text)."""
    v = _variant(WGMMA_VARIANT, "wgmma")
    n = GEMM_N
    d = [f"%wd{i}" for i in range(v.d_regs(n))]
    stage = A_TILE + n * ROW_BYTES
    smem = _smem(n, GEMM_STAGES)
    return LoopSpec(
        "pv_wgmma_gemm", "wgmma_gemm", decls=_wg_decls(v, n),
        setup=(*_fill(smem, int(element(v.atype).one_word)), "  mov.u32 %so, 0;",
               *[f"  mov.f32 {r}, 0f00000000;" for r in d]),
        body=("  add.u32 %sa, %smb, %so;", f"  add.u32 %sb, %sa, {A_TILE};",
              *desc_regs("%dA", "%sa", "none", M_WG), *desc_regs("%dB", "%sb", "none", n),
              "  wgmma.fence.sync.aligned;", *[_wgmma(v, n, d, kk) for kk in range(K_STEPS)],
              "  wgmma.commit_group.sync.aligned;", "  wgmma.wait_group.sync.aligned 1;",
              f"  xor.b32 %so, %so, {stage};"),
        post=("  wgmma.wait_group.sync.aligned 0;",),
        sinks=tuple((r, "f32") for r in d), smem=smem, smem_align=1024,
        meta=(("variant", WGMMA_VARIANT), ("n", str(n)), ("k_steps", str(K_STEPS)), ("wait", "1"),
              ("stages", str(GEMM_STAGES))),
        arch_specific=True)


LDSM_RING = 4096  # bytes of A (and of B after them) the ldmatrix loop walks


def mma_ldsm_loop() -> LoopSpec:
    """A warp's mma.sync GEMM step: ldmatrix.x4 of A (16 x 16) and of B (two 16 x 8 tiles)
    from shared memory, two mma m16n8k16 (f32 += f16 x f16), one per N tile, the fragments'
    address walking a ring."""
    v = _variant(LDSM_VARIANT, "mma")
    a, b = [f"%ta{i}" for i in range(4)], [f"%ta{4 + i}" for i in range(4)]
    c = [[f"%tc{ch * 4 + i}" for i in range(4)] for ch in range(2)]
    ld = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
    return LoopSpec(
        "pv_mma_ldsm_m16n8k16", "tensor_mma",
        decls=("  .reg .b32 %ta<8>, %tc<8>, %fa, %fw, %lo, %la;", "  .reg .pred %fq;"),
        setup=(*_fill(2 * LDSM_RING, int(element(v.atype).one_word), 32), "  shl.b32 %lo, %lane, 4;",
               *[_mov(".f32", r, 0) for ch in c for r in ch]),
        body=("  add.u32 %la, %smb, %lo;", f"  {ld} {{{', '.join(a)}}}, [%la];",
              f"  {ld} {{{', '.join(b)}}}, [%la+{LDSM_RING}];",
              mma_instr(v, c[0], a, b[:2], c[0]), mma_instr(v, c[1], a, b[2:], c[1]),
              "  add.u32 %lo, %lo, 512;", f"  and.b32 %lo, %lo, {LDSM_RING - 1};"),
        sinks=tuple((r, "f32") for ch in c for r in ch), smem=2 * LDSM_RING,
        meta=(("variant", LDSM_VARIANT), ("chains", "2"), ("operands", "ldmatrix.x4 A and B")))


def tensor_loops() -> list[LoopSpec]:
    """The tensor-core model's validation loops."""
    return [mma_loop(name, c) for name, c in MMA_LOOPS] + [mma_ldsm_loop()] + [wgmma_loop(n) for n in WGMMA_NS]
