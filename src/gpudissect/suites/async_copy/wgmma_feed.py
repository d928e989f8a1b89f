"""The async suite's wgmma items: wgmma fed the way real kernels feed it (kernels in
``wgmma_kernels.py``).

* ``wgmma:swizzle=<mode>``: wgmma m64n256k16 f32.f16 throughput with shared-memory descriptors
  in each swizzle mode, timed like the tensor suite (``bench/tensor_sweep.py``'s ``time_config``:
  region lengths, the slope of the per-SM span, warpgroups per SM swept), as TFLOP/s and % of
  the datasheet peak (``arch/tensor_peaks.py``) at the in-kernel SM clock;
* ``wgmma:layout=<mode>``: TMA writes A and B through a tensor map of that swizzle, one wgmma
  warpgroup multiplies them; the product is compared with numpy (the descriptor reads what
  TMA wrote);
* ``wgmma:pipeline:stages=<s>``: TMA -> mbarrier -> wgmma with a ring of ``s`` stages, one CTA
  per SM: TFLOP/s and % of the datasheet peak and of the wgmma-only rate measured in the same
  run (the 128B-swizzle throughput item's).

Every kernel carries its SASS check (the architecture's ``async_sass.toml``: HGMMA with descriptor operands, the TMA and
mbarrier opcodes of the pipeline) and the ptxas messages about wgmma (C75xx: serialization,
injected waits), which become flags.
"""

from __future__ import annotations

import re

import numpy as np

from gpudissect.arch.tensor_peaks import figures, peak_for
from gpudissect.bench.contract import Context
from gpudissect.bench.stats import noise_flag
from gpudissect.bench.tensor_sweep import Config, time_config
from gpudissect.catalog.tensor import WgmmaVariant, load_tensor_catalog
from gpudissect.device.args import Buf
from gpudissect.device.tensormap import TensorMap
from gpudissect.kernel import wgmma as wd
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.mma import TIMED_REPS, random_words, tensor_arch
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.async_copy import checks
from gpudissect.suites.async_copy import wgmma_kernels as wk
from gpudissect.suites.async_copy.analyse import rep_columns
from gpudissect.suites.async_copy.kernels import REPS, ROW, SHARED_DECL, Spec

THR_LENGTHS = (64, 128)  # wgmma per warpgroup per region (the slope's two points)
THR_GROUPS = (1, 2)  # warpgroups per SM (one accumulator each: 128 registers)
RISE = 1.02  # a second warpgroup that raises the rate by less than this: saturated at one
STAGES = (2, 3, 4)
LAUNCHES = 3  # pipeline launches per stage count
REF_SWIZZLE = "128B"  # the wgmma-only reference of the pipeline (its layout)
INT_RANGE = 2  # layout check operands: integers in [-2, 2] (every product and sum exact in f32)
CLOCK_TOL = 0.03  # the loop's own clock this far from the clock kernel's: flagged
MSG = re.compile(r"\((C75\d\d)\)\s*(.*)")


def variant() -> WgmmaVariant:
    return next(v for v in load_tensor_catalog().wgmma if v.name == wk.WIDE)


# ------------------------------------------------------------------------- probes and kernels
def thr_spec(sw: str, length: int) -> Spec:
    return Spec(f"wf_thr_{sw}_n{length}", "wgmma_thr", {"swizzle": sw}, length, 128)


def probe_specs() -> list[tuple[str, list[Spec], dict]]:
    """(name, kernel specs, params) of every wgmma item."""
    out = []
    for sw in wd.SWIZZLES:
        out.append((f"wgmma:swizzle={sw}", [thr_spec(sw, n) for n in THR_LENGTHS], {"swizzle": sw}))
    for sw in wd.SWIZZLES:
        out.append((f"wgmma:layout={sw}", [Spec(f"wf_layout_{sw}", "wgmma_layout", {"swizzle": sw}, 1,
                                                wk.LAYOUT_THREADS, wk.BAR_BYTES + wd.A_TILE + wk.B_TILE)],
                    {"swizzle": sw}))
    for s in STAGES:
        specs = [Spec(f"wf_pipe_s{s}", "wgmma_pipe", {"stages": s}, wk.PIPE_KBLOCKS, wk.PIPE_THREADS, wk.pipe_smem(s))]
        out.append((f"wgmma:pipeline:stages={s}", specs + [thr_spec(REF_SWIZZLE, n) for n in THR_LENGTHS],
                    {"stages": s}))
    return out


