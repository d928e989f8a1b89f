"""The instruction suite: latency, throughput and dependence distance of every verified variant.

Phases (the contract of ``bench/contract.py``; the run loop is ``bench/runner.py``):
``prepare`` (1) maps the variants (autonomic verification, batched, no GPU) and (2) generates
and compiles every timing kernel, batched into modules in parallel, and verifies each kernel
family's SASS again; ``measure`` (3) launches one variant's families on the GPU and analyses
them (one variant per stored transaction; interrupted sweeps resume from the store);
``finish`` times a few instructions through nvcc as an independent check.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from gpudissect.arch.limits import BRANCHES, Limit, check, checked_sass, limit_for, parse_sass
from gpudissect.arch.target import Target, paired_sass
from gpudissect.bench.contract import Context, Item, Outcome, Redo, SuiteBase, SuiteInputError
from gpudissect.bench.contract import Plan as RunPlan
from gpudissect.bench.runner import WORKER_FAILED
from gpudissect.bench.stats import (
    Fit,
    fit_flag,
    fit_line,
    noise_flag,
    per_sm,
    rep_cycles,
    robust_halfwidth,
    slopes_per_repeat,
    sm_windows,
)
from gpudissect.catalog.model import CatalogError, UnknownVariant, Variant, load_catalog
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.control import attach, kernel_controls, ptxas_latency
from gpudissect.kernel.parallel import pmap
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.toolchain import PtxasError
from gpudissect.store.db import Result
from gpudissect.suites.instructions import steps
from gpudissect.suites.instructions import values as value_latency
from gpudissect.suites.instructions.checks import Sample, region_mix
from gpudissect.suites.instructions.configs import CONFIGS as RW_CONFIGS
from gpudissect.suites.instructions.configs import CONTROL_OF as RW_CONTROL_OF
from gpudissect.suites.instructions.configs import MODES as RW_MODES
from gpudissect.suites.instructions.configs import (
    against_control,
    check_config,
    config_kernels,
    ptxas_gap,
)
from gpudissect.suites.instructions.configs import statistic as rw_statistic
from gpudissect.suites.instructions.operands import (
    GUARDS,
    OperandSpec,
    check_guarded,
    check_operand_flow,
    config_measures,
    core_sass,
    glue_key,
    glue_sass,
    operand_specs,
    operand_strategies,
    operand_variant,
)
from gpudissect.suites.instructions.selfcheck import run_selfcheck, selfcheck_lines
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import (
    GenerationError,
    companion_measured_by,
    companion_references,
    companion_sass,
    generate,
)
from gpudissect.suites.instructions.verify import MapRecord, autoverify_many, check_built


@dataclass(frozen=True)
class Plan:
    """The parameter axes of the suite (nvbench-style). Region sizes are instances of the PTX
    instruction per thread (chains x length); variants of many SASS per instance get fewer
    (``sass_budget``: at most so many SASS instructions in one timed region, so that the region
    stays in the instruction cache), never fewer than ``min_length`` per chain."""

    latency_units: tuple[int, ...] = (32, 64, 96, 128)
    tp_chains: tuple[int, ...] = (1, 2, 4, 8)
    tp_units: tuple[int, ...] = (128, 256)
    tp_warps: tuple[int, ...] = (4, 8, 16, 32, 64)  # warps per SM (more than 32: blocks of 32 warps)
    distances: tuple[int, ...] = (2, 4, 8)
    distance_units: tuple[int, ...] = (32, 64)
    reps: int = 4  # repetitions in a launch; the first (cold instruction cache) is dropped
    launches: int = 2  # whole launches per point: with the repetitions, the repeats of a spread
    sass_budget: int = 512  # 8 KiB of code per timed region
    min_length: int = 4
    # the warps x distance grid (grid.py): warps per SM (one block) x independent chains per
    # thread; none unless a plan names them (FULL_PLAN and QUICK_PLAN do)
    grid_warps: tuple[int, ...] = ()
    grid_distances: tuple[int, ...] = ()
    grid_units: tuple[int, ...] = (64, 128)  # region sizes of the grid's own kernels (compile time)
    grid_launches: int = 1
    # instruction configurations (guarded, read-read, write-write and their controls): region
    # sizes of one warp's slope, and the warp counts their rates are compared at
    config_units: tuple[int, ...] = (32, 64, 128)
    config_warps: tuple[int, ...] = (1, 2, 4, 8, 16, 32)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# the grid's regions of 256 instances per thread (the throughput families' longest): the warps'
# start skew, a few cycles that grow with the warps, is a smaller share of the span
FULL_PLAN = Plan(grid_warps=tuple(range(1, 33)), grid_distances=tuple(range(1, 9)), grid_units=(128, 256),
                 config_warps=tuple(range(1, 33)))
QUICK_PLAN = Plan(latency_units=(32, 64, 96), tp_chains=(4,), tp_units=(64, 128), tp_warps=(16, 32),
                  distances=(2, 4), distance_units=(32, 64), reps=3, launches=2,
                  grid_warps=(1, 2, 3, 4, 8, 16, 32), grid_distances=(1, 2, 4), grid_units=(32, 64),
                  config_units=(32, 64), config_warps=(1, 4, 16, 32))

PEAK_TOL = 0.02  # configurations within 2% of the best are "at the peak"
RISE = 1.02  # more warps that raise the rate by less than this: saturated
# flags of a configuration that keep it out of the peak (the measurement is not trustworthy)
BAD = ("noisy", "poor-fit", "sm-idle", "non-positive", "exceeds-limit", "not timed", "error", "sass:",
       "clock-changed", "refused", "below-issue-limit")
IDLE_TOL = 0.25  # an SM idle for more than this share of its span (late starts) is not saturated;
# below it: the few cycles between one warp's end and the next one's clock read on a scheduler that
# runs warps one after another (greedy issue), which the slope over lengths removes
RETRY = ("noisy", "exceeds-limit")  # flags the runner measures again
TP_MEASURES = ("throughput", "grid")  # families of many warps: checked as throughput kernels


@dataclass
class Family:
    measure: str  # latency | issue_interval | throughput | distance
    chains: int
    kernels: list[Kernel]
    built: list[Built] = field(default_factory=list)
    error: str | None = None
    regs: int = 0  # registers per thread (the most of its kernels)
    stall: float | None = None  # ptxas's stall model of a chain family (single-SASS variants)
    sass: list[str] | None = None  # a throughput family's own SASS per instance (its limit)
    # per kernel name: its whole timed region per instance (checks.region_mix): the limit of a
    # rate from one span of that kernel (the grid's cells)
    region_sass: dict[str, list[str]] = field(default_factory=dict)
    paired: bool = False  # two instances in the two lanes of each SASS (checks.py)
    # per-operand latency (operands.py): the operand the chain runs through, the strategy its
    # kernels were generated with, the SASS slots the data flow showed the chain entering by;
    # alias: the measure whose kernels are this family's own (the variant's default chain)
    operand: OperandSpec | None = None
    strategy: str | None = None
    slots: dict[str, list[int]] | None = None
    alias: str | None = None
    info: dict = field(default_factory=dict)  # what a read-read / write-write SASS check showed


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


def lengths_for(units: tuple[int, ...], chains: int, sass_per_instance: float, plan: Plan) -> tuple[int, ...]:
    """Chain lengths for region sizes ``units`` (instances per thread) of ``chains`` chains,
    scaled down for instructions of many SASS (at most ``plan.sass_budget`` SASS per region)."""
    scale = min(1.0, plan.sass_budget / (max(units) * max(sass_per_instance, 1.0)))
    out = sorted({max(plan.min_length, int(u * scale) // chains) for u in units})
    if len(out) < 2:
        out = [out[0], 2 * out[0]]
    return tuple(out)


def sass_per_instance(rec: MapRecord) -> float:
    return sum(float(Fraction(c)) for c in rec.sass_counts.values()) or 1.0


def timing_families(v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
    """The timing kernels of variant number ``idx`` of a run: latency (or issue interval),
    throughput per chain count, dependence distance per distance."""
    strat = get_strategy(rec.strategy or "reg")
    spi = sass_per_instance(rec)
    fams = []

    def fam(measure: str, chains: int, units: tuple[int, ...]) -> Family:
        ks = [generate(v, strat, target, chains=chains, length=n, reps=plan.reps, measure=measure,
                       name=f"v{idx}_{measure[0]}{chains}_n{n}")
              for n in lengths_for(units, chains, spi, plan)]
        return Family(measure, chains, ks)

    fams.append(fam("latency" if v.chain_operand is not None else "issue_interval", 1,
                    plan.latency_units))
    for k in plan.tp_chains:
        fams.append(fam("throughput", k, plan.tp_units))
    if v.chain_operand is not None:
        for d in plan.distances:
            fams.append(fam("distance", d, plan.distance_units))
    fams.extend(operand_families(v, rec, target, plan, idx))
    fams.extend(config_families(v, rec, target, plan, idx))
    from gpudissect.suites.instructions.grid import grid_families  # grid.py builds on this module

    fams.extend(grid_families(v, rec, target, plan, idx))
    return fams


def config_families(v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
    """The instruction-configuration families of ``v`` (strategies.toml [configurations]): its
    latency chain with every instance under a predicate true or false at run time."""
    out = []
    for m in config_measures(v):
        f = Family(m, 1, [], strategy=rec.strategy)
        out.append(f)
        guard = GUARDS[m]
        try:
            f.kernels = [generate(v, get_strategy(rec.strategy or "reg"), target, chains=1, length=n,
                                  reps=plan.reps, measure=m, name=f"v{idx}_g{'t' if guard else 'f'}_l1_n{n}", guard=guard)
                         for n in lengths_for(plan.config_units, 1, sass_per_instance(rec), plan)]
        except GenerationError as e:
            f.error = f"{m}: {e}"
    # an instance of several SASS instructions is checked by data flow (configs.check_config),
    # read-read and write-write alike: each family says itself why it cannot show its pattern
    for measure, ks, why in config_kernels(v, target, plan.config_units, plan.min_length, plan.reps, idx):
        out.append(Family(measure, 1, ks, error=why, strategy="reg"))  # read-read, write-write, controls
    return out


def operand_families(v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
    """The per-operand latency families of ``v`` (strategies.toml [operand_latency]): one chain
    through each listed operand, generated with the table's first strategy (the others are tried
    by :func:`retry_operands` where it does not verify)."""
    return [operand_family(v, rec, spec, 0, target, plan, idx) for spec in operand_specs(v)]


def operand_family(v: Variant, rec: MapRecord, spec: OperandSpec, attempt: int, target: Target,
                   plan: Plan, idx: int) -> Family:
    """The family of operand ``spec`` with the table's strategy number ``attempt``. The operand
    the variant's own latency chain runs through, with the same strategy, is the same kernels:
    an alias of ``latency``. A family no kernel can be generated for carries its reason."""
    sname = operand_strategies()[attempt]
    strat = get_strategy(sname)
    f = Family(spec.measure, 1, [], operand=spec, strategy=sname)
    default = v.chain_operand
    if default is not None and spec.name == default.name and rec.strategy == sname:
        f.alias = "latency"
    elif strat.opt != get_strategy(rec.strategy or sname).opt:
        f.error = f"operand {spec.index}: strategy {sname} compiles at another -O than {rec.strategy}"
    else:
        tag = f"o{spec.index}" + (f"s{attempt}" if attempt else "")
        try:
            lens = lengths_for(plan.latency_units, 1, sass_per_instance(rec), plan)
            f.kernels = [generate(operand_variant(v, spec), strat, target, chains=1, length=n, reps=plan.reps,
                                  measure=spec.measure, name=f"v{idx}_{tag}_l1_n{n}") for n in lens]
        except GenerationError as e:
            f.error = f"{sname}: operand {spec.index} ({spec.name}): {e}"
    return f


def retry_operands(works: list[VariantWork], target: Target, plan: Plan, jobs: int) -> None:
    """Per-operand families that did not verify, tried again with the table's next strategy
    (built and checked like the first), until one verifies or none is left; a family that
    never verifies keeps every strategy's reason."""
    names = operand_strategies()
    index = {w.variant.name: i for i, w in enumerate(works)}
    for attempt in range(1, len(names)):
        redo: list[VariantWork] = []
        for w in works:
            failed = [(i, f) for i, f in enumerate(w.families) if f.operand is not None and f.error
                      and f.strategy == names[attempt - 1]]
            if not failed:
                continue
            fams = [operand_family(w.variant, w.record, f.operand, attempt, target, plan,  # type: ignore[arg-type]
                                   index[w.variant.name]) for _, f in failed]
            for (_, old), new in zip(failed, fams, strict=True):
                new.error = new.error and f"{old.error}; {new.error}"  # not generated: both reasons
            redo.append(VariantWork(w.variant, w.record, fams))
        if not redo:
            return
        compile_work(redo, target, jobs)
        for r in redo:
            w = works[index[r.variant.name]]
            slots = [i for i, f in enumerate(w.families) if f.operand is not None and f.error
                     and f.strategy == names[attempt - 1]]
            for i, new in zip(slots, r.families, strict=True):
                old = w.families[i].error or ""
                old = old if attempt > 1 or old.startswith(f"{names[0]}:") else f"{names[0]}: {old}"
                if new.error and not new.error.startswith(old):
                    new.error = f"{old}; {new.strategy}: {new.error}"
                w.families[i] = new


