"""The memory suite: latency of every load path, the footprint staircase (cache sizes, the
L2's near and far partitions), fill granularity and line size, a per-SM map of L2 latency by
address (near/far partition), a page-size-aware TLB study, bandwidth of each level and
shared-memory bank conflicts.

Every benchmark is one item of the run loop (``bench/runner.py``): one resumable store
transaction; a failing one stores a Result with value None and an ``error: ...`` flag and the
sweep goes on. Sizes used by later benchmarks (chain spacing, bandwidth footprints, the L2
flush) come from earlier measurements of the same run, never from known values; when a
measurement is missing the fallback is generic and flagged.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

import numpy as np

from gpudissect.arch.target import Target
from gpudissect.bench import contract
from gpudissect.bench.contract import Context, Item, Outcome, Redo, SuiteBase
from gpudissect.bench.staircase import detect, pooled_spread, refine_points
from gpudissect.bench.stats import noise_flag
from gpudissect.device.args import TEX1D_LINEAR_MAX_WIDTH, Buf, Tex
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.memory import analyse as am
from gpudissect.suites.memory import bandwidth as bwm
from gpudissect.suites.memory import kernels as gm
from gpudissect.suites.memory import texture as tex
from gpudissect.suites.memory.checks import MemCheck, check_region

MiB = 1 << 20


@dataclass(frozen=True)
class Plan:
    hot_footprint: int = 2048  # path latencies: a chain this small stays in the nearest level
    hot_spacing: int = 64
    lat_iters: int = 64  # x UNROLL dependent loads timed per launch
    lat_launches: int = 3
    sweep_min: int = 4096
    sweep_max: int = 32 << 30  # capped by half the free device memory ...
    sweep_l2_multiple: int = 4  # ... and by this many times the L2 size the driver reports
    per_octave: int = 2
    refine: int = 3  # extra points inside each detected step's bracket
    dense_sweeps: tuple[str, ...] = ("ca-strided", "cg-random")  # the L2 model's sweeps ...
    refine_per_octave: int = 6  # ... fill each step's bracket this densely (at least `refine`)
    sweep_iters: int = 128
    sweep_launches: int = 3  # launches per sweep point (median; their spread flags noise)
    warm_cap: int = 1 << 20  # untimed links followed before timing (whole chain when smaller)
    max_nodes: int = 1 << 20  # larger footprints space their nodes further apart (= warm_cap:
    # every swept chain is walked whole before it is timed)
    strides: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024)
    # TLB study: page strides (one visited page per stride; at and above the 2 MiB large
    # page), pages in random order, a few lines per page (the data stays in L2, so a step is
    # translation); it may span most of the device memory
    tlb_strides: tuple[int, ...] = (2 << 20, 4 << 20, 32 << 20, 512 << 20)
    tlb_region: int = 2 << 20  # the lines of a page lie in its first tlb_region bytes
    tlb_lines: int = 4096  # lines in a chain (pages x lines per page), at most ...
    tlb_lines_per_page: int = 64  # ... this many per page, at least one
    tlb_per_octave: int = 2
    tlb_max: int = 128 << 30
    tlb_free_fraction: float = 0.9
    # per-SM L2 map: one block per SM, each on a one-line self-loop, lines at random offsets
    l2map_lines: int = 64
    l2map_bytes: int = 64 << 20
    l2map_reps: int = 3
    l2map_iters: int = 16  # x UNROLL timed loads per block
    l2map_warm: int = 32
    # line size: the capacity step of a strided chain at node spacings wider than the line
    # moves up by spacing / line (a line is allocated per node); the first spacing is the
    # measured fill granularity (the reference)
    line_spacings_l1: tuple[int, ...] = (192, 768)
    line_spacings_l2: tuple[int, ...] = (384,)
    line_per_octave: int = 4
    stride_nodes: int = 1024
    stride_reps: int = 3  # cold passes per stride (fresh chain each); median
    const_footprints: tuple[int, ...] = (512, 2048, 8192, 32768)
    # in access widths; past 32 words (33, 48, 65) the conflict pattern repeats at the bank count
    bank_strides: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 16, 24, 32, 33, 48, 64, 65)
    store_span_iters: int = 256  # seed 000's method: regions of one store, each timed alone
    bw_block: int = 256  # the L2 flush's store stream (stride/L2)
    bw_blocks_per_sm: int = 8
    # bandwidth (suites/memory/bandwidth.py): access width x ILP x warps per SM per level
    bw_widths: tuple[int, ...] = (32, 64, 128)
    bw_ilps: tuple[int, ...] = (1, 2, 4, 8)
    bw_warps: tuple[int, ...] = (4, 8, 16, 32, 64)
    bw_block_warps: int = 8  # warps per block (more warps per SM: more blocks)
    bw_region_us: float = 1000.0  # timed region of an on-chip level's launch
    bw_dram_region_us: float = 3000.0  # ... of a device-memory launch
    bw_launches: int = 3
    bw_foot_multiples: tuple[float, ...] = (1, 2, 4, 8, 16, 32)  # DRAM write/read (x L2 bound)
    bw_l2_fractions: tuple[float, ...] = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2, 4)  # x L2 footprint
    seed: int = 1

    def const_spacing(self, footprint: int) -> int:
        """Node spacing of a constant chase's chain of ``footprint`` bytes."""
        return self.hot_spacing if footprint > 2 * self.hot_spacing else 8

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


