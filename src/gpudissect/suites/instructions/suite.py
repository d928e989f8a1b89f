"""The instruction suite: latency, throughput and dependence distance of every verified variant.

Phases: (1) map the variants (autonomic verification, batched, no GPU); (2) generate and
compile every timing kernel, batched into modules in parallel, and verify each kernel
family's SASS again; (3) launch on the GPU, (4) analyse and store, one variant per
transaction. Interrupted sweeps resume from the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from gpudissect.bench.stats import (
    MAX_REL_SPREAD,
    MIN_R2,
    Fit,
    fit_line,
    per_sm,
    rep_cycles,
    sm_windows,
    summarize,
)
from gpudissect.catalog.model import Variant
from gpudissect.kernel.toolchain import PtxasError, sha256, tool_version
from gpudissect.store.db import Result, Store
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import (
    GeneratedKernel,
    GenerationError,
    KernelConfig,
    generate,
    ptx_isa_for,
)
from gpudissect.suites.instructions.verify import (
    Built,
    MapRecord,
    autoverify_many,
    build_module,
    check_built,
)

SUITE = "instructions"


@dataclass(frozen=True)
class Plan:
    """The parameter axes of the suite (nvbench-style)."""

    latency_lengths: tuple[int, ...] = (8, 16, 32, 64)
    tp_chains: tuple[int, ...] = (4, 8)
    tp_lengths: tuple[int, ...] = (8, 16, 32)
    tp_warps: tuple[int, ...] = (4, 16, 32)
    distances: tuple[int, ...] = (2, 4, 8)
    distance_lengths: tuple[int, ...] = (8, 16)
    reps: int = 4  # repetitions in a launch; the first (cold instruction cache) is dropped
    launches: int = 1

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


QUICK_PLAN = Plan(latency_lengths=(8, 16, 32), tp_chains=(4,), tp_lengths=(4, 8), tp_warps=(16,),
                  distances=(2, 4), distance_lengths=(8, 16), reps=2, launches=1)


@dataclass
class Family:
    measure: str  # latency | throughput | distance
    chains: int
    kernels: list[GeneratedKernel]
    built: list[Built] = field(default_factory=list)
    error: str | None = None


@dataclass
class VariantWork:
    variant: Variant
    record: MapRecord
    families: list[Family] = field(default_factory=list)


def _families(v: Variant, strat_name: str, arch: str, isa: str, plan: Plan, idx: int) -> list[Family]:
    strat = get_strategy(strat_name)
    fams = []

    def fam(measure: str, chains: int, lengths: tuple[int, ...]) -> Family:
        ks = [generate(v, KernelConfig(chains=chains, length=n, reps=plan.reps), strat, arch=arch,
                       ptx_isa=isa, name=f"v{idx}_{measure[0]}{chains}_n{n}") for n in lengths]
        return Family(measure, chains, ks)

    fams.append(fam("latency", 1, plan.latency_lengths))
    for k in plan.tp_chains:
        fams.append(fam("throughput", k, plan.tp_lengths))
    for d in plan.distances:
        fams.append(fam("distance", d, plan.distance_lengths))
    return fams


def compile_work(works: list[VariantWork], arch: str, jobs: int, per_module: int = 12) -> None:
    """Build every family's kernels in batched modules; verify each family's SASS."""

    def one_chunk(chunk: list[VariantWork]) -> None:
        by_opt: dict[int, list[VariantWork]] = {}
        for w in chunk:
            by_opt.setdefault(get_strategy(w.record.strategy).opt, []).append(w)
        for opt, ws in by_opt.items():
            kernels = [k for w in ws for f in w.families for k in f.kernels]
            try:
                built = build_module(kernels, arch, opt)
            except PtxasError:
                if len(ws) > 1:
                    for w in ws:
                        one_chunk([w])
                    return
                for f in ws[0].families:
                    f.error = "ptxas failed on the timing kernels"
                continue
            for w in ws:
                strat = get_strategy(w.record.strategy)
                for f in w.families:
                    bs = [built[k.name] for k in f.kernels]
                    bad = next((b for b in bs if isinstance(b, Exception)), None)
                    if bad is not None:
                        f.error = str(bad)
                        continue
                    f.built = bs  # type: ignore[assignment]
                    res = check_built(w.variant, strat, f.built)
                    if not res.ok:
                        f.error = res.reason

    chunks = [works[i : i + per_module] for i in range(0, len(works), per_module)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one_chunk, chunks))


def _base_flags(w: VariantWork) -> list[str]:
    flags = []
    if w.record.glue:
        flags.append(f"glue: {w.record.glue}")
    if w.record.companion:
        flags.append(f"companion: {w.record.companion}")
    if any("BRA" in s for s in w.record.sass):
        flags.append("branch: data-dependent path in the instruction's SASS")
    return flags


def _texts(f: Family) -> dict[str, tuple[str, str]]:
    t: dict[str, tuple[str, str]] = {}
    for b in f.built[-1:]:  # the kernel each result cites
        t[sha256(b.kernel.ptx)] = ("ptx", b.kernel.ptx)
        t[sha256(b.sass_text)] = ("sass", b.sass_text)
    return t


def _fit_flags(fit: Fit, spreads: list[float]) -> list[str]:
    flags = []
    if fit.r2 < MIN_R2:
        flags.append(f"poor-fit: r2={fit.r2:.4f}")
    if max(spreads) > MAX_REL_SPREAD:
        flags.append(f"noisy: repeats spread {max(spreads):.1%}")
    return flags


CLOCK_TOL = 0.02  # relative SM clock change during an item that triggers a re-measurement
RETRIES = 1  # re-measurements of an item whose clock changed or whose repeats disagree


def _sm_mhz(dev) -> float | None:
    """The current SM clock (NVML), or None where it cannot be read."""
    try:
        mhz = dev.clocks().get("sm_mhz")
    except Exception:
        return None
    return float(mhz) if isinstance(mhz, (int, float)) and mhz > 0 else None


def _clock_changed(c0: float | None, c1: float | None) -> bool:
    return c0 is not None and c1 is not None and abs(c1 - c0) > CLOCK_TOL * max(c0, c1)


def _error_result(w: VariantWork, f: Family, flag: str) -> Result:
    return Result(w.variant.name, f.measure, None, "cycles", "none", params={"chains": f.chains},
                  flags=[flag], sass=w.record.sass, cls=w.variant.cls, strategy=w.record.strategy)


def measure_variant(dev, w: VariantWork, plan: Plan, retries: int = RETRIES) -> tuple[list[Result], dict]:
    """Run one variant's families on the device and analyse them.

    Clock and noise guard: the SM clock is read before and after; when it moved by more than
    CLOCK_TOL, every family is measured again, and families whose repeats disagree (``noisy``)
    are measured again, at most ``retries`` times. What stays so is flagged
    (``clock-changed: a->b MHz``, ``noisy: ...``, ``remeasured: n``). A worker failure (fault,
    hang) flags the family and skips the variant's remaining kernels (they would fail alike)."""
    v = w.variant
    texts: dict[str, tuple[str, str]] = {}
    fams = w.families
    got: list[list[Result]] = [[] for _ in fams]
    window: list[tuple[float | None, float | None]] = [(None, None)] * len(fams)
    again = [0] * len(fams)
    failed: Exception | None = None
    todo = list(range(len(fams)))
    for attempt in range(retries + 1):
        c0 = _sm_mhz(dev)
        for i in todo:
            f = fams[i]
            if failed is not None:
                got[i] = [_error_result(w, f, f"error: skipped: an earlier kernel of this variant "
                                              f"failed ({failed})")]
                continue
            try:
                got[i] = _measure_family(dev, w, f, plan, texts)
            except Exception as e:  # a launch that fails (resources, fault) flags this family only
                got[i] = [_error_result(w, f, f"error: {type(e).__name__}: {e}")]
                if type(e).__name__ == "WorkerFailed":
                    failed = e
        c1 = _sm_mhz(dev)
        for i in todo:
            window[i] = (c0, c1)
            again[i] = attempt
        if failed is not None or attempt == retries:
            break
        if _clock_changed(c0, c1):
            todo = list(range(len(fams)))
        else:
            todo = [i for i in todo if any(fl.startswith("noisy") for r in got[i] for fl in r.flags)]
        if not todo:
            break
    out: list[Result] = []
    for i, rs in enumerate(got):
        c0, c1 = window[i]
        for r in rs:
            if r.value is not None or r.fit is not None:
                if _clock_changed(c0, c1):
                    r.flags.append(f"clock-changed: {c0:.0f}->{c1:.0f} MHz")
                if again[i]:
                    r.flags.append(f"remeasured: {again[i]}")
            out.append(r)
    return _with_peak(v, out), texts