def make(spec: Spec, v: WgmmaVariant, header: str) -> Kernel:
    if spec.kind == "wgmma_thr":
        k = wk.throughput_kernel(v, spec.params["swizzle"], spec.name, 1, spec.length, header)
    elif spec.kind == "wgmma_layout":
        k = wk.layout_kernel(v, spec.params["swizzle"], spec.name, header)
    else:
        k = wk.pipeline_kernel(v, spec.params["stages"], spec.name, header, spec.length)
    k.meta["spec"] = spec
    return k


def build(ctx: Context, specs: list[Spec]) -> dict[str, Built | Exception]:
    """The wgmma kernels, compiled for the architecture-specific target (wgmma needs it): the
    timed ones with their regions, the layout checks whole."""
    v = variant()
    arch = tensor_arch(ctx.target)
    header = ptx_header(ctx.target.ptx_isa, arch) + SHARED_DECL
    uniq = {s.name: s for s in specs}
    timed = [make(s, v, header) for s in uniq.values() if s.kind != "wgmma_layout"]
    whole = [make(s, v, header) for s in uniq.values() if s.kind == "wgmma_layout"]
    out: dict[str, Built | Exception] = {}
    if timed:
        out.update(build_module(timed, arch, opt=3))
    if whole:
        out.update(build_module(whole, arch, opt=3, region=False))
    return out


# ------------------------------------------------------------------------- checks
def ptxas_flags(b: Built) -> list[str]:
    """ptxas's wgmma messages (C75xx: serialized wgmma, injected warpgroup waits/arrives) about
    this kernel, as flags; C7510 (serialization) named as such."""
    out = []
    for line in b.ptxas_log.splitlines():
        m = MSG.search(line)
        if m and f"'{b.name}'" in line:
            tag = "wgmma-serialized" if m.group(1) == "C7510" else "ptxas-wgmma"
            out.append(f"{tag}: ptxas {m.group(1)}: {m.group(2).strip()[:200]}")
    return out


def serialized_sass(instrs: list, hgmma: str = "HGMMA") -> str | None:
    """A flag when the SASS waits for the wgmma pipeline after (almost) every HGMMA: a
    ``WARPGROUP.DEPBAR`` per HGMMA or more, where the generator asked for one wait per
    region/stage."""
    fulls = [i.full for i in instrs]
    n = sum(f.startswith(hgmma) for f in fulls)
    w = sum(f.startswith("WARPGROUP.DEPBAR") for f in fulls)
    if n > 4 and w >= n:
        return f"wgmma-serialized: {w} WARPGROUP.DEPBAR for {n} HGMMA in the timed region"
    return None


def kernel_flags(b: Built, spec: Spec) -> list[str]:
    flags = ptxas_flags(b)
    if spec.kind == "wgmma_layout":
        fulls = [i.full for i in b.instrs]
        need = {"HGMMA.64x256x16.F32": wd.K_STEPS,
                "UTMALDG.2D": len(wk.box_placements(spec.params["swizzle"], wd.M_WG))
                + len(wk.box_placements(spec.params["swizzle"], wk.N))}
        for op, n in need.items():
            got = sum(f == op or f.startswith(op + ".") for f in fulls)
            if got != n:
                flags.append(f"sass: {b.name}: {got} {op}, expected {n}")
        return flags
    flags += checks.check(b, spec)
    s = serialized_sass(b.region)
    if s:
        flags.append(s)
    if not any("gdesc[" in i.text for i in b.region if i.full.startswith("HGMMA")):
        flags.append(f"sass: {b.name}: HGMMA without descriptor operands")
    return flags


