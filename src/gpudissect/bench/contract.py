"""The suite contract: what a suite declares, and what the one runner (``bench/runner.py``)
does with it (the shape of nvbench's benchmark = function + axes, and of pytest's hooks).

A suite is a folder ``suites/<name>/`` whose package exposes ``SUITE``, an object with:

* ``name``, ``description``; ``options``: the ``gpudissect run`` options it reads, by name;
* ``validate(patterns, options)``: refuse bad input before any device work (raise
  :class:`SuiteInputError` with one clear line);
* ``plan(ctx, patterns) -> Plan``: its work items (one stored transaction each) and the plan's
  parameters (stored with the run);
* ``prepare(ctx, items)``: generate, compile and check the kernels of the items to run (no GPU);
  with ``prepare_batch`` set, called once per batch of items, beside the measurement of the
  batches before (in a thread of the runner's);
* ``measure(ctx, item, redo) -> Outcome``: run one item on the GPU and analyse it. ``redo``
  (:class:`Redo`) is given when the runner measures the item again: the earlier outcome and
  why (the SM clock moved, or results carry one of the suite's ``retry_flags``: noisy, above
  a physical limit);
  the suite may measure only what needs it and keep the rest;
* ``error_results(item, flag)``: what is stored for an item whose measurement raised;
* ``derive(ctx)``: results computed from the stored ones after the items (no GPU), stored
  before the summary is; by default each of the suite's ``studies`` derives its own;
* ``summarize(ctx) -> dict``: conclusions from the stored results, the derived ones included
  (``{"conclusions": [...]}``); the runner stores it once (where not empty) as ``summary:<run id>``;
* ``finish(ctx) -> list[str]``: optional work after the summary (a self-check), lines to print;
* ``needs``: the features of the architecture every item needs (``data/features.toml``), and
  ``Item.needs`` what one item needs beyond them: the runner plans through :func:`gated`, which
  leaves out what the architecture lacks and records it with the run (``skipped``).

A suite may be a small core plus ``studies``: each a :class:`Study` that declares what it
``needs`` of the core's measures and which measures it ``adds``; the suite asks its studies
for whatever its phases need of them (their kernels, their measurement, their derived results).

:class:`SuiteBase` gives the defaults. Registering a suite is one line in ``suites/__init__.py``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from gpudissect.store.db import Result

if TYPE_CHECKING:
    from gpudissect.arch.target import Target
    from gpudissect.device.device import Device
    from gpudissect.store.db import Store


class SuiteInputError(ValueError):
    """Bad input for a suite (unknown pattern, bad option): one line, before any work."""


T = TypeVar("T")


def select_named(things: list[T], patterns: list[str] | None, name: Callable[[T], str],
                 in_group: Callable[[T, str], bool], nothing: str) -> list[T]:
    """The things (probes, items) a suite's patterns pick, in their order: a pattern picks by
    exact name, by glob over the name, by a name's leading part (``pat:...``) or by a group
    (``in_group``); all of them without patterns. :class:`SuiteInputError` ``nothing`` when no
    pattern picks any."""
    if not patterns:
        return list(things)
    out = [t for t in things if any(name(t) == pat or fnmatch.fnmatchcase(name(t), pat)
                                    or name(t).startswith(pat + ":") or in_group(t, pat) for pat in patterns)]
    if not out:
        raise SuiteInputError(nothing)
    return out


@dataclass
class Item:
    name: str  # unique within the suite; the store's resume key
    data: Any = None  # the suite's own description of the work
    # what the item needs of the architecture: feature names of data/features.toml, or sm_NN
    # (that architecture or a later one); the runner skips it, with the reason, where they lack
    needs: tuple[str, ...] = ()


class Skipped(Exception):
    """A suite (or every item a run asked for) that the architecture cannot run: the one line
    that says why. Not a failure: the run says so and goes on with the other suites."""


@dataclass
class Plan:
    items: list[Item]
    params: dict = field(default_factory=dict)


@dataclass
class Outcome:
    results: list[Result]
    texts: dict[str, tuple[str, str]] = field(default_factory=dict)  # hash -> (kind, PTX/SASS)


@dataclass
class Redo:
    """A second measurement of an item: what the first gave, and why it is measured again."""

    previous: Outcome
    clock_changed: bool  # False: only noisy results are the reason


@dataclass
class Context:
    """What every phase of a suite sees; ``state`` is the suite's own scratch space between its
    phases (compiled kernels, plan objects)."""

    dev: Device
    store: Store | None  # None: measure without storing (``gpudissect time``)
    target: Target
    quick: bool = False
    jobs: int = 1
    options: dict = field(default_factory=dict)
    run_id: int = 0
    state: dict = field(default_factory=dict)

    @property
    def sm_count(self) -> int:
        return self.dev.info.sm_count


@dataclass(frozen=True)
class Study:
    """One study of a suite: work beside the suite's core measurement, with modules of its own.
    ``needs``: the core's measures it reads; ``adds``: the measures it stores (names, or
    ``fnmatch`` patterns for a family of names). A suite's own kind of study adds the hooks that
    suite's phases call (its kernels, its measurement); :meth:`derive` is every study's."""

    name: str
    needs: tuple[str, ...] = ()
    adds: tuple[str, ...] = ()

    def writes(self, measure: str) -> bool:
        """Whether ``measure`` is one this study adds."""
        return any(fnmatch.fnmatchcase(measure, pat) for pat in self.adds)

    def derive(self, ctx: Context) -> None:
        """Store what this study derives from the run's stored results (the suite's derive
        phase; no GPU)."""
        return None


class SuiteBase:
    name = ""
    description = ""
    options: dict[str, str] = {}
    retry_flags: tuple[str, ...] = ()  # result flags the runner measures again (once)
    studies: tuple[Study, ...] = ()  # the studies beside the suite's core, in the order they derive
    needs: tuple[str, ...] = ()  # what every item needs of the architecture (see Item.needs)
    # items prepared per batch, in the background while the GPU measures the batches before
    # (the runner starts with smaller batches, so that the GPU starts early); 0: every item is
    # prepared before the first is measured. A suite that sets it adds to its earlier batches'
    # state on each prepare call, never replaces it
    prepare_batch: int = 0
    # items measured two at a time (bench/runner.py): one item's analysis on the host beside the
    # other's calls into the GPU, which take one lock (never two batches at once on the GPU).
    # Only for items that :meth:`overlaps` says are independent of every other item's outcome
    overlap: bool = False

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        return None

    def wants_retry(self, out: Outcome) -> bool:
        """Whether the runner should measure this outcome's item again (once): by default, when
        a result carries one of ``retry_flags``."""
        return bool(self.retry_flags) and any(
            f.startswith(self.retry_flags) for r in out.results for f in r.flags)

    def plan(self, ctx: Context, patterns: list[str] | None) -> Plan:
        raise NotImplementedError

    def profile_label(self, item: Item) -> str:
        """The label of ``item``'s measurement in the run's profile (``bench/spans.py``): by
        default its name's leading part (``latency/l1`` -> ``latency``)."""
        return re.split(r"[/:.]", item.name, maxsplit=1)[0]

    def overlaps(self, item: Item) -> bool:
        """Whether ``item`` may be measured beside another (``overlap``): its measurement reads
        nothing that another item's writes (no stored result, no state it sets) and calls no
        store. An item that may not waits until every item before it is stored and is measured
        alone, in the run's own thread."""
        return self.overlap

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        return None

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        raise NotImplementedError

    def error_results(self, item: Item, flag: str) -> list[Result]:
        return [Result(item.name, "error", None, "-", "none", flags=[flag[:400]], cls=self.name)]

    def derive(self, ctx: Context) -> None:
        """After the items, before the summary: each study's derived results, in order."""
        for study in self.studies:
            study.derive(ctx)

    def compile_levels(self) -> dict[str, int]:
        """The ptxas optimisation level of each kernel strategy this suite names in its results
        (``Result.strategy``), for the audit's check that nothing was timed below -O3; {} when
        every kernel is compiled at the build path's default."""
        return {}

    def summarize(self, ctx: Context) -> dict:
        return {}

    def finish(self, ctx: Context) -> list[str]:
        return []