def _measure_family(dev, w: VariantWork, f: Family, plan: Plan, texts: dict) -> list[Result]:
    v = w.variant
    if f.error and not f.built:
        return [Result(v.name, f.measure, None, "cycles", "none", params={"chains": f.chains},
                       flags=[f"not timed: {f.error}"], sass=w.record.sass, cls=v.cls,
                       strategy=w.record.strategy)]
    texts.update(_texts(f))
    flags = _base_flags(w) + ([f"sass: {f.error}"] if f.error else [])
    cited = f.built[-1]
    cite = dict(sass=w.record.sass, strategy=w.record.strategy, cls=v.cls,
                ptx_hash=sha256(cited.kernel.ptx), sass_hash=sha256(cited.sass_text))
    if f.measure == "throughput":
        return [_throughput(dev, v, f, plan, W, flags, cite) for W in plan.tp_warps]
    return [_chain(dev, v, f, plan, flags, cite)]


def _chain(dev, v: Variant, f: Family, plan: Plan, flags: list[str], cite: dict) -> Result:
    """Latency (one chain) or dependence distance (d interleaved chains), one warp."""
    xs, ys, raw, spreads = [], [], {}, []
    for b in f.built:
        res = dev.run(b.cubin, b.kernel.name, b.kernel.inputs, b.kernel.n_sink, plan.reps,
                      grid=1, block=32, launches=plan.launches)
        cyc = [float(rep_cycles(r.times, rep)[0]) for r in res for rep in range(1, plan.reps)]
        s = summarize(cyc)
        xs.append(b.kernel.config.length)
        ys.append(s.median)
        raw[str(b.kernel.config.length)] = cyc
        spreads.append(s.rel_spread)
    fit = fit_line(xs, ys)
    flags = flags + _fit_flags(fit, spreads)
    if f.measure == "latency":
        return Result(v.name, "latency", fit.slope, "cycles", "slope of median cycles vs chain length",
                      params={"chains": 1, "lengths": xs}, fit=fit.to_json(), samples=raw,
                      flags=flags, **cite)
    return Result(v.name, "distance", fit.slope / f.chains, "cycles/instr",
                  "slope of median cycles vs length / interleaved chains",
                  params={"distance": f.chains, "lengths": xs}, fit=fit.to_json(), samples=raw,
                  flags=flags, **cite)


