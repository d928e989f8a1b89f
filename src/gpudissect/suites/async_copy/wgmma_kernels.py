"""wgmma fed the way real kernels feed it: swizzled shared-memory descriptors, TMA-written tiles,
and a TMA -> mbarrier -> wgmma pipeline (PTX generators and the layout maths; the measuring is
in ``wgmma_feed.py``).

Operand tiles are K-major f16, ``K_TILE`` (64) elements of K per row: 128 bytes, one row of a
128-byte swizzle atom. A swizzle mode of atom width W bytes (16 for none: one core-matrix row)
stores a tile of R rows as ``128 / W`` TMA boxes of (W / 2 elements x 64 rows), box ``j`` of the
K direction at ``j * R * W`` and row-box ``r`` at ``r * 64 * W`` within it: what a tensor map of
that swizzle writes, so that one wgmma descriptor reads it (PTX ISA, "Matrix Descriptor Format":
start address, leading byte offset (bits 16-29), stride byte offset (bits 32-45), all >> 4;
layout type in bits 62-63: 0 none, 1 128B, 2 64B, 3 32B):

* none: 8x16-byte core matrices, those along K ``R * 16`` bytes apart (LBO), 8-row groups 128
  bytes apart (SBO);
* 32B / 64B / 128B: 8-row groups ``8 * W`` bytes apart (SBO); LBO unused for K-major (16);
  a wgmma's K step of 32 bytes moves the start address inside the swizzle atom (the hardware
  applies the XOR pattern to the address bits, the tile 1024-byte aligned).

Three kernels:

* ``throughput_kernel``: the tensor suite's timing ABI and harness (its ``prologue`` /
  ``epilogue``), ``length`` rounds of ``accs`` wgmma m64n256k16 from a shared tile laid out in
  one swizzle mode, the K steps cycling through the tile (descriptor offsets as a GEMM's);
* ``layout_kernel``: one CTA; thread 0 writes A (64 x 64) and B (256 x 64) with TMA through a
  tensor map of the swizzle, one warpgroup multiplies them (4 wgmma, K = 64) and stores D:
  the host compares it with numpy;
* ``pipeline_kernel``: one CTA per SM, a producer thread (warp 8) loading a ring of ``stages``
  stages of A (128 x 64) and B (256 x 64) with 2D TMA (128B swizzle, arrive.expect_tx on the
  stage's 'full' barrier), two consumer warpgroups (warps 0-7) each multiplying its 64 rows of
  A by B (4 wgmma per stage, one commit group kept in flight) and releasing the stage on its
  'empty' barrier (8 arrivals: lane 0 of each consumer warp after ``wait_group 1``).
"""

from __future__ import annotations

from gpudissect.catalog.tensor import WgmmaVariant
from gpudissect.kernel.mma import entry_finish, entry_prologue, sink_accumulators, timed_region
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.wgmma import A_TILE, K_STEPS, K_TILE, M_WG, ROW_BYTES, atom, desc_regs
from gpudissect.suites.async_copy.kernels import BAR_BYTES, _entry, _map_setup, _wait

N = 256  # wgmma N of every kernel here (m64n256k16)
BOX_ROWS = 64  # rows of one TMA box
B_TILE = N * ROW_BYTES  # bytes of the 256-row B tile
WIDE = "wgmma.f32.f16"  # the catalog variant measured (f32 accumulate, f16 operands)
# pipeline geometry: two consumer warpgroups (128 rows of A) share B
CONSUMERS = 2
PIPE_THREADS = 32 * (4 * CONSUMERS + 1)
STAGE_BYTES = CONSUMERS * A_TILE + B_TILE
PIPE_A_TILES = 8  # distinct 128-row A tiles over the grid (CTA c reads tile c % 8)
PIPE_ROWS = PIPE_A_TILES * CONSUMERS * M_WG + N  # rows of the pipeline's global matrix (A tiles, then B)
EMPTY_OFF = 64  # bytes from the first 'full' barrier to the first 'empty' one