# ------------------------------------------------------------------------- analysis (pure)
def decode_d(raw: np.ndarray) -> np.ndarray:
    """The 64 x 256 f32 product from the layout kernel's raw output (128 registers of each of
    128 threads, thread-major)."""
    r = np.asarray(raw, dtype=np.float32).reshape(wk.LAYOUT_THREADS, -1)
    d = np.full((wd.M_WG, wk.N), np.nan, dtype=np.float32)
    for t in range(r.shape[0]):
        for i in range(r.shape[1]):
            row, col = wk.d_position(t, i)
            d[row, col] = r[t, i]
    return d


def layout_operands(seed: int = 0) -> np.ndarray:
    """The check's global matrix (LAYOUT_ROWS x K_TILE f16): A rows then B rows, small integers."""
    rng = np.random.default_rng(seed)
    return rng.integers(-INT_RANGE, INT_RANGE + 1, size=(wk.LAYOUT_ROWS, wd.K_TILE)).astype(np.float16)


def compare_layout(g: np.ndarray, d: np.ndarray) -> dict:
    """The product D against A B^T in float64 (A: the first 64 rows of ``g``, B: the rest)."""
    a, b = g[: wd.M_WG].astype(np.float64), g[wd.M_WG:].astype(np.float64)
    want = a @ b.T
    err = np.abs(d.astype(np.float64) - want)
    bad = ~(err == 0)
    return {"max_abs_error": float(np.nanmax(err)) if np.isfinite(err).any() else None,
            "mismatches": int(bad.sum()), "elements": int(bad.size), "exact": bool(not bad.any())}


def pipe_rates(rows: np.ndarray, ctas: int, reps: int, flop_per_cta: float) -> dict:
    """Per CTA and kept repetition: the consumer warps' span (first start to last end, SM
    clocks) and the flop per cycle it implies, and the SM clock during it (the same span in SM
    cycles over globaltimer ns: the clock the loop really ran at); over the grid, the globaltimer span of all
    consumers (first start to last end) per repetition and the flop per ns it implies."""
    per_cta = wk.PIPE_THREADS // 32
    cons = 4 * wk.CONSUMERS
    c0, c1, g0, g1 = rep_columns(rows[: ctas * per_cta], reps)
    c0, c1 = c0.reshape(ctas, per_cta, reps)[:, :cons], c1.reshape(ctas, per_cta, reps)[:, :cons]
    g0, g1 = g0.reshape(ctas, per_cta, reps)[:, :cons], g1.reshape(ctas, per_cta, reps)[:, :cons]
    ok = (g1[:, :, 0] > 0).all(axis=1)
    cyc = (c1.max(axis=1) - c0.min(axis=1))[ok][:, 1:].astype(float)  # (ctas, kept reps)
    ns = (g1.max(axis=1) - g0.min(axis=1))[ok][:, 1:].astype(float)
    fpc = flop_per_cta / cyc[cyc > 0]
    mhz = 1e3 * cyc[(cyc > 0) & (ns > 0)] / ns[(cyc > 0) & (ns > 0)]
    grid_ns = [float(g1[ok, :, r].max() - g0[ok, :, r].min()) for r in range(1, reps)] if ok.any() else []
    return {"cycles": cyc.tolist(), "flop_per_cycle_sm": float(np.median(fpc)) if fpc.size else None,
            "flop_per_cycle_sm_min": float(fpc.min()) if fpc.size else None,
            "sm_mhz_during": float(np.median(mhz)) if mhz.size else None,
            "grid_ns": grid_ns, "ctas_timed": int(ok.sum()),
            "grid_tflops": [flop_per_cta * int(ok.sum()) / ns / 1e3 for ns in grid_ns if ns > 0]}


