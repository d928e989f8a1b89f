"""The one run loop of every suite: resume, progress, per-item isolation and error records,
the clock and noise guard, saving (one transaction per item), the derived results, the summary
and the timing split. Suites declare their work through the contract in ``bench/contract.py``."""

from __future__ import annotations

import contextvars
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from gpudissect import __version__
from gpudissect.bench.clock import measure_sm_clock
from gpudissect.bench.contract import (
    Context,
    Item,
    Outcome,
    Plan,
    Redo,
    SuiteBase,
    gated,
    skipped_reasons,
)
from gpudissect.bench.spans import Profile, TimedDevice, activated, span
from gpudissect.device.device import SerialDevice
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
AHEAD_PROFILE = "prepared_ahead_profile"  # ctx.state: the profile of prepare_ahead()
PREPARED = "prepared_event"  # ctx.state: an Event the run sets once all its items are prepared


def _prepared(ctx: Context) -> None:
    ev = ctx.state.get(PREPARED)
    if ev is not None:
        ev.set()


def prepare_ahead(suite: SuiteBase, ctx: Context, patterns: list[str] | None) -> None:
    """Plan and prepare (generate, compile, check) every item of ``suite`` before its run: in a
    background thread while another suite holds the GPU, so that the compile of one suite
    overlaps the measurements of another (neither touches the other's context; a prepare
    uses no GPU). :func:`run` given the future of this call waits for it and only measures."""
    suite.validate(patterns, ctx.options)
    plan = gated(suite, ctx, patterns)
    prof = ctx.state[AHEAD_PROFILE] = Profile()
    if plan.items:
        with activated(prof), span("prepare", "all"):
            suite.prepare(ctx, plan.items)
    ctx.state[AHEAD] = plan


def prepare_in_background(work: list[tuple[SuiteBase, Context, list[str] | None]],
                          after: threading.Event | None = None) -> list[Future]:
    """:func:`prepare_ahead` of each (suite, context, patterns), one after another in a daemon
    thread (an interrupted run does not wait for it; its compile processes die with this one);
    one future each, in order. ``after``: the thread starts once it is set (the run before has
    prepared its own items: its batches, which the GPU waits for, go first to the workers)."""
    futs: list[Future] = [Future() for _ in work]

    def go() -> None:
        if after is not None:
            after.wait()
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