def box_placements(swizzle: str, rows: int) -> list[tuple[int, int, int]]:
    """The TMA boxes of a tile: (x element coordinate along K, row offset, byte offset in the
    tile) each; a box is (atom / 2 elements x BOX_ROWS rows)."""
    w = atom(swizzle)
    return [(j * w // 2, r * BOX_ROWS, j * rows * w + r * BOX_ROWS * w)
            for j in range(ROW_BYTES // w) for r in range(rows // BOX_ROWS)]


def d_position(thread: int, reg: int) -> tuple[int, int]:
    """(row, column) of accumulator register ``reg`` of ``thread`` (0-127) of an m64nN f32
    wgmma (PTX ISA, the wgmma D fragment: per 8-column block, {r, r+8} x 2 columns)."""
    w, lane = divmod(thread, 32)
    j, q = divmod(reg, 4)
    return 16 * w + lane // 4 + 8 * (q // 2), 8 * j + 2 * (lane % 4) + q % 2


def _instr(v: WgmmaVariant) -> str:
    return v.instr(N, False)


def _wgmma(v: WgmmaVariant, d: list[str], da: str, db: str) -> str:
    return f"  {_instr(v)} {{{', '.join(d)}}}, {da}, {db}, 1, 1, 1, 0, 0;"


# --------------------------------------------------------------------------- throughput
def throughput_kernel(v: WgmmaVariant, swizzle: str, name: str, accs: int, length: int, header: str) -> Kernel:
    """Tensor-suite ABI (``in``, ``out``, ``times``): the tile filled from ``in`` words 1..256,
    ``length`` rounds of ``accs`` wgmma (K step ``round % 4``), one commit group per round."""
    dr = v.d_regs(N)
    smem = A_TILE + B_TILE
    decl = [f"  .reg .f32 %f<{dr * accs}>;", "  .reg .b32 %sa, %sb, %i, %val;",
            f"  .reg .b64 %dA<{K_STEPS}>, %dB<{K_STEPS}>, %p64;", "  .reg .pred %sp;",
            f"  .shared .align 1024 .b8 wfsmem[{smem}];"]
    lines = entry_prologue(name, decl) + [
        "  mov.u32 %i, %xtid;",
        "WFFILL:",
        "  and.b32 %w, %i, 255;", "  add.u32 %w, %w, 1;", "  mul.wide.u32 %off, %w, 4;",
        "  add.u64 %p64, %in, %off;", "  ld.global.u32 %val, [%p64];",
        "  mov.u32 %sa, wfsmem;", "  shl.b32 %w, %i, 2;", "  add.u32 %sa, %sa, %w;", "  st.shared.u32 [%sa], %val;",
        "  add.u32 %i, %i, %xntid;", f"  setp.lt.u32 %sp, %i, {smem // 4};", "  @%sp bra WFFILL;",
        "  fence.proxy.async.shared::cta;", "  bar.sync 0;",
        "  mov.u32 %sa, wfsmem;", f"  add.u32 %sb, %sa, {A_TILE};",
        *desc_regs("%dA", "%sa", swizzle, M_WG), *desc_regs("%dB", "%sb", swizzle, N)]
    dreg = [[f"%f{a * dr + i}" for i in range(dr)] for a in range(accs)]
    lines += [f"  mov.b32 {r}, 0;" for d in dreg for r in d]
    body = ["  wgmma.fence.sync.aligned;"]
    for i in range(length):
        kk = i % K_STEPS
        body += [_wgmma(v, dreg[a], f"%dA{kk}", f"%dB{kk}") for a in range(accs)]
        body.append("  wgmma.commit_group.sync.aligned;")
    body.append("  wgmma.wait_group.sync.aligned 0;")
    sink: list[str] = []
    sink_accumulators(sink, [r for d in dreg for r in d], ".f32")
    text = "\n".join(entry_finish(timed_region(lines, body), sink)) + "\n"
    return Kernel(name, header, text, variant=v.name, measure="throughput", chains=accs, length=length, warps=4,
                  meta={"n": N, "swizzle": swizzle, "accs": accs, "kind": "wgmma_thr"})


# --------------------------------------------------------------------------- layout check
LAYOUT_THREADS = 128
LAYOUT_ROWS = M_WG + N  # the check's global matrix: A rows, then B rows (row = K_TILE f16)


def _tma_tile(swizzle: str, rows: int, row0: int, dst: int, bar: str, xbase: str = "", ybase: str = "") -> list[str]:
    """The TMA copies of one tile (rows ``row0``.., plus register ``ybase``; K from register
    ``xbase``) into shared offset ``dst`` from %sa, completing on the mbarrier at ``bar``."""
    out = []
    for x, r, off in box_placements(swizzle, rows):
        out += [f"  add.u32 %cx, {xbase}, {x};" if xbase else f"  mov.u32 %cx, {x};",
                f"  add.u32 %cy, {ybase}, {row0 + r};" if ybase else f"  mov.u32 %cy, {row0 + r};",
                f"  add.u32 %sb, %sa, {dst + off};",
                "  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                f"[%sb], [%map, {{%cx, %cy}}], [{bar}];"]
    return out


def layout_kernel(v: WgmmaVariant, swizzle: str, name: str, header: str) -> Kernel:
    """``(.param .u64 p_out, .param .u64 p_map)``: A = rows 0-63, B = rows 64-319 of the map's
    matrix, TMA-written, D = A B^T (K = 64) stored raw (128 f32 per thread, thread-major)."""
    dr = v.d_regs(N)
    d = [f"%f{i}" for i in range(dr)]
    lines = [f".visible .entry {name}(.param .u64 p_out, .param .u64 p_map)", "{",
             f"  .reg .f32 %f<{dr}>;", "  .reg .b32 %th, %bar, %sa, %sb, %cx, %cy, %cz;",
             f"  .reg .b64 %out, %map, %st, %x, %dA<{K_STEPS}>, %dB<{K_STEPS}>;", "  .reg .pred %p, %q;",
             "  ld.param.u64 %out, [p_out];", "  ld.param.u64 %map, [p_map];", "  cvta.to.global.u64 %out, %out;",
             "  mov.u32 %th, %tid.x;", "  mov.u32 %bar, smem;", f"  add.u32 %sa, %bar, {BAR_BYTES};",
                          "  setp.ne.u32 %p, %th, 0;", "  @%p bra $Lwait;",
             "  mbarrier.init.shared::cta.b64 [%bar], 1;", "  fence.mbarrier_init.release.cluster;",
             "  fence.proxy.async.shared::cta;",
             "  fence.proxy.tensormap::generic.acquire.gpu [%map], 128;",
             f"  mbarrier.arrive.expect_tx.shared::cta.b64 %st, [%bar], {A_TILE + B_TILE};",
             *_tma_tile(swizzle, M_WG, 0, 0, "%bar"), *_tma_tile(swizzle, N, M_WG, A_TILE, "%bar"),
             "$Lwait:", "  bar.warp.sync 0xffffffff;", "  bar.sync 0;", *_wait("$Lw0", "%bar", "0"),
             f"  add.u32 %sb, %sa, {A_TILE};",
             *desc_regs("%dA", "%sa", swizzle, M_WG), *desc_regs("%dB", "%sb", swizzle, N),
             *[f"  mov.f32 {r}, 0f00000000;" for r in d], "  wgmma.fence.sync.aligned;",
             *[_wgmma(v, d, f"%dA{kk}", f"%dB{kk}") for kk in range(K_STEPS)],
             "  wgmma.commit_group.sync.aligned;", "  wgmma.wait_group.sync.aligned 0;",
             f"  mul.wide.u32 %x, %th, {4 * dr};", "  add.u64 %out, %out, %x;"]
    lines += [f"  st.global.v4.f32 [%out+{16 * i}], {{{', '.join(d[4 * i: 4 * i + 4])}}};" for i in range(dr // 4)]
    lines += ["  ret;", "}"]
    return Kernel(name, header, "\n".join(lines) + "\n", variant=v.name, measure="layout", warps=4,
                  smem=BAR_BYTES + A_TILE + B_TILE, meta={"swizzle": swizzle, "kind": "wgmma_layout"})


# --------------------------------------------------------------------------- pipeline
PIPE_KBLOCKS = 128  # k-blocks (of K_TILE) per repetition: the K loop of one output tile


def pipe_smem(stages: int) -> int:
    return BAR_BYTES + stages * STAGE_BYTES


def _consumer(v: WgmmaVariant, stages: int, kblocks: int, d: list[str]) -> list[str]:
    """Warps 0-7: per k-block wait 'full', 4 wgmma, commit, wait for the previous k-block's
    group and release its stage ('empty', lane 0 of each warp); the last stage released after
    the loop."""
    return [
        "  mov.u32 %kb, 0;",
        "$Lck:",
        "  shl.b32 %fb, %s, 3;", "  add.u32 %fb, %fb, %bar;",
        *_wait("$Lcw", "%fb", "%par"),
        f"  mul.lo.u32 %sb, %s, {STAGE_BYTES};", "  add.u32 %sb, %sb, %buf;",
        "  add.u32 %sa, %sb, %aoff;", f"  add.u32 %sb, %sb, {CONSUMERS * A_TILE};",
        *desc_regs("%dA", "%sa", "128B", M_WG), *desc_regs("%dB", "%sb", "128B", N),
        "  wgmma.fence.sync.aligned;",
        *[_wgmma(v, d, f"%dA{kk}", f"%dB{kk}") for kk in range(K_STEPS)],
        "  wgmma.commit_group.sync.aligned;",
        "  wgmma.wait_group.sync.aligned 1;",
        "  setp.eq.u32 %q, %kb, 0;",
        "  or.pred %q, %q, %nlead;",
        "  @!%q mbarrier.arrive.shared::cta.b64 %st, [%eb];",
        f"  add.u32 %eb, %fb, {EMPTY_OFF};",
        "  add.u32 %s, %s, 1;", f"  setp.eq.u32 %q, %s, {stages};", "  @%q mov.u32 %s, 0;",
        "  @%q xor.b32 %par, %par, 1;",
        "  add.u32 %kb, %kb, 1;", f"  setp.lt.u32 %more, %kb, {kblocks};", "  @%more bra $Lck;",
        "  wgmma.wait_group.sync.aligned 0;",
        "  @%lead mbarrier.arrive.shared::cta.b64 %st, [%eb];",
        "  bra $Lcdone;",
    ]


def _producer(stages: int, kblocks: int) -> list[str]:
    """Lane 0 of warp 8: per k-block wait until the stage is free (from the ring's second
    round on: its 'empty' phase of the previous use), expect the stage's bytes on 'full', issue
    the stage's 2D TMA copies (A: this CTA's 128 rows, B: the 256 rows after the A tiles)."""
    boxes = []
    for c in range(CONSUMERS):
        boxes += _tma_tile("128B", M_WG, c * M_WG, c * A_TILE, "%fb", "%xo", "%cz")
    boxes += _tma_tile("128B", N, PIPE_A_TILES * CONSUMERS * M_WG, CONSUMERS * A_TILE, "%fb", "%xo")
    return [
        "  @!%lead bra $Lpdone;",
        "  mov.u32 %kb, 0;",
        "$Lpk:",
        "  shl.b32 %fb, %s, 3;", "  add.u32 %fb, %fb, %bar;", f"  add.u32 %eb, %fb, {EMPTY_OFF};",
        f"  setp.lt.u32 %q, %i, {stages};",
        "  @%q bra $Lpissue;",
        "  xor.b32 %k, %par, 1;",
        *_wait("$Lpw", "%eb", "%k"),
        "$Lpissue:",
        f"  mul.lo.u32 %sa, %s, {STAGE_BYTES};", "  add.u32 %sa, %sa, %buf;",
        f"  mul.lo.u32 %xo, %kb, {K_TILE};",
        f"  mbarrier.arrive.expect_tx.shared::cta.b64 %st, [%fb], {STAGE_BYTES};",
        *boxes,
        "  add.u32 %i, %i, 1;",
        "  add.u32 %s, %s, 1;", f"  setp.eq.u32 %q, %s, {stages};", "  @%q mov.u32 %s, 0;",
        "  @%q xor.b32 %par, %par, 1;",
        "  add.u32 %kb, %kb, 1;", f"  setp.lt.u32 %more, %kb, {kblocks};", "  @%more bra $Lpk;",
        "$Lpdone:",
        "  bar.warp.sync 0xffffffff;",  # lanes 1-31 wait for lane 0 (the CTA barrier before the next repetition)
        "  bra $Lcdone;",
    ]


def pipeline_kernel(v: WgmmaVariant, stages: int, name: str, header: str, kblocks: int = PIPE_KBLOCKS) -> Kernel:
    """The async suite's ABI and harness (``kernels._entry``: REPS timed repetitions, one row of
    timestamps per warp): ``map`` is the 2D f16 tensor map (128B swizzle, 64 x 64 boxes) of a
    matrix of PIPE_ROWS rows of ``kblocks * K_TILE`` elements. The ring's stage index and
    phase run on across repetitions; a CTA barrier before each repetition (untimed)."""
    if not 2 <= stages <= 4:
        raise ValueError(f"stages {stages}: 2 to 4")
    dr = v.d_regs(N)
    d = [f"%f{i}" for i in range(dr)]
    setup = [f"  .reg .f32 %f<{dr}>;", f"  .reg .b64 %dA<{K_STEPS}>, %dB<{K_STEPS}>;",
             "  .reg .b32 %kb, %fb, %eb, %xo, %aoff, %wg;", "  .reg .pred %nlead;",
             "  setp.ne.u32 %nlead, %lane, 0;",
             "  setp.ne.u32 %p, %th, 0;", "  @%p bra $Lnoinit;",
             *[f"  mbarrier.init.shared::cta.b64 [%bar+{8 * i}], 1;" for i in range(stages)],
             *[f"  mbarrier.init.shared::cta.b64 [%bar+{EMPTY_OFF + 8 * i}], {4 * CONSUMERS};" for i in range(stages)],
             "  fence.mbarrier_init.release.cluster;", "  fence.proxy.async.shared::cta;",
             "$Lnoinit:", *_map_setup(),
             # this CTA's A tile (rows), this warpgroup's 64 rows of it (shared offset)
             "  mov.u32 %c, %ctaid.x;", f"  and.b32 %cz, %c, {PIPE_A_TILES - 1};",
             f"  mul.lo.u32 %cz, %cz, {CONSUMERS * M_WG};",
             "  shr.u32 %wg, %warp, 2;", f"  mul.lo.u32 %aoff, %wg, {A_TILE};",
             "  mov.u32 %s, 0;", "  mov.u32 %par, 0;", "  mov.u32 %i, 0;", "  mov.u32 %eb, %bar;"]
    pre = ["  bar.sync 0;", *[f"  mov.f32 {r}, 0f00000000;" for r in d]]
    body = [f"  setp.ge.u32 %p, %warp, {4 * CONSUMERS};", "  @%p bra $Lproducer;",
            *_consumer(v, stages, kblocks, d), "$Lproducer:", *_producer(stages, kblocks), "$Lcdone:"]
    post = ["  mov.u32 %m, 0;"]
    sink_accumulators(post, d, ".f32")
    post = [x.replace("%sk", "%k").replace("%acc", "%m") for x in post]
    post += ["  setp.eq.u32 %p, %m, 0x7fffffff;", "  @%p st.global.u32 [%dst], %m;"]
    text = _entry(name, setup, pre, body, post)
    return Kernel(name, header, text, variant=v.name, measure="pipeline", warps=PIPE_THREADS // 32,
                  smem=pipe_smem(stages), meta={"stages": stages, "kblocks": kblocks, "kind": "wgmma_pipe"})
