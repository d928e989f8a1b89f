"""The instruction suite: latency, throughput and dependence distance of every verified variant.

Phases (the contract of ``bench/contract.py``; the run loop is ``bench/runner.py``):
``prepare`` (1) maps the variants (autonomic verification, batched, no GPU) and (2) generates
and compiles every timing kernel, batched into modules in parallel, and verifies each kernel
family's SASS again; ``measure`` (3) launches one variant's families on the GPU and analyses
them (one variant per stored transaction; interrupted sweeps resume from the store);
``finish`` times a few instructions through nvcc as an independent check.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from gpudissect.bench.contract import Context, Item, Outcome, Redo, SuiteBase, SuiteInputError
from gpudissect.bench.contract import Plan as RunPlan
from gpudissect.bench.runner import WORKER_FAILED
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
from gpudissect.catalog.model import CatalogError, UnknownVariant, Variant, load_catalog
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.toolchain import PtxasError
from gpudissect.store.db import Result
from gpudissect.suites.instructions.selfcheck import run_selfcheck, selfcheck_lines
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import GenerationError, generate
from gpudissect.suites.instructions.verify import MapRecord, autoverify_many, check_built
from gpudissect.target import Target


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
    kernels: list[Kernel]
    built: list[Built] = field(default_factory=list)
    error: str | None = None


@dataclass
class VariantWork:
    variant: Variant
    record: MapRecord
    families: list[Family] = field(default_factory=list)
    results: list[list[Result]] = field(default_factory=list)  # per family, its latest measurement


def select_variants(patterns: list[str] | None, catalog_paths=None) -> list[Variant]:
    """The catalog variants that ``patterns`` name (all when None); bad input is one line."""
    try:
        cat = load_catalog(catalog_paths or None)
    except CatalogError as e:
        raise SuiteInputError(f"catalog: {e}") from None
    try:
        return cat.select(patterns)
    except UnknownVariant as e:
        raise SuiteInputError(str(e)) from None


def timing_families(v: Variant, strat_name: str, target: Target, plan: Plan, idx: int) -> list[Family]:
    """The timing kernels of variant number ``idx`` of a run: latency, throughput per chain
    count, dependence distance per distance."""
    strat = get_strategy(strat_name)
    fams = []

    def fam(measure: str, chains: int, lengths: tuple[int, ...]) -> Family:
        ks = [generate(v, strat, target, chains=chains, length=n, reps=plan.reps, measure=measure,
                       name=f"v{idx}_{measure[0]}{chains}_n{n}") for n in lengths]
        return Family(measure, chains, ks)

    fams.append(fam("latency", 1, plan.latency_lengths))
    for k in plan.tp_chains:
        fams.append(fam("throughput", k, plan.tp_lengths))
    for d in plan.distances:
        fams.append(fam("distance", d, plan.distance_lengths))
    return fams


def compile_work(works: list[VariantWork], target: Target, jobs: int, per_module: int = 12) -> None:
    """Build every family's kernels in batched modules; verify each family's SASS."""

    def one_chunk(chunk: list[VariantWork]) -> None:
        by_opt: dict[int, list[VariantWork]] = {}
        for w in chunk:
            by_opt.setdefault(get_strategy(w.record.strategy).opt, []).append(w)
        for opt, ws in by_opt.items():
            kernels = [k for w in ws for f in w.families for k in f.kernels]
            try:
                built = build_module(kernels, target.arch, opt)
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


def prepare_works(variants: list[Variant], records: list[MapRecord], target: Target, plan: Plan,
                  jobs: int) -> list[VariantWork]:
    """Phase 2: the timing kernels of every verified variant, compiled and checked."""
    works: list[VariantWork] = []
    for i, (v, rec) in enumerate(zip(variants, records, strict=True)):
        w = VariantWork(v, rec)
        if rec.verified:
            try:
                w.families = timing_families(v, rec.strategy or "reg", target, plan, i)
            except GenerationError as e:
                rec.verified = False
                rec.reason = f"timing kernels: {e}"
        works.append(w)
    compile_work([w for w in works if w.record.verified], target, jobs)
    return works


def _base_flags(w: VariantWork) -> list[str]:
    flags = []
    if w.record.glue:
        flags.append(f"glue: {w.record.glue}")
    if w.record.companion:
        flags.append(f"companion: {w.record.companion}")
    if any("BRA" in s for s in w.record.sass):
        flags.append("branch: data-dependent path in the instruction's SASS")
    return flags


def _fit_flags(fit: Fit, spreads: list[float]) -> list[str]:
    flags = []
    if fit.r2 < MIN_R2:
        flags.append(f"poor-fit: r2={fit.r2:.4f}")
    if max(spreads) > MAX_REL_SPREAD:
        flags.append(f"noisy: repeats spread {max(spreads):.1%}")
    return flags


def _noisy(results: list[Result]) -> bool:
    return any(fl.startswith("noisy") for r in results for fl in r.flags)


def _error_result(w: VariantWork, f: Family, flag: str) -> Result:
    return Result(w.variant.name, f.measure, None, "cycles", "none", params={"chains": f.chains},
                  flags=[flag], sass=w.record.sass, cls=w.variant.cls, strategy=w.record.strategy)


def measure_work(dev: Device, w: VariantWork, plan: Plan, only: set[int] | None = None) -> Outcome:
    """Run one variant's families (``only``: those of these indices; the others keep their
    latest measurement) on the device and analyse them. A worker failure (fault, hang) flags
    the family and skips the variant's remaining kernels (they would fail alike)."""
    fams = w.families
    if len(w.results) != len(fams):
        w.results = [[] for _ in fams]
    texts: dict[str, tuple[str, str]] = {}
    failed: Exception | None = None
    for i, f in enumerate(fams):
        if only is not None and i not in only:
            continue
        if failed is not None:
            w.results[i] = [_error_result(w, f, f"error: skipped: an earlier kernel of this variant "
                                                f"failed ({failed})")]
            continue
        try:
            w.results[i] = _measure_family(dev, w, f, plan, texts)
        except Exception as e:  # a launch that fails (resources, fault) flags this family only
            w.results[i] = [_error_result(w, f, f"error: {type(e).__name__}: {e}")]
            if type(e).__name__ == WORKER_FAILED:
                failed = e
    return Outcome(_with_peak(w.variant, [r for rs in w.results for r in rs]), texts)