def thr_best(rates: dict[int, float | None]) -> dict:
    """The best rate over warpgroups per SM and whether it had stopped rising."""
    ks = sorted(k for k, r in rates.items() if r)
    if not ks:
        return {"best": None, "at": None, "saturated": False}
    at = max(ks, key=lambda k: rates[k])
    rise = rates[ks[-1]] / rates[ks[-2]] if len(ks) > 1 else None
    return {"best": rates[at], "at": at, "saturated": bool(at != ks[-1] or (rise is not None and rise < RISE)),
            "rise": rise}


# ------------------------------------------------------------------------- measuring
def _built(ctx: Context, spec: Spec) -> Built:
    b = ctx.state["built"][spec.name]
    if isinstance(b, Exception):
        raise b
    return b


def measure_thr(ctx: Context, sw: str, mhz: float | None) -> Result:
    key = ("wf_thr", sw)
    if key in ctx.state:
        return ctx.state[key]
    v = variant()
    specs = [thr_spec(sw, n) for n in THR_LENGTHS]
    built = [_built(ctx, s) for s in specs]
    words = np.array([TIMED_REPS] + random_words("f16", 256, seed=1), dtype=np.uint32)
    configs, rates, flags = {}, {}, []
    for g in THR_GROUPS:
        cfg = Config(f"wf_{sw}", f"ss_n256_{sw}", 1, 4 * g, issuer_warps=4)
        t = time_config(ctx.dev, built, words, cfg, 32)
        rates[g] = t["rate"]
        configs[str(g)] = {"rate": t["rate"], "flags": t["flags"], "params": t["params"],
                           "fit": t["fit"].to_json() if t["fit"] is not None else None,
                           "samples": t["samples"]}
        flags += [f"{g} warpgroups: {f}" for f in t["flags"]]
    sat = thr_best(rates)
    if not sat["saturated"] and sat["best"]:
        flags.append(f"unsaturated: a second warpgroup raised the rate x{sat['rise']:.3f}")
    for b, s in zip(built, specs, strict=True):
        flags += kernel_flags(b, s)
    peak = peak_for(ctx.dev.info.name, v.peak_key)
    fig = figures(sat["best"], v.flops(wk.N), ctx.sm_count, mhz, peak) if sat["best"] else None
    r = Result(f"wgmma:swizzle={sw}", "throughput", fig.tflops if fig else None, "TFLOP/s",
               f"wgmma m64n256k16 per cycle per SM: issuers / slope of the median per-SM span between "
               f"{THR_LENGTHS} instructions per warpgroup (tensor suite's sweep: {TIMED_REPS - 1} kept repetitions x "
               f"launches); the best over {list(THR_GROUPS)} warpgroups per SM; TFLOP/s at the in-kernel SM clock",
               params={"swizzle": sw, "variant": v.name, "n": wk.N, "accs": 1, "lengths": list(THR_LENGTHS),
                       "warpgroups": list(THR_GROUPS), "lbo_sbo_a": list(wd.lbo_sbo(sw, wd.M_WG)),
                       "lbo_sbo_b": list(wd.lbo_sbo(sw, wk.N)), "desc_a": hex(wd.feed_descriptor(sw, wd.M_WG)),
                       "desc_b": hex(wd.feed_descriptor(sw, wk.N))},
               fit={"instr_per_cycle_sm": sat["best"], "saturation": sat,
                    **(fig.to_json() if fig else {}), "sass": checks.sass_counts(built[-1], specs[-1]),
                    "ptxas_log": [x for x in built[-1].ptxas_log.splitlines() if MSG.search(x)][:20]},
               samples={"configs": configs}, flags=flags, cls="async")
    r.ptx_hash, r.sass_hash = built[-1].ptx_hash, built[-1].sass_hash
    ctx.state[key] = r
    return r