def without_companion(v: Variant, strat, counts: dict[str, str] | dict[str, Fraction]) -> dict[str, Fraction]:
    """One instance's SASS (opcode -> count; moves may be keyed ``MOV:<opcode>``, as in
    check_family) with the companion of ``strat``, if any, taken out."""
    if strat.chain != "companion":
        return {op: Fraction(c) for op, c in counts.items()}
    n = 2 if v.chain_operand is not None and v.chain_operand.reg_class == "rd" else 1
    return {op: Fraction(c).limit_denominator(64)
            for op, c in own_sass(counts, companion_sass(strat.companion), n).items()}


def own_counts(v: Variant, rec: MapRecord) -> dict[str, Fraction]:
    """One instance of the variant's own SASS from its verified chain: the companion (if any)
    and the glue taken out."""
    counts = without_companion(v, get_strategy(rec.strategy or "reg"), rec.sass_counts)
    return core_sass(counts, glue_key(v), glue_sass())


def _build_chunk(job: tuple[list[tuple[Variant, MapRecord, list[Family]]], str]) -> list[list[Family]]:
    """Build one chunk's kernels in one module per optimisation level and check each family's
    SASS (runs in a worker process: everything in and out is picklable). What comes back per
    family: its kernels built (without the parsed SASS, which only the checks need), or why
    not; the registers per thread; ptxas's stall model for a chain family."""
    chunk, arch = job
    pairs = paired_sass(arch)
    by_opt: dict[int, list[tuple[Variant, MapRecord, list[Family]]]] = {}
    for item in chunk:
        by_opt.setdefault(get_strategy(item[1].strategy).opt, []).append(item)
    for opt, items in by_opt.items():
        kernels = [k for _, _, fams in items for f in fams for k in f.kernels]
        if not kernels:  # every family of the group already failed to generate: nothing to build
            continue
        try:
            built = build_module(kernels, arch, opt)
        except PtxasError:
            if len(items) > 1:  # find the variant that does not assemble; then the next group
                for item in items:
                    _build_chunk(([item], arch))
                continue
            for f in items[0][2]:
                f.error = "ptxas failed on the timing kernels"
            continue
        for v, rec, fams in items:
            for f in fams:
                if f.alias or f.error:
                    continue
                strat = get_strategy(f.strategy or rec.strategy)
                fv = operand_variant(v, f.operand) if f.operand else v
                fv = replace(v, chain="none") if f.measure in RW_MODES else fv  # no chain to check
                bs = [built[k.name] for k in f.kernels]
                bad = next((b for b in bs if isinstance(b, Exception)), None)
                if bad is not None:
                    f.error = str(bad)
                    continue
                try:
                    res = check_built(fv, strat, bs,  # type: ignore[arg-type]
                                      paired=pairs.search if pairs and f.measure in TP_MEASURES else None)
                    if res.ok and f.operand is not None:
                        why, f.slots = check_operand_flow(
                            [Sample(b.kernel.units, b.kernel.length, b.region) for b in bs],  # type: ignore[union-attr]
                            f.operand, own_counts(v, rec), without_companion(fv, strat, res.per_unit),
                            glue_key(fv), glue_sass())
                        if why:
                            res.ok, res.reason = False, why
                    if res.ok and f.measure in RW_MODES:
                        why, f.info = check_config(f.measure, [Sample(b.kernel.units, b.kernel.length, b.region)
                                                               for b in bs], own_counts(v, rec),  # type: ignore[union-attr]
                                                   core_sass(res.per_unit, None, {}))
                        res.ok, res.reason = why is None, why or ""
                        f.sass = res.sass
                        f.info["ptxas_stall_between_instances"] = ptxas_gap(bs[-1], own_counts(v, rec))  # type: ignore[arg-type]
                    if res.ok and f.measure in GUARDS:
                        why, f.info = check_guarded([Sample(b.kernel.units, b.kernel.length, b.region)
                                                     for b in bs], own_counts(v, rec))  # type: ignore[union-attr]
                        if why:
                            res.ok, res.reason = False, why
                    f.regs = max(b.regs for b in bs)  # type: ignore[union-attr]
                    if f.measure not in TP_MEASURES:
                        f.stall = ptxas_stall(bs[-1], rec)  # type: ignore[arg-type]
                except Exception as e:  # noqa: BLE001 - this family fails, not the whole build
                    f.error = f"checking the built kernels: {type(e).__name__}: {e}"
                    continue
                if not res.ok:
                    f.error = res.reason
                elif f.measure in TP_MEASURES:
                    f.sass, f.paired = res.sass, res.paired  # its own mix (IADD3.X / IMAD.X vary)
                    f.region_sass = {b.kernel.name: region_mix(b.region, b.kernel.units)  # type: ignore[union-attr]
                                     for b in bs}
                elif f.operand is not None:
                    f.sass = res.sass  # its own chain's SASS (the glue, if any, moved)
                f.built = [b.light() for b in bs]  # type: ignore[union-attr]
    return [fams for _, _, fams in chunk]