QUICK_PLAN = Plan(sweep_max=512 << 20, tlb_max=1 << 30, stride_reps=1, per_octave=1, refine=1, sweep_iters=32, warm_cap=1 << 16,
                  strides=(8, 32, 128, 512), const_footprints=(2048,), bank_strides=(0, 1, 2, 32),
                  bw_widths=(128,), bw_ilps=(1, 4), bw_warps=(8, 32),
                  bw_region_us=200.0, bw_dram_region_us=500.0, bw_launches=2,
                  bw_foot_multiples=(1, 8),
                  bw_l2_fractions=(1 / 2, 4), lat_launches=2, sweep_launches=2,
                  refine_per_octave=2, tlb_strides=(2 << 20, 32 << 20), l2map_lines=16,
                  l2map_reps=2, line_per_octave=2)

GLOBAL_PATHS = {f"ld.global.{op}": f"chase_{op}" for op in gm.GLOBAL_OPS}
LOCAL_PATHS = {"ld.shared": "chase_lds", "st.shared+ld.shared": "chase_sts", "ld.local": "chase_ldl"}
STORE_ROUND_TRIP = {"st.global+ld.global": "chase_stg"}  # one-word self-loop in a global buffer
STORE_SPANS = {"st.shared": "span_sts", "st.global": "span_stg"}  # store_span/<path>; span_none
TEX_KERNEL = "chase_tex"  # latency/tex and sweep/tex-*: a 1D u32 texture object over the chain


def module_kernels(header: str, plan: Plan) -> list[Kernel]:
    """All kernels of the suite (one module under ``header``); the constant chases hold the
    plan's chains."""
    ks = [gm.scatter_kernel(header)]
    ks += [gm.link_kernel(header), gm.l2probe_kernel(header)]
    ks += [gm.chase_global_kernel(op, header) for op in gm.GLOBAL_OPS]
    ks += [gm.chase_shared_kernel(header), gm.chase_shared_kernel(header, store=True),
           gm.chase_local_kernel(header), gm.chase_tex_kernel(header), gm.chase_stg_kernel(header)]
    ks += [gm.store_span_kernel(n, header) for n in gm.STORE_SPANS]
    for f in plan.const_footprints:
        ch = gm.build_chain(f, plan.const_spacing(f), "random", seed=plan.seed)
        ks.append(gm.chase_const_kernel(ch, header, f"{f}"))
    ks += [gm.bandwidth_kernel(k, header) for k in gm.BW_KINDS]
    ks += bwm.kernels(header, plan.bw_widths, plan.bw_ilps) + tex.kernels(header)
    ks += [gm.bank_kernel(b, header) for b in gm.BANK_WIDTHS]
    return ks


class Kernels:
    """All kernels of the suite, compiled as one module for the target, with their SASS checks."""

    def __init__(self, target: Target, plan: Plan):
        ks = module_kernels(ptx_header(target.ptx_isa, target.arch), plan)
        self.kernels = {k.name: k for k in ks}
        built = build_module(ks, target.arch)
        self.built: dict[str, Built] = {n: b for n, b in built.items() if isinstance(b, Built)}
        self.cubin = next(iter(self.built.values())).cubin
        self.checks: dict[str, MemCheck] = {
            n: check_region(self.kernels[n].meta["path"], b.region) for n, b in self.built.items()}

    def texts(self, name: str) -> dict[str, tuple[str, str]]:
        b = self.built.get(name)
        return b.texts() if b else {}

    def result(self, name: str, **kw) -> Result:
        """A Result carrying the kernel's provenance (hashes, SASS of the checked loads) and
        the SASS-check flags."""
        b = self.built.get(name)
        chk = self.checks.get(name)
        flags = list(kw.pop("flags", []))
        if chk is not None and not chk.ok:
            flags += chk.flags()
            kw["value"] = None
        return Result(flags=flags, sass=sorted(chk.counts) if chk else [],
                      ptx_hash=b.ptx_hash if b else None, sass_hash=b.sass_hash if b else None,
                      strategy="memory", cls="memory", **kw)


def reported_l2_bytes(dev: Device) -> int | None:
    """The L2 size the driver reports (cuDeviceGetAttribute L2_CACHE_SIZE), read in this
    process (an attribute query needs no context); None for fake devices or where it cannot
    be read. Bounds the cache sweeps and is compared with the measured capacity, never
    used as a measurement."""
    info = getattr(dev, "info", None)
    if info is None or "fake" in f"{info.driver} {info.uuid}".lower():
        return None
    try:
        from cuda.bindings import driver as cu

        if int(cu.cuInit(0)[0]):
            return None
        err, d = cu.cuDeviceGet(int(info.index))
        if int(err):
            return None
        err, v = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d)
        return int(v) if not int(err) and int(v) > 0 else None
    except Exception:
        return None


