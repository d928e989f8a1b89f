"""The runs of suites on one GPU for ``gpudissect run``: one suite (``--suite``), or every suite
in turn into one database (one failing never stops the others) with a summary line each; the
progress shown, the results and conclusions printed, the report files written at the end."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.markup import escape
from rich.progress import Progress

from gpudissect.catalog.model import CatalogError
from gpudissect.cli.report_commands import write_reports
from gpudissect.cli.run_options import RunOptions
from gpudissect.kernel import parallel
from gpudissect.terminal import console, err, fail, open_device, open_store, progress, target_of


class _SuiteFailed(Exception):
    """A suite's run that came to no usable result: the one line that says why, and the exit code."""

    def __init__(self, msg: str, code: int = 2):
        super().__init__(msg)
        self.code = code


@dataclass
class _SuiteRun:
    """One suite of the run of every suite, for the summary at the end."""

    suite: str
    items: int
    flagged: int
    wall_s: float
    error: str | None  # None: it succeeded
    skipped: str | None = None  # why the architecture runs none of it


def _open(opts: RunOptions, target):
    """The GPU, the results database and the target of a run; the GPU's line printed."""
    dev = open_device(opts.place.gpu, opts.processes.isolate, opts.processes.timeout)
    store = open_store(opts.place.db, create=True)
    target = target or target_of(opts.place.arch, dev)
    console.print(f"[bold]{dev.info.name}[/] {dev.info.uuid}  {dev.info.sm_count} SMs  driver {dev.info.driver}"
                  f"  clocks {dev.clocks()}")
    return dev, store, target


def _context(opts: RunOptions, dev, store, target):
    from gpudissect.bench.contract import Context

    return Context(dev, store, target, quick=opts.manner.quick, jobs=opts.manner.jobs or (os.cpu_count() or 2),
                   options=opts.manner.suite_options())


def _follow(prog: Progress, task, label: str) -> Callable[[str, int, int], None]:
    """The runner's progress callback, shown on ``task`` as ``label`` and the item under way."""

    def cb(name: str, n: int, total: int) -> None:
        prog.update(task, completed=n, total=total, description=f"{label} {name:<24}")

    return cb


def _suite_run(s, ctx, patterns: list[str] | None, resume: bool, progress, ahead=None):
    """The runner on one suite (``ahead``: its prepare under way in the background); its
    failures as :class:`_SuiteFailed`."""
    from gpudissect.bench.contract import Skipped
    from gpudissect.bench.runner import run

    try:
        return run(s, ctx, patterns, resume=resume, progress=progress, ahead=ahead)
    except Skipped:
        raise
    except (CatalogError, ValueError) as e:  # SuiteInputError included
        raise _SuiteFailed(str(e)) from None
    except RuntimeError as e:  # the device is gone (a worker that cannot restart, ...)
        raise _SuiteFailed(f"{type(e).__name__}: {e} (what is stored is kept: run the same command "
                           "to resume)") from None


def _print_run(store, suite: str, out, t0: float) -> None:
    """A finished run: its total time stored; the suite's lines, conclusions and time split printed."""
    out.timing["total_s"] = time.perf_counter() - t0
    store.set_timing(out.run_id, out.timing)
    for line in out.lines:
        console.print(line, highlight=False, soft_wrap=True)
    for line in store.get_meta(f"summary:{out.run_id}", {}).get("conclusions", []):
        console.print(f"- {line}", highlight=False, soft_wrap=True)
    console.print(f"run {out.run_id} ({suite}): " + ", ".join(f"{k} {v:.1f} s" for k, v in out.timing.items()
                                                              if isinstance(v, (int, float))))


def _came_to_nothing(store, suite: str, out) -> _SuiteFailed | None:
    """Why a finished run failed after all (it measured nothing; its nvcc self-check failed)."""
    if not store.measured(out.run_id):
        return _SuiteFailed(f"run {out.run_id} ({suite}) measured nothing: every item failed or is "
                            f"unsupported (`gpudissect show --db {store.path}` lists them)", code=1)
    bad_check = next((line for line in out.lines if line.startswith("self-check failed")), None)
    if bad_check:  # the results are stored; the second route to them did not work
        return _SuiteFailed(f"{bad_check} (the run's results are stored; --no-selfcheck skips the check)",
                            code=1)
    return None


def _print_worker_failures(dev) -> None:
    failures = getattr(dev, "failures", [])
    if failures:
        console.print(f"{len(failures)} worker failure(s), each recorded on its item: "
                      + "; ".join(f[:120] for f in failures[:3]), highlight=False, soft_wrap=True)


def run_single(s, patterns: list[str] | None, opts: RunOptions, target) -> None:
    """``run --suite``: one suite; the report files only where asked for."""
    from gpudissect.bench.contract import Skipped

    dev, store, target = _open(opts, target)
    ctx = _context(opts, dev, store, target)
    t0 = time.perf_counter()
    with progress() as prog:
        try:
            task = prog.add_task(s.name, total=None)
            out = _suite_run(s, ctx, patterns, opts.manner.resume, _follow(prog, task, s.name))
        except _SuiteFailed as e:
            fail(str(e), e.code)
        except Skipped as e:
            _record_skip(store, s.name, target.arch, str(e))
            fail(str(e), code=1)
    _print_run(store, s.name, out, t0)
    _print_worker_failures(dev)
    dev.close()
    problem = _came_to_nothing(store, s.name, out)
    if problem:
        fail(str(problem), problem.code)
    parallel.shutdown()  # the compile workers are done (see its text)
    write_reports(store.path, opts.reports.report, opts.reports.markdown)