def gated(suite: SuiteBase, ctx: Context, patterns: list[str] | None) -> Plan:
    """``suite``'s plan on ``ctx.target`` without the items that need what the architecture
    lacks; they are recorded in the plan's parameters (``skipped``: item -> what it lacks), which
    the run stores. :class:`Skipped` when the suite needs what the architecture lacks, or when
    nothing it was asked for is left (one line each)."""
    arch = ctx.target.arch
    lacking = ctx.target.lacks(suite.needs)
    if lacking:
        raise Skipped(f"{suite.name}: not run on {arch}, which lacks {', '.join(lacking)}")
    plan = suite.plan(ctx, patterns)
    keep, skipped = [], {}
    for item in plan.items:
        missing = ctx.target.lacks(item.needs)
        if missing:
            skipped[item.name] = missing
        else:
            keep.append(item)
    if skipped:
        plan = Plan(keep, {**plan.params, "skipped": skipped})
        if not keep:
            raise Skipped(f"{suite.name}: none of its {len(skipped)} items runs on {arch} "
                          f"({skipped_reasons(skipped)})")
    return plan


def skipped_reasons(skipped: dict[str, list[str]]) -> str:
    """What a plan's skipped items lack, counted: ``needs tma: 30, wgmma: 12``."""
    counts: dict[str, int] = {}
    for missing in skipped.values():
        for need in missing:
            counts[need] = counts.get(need, 0) + 1
    return "needs " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
