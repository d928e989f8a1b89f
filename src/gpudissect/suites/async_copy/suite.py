"""The async suite: Hopper's asynchronous copy machinery (mbarrier, cp.async, TMA bulk and
tensor copies, bulk stores and reductions, proxy and cluster fences), measured on the GPU.

Items (patterns are globs on the names, or a group: ``mbarrier``, ``fence``, ``cpasync``, ``tma``,
``tensor``, ``bw``):

* ``op:<ptx>``: an mbarrier / fence / commit operation back to back in one thread (cycles each);
* ``mbarrier:phase-flip`` (arrive + wait on a count-1 barrier), ``mbarrier:handshake`` (a
  producer/consumer round trip between two warps of a CTA);
* ``cpasync:<v>`` / ``sync:<v>``: a cp.async copy (4/8/16 bytes, .ca/.cg) issued and waited
  for, against ld.global + st.shared of the same bytes;
* ``tma:load:<where>:<tile>``, ``ld:<where>``: TMA bulk global -> shared issue to mbarrier
  completion for an L2 hit (the same tile again) or a DRAM miss (fresh tiles), beside a
  dependent ld.global.cg; ``tma:store|store.read|reduce:<tile>``: bulk shared -> global
  (committed, waited for);
* ``tensor:<config>``: cp.async.bulk.tensor 1D-5D, element types, swizzle modes (L2 hits);
* ``bw:<kernel>:<where>:<tile>``: bandwidth at saturation (CTAs per SM swept until the rate
  stops rising): TMA bulk and 2D tensor loads against tile size, L2 promotion, swizzle, bulk
  stores and reductions, beside a cp.async stream and the plain-load baseline ``bw:ld.v4:<where>``
  run in the same run: ld.global.cg.v4 over ILP x CTAs per SM, its best proven saturated
  (bench/stream_read.py), so that TMA is set against the best a plain load reaches;
* ``wgmma:swizzle=<mode>``, ``wgmma:layout=<mode>``, ``wgmma:pipeline:stages=<s>`` (group
  ``wgmma``, wgmma_feed.py): wgmma throughput with swizzled descriptors, TMA-written tiles
  checked against numpy, and a TMA -> mbarrier -> wgmma pipeline.

Chains time ``LENGTHS`` instances (slope), LAUNCHES launches each; streams run REPS
repetitions of the whole grid's walk and time the kept ones as one window (globaltimer; the
same method for the TMA, cp.async and plain-load streams, so that they compare best to best),
LAUNCHES launches per configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from gpudissect.arch.occupancy import occupancy_rules, predict_blocks
from gpudissect.arch.target import ptx_needs
from gpudissect.bench.clock import measure_sm_clock
from gpudissect.bench.contract import (
    Context,
    Item,
    Outcome,
    Plan,
    Redo,
    SuiteBase,
    select_named,
)
from gpudissect.bench.stats import noise_flag
from gpudissect.bench.stream_read import grid_saturation, loads_in_flight
from gpudissect.device.args import Buf
from gpudissect.device.tensormap import TensorMap
from gpudissect.kernel.build import Built, build_module, take
from gpudissect.kernel.ptx import ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.async_copy import analyse as an
from gpudissect.suites.async_copy import checks
from gpudissect.suites.async_copy.kernels import (
    BAR_BYTES,
    CPA_VARIANTS,
    DRAM_STRIDE,
    ILP,
    LENGTHS,
    OP_BODIES,
    REPS,
    ROW,
    STAGES,
    STREAM_THREADS,
    Spec,
    make_kernel,
    module_header,
)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
LAUNCHES = 3
SRC_BYTES = 1 * GiB  # DRAM footprint (20x the L2) and the DRAM-miss chains' fresh tiles
L2_BYTES = 8 * MiB  # an L2-resident footprint
L2_PASSES = 32  # passes over it per repetition
TMA_LAT_TILES = (16, 256, 1024, 4096, 16384)
STORE_TILES = (256, 4096)
BW_TILES = (256, 512, 1 * KiB, 2 * KiB, 4 * KiB, 8 * KiB, 16 * KiB, 32 * KiB)
TMA_CTAS = (1, 2, 4, 8, 16, 32)  # CTAs per SM swept (as far as shared memory allows)
LD_CTAS = (1, 2, 4, 8)  # CTAs of STREAM_THREADS per SM of the plain-load stream: 8 to 64 warps per SM
LD_ILPS = (1, 2, 4, 8)  # 128-bit loads in flight per thread of the plain-load stream, swept with LD_CTAS
CPA_CTAS = (1, 2, 3)
MAX_CTAS_PER_SM = 32
CHAIN_SMEM = BAR_BYTES + 16 * KiB


@dataclass
class Probe:
    name: str
    group: str  # op | mbarrier | cpasync | tma | tensor | bw
    specs: list[Spec]  # one per chain length, or the one stream kernel
    stream: bool = False
    params: dict = field(default_factory=dict)  # what the measurement needs beyond the kernel


# ------------------------------------------------------------------------- tensor maps
def _esize(dtype: str) -> int:
    from gpudissect.device.tensormap import TMAP_DTYPES

    return TMAP_DTYPES[dtype][0]


def tensor_geometry(dtype: str, box: tuple[int, ...]) -> dict:
    """A small tensor twice the box in every dimension, rows padded to 16 bytes: dims,
    strides, bytes."""
    e = _esize(dtype)
    dims = tuple(2 * b for b in box)
    strides, s = [], -(-dims[0] * e // 16) * 16
    for d in dims[1:]:
        strides.append(s)
        s *= d
    return {"dtype": dtype, "dims": dims, "strides": tuple(strides), "box": tuple(box),
            "nbytes": s if len(dims) > 1 else dims[0] * e}


# rank sweep (f32, 1 KiB box), element types and swizzle modes (4 KiB box, 2D)
TENSOR_CONFIGS: dict[str, dict] = {
    "rank1": {"dtype": "f32", "box": (256,)},
    "rank2": {"dtype": "f32", "box": (32, 8)},
    "rank3": {"dtype": "f32", "box": (16, 4, 4)},
    "rank4": {"dtype": "f32", "box": (8, 4, 4, 2)},
    "rank5": {"dtype": "f32", "box": (4, 4, 4, 2, 2)},
    "dtype=u8": {"dtype": "u8", "box": (128, 32)},
    "dtype=u16": {"dtype": "u16", "box": (64, 32)},
    "dtype=f32": {"dtype": "f32", "box": (32, 32)},
    "dtype=f64": {"dtype": "f64", "box": (16, 32)},
    "swizzle=none": {"dtype": "f32", "box": (32, 32), "swizzle": "none"},
    "swizzle=32B": {"dtype": "f32", "box": (8, 128), "swizzle": "32B"},
    "swizzle=64B": {"dtype": "f32", "box": (16, 64), "swizzle": "64B"},
    "swizzle=128B": {"dtype": "f32", "box": (32, 32), "swizzle": "128B"},
}


def tensor_map(cfg: dict, buf: Buf | None = None) -> TensorMap:
    g = tensor_geometry(cfg["dtype"], cfg["box"])
    buf = buf or Buf("tsrc", nbytes=g["nbytes"], zero=True)
    return TensorMap(buf, cfg["dtype"], g["dims"], g["strides"], g["box"], swizzle=cfg.get("swizzle", "none"),
                     l2_promotion=cfg.get("l2", "none"))


def stream_map(tile: int, footprint: int, swizzle: str = "none", l2: str = "none") -> tuple[TensorMap, dict]:
    """The 2D f32 view of the stream source (rows of 4 KiB) and the box of ``tile`` bytes
    (32 elements = 128 bytes across, tile / 128 rows)."""
    rows = footprint // 4096
    bw, bh = 32, tile // 128
    m = TensorMap(Buf("src", nbytes=SRC_BYTES), "f32", (1024, rows), (4096,), (bw, bh), swizzle=swizzle,
                  l2_promotion=l2)
    return m, {"tiles_x": 1024 // bw, "box_w": bw, "box_h": bh, "tiles_y": rows // bh}


# ------------------------------------------------------------------------- the plan
def _chain(name: str, group: str, kind: str, params: dict, threads: int = 32, smem: int = CHAIN_SMEM,
           extra: dict | None = None) -> Probe:
    tag = _tag(name)
    specs = [Spec(f"ac_{tag}_n{n}", kind, dict(params), n, threads, smem) for n in LENGTHS]
    return Probe(name, group, specs, False, extra or {})


def _tag(name: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in name)
    return out.strip("_")


def _stream(name: str, kind: str, params: dict, threads: int, smem: int, ctas: tuple[int, ...],
            extra: dict) -> Probe:
    """A stream probe at ``ctas`` CTAs per SM (those whose shared memory fits one SM are kept
    when the run is planned: :func:`fit_ctas`)."""
    spec = Spec(f"ac_{_tag(name)}", kind, dict(params), 1, threads, smem)
    return Probe(name, "bw", [spec], True, {**extra, "ctas": ctas})


def fit_ctas(p: Probe, rules: dict) -> Probe:
    """A stream probe with the CTA counts per SM whose shared memory fits one SM under the
    architecture's occupancy rules (each CTA's shared memory and the per-block reservation),
    at most MAX_CTAS_PER_SM; the smallest count where none fits."""
    if p.group != "bw":
        return p
    ctas, smem = tuple(p.params["ctas"]), p.specs[0].smem
    fit = tuple(c for c in ctas if c * (smem + rules["smem_reserved_per_block"]) <= rules["smem_per_sm"]
                and c <= MAX_CTAS_PER_SM)
    return replace(p, params={**p.params, "ctas": fit or ctas[:1]})


def _where(where: str) -> tuple[int, int]:
    """(footprint, bytes per repetition) of a stream."""
    return (SRC_BYTES, SRC_BYTES) if where == "dram" else (L2_BYTES, L2_BYTES * L2_PASSES)


def stages_for(tile: int) -> int:
    """TMA ring depth of a stream: STAGES, halved for the largest tiles so that at least two
    CTAs fit an SM (the sweep over CTAs per SM needs two points)."""
    return STAGES if tile <= 16 * KiB else STAGES // 2


def op_group(op: str) -> str:
    """The group of an ``op:`` chain: mbarrier, fence, cpasync (LDGSTS groups) or tma (bulk)."""
    for prefix, group in (("mbarrier", "mbarrier"), ("fence", "fence"), ("cp.async.bulk", "tma"),
                          ("cp.async", "cpasync")):
        if op.startswith(prefix):
            return group
    return "op"


def all_probes() -> list[Probe]:
    ps: list[Probe] = []
    for op in OP_BODIES:
        ps.append(_chain(f"op:{op}", op_group(op), "op", {"op": op}))
    ps.append(_chain("mbarrier:phase-flip", "mbarrier", "phase", {}))
    ps.append(_chain("mbarrier:handshake", "mbarrier", "handshake", {}, threads=64))
    for v in CPA_VARIANTS:
        ps.append(_chain(f"cpasync:{v}", "cpasync", "cpasync", {"variant": v}))
        ps.append(_chain(f"sync:{v}", "cpasync", "sync", {"copy": v}))
    for where in ("l2", "dram"):
        ps.append(_chain(f"ld:{where}", "tma", "ld", {"where": where}))
        for t in TMA_LAT_TILES:
            ps.append(_chain(f"tma:load:{where}:{t}", "tma", "tma_load", {"tile": t, "where": where}))
    for t in STORE_TILES:
        ps.append(_chain(f"tma:store:{t}", "tma", "tma_store", {"tile": t, "op": "store"}))
        ps.append(_chain(f"tma:store.read:{t}", "tma", "tma_store", {"tile": t, "op": "store", "read": True}))
        ps.append(_chain(f"tma:reduce:{t}", "tma", "tma_store", {"tile": t, "op": "reduce.add.u32"}))
    for cname, cfg in TENSOR_CONFIGS.items():
        g = tensor_geometry(cfg["dtype"], cfg["box"])
        nb = int(np.prod(cfg["box"])) * _esize(cfg["dtype"])
        ps.append(_chain(f"tensor:{cname}", "tensor", "tensor", {"rank": len(cfg["box"]), "box_bytes": nb},
                         extra={"config": cname, "geometry": {k: list(v) if isinstance(v, tuple) else v
                                                             for k, v in g.items()}}))
    # bandwidth
    for where in ("dram", "l2"):
        fp, per_rep = _where(where)
        for t in BW_TILES:
            ps.append(_stream(f"bw:tma.bulk:{where}:{t}", "tma_stream",
                              {"mode": "bulk", "tile": t, "mask": fp - 1, "stages": stages_for(t)},
                              32, BAR_BYTES + stages_for(t) * t, TMA_CTAS,
                              {"where": where, "tile": t, "bytes": per_rep, "a": per_rep // t}))
        ps.append(ld_sweep(where, fp, per_rep))
        ps.append(_stream(f"bw:cp.async.cg16:{where}", "cpasync_stream", {"variant": "cg16", "mask": fp - 1},
                          STREAM_THREADS, BAR_BYTES + STAGES * STREAM_THREADS * ILP * 16, CPA_CTAS,
                          {"where": where, "bytes": per_rep, "width": 16}))
    fp, per_rep = _where("l2")
    for v in ("ca4", "ca8", "ca16"):
        size = CPA_VARIANTS[v][1]
        ps.append(_stream(f"bw:cp.async.{v}:l2", "cpasync_stream", {"variant": v, "mask": fp - 1}, STREAM_THREADS,
                          BAR_BYTES + STAGES * STREAM_THREADS * ILP * size, CPA_CTAS,
                          {"where": "l2", "bytes": per_rep // 4, "width": size}))
    fp, per_rep = _where("dram")
    tensor_variants = [("none", "none", t) for t in BW_TILES] + [("128B", "none", 8 * KiB)] + \
        [("none", p, 8 * KiB) for p in ("64B", "128B", "256B")]
    for sw, l2, t in tensor_variants:
        _m, geo = stream_map(t, fp, sw, l2)
        tag = "" if sw == "none" and l2 == "none" else (f".swizzle{sw}" if sw != "none" else f".l2promo{l2}")
        ps.append(_stream(f"bw:tma.tensor2d{tag}:dram:{t}", "tma_stream",
                          {"mode": "tensor", "tile": t, "stages": stages_for(t), **geo},
                          32, BAR_BYTES + stages_for(t) * t, TMA_CTAS,
                          {"where": "dram", "tile": t, "bytes": per_rep, "a": per_rep // t, "swizzle": sw, "l2": l2}))
    for op, key in (("store", "tma.store"), ("reduce.add.u32", "tma.reduce")):
        for t in (4 * KiB, 16 * KiB):
            ps.append(_stream(f"bw:{key}:dram:{t}", "tma_store_stream", {"op": op, "tile": t, "mask": fp - 1},
                              32, BAR_BYTES + t, TMA_CTAS,
                              {"where": "dram", "tile": t, "bytes": per_rep, "a": per_rep // t}))
    return ps


def ld_sweep(where: str, footprint: int, per_rep: int) -> Probe:
    """The plain-load baseline: the ld.global.cg.v4 stream at every ILP of LD_ILPS (one kernel
    each) x CTAs per SM of LD_CTAS, its best configuration proven saturated over both
    (bench/stream_read.grid_saturation), in the same run as the TMA streams."""
    specs = [Spec(f"ac_bw_ld_v4_{where}_x{i}", "ld_stream", {"mask": footprint - 1, "ilp": i}, 1, STREAM_THREADS,
                  BAR_BYTES) for i in LD_ILPS]
    return Probe(f"bw:ld.v4:{where}", "bw", specs, True,
                 {"where": where, "bytes": per_rep, "width": 16, "ilps": list(LD_ILPS), "ctas": LD_CTAS})


def wgmma_probes() -> list[Probe]:
    """The wgmma items (wgmma_feed.py: swizzled descriptors, TMA-written layouts, the TMA ->
    mbarrier -> wgmma pipeline); built for the architecture-specific target."""
    from gpudissect.suites.async_copy.wgmma_feed import probe_specs

    return [Probe(name, "wgmma", specs, False, params) for name, specs, params in probe_specs()]


def select(probes: list[Probe], patterns: list[str] | None) -> list[Probe]:
    return select_named(probes, patterns, lambda p: p.name, lambda p, pat: p.group == pat,
                        f"no async probe matches {patterns} (groups: mbarrier, fence, cpasync, tma, tensor, bw, "
                        "wgmma; or names like 'bw:tma.bulk:*')")


# ------------------------------------------------------------------------- measuring
def _args(ctx: Context, spec: Spec, rows: int, a: int, tmap: TensorMap | None) -> list:
    return [Buf("out", nbytes=rows * ROW * 8, read=True, dtype="u8", zero=True),
            Buf("src", nbytes=SRC_BYTES), Buf("dst", nbytes=SRC_BYTES),
            tmap if tmap is not None else np.uint64(0), np.uint32(a), np.uint64(0)]


def _run(ctx: Context, b: Built, spec: Spec, grid: int, a: int, tmap: TensorMap | None) -> np.ndarray:
    warps = -(-spec.threads // 32)
    r = ctx.dev.launch(b.cubin, b.name, grid, spec.threads, _args(ctx, spec, grid * warps, a, tmap), smem=spec.smem)
    return r.outputs["out"].reshape(-1, ROW)[: grid * warps]


def _slot(ctx: Context) -> int:
    """A fresh DRAM region of the source for a DRAM-miss chain launch (never read before in
    this run: the chains run before the streams)."""
    per = max(LENGTHS) * REPS * DRAM_STRIDE
    s = ctx.state.get("slot", 0)
    ctx.state["slot"] = (s + 1) % (SRC_BYTES // per - 1)  # a chain reads one repetition past its slot
    return s


def measure_chain(ctx: Context, p: Probe, built: list[Built]) -> Result:
    spec0 = p.specs[0]
    tmap = tensor_map(TENSOR_CONFIGS[p.params["config"]]) if "config" in p.params else None
    per_launch, raw = [], []
    for _ in range(LAUNCHES):
        pair = []
        for b, spec in zip(built, p.specs, strict=True):
            a = _slot(ctx) if spec.params.get("where") == "dram" else 0
            pair.append(an.chain_cycles(_run(ctx, b, spec, 1, a, tmap), REPS))
        per_launch.append((pair[0], pair[1]))
        raw.append({str(n): c for n, c in zip(LENGTHS, pair, strict=True)})
    fit = an.chain_slope(LENGTHS, per_launch)
    flags = list(fit.pop("flags"))
    for b, spec in zip(built, p.specs, strict=True):
        flags += checks.check(b, spec)
    return Result(p.name, "latency" if p.group in ("tma", "tensor") or p.name.startswith(("cpasync", "sync"))
                  else "cost", fit["value"], "cycles",
                  f"slope between {LENGTHS[0]} and {LENGTHS[1]} instances in one thread: per launch the median over "
                  f"{REPS - 1} kept repetitions at each length; median of {LAUNCHES} launches",
                  params={**spec0.params, **{k: v for k, v in p.params.items()}, "lengths": list(LENGTHS),
                          "launches": LAUNCHES, "threads": spec0.threads},
                  fit={**fit, "sass": checks.sass_counts(built[-1], p.specs[-1])},
                  samples={"launches": raw}, flags=flags, cls="async")


def _mhz(ctx: Context) -> float | None:
    if "mhz" not in ctx.state:
        ctx.state["mhz"] = measure_sm_clock(ctx.dev, ctx.target).get("sm_mhz_kernel")
    return ctx.state["mhz"]


def _stream_trips(p: Probe, grid: int, ilp: int | None = None) -> tuple[int, int]:
    """(the kernel's ``a``, bytes it moves per repetition) for ``grid`` CTAs (``ilp``: accesses
    per thread per trip of the kernel, where the probe sweeps it)."""
    if "a" in p.params:
        return p.params["a"], p.params["bytes"]
    per_trip = grid * STREAM_THREADS * (ilp or p.params.get("ilp", ILP)) * p.params["width"]
    trips = max(1, p.params["bytes"] // per_trip)
    return trips, trips * per_trip


def _window_rates(wins: list[dict]) -> list[float]:
    """The launches' window rates (analyse.stream_window), those with a span."""
    return [float(w["gbps"]) for w in wins if w["gbps"] is not None and np.isfinite(w["gbps"])]