def batches(items: list[Item], size: int) -> list[list[Item]]:
    """``items`` in batches of at most ``size``, the first ones smaller (a quarter, then half of
    it: the GPU starts after a short compile, while the later batches fill every core)."""
    out: list[list[Item]] = []
    k, n = 0, max(1, size // 4)
    while k < len(items):
        out.append(items[k:k + n])
        k += n
        n = min(size, 2 * n)
    return out


BATCHES_AT_ONCE = 2  # batches prepared beside each other: one's serial steps, the other's compile


@dataclass
class Prepared:
    """The batches being prepared (:func:`prepare_batches`): whether an item's is done, and the
    wait for it, which raises what that batch's prepare raised (the run fails there, with what
    was measured before it stored)."""

    futs: list[Future]
    where: dict[str, int]  # item -> its batch

    def done(self, item: Item) -> bool:
        return self.futs[self.where[item.name]].done()

    def failed(self, item: Item) -> bool:
        f = self.futs[self.where[item.name]]
        return f.done() and f.exception() is not None

    def wait(self, item: Item) -> None:
        self.futs[self.where[item.name]].result()


def prepare_batches(suite: SuiteBase, ctx: Context, items: list[Item], prof: Profile) -> Prepared:
    """Prepare ``items`` batch by batch (:func:`batches` of ``suite.prepare_batch``; two at a
    time, in order, so that the compile workers always have work) in threads of their own,
    recording into ``prof``."""
    parts = batches(items, suite.prepare_batch)
    where = {it.name: k for k, part in enumerate(parts) for it in part}

    def one(part: list[Item]) -> None:
        with activated(prof), span("prepare", "all"):
            suite.prepare(ctx, part)

    futs: list[Future] = [Future() for _ in parts]
    queue = list(range(len(parts)))
    lock = threading.Lock()
    left = [len(parts)]

    def worker() -> None:  # daemon threads: an interrupted run does not wait for its compile
        while True:
            with lock:
                if not queue:
                    return
                k = queue.pop(0)
            try:
                one(parts[k])
                futs[k].set_result(None)
            except BaseException as e:  # noqa: BLE001 - raised where the item is waited for
                futs[k].set_exception(e)
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    _prepared(ctx)

    for n in range(min(BATCHES_AT_ONCE, len(parts))):
        threading.Thread(target=worker, name=f"gpudissect-prepare-{suite.name}-{n}", daemon=True).start()

    return Prepared(futs, where)


DEPTH = 2  # items in flight at once where the suite overlaps them


def _ended_well(fut: Future) -> bool:
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _measure_items(suite: SuiteBase, ctx: Context, todo: list[Item], ready: Prepared | None,
                   progress: Callable[[str, int, int], None] | None, run_id: int, timing: dict) -> None:
    """Measure ``todo`` and store each item's outcome, in order (one transaction per item: an
    interrupted run keeps every item stored before it). Where the suite overlaps its items
    (``SuiteBase.overlap``), up to DEPTH are measured at once in threads of their own: one's
    analysis on the host beside the other's calls into the GPU, which the device's lock
    (``SerialDevice``) keeps one at a time; an item that does not overlap waits for every item
    before it and is measured alone in this thread. An item whose batch is still being prepared
    waits with nothing in flight. Adds to ``timing``: ``compile_s``, those waits (compile time
    the GPU did not hide); ``store_s``; ``gpu_s``, the rest of the loop's wall time (the items'
    spans overlap: their sum is more)."""
    store = ctx.store
    pool = ThreadPoolExecutor(DEPTH, thread_name_prefix=f"gpudissect-measure-{suite.name}") if suite.overlap else None
    inflight: deque[tuple[Item, Future]] = deque()
    waited = stored = 0.0
    t0 = time.perf_counter()

    def measure(item: Item) -> Outcome:
        with span("measure", suite.profile_label(item)):
            return measure_guarded(suite, ctx, item)

    def save_oldest() -> None:
        nonlocal stored
        item, fut = inflight[0]  # left in flight until it is stored (an interrupt in the wait keeps it)
        out = fut.result()
        t = time.perf_counter()
        store.save(run_id, item.name, out.results, out.texts)
        stored += time.perf_counter() - t
        inflight.popleft()

    try:
        for n, item in enumerate(todo):
            if progress:
                progress(item.name, n, len(todo))
            if ready is not None:
                if not ready.done(item) or ready.failed(item):
                    # its batch still compiling (or failed): what is in flight is finished and
                    # stored first, so that the wait is what the GPU spent idle for the compile
                    while inflight:
                        save_oldest()
                t = time.perf_counter()
                try:
                    ready.wait(item)  # raises what its batch's prepare raised
                finally:
                    waited += time.perf_counter() - t
            fut: Future = Future()
            if pool is not None and suite.overlaps(item):
                fut = pool.submit(contextvars.copy_context().run, measure, item)
            else:
                while inflight:
                    save_oldest()
                fut.set_result(measure(item))
            inflight.append((item, fut))
            while len(inflight) >= (DEPTH if pool is not None else 1):
                save_oldest()
        while inflight:
            save_oldest()
    except BaseException:
        # an interrupted run: the items in flight end before the device closes, and those that
        # ended well are stored (they are whole), the first one that failed and all after it not
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        try:
            while inflight and _ended_well(inflight[0][1]):
                save_oldest()
        except Exception:  # the store itself failed: what was raised first is what the caller sees
            pass
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    if ready is not None:
        timing["compile_s"] += waited
    timing["store_s"] += stored
    timing["gpu_s"] += time.perf_counter() - t0 - waited - stored


def run(suite: SuiteBase, ctx: Context, patterns: list[str] | None, *, resume: bool = True,
        progress: Callable[[str, int, int], None] | None = None, ahead: Future | None = None) -> RunOutcome:
    """Run ``suite`` on ``ctx.dev`` into ``ctx.store``; an unfinished run of the same suite and
    GPU is resumed (``resume``), its stored items skipped. ``ahead``: the future of
    :func:`prepare_ahead` on this context (its time still to wait is the run's compile time)."""
    prof = Profile()
    dev = ctx.dev
    ctx.dev = SerialDevice(TimedDevice(dev))  # timed inside the lock: a wait for it is no device time
    try:
        with activated(prof):
            run_id, timing, lines, plan = _run(suite, ctx, patterns, resume, progress, ahead, prof)
    finally:
        ctx.dev = dev
        _prepared(ctx)  # also when the run failed before its items were prepared
    timing["profile"] = prof.to_json()
    ctx.store.finish_run(run_id, clocks(ctx), timing)
    skipped = plan.params.get("skipped")
    if skipped:
        lines = [f"{len(skipped)} of {len(skipped) + len(plan.items)} items not run on {ctx.target.arch} "
                 f"({skipped_reasons(skipped)})", *lines]
    return RunOutcome(run_id, timing, lines, skipped)


def _run(suite: SuiteBase, ctx: Context, patterns: list[str] | None, resume: bool,
         progress: Callable[[str, int, int], None] | None, ahead: Future | None,
         prof: Profile) -> tuple[int, dict, list[str], Plan]:
    """:func:`run`'s phases, recording into the active profile ``prof``."""
    waited = 0.0
    if ahead is not None:
        t = time.perf_counter()
        ahead.result()
        waited = time.perf_counter() - t
        plan = ctx.state.pop(AHEAD)
        for k, (n, sec) in ctx.state.pop(AHEAD_PROFILE).spans.items():
            prof.add(k, sec, int(n))
    else:
        suite.validate(patterns, ctx.options)
        plan = gated(suite, ctx, patterns)
    store, dev = ctx.store, ctx.dev
    run_id = store.unfinished_run(suite.name, dev.info.uuid) if resume else None
    if run_id is None:  # with its plan, whether it is a quick run (every view names one)
        run_id = store.start_run(suite.name, dev.info, f"ptxas {tool_version('ptxas')}",
                                 ctx.target.arch, clocks(ctx), {**plan.params, "quick": ctx.quick}, __version__)
    ctx.run_id = run_id
    done = store.done_items(run_id)
    todo = [i for i in plan.items if i.name not in done]
    # compiled ahead: what was left to wait for is the compile_wait_s, not a compile_s
    timing = {"compile_wait_s" if ahead is not None else "compile_s": 0.0, "gpu_s": 0.0, "store_s": 0.0,
              "analysis_s": 0.0}
    t = time.perf_counter()
    ready = None
    if todo and ahead is None:
        if suite.prepare_batch and len(todo) > suite.prepare_batch:
            ready = prepare_batches(suite, ctx, todo, prof)
        else:
            with span("prepare", "all"):
                suite.prepare(ctx, todo)
    if ready is None:
        _prepared(ctx)
    timing["compile_s" if ahead is None else "compile_wait_s"] = time.perf_counter() - t + waited
    _measure_items(suite, ctx, todo, ready, progress, run_id, timing)
    if progress:
        progress("summary", len(todo), len(todo))
    t = time.perf_counter()
    with span("derive", "all"):
        suite.derive(ctx)  # derived results first: the summary is of them too, and stored once
    with span("summary", "all"):
        summary = suite.summarize(ctx)
    if summary:
        store.set_meta(f"summary:{run_id}", summary)
    with span("finish", "all"):
        lines = suite.finish(ctx)
    timing["analysis_s"] = time.perf_counter() - t
    return run_id, timing, lines, plan