def compile_work(works: list[VariantWork], target: Target, jobs: int, per_module: int = 4) -> None:
    """Build every family's kernels in batched modules, in parallel processes; verify each
    family's SASS."""
    chunks = [works[i : i + per_module] for i in range(0, len(works), per_module)]
    jobs_in = [([(w.variant, w.record, w.families) for w in c], target.arch) for c in chunks]
    for c, fams_back in zip(chunks, pmap(_build_chunk, jobs_in, jobs), strict=True):
        for w, fams in zip(c, fams_back, strict=True):
            w.families = fams


def prepare_works(variants: list[Variant], records: list[MapRecord], target: Target, plan: Plan,
                  jobs: int) -> list[VariantWork]:
    """Phase 2: the timing kernels of every verified variant, compiled and checked."""
    works: list[VariantWork] = []
    for i, (v, rec) in enumerate(zip(variants, records, strict=True)):
        w = VariantWork(v, rec)
        if rec.verified:
            try:
                w.families = timing_families(v, rec, target, plan, i)
            except GenerationError as e:
                rec.verified = False
                rec.status = "unverified"
                rec.reason = f"timing kernels: {e}"
        works.append(w)
    compile_work([w for w in works if w.record.verified], target, jobs)
    retry_operands([w for w in works if w.record.verified], target, plan, jobs)
    return works


def _base_flags(w: VariantWork) -> list[str]:
    flags = []
    if w.record.glue:
        flags.append(f"glue: {w.record.glue}")
    if w.record.companion:
        flags.append(f"companion: {w.record.companion}")
    if any(op.split(".")[0] in BRANCHES for op, _ in parse_sass(w.record.sass)):
        flags.append("branch: data-dependent path or call in the instruction's SASS (no limit from "
                     "its static count)")
    return flags


def _matters(r: Result, results: list[Result]) -> bool:
    """``r`` carries a retry flag and could change a reported number."""
    if not any(fl.startswith(RETRY) for fl in r.flags):
        return False
    if r.measure.removesuffix(PAIR) != "throughput":
        return True
    best = max((x.value for x in results if x.measure == r.measure and x.value
                and not any(f.startswith(BAD) for f in x.flags)), default=0.0)
    return (r.value or 0.0) >= (1 - PEAK_TOL) * best


def _retry(results: list[Result]) -> bool:
    return any(_matters(r, results) for r in results)


def _error_result(w: VariantWork, f: Family, flag: str) -> Result:
    return Result(w.variant.name, f.measure, None, "cycles", "none", params={"chains": f.chains},
                  flags=[flag], sass=w.record.sass, cls=w.variant.cls, strategy=w.record.strategy)