WINDOW = (f"all bytes of the {REPS - 1} kept repetitions over one globaltimer window (the first warp's start of "
          "the first kept repetition to the last warp's end of the last; timestamps stored after the last), "
          f"median of {LAUNCHES} launches")


def measure_stream(ctx: Context, p: Probe, b: Built) -> Result:
    spec = p.specs[0]
    tmap = None
    if spec.params.get("mode") == "tensor":
        tmap, _ = stream_map(p.params["tile"], _where(p.params["where"])[0], p.params.get("swizzle", "none"),
                             p.params.get("l2", "none"))
    nsm = ctx.sm_count
    configs, rates = {}, {}
    for c in p.params["ctas"]:
        grid = c * nsm
        a, nbytes = _stream_trips(p, grid)
        per, wins = [], []
        for _ in range(LAUNCHES):
            rows = _run(ctx, b, spec, grid, a, tmap)
            per.append(an.stream_rate(rows, REPS, nbytes))
            wins.append(an.stream_window(rows, REPS, nbytes))
        meds = _window_rates(wins)
        rates[c] = float(np.median(meds)) if meds else None
        configs[str(c)] = {"gbps": rates[c], "launches": meds, "reps": per, "grid": grid, "bytes": nbytes,
                           "start_lag": [w["start_lag"] for w in wins]}
    sat = an.saturation(rates)
    flags = checks.check(b, spec)
    if sat["best"] is None:
        flags.append("error: no configuration gave a usable rate (timestamps missing)")
    elif not sat["saturated"]:
        flags.append(f"unsaturated: the rate still rose x{sat['rise']} at the last step of CTAs per SM "
                     f"{list(p.params['ctas'])}")
    best = configs[str(sat["at"])] if sat["at"] is not None else None
    if best:
        nf = noise_flag(best["launches"])
        if nf:
            flags.append(nf)
    mhz = _mhz(ctx)
    bpc = sat["best"] * 1e9 / (nsm * mhz * 1e6) if sat["best"] and mhz else None
    return Result(p.name, "bandwidth", sat["best"], "GB/s",
                  f"{WINDOW}; the best over CTAs per SM {list(p.params['ctas'])}",
                  params={**{k: v for k, v in spec.params.items() if k != "mask"}, **p.params, "threads": spec.threads,
                          "smem": spec.smem, "stages": spec.params.get("stages", STAGES), "sms": nsm},
                  fit={"saturation": sat, "bytes_per_clk_per_sm": bpc, "sm_mhz_kernel": mhz,
                       "sass": checks.sass_counts(b, spec)},
                  samples={"configs": configs}, flags=flags, cls="async")


