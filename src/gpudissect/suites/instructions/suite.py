"""The instruction suite: latency, throughput and dependence distance of every verified variant,
and the studies beside them. The one place where the suite is put together: the core
(``core.py``, the companion removal of ``companion.py``, the conclusions of ``conclusions.py``)
and its studies (``studies/``, :data:`STUDIES`), which the core takes as data.

Phases (the contract of ``bench/contract.py``; the run loop is ``bench/runner.py``):
``prepare`` (1) maps the variants (autonomic verification, batched, no GPU) and (2) generates
and compiles every timing kernel, the core's and the studies', batched into modules in
parallel, and verifies each kernel family's SASS again; ``measure`` (3) launches one variant's
families on the GPU and analyses them (one variant per stored transaction; interrupted sweeps
resume from the store); ``derive`` stores what follows from the stored results (the companion
removed, each study's own); ``finish`` times a few instructions through nvcc as an independent
check.
"""

from __future__ import annotations

import threading

from gpudissect.arch.target import Target
from gpudissect.bench.contract import Context, Item, Outcome, Redo, SuiteBase
from gpudissect.bench.contract import Plan as RunPlan
from gpudissect.bench.spans import span
from gpudissect.catalog.model import Variant
from gpudissect.store.db import Result
from gpudissect.suites.instructions import companion, conclusions
from gpudissect.suites.instructions.core import (
    FULL_PLAN,
    QUICK_PLAN,
    RETRY,
    Family,
    Plan,
    VariantStudy,
    VariantWork,
    matters,
    measure_work,
    select_variants,
    unverified_results,
)
from gpudissect.suites.instructions.core import prepare_works as prepare_core_works
from gpudissect.suites.instructions.core import timing_families as core_timing_families
from gpudissect.suites.instructions.selfcheck import run_selfcheck, selfcheck_lines
from gpudissect.suites.instructions.studies import (
    configurations,
    grid,
    operand_latency,
    sass_steps,
    stall_patch,
    value_classes,
)
from gpudissect.suites.instructions.template import companion_references
from gpudissect.suites.instructions.verify import MapRecord, autoverify_many

# a quick run leaves out the studies that no key quantity or main-table column (latency,
# throughput, issue interval, dependence distances) reads: the stall sweep and the value classes
# (their kernels and launches do not shrink with the quick plan), the per-operand latencies, the
# configurations (guarded, read-read, write-write) and the warps x distance grid
QUICK_SKIPS = ("stall_patch", "value_classes", "operand_latency", "configurations", "grid")
ORDER = "variant_numbers"  # ctx.state: each planned variant's number (its kernels' names)
_MERGE = threading.Lock()  # the batches prepared beside each other add their works one at a time

# the studies, in the order their families follow the core's and their results are derived
STUDIES: tuple[VariantStudy, ...] = (operand_latency.STUDY, configurations.STUDY, grid.STUDY,
                                     sass_steps.STUDY, value_classes.STUDY, stall_patch.STUDY)


