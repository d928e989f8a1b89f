"""The one run loop of every suite: resume, progress, per-item isolation and error records,
the clock and noise guard, saving (one transaction per item), the derived results, the summary
and the timing split. Suites declare their work through the contract in ``bench/contract.py``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from gpudissect import __version__
from gpudissect.bench.clock import measure_sm_clock
from gpudissect.bench.contract import (
    Context,
    Item,
    Outcome,
    Redo,
    SuiteBase,
    gated,
    skipped_reasons,
)
from gpudissect.kernel.toolchain import tool_version

CLOCK_TOL = 0.02  # relative SM clock change during an item that triggers a re-measurement
RETRIES = 1  # re-measurements of an item whose clock changed or whose repeats disagree
WORKER_FAILED = "WorkerFailed"


@dataclass
class RunOutcome:
    run_id: int
    timing: dict
    lines: list[str]  # what the suite's finish step has to say
    skipped: dict[str, list[str]] | None = None  # item -> what the architecture lacks for it


def sm_mhz(dev) -> float | None:
    """The current SM clock (NVML), or None where it cannot be read."""
    try:
        mhz = dev.clocks().get("sm_mhz")
    except Exception:
        return None
    return float(mhz) if isinstance(mhz, (int, float)) and mhz > 0 else None


def clock_changed(c0: float | None, c1: float | None) -> bool:
    return c0 is not None and c1 is not None and abs(c1 - c0) > CLOCK_TOL * max(c0, c1)


def _worker_failed(o: Outcome) -> bool:
    return any(WORKER_FAILED in f for r in o.results for f in r.flags)


def _measure_once(suite: SuiteBase, ctx: Context, item: Item, redo: Redo | None) -> Outcome:
    try:
        return suite.measure(ctx, item, redo)
    except Exception as e:  # one failing benchmark never takes the sweep down
        return Outcome(suite.error_results(item, f"error: {type(e).__name__}: {e}"))


def measure_guarded(suite: SuiteBase, ctx: Context, item: Item, retries: int = RETRIES) -> Outcome:
    """Measure ``item`` between two SM-clock readings; measure it again (at most ``retries``
    times) when the clock moved by more than CLOCK_TOL or results carry one of the suite's
    ``retry_flags`` (noisy, above a physical limit). Results measured while the clock moved are flagged
    (``clock-changed: a->b MHz``), results of a second measurement ``remeasured: n``; results a
    suite keeps from the earlier measurement (the same objects) keep their own flags."""
    out: Outcome | None = None
    redo: Redo | None = None
    for attempt in range(retries + 1):
        c0 = sm_mhz(ctx.dev)
        out = _measure_once(suite, ctx, item, redo)
        c1 = sm_mhz(ctx.dev)
        kept = {id(r) for r in redo.previous.results} if redo else set()
        for r in out.results:
            if id(r) in kept or (r.value is None and r.fit is None):
                continue
            if clock_changed(c0, c1):
                r.flags.append(f"clock-changed: {c0:.0f}->{c1:.0f} MHz")
            if attempt:
                r.flags.append(f"remeasured: {attempt}")
        if attempt == retries or _worker_failed(out):
            break
        if not (clock_changed(c0, c1) or suite.wants_retry(out)):
            break
        redo = Redo(out, clock_changed(c0, c1))
    assert out is not None
    return out


def clocks(ctx: Context) -> dict:
    """NVML's clocks and the SM clock measured inside a kernel (bench/clock.py), for the run's
    provenance before and after its items."""
    return {**ctx.dev.clocks(), **measure_sm_clock(ctx.dev, ctx.target)}


AHEAD = "prepared_ahead"  # ctx.state: the plan that prepare_ahead() prepared


def prepare_ahead(suite: SuiteBase, ctx: Context, patterns: list[str] | None) -> None:
    """Plan and prepare (generate, compile, check) every item of ``suite`` before its run: in a
    background thread while another suite holds the GPU, so that the compile of one suite
    overlaps the measurements of another (neither touches the other's context; a prepare
    uses no GPU). :func:`run` given the future of this call waits for it and only measures."""
    suite.validate(patterns, ctx.options)
    plan = gated(suite, ctx, patterns)
    if plan.items:
        suite.prepare(ctx, plan.items)
    ctx.state[AHEAD] = plan


def prepare_in_background(work: list[tuple[SuiteBase, Context, list[str] | None]]) -> list[Future]:
    """:func:`prepare_ahead` of each (suite, context, patterns), one after another in a daemon
    thread (an interrupted run does not wait for it; its compile processes die with this one);
    one future each, in order."""
    futs: list[Future] = [Future() for _ in work]

    def go() -> None:
        for f, (suite, ctx, patterns) in zip(futs, work, strict=True):
            if not f.set_running_or_notify_cancel():
                continue
            try:
                prepare_ahead(suite, ctx, patterns)
                f.set_result(None)
            except BaseException as e:  # noqa: BLE001 - the run of that suite raises it
                f.set_exception(e)

    threading.Thread(target=go, name="gpudissect-prepare", daemon=True).start()
    return futs


def run(suite: SuiteBase, ctx: Context, patterns: list[str] | None, *, resume: bool = True,
        progress: Callable[[str, int, int], None] | None = None, ahead: Future | None = None) -> RunOutcome:
    """Run ``suite`` on ``ctx.dev`` into ``ctx.store``; an unfinished run of the same suite and
    GPU is resumed (``resume``), its stored items skipped. ``ahead``: the future of
    :func:`prepare_ahead` on this context (its time still to wait is the run's compile time)."""
    waited = 0.0
    if ahead is not None:
        t = time.perf_counter()
        ahead.result()
        waited = time.perf_counter() - t
        plan = ctx.state.pop(AHEAD)
    else:
        suite.validate(patterns, ctx.options)
        plan = gated(suite, ctx, patterns)
    store, dev = ctx.store, ctx.dev
    run_id = store.unfinished_run(suite.name, dev.info.uuid) if resume else None
    if run_id is None:
        run_id = store.start_run(suite.name, dev.info, f"ptxas {tool_version('ptxas')}",
                                 ctx.target.arch, clocks(ctx), plan.params, __version__)
    ctx.run_id = run_id
    done = store.done_items(run_id)
    todo = [i for i in plan.items if i.name not in done]
    # compiled ahead: what was left to wait for is the compile_wait_s, not a compile_s
    timing = {"compile_wait_s" if ahead is not None else "compile_s": 0.0, "gpu_s": 0.0, "store_s": 0.0,
              "analysis_s": 0.0}
    t = time.perf_counter()
    if todo and ahead is None:
        suite.prepare(ctx, todo)
    timing["compile_s" if ahead is None else "compile_wait_s"] = time.perf_counter() - t + waited
    for n, item in enumerate(todo):
        if progress:
            progress(item.name, n, len(todo))
        t = time.perf_counter()
        out = measure_guarded(suite, ctx, item)
        timing["gpu_s"] += time.perf_counter() - t
        t = time.perf_counter()
        store.save(run_id, item.name, out.results, out.texts)
        timing["store_s"] += time.perf_counter() - t
    if progress:
        progress("summary", len(todo), len(todo))
    t = time.perf_counter()
    suite.derive(ctx)  # derived results first: the summary is of them too, and stored once
    summary = suite.summarize(ctx)
    if summary:
        store.set_meta(f"summary:{run_id}", summary)
    lines = suite.finish(ctx)
    timing["analysis_s"] = time.perf_counter() - t
    store.finish_run(run_id, clocks(ctx), timing)
    skipped = plan.params.get("skipped")
    if skipped:
        lines = [f"{len(skipped)} of {len(skipped) + len(plan.items)} items not run on {ctx.target.arch} "
                 f"({skipped_reasons(skipped)})", *lines]
    return RunOutcome(run_id, timing, lines, skipped)