def _ld_config(ctx: Context, p: Probe, b: Built, spec: Spec, c: int) -> dict:
    """One configuration of the plain-load sweep: ``c`` CTAs per SM of ``spec``'s kernel."""
    grid = c * ctx.sm_count
    a, nbytes = _stream_trips(p, grid, spec.params["ilp"])
    per, wins, together = [], [], []
    for _ in range(LAUNCHES):
        rows = _run(ctx, b, spec, grid, a, None)
        per.append(an.stream_rate(rows, REPS, nbytes))
        wins.append(an.stream_window(rows, REPS, nbytes))
        together.append(an.all_at_once(rows, REPS))
    meds = _window_rates(wins)
    out = {"ilp": spec.params["ilp"], "ctas": c, "warps_per_sm": c * spec.threads // 32,
           "gbps": float(np.median(meds)) if meds else None, "launches": meds, "reps": per, "grid": grid,
           "bytes": nbytes, "start_lag": [w["start_lag"] for w in wins], "all_at_once": all(together)}
    nf = noise_flag(meds)
    if nf:
        out["flag"] = nf
    if not out["all_at_once"]:
        out["flag"] = ("not-concurrent: on some SM a warp's timed region ended before another's began (a second "
                       "wave): kept out of the best")
    return out


def _ctas_to_run(ctas: list[int] | tuple[int, ...], fits: int) -> list[int]:
    """The CTAs per SM of a kernel's sweep: ``ctas``, and where some do not fit at once, also the
    most that do (the largest configuration a kernel can hold, so that saturation is judged at
    the edge of what fits, not below it)."""
    out = set(ctas)
    if fits >= 1 and any(c > fits for c in ctas):
        out.add(fits)
    return sorted(out)