def measure_work(dev: Device, w: VariantWork, plan: Plan, target: Target,
                 only: set[int] | None = None) -> Outcome:
    """Run one variant's families (``only``: those of these indices; the others keep their
    latest measurement) on the device and analyse them: the chain families one by one, then
    the throughput sweep over all chain counts at once. A worker failure (fault, hang) flags
    the family and skips the variant's remaining kernels (they would fail alike)."""
    fams = w.families
    if len(w.results) != len(fams):
        w.results = [[] for _ in fams]
    texts: dict[str, tuple[str, str]] = {}
    failed: Exception | None = None
    todo = [i for i in range(len(fams)) if (only is None or i in only) and not fams[i].alias]
    for i in [i for i in todo if fams[i].measure not in TP_MEASURES]:
        if failed is not None:
            w.results[i] = [_skipped(w, fams[i], failed)]
            continue
        try:
            w.results[i] = _measure_family(dev, w, fams[i], plan, texts)
        except Exception as e:  # a launch that fails (resources, fault) flags this family only
            w.results[i] = [_error_result(w, fams[i], f"error: {type(e).__name__}: {e}")]
            if type(e).__name__ == WORKER_FAILED:
                failed = e
    controls = {g.measure: k for k, g in enumerate(fams)}
    # a configuration whose control was measured again (a retry) is compared again too
    for i in [i for i, g in enumerate(fams) if g.measure in RW_CONFIGS
              and (i in todo or controls.get(RW_CONTROL_OF[g.measure]) in todo)]:
        if failed is None:
            try:
                _against_control(dev, w, i, plan, target)
            except Exception as e:  # noqa: BLE001 - the comparison fails, not the variant
                if type(e).__name__ == WORKER_FAILED:
                    failed = e  # the device is gone: the variant's remaining kernels would fail alike
                if w.results[i]:
                    r = w.results[i][0]
                    w.results[i][0] = replace(r, flags=[*r.flags, f"error: against the control: {type(e).__name__}: "
                                                                 f"{e}"[:300]])
    tp = [i for i in todo if fams[i].measure == "throughput"]
    if tp:
        swept: dict[int, list[Result]] = {i: [] for i in tp}
        if failed is None:
            try:
                _sweep(dev, w, tp, plan, target, texts, swept)
            except Exception as e:  # the worker failed: this configuration and the rest
                failed = e
        for i in tp:
            w.results[i] = swept[i] or ([_skipped(w, fams[i], failed)] if failed else [])
    grid = [i for i in todo if fams[i].measure == "grid"]
    if grid:  # one result of all the grid's columns, kept with its first family of its own
        from gpudissect.suites.instructions.grid import measure_grid

        w.results[grid[0]] = [_skipped(w, fams[grid[0]], failed)] if failed else \
            measure_grid(dev, w, plan, target, texts)
    for i, f in enumerate(fams):
        if f.alias:
            w.results[i] = [alias_result(w.variant, f, [r for rs in w.results for r in rs])]
    measured = [r for rs in w.results for r in rs]
    out = measured + peak_results(w.variant, measured, target)
    if w.record.companion:  # the pair's numbers; finish() derives the variant's own
        out = [r if r.measure.startswith(OPERAND) or r.measure in RW_MODES else _as_pair(r) for r in out]
    # a per-operand chain with a companion: the pair's number; finish() derives the operand's own
    out = [_as_pair(r) if r.measure.startswith(OPERAND) and _with_companion(r) else r for r in out]
    return Outcome(out, texts)