def run_all(suites: dict, plan: dict[str, list[str] | None], opts: RunOptions, target) -> None:
    """``run`` without ``--suite``: the suites one after another on one GPU into one database
    (one failing never stops the others), a summary line each, then the report and the timing
    reference; exit 1 at the end when a suite failed."""
    from gpudissect.bench.runner import PREPARED, prepare_in_background

    dev, store, target = _open(opts, target)
    runs: list[_SuiteRun] = []
    ctxs = {name: _context(opts, dev, store, target) for name in plan}
    # the later suites compile in the background while the GPU measures the first one, once the
    # first has compiled its own items (a suite that compiles in batches beside its measurement
    # comes first to the workers); a quick run, whose GPU work is shorter than its compile, keeps
    # every worker busy from the start: all the suites' compile begins at once
    later = list(plan)[1:]
    first = threading.Event()
    for name in list(plan)[:1]:
        ctxs[name].state[PREPARED] = first
    ahead = dict(zip(later, prepare_in_background([(suites[n], ctxs[n], plan[n]) for n in later],
                                                  None if opts.manner.quick else first), strict=True))
    try:
        with progress() as prog:
            overall = prog.add_task(f"{len(plan)} suites", total=len(plan))
            for i, name in enumerate(plan, 1):
                label = f"[{i}/{len(plan)}] {name}"
                task = prog.add_task(label, total=None)
                runs.append(_run_listed(suites[name], ctxs[name], plan[name], opts.manner.resume,
                                        _follow(prog, task, label), ahead.get(name)))
                prog.remove_task(task)
                prog.advance(overall)
    except KeyboardInterrupt:  # at once: the background compile is not waited for (its workers die with us)
        err.print(f"interrupted: every item measured so far is stored in {store.path}; `gpudissect run "
                  "--suite NAME` resumes the suite that was running (the same command runs the finished "
                  "suites again)", highlight=False, soft_wrap=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    _print_worker_failures(dev)
    dev.close()
    store.close()
    _print_summary(runs, opts.manner.quick)
    failed = [r.suite for r in runs if r.error]
    parallel.shutdown()  # the compile workers are done (see its text)
    if len(failed) < len(runs):
        write_reports(store.path, opts.reports.report, opts.reports.markdown)
    if failed:
        fail(f"{len(failed)} of {len(runs)} suites failed ({', '.join(failed)}: each said why above); what "
             "they stored is kept, and the same command resumes what is unfinished", code=1)


def _run_listed(s, ctx, patterns: list[str] | None, resume: bool, progress, ahead=None) -> _SuiteRun:
    """One suite of the run of every suite: a failure is said in one line and recorded, never
    raised; a suite the architecture cannot run is said in one line and recorded as skipped."""
    from gpudissect.bench.contract import Skipped

    t0 = time.perf_counter()
    try:
        out = _suite_run(s, ctx, patterns, resume, progress, ahead)
        _print_run(ctx.store, s.name, out, t0)
        problem = _came_to_nothing(ctx.store, s.name, out)
    except Skipped as e:
        _record_skip(ctx.store, s.name, ctx.target.arch, str(e))
        console.print(f"[yellow]{escape(str(e))}[/]", highlight=False, soft_wrap=True)
        return _SuiteRun(s.name, 0, 0, time.perf_counter() - t0, None, str(e))
    except _SuiteFailed as e:
        problem = e
    except Exception as e:  # a suite's own bug: recorded, and the other suites still run
        problem = _SuiteFailed(f"{type(e).__name__}: {e}")
    if problem:
        err.print(f"[bold red]{s.name} failed:[/] {escape(str(problem))}", highlight=False, soft_wrap=True)
    run_id = ctx.run_id or None  # set by the runner once the run is in the database
    return _SuiteRun(s.name, len(ctx.store.done_items(run_id)) if run_id else 0,
                     ctx.store.flagged(run_id) if run_id else 0, time.perf_counter() - t0,
                     str(problem) if problem else None)


def _record_skip(store, suite: str, arch: str, why: str) -> None:
    """A suite the architecture runs none of, in the database (``skipped:<suite>``)."""
    store.set_meta(f"skipped:{suite}", {"arch": arch, "why": why})


def _print_summary(runs: list[_SuiteRun], quick: bool = False) -> None:
    if quick:
        console.print("quick profile (--quick): fewer lengths and configurations, a smoke run, not a reference",
                      highlight=False, soft_wrap=True)
    console.print(f"{'suite':<14}{'items':>6}{'flagged':>9}{'wall s':>9}", highlight=False)
    for r in runs:
        console.print(f"{r.suite:<14}{r.items:>6}{r.flagged:>9}{r.wall_s:>9.1f}"
                      + (f"  failed: {r.error}" if r.error else "") + ("  skipped" if r.skipped else ""),
                      markup=False, highlight=False, soft_wrap=True)