SATURATION_FLAGS = ("error: no configuration", "unsaturated:", "single-peak:")  # what ld_saturation says


def ld_saturation(configs: dict[str, dict]) -> tuple[dict, list[str]]:
    """The plain-load sweep's best configuration and whether its rate had stopped rising
    (grid_saturation over ILP x warps per SM of the configurations whose CTAs were all resident at
    once and not noisy), with the flags that say otherwise: from the configurations as measured
    or as stored (``samples["configs"]`` of the result)."""
    rates = {(d["ilp"], d["warps_per_sm"]): d["gbps"] for d in configs.values()
             if d.get("gbps") is not None and d.get("all_at_once") and not str(d.get("flag", "")).startswith("noisy")}
    sat = grid_saturation(rates, names=("ILP", "warps/SM"))
    best = None
    if sat["at"] is not None:
        ilp, warps = sat["at"]
        best = configs[f"ilp{ilp}:ctas{warps * 32 // STREAM_THREADS}"]
        sat = {**sat, "at": best["ctas"], "ilp": ilp, "warps_per_sm": warps}
    if best is None:
        return sat, ["error: no configuration gave a usable rate"]
    if not sat["saturated"]:
        return sat, [f"unsaturated: {sat['why']}"]
    if sat.get("single_peak"):
        return sat, [f"single-peak: {sat['evidence']}"]
    return sat, []