def _against_control(dev: Device, w: VariantWork, i: int, plan: Plan, target: Target) -> None:
    """The read-read / write-write result of family ``i`` set against its control's (the family
    of the same lengths with no register shared): the one-warp slopes, and both kernels' rates at
    each of ``plan.config_warps`` warps per SM (as many as the registers allow; one batch each).
    A launch the driver refuses is a note; a failed worker is raised."""
    from gpudissect.suites.instructions.grid import warp_rates  # grid.py builds on this module

    fams, f = w.families, w.families[i]
    rs = w.results[i]
    j = next((k for k, g in enumerate(fams) if g.measure == RW_CONTROL_OF[f.measure]), None)
    if not rs or rs[0].value is None:
        return
    c = w.results[j][0] if j is not None and w.results[j] else None
    rates: list[dict | None] = [None, None]
    notes: list[str] = []
    if j is not None and f.built and fams[j].built and c is not None and c.value is not None:
        facts = target.facts["target"]
        regs = max(f.regs, fams[j].regs, 1)
        cap = min(facts["max_warps_per_block"], facts["registers_per_sm"] // (32 * regs))
        ws = [W for W in plan.config_warps if W <= cap]
        if len(ws) < len(plan.config_warps):
            notes.append(f"W>{cap} refused ({regs} registers per thread)")
        for k, g in enumerate((f, fams[j])):
            try:
                rates[k] = warp_rates(dev, g.built[-1], ws, plan, dev.info.sm_count, notes)
            except Exception as e:
                if type(e).__name__ == WORKER_FAILED:
                    raise
                notes.append(f"{g.measure}: error: {type(e).__name__}: {e}"[:200])
    units = (f.built[-1].kernel.units, fams[j].built[-1].kernel.units) if j is not None and f.built and \
        fams[j].built else (0, 0)
    w.results[i] = [against_control(rs[0], c, rates[0], rates[1], notes, units)] + rs[1:]


def _with_companion(r: Result) -> bool:
    return any(f.startswith("companion:") for f in r.flags)


def _skipped(w: VariantWork, f: Family, failed: Exception | None) -> Result:
    return _error_result(w, f, f"error: skipped: a kernel of this variant failed "
                               f"({type(failed).__name__}: {failed})")


def _cite(w: VariantWork, f: Family) -> tuple[list[str], dict] | Result:
    """The flags every result of family ``f`` carries and the kernel it cites (its texts go into
    the store once a result of it is measured), or the result that says why the family is not
    timed."""
    v = w.variant
    if f.error:  # not built, or its SASS is not the instruction's: no number could be used
        return Result(v.name, f.measure, None, "cycles", "none", params={"chains": f.chains},
                      flags=[f"not timed: {f.error}"], sass=w.record.sass, cls=v.cls,
                      strategy=w.record.strategy)
    flags = _base_flags(w) if f.operand is None and f.measure not in RW_MODES else _operand_flags(w, f)
    if f.paired:
        flags.append(f"paired: ptxas put two independent instances into the two lanes of each "
                     f"{' '.join(op.split('*')[-1] for op in f.sass)} (rate per PTX instance)")
    cited = f.built[-1]
    own = f.paired or f.operand is not None or f.measure in RW_MODES
    return flags, dict(sass=f.sass if own else w.record.sass, strategy=f.strategy or w.record.strategy,
                       cls=v.cls, ptx_hash=cited.ptx_hash, sass_hash=cited.sass_hash)


def _operand_flags(w: VariantWork, f: Family) -> list[str]:
    """The flags of a per-operand family: its own glue (the chain feeds that operand), and
    the variant's data-dependent path, if any."""
    meta = f.kernels[0].meta if f.kernels else {}
    own = [f"{k}: {meta[k]}" for k in ("glue", "companion") if meta.get(k)]
    return own + [x for x in _base_flags(w) if x.startswith("branch:")]


PAIR = "_with_companion"
OPERAND = "latency_operand_"  # per-operand latencies: their own chains, never with a companion


def _as_pair(r: Result) -> Result:
    if not r.measure.endswith(PAIR):
        r.measure += PAIR
    return r


def _measure_family(dev: Device, w: VariantWork, f: Family, plan: Plan, texts: dict) -> list[Result]:
    """A chain family: latency, issue interval or dependence distance."""
    c = _cite(w, f)
    if isinstance(c, Result):
        return [c]
    flags, cite = c
    texts.update(f.built[-1].texts())  # the kernel the result cites
    return [_chain(dev, w, f, plan, flags, cite)]


def _sweep(dev: Device, w: VariantWork, tp: list[int], plan: Plan, target: Target, texts: dict,
           out: dict[int, list[Result]]) -> None:
    """The throughput sweep of the families ``tp`` (one per chain count) into ``out``, in order
    of parallelism (warps x chains, then warps). A chain count stops at the first clean
    configuration whose rate more warps no longer raise (saturated along warps) and at a
    refusal (more warps need more of what was refused); the whole sweep stops once a clean
    configuration is within PEAK_TOL of the binding physical limit (nothing can rise further:
    the limit only ends the search, the value is the measured one)."""
    v, fams = w.variant, w.families
    facts = target.facts["target"]
    cites: dict[int, tuple[list[str], dict]] = {}
    for i in tp:
        c = _cite(w, fams[i])
        if isinstance(c, Result):
            out[i] = [c]
        else:
            cites[i] = c
    limits = {i: limit_for(fams[i].sass or cite["sass"], target.base) for i, (_, cite) in cites.items()}
    configs = sorted((W * fams[i].chains, W, i) for i in cites for W in plan.tp_warps)
    stopped: set[int] = set()
    best: dict[int, float] = dict.fromkeys(cites, 0.0)
    for _, W, i in configs:
        if i in stopped:
            continue
        f, (flags, cite) = fams[i], cites[i]
        params = {"chains": f.chains, "warps": W}
        texts.update(f.built[-1].texts())  # the kernel its results cite (a family never reached: none)
        if W > facts["max_warps_per_block"] and f.regs * 32 * W > facts["registers_per_sm"]:
            out[i].append(Result(v.name, "throughput", None, "warp_instr/cycle/SM", "none", params=params,
                                 flags=flags + [f"refused: {W} warps need {f.regs * 32 * W} registers "
                                                f"({f.regs} per thread); the SM holds "
                                                f"{facts['registers_per_sm']}"], **cite))
            stopped.add(i)
            continue
        try:
            r = _throughput(dev, v, f, plan, W, flags, cite, limits[i], facts["max_warps_per_block"])
        except Exception as e:  # one configuration the driver refuses (registers) or that fails
            word = "refused" if "OUT_OF_RESOURCES" in str(e) else "error"
            out[i].append(Result(v.name, "throughput", None, "warp_instr/cycle/SM", "none", params=params,
                                 flags=flags + [f"{word}: {type(e).__name__}: {e}"[:300]], **cite))
            if type(e).__name__ == WORKER_FAILED:
                raise  # the device is gone: the variant's remaining kernels would fail alike
            stopped.add(i)
            continue
        out[i].append(r)
        if r.value is None or any(fl.startswith(BAD) for fl in r.flags):
            continue
        if best[i] and r.value < RISE * best[i]:
            stopped.add(i)  # saturated: more warps no longer raise the rate
        best[i] = max(best[i], r.value)
        limit = limits[i]
        if limit is not None and r.value >= (1 - PEAK_TOL) * limit.value:
            return  # at the physical limit: no configuration can rise further


def _launch_series(dev: Device, b: Built, plan: Plan, grid: int, block: int) -> list:
    return dev.run(b.cubin, b.kernel.name, b.kernel.inputs, b.kernel.n_sink, plan.reps,
                   grid=grid, block=block, launches=plan.launches)


def _flags_of(fit: Fit, per_repeat: list[float]) -> list[str]:
    return [f for f in (fit_flag(fit), noise_flag(per_repeat)) if f]


def _chain(dev: Device, w: VariantWork, f: Family, plan: Plan, flags: list[str], cite: dict) -> Result:
    """Latency (one chain), issue interval (no chain: independent instances) or dependence
    distance (d interleaved chains), one warp. Value: slope of the median cycles against the
    length; noise: the slope of each (launch, repetition) repeat."""
    v = w.variant
    xs, ys, raw = [], [], {}
    series: list[list[float]] = []
    for b in f.built:
        res = _launch_series(dev, b, plan, 1, 32)
        cyc = [float(rep_cycles(r.times, rep)[0]) for r in res for rep in range(1, plan.reps)]
        xs.append(b.kernel.length)
        ys.append(float(np.median(cyc)))
        raw[str(b.kernel.length)] = cyc
        series.append(cyc)
    fit = fit_line(xs, ys)
    per_repeat = slopes_per_repeat(xs, [list(col) for col in zip(*series, strict=True)])
    flags = flags + _flags_of(fit, per_repeat)
    if f.measure in RW_MODES or f.measure == "issue_interval":
        flags += _below_issue(fit.slope, f.sass or cite.get("sass") or [], xs, per_repeat)
    params = {"chains": f.chains, "lengths": xs, "launches": plan.launches,
              "repeats_per_launch": plan.reps - 1}
    if f.stall is not None:
        params["ptxas_stall_cycles"] = f.stall
    samples = {"cycles_per_repeat": raw, "slope_per_repeat": per_repeat}
    if f.measure == "distance":
        return Result(v.name, "distance", fit.slope / f.chains, "cycles/instr",
                      "slope of median cycles vs length / interleaved chains",
                      params={**params, "distance": f.chains}, fit=fit.to_json(), samples=samples,
                      flags=flags, **cite)
    if f.measure == "issue_interval":
        return Result(v.name, "issue_interval", fit.slope, "cycles",
                      "slope of median cycles vs instances, no dependence between instances "
                      "(an issue interval of one warp, not a latency)",
                      params=params, fit=fit.to_json(), samples=samples, flags=flags, **cite)
    if f.measure in GUARDS:
        commit = f.info.get("guard_form") == "commit"
        return Result(v.name, f.measure, fit.slope, "cycles",
                      f"slope of median cycles vs chain length, every instance under a predicate "
                      f"{'true' if GUARDS[f.measure] else 'false'} at run time"
                      + ("; ptxas computes the instance unguarded (or partly) and lands its result under "
                         "the guard (params.guard_commit: the SASS per instance that depend on it): the "
                         "guarded instruction's cost as compiled" if commit else ""),
                      params={**params, "guard": GUARDS[f.measure], **f.info}, fit=fit.to_json(), samples=samples,
                      flags=flags, **cite)
    if f.measure in RW_MODES:
        return Result(v.name, f.measure, fit.slope, "cycles", rw_statistic(f.measure),
                      params={**params, **f.info}, fit=fit.to_json(), samples=samples, flags=flags, **cite)
    if f.operand is not None:
        return Result(v.name, f.measure, fit.slope, "cycles",
                      f"slope of median cycles vs chain length, the chain through source operand "
                      f"{f.operand.index} alone",
                      params={**params, **_operand_params(f)}, fit=fit.to_json(), samples=samples,
                      flags=flags, **cite)
    return Result(v.name, "latency", fit.slope, "cycles", "slope of median cycles vs chain length",
                  params=params, fit=fit.to_json(), samples=samples, flags=flags, **cite)


def _below_issue(slope: float, sass: list[str], xs: list[int], per_repeat: list[float]) -> list[str]:
    """A one-warp slope over independent instances below the issue limit of one warp (one SASS
    instruction per cycle: at least the SASS per instance cycles per instance) by more than its
    95% interval and the clock's resolution over the lengths: no hardware runs so; the kernels
    of the lengths differ in more than their instances (flagged, not used)."""
    ops = parse_sass(sass)
    if any(op.split(".")[0] in BRANCHES for op, _ in ops):
        return []  # a data-dependent path: the static count is not what issues
    spi = sum(c for _, c in ops)
    unc = value_latency.uncertainty({"value": slope, "fit": {"xs": xs, "slope": slope},
                                     "samples": {"slope_per_repeat": per_repeat}}) or 0.0
    if spi > 0 and slope < spi - unc:
        return [f"below-issue-limit: {slope:.4g} cycles per instance, one warp issues {spi:g} SASS per "
                f"instance at one per cycle at most"]
    return []


def _operand_params(f: Family) -> dict:
    op = f.operand
    assert op is not None
    return {"operand": op.index, "operand_name": op.name, "sass_slots": f.slots or {}}


def alias_result(v: Variant, f: Family, results: list[Result]) -> Result:
    """The per-operand result of a family whose kernels are the ``f.alias`` measure's own
    (the variant's default chain): that measurement, under the per-operand name."""
    src = next((r for r in results if r.measure == f.alias), None)
    op = f.operand
    assert op is not None
    if src is None:
        return Result(v.name, f.measure, None, "cycles", "none",
                      params={"operand": op.index, "operand_name": op.name, "same_kernels_as": f.alias},
                      flags=[f"not timed: no {f.alias} result to share kernels with"], cls=v.cls)
    return Result(src.variant, f.measure, src.value, src.unit, src.statistic,
                  params={**src.params, "operand": op.index, "operand_name": op.name,
                          "same_kernels_as": f.alias},
                  fit=src.fit, samples=src.samples, flags=list(src.flags), sass=list(src.sass),
                  strategy=src.strategy, ptx_hash=src.ptx_hash, sass_hash=src.sass_hash, cls=src.cls)


def ptxas_stall(b: Built, rec: MapRecord) -> float | None:
    """ptxas's own latency model for a single-SASS instruction: the stall cycles it makes the
    next instance of the chain wait (kernel/control.py); None for variable-latency SASS."""
    ops = [op for op in rec.sass_counts if rec.sass_counts[op] == "1"]
    if len(rec.sass_counts) != 1 or len(ops) != 1:
        return None
    try:
        pairs = attach(b.region, kernel_controls(b.cubin)[b.kernel.name])
    except (KeyError, ValueError):
        return None
    return ptxas_latency(pairs, ops[0])


def _throughput(dev: Device, v: Variant, f: Family, plan: Plan, W: int, flags: list[str],
                cite: dict, limit: Limit | None, per_block: int) -> Result:
    """K chains per thread, W warps per SM (one block, or two blocks of 32 warps for 64); the
    SMs that held exactly W warps are used. Value: W x K / slope of the median SM span against
    the length; noise: the slope of each (launch, repetition) repeat."""
    blocks = -(-W // per_block)
    block = 32 * W // blocks
    xs, ys, raw = [], [], {}
    series: list[list[float]] = []
    idle: list[float] = []
    windows: dict[str, list] = {}
    for b in f.built:
        res = _launch_series(dev, b, plan, dev.info.sm_count * blocks, block)
        spans = []
        for r in res:
            for rep in range(1, plan.reps):
                st = per_sm(r.times, rep)
                full = st.warps == W
                if full.any():
                    spans.append(float(np.median(st.span[full])))
                    idle.append(float(np.median(st.idle[full])))
        if res:  # the evidence kept: the last repetition of the last launch
            windows[str(b.kernel.length)] = sm_windows(res[-1].times, plan.reps - 1)
        if spans:
            xs.append(b.kernel.length)
            ys.append(float(np.median(spans)))
            raw[str(b.kernel.length)] = spans
            series.append(spans)
    params = {"chains": f.chains, "warps": W, "blocks_per_sm": blocks, "lengths": xs,
              "launches": plan.launches, "repeats_per_launch": plan.reps - 1}
    if f.sass and f.sass != cite.get("sass"):  # this family's own mix, which its limit is of
        params["own_sass"] = f.sass
    if len(xs) < 2:
        return Result(v.name, "throughput", None, "warp_instr/cycle/SM", "none", params=params,
                      flags=flags + [f"not timed: no SM held exactly {W} warps"], **cite)
    fit = fit_line(xs, ys)
    n = min(len(s) for s in series)
    per_repeat = [W * f.chains / s for s in
                  slopes_per_repeat(xs, [list(col) for col in zip(*[s[:n] for s in series], strict=True)])
                  if s > 0]
    flags = flags + _flags_of(fit, per_repeat)
    rate = (W * f.chains) / fit.slope if fit.slope > 0 else None
    if rate is None:
        flags.append("non-positive slope")
    elif limit is not None:
        over = check(rate, limit)
        if over:
            flags.append(over)
    sm_idle = float(np.median(idle)) if idle else 0.0
    if sm_idle > IDLE_TOL:
        # no warp of the SM was inside its region for part of the span (late starts): the
        # span is not all work. Warps that run one after another (greedy issue) leave no gap.
        flags.append(f"sm-idle: the SMs were idle {sm_idle:.0%} of the span (median)")
    samples = {"per_sm_span": raw, "rate_per_repeat": per_repeat, "warp_windows_one_sm": windows,
               "sm_idle_fraction": sm_idle}
    return Result(v.name, "throughput", rate, "warp_instr/cycle/SM",
                  "warps*chains / slope of (median over SMs of the SM span) vs length",
                  params=params, fit=fit.to_json(), samples=samples, flags=flags, **cite)


def peak_results(v: Variant, out: list[Result], target: Target) -> list[Result]:
    """The saturated throughput: the best configuration among those that passed every check,
    the smallest one (warps x chains) within PEAK_TOL of it, and what bounds it."""
    tps = [r for r in out if r.measure.removesuffix(PAIR) == "throughput"]
    clean = [r for r in tps if r.value and not any(f.startswith(BAD) for f in r.flags)]
    unit = "warp_instr/cycle/SM"
    if not clean:
        if not tps:
            return []
        why = sorted({f.split(":")[0] for r in tps for f in r.flags if f.startswith(BAD)})
        first = tps[0]
        return [Result(v.name, "throughput_peak", None, unit, "none",
                       flags=[f"no clean configuration: {', '.join(why) or 'none measured'}"],
                       sass=first.sass, strategy=first.strategy, cls=v.cls)]
    best = max(clean, key=lambda r: r.value or 0)
    aborted = next((f for r in tps for f in r.flags if f.startswith("error:") and WORKER_FAILED in f), None)
    ok = [r for r in clean if (r.value or 0) >= (1 - PEAK_TOL) * (best.value or 0)]
    smallest = min(ok, key=lambda r: (r.params["warps"] * r.params["chains"], r.params["warps"]))
    own = best.params.get("own_sass")
    limit = limit_for(checked_sass(best.sass, best.params), target.base)
    bound = "unknown (no SASS, or a data-dependent path)"
    if limit is not None:
        share = (best.value or 0) / limit.value
        bound = (f"{limit.pipe} ({share:.0%} of {limit.value:.4g})" if share >= 0.9 else
                 f"latency or another resource ({share:.0%} of the {limit.pipe} limit {limit.value:.4g})")
    flags = sorted({f for f in best.flags if not f.startswith(BAD)})
    rising = _still_rising(best, clean, tps)
    if rising and not (limit is not None and (best.value or 0) >= (1 - PEAK_TOL) * limit.value):
        flags.append(f"not-saturated: {rising}")
    if aborted:  # the sweep ended early: what it did not reach is unknown
        flags.append(f"sweep-aborted: {aborted.removeprefix('error: ')}"[:300])
    return [Result(v.name, "throughput_peak", best.value, unit,
                   "max over clean (chains, warps) configurations",
                   params={"best": {"chains": best.params["chains"], "warps": best.params["warps"]},
                           "smallest_within_2pct": {"chains": smallest.params["chains"],
                                                    "warps": smallest.params["warps"]},
                           "bound": bound, "configurations": len(tps), "clean": len(clean),
                           **({"own_sass": own} if own else {})},
                   flags=flags, sass=best.sass, strategy=best.strategy, cls=v.cls,
                   ptx_hash=best.ptx_hash, sass_hash=best.sass_hash)]


def _still_rising(best: Result, clean: list[Result], tps: list[Result]) -> str | None:
    """Why ``best`` may not be the saturated rate, or None when the sweep shows the rate has
    stopped rising: a configuration with more parallelism (at least the warps and the chains
    of ``best``) was timed and the upper end of its 95% interval stays within RISE of ``best``
    (a noisy one counts too: its interval says how far it could reach), or a clean configuration with less (at most the
    warps and the chains of ``best``) is within RISE of it (the rate levelled off). With
    neither, nothing shows the rate levelling off: not saturated."""
    b = best.params
    for r in tps:
        p = r.params
        if r is best or not r.value or p.get("warps") is None or any(
                f.startswith(BAD) and not f.startswith("noisy") for f in r.flags):
            continue
        if p["warps"] >= b["warps"] and p["chains"] >= b["chains"]:
            top = r.value + robust_halfwidth((r.samples or {}).get("rate_per_repeat") or [r.value])
            if top <= RISE * (best.value or 0):
                return None
    smaller = [r for r in clean if r is not best and r.params["warps"] <= b["warps"]
               and r.params["chains"] <= b["chains"]]
    if not smaller:
        if len([r for r in tps if r.value]) == 1:
            return "one configuration timed: saturation not shown"
        return (f"{b['chains']}x{b['warps']}: {best.value:.4g} is the smallest clean configuration and "
                "nothing larger was timed lower")
    if any((best.value or 0) <= RISE * (r.value or 0) for r in smaller):
        return None
    steps = sorted(smaller, key=lambda r: -(r.value or 0))[:2]
    return "the rate still rose: " + ", ".join(
        f"{r.params['chains']}x{r.params['warps']}: {r.value:.4g}" for r in steps) + \
        f" -> {b['chains']}x{b['warps']}: {best.value:.4g}; nothing larger timed lower"


def _clean(r) -> bool:
    return r["value"] is not None and not any(f.startswith(BAD) for f in r["flags"])


def own_sass(counts: dict[str, str], comp: tuple[str, ...], n: int) -> dict[str, float]:
    """An instance's SASS with ``n`` of the companion's opcodes (``comp``) taken out: a 64-bit
    companion is a low half and a high half with its carry (``.X``), one of each."""
    own = {op: float(Fraction(c)) for op, c in counts.items()}
    halves = [False] if n == 1 else [False, True]  # False: the low half, True: the carry half
    for carry in halves:
        need = 1.0
        for op in own:
            if need > 0 and op in comp and op.endswith(".X") == carry:
                take = min(own[op], need)
                own[op] -= take
                need -= take
        for op in own:  # a companion whose halves ptxas did not split that way
            if need > 0 and op in comp:
                take = min(own[op], need)
                own[op] -= take
                need -= take
    return {op: c for op, c in own.items() if c > 1e-9}


def _clean_single(rows: dict[str, dict], op: str, exclude: set[str]) -> tuple[dict, float] | None:
    """A clean record of a variant whose one instance is exactly the SASS ``op``, with the
    factor that makes its rate that SASS's: 1; or, failing one, a paired record (half an ``op``
    per instance: two instances in its two lanes) and 0.5."""
    clean = [r for v, r in sorted(rows.items()) if v not in exclude and _clean(r)]
    for sass, factor in (([op], 1.0), ([f"0.5*{op}"], 0.5)):
        r = next((r for r in clean if r["sass"] == sass), None)
        if r is not None:
            return r, factor
    return None


def companion_removed(w: VariantWork, ref: str | None, comp_ops: tuple[str, ...],
                      lat: dict[str, dict], peak: dict[str, dict], pair: dict[str, dict],
                      paired: set[str]) -> list[Result]:
    """The variant's own latency and throughput from the pair's (its chain with the companion)
    and the companion's own, measured in the same run. Latencies add along the chain: the
    companion's (``ref``) is subtracted. A throughput cannot be split that way (the two may
    issue to one pipe or to two): where the variant's own SASS is one instruction, the clean
    throughput of a variant of exactly that SASS stands for it (the same machine instruction);
    otherwise the pair's rate is reported as including the companion."""
    v = w.variant
    comp = w.record.companion or ""
    keep = [f for f in _base_flags(w) if not f.startswith("companion:")]  # glue, branch
    n = 2 if v.chain_operand is not None and v.chain_operand.reg_class == "rd" else 1
    own = own_sass(w.record.sass_counts, comp_ops, n)
    sass = [op if c == 1 else f"{c:g}*{op}" for op, c in own.items()]
    base = dict(sass=sass, strategy=w.record.strategy, cls=v.cls)
    out: list[Result] = []
    why = None if ref else f"no variant measures the companion '{comp}' alone"
    pl, rl = pair.get("latency"), lat.get(ref or "")
    if why is None and not (pl and _clean(pl)):
        why = "the pair's latency is not clean"
    if why is None and not (rl and _clean(rl)):
        why = f"{ref}'s latency is not clean in this run"
    if why is None:
        value = pl["value"] - rl["value"]
        if value > 0:
            out.append(Result(v.name, "latency", value, "cycles",
                              f"latency of the pair minus {ref}'s (the companion '{comp}')",
                              params={"pair": pl["value"], "companion": {"variant": ref,
                                                                         "latency": rl["value"]}},
                              flags=keep + [f"companion removed: {comp} ({ref}, {rl['value']:.3g} cycles)"],
                              **base))
        else:
            why = f"the pair ({pl['value']:.3g}) is not slower than {ref} ({rl['value']:.3g})"
    if why is not None:
        out.append(Result(v.name, "latency", None, "cycles", "none", params={"pair": pl and pl["value"]},
                          flags=keep + [f"includes companion: {comp}: {why}"], **base))
    pt = pair.get("throughput_peak")
    found = _clean_single(peak, sass[0], paired | {v.name}) if len(own) == 1 and sass == list(own) else None
    if found is not None:
        same, factor = found
        half = "" if factor == 1 else ", halved: it holds two instances per SASS (paired lanes)"
        out.append(Result(v.name, "throughput_peak", same["value"] * factor, "warp_instr/cycle/SM",
                          f"the clean throughput of {same['variant']}: the same single SASS "
                          f"({sass[0]}) as this variant without its companion{half}",
                          params={"same_sass_as": same["variant"], "pair": pt and pt["value"],
                                  **{k: same["params"][k] for k in ("best", "bound")
                                     if k in (same["params"] or {})}},
                          flags=keep + [f"same SASS as {same['variant']}"], **base))
    else:
        why = (f"the pair's rate ({pt['value']:.3g})" if pt and pt["value"] else "the pair has no rate")
        out.append(Result(v.name, "throughput_peak", None, "warp_instr/cycle/SM", "none",
                          params={"pair": pt and pt["value"]},
                          flags=keep + [f"includes companion: {comp}: {why}; no clean variant of the "
                                        "same single SASS to stand for it"], **base))
    return out


def operand_companion_removed(v: Variant, pair: dict, lat: dict[str, dict]) -> Result:
    """An operand's own latency from its chain with a companion (``pair``, a stored row) and the
    companion's own latency measured in the same run (catalog/glue.toml [companion_latency]),
    as for a variant's latency (:func:`companion_removed`)."""
    p = pair["params"] or {}
    op = get_strategy(pair["strategy"] or "companion").companion
    ref = companion_measured_by(op, v.operand(p["operand_name"]).reg_class)
    keep = [f for f in pair["flags"] if not f.startswith("companion:")]
    sass = list(pair["sass"] or [])
    for _ in range(2 if v.operand(p["operand_name"]).reg_class == "rd" else 1):  # the companion's SASS out
        j = next((i for i in range(len(sass) - 1, -1, -1) if sass[i] in companion_sass(op)), None)
        if j is not None:
            sass.pop(j)
    base = dict(sass=sass, strategy=pair["strategy"], cls=v.cls)
    measure = pair["measure"].removesuffix(PAIR)
    rl = lat.get(ref or "")
    why = None if ref else f"no variant measures the companion '{op}' alone"
    if why is None and not _clean(pair):
        why = "the pair's latency is not clean"
    if why is None and not (rl and _clean(rl)):
        why = f"{ref}'s latency is not clean in this run"
    if why is None and pair["value"] - rl["value"] <= 0:  # type: ignore[index]
        why = f"the pair ({pair['value']:.3g}) is not slower than {ref} ({rl['value']:.3g})"  # type: ignore[index]
    if why is not None:
        return Result(v.name, measure, None, "cycles", "none", params={**p, "pair": pair["value"]},
                      flags=keep + [f"includes companion: {op}: {why}"], **base)
    return Result(v.name, measure, pair["value"] - rl["value"], "cycles",  # type: ignore[index]
                  f"latency of the chain through operand {p['operand']} with its companion minus "
                  f"{ref}'s (the companion '{op}')",
                  params={**p, "pair": pair["value"], "companion": {"variant": ref, "latency": rl["value"]}},  # type: ignore[index]
                  flags=keep + [f"companion removed: {op} ({ref}, {rl['value']:.3g} cycles)"], **base)  # type: ignore[index]


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
    retry_flags = RETRY

    def __init__(self, full: Plan = FULL_PLAN, quick: Plan = QUICK_PLAN):
        self.full, self.quick = full, quick

    def axes(self, ctx: Context) -> Plan:
        return self.quick if ctx.quick else self.full

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        select_variants(patterns, options.get("catalog"))

    def plan(self, ctx: Context, patterns: list[str] | None) -> RunPlan:
        vs = select_variants(patterns, ctx.options.get("catalog"))
        if patterns:  # the variants that measure a companion alone, for those that need one
            have = {v.name for v in vs}
            refs = [r for r in companion_references() if r not in have]
            refs += steps.proxy_references([v.name for v in vs], ctx.target.arch)  # steps.py's proxies
            vs += [v for v in select_variants(None, ctx.options.get("catalog")) if v.name in refs]
        return RunPlan([Item(v.name, v) for v in vs], self.axes(ctx).to_json())

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        variants = [i.data for i in items]
        self.prepare_mapped(ctx, variants, autoverify_many(variants, ctx.target, jobs=ctx.jobs))

    def prepare_mapped(self, ctx: Context, variants: list[Variant], records: list[MapRecord]) -> None:
        """Phase 2 alone, for variants already mapped (``gpudissect time``)."""
        works = prepare_works(variants, records, ctx.target, self.axes(ctx), ctx.jobs)
        ctx.state["works"] = {w.variant.name: w for w in works}
        ctx.state["values"] = value_latency.prepare(works, ctx.target, self.axes(ctx), ctx.jobs)

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        w: VariantWork = ctx.state["works"][item.name]
        if not w.record.verified:
            return Outcome(unverified_results(w))
        only = None
        if redo is not None and not redo.clock_changed:
            only = {i for i, rs in enumerate(w.results) if _retry(rs)}
        out = measure_work(ctx.dev, w, self.axes(ctx), ctx.target, only)
        if redo is not None:
            out.texts = {**redo.previous.texts, **out.texts}
            out.results += [r for r in redo.previous.results if r.measure == value_latency.MEASURE]
        elif ctx.state.get("values", {}).get(item.name):  # the value classes (values.py), once
            res, texts = value_latency.measure(ctx.dev, w.variant, ctx.state["values"][item.name], self.axes(ctx))
            out.results += res
            out.texts = {**out.texts, **texts}
        return out

    def wants_retry(self, out: Outcome) -> bool:
        """Measure again only what could change a reported number: a flagged chain measurement,
        or a flagged throughput configuration at least as fast as the best clean one."""
        return any(_matters(r, out.results) for r in out.results)

    def derive(self, ctx: Context) -> None:
        works: dict[str, VariantWork] = dict(ctx.state.get("works", {}))
        rows = ctx.store.results(ctx.run_id)
        lat = {r["variant"]: r for r in rows if r["measure"] == "latency"}
        peak = {r["variant"]: r for r in rows if r["measure"] == "throughput_peak"}
        pairs: dict[str, dict[str, dict]] = {}
        for r in rows:
            if r["measure"].endswith(PAIR):
                pairs.setdefault(r["variant"], {})[r["measure"].removesuffix(PAIR)] = r
        # a resumed run prepared only the items it measured: map the others again (no GPU)
        need = (set(pairs) | set(companion_references())) - set(works) if pairs else set()
        if need:
            vs = [v for v in select_variants(None, ctx.options.get("catalog")) if v.name in need]
            recs = autoverify_many(vs, ctx.target, jobs=ctx.jobs)
            works.update({v.name: VariantWork(v, r) for v, r in zip(vs, recs, strict=True)})
        for name, w in works.items():
            if not (w.record.verified and w.record.companion and name in pairs):
                continue
            op = get_strategy(w.record.strategy or "companion").companion
            ref = companion_measured_by(op, w.variant.chain_operand.reg_class)
            res = companion_removed(w, ref, companion_sass(op), lat, peak, pairs[name], set(pairs))
            ctx.store.save(ctx.run_id, f"derived/{name}", res)
        operand_pairs = {(v, m): r for v, ms in pairs.items() for m, r in ms.items() if m.startswith(OPERAND)}
        if operand_pairs:
            cat = {v.name: v for v in select_variants(None, ctx.options.get("catalog"))}
            for (name, _m), pr in sorted(operand_pairs.items()):
                if name in cat:
                    # stored with the variant's own item (done already): an item's results stay its own
                    ctx.store.save(ctx.run_id, name, [operand_companion_removed(cat[name], pr, lat)])
        steps.derive(ctx.store, ctx.run_id, ctx.target.arch, PEAK_TOL)  # per-SASS steps (issue 22)

    def error_results(self, item: Item, flag: str) -> list[Result]:
        v: Variant = item.data
        return [Result(v.name, "latency", None, "cycles", "none", flags=[flag], cls=v.cls)]

    def summarize(self, ctx: Context) -> dict:
        """The suite's conclusions (conclusions.py): value-dependent latency, signed vs unsigned."""
        from gpudissect.suites.instructions.conclusions import summarize

        return summarize(list(ctx.store.results(ctx.run_id)))  # type: ignore[arg-type]

    def finish(self, ctx: Context) -> list[str]:
        """The variants measured with a companion get their own numbers (the companion's, from
        the same run, removed: item ``derived/<variant>``); then the nvcc self-check over the
        run's latencies (option ``selfcheck``), stored as ``selfcheck:<run id>``."""
        self.derive(ctx)
        value_latency.derive(ctx.store, ctx.run_id)
        ctx.store.set_meta(f"summary:{ctx.run_id}", self.summarize(ctx))  # again, with the derived results
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