def timing_families(v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
    """Every timing family of variant number ``idx`` of a run: the core's, then each study's."""
    return core_timing_families(v, rec, target, plan, idx, STUDIES)


def prepare_works(variants: list[Variant], records: list[MapRecord], target: Target, plan: Plan,
                  jobs: int) -> list[VariantWork]:
    """Every verified variant's timing families (the core's and each study's), compiled and
    checked."""
    return prepare_core_works(variants, records, target, plan, jobs, STUDIES)


class InstructionsSuite(SuiteBase):
    """Every verified catalog variant: latency, throughput and dependence distance, and its
    ``studies`` (by default :data:`STUDIES`).

    The clock and noise guard is the runner's: on a :class:`Redo` for noisy results only the
    families whose repeats disagreed are measured again; after a clock change, all of them."""

    name = "instructions"
    description = "latency, throughput and dependence distance of every verified catalog variant"
    options = {"catalog": "catalog TOML file(s) instead of the built-in one",
               "selfcheck": "time a few instructions through nvcc too"}
    retry_flags = RETRY
    prepare_batch = 64  # 16 compile chunks of 4 variants (core.compile_work): one per core of a 16-core host

    def __init__(self, full: Plan = FULL_PLAN, quick: Plan = QUICK_PLAN,
                 studies: tuple[VariantStudy, ...] = STUDIES, overlap: bool = True):
        self.full, self.quick = full, quick
        self.studies = tuple(studies)
        self.overlap = overlap  # a variant's measurement reads only its own work and the studies' prepared state

    def axes(self, ctx: Context) -> Plan:
        return self.quick if ctx.quick else self.full

    def studies_for(self, ctx: Context) -> tuple[VariantStudy, ...]:
        """The studies a run measures: all of them, but a quick run leaves out those whose cost
        its smaller plan does not shrink (QUICK_SKIPS)."""
        return tuple(s for s in self.studies if not (ctx.quick and s.name in QUICK_SKIPS))

    def compile_levels(self) -> dict[str, int]:
        """Every strategy of strategies.toml with its ptxas -O level."""
        from gpudissect.suites.instructions.strategies import all_strategies

        return {n: s.opt for n, s in all_strategies().items()}

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        select_variants(patterns, options.get("catalog"))

    def plan(self, ctx: Context, patterns: list[str] | None) -> RunPlan:
        vs = select_variants(patterns, ctx.options.get("catalog"))
        if patterns:  # the variants that measure a companion alone, for those that need one
            have = {v.name for v in vs}
            refs = [r for r in companion_references() if r not in have]
            for s in self.studies_for(ctx):  # those a study needs (the per-SASS steps' proxies)
                refs += s.variants([v.name for v in vs], ctx.target.arch)
            vs += [v for v in select_variants(None, ctx.options.get("catalog")) if v.name in refs]
        ctx.state[ORDER] = {v.name: i for i, v in enumerate(vs)}
        # a variant needs the architecture its catalog entry names (min_sm), or a later one
        return RunPlan([Item(v.name, v, (f"sm_{v.min_sm}",)) for v in vs],
                       {**self.axes(ctx).to_json(), "studies": [st.name for st in self.studies_for(ctx)]})

    def profile_label(self, item: Item) -> str:
        return "variant"  # each family and study inside it has a label of its own

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        variants = [i.data for i in items]
        with span("prepare", "map"):
            records = autoverify_many(variants, ctx.target, jobs=ctx.jobs)
        self.prepare_mapped(ctx, variants, records)

    def prepare_mapped(self, ctx: Context, variants: list[Variant], records: list[MapRecord]) -> None:
        """Phase 2 alone, for variants already mapped (``gpudissect time``). Another call (the
        runner's batches, two at a time) adds to what the others prepared; a variant's number
        (its kernels' names) is its place in the run's plan, whichever batch prepares it."""
        order = ctx.state.get(ORDER, {})
        numbers = [order.get(v.name, i) for i, v in enumerate(variants)]
        works = prepare_core_works(variants, records, ctx.target, self.axes(ctx), ctx.jobs, self.studies_for(ctx),
                                   numbers)
        states = {}
        for s in self.studies_for(ctx):
            with span("prepare", f"study {s.name}"):
                states[s.name] = s.prepare(works, ctx.target, self.axes(ctx), ctx.jobs)
        with _MERGE:
            have = ctx.state.setdefault("studies", {})
            for name, new in states.items():
                old = have.get(name)
                have[name] = {**old, **new} if isinstance(old, dict) and isinstance(new, dict) else new
            ctx.state.setdefault("works", {}).update({w.variant.name: w for w in works})

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        w: VariantWork = ctx.state["works"][item.name]
        if not w.record.verified:
            return Outcome(unverified_results(w))
        only = None
        if redo is not None and not redo.clock_changed:
            only = {i for i, rs in enumerate(w.results) if any(matters(r, rs) for r in rs)}
        out = measure_work(ctx.dev, w, self.axes(ctx), ctx.target, only)
        if redo is not None:
            out.texts = {**redo.previous.texts, **out.texts}
        for s in self.studies_for(ctx):  # a study's own measurement of the variant (the value classes)
            with span("measure", s.name):
                res, texts = s.measure_variant(ctx.dev, w, ctx.state.get("studies", {}).get(s.name), self.axes(ctx),
                                               redo.previous.results if redo is not None else None)
            out.results += res
            out.texts = {**out.texts, **texts}
        return out

    def wants_retry(self, out: Outcome) -> bool:
        """Measure again only what could change a reported number: a flagged chain measurement,
        or a flagged throughput configuration at least as fast as the best clean one."""
        return any(matters(r, out.results) for r in out.results)

    def derive(self, ctx: Context) -> None:
        """The variants measured with a companion get their own numbers (the companion's, from
        the same run, removed: item ``derived/<variant>``), a study's chains with a companion of
        their own theirs; then each study derives its own (the per-SASS steps, the value classes'
        ranges)."""
        with span("derive", "companion"):
            companion.derive(ctx, self.studies_for(ctx))
        for study in self.studies_for(ctx):
            with span("derive", study.name):
                study.derive(ctx)

    def error_results(self, item: Item, flag: str) -> list[Result]:
        v: Variant = item.data
        return [Result(v.name, "latency", None, "cycles", "none", flags=[flag], cls=v.cls)]

    def summarize(self, ctx: Context) -> dict:
        """The suite's conclusions (conclusions.py): its studies' (value-dependent latency), signed
        vs unsigned."""
        return conclusions.summarize(list(ctx.store.results(ctx.run_id)), self.studies_for(ctx))  # type: ignore[arg-type]

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