def measure_ld_sweep(ctx: Context, p: Probe, built: list[Built]) -> Result:
    """The plain-load baseline over ILP x CTAs per SM: configurations whose CTAs cannot all be
    resident at once (registers, shared memory: the occupancy rules) are not run, the most that
    fit are run in their place (:func:`_ctas_to_run`); a launch that
    fails is kept as that configuration's error; the value is the best configuration's rate,
    saturated only when the rate had stopped rising (grid_saturation); each kernel's SASS must
    hold all of its loads in flight at once (bench/stream_read.loads_in_flight)."""
    rules = occupancy_rules(ctx.target)
    configs: dict[str, dict] = {}
    flags: list[str] = []
    sass: dict[str, dict] = {}
    for b, spec in zip(built, p.specs, strict=True):
        ilp = spec.params["ilp"]
        flags += checks.check(b, spec)
        fly = loads_in_flight(b.region, "LDG")
        sass[str(ilp)] = {"loads_in_flight": fly, "registers": b.regs, **checks.sass_counts(b, spec)}
        if fly != ilp:
            flags.append(f"sass: {b.name}: {fly} loads in flight before the first use where the trip has {ilp}")
        fits = predict_blocks(spec.threads, b.regs, spec.smem, rules)["blocks"]
        for c in _ctas_to_run(p.params["ctas"], fits):
            key = f"ilp{ilp}:ctas{c}"
            if c > fits:
                configs[key] = {"ilp": ilp, "ctas": c, "gbps": None,
                                "refused": f"{c} CTAs per SM do not fit at once ({b.regs} registers per thread): {fits}"}
                continue
            try:
                d = _ld_config(ctx, p, b, spec, c)
            except Exception as e:  # a failed launch: recorded, the sweep goes on
                configs[key] = {"ilp": ilp, "ctas": c, "gbps": None, "error": f"{type(e).__name__}: {e}"[:300]}
                continue
            configs[key] = d
    sat, sat_flags = ld_saturation(configs)
    flags += sat_flags
    mhz = _mhz(ctx)
    bpc = sat["best"] * 1e9 / (ctx.sm_count * mhz * 1e6) if sat["best"] and mhz else None
    spec = p.specs[0]
    return Result(p.name, "bandwidth", sat["best"], "GB/s",
                  f"{WINDOW}; the best over ILP {list(p.params['ilps'])} x CTAs per SM "
                  f"{list(p.params['ctas'])} ({STREAM_THREADS // 32} warps each), configurations with every CTA "
                  "resident at once",
                  params={**{k: v for k, v in spec.params.items() if k not in ("mask", "ilp")}, **p.params,
                          "threads": spec.threads, "sms": ctx.sm_count},
                  fit={"saturation": sat, "bytes_per_clk_per_sm": bpc, "sm_mhz_kernel": mhz, "sass": sass},
                  samples={"configs": configs}, flags=flags, cls="async")


