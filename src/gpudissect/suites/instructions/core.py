"""The core of the instruction suite: latency, issue interval, dependence distance and the
throughput sweep of every verified variant, its peak, and what the suite's studies build on.

A variant's work (:class:`VariantWork`) is its timing families (:class:`Family`: one measure,
one chain count, kernels of several lengths): the core's (:func:`timing_families`: latency or
issue interval, throughput per chain count, dependence distance per distance), then each
study's (``studies/``, a :class:`VariantStudy` each). They are built in batched modules in
parallel and their SASS checked (:func:`compile_work`; a study's family by its study), then
timed one variant at a time (:func:`measure_work`): the one-warp chain families (a study's
result from its study), the studies' work on those (a configuration against its control), the
throughput sweep, the studies' families of many warps (the grid), and the saturated peak.
A number of the chain with its companion is stored as a pair (``records.PAIR``); the variant's
own is derived after the run (``companion.py``). The suite that composes the core and its
studies is ``suite.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

from gpudissect.arch.limits import BRANCHES, Limit, check, checked_sass, limit_for, parse_sass
from gpudissect.arch.target import Target, paired_sass
from gpudissect.bench.contract import Outcome, Study, SuiteInputError
from gpudissect.bench.runner import WORKER_FAILED
from gpudissect.bench.spans import span
from gpudissect.bench.stats import (
    Fit,
    fit_flag,
    fit_line,
    median,
    noise_flag,
    per_sm_reps,
    rep_cycles,
    robust_halfwidth,
    slopes_per_repeat,
    sm_windows,
)
from gpudissect.catalog.model import CatalogError, UnknownVariant, Variant, load_catalog
from gpudissect.device.device import Device, RunSpec
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.control import attach, controls_of, ptxas_latency
from gpudissect.kernel.parallel import pmap
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.toolchain import PtxasError
from gpudissect.store.db import Result
from gpudissect.suites.instructions import placement
from gpudissect.suites.instructions.checks import CheckResult, region_mix
from gpudissect.suites.instructions.records import PAIR, uncertainty
from gpudissect.suites.instructions.strategies import Strategy
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import GMEM_SLOT, GenerationError, generate
from gpudissect.suites.instructions.verify import MapRecord, check_built


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
    # a rate's regions (throughput, the grid): at least this many instances per chain, where
    # the region then holds at most region_cap SASS (16 KiB of code, within the first
    # instruction-fetch level: the behaviour suite's icache probes). Shorter regions carried a
    # start cost that put slopes above their pipe's limit (reliability/diag-tp-lengths-*)
    tp_min_length: int = 32
    region_cap: int = 1024
    # the warps x distance grid (studies/grid.py): warps per SM (one block) x independent chains
    # per thread; none unless a plan names them (FULL_PLAN and QUICK_PLAN do)
    grid_warps: tuple[int, ...] = ()
    # a one-warp chain with a global target: timed at so many placements of it (placement.py)
    gmem_placements: int = placement.PLACEMENTS
    grid_distances: tuple[int, ...] = ()
    grid_units: tuple[int, ...] = (64, 128)  # region sizes of the grid's own kernels (compile time)
    grid_launches: int = 1
    # instruction configurations (studies/configurations.py: guarded, read-read, write-write and
    # their controls): region sizes of one warp's slope, and the warp counts their rates are
    # compared at
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


@dataclass
class Family:
    measure: str  # latency | issue_interval | throughput | distance | a study's measure
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
    # per-operand latency (studies/operand_latency.py): the operand the chain runs through (an
    # OperandSpec), the strategy its kernels were generated with, the SASS slots the data flow
    # showed the chain entering by; alias: the measure whose kernels are this family's own (the
    # variant's default chain)
    operand: Any = None
    strategy: str | None = None
    slots: dict[str, list[int]] | None = None
    alias: str | None = None
    info: dict = field(default_factory=dict)  # what a configuration's SASS check showed (studies/)
    study: VariantStudy | None = None  # the study whose family this is (None: the core's)


@dataclass
class ChainTiming:
    """What a one-warp chain family's timing gave (:func:`chain`): the lengths, the fit of the
    median cycles against them, the slope of each repeat, the result's params, samples and
    flags so far (the cited kernel's, the fit's and the noise's)."""

    xs: list[int]
    fit: Fit
    per_repeat: list[float]
    params: dict
    samples: dict
    flags: list[str]


@dataclass(frozen=True)
class VariantStudy(Study):
    """A study of the instruction suite (``studies/``): work on a variant beside the core's
    families. The core asks its studies, in the suite's order, through these hooks (by default
    a study has nothing to say); a family a study makes carries it (``Family.study``: built,
    checked and timed, it asks its study)."""

    many_warps: ClassVar[bool] = False  # its families run many warps (checked, and timed, apart
    # from the one-warp chains: :func:`many_warps`)

    # --- planning and preparing ---------------------------------------------------------

    def variants(self, selected: list[str], arch: str) -> list[str]:
        """The variants a run of only the ``selected`` ones times too, for this study's sake."""
        return []

    def families(self, v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
        """Its timing families of the verified variant number ``idx`` of a run."""
        return []

    def check(self, v: Variant, rec: MapRecord, f: Family, strat: Strategy, bs: list[Built],
              paired: Any = None) -> CheckResult:
        """The SASS check of its built family ``f`` (in a worker process; what the check shows it
        keeps in ``f``): by default the check of every timing kernel (verify.check_built)."""
        return check_built(v, strat, bs, paired=paired)

    def own_kernels(self, f: Family) -> bool:
        """Whether the kernels of its family ``f`` are not the variant's verified chain (another
        operand's chain, no chain): its results cite its own SASS, glue and companion."""
        return False

    def built(self, works: list[VariantWork], target: Target, plan: Plan, jobs: int) -> None:
        """After every family of ``works`` was built and checked: its own built again where
        needed (another strategy)."""
        return None

    def prepare(self, works: list[VariantWork], target: Target, plan: Plan, jobs: int) -> Any:
        """Kernels of its own beside the families, built and checked: what
        :meth:`measure_variant` is given."""
        return None

    # --- measuring ------------------------------------------------------------------------

    def chain_result(self, w: VariantWork, f: Family, t: ChainTiming, cite: dict) -> Result:
        """The result of its one-warp chain family ``f`` from its timing ``t``."""
        raise NotImplementedError(f"{self.name}: no chain families")

    def after_chains(self, dev: Device, w: VariantWork, todo: list[int], plan: Plan, target: Target,
                     failed: Exception | None) -> Exception | None:
        """Its work on ``w``'s chain results once they are timed (``todo``: the families timed
        this time); the failure that ends the variant's measurement (``failed``, or a new one)."""
        return failed

    def measure_families(self, dev: Device, w: VariantWork, idx: list[int], plan: Plan, target: Target,
                         texts: dict, failed: Exception | None) -> None:
        """Time its families ``idx`` of many warps (after the throughput sweep) into ``w.results``."""
        return None

    def alias_result(self, v: Variant, f: Family, results: list[Result]) -> Result:
        """The result of its family ``f`` whose kernels are those of measure ``f.alias``."""
        raise NotImplementedError(f"{self.name}: no families of shared kernels")

    def with_companion(self, r: Result, companion: bool) -> bool:
        """Whether ``r``, a result of its families, is of a chain with a companion (stored as a
        pair); ``companion``: the variant's verified chain has one."""
        return companion

    def measure_variant(self, dev: Device, w: VariantWork, state: Any, plan: Plan,
                        previous: list[Result] | None) -> tuple[list[Result], dict]:
        """Its own measurement of ``w`` after the core's (``state``: what :meth:`prepare` gave):
        results and kernel texts. ``previous``: the item's earlier results, when it is measured
        again."""
        return [], {}

    # --- deriving and summarising ---------------------------------------------------------

    def companion_removed(self, v: Variant, pair: dict, lat: dict[str, dict]) -> Result | None:
        """The own number of a stored pair of its measures (a chain with a companion), from
        ``lat`` (variant -> stored latency row of the run); None: it derives none."""
        return None

    def conclusions(self, records: list[dict]) -> list[str]:
        """Its stated conclusions from a run's records."""
        return []

    def tables(self, records: list[dict]) -> dict:
        """The tables behind its conclusions (keys of the suite's summary)."""
        return {}


@dataclass
class VariantWork:
    variant: Variant
    record: MapRecord
    families: list[Family] = field(default_factory=list)
    results: list[list[Result]] = field(default_factory=list)  # per family, its latest measurement
    index: int = 0  # its number in the run (kernel names; the same whichever batch prepared it)


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


def lengths_for(units: tuple[int, ...], chains: int, sass_per_instance: float, plan: Plan,
                per_chain: int | None = None) -> tuple[int, ...]:
    """Chain lengths for region sizes ``units`` (instances per thread) of ``chains`` chains,
    scaled down for instructions of many SASS (at most ``plan.sass_budget`` SASS per region).
    ``per_chain``: the shortest length a rate's region may have (below it the start of the
    region is a visible part of the slope); the lengths are raised to it, in proportion, as far
    as the longest region stays within ``plan.region_cap`` SASS."""
    spi = max(sass_per_instance, 1.0)
    scale = min(1.0, plan.sass_budget / (max(units) * spi))
    out = sorted({max(plan.min_length, int(u * scale) // chains) for u in units})
    if len(out) < 2:
        out = [out[0], 2 * out[0]]
    if per_chain and out[0] < per_chain:
        up = [-(-n * per_chain // out[0]) for n in out]
        if up[-1] * chains * spi <= plan.region_cap:
            out = up
    return tuple(out)


def sass_per_instance(rec: MapRecord) -> float:
    return sum(float(Fraction(c)) for c in rec.sass_counts.values()) or 1.0


def many_warps(f: Family) -> bool:
    """Whether ``f`` runs many warps: a throughput family, or a study's of many warps (the grid's).
    Its SASS is checked as throughput kernels are (two instances may share the lanes of one
    SASS), its limit is its own region's, and it is timed apart from the one-warp chains."""
    return f.measure == "throughput" or (f.study is not None and f.study.many_warps)


def timing_families(v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int,
                    studies: tuple[VariantStudy, ...]) -> list[Family]:
    """The timing kernels of variant number ``idx`` of a run: latency (or issue interval),
    throughput per chain count, dependence distance per distance; then each study's."""
    strat = get_strategy(rec.strategy or "reg")
    spi = sass_per_instance(rec)
    fams = []

    def fam(measure: str, chains: int, units: tuple[int, ...]) -> Family:
        per_chain = plan.tp_min_length if measure == "throughput" else None
        ks = [generate(v, strat, target, chains=chains, length=n, reps=plan.reps, measure=measure,
                       name=f"v{idx}_{measure[0]}{chains}_n{n}")
              for n in lengths_for(units, chains, spi, plan, per_chain)]
        return Family(measure, chains, ks)

    fams.append(fam("latency" if v.chain_operand is not None else "issue_interval", 1,
                    plan.latency_units))
    for k in plan.tp_chains:
        fams.append(fam("throughput", k, plan.tp_units))
    if v.chain_operand is not None:
        for d in plan.distances:
            fams.append(fam("distance", d, plan.distance_units))
    for s in studies:
        fams.extend(s.families(v, rec, target, plan, idx))
    return fams


# what a compile worker needs to generate a variant's families itself: the target, the plan and
# the studies (timing_families)
Generation = tuple[Target, Plan, tuple[VariantStudy, ...]]


def _generated(chunk: list[tuple[Variant, MapRecord, list[Family] | None, int]],
               gen: Generation | None) -> tuple[list[tuple[Variant, MapRecord, list[Family]]], dict[int, str]]:
    """The chunk's variants with their families (those given, or generated here from ``gen``),
    and why a variant's could not be generated (by its position in the chunk)."""
    items, failed = [], {}
    for pos, (v, rec, fams, idx) in enumerate(chunk):
        if fams is None:
            assert gen is not None, "families to generate, but no generation given"
            target, plan, studies = gen
            try:
                fams = timing_families(v, rec, target, plan, idx, studies)
            except GenerationError as e:
                failed[pos] = f"timing kernels: {e}"
                fams = []
        items.append((v, rec, fams))
    return items, failed


def _build_chunk(job: tuple[list[tuple[Variant, MapRecord, list[Family] | None, int]], str, Generation | None]
                 ) -> list[list[Family] | str]:
    """Build one chunk's kernels in one module per optimisation level and check each family's
    SASS (runs in a worker process: everything in and out is picklable; a study's family by its
    study). A variant given no families has them generated here first (the generation is
    Python: in the workers it runs beside the measurement, not in its process). What comes
    back per variant: its families, each with its kernels built (without the parsed SASS, which
    only the checks need) or why not, its registers per thread and ptxas's stall model for a
    chain family; or, where its families could not be generated, why."""
    raw, arch, gen = job
    chunk, failed = _generated(raw, gen)
    return [failed[pos] if pos in failed else fams for pos, fams in enumerate(_build_families(chunk, arch))]


def _build_families(chunk: list[tuple[Variant, MapRecord, list[Family]]], arch: str) -> list[list[Family]]:
    """:func:`_build_chunk` of variants with their families."""
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
                    _build_families([item], arch)
                continue
            for f in items[0][2]:
                f.error = "ptxas failed on the timing kernels"
            continue
        for v, rec, fams in items:
            for f in fams:
                if f.alias or f.error:
                    continue
                strat = get_strategy(f.strategy or rec.strategy)
                bs = [built[k.name] for k in f.kernels]
                bad = next((b for b in bs if isinstance(b, Exception)), None)
                if bad is not None:
                    f.error = str(bad)
                    continue
                many = many_warps(f)
                try:
                    paired = pairs.search if pairs and many else None
                    res = (f.study.check(v, rec, f, strat, bs, paired) if f.study is not None  # type: ignore[arg-type]
                           else check_built(v, strat, bs, paired=paired))  # type: ignore[arg-type]
                    f.regs = max(b.regs for b in bs)  # type: ignore[union-attr]
                    if not many:
                        f.stall = ptxas_stall(bs[-1], rec)  # type: ignore[arg-type]
                except Exception as e:  # noqa: BLE001 - this family fails, not the whole build
                    f.error = f"checking the built kernels: {type(e).__name__}: {e}"
                    continue
                if not res.ok:
                    f.error = res.reason
                elif many:
                    f.sass, f.paired = res.sass, res.paired  # its own mix (IADD3.X / IMAD.X vary)
                    f.region_sass = {b.kernel.name: region_mix(b.region, b.kernel.units)  # type: ignore[union-attr]
                                     for b in bs}
                elif f.study is not None and f.study.own_kernels(f):
                    f.sass = res.sass  # its own chain's SASS (the glue, if any, moved)
                f.built = [b.light() for b in bs]  # type: ignore[union-attr]
    return [fams for _, _, fams in chunk]


def compile_work(works: list[VariantWork], target: Target, jobs: int, per_module: int = 4,
                 generate: tuple[Plan, tuple[VariantStudy, ...]] | None = None) -> None:
    """Build every family's kernels in batched modules, in parallel processes; verify each
    family's SASS. ``generate`` (plan, studies): the works' families are generated in the
    workers first (a variant whose kernels cannot be generated is marked unverified, with
    why)."""
    gen = (target, *generate) if generate is not None else None
    chunks = [works[i : i + per_module] for i in range(0, len(works), per_module)]
    jobs_in = [([(w.variant, w.record, None if gen else w.families, w.index) for w in c], target.arch, gen)
               for c in chunks]
    for c, fams_back in zip(chunks, pmap(_build_chunk, jobs_in, jobs), strict=True):
        for w, fams in zip(c, fams_back, strict=True):
            if isinstance(fams, str):
                w.record.verified = False
                w.record.status = "unverified"
                w.record.reason = fams
                w.families = []
            else:
                w.families = fams


def prepare_works(variants: list[Variant], records: list[MapRecord], target: Target, plan: Plan,
                  jobs: int, studies: tuple[VariantStudy, ...], numbers: list[int] | None = None) -> list[VariantWork]:
    """Phase 2: the timing kernels of every verified variant (the core's and the studies'),
    compiled and checked; ``numbers``: each variant's number in the run (a batch of a run's
    variants; by default 0, 1, ...)."""
    numbers = numbers if numbers is not None else list(range(len(variants)))
    works = [VariantWork(v, rec, index=n) for v, rec, n in zip(variants, records, numbers, strict=True)]
    with span("prepare", "generate and compile"):
        compile_work([w for w in works if w.record.verified], target, jobs, generate=(plan, studies))
    for s in studies:
        with span("prepare", f"study {s.name} built"):
            s.built([w for w in works if w.record.verified], target, plan, jobs)
    return works


def base_flags(w: VariantWork) -> list[str]:
    """The flags of every result of the variant's verified chain: its glue, its companion, a
    data-dependent path in its SASS."""
    flags = []
    if w.record.glue:
        flags.append(f"glue: {w.record.glue}")
    if w.record.companion:
        flags.append(f"companion: {w.record.companion}")
    if any(op.split(".")[0] in BRANCHES for op, _ in parse_sass(w.record.sass)):
        flags.append("branch: data-dependent path or call in the instruction's SASS (no limit from "
                     "its static count)")
    return flags


def matters(r: Result, results: list[Result]) -> bool:
    """``r`` carries a retry flag and could change a reported number."""
    if not any(fl.startswith(RETRY) for fl in r.flags):
        return False
    if r.measure.removesuffix(PAIR) != "throughput":
        return True
    best = max((x.value for x in results if x.measure == r.measure and x.value
                and not any(f.startswith(BAD) for f in x.flags)), default=0.0)
    return (r.value or 0.0) >= (1 - PEAK_TOL) * best


def _error_result(w: VariantWork, f: Family, flag: str) -> Result:
    return Result(w.variant.name, f.measure, None, "cycles", "none", params={"chains": f.chains},
                  flags=[flag], sass=w.record.sass, cls=w.variant.cls, strategy=w.record.strategy)


def measure_work(dev: Device, w: VariantWork, plan: Plan, target: Target,
                 only: set[int] | None = None) -> Outcome:
    """Run one variant's families (``only``: those of these indices; the others keep their
    latest measurement) on the device and analyse them: the chain families one by one, the
    studies' work on their results, then the throughput sweep over all chain counts at once,
    then the studies' families of many warps. A worker failure (fault, hang) flags the family
    and skips the variant's remaining kernels (they would fail alike)."""
    fams = w.families
    if len(w.results) != len(fams):
        w.results = [[] for _ in fams]
    texts: dict[str, tuple[str, str]] = {}
    failed: Exception | None = None
    todo = [i for i in range(len(fams)) if (only is None or i in only) and not fams[i].alias]
    for i in [i for i in todo if not many_warps(fams[i])]:
        if failed is not None:
            w.results[i] = [skipped(w, fams[i], failed)]
            continue
        try:
            with span("measure", _label(fams[i])):
                w.results[i] = _measure_family(dev, w, fams[i], plan, texts)
        except Exception as e:  # a launch that fails (resources, fault) flags this family only
            w.results[i] = [_error_result(w, fams[i], f"error: {type(e).__name__}: {e}")]
            if type(e).__name__ == WORKER_FAILED:
                failed = e
    studies = list(dict.fromkeys(f.study for f in fams if f.study is not None))
    for s in studies:  # on the chain results (a configuration against its control)
        with span("measure", s.name):
            failed = s.after_chains(dev, w, todo, plan, target, failed)
    tp = [i for i in todo if fams[i].measure == "throughput"]
    if tp:
        swept: dict[int, list[Result]] = {i: [] for i in tp}
        if failed is None:
            try:
                with span("measure", "throughput"):
                    _sweep(dev, w, tp, plan, target, texts, swept)
            except Exception as e:  # the worker failed: this configuration and the rest
                failed = e
        for i in tp:
            w.results[i] = swept[i] or ([skipped(w, fams[i], failed)] if failed else [])
    for s in studies:  # a study's families of many warps (the grid), after the sweep
        many = [i for i in todo if fams[i].study == s and many_warps(fams[i])]
        if many:
            with span("measure", s.name):
                s.measure_families(dev, w, many, plan, target, texts, failed)
    for i, f in enumerate(fams):
        if f.alias and f.study is not None:
            w.results[i] = [f.study.alias_result(w.variant, f, [r for rs in w.results for r in rs])]
    measured = [r for rs in w.results for r in rs]
    peaks = peak_results(w.variant, measured, target)
    # the pair's numbers (the derive phase derives the own ones, companion.py): the core's where
    # the variant's chain has a companion; a study's as it says (a per-operand chain may have a
    # companion of its own, a configuration of no chain has none)
    companion = bool(w.record.companion)
    for f, rs in zip(fams, w.results, strict=True):
        for r in rs:
            if f.study.with_companion(r, companion) if f.study is not None else companion:
                _as_pair(r)
    if companion:
        for r in peaks:
            _as_pair(r)
    return Outcome(measured + peaks, texts)


def _label(f: Family) -> str:
    """A family's label in the run's profile: its study's name, else its measure."""
    return f.study.name if f.study is not None else f.measure


def skipped(w: VariantWork, f: Family, failed: Exception | None) -> Result:
    return _error_result(w, f, f"error: skipped: a kernel of this variant failed "
                               f"({type(failed).__name__}: {failed})")


def citation(w: VariantWork, f: Family) -> tuple[list[str], dict] | Result:
    """The flags every result of family ``f`` carries and the kernel it cites (its texts go into
    the store once a result of it is measured), or the result that says why the family is not
    timed."""
    v = w.variant
    if f.error:  # not built, or its SASS is not the instruction's: no number could be used
        return Result(v.name, f.measure, None, "cycles", "none", params={"chains": f.chains},
                      flags=[f"not timed: {f.error}"], sass=w.record.sass, cls=v.cls,
                      strategy=w.record.strategy)
    own = f.study is not None and f.study.own_kernels(f)
    flags = _own_flags(w, f) if own else base_flags(w)
    if f.paired:
        flags.append(f"paired: ptxas put two independent instances into the two lanes of each "
                     f"{' '.join(op.split('*')[-1] for op in f.sass)} (rate per PTX instance)")
    cited = f.built[-1]
    return flags, dict(sass=f.sass if f.paired or own else w.record.sass, strategy=f.strategy or w.record.strategy,
                       cls=v.cls, ptx_hash=cited.ptx_hash, sass_hash=cited.sass_hash)


def _own_flags(w: VariantWork, f: Family) -> list[str]:
    """The flags of a family of kernels of its own (a study's: another operand's chain, no
    chain): its own glue and companion, and the variant's data-dependent path, if any."""
    meta = f.kernels[0].meta if f.kernels else {}
    own = [f"{k}: {meta[k]}" for k in ("glue", "companion") if meta.get(k)]
    return own + [x for x in base_flags(w) if x.startswith("branch:")]


def _as_pair(r: Result) -> Result:
    if not r.measure.endswith(PAIR):
        r.measure += PAIR
    return r


def _measure_family(dev: Device, w: VariantWork, f: Family, plan: Plan, texts: dict) -> list[Result]:
    """A chain family: latency, issue interval or dependence distance, or a study's of one warp."""
    c = citation(w, f)
    if isinstance(c, Result):
        return [c]
    flags, cite = c
    texts.update(f.built[-1].texts())  # the kernel the result cites
    return [chain(dev, w, f, plan, flags, cite)]


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
        c = citation(w, fams[i])
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


def run_spec(b: Built, reps: int, grid: int, block: int, launches: int, gmem: int | None = None) -> RunSpec:
    """One ``Device.run_many`` entry: ``launches`` launches of ``b``'s kernel; ``gmem``: its
    global target that many bytes past each thread's output slot (None: as generated)."""
    if gmem is None:
        return RunSpec(b.kernel.name, tuple(b.kernel.inputs), b.kernel.n_sink, reps, grid, block, launches)
    inputs = list(b.kernel.inputs)
    inputs[GMEM_SLOT] = gmem
    return RunSpec(b.kernel.name, tuple(inputs), b.kernel.n_sink, reps, grid, block, launches,
                   out_bytes=placement.out_bytes(gmem, b.kernel.n_sink, grid * block))


def _launch_lengths(dev: Device, built: list[Built], plan: Plan, grid: int, block: int,
                    gmem: tuple[int | None, ...] = (None,)) -> list[list[list]]:
    """Each kernel's ``plan.launches`` launches (a family's lengths) at each placement of its
    global target (``gmem``: see :func:`run_spec`), those of one module in one batch
    (``Device.run_many``: one synchronisation and one copy for all of them, as the grid's
    columns); per placement, per kernel, its launches' results."""
    groups: dict[int, list[int]] = {}
    for i, b in enumerate(built):
        groups.setdefault(id(b.cubin), []).append(i)
    out: dict[tuple[int, int], list] = {}
    for idx in groups.values():
        keys = [(p, i) for p in range(len(gmem)) for i in idx]
        specs = [run_spec(built[i], plan.reps, grid, block, plan.launches, gmem[p]) for p, i in keys]
        out.update(zip(keys, dev.run_many(built[idx[0]].cubin, specs), strict=True))
    return [[out[(p, i)] for i in range(len(built))] for p in range(len(gmem))]


def _flags_of(fit: Fit, per_repeat: list[float]) -> list[str]:
    return [f for f in (fit_flag(fit), noise_flag(per_repeat)) if f]


def _chain_series(built: list[Built], res: list[list], plan: Plan) -> tuple[list[int], dict, list[float], Fit]:
    """One placement's timing of a chain family: the lengths, the cycles of each repeat per
    length, the slope of each repeat, the fit of the median cycles against the lengths."""
    xs, ys, raw = [], [], {}
    series: list[list[float]] = []
    for b, runs in zip(built, res, strict=True):
        cyc = [float(rep_cycles(r.times, rep)[0]) for r in runs for rep in range(1, plan.reps)]
        xs.append(b.kernel.length)
        ys.append(median(cyc))
        raw[str(b.kernel.length)] = cyc
        series.append(cyc)
    per_repeat = slopes_per_repeat(xs, [list(col) for col in zip(*series, strict=True)])
    return xs, raw, per_repeat, fit_line(xs, ys)


def chain(dev: Device, w: VariantWork, f: Family, plan: Plan, flags: list[str], cite: dict) -> Result:
    """Latency (one chain), issue interval (no chain: independent instances) or dependence
    distance (d interleaved chains), one warp; a study's family of one warp, its study's result
    (:meth:`VariantStudy.chain_result`). Value: slope of the median cycles against the length;
    noise: the slope of each (launch, repetition) repeat."""
    v = w.variant
    gmem: tuple[int | None, ...] = (None,)
    if f.built[0].kernel.meta.get("uses_gmem") and plan.gmem_placements > 1:
        gmem = tuple(placement.offsets(f.built[0].kernel.n_sink, 32, plan.gmem_placements))
    timed = [_chain_series(f.built, res, plan) for res in _launch_lengths(dev, f.built, plan, 1, 32, gmem)]
    lv = placement.levels([t[3].slope for t in timed]) if len(timed) > 1 else None
    xs, raw, per_repeat, fit = timed[lv.near if lv else 0]
    flags = flags + _flags_of(fit, per_repeat)
    params = {"chains": f.chains, "lengths": xs, "launches": plan.launches,
              "repeats_per_launch": plan.reps - 1}
    if f.stall is not None:
        params["ptxas_stall_cycles"] = f.stall
    samples = {"cycles_per_repeat": raw, "slope_per_repeat": per_repeat}
    if lv is not None:
        params.update(lv.params(1.0 / f.chains if f.measure == "distance" else 1.0))
        samples["slope_per_placement"] = lv.slopes
    if f.study is not None:
        return f.study.chain_result(w, f, ChainTiming(xs, fit, per_repeat, params, samples, flags), cite)
    if f.measure == "distance":
        return Result(v.name, "distance", fit.slope / f.chains, "cycles/instr",
                      "slope of median cycles vs length / interleaved chains",
                      params={**params, "distance": f.chains}, fit=fit.to_json(), samples=samples,
                      flags=flags, **cite)
    if f.measure == "issue_interval":
        flags += below_issue(fit.slope, f.sass or cite.get("sass") or [], xs, per_repeat)
        return Result(v.name, "issue_interval", fit.slope, "cycles",
                      "slope of median cycles vs instances, no dependence between instances "
                      "(an issue interval of one warp, not a latency)",
                      params=params, fit=fit.to_json(), samples=samples, flags=flags, **cite)
    return Result(v.name, "latency", fit.slope, "cycles", "slope of median cycles vs chain length",
                  params=params, fit=fit.to_json(), samples=samples, flags=flags, **cite)


def below_issue(slope: float, sass: list[str], xs: list[int], per_repeat: list[float]) -> list[str]:
    """A one-warp slope over independent instances below the issue limit of one warp (one SASS
    instruction per cycle: at least the SASS per instance cycles per instance) by more than its
    95% interval and the clock's resolution over the lengths: no hardware runs so; the kernels
    of the lengths differ in more than their instances (flagged, not used)."""
    ops = parse_sass(sass)
    if any(op.split(".")[0] in BRANCHES for op, _ in ops):
        return []  # a data-dependent path: the static count is not what issues
    spi = sum(c for _, c in ops)
    unc = uncertainty({"value": slope, "fit": {"xs": xs, "slope": slope},
                       "samples": {"slope_per_repeat": per_repeat}}) or 0.0
    if spi > 0 and slope < spi - unc:
        return [f"below-issue-limit: {slope:.4g} cycles per instance, one warp issues {spi:g} SASS per "
                f"instance at one per cycle at most"]
    return []


def ptxas_stall(b: Built, rec: MapRecord) -> float | None:
    """ptxas's own latency model for a single-SASS instruction: the stall cycles it makes the
    next instance of the chain wait (kernel/control.py); None for variable-latency SASS."""
    ops = [op for op in rec.sass_counts if rec.sass_counts[op] == "1"]
    if len(rec.sass_counts) != 1 or len(ops) != 1:
        return None
    try:
        pairs = attach(b.region, controls_of(b.cubin, b.kernel.name))
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
    for b, res in zip(f.built, _launch_lengths(dev, f.built, plan, dev.info.sm_count * blocks, block)[0],
                      strict=True):
        spans = []
        for r in res:
            for st in per_sm_reps(r.times, range(1, plan.reps)):
                full = st.warps == W
                if full.any():
                    spans.append(median(st.span[full]))
                    idle.append(median(st.idle[full]))
        if res:  # the evidence kept: the last repetition of the last launch
            windows[str(b.kernel.length)] = sm_windows(res[-1].times, plan.reps - 1)
        if spans:
            xs.append(b.kernel.length)
            ys.append(median(spans))
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
    sm_idle = median(idle) if idle else 0.0
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


def unverified_results(w: VariantWork) -> list[Result]:
    r = w.record
    why = r.reason or r.status
    return [Result(r.variant, m, None, u, "none", flags=[f"{r.status}: {why}"], sass=r.sass, cls=r.cls)
            for m, u in (("latency", "cycles"), ("throughput_peak", "warp_instr/cycle/SM"))]