def _measure_family(dev: Device, w: VariantWork, f: Family, plan: Plan, texts: dict) -> list[Result]:
    v = w.variant
    if f.error and not f.built:
        return [Result(v.name, f.measure, None, "cycles", "none", params={"chains": f.chains},
                       flags=[f"not timed: {f.error}"], sass=w.record.sass, cls=v.cls,
                       strategy=w.record.strategy)]
    texts.update(f.built[-1].texts())  # the kernel each result cites
    flags = _base_flags(w) + ([f"sass: {f.error}"] if f.error else [])
    cited = f.built[-1]
    cite = dict(sass=w.record.sass, strategy=w.record.strategy, cls=v.cls,
                ptx_hash=cited.ptx_hash, sass_hash=cited.sass_hash)
    if f.measure == "throughput":
        return [_throughput(dev, v, f, plan, W, flags, cite) for W in plan.tp_warps]
    return [_chain(dev, v, f, plan, flags, cite)]


def _chain(dev: Device, v: Variant, f: Family, plan: Plan, flags: list[str], cite: dict) -> Result:
    """Latency (one chain) or dependence distance (d interleaved chains), one warp."""
    xs, ys, raw, spreads = [], [], {}, []
    for b in f.built:
        res = dev.run(b.cubin, b.kernel.name, b.kernel.inputs, b.kernel.n_sink, plan.reps,
                      grid=1, block=32, launches=plan.launches)
        cyc = [float(rep_cycles(r.times, rep)[0]) for r in res for rep in range(1, plan.reps)]
        s = summarize(cyc)
        xs.append(b.kernel.length)
        ys.append(s.median)
        raw[str(b.kernel.length)] = cyc
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


def _throughput(dev: Device, v: Variant, f: Family, plan: Plan, W: int, flags: list[str], cite: dict) -> Result:
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
                windows[str(b.kernel.length)] = sm_windows(r.times, rep)
        if spans:
            s = summarize(spans)
            xs.append(b.kernel.length)
            ys.append(s.median)
            raw[str(b.kernel.length)] = spans
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


class InstructionsSuite(SuiteBase):
    """Every verified catalog variant: latency, throughput and dependence distance.

    The clock and noise guard is the runner's: on a :class:`Redo` for noisy results only the
    families whose repeats disagreed are measured again; after a clock change, all of them."""

    name = "instructions"
    description = "latency, throughput and dependence distance of every verified catalog variant"
    options = {"catalog": "catalog TOML file(s) instead of the built-in one",
               "selfcheck": "time a few instructions through nvcc too"}
    retry_noisy = True

    def __init__(self, full: Plan = Plan(), quick: Plan = QUICK_PLAN):
        self.full, self.quick = full, quick

    def axes(self, ctx: Context) -> Plan:
        return self.quick if ctx.quick else self.full

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        select_variants(patterns, options.get("catalog"))

    def plan(self, ctx: Context, patterns: list[str] | None) -> RunPlan:
        vs = select_variants(patterns, ctx.options.get("catalog"))
        return RunPlan([Item(v.name, v) for v in vs], self.axes(ctx).to_json())

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        variants = [i.data for i in items]
        self.prepare_mapped(ctx, variants, autoverify_many(variants, ctx.target, jobs=ctx.jobs))

    def prepare_mapped(self, ctx: Context, variants: list[Variant], records: list[MapRecord]) -> None:
        """Phase 2 alone, for variants already mapped (``gpudissect time``)."""
        works = prepare_works(variants, records, ctx.target, self.axes(ctx), ctx.jobs)
        ctx.state["works"] = {w.variant.name: w for w in works}

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        w: VariantWork = ctx.state["works"][item.name]
        if not w.record.verified:
            return Outcome(unverified_results(w))
        only = None
        if redo is not None and not redo.clock_changed:
            only = {i for i, rs in enumerate(w.results) if _noisy(rs)}
        out = measure_work(ctx.dev, w, self.axes(ctx), only)
        if redo is not None:
            out.texts = {**redo.previous.texts, **out.texts}
        return out

    def error_results(self, item: Item, flag: str) -> list[Result]:
        v: Variant = item.data
        return [Result(v.name, "latency", None, "cycles", "none", flags=[flag], cls=v.cls)]

    def finish(self, ctx: Context) -> list[str]:
        """The nvcc self-check over the run's latencies (option ``selfcheck``), stored as
        ``selfcheck:<run id>``."""
        if not ctx.options.get("selfcheck"):
            return []
        lat = {r["variant"]: r["value"] for r in ctx.store.results(ctx.run_id, measure="latency")
               if r["value"]}
        try:
            sc = run_selfcheck(ctx.dev, lat, ctx.target.arch)
            ctx.store.set_meta(f"selfcheck:{ctx.run_id}", sc)
        except Exception as e:
            return [f"self-check failed: {e}"]
        return selfcheck_lines(sc)