# the wgmma items feed wgmma from TMA-written tiles through an mbarrier's transaction count
WGMMA_NEEDS = ("wgmma", "tma", "mbarrier_tx")


def _needs(p: Probe, header: str) -> tuple[str, ...]:
    """What a probe needs of the architecture: the features its kernels' PTX uses."""
    if p.group == "wgmma":
        return WGMMA_NEEDS
    return tuple(sorted({n for s in p.specs for n in ptx_needs(make_kernel(s, header).ptx)}))


# ------------------------------------------------------------------------- the suite
class AsyncSuite(SuiteBase):
    name = "async"
    description = "Hopper asynchronous copies: mbarrier, cp.async, TMA bulk/tensor copies, bulk stores, fences"

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        select(all_probes() + wgmma_probes(), patterns)

    def plan(self, ctx: Context, patterns: list[str] | None) -> Plan:
        rules = occupancy_rules(ctx.target)
        probes = [fit_ctas(p, rules) for p in select(all_probes() + wgmma_probes(), patterns)]
        # chains first (their DRAM tiles must be untouched), streams after
        probes.sort(key=lambda p: p.stream)
        header = module_header(ptx_header(ctx.target.ptx_isa, ctx.target.arch))
        return Plan([Item(p.name, p, _needs(p, header)) for p in probes],
                    {"probes": len(probes), "launches": LAUNCHES, "lengths": list(LENGTHS), "reps": REPS,
                     "stages": STAGES, "src_bytes": SRC_BYTES, "l2_bytes": L2_BYTES})

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        header = module_header(ptx_header(ctx.target.ptx_isa, ctx.target.arch))
        kernels = [make_kernel(s, header) for i in items if i.data.group != "wgmma" for s in i.data.specs]
        ctx.state["built"] = build_module(kernels, ctx.target.arch, opt=3) if kernels else {}
        wg = [s for i in items if i.data.group == "wgmma" for s in i.data.specs]
        if wg:  # wgmma needs the architecture-specific target: a module of its own
            from gpudissect.suites.async_copy.wgmma_feed import build

            ctx.state["built"].update(build(ctx, wg))

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        p: Probe = item.data
        built, texts = take(ctx.state["built"], [s.name for s in p.specs])
        if p.group == "wgmma":
            from gpudissect.suites.async_copy.wgmma_feed import measure

            return Outcome(measure(ctx, p, _mhz(ctx)), texts)
        if p.stream:
            r = measure_ld_sweep(ctx, p, built) if len(p.specs) > 1 else measure_stream(ctx, p, built[0])
        else:
            r = measure_chain(ctx, p, built)
        r.ptx_hash, r.sass_hash = built[-1].ptx_hash, built[-1].sass_hash
        return Outcome([r], texts)

    def error_results(self, item: Item, flag: str) -> list[Result]:
        p: Probe = item.data
        return [Result(p.name, "bandwidth" if p.stream else "latency", None, "-", "-",
                       params=dict(p.specs[0].params), flags=[flag[:400]], cls="async")]

    def summarize(self, ctx: Context) -> dict:
        from gpudissect.suites.async_copy.summary import summarize

        return summarize([dict(r) for r in ctx.store.results(ctx.run_id)]) if ctx.store is not None else {}


SUITE = AsyncSuite()