def _throughput(dev, v: Variant, f: Family, plan: Plan, W: int, flags: list[str], cite: dict) -> Result:
    """K chains per thread, W warps per block, one block per SM; SMs that ran exactly one
    block are used."""
    xs, ys, raw, spreads = [], [], {}, []
    overlaps: list[bool] = []
    windows: dict[str, list] = {}
    for b in f.built:
        res = dev.run(b.cubin, b.kernel.name, b.kernel.inputs, b.kernel.n_sink, plan.reps,
                      grid=dev.info.sm_count, block=32 * W, launches=plan.launches)
        spans = []
        for r in res:
            for rep in range(1, plan.reps):
                st = per_sm(r.times, rep)
                full = st.warps == W
                if full.any():
                    spans.append(float(np.median(st.span[full])))
                    overlaps.extend(st.overlap[full].tolist())
                windows[str(b.kernel.config.length)] = sm_windows(r.times, rep)
        if spans:
            s = summarize(spans)
            xs.append(b.kernel.config.length)
            ys.append(s.median)
            raw[str(b.kernel.config.length)] = spans
            spreads.append(s.rel_spread)
    params = {"chains": f.chains, "warps": W, "lengths": xs}
    if len(xs) < 2:
        return Result(v.name, "throughput", None, "warp_instr/cycle/SM", "none", params=params,
                      flags=flags + ["not timed: no SM ran exactly one block"], **cite)
    fit = fit_line(xs, ys)
    flags = flags + _fit_flags(fit, spreads)
    rate = (W * f.chains) / fit.slope if fit.slope > 0 else None
    if rate is None:
        flags.append("non-positive slope")
    if sum(overlaps) < len(overlaps) / 2:
        # most SMs' warps were never all inside the timed region at one instant: the span then
        # mixes barrier waits and serialized warps, and is not a throughput
        flags.append("warps-not-overlapping: warps ran their timed regions one after another")
    samples = {"per_sm_span": raw, "warp_windows_one_sm": windows,
               "sm_overlap_fraction": sum(overlaps) / max(len(overlaps), 1)}
    return Result(v.name, "throughput", rate, "warp_instr/cycle/SM",
                  "warps*chains / slope of (median over SMs of the SM span) vs length",
                  params=params, fit=fit.to_json(), samples=samples, flags=flags, **cite)


