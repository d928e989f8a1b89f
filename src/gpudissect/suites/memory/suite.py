"""The memory suite: latency of every load path, the footprint staircase (cache sizes, TLB
reach), line sizes, L2 near/far, bandwidth of each level and shared-memory bank conflicts.

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

from gpudissect.bench import contract
from gpudissect.bench.contract import Context, Item, Outcome, Redo, SuiteBase
from gpudissect.bench.steps import detect, refine_points
from gpudissect.device.device import TEX1D_LINEAR_MAX_WIDTH, Buf, Device, Tex
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.memory import analyse as am
from gpudissect.suites.memory import kernels as gm
from gpudissect.suites.memory.checks import MemCheck, check_region
from gpudissect.target import Target

MiB = 1 << 20


@dataclass(frozen=True)
class Plan:
    hot_footprint: int = 2048  # path latencies: a chain this small stays in the nearest level
    hot_spacing: int = 64
    lat_iters: int = 64  # x UNROLL dependent loads timed per launch
    lat_launches: int = 3
    sweep_min: int = 4096
    sweep_max: int = 32 << 30  # capped by half the free device memory
    per_octave: int = 2
    refine: int = 3  # extra points inside each detected step's bracket
    sweep_iters: int = 128
    warm_cap: int = 1 << 20  # untimed links followed before timing (whole chain when smaller)
    max_nodes: int = 1 << 20  # larger footprints space their nodes further apart (= warm_cap:
    # every swept chain is walked whole before it is timed)
    strides: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024)
    # TLB sweep: one node per ~1 MiB region (few nodes: the data stays in L2, so a step is
    # translation); the odd spacing spreads nodes over cache sets
    tlb_spacing: int = (1 << 20) + 4160
    # the page sweep's few nodes stay in L2 whatever the footprint, so it may span most of the
    # device memory (translation reach can exceed the cache sweeps' half of free memory)
    tlb_max: int = 128 << 30
    tlb_free_fraction: float = 0.85
    stride_nodes: int = 1024
    stride_reps: int = 3  # cold passes per stride (fresh chain each); median
    const_footprints: tuple[int, ...] = (512, 2048, 8192, 32768)
    bank_strides: tuple[int, ...] = (0, 1, 2, 3, 4, 8, 16, 32, 64)  # in access widths
    bw_block: int = 256
    bw_blocks_per_sm: int = 8
    bw_bytes: int = 4 << 30  # bytes moved per bandwidth launch (about)
    bw_launches: int = 3
    seed: int = 1

    def const_spacing(self, footprint: int) -> int:
        """Node spacing of a constant chase's chain of ``footprint`` bytes."""
        return self.hot_spacing if footprint > 2 * self.hot_spacing else 8

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


QUICK_PLAN = Plan(sweep_max=512 << 20, tlb_max=1 << 30, stride_reps=1, per_octave=1, refine=1, sweep_iters=32, warm_cap=1 << 16,
                  strides=(8, 32, 128, 512), const_footprints=(2048,), bank_strides=(0, 1, 2, 32),
                  bw_bytes=1 << 28, bw_launches=2, lat_launches=2)

GLOBAL_PATHS = {f"ld.global.{op}": f"chase_{op}" for op in gm.GLOBAL_OPS}
LOCAL_PATHS = {"ld.shared": "chase_lds", "st.shared+ld.shared": "chase_sts", "ld.local": "chase_ldl"}
TEX_KERNEL = "chase_tex"  # latency/tex and sweep/tex-*: a 1D u32 texture object over the chain


def module_kernels(header: str, plan: Plan) -> list[Kernel]:
    """All kernels of the suite (one module under ``header``); the constant chases hold the
    plan's chains."""
    ks = [gm.scatter_kernel(header), gm.copy_kernel(header)]
    ks += [gm.chase_global_kernel(op, header) for op in gm.GLOBAL_OPS]
    ks += [gm.chase_shared_kernel(header), gm.chase_shared_kernel(header, store=True),
           gm.chase_local_kernel(header), gm.chase_tex_kernel(header)]
    for f in plan.const_footprints:
        ch = gm.build_chain(f, plan.const_spacing(f), "random", seed=plan.seed)
        ks.append(gm.chase_const_kernel(ch, header, f"{f}"))
    ks += [gm.bandwidth_kernel(k, header) for k in gm.BW_KINDS]
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