class Launcher:
    """The suite's kernels on one device: chains placed, chases and streams launched; it
    remembers the largest chain buffer held (free memory counts it as available)."""

    def __init__(self, dev: Device, k: Kernels, plan: Plan):
        self.dev, self.k, self.plan = dev, k, plan
        self.held = 0  # bytes of the largest chain buffer allocated so far
        self.sm = int(dev.info.sm_count)
        self.l2_reported = reported_l2_bytes(dev)

    # --- chases
    def place(self, chain: gm.Chain) -> None:
        """Upload the validated chain and turn it into addresses in the 'chain' buffer."""
        n = chain.nodes
        self.dev.launch(self.k.cubin, "scatter", min(4096, max(1, n // 256)), 256,
                        [Buf("chain", nbytes=chain.footprint), Buf("next", data=chain.next),
                         np.uint64(n), np.uint64(chain.spacing)])
        self.held = max(self.held, chain.footprint)

    def chain_arg(self, kernel: str, chain: gm.Chain) -> Buf | Tex:
        """Put the validated chain where ``kernel`` follows it: addresses in the 'chain'
        buffer (global chases, :meth:`place`) or element indices in a texture (``chase_tex``)."""
        if kernel == TEX_KERNEL:
            return Tex(Buf("texchain", data=gm.element_indices(chain)))
        self.place(chain)
        return Buf("chain", nbytes=chain.footprint)

    def link(self, offs: np.ndarray, nbytes: int) -> None:
        """Link the validated offset chain (:func:`gm.offset_chain`) in the 'chain' buffer."""
        n = int(offs.size)
        self.dev.launch(self.k.cubin, "link", min(4096, max(1, n // 256)), 256,
                        [Buf("chain", nbytes=nbytes), Buf("offs", data=offs), np.uint64(n),
                         np.uint64(nbytes - 8)])
        self.held = max(self.held, nbytes)

    def chase(self, kernel: str, nbytes: int, warm: int, iters: int, grid: int = 1,
              launches: int = 1, chain_buf: Buf | Tex | None = None) -> np.ndarray:
        """Cycles per dependent load, shape (launches, grid), and smids (grid,)."""
        args = [chain_buf or Buf("chain", nbytes=nbytes), Buf("out", nbytes=24 * grid, read=True),
                np.uint32(warm), np.uint32(iters)]
        vals, smid = [], None
        for _ in range(launches):
            run = self.dev.launch(self.k.cubin, kernel, grid, 1, args)
            out = np.asarray(run.outputs["out"], dtype=np.uint64)[: 3 * grid].reshape(grid, 3)
            vals.append(out[:, 0].astype(float) / (iters * gm.UNROLL))
            smid = out[:, 2].astype(int)
        return np.array(vals), smid

    def limit(self) -> int:
        return int(self.dev.free_memory()) + self.held

    def chain(self, footprint: int, spacing: int, order: str, seed: int = 0) -> gm.Chain:
        sp = spacing
        while footprint // sp > self.plan.max_nodes:
            sp *= 2
        return gm.build_chain(footprint, sp, order, seed=self.plan.seed + seed, limit=self.limit())



def error_result(variant: str, measure: str, unit: str, flag: str, **params) -> Result:
    return Result(variant, measure, None, unit, "none", params=params, cls="memory",
                  flags=[flag], strategy="memory")


def _err(variant: str, measure: str, unit: str, e: Exception, **params) -> Result:
    return error_result(variant, measure, unit, f"error: {type(e).__name__}: {e}", **params)


# --- benchmarks (each returns results and the kernel texts they cite)

def bench_latency(r: Launcher, path: str) -> tuple[list[Result], dict]:
    p = r.plan
    variant = f"latency/{path}"
    if path.startswith("ld.const@"):
        f = int(path.split("@")[1])
        name = f"chase_ldc_{f}"
        ch_nodes = f // p.const_spacing(f)
        vals, _ = r.chase(name, 8, ch_nodes, p.lat_iters, launches=p.lat_launches,
                          chain_buf=Buf("dummy", nbytes=64))
        params = {"footprint": f, "loads": p.lat_iters * gm.UNROLL, "path": "ld.const"}
    else:
        ch = gm.build_chain(p.hot_footprint, p.hot_spacing, "random", seed=p.seed,
                            limit=r.limit())
        if path in STORE_ROUND_TRIP:
            name = STORE_ROUND_TRIP[path]
            vals, _ = r.chase(name, 64, 4 * UNROLL_WARM, p.lat_iters, launches=p.lat_launches,
                              chain_buf=Buf("word", nbytes=64))
        elif path in GLOBAL_PATHS or path == "tex":
            name = GLOBAL_PATHS.get(path, TEX_KERNEL)
            vals, _ = r.chase(name, ch.footprint, 4 * ch.nodes, p.lat_iters, launches=p.lat_launches,
                              chain_buf=r.chain_arg(name, ch))
        else:
            name = LOCAL_PATHS[path]
            words = ch.byte_offsets()
            vals, _ = r.chase(name, words.nbytes, words.size, p.lat_iters, launches=p.lat_launches,
                              chain_buf=Buf("offs", data=words))
        params = {"footprint": ch.footprint, "spacing": ch.spacing, "order": ch.order,
                  "loads": p.lat_iters * gm.UNROLL, "path": path}
        if path in STORE_ROUND_TRIP:
            params = {"footprint": 8, "order": "one-word self-loop: a store, then a load of the "
                      "same word (its result the next address)", "loads": p.lat_iters * gm.UNROLL,
                      "path": path}
    samples = [float(v) for v in vals[:, 0]]
    res = r.k.result(name, variant=variant, measure="latency", value=float(np.median(samples)),
                     unit="cycles", statistic="median over launches of (clock64 span / dependent loads)",
                     params=params, samples=samples)
    return [res], r.k.texts(name)


UNROLL_WARM = 16  # untimed round trips before the timed ones (x 4)


def bench_store_span(r: Launcher, path: str) -> tuple[list[Result], dict]:
    """Seed 000's store method: one store alone between two clock reads, ``store_span_iters``
    regions per launch (mean span per region; median over launches); the empty region (the
    clock pair alone) measured beside it in the same launches' order."""
    p = r.plan
    spans: dict[str, list[float]] = {}
    for name in (STORE_SPANS[path], "span_none"):
        vals, _ = r.chase(name, 64, 0, p.store_span_iters, launches=p.lat_launches,
                          chain_buf=Buf("word", nbytes=64))
        spans[name] = [float(v) * gm.UNROLL for v in vals[:, 0]]  # chase() divides by UNROLL
    name = STORE_SPANS[path]
    samples, empty = spans[name], spans["span_none"]
    res = r.k.result(name, variant=f"store_span/{path}", measure="span", value=float(np.median(samples)),
                     unit="cycles",
                     statistic="median over launches of (sum of clock64 spans of regions holding one "
                               "store) / regions",
                     params={"path": path, "regions": p.store_span_iters,
                             "method": "seed 000 Fig. 3: one store between two clock reads",
                             "empty_span": float(np.median(empty)),
                             "empty_kernel_ok": r.k.checks.get("span_none") is not None
                             and r.k.checks["span_none"].ok},
                     samples={"store": samples, "empty": empty})
    return [res], {**r.k.texts(name), **r.k.texts("span_none")}


def _sweep_points(p: Plan, top: int, start: int) -> list[int]:
    n = int(math.floor(math.log2(top / start) * p.per_octave)) + 1
    pts = sorted({int(round(start * 2 ** (i / p.per_octave) / 64)) * 64 for i in range(n)})
    return [x for x in pts if x <= top]


def _sweep_top(r: Launcher, op: str) -> tuple[int, str]:
    """The largest footprint of a cache sweep and the rule that set it."""
    p = r.plan
    top = min(p.sweep_max, int(r.dev.free_memory()) // 2 + r.held)
    rule = "min(sweep_max, half the free device memory)"
    if r.l2_reported and p.sweep_l2_multiple:
        top = min(top, p.sweep_l2_multiple * r.l2_reported)
        rule = (f"min(sweep_max, half the free device memory, {p.sweep_l2_multiple} x the "
                f"reported L2 size {am.human(r.l2_reported)})")
    if op == "tex":  # the chain is the texture's element array
        top = min(top, TEX1D_LINEAR_MAX_WIDTH * 4)
        rule += ", the 1D linear texture limit"
    return top, rule


def _repeat_flags(samples: list[float], flags: list[str]) -> list[str]:
    nf = noise_flag(samples)
    return [*flags, nf] if nf else list(flags)


def bench_sweep(r: Launcher, op: str, order: str, spacing: int, spacing_flag: list[str]
                ) -> tuple[list[Result], dict]:
    """Latency against footprint (``sweep_launches`` launches per point, median, noisy points
    flagged), then points inside each detected step's bracket (densely for the sweeps the
    L2 model reads)."""
    p = r.plan
    name = TEX_KERNEL if op == "tex" else GLOBAL_PATHS[f"ld.global.{op}"]
    variant = f"sweep/{op}-{order}"
    top, rule = _sweep_top(r, op)
    results: list[Result] = []
    measured: dict[int, float] = {}

    def point(f: int) -> None:
        try:
            ch = r.chain(f, spacing, order, seed=len(measured))
            arg = r.chain_arg(name, ch)
            warm = min(ch.nodes, p.warm_cap)
            vals, _ = r.chase(name, ch.footprint, warm, p.sweep_iters, chain_buf=arg,
                              launches=p.sweep_launches)
            samples = [float(v) for v in vals[:, 0]]
            v = float(np.median(samples))
            measured[ch.footprint] = v
            results.append(r.k.result(
                name, variant=variant, measure="latency_vs_footprint", value=v, unit="cycles",
                statistic="median over launches of clock64 span / dependent loads",
                params={"footprint": ch.footprint, "spacing": ch.spacing, "order": order,
                        "warm_links": warm, "nodes": ch.nodes, "warm_covers_chain": warm >= ch.nodes,
                        "loads": p.sweep_iters * gm.UNROLL, "launches": len(samples),
                        "top": top, "top_rule": rule},
                samples=samples, flags=_repeat_flags(samples, spacing_flag)))
        except Exception as e:  # a refused or failed point: recorded, the sweep goes on
            results.append(_err(variant, "latency_vs_footprint", "cycles", e, footprint=f))

    for f in _sweep_points(p, top, start=p.sweep_min):
        point(f)
    if p.refine and measured:
        xs = sorted(measured)
        _, steps = detect(xs, [measured[x] for x in xs])
        dense = f"{op}-{order}" in p.dense_sweeps
        for st in steps:
            n = p.refine
            if dense:
                n = max(n, int(math.ceil(math.log2(st.x_above / st.x_below) * p.refine_per_octave)))
            for f in refine_points([st], sorted(measured), n):
                point(int(round(f / 64)) * 64)
    return results, r.k.texts(name)


def bench_stride(r: Launcher, level: str, flush_bytes: int | None, flags: list[str]
                 ) -> tuple[list[Result], dict]:
    """One cold pass over a freshly written strided chain: average latency vs stride; the
    knee is the fill granularity of the level (L1 via .ca; L2 via .cg after an L2 flush)."""
    p = r.plan
    op = "ca" if level == "L1" else "cg"
    name = GLOBAL_PATHS[f"ld.global.{op}"]
    variant = f"stride/{level}"
    results = []
    iters = max(1, p.stride_nodes // gm.UNROLL)
    for s in p.strides:
        try:
            ch = gm.build_chain(s * p.stride_nodes, max(8, s), "strided", limit=r.limit())
            samples = []
            for _ in range(p.stride_reps):
                r.place(ch)
                if flush_bytes:
                    _flush(r, flush_bytes)
                vals, _ = r.chase(name, ch.footprint, 0, iters)
                samples.append(float(vals[0, 0]))
            results.append(r.k.result(
                name, variant=variant, measure="latency_vs_stride", value=float(np.median(samples)),
                unit="cycles", statistic="median over cold passes of clock64 span / loads",
                params={"stride": s, "nodes": ch.nodes, "flush_bytes": flush_bytes, "path": op},
                samples=samples, flags=list(flags)))
        except Exception as e:
            results.append(_err(variant, "latency_vs_stride", "cycles", e, stride=s))
    return results, r.k.texts(name)


def _flush(r: Launcher, nbytes: int) -> None:
    blk = r.plan.bw_block
    grid = r.sm * r.plan.bw_blocks_per_sm
    per = max(4 * blk, (nbytes // 16 // grid) // (4 * blk) * (4 * blk))
    r.dev.launch(r.k.cubin, "bw_st_cg", grid, blk,
                 [Buf("flush", nbytes=per * grid * 16), Buf("bwout", nbytes=24 * grid),
                  np.uint32(per), np.uint32(per), np.uint32(1)])


def bench_l2map(r: Launcher) -> tuple[list[Result], dict]:
    """Per-SM L2 latency by address: one block per SM, each on a one-line self-loop
    (``l2probe``, .cg), lines at random offsets of a buffer; launch k gives block b the line
    (b + k) mod lines, so every SM meets every line; ``l2map_reps`` rounds. The matrix
    (SM x line, median over rounds) shows which SMs see which lines as near."""
    p = r.plan
    name = "l2probe"
    nbytes = int(min(p.l2map_bytes, r.limit() // 4))
    rng = np.random.default_rng(p.seed)
    lines = np.sort(rng.choice(nbytes // 128, size=min(p.l2map_lines, nbytes // 128),
                               replace=False)).astype(np.int64) * 128
    if int(lines.max()) + 8 > nbytes or (lines % 8).any():
        raise gm.ChainError("probe line outside the buffer")
    g, grid = int(lines.size), r.sm
    cells: dict[tuple[int, int], list[float]] = {}
    loads = p.l2map_iters * gm.UNROLL
    for _rep in range(p.l2map_reps):
        for k in range(g):
            group = (np.arange(grid) + k) % g
            run = r.dev.launch(r.k.cubin, name, grid, 1, [
                Buf("l2map", nbytes=nbytes), Buf("out", nbytes=24 * grid, read=True),
                np.uint32(p.l2map_warm), np.uint32(p.l2map_iters),
                Buf("l2offs", data=lines[group].astype(np.uint64)), np.uint64(nbytes - 8)])
            out = np.asarray(run.outputs["out"], dtype=np.uint64)[: 3 * grid].reshape(grid, 3)
            for b in range(grid):
                cells.setdefault((int(out[b, 2]), int(group[b])), []).append(float(out[b, 0]) / loads)
    sms = sorted({sm for sm, _ in cells})
    mat = [[float(np.median(cells[(sm, j)])) if (sm, j) in cells else None for j in range(g)]
           for sm in sms]
    reps = [v for v in cells.values() if len(v) > 1]
    spread = pooled_spread(reps)
    part = am.partition_map(sms, mat)
    flat = [v for row in mat for v in row if v is not None]
    res = r.k.result(name, variant="l2map/ld.global.cg", measure="latency_matrix",
                     value=float(np.median(flat)), unit="cycles",
                     statistic="per (SM, line): median over rounds of clock64 span / loads; "
                               "value: median over the matrix",
                     params={"lines": g, "buffer_bytes": nbytes, "line_offsets": lines.tolist(),
                             "rounds": p.l2map_reps, "loads": loads, "warm": p.l2map_warm,
                             "blocks": grid, "sms_seen": len(sms), "repeat_spread_rel": spread,
                             "l2_reported_bytes": r.l2_reported, "partition": part},
                     samples={"sm": sms, "latency": [[None if v is None else round(v, 2) for v in row]
                                                     for row in mat],
                              # the raw repeats: rounds[k][i][j] = round k, SM sms[i], line j
                              "rounds": [[[round(cells[(sm, j)][k], 1) if len(cells.get((sm, j), [])) > k
                                           else None for j in range(g)] for sm in sms]
                                         for k in range(p.l2map_reps)]})
    out = [res]
    if r.l2_reported:
        out.append(Result("device/l2_size_reported", "l2_cache_size", float(r.l2_reported),
                          "bytes", "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)",
                          params={"what": "the driver's figure, compared with the measured "
                                          "capacity; not a measurement"},
                          cls="memory", strategy="reported"))
    return out, r.k.texts(name)


def _counts(top: int, per_octave: int, start: int = 2) -> list[int]:
    """Geometric page counts from ``start`` to ``top``, eight times as dense over the last
    quarter octave (a level that runs out near the largest chain still gets two points
    above its step)."""
    if top < start:
        return []
    n = int(math.floor(math.log2(top / start) * per_octave)) + 1
    tail = {int(round(top * 2 ** (-k / (8 * per_octave)))) for k in range(4)}
    return sorted({int(round(start * 2 ** (i / per_octave))) for i in range(n)} | {x for x in tail if x >= start})


def bench_tlb(r: Launcher) -> tuple[list[Result], dict]:
    """Translation reach and miss cost: for each page stride, chains over N pages (random
    page order, a few L2-resident lines per page, .cg loads), N from 2 to what fits in the
    free memory; ``sweep_launches`` launches per point, each with its own page order and
    lines, so their spread holds the line-to-line variation a step must exceed."""
    p = r.plan
    name = GLOBAL_PATHS["ld.global.cg"]
    top = min(p.tlb_max, int(int(r.dev.free_memory()) * p.tlb_free_fraction) + r.held)
    results: list[Result] = []
    for stride in p.tlb_strides:
        variant = f"tlb/{am.human(stride).replace(' ', '')}"
        for n in _counts(top // stride, p.tlb_per_octave):
            lines = max(1, min(p.tlb_lines_per_page, p.tlb_lines // n))
            nbytes = (n - 1) * stride + p.tlb_region
            step = p.tlb_region // lines
            try:
                samples, shifts = [], []
                for k in range(p.sweep_launches):
                    shift = (k * 1088) % step // 64 * 64
                    offs = gm.offset_chain(
                        gm.page_chain_offsets(n, stride, p.tlb_region, lines, seed=p.seed + k, shift=shift),
                        nbytes, limit=r.limit())
                    r.link(offs, nbytes)
                    vals, _ = r.chase(name, nbytes, min(offs.size, p.warm_cap), p.sweep_iters)
                    samples.append(float(vals[0, 0]))
                    shifts.append(shift)
                results.append(r.k.result(
                    name, variant=variant, measure="latency_vs_pages", value=float(np.median(samples)),
                    unit="cycles", statistic="median over launches (each its own page order and "
                                             "lines) of clock64 span / dependent loads",
                    params={"pages": n, "page_stride": stride, "footprint": n * stride,
                            "lines_per_page": lines, "nodes": n * lines, "region": p.tlb_region,
                            "line_shifts": shifts, "loads": p.sweep_iters * gm.UNROLL,
                            "warm_covers_chain": n * lines <= p.warm_cap, "top": top},
                    samples=samples, flags=_repeat_flags(samples, [])))
            except Exception as e:
                results.append(_err(variant, "latency_vs_pages", "cycles", e, pages=n,
                                    page_stride=stride))
    return results, r.k.texts(name)


def bench_line(r: Launcher, level: str, ref_spacing: int, lo: int, hi: int, flags: list[str]
               ) -> tuple[list[Result], dict]:
    """Line (allocation) size: strided chains at node spacings wider than a candidate line
    (odd multiples of powers of two, so every set is used); the capacity step of spacing s
    lies at capacity x max(1, s / line). L1 (.ca): the reference spacing (the fill
    granularity) is swept here too; L2 (.cg): the reference is the staircase."""
    p = r.plan
    op = "ca" if level == "L1" else "cg"
    name = GLOBAL_PATHS[f"ld.global.{op}"]
    spacings = ((ref_spacing, *p.line_spacings_l1) if level == "L1" else p.line_spacings_l2)
    results: list[Result] = []
    n = int(math.floor(math.log2(hi / lo) * p.line_per_octave)) + 1
    for sp in spacings:
        variant = f"line/{level}@{sp}"
        for f in sorted({int(lo * 2 ** (i / p.line_per_octave)) // sp * sp for i in range(n)}):
            try:
                ch = gm.build_chain(f, sp, "strided", limit=r.limit())
                if ch.nodes > p.max_nodes:
                    raise gm.ChainError(f"{ch.nodes} nodes exceed max_nodes {p.max_nodes}")
                r.place(ch)
                warm = min(ch.nodes, p.warm_cap)
                vals, _ = r.chase(name, ch.footprint, warm, p.sweep_iters, launches=p.sweep_launches)
                samples = [float(v) for v in vals[:, 0]]
                results.append(r.k.result(
                    name, variant=variant, measure="latency_vs_footprint",
                    value=float(np.median(samples)), unit="cycles",
                    statistic="median over launches of clock64 span / dependent loads",
                    params={"footprint": ch.footprint, "spacing": sp, "order": "strided",
                            "nodes": ch.nodes, "warm_links": warm, "reference": sp == ref_spacing,
                            "level": level, "launches": len(samples)},
                    samples=samples, flags=_repeat_flags(samples, flags)))
            except Exception as e:
                results.append(_err(variant, "latency_vs_footprint", "cycles", e, footprint=f,
                                    spacing=sp))
    return results, r.k.texts(name)


def bench_bank(r: Launcher, bits: int) -> tuple[list[Result], dict]:
    p = r.plan
    name = f"bank_w{bits}"
    width = bits // 8
    out = []
    for k in p.bank_strides:
        stride = k * width
        try:
            run = r.dev.launch(r.k.cubin, name, 1, 32, [Buf("bankout", nbytes=24, read=True),
                                                        np.uint32(stride), np.uint32(p.lat_iters)],
                               launches=p.lat_launches)
            cyc = float(np.asarray(run.outputs["bankout"], dtype=np.uint64)[0]) / (
                p.lat_iters * gm.UNROLL)
            deg = am.bank_degrees(stride, width)
            out.append(r.k.result(name, variant=f"bank/w{bits}", measure="cycles_per_access",
                                  value=cyc, unit="cycles",
                                  statistic="clock64 span / dependent warp accesses (last launch)",
                                  params={"stride_bytes": stride, "width_bytes": width, **deg},
                                  samples=[cyc]))
        except Exception as e:
            out.append(_err(f"bank/w{bits}", "cycles_per_access", "cycles", e, stride_bytes=stride))
    return out, r.k.texts(name)


def _select(names: list[str], patterns: list[str] | None) -> list[str]:
    if not patterns:
        return names
    return [n for n in names if any(fnmatch.fnmatch(n, pt) or pt in n for pt in patterns)]



def item_names(plan: Plan) -> list[str]:
    """The suite's items in run order (later ones use sizes the earlier ones measured)."""
    lat_paths = [*GLOBAL_PATHS, *LOCAL_PATHS, *STORE_ROUND_TRIP,
                 *(f"ld.const@{f}" for f in plan.const_footprints), "tex"]
    return ([f"latency/{pth}" for pth in lat_paths] + [f"store_span/{s}" for s in STORE_SPANS]
            + ["stride/L1", "stride/L2", "sweep/ca-random",
            "sweep/ca-strided", "sweep/cg-random", "sweep/tex-random", "tlb",
            "line/L1", "line/L2", "l2map", *bwm.ITEMS, tex.ITEM]
            + [f"bank/w{b}" for b in gm.BANK_WIDTHS])


def _flush_bytes(ctx: Context, r: Launcher) -> tuple[int, list[str]]:
    """Bytes the L2 flush streams (4 x the L2): the L2 measured in this run, else the size the
    driver reports (stride/L2 runs before the sweeps), else generic; flagged when not measured."""
    sizes, _ = _derived(ctx)
    l2 = (sizes.get("L2") or {}).get("bytes")
    flags: list[str] = []
    if not l2 and r.l2_reported:
        l2, flags = r.l2_reported, ["flush sized from the driver's L2 size (not measured yet)"]
    flush = 4 * int(l2) if l2 else min(1 << 30, int(ctx.dev.free_memory()) // 4)
    if not l2:
        flags = ["fallback: L2 size neither measured nor reported; flush size generic"]
    return min(flush, int(ctx.dev.free_memory()) // 2), flags


def _sweep_spacing(ctx: Context) -> tuple[int, list[str]]:
    """Node spacing of the cache sweeps: the widest fill granularity measured (L1, L2), as a
    power of two, so no node shares a fill with its neighbour (a strided chain at a finer
    spacing hits the sector its neighbour's miss brought in, a false level between two)."""
    _, fills = _derived(ctx)
    got = {lv: (fills.get(lv) or {}).get("bytes") for lv in ("L1", "L2")}
    have = [int(v) for v in got.values() if v]
    if not have:
        return 256, ["fallback: fill granularity not measured; node spacing 256 B"]
    flags = [f"fallback: {lv} fill granularity not measured; spacing from the other level"
             for lv, v in got.items() if not v]
    return max(32, 1 << int(math.ceil(math.log2(max(have))))), flags


def _line_plan(ctx: Context, level: str) -> tuple[str, int, int, int, list[str]]:
    """(level, reference spacing, lowest and highest footprint, flags) of a line-size item,
    from the sizes and fill granularity this run measured (generic, flagged, where missing)."""
    sizes, fills = _derived(ctx)
    flags: list[str] = []
    if level == "L1":
        fill = (fills.get("L1") or {}).get("bytes")
        cap = (sizes.get("L1") or {}).get("bytes")
        if not fill:
            fill, flags = 32, flags + ["fallback: L1 fill granularity not measured; reference spacing 32 B"]
        if not cap:
            cap, flags = 64 * 1024, flags + ["fallback: L1 size not measured; generic 64 KiB range"]
        return level, int(fill), int(cap) // 2, 8 * int(cap), flags
    near = (sizes.get("L2_near") or sizes.get("L2") or {}).get("bytes")
    cap = (sizes.get("L2") or {}).get("bytes")
    if not near or not cap:
        near = cap = 16 * MiB
        flags.append("fallback: L2 sizes not measured; generic 16 MiB range")
    return level, 0, int(near), 4 * int(cap), flags


def _derived(ctx: Context) -> tuple[dict, dict]:
    """Sizes measured so far in this run (for spacing, flush and bandwidth footprints)."""
    s = am.summarize(ctx.store.results(ctx.run_id))
    return s.get("sizes", {}), s.get("line_sizes", {})


class MemorySuite(SuiteBase):
    name = "memory"
    description = ("latency of every load path, cache sizes and TLB reach, line sizes, L2 "
                   "near/far, bandwidth of each level, shared-memory bank conflicts")
    options = {"plan": "a memory Plan to run instead of the full (or --quick) one"}

    def plan(self, ctx: Context, patterns: list[str] | None) -> contract.Plan:
        plan = ctx.options.get("plan") or (QUICK_PLAN if ctx.quick else Plan())
        ctx.state["plan"] = plan
        return contract.Plan([Item(n) for n in _select(item_names(plan), patterns)],
                             plan.to_json())

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        plan = ctx.state["plan"]
        ctx.state["launcher"] = Launcher(ctx.dev, Kernels(ctx.target, plan), plan)

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        r: Launcher = ctx.state["launcher"]
        name = item.name
        if name.startswith("latency/"):
            return Outcome(*bench_latency(r, name.split("/", 1)[1]))
        if name.startswith("store_span/"):
            return Outcome(*bench_store_span(r, name.split("/", 1)[1]))
        if name.startswith("stride/"):
            level = name.split("/")[1]
            flush, flags = (_flush_bytes(ctx, r) if level == "L2" else (None, []))
            return Outcome(*bench_stride(r, level, flush, flags))
        if name.startswith("sweep/"):
            op, order = name.split("/")[1].split("-")
            spacing, fl = _sweep_spacing(ctx)
            return Outcome(*bench_sweep(r, op, order, spacing, fl))
        if name == "tlb":
            return Outcome(*bench_tlb(r))
        if name.startswith("line/"):
            return Outcome(*bench_line(r, *_line_plan(ctx, name.split("/")[1])))
        if name == "l2map":
            return Outcome(*bench_l2map(r))
        if name.startswith("bandwidth/"):
            return Outcome(*bwm.bench(r, name, _derived(ctx)[0], int(ctx.dev.free_memory()),
                                      ctx.target, ctx.store.results(ctx.run_id)))
        if name == tex.ITEM:
            return Outcome(*tex.bench(r))
        if name.startswith("bank/w"):
            return Outcome(*bench_bank(r, int(name.removeprefix("bank/w"))))
        raise ValueError(f"unknown item {name}")

    def error_results(self, item: Item, flag: str) -> list[Result]:
        return [error_result(item.name, "error", "-", flag)]

    def summarize(self, ctx: Context) -> dict:
        return am.summarize(ctx.store.results(ctx.run_id))


SUITE = MemorySuite()