def _with_peak(v: Variant, out: list[Result]) -> list[Result]:
    """Add the saturated throughput: best configuration, and the smallest one within 5% of it."""
    tps = [r for r in out if r.measure == "throughput" and r.value
           and not any(f.startswith(("warps-not-overlapping", "poor-fit", "non-positive")) for f in r.flags)]
    if tps:
        best = max(tps, key=lambda r: r.value or 0)
        ok = [r for r in tps if (r.value or 0) >= 0.95 * (best.value or 0)]
        smallest = min(ok, key=lambda r: (r.params["warps"] * r.params["chains"], r.params["warps"]))
        out.append(Result(v.name, "throughput_peak", best.value, "warp_instr/cycle/SM",
                          "max over (chains, warps) configurations",
                          params={"best": {"chains": best.params["chains"], "warps": best.params["warps"]},
                                  "smallest_within_5pct": {"chains": smallest.params["chains"],
                                                           "warps": smallest.params["warps"]}},
                          flags=sorted(set(best.flags)), sass=best.sass, strategy=best.strategy,
                          cls=v.cls, ptx_hash=best.ptx_hash, sass_hash=best.sass_hash))
    return out


def unverified_results(w: VariantWork) -> list[Result]:
    r = w.record
    why = r.reason or r.status
    return [Result(r.variant, m, None, u, "none", flags=[f"{r.status}: {why}"], sass=r.sass, cls=r.cls)
            for m, u in (("latency", "cycles"), ("throughput_peak", "warp_instr/cycle/SM"))]


def run_suite(
    dev,
    store: Store,
    variants: list[Variant],
    arch: str = "sm_90",
    plan: Plan | None = None,
    jobs: int = 8,
    resume: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[int, dict]:
    """Run the instruction suite; returns (run id, timing split in seconds)."""
    plan = plan or Plan()
    from gpudissect import __version__

    toolkit = f"ptxas {tool_version('ptxas')}"
    run_id = store.unfinished_run(SUITE, dev.info.uuid) if resume else None
    if run_id is None:
        run_id = store.start_run(SUITE, dev.info, toolkit, arch, dev.clocks(), plan.to_json(), __version__)
    done = store.done_items(run_id)
    todo = [v for v in variants if v.name not in done]
    # map+compile+verify; launches with their fits (analysis is interleaved with the launches
    # and not separable); writing to the store
    timing = {"compile_s": 0.0, "gpu_and_fit_s": 0.0, "store_s": 0.0}

    t = time.perf_counter()
    records = autoverify_many(todo, arch, jobs=jobs) if todo else []
    isa = ptx_isa_for(tool_version("ptxas"))
    works: list[VariantWork] = []
    for i, (v, rec) in enumerate(zip(todo, records, strict=True)):
        w = VariantWork(v, rec)
        if rec.verified:
            try:
                w.families = _families(v, rec.strategy or "reg", arch, isa, plan, i)
            except GenerationError as e:
                rec.verified = False
                rec.reason = f"timing kernels: {e}"
        works.append(w)
    compile_work([w for w in works if w.record.verified], arch, jobs)
    timing["compile_s"] = time.perf_counter() - t

    for n, w in enumerate(works):
        if progress:
            progress(w.variant.name, n, len(works))
        if not w.record.verified:
            store.save(run_id, w.variant.name, unverified_results(w))
            continue
        t = time.perf_counter()
        try:
            results, texts = measure_variant(dev, w, plan)
        except Exception as e:  # one failing benchmark never takes the sweep down
            results, texts = [Result(w.variant.name, "latency", None, "cycles", "none",
                                     flags=[f"error: {type(e).__name__}: {e}"], cls=w.variant.cls)], {}
        timing["gpu_and_fit_s"] += time.perf_counter() - t
        t = time.perf_counter()
        store.save(run_id, w.variant.name, results, texts)
        timing["store_s"] += time.perf_counter() - t
    store.finish_run(run_id, dev.clocks(), timing)
    return run_id, timing


def run_catalog_suite(dev, store: Store, patterns: list[str] | None, *, arch: str, quick: bool = False,
                      resume: bool = True, jobs: int = 8, progress=None,
                      catalog_paths=None) -> tuple[int, dict]:
    """The suite registry's entry point: select catalog variants by pattern and run them."""
    from gpudissect.catalog.model import load_catalog

    vs = load_catalog(catalog_paths or None).select(patterns)
    return run_suite(dev, store, vs, arch, QUICK_PLAN if quick else Plan(), jobs=jobs, resume=resume,
                     progress=progress)