class Launcher:
    """The suite's kernels on one device: chains placed, chases and streams launched; it
    remembers the largest chain buffer held (free memory counts it as available)."""

    def __init__(self, dev: Device, k: Kernels, plan: Plan):
        self.dev, self.k, self.plan = dev, k, plan
        self.held = 0  # bytes of the largest chain buffer allocated so far
        self.sm = int(dev.info.sm_count)

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
        if path in GLOBAL_PATHS or path == "tex":
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
    samples = [float(v) for v in vals[:, 0]]
    res = r.k.result(name, variant=variant, measure="latency", value=float(np.median(samples)),
                     unit="cycles", statistic="median over launches of (clock64 span / dependent loads)",
                     params=params, samples=samples)
    return [res], r.k.texts(name)


def _sweep_points(p: Plan, top: int, start: int) -> list[int]:
    n = int(math.floor(math.log2(top / start) * p.per_octave)) + 1
    pts = sorted({int(round(start * 2 ** (i / p.per_octave) / 64)) * 64 for i in range(n)})
    return [x for x in pts if x <= top]


def bench_sweep(r: Launcher, op: str, order: str, spacing: int, spacing_flag: list[str]
                ) -> tuple[list[Result], dict]:
    p = r.plan
    name = TEX_KERNEL if op == "tex" else GLOBAL_PATHS[f"ld.global.{op}"]
    variant = f"sweep/{op}-{order}"
    if order == "pages":
        top = min(p.tlb_max, int(int(r.dev.free_memory()) * p.tlb_free_fraction) + r.held)
    else:
        top = min(p.sweep_max, int(r.dev.free_memory()) // 2 + r.held)
    if op == "tex":  # the chain is the texture's element array
        top = min(top, TEX1D_LINEAR_MAX_WIDTH * 4)
    results: list[Result] = []
    measured: dict[int, float] = {}

    def point(f: int) -> None:
        try:
            ch = r.chain(f, spacing, "random" if order == "pages" else order, seed=len(measured))
            arg = r.chain_arg(name, ch)
            warm = min(ch.nodes, p.warm_cap)
            vals, _ = r.chase(name, ch.footprint, warm, p.sweep_iters, chain_buf=arg)
            v = float(vals[0, 0])
            measured[ch.footprint] = v
            results.append(r.k.result(
                name, variant=variant, measure="latency_vs_footprint", value=v, unit="cycles",
                statistic="clock64 span / dependent loads (one launch)",
                params={"footprint": ch.footprint, "spacing": ch.spacing, "order": order,
                        "warm_links": warm, "nodes": ch.nodes, "warm_covers_chain": warm >= ch.nodes,
                        "loads": p.sweep_iters * gm.UNROLL},
                samples=[v], flags=list(spacing_flag)))
        except Exception as e:  # a refused or failed point: recorded, the sweep goes on
            results.append(_err(variant, "latency_vs_footprint", "cycles", e, footprint=f))

    for f in _sweep_points(p, top, start=2 * spacing if order == "pages" else p.sweep_min):
        point(f)
    if p.refine and measured:
        xs = sorted(measured)
        _, steps = detect(xs, [measured[x] for x in xs])
        for f in refine_points(steps, xs, p.refine):
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


def bench_nearfar(r: Launcher) -> tuple[list[Result], dict]:
    p = r.plan
    name = GLOBAL_PATHS["ld.global.cg"]
    ch = gm.build_chain(2 * 128, 128, "strided", limit=r.limit())
    r.place(ch)
    vals, smid = r.chase(name, ch.footprint, 64, p.lat_iters, grid=r.sm, launches=1)
    per = {}
    for s, v in zip(smid.tolist(), vals[0].tolist(), strict=True):
        per.setdefault(int(s), []).append(float(v))
    by_sm = {str(s): float(np.median(v)) for s, v in sorted(per.items())}
    split = am.two_groups(list(by_sm.values()))
    res = r.k.result(name, variant="nearfar/ld.global.cg", measure="latency_per_sm",
                     value=float(np.median(list(by_sm.values()))), unit="cycles",
                     statistic="median over SMs (one block per SM, all on the same 256-byte chain)",
                     params={"blocks": r.sm, "sms_seen": len(by_sm), "split": split},
                     samples=by_sm)
    return [res], r.k.texts(name)


def _bw(r: Launcher, kernel: str, buf: str, per_block: int, bstride: int, footprint: int,
        variant: str, level: str, rw: str, flags: list[str]) -> Result:
    p = r.plan
    blk, grid = p.bw_block, r.sm * p.bw_blocks_per_sm
    per_block = max(4 * blk, per_block // (4 * blk) * (4 * blk))
    if bstride:
        bstride = per_block  # disjoint slices, exactly covering the buffer
    moved_once = per_block * 16 * grid
    if "shared" not in kernel:  # the bytes actually touched, after rounding to whole loop trips
        footprint = per_block * 16 * (grid if bstride else 1)
    reps = max(1, int(math.ceil(p.bw_bytes / moved_once)))
    nbytes = (per_block * 16 * (grid if bstride else 1)) if "shared" not in kernel else 64
    if "shared" not in kernel and ((grid - 1) * bstride + per_block) * 16 > nbytes:
        raise ValueError(f"{kernel}: slices would reach past the {nbytes}-byte buffer")
    run = r.dev.launch(r.k.cubin, kernel, grid, blk,
                       [Buf(buf, nbytes=max(nbytes, 64)), Buf("bwout", nbytes=24 * grid),
                        np.uint32(per_block), np.uint32(bstride), np.uint32(reps)],
                       launches=p.bw_launches)
    clocks = r.dev.clocks()
    ms = [float(x) for x in run.gpu_ms]
    best = min(ms[1:] if len(ms) > 1 else ms)
    total = moved_once * reps
    gbs = total / (best * 1e-3) / 1e9
    mhz = clocks.get("sm_mhz")
    bpc = total / (best * 1e-3) / (mhz * 1e6) / r.sm if mhz else None
    return r.k.result(kernel, variant=variant, measure="bandwidth", value=gbs, unit="GB/s",
                      statistic="bytes / fastest launch (CUDA events), first launch dropped",
                      params={"level": level, "rw": rw, "bytes": total, "footprint": footprint,
                              "grid": grid, "block": blk, "reps": reps,
                              "bytes_per_cycle_per_sm": bpc, "sm_mhz_after": mhz,
                              "clock": "NVML SM clock read right after the launches"},
                      samples=ms, flags=list(flags))


def bench_bandwidth(r: Launcher, sizes: dict, flags: dict) -> tuple[list[Result], dict]:
    """Shared, L1, L2 and device memory, read and write, chip full; and a device copy."""
    p = r.plan
    grid = r.sm * p.bw_blocks_per_sm
    out: list[Result] = []
    texts: dict = {}
    l1 = sizes["l1"]
    l2 = sizes["l2"]
    dram = sizes["dram"]
    jobs = [
        ("bw_ld_shared", "bwsh", 2048, 0, gm.BW_SMEM_BYTES, "shared", "read"),
        ("bw_st_shared", "bwsh", 2048, 0, gm.BW_SMEM_BYTES, "shared", "write"),
        # every block of the chip reads the same slice: it stays in each SM's L1
        ("bw_ld_ca", "bwl1", l1 // 2 // 16, 0, l1 // 2, "L1", "read"),
        ("bw_ld_cg", "bwl2", l2 // 2 // 16 // grid, l2 // 2 // 16 // grid, l2 // 2, "L2", "read"),
        ("bw_st_cg", "bwl2", l2 // 2 // 16 // grid, l2 // 2 // 16 // grid, l2 // 2, "L2", "write"),
        ("bw_ld_cg", "bwdram", dram // 16 // grid, dram // 16 // grid, dram, "DRAM", "read"),
        ("bw_st_cg", "bwdram", dram // 16 // grid, dram // 16 // grid, dram, "DRAM", "write"),
    ]
    for kernel, buf, per, bstride, fp, level, rw in jobs:
        variant = f"bandwidth/{level}/{rw}"
        try:
            if fp > r.limit():
                raise gm.ChainError(f"footprint {fp / MiB:.0f} MiB exceeds free device memory")
            out.append(_bw(r, kernel, buf, per, bstride, fp, variant, level, rw, flags.get(level, [])))
            texts.update(r.k.texts(kernel))
        except Exception as e:
            out.append(_err(variant, "bandwidth", "GB/s", e, footprint=fp))
    # device-to-device copy of the DRAM footprint (a copy kernel; read + write bytes counted)
    try:
        nvec = dram // 16
        run = r.dev.launch(r.k.cubin, "copy", grid, p.bw_block,
                           [Buf("bwdram", nbytes=nvec * 16), Buf("copydst", nbytes=nvec * 16),
                            np.uint64(nvec)], launches=p.bw_launches)
        ms = [float(x) for x in run.gpu_ms]
        best = min(ms[1:] if len(ms) > 1 else ms)
        out.append(Result("bandwidth/DRAM/copy", "bandwidth", 2 * nvec * 16 / (best * 1e-3) / 1e9,
                          "GB/s", "(read + write bytes) / fastest launch (events), first dropped",
                          params={"level": "DRAM", "rw": "copy", "bytes_copied": nvec * 16,
                                  "method": "copy kernel (ld.global.cs.v4 / st.global.cs.v4, "
                                            "grid-stride), not cuMemcpyDtoD"},
                          samples=ms, cls="memory", strategy="memory",
                          flags=list(flags.get("DRAM", []))))
    except Exception as e:
        out.append(_err("bandwidth/DRAM/copy", "bandwidth", "GB/s", e, footprint=dram))
    return out, texts


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
    lat_paths = [*GLOBAL_PATHS, *LOCAL_PATHS, *(f"ld.const@{f}" for f in plan.const_footprints),
                 "tex"]
    return ([f"latency/{pth}" for pth in lat_paths] + ["stride/L1", "sweep/ca-random",
            "sweep/ca-strided", "sweep/cg-random", "sweep/cg-pages", "sweep/tex-random",
            "stride/L2", "nearfar", "bandwidth"]
            + [f"bank/w{b}" for b in gm.BANK_WIDTHS])


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
        if name.startswith("stride/"):
            level = name.split("/")[1]
            flush, flags = None, []
            if level == "L2":
                sizes, _ = _derived(ctx)
                l2 = (sizes.get("L2") or {}).get("bytes")
                if l2:
                    flush = 4 * int(l2)
                else:
                    flush = min(1 << 30, int(ctx.dev.free_memory()) // 4)
                    flags = ["fallback: L2 size not measured in this run; flush size generic"]
                flush = min(flush, int(ctx.dev.free_memory()) // 2)
            return Outcome(*bench_stride(r, level, flush, flags))
        if name.startswith("sweep/"):
            op, order = name.split("/")[1].split("-")
            _, lines = _derived(ctx)
            line = (lines.get("L1") or {}).get("bytes")
            if order == "pages":
                spacing, fl = r.plan.tlb_spacing, []
            elif line:
                spacing, fl = max(32, 1 << int(math.ceil(math.log2(line)))), []
            else:
                spacing, fl = 256, ["fallback: L1 line size not measured; node spacing 256 B"]
            return Outcome(*bench_sweep(r, op, order, spacing, fl))
        if name == "nearfar":
            return Outcome(*bench_nearfar(r))
        if name == "bandwidth":
            sizes, _ = _derived(ctx)
            bw_sizes, flags = am.bandwidth_footprints(sizes, int(ctx.dev.free_memory()))
            return Outcome(*bench_bandwidth(r, bw_sizes, flags))
        if name.startswith("bank/w"):
            return Outcome(*bench_bank(r, int(name.removeprefix("bank/w"))))
        raise ValueError(f"unknown item {name}")

    def error_results(self, item: Item, flag: str) -> list[Result]:
        return [error_result(item.name, "error", "-", flag)]

    def summarize(self, ctx: Context) -> dict:
        return am.summarize(ctx.store.results(ctx.run_id))


SUITE = MemorySuite()