def measure_layout(ctx: Context, sw: str) -> Result:
    spec = Spec(f"wf_layout_{sw}", "wgmma_layout", {"swizzle": sw})
    b = _built(ctx, spec)
    g = layout_operands()
    w = wd.atom(sw)
    tmap = TensorMap(Buf(f"wf_layout_g_{sw}", data=g.view(np.uint16)), "f16", (wd.K_TILE, wk.LAYOUT_ROWS),
                     (wd.ROW_BYTES,), (w // 2, wk.BOX_ROWS), swizzle=sw)
    nout = wk.LAYOUT_THREADS * wk.N // 2
    run = ctx.dev.launch(b.cubin, b.name, 1, wk.LAYOUT_THREADS,
                         [Buf(f"wf_layout_d_{sw}", nbytes=4 * nout, read=True, dtype="f4", zero=True), tmap],
                         smem=wk.BAR_BYTES + wd.A_TILE + wk.B_TILE)
    d = decode_d(np.asarray(run.outputs[f"wf_layout_d_{sw}"]).view(np.float32)[:nout])
    cmp = compare_layout(g, d)
    flags = kernel_flags(b, spec)
    if not cmp["exact"]:
        flags.append(f"error: layout mismatch: {cmp['mismatches']} of {cmp['elements']} elements of D differ from "
                     f"numpy (max |error| {cmp['max_abs_error']})")
    lbo, sbo = wd.lbo_sbo(sw, wd.M_WG)
    r = Result(f"wgmma:layout={sw}", "layout", float(cmp["mismatches"]), "mismatches",
               "elements of D = A B^T (64 x 256, K = 64, 4 wgmma) that differ from numpy; A and B written by TMA "
               f"through a {sw}-swizzle tensor map, read by wgmma descriptors of that layout",
               params={"swizzle": sw, "box": [w // 2, wk.BOX_ROWS], "lbo_a": lbo, "sbo_a": sbo,
                       "lbo_b": wd.lbo_sbo(sw, wk.N)[0], "layout_type": wd.SWIZZLES[sw][0],
                       "desc_a": hex(wd.feed_descriptor(sw, wd.M_WG)), "desc_b": hex(wd.feed_descriptor(sw, wk.N)),
                       "operands": f"integers in [-{INT_RANGE}, {INT_RANGE}]"},
               fit=cmp, samples={"d_row0": [float(x) for x in d[0, :16]]}, flags=flags, cls="async")
    r.ptx_hash, r.sass_hash = b.ptx_hash, b.sass_hash
    return r


def pipe_map(kblocks: int) -> TensorMap:
    """The pipeline's global matrix: PIPE_ROWS rows of ``kblocks * K_TILE`` random f16 (in
    [0.5, 1) with random signs), 128B swizzle, 64 x 64 boxes."""
    k = kblocks * wd.K_TILE
    rng = np.random.default_rng(3)
    vals = rng.uniform(0.5, 1.0, size=(wk.PIPE_ROWS, k)) * rng.choice([-1.0, 1.0], size=(wk.PIPE_ROWS, k))
    return TensorMap(Buf(f"wf_pipe_g{kblocks}", data=vals.astype(np.float16).view(np.uint16)), "f16", (k, wk.PIPE_ROWS), (2 * k,),
                     (wd.K_TILE, wk.BOX_ROWS), swizzle="128B")


def measure_pipe(ctx: Context, stages: int, mhz: float | None) -> Result:
    v = variant()
    spec = Spec(f"wf_pipe_s{stages}", "wgmma_pipe", {"stages": stages}, wk.PIPE_KBLOCKS, wk.PIPE_THREADS,
                wk.pipe_smem(stages))
    b = _built(ctx, spec)
    ref = measure_thr(ctx, REF_SWIZZLE, mhz)
    ctas = ctx.sm_count
    tmap = ctx.state.setdefault("wf_pipe_map", pipe_map(wk.PIPE_KBLOCKS))
    flop_cta = 2.0 * wk.CONSUMERS * wd.M_WG * wk.N * wd.K_TILE * wk.PIPE_KBLOCKS
    launches = []
    for _ in range(LAUNCHES):
        run = ctx.dev.launch(b.cubin, b.name, ctas, wk.PIPE_THREADS,
                             [Buf("wf_out", nbytes=ctas * (wk.PIPE_THREADS // 32) * ROW * 8, read=True, dtype="u8",
                                  zero=True), np.uint64(0), Buf("wf_dst", nbytes=4096), tmap, np.uint32(0),
                              np.uint64(0)], smem=spec.smem)
        rows = np.asarray(run.outputs["wf_out"]).view(np.uint64).reshape(-1, ROW)
        launches.append(pipe_rates(rows, ctas, REPS, flop_cta))
    meds = [x["flop_per_cycle_sm"] for x in launches if x["flop_per_cycle_sm"]]
    flags = kernel_flags(b, spec)
    fpc = float(np.median(meds)) if meds else None
    if fpc is None:
        flags.append("error: no CTA reported its timestamps")
    nf = noise_flag(meds) if meds else None
    if nf:
        flags.append(nf)
    peak = peak_for(ctx.dev.info.name, v.peak_key)
    during = [x["sm_mhz_during"] for x in launches if x["sm_mhz_during"]]
    run_mhz = float(np.median(during)) if during else None
    if run_mhz and mhz and abs(run_mhz / mhz - 1) > CLOCK_TOL:
        flags.append(f"clock-changed: the SM clock during the loop (cycles / globaltimer per CTA) was "
                     f"{run_mhz:.0f} MHz, the clock kernel's {mhz:.0f} MHz: TFLOP/s at the former")
    fig = figures(fpc / v.flops(wk.N), v.flops(wk.N), ctx.sm_count, run_mhz or mhz, peak) if fpc else None
    ref_ipc = ref.fit.get("instr_per_cycle_sm") if ref.fit else None
    of_ref = fpc / v.flops(wk.N) / ref_ipc if (fpc and ref_ipc) else None
    if fig and fig.pct_of_peak and fig.pct_of_peak > 102:
        flags.append(f"exceeds-peak: {fig.pct_of_peak:.1f}% of the datasheet peak")
    bpc = wk.STAGE_BYTES * wk.PIPE_KBLOCKS * fpc / flop_cta if fpc else None
    grid = [t for x in launches for t in x["grid_tflops"]]
    r = Result(f"wgmma:pipeline:stages={stages}", "throughput", fig.tflops if fig else None, "TFLOP/s",
               f"flop of one CTA's K loop ({wk.PIPE_KBLOCKS} k-blocks of {wd.K_TILE}, tile "
               f"{wk.CONSUMERS * wd.M_WG}x{wk.N}) over its consumer warps' span (SM clocks), median over CTAs and "
               f"{REPS - 1} kept repetitions per launch, median of {LAUNCHES} launches; TFLOP/s at the SM clock "
               "the loop ran at (its cycles over its globaltimer span, per CTA)",
               params={"stages": stages, "kblocks": wk.PIPE_KBLOCKS, "k": wk.PIPE_KBLOCKS * wd.K_TILE,
                       "tile_m": wk.CONSUMERS * wd.M_WG, "tile_n": wk.N, "tile_k": wd.K_TILE, "swizzle": "128B",
                       "ctas": ctas, "threads": wk.PIPE_THREADS, "smem": spec.smem, "stage_bytes": wk.STAGE_BYTES,
                       "consumers": wk.CONSUMERS, "a_tiles": wk.PIPE_A_TILES, "launches": LAUNCHES},
               fit={"flop_per_cycle_sm": fpc, **(fig.to_json() if fig else {}),
                    "wgmma_only_instr_per_cycle_sm": ref_ipc, "pct_of_wgmma_only": 100 * of_ref if of_ref else None,
                    "wgmma_only_tflops": ref.value, "smem_fill_bytes_per_clk_per_sm": bpc,
                    "grid_tflops_globaltimer": float(np.median(grid)) if grid else None,
                    "sm_mhz_during": run_mhz, "sm_mhz_clock_kernel": mhz,
                    "sass": checks.sass_counts(b, spec)},
               samples={"launches": launches}, flags=flags, cls="async")
    r.ptx_hash, r.sass_hash = b.ptx_hash, b.sass_hash
    return r


def _once(ctx: Context, r: Result) -> list[Result]:
    """``r`` the first time a run returns it (the wgmma-only reference is measured once, by its
    own item or by the first pipeline item that needs it, and stored once)."""
    stored = ctx.state.setdefault("wf_stored", set())
    if r.variant in stored:
        return []
    stored.add(r.variant)
    return [r]


def measure(ctx: Context, p, mhz: float | None) -> list[Result]:  # p: suite.Probe
    if p.name.startswith("wgmma:swizzle="):
        return _once(ctx, measure_thr(ctx, p.params["swizzle"], mhz))
    if p.name.startswith("wgmma:layout="):
        return [measure_layout(ctx, p.params["swizzle"])]
    r = measure_pipe(ctx, p.params["stages"], mhz)
    return [r] + _once(ctx, ctx.state[("wf_thr", REF_SWIZZLE)])


# ------------------------------------------------------------------------- summary
def _pct(x) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _num(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def summary_rows(recs: dict[str, dict]) -> dict[str, dict]:
    """Per wgmma item: TFLOP/s, % of the datasheet peak, % of the wgmma-only rate, the layout
    check's mismatches, flags."""
    out = {}
    for name, r in recs.items():
        if not name.startswith("wgmma:"):
            continue
        fit = r.get("fit") or {}
        out[name] = {"value": r.get("value"), "unit": r.get("unit"), "pct_of_peak": fit.get("pct_of_peak"),
                     "pct_of_wgmma_only": fit.get("pct_of_wgmma_only"),
                     "instr_per_cycle_sm": fit.get("instr_per_cycle_sm"),
                     "smem_fill_bytes_per_clk_per_sm": fit.get("smem_fill_bytes_per_clk_per_sm"),
                     "exact": fit.get("exact"), "sm_mhz_during": fit.get("sm_mhz_during"),
                     "flags": r.get("flags") or []}
    return out


def conclusions(rows: dict[str, dict]) -> list[str]:
    c = []
    sw = {n.split("=", 1)[1]: d for n, d in rows.items() if n.startswith("wgmma:swizzle=")}
    if sw:
        c.append("wgmma m64n256k16 f32.f16 from shared memory, by descriptor swizzle mode: "
                 + ", ".join(f"{k} {_pct(d['pct_of_peak'])} of the datasheet peak "
                             f"({_num(d['value'])} TFLOP/s)"
                             for k, d in sw.items())
                 + (" (serialized: " + ", ".join(k for k, d in sw.items()
                                                 if any(f.startswith("wgmma-serialized") for f in d["flags"])) + ")"
                    if any(f.startswith("wgmma-serialized") for d in sw.values() for f in d["flags"]) else ""))
    lay = {n.split("=", 1)[1]: d for n, d in rows.items() if n.startswith("wgmma:layout=")}
    if lay:
        c.append("TMA-written tiles read by wgmma descriptors of the same swizzle, product against numpy: "
                 + ", ".join(f"{k} {'exact' if d['exact'] else ('-' if d['exact'] is None else 'MISMATCH')}"
                             for k, d in lay.items()))
    pipe = {n.rsplit("=", 1)[1]: d for n, d in rows.items() if n.startswith("wgmma:pipeline:")}
    if pipe:
        c.append("TMA -> mbarrier -> wgmma pipeline (128x256 tile, 2 consumer warpgroups, one CTA per SM), by ring "
                 "stages: " + ", ".join(f"{k} stages {_pct(d['pct_of_peak'])} of the datasheet peak, "
                                        f"{_pct(d['pct_of_wgmma_only'])} of the wgmma-only rate per cycle, "
                                        f"{_num(d['value'])} TFLOP/s at the {_num(d['sm_mhz_during'])} MHz "
                                        "the loop ran at" for k, d in sorted(pipe.items())))
    return c
