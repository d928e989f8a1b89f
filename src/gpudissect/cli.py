"""The gpudissect command line."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gpudissect.catalog.model import CatalogError, UnknownVariant, load_catalog
from gpudissect.report.cli import outputs_ok, writing

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Discover and quantify the undisclosed architecture of NVIDIA GPUs.")
console = Console()
err = Console(stderr=True)
T = TypeVar("T")


def fail(msg: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpudissect")
    except PackageNotFoundError:  # run from a source tree that is not installed
        from gpudissect import __version__

        return __version__


def _show_version(value: bool) -> None:
    if value:
        console.print(f"gpudissect {_version()}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main_options(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """Discover and quantify the undisclosed architecture of NVIDIA GPUs."""


def _cache_ok() -> None:
    """The compile cache, checked before any compile (one line when it cannot be used)."""
    from gpudissect.kernel.toolchain import CacheDirError, cache_dir

    try:
        cache_dir()
    except CacheDirError as e:
        fail(str(e))


def _interruptible(work: Callable[[], T], kept: str) -> T:
    """``work()`` in a helper thread, so that Ctrl-C reaches this (main) thread at once instead
    of after the worker pools inside ``work`` have finished their running and queued tasks.
    On Ctrl-C: one line (``kept``: what stays), the temporary files of the compiles under way
    removed (``work`` runs with a scratch folder of its own as the temporary folder), and the
    process ends at once (exit 130) without waiting for those workers."""
    import shutil
    import tempfile

    box: dict[str, object] = {}
    scratch = tempfile.mkdtemp(prefix="gpudissect-")
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = scratch  # this process's and its children's

    def target() -> None:
        try:
            box["result"] = work()
        except BaseException as e:  # handed to the main thread
            box["error"] = e

    t = threading.Thread(target=target, name="gpudissect-work", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.1)
    except KeyboardInterrupt:
        err.print(f"interrupted: {kept}", highlight=False, soft_wrap=True)
        gone = scratch + "-gone"  # renamed first: the workers still running can add nothing to it
        os.rename(scratch, gone)
        shutil.rmtree(gone, ignore_errors=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
    shutil.rmtree(scratch, ignore_errors=True)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=err, transient=True)


def _catalog(paths: list[Path] | None):
    try:
        return load_catalog(paths or None)
    except CatalogError as e:
        fail(f"catalog: {e}")


@app.command("catalog")
def catalog_cmd(
    pattern: list[str] = typer.Argument(None, help="variant names or globs (e.g. 'add.*')"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s) instead of the built-in one"),
) -> None:
    """List catalog variants."""
    cat = _catalog(catalog)
    try:
        vs = cat.select(pattern)
    except UnknownVariant as e:
        fail(str(e))
    t = Table("variant", "class", "operands", "min sm", "PTX")
    for v in vs:
        sig = " ".join(f"{o.name}{'!' if o.written else ''}:{o.ptype}" for o in v.operands)
        t.add_row(v.name, v.cls, sig, str(v.min_sm), v.ptx)
    console.print(t)
    console.print(f"{len(vs)} variants")


@app.command("map")
def map_cmd(
    arch: str = typer.Option("sm_90", help="target architecture (sm_XX)"),
    pattern: list[str] = typer.Argument(None, help="variant names or globs; all when omitted"),
    json_path: Path = typer.Option(None, "--json", help="write the map as JSON (gzipped for a .gz name)"),
    csv_path: Path = typer.Option(None, "--csv", help="write the map as CSV"),
    jobs: int = typer.Option(0, help="parallel compile jobs (0: 2 x cores)"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no table, only the summary"),
    registers: bool = typer.Option(False, "--registers",
                                   help="print each verified variant's PTX->SASS register correspondence"),
) -> None:
    """PTX->SASS map of the catalog, verified (needs no GPU)."""
    from gpudissect.suites.instructions.mapper import write_csv, write_json

    outputs_ok(json_path, csv_path)
    cat = _catalog(catalog)
    try:
        vs = cat.select(pattern)
    except UnknownVariant as e:
        fail(str(e))
    _toolchain_ok()
    target = _target(arch)
    _cache_ok()
    recs, s = _map_variants(vs, target, jobs, quiet)
    if registers:
        from gpudissect.suites.instructions.registers import lines as register_lines

        for line in register_lines([r.to_json() for r in recs]):
            console.print(line, highlight=False, soft_wrap=True)
    gz = json_path is not None and json_path.suffix == ".gz"
    outs = [(p, w) for p, w in ((json_path, functools.partial(write_json, compress=gz)), (csv_path, write_csv))
            if p]
    with writing(*(p for p, _ in outs)) as tmps:
        for tmp, (_, write) in zip(tmps, outs, strict=True):
            write(recs, tmp)
    _some_verified(s, target.arch)


def _toolchain_ok() -> None:
    """ptxas and nvdisasm, found before any compile (one line when one is missing)."""
    from gpudissect.kernel.toolchain import ToolchainMissing, find_tool

    try:
        find_tool("ptxas")
        find_tool("nvdisasm")
    except ToolchainMissing as e:
        fail(str(e))


def _map_variants(vs, target, jobs: int, quiet: bool) -> tuple[list, dict]:
    """``vs`` mapped to SASS on ``target`` and verified, under a progress bar (Ctrl-C stops at
    once); the table unless ``quiet``, then the summary line. The records and their summary."""
    from gpudissect.kernel.toolchain import cache_dir
    from gpudissect.suites.instructions.mapper import map_catalog, summary

    t0 = time.perf_counter()
    with _progress() as prog:
        task = prog.add_task(f"mapping {target.arch}", total=len(vs))
        recs = _interruptible(
            lambda: map_catalog(vs, target, jobs=jobs or None, progress=lambda r: prog.advance(task)),
            f"no map written; what was compiled stays in the cache {cache_dir()} (a rerun reuses it)")
    dt = time.perf_counter() - t0
    if not quiet:
        t = Table("variant", "status", "SASS (one instance)", "strategy", "reason", show_lines=False)
        for r in recs:
            style = {"verified": "green", "unsupported": "yellow"}.get(r.status, "red")
            t.add_row(r.variant, f"[{style}]{r.status}[/]", " + ".join(r.sass), r.strategy or "",
                      (r.reason or "")[:90])
        console.print(t)
    s = summary(recs)
    console.print(f"{s['total']} variants on {target.arch}: " + ", ".join(f"{k} {v}" for k, v in s.items() if k != "total")
                  + f"  ({dt:.1f} s)")
    return recs, s


def _some_verified(s: dict, arch: str) -> None:
    """Exit 1 (one line) when a map verified nothing."""
    if not s.get("verified"):
        fail(f"no variant verified on {arch} (every one failed or is unsupported: see the reasons)", code=1)


def _device(index: int, isolate: bool = False, timeout: float = 60.0):
    """GPU ``index``: in a worker process with a watchdog (``isolate``) or in this process.
    ``GPUDISSECT_FAKE_DEVICE=N`` substitutes N synthetic GPUs (tests; see run/fakes.py)."""
    import functools

    from gpudissect.device.device import CudaDevice, NoGPU
    from gpudissect.device.fakes import fake_from_env, fake_gpu_count

    if fake_gpu_count():
        if not 0 <= index < fake_gpu_count():
            fail(f"no fake GPU {index} (GPUDISSECT_FAKE_DEVICE={fake_gpu_count()})")
        factory = functools.partial(fake_from_env, index)
    else:
        factory = functools.partial(CudaDevice, index)
    try:
        if isolate:
            from gpudissect.device.worker import WorkerDevice

            return WorkerDevice(index, timeout=timeout, factory=factory)
        return factory()
    except NoGPU as e:
        fail(f"{e}. Timing needs an NVIDIA GPU; `gpudissect map` works without one.")
    except RuntimeError as e:  # WorkerFailed: the worker could not open the device
        fail(f"GPU {index}: {e}")


def _store(db: Path | None, create: bool = False):
    """The results database; for reading (``create=False``) an existing one only (.db, .db.gz or packed .db.xz),
    never a new file."""
    from gpudissect.store.db import StoreError, open_store

    try:
        return open_store(db, create=create)
    except StoreError as e:
        fail(str(e))


def _target(arch: str, dev=None):
    """The target from ``--arch`` or, without one and with a GPU, from the GPU."""
    from gpudissect.arch.target import TargetError, make_target, target_of_device

    try:
        return make_target(arch) if arch or dev is None else target_of_device(dev.info)
    except TargetError as e:
        fail(str(e))


@app.command("run")
def run_cmd(
    pattern: list[str] = typer.Argument(None, help="what to run: names or globs within --suite; without "
                                        "--suite, SUITE:PATTERN (e.g. memory:latency/*) picks suites and "
                                        "their items, and a bare pattern is an instruction variant (the "
                                        "instructions suite alone, as --suite instructions); all when omitted"),
    suite: str = typer.Option(None, help="one suite: instructions, memory, tensor, behaviour (default: every "
                              "suite in this order into one database, then the report and timing reference)"),
    db: Path = typer.Option(None, "--db", help="results database (default $GPUDISSECT_DB or ./results.db)"),
    arch: str = typer.Option("", help="architecture (default: the GPU's)"),
    gpu: int = typer.Option(0, help="GPU index"),
    quick: bool = typer.Option(False, help="fewer lengths/configurations (a smoke run)"),
    resume: bool = typer.Option(True, "--resume/--new", help="resume an unfinished run of this suite and GPU"),
    jobs: int = typer.Option(0, help="parallel compile jobs (0: cores)"),
    selfcheck: bool = typer.Option(True, "--selfcheck/--no-selfcheck", help="instructions: time a few instructions through nvcc too"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s) (instructions suite)"),
    isolate: bool = typer.Option(True, "--isolate/--no-isolate",
                                 help="run the GPU in a worker process with a watchdog (a fault or hang "
                                      "is recorded and the sweep goes on in a fresh worker)"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds one GPU call may take (--isolate)"),
    gpus: str = typer.Option("", "--gpus", help="'all' or '0,1' (with --suite): one process per GPU, each its "
                                                "own run; then their comparison"),
    report: Path = typer.Option(None, "--report", help="write the HTML report of the database here (default "
                                "without --suite: report.html; with --suite: none)"),
    markdown: Path = typer.Option(None, "--markdown", help="write the timing reference here (default without "
                                  "--suite: timing-reference.md; with --suite: none)"),
) -> None:
    """Run every suite on the GPU into one database, then write the HTML report and the timing
    reference; or one suite (--suite: instructions: latency, throughput, dependence distance of
    every verified variant; memory; tensor; behaviour). Without a GPU: map the catalog and write
    the report from the shipped H100 data."""
    from gpudissect.bench.contract import SuiteInputError
    from gpudissect.suites import get_suite

    options = {"catalog": list(catalog or []), "selfcheck": selfcheck}
    plan, one = _suite_plan(suite, pattern or [])
    try:
        suites = {name: get_suite(name) for name in plan}
        for name, s in suites.items():
            s.validate(plan[name], options)
    except (SuiteInputError, CatalogError) as e:
        fail(str(e))
    if not timeout > 0:
        fail(f"--timeout must be positive (got {timeout})")
    if gpus and not one:
        fail("--gpus runs one suite at a time: give --suite NAME (then `gpudissect report --db DB` "
             "writes the report of them all)")
    a = _RunArgs(db, arch, _target(arch) if arch else None, gpu, quick, resume, jobs, isolate, timeout,
                 options)  # a bad --arch before any GPU work
    if one:
        _ready(report, markdown)
        if gpus:
            _run_many(gpus, pattern, suite or "instructions", db, arch, quick, resume, jobs, selfcheck,
                      catalog, isolate, timeout)
            _write_reports(db or _default_db(), report, markdown)
        else:
            _run_single(next(iter(suites.values())), next(iter(plan.values())), a, report, markdown)
        return
    report = report or Path("report.html")
    if not _gpu_here():
        _ready(report, markdown)
        _run_without_gpu(a, plan.get("instructions"), report, markdown)
        return
    markdown = markdown or Path("timing-reference.md")
    _ready(report, markdown, db or _default_db())
    _run_all(suites, plan, a, report, markdown)


@dataclass
class _RunArgs:
    """What ``run`` passes on to the run of each suite."""

    db: Path | None
    arch: str
    target: object | None  # from --arch; None: the GPU's
    gpu: int
    quick: bool
    resume: bool
    jobs: int
    isolate: bool
    timeout: float
    options: dict


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


def _qualified(pattern: str) -> tuple[str, str] | None:
    """``SUITE:PATTERN`` of a registered suite as (suite, pattern); None for a bare pattern."""
    from gpudissect.suites import SUITES

    name, sep, rest = pattern.partition(":")
    return (name, rest) if sep and name in SUITES else None


def _suite_plan(suite: str | None, patterns: list[str]) -> tuple[dict[str, list[str] | None], bool]:
    """The suites to run, in registry order, with their patterns (None: all items); and whether
    it is the run of one suite as before (``--suite``, or bare patterns only: instruction
    variants) rather than the run of every suite (or of those ``SUITE:PATTERN`` names) and its
    report."""
    from gpudissect.suites import SUITES

    if suite is not None:
        return {suite: patterns or None}, True
    if not patterns:
        return dict.fromkeys(SUITES), False
    split = [_qualified(p) for p in patterns]
    if not any(split):
        return {"instructions": patterns}, True
    by: dict[str, list[str]] = {}
    for p, q in zip(patterns, split, strict=True):
        name, pat = q or ("instructions", p)
        by.setdefault(name, []).append(pat)
    return {name: by[name] for name in SUITES if name in by}, False


def _default_db() -> Path:
    from gpudissect.store.db import default_path

    return default_path()


def _ready(report: Path | None, markdown: Path | None, *more: Path) -> None:
    """Before any GPU work: the output paths writable, the HTML report's packages present when a
    report is asked for, the compile cache usable (one line and exit 2 when not)."""
    outputs_ok(*more, report, markdown)
    if report is not None:
        try:
            import jinja2  # noqa: F401
            import matplotlib  # noqa: F401
        except ImportError:
            fail("the HTML report needs jinja2 and matplotlib: pip install 'gpudissect[report]'")
    _cache_ok()


def _gpu_here() -> bool:
    """Whether this machine has a GPU to time on (a fake one counts), asked without a CUDA context."""
    from gpudissect.device import multi
    from gpudissect.device.device import NoGPU

    try:
        return multi.gpu_count() > 0
    except NoGPU:
        return False


def _open(a: _RunArgs):
    """The GPU, the results database and the target of a run; the GPU's line printed."""
    dev = _device(a.gpu, a.isolate, a.timeout)
    store = _store(a.db, create=True)
    target = a.target or _target(a.arch, dev)
    console.print(f"[bold]{dev.info.name}[/] {dev.info.uuid}  {dev.info.sm_count} SMs  driver {dev.info.driver}"
                  f"  clocks {dev.clocks()}")
    return dev, store, target


def _context(a: _RunArgs, dev, store, target):
    from gpudissect.bench.contract import Context

    return Context(dev, store, target, quick=a.quick, jobs=a.jobs or (os.cpu_count() or 2),
                   options=dict(a.options))


def _follow(prog: Progress, task, label: str) -> Callable[[str, int, int], None]:
    """The runner's progress callback, shown on ``task`` as ``label`` and the item under way."""

    def cb(name: str, n: int, total: int) -> None:
        prog.update(task, completed=n, total=total, description=f"{label} {name:<24}")

    return cb


def _suite_run(s, ctx, patterns: list[str] | None, resume: bool, progress, ahead=None):
    """The runner on one suite (``ahead``: its prepare under way in the background); its
    failures as :class:`_SuiteFailed`."""
    from gpudissect.bench.runner import run

    try:
        return run(s, ctx, patterns, resume=resume, progress=progress, ahead=ahead)
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


def _run_single(s, patterns: list[str] | None, a: _RunArgs, report: Path | None,
                markdown: Path | None) -> None:
    """``run --suite``: one suite; the report files only where asked for."""
    dev, store, target = _open(a)
    ctx = _context(a, dev, store, target)
    t0 = time.perf_counter()
    with _progress() as prog:
        try:
            task = prog.add_task(s.name, total=None)
            out = _suite_run(s, ctx, patterns, a.resume, _follow(prog, task, s.name))
        except _SuiteFailed as e:
            fail(str(e), e.code)
    _print_run(store, s.name, out, t0)
    _print_worker_failures(dev)
    dev.close()
    problem = _came_to_nothing(store, s.name, out)
    if problem:
        fail(str(problem), problem.code)
    _write_reports(store.path, report, markdown)


def _run_all(suites: dict, plan: dict[str, list[str] | None], a: _RunArgs, report: Path,
             markdown: Path) -> None:
    """``run`` without ``--suite``: the suites one after another on one GPU into one database
    (one failing never stops the others), a summary line each, then the report and the timing
    reference; exit 1 at the end when a suite failed."""
    from gpudissect.bench.runner import prepare_in_background

    dev, store, target = _open(a)
    runs: list[_SuiteRun] = []
    ctxs = {name: _context(a, dev, store, target) for name in plan}
    later = list(plan)[1:]  # they compile in the background while the GPU measures the first ones
    ahead = dict(zip(later, prepare_in_background([(suites[n], ctxs[n], plan[n]) for n in later]), strict=True))
    try:
        with _progress() as prog:
            overall = prog.add_task(f"{len(plan)} suites", total=len(plan))
            for i, name in enumerate(plan, 1):
                label = f"[{i}/{len(plan)}] {name}"
                task = prog.add_task(label, total=None)
                runs.append(_run_listed(suites[name], ctxs[name], plan[name], a.resume,
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
    _print_summary(runs)
    failed = [r.suite for r in runs if r.error]
    if len(failed) < len(runs):
        _write_reports(store.path, report, markdown)
    if failed:
        fail(f"{len(failed)} of {len(runs)} suites failed ({', '.join(failed)}: each said why above); what "
             "they stored is kept, and the same command resumes what is unfinished", code=1)


def _run_listed(s, ctx, patterns: list[str] | None, resume: bool, progress, ahead=None) -> _SuiteRun:
    """One suite of the run of every suite: a failure is said in one line and recorded, never raised."""
    t0 = time.perf_counter()
    try:
        out = _suite_run(s, ctx, patterns, resume, progress, ahead)
        _print_run(ctx.store, s.name, out, t0)
        problem = _came_to_nothing(ctx.store, s.name, out)
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


def _print_summary(runs: list[_SuiteRun]) -> None:
    console.print(f"{'suite':<14}{'items':>6}{'flagged':>9}{'wall s':>9}", highlight=False)
    for r in runs:
        console.print(f"{r.suite:<14}{r.items:>6}{r.flagged:>9}{r.wall_s:>9.1f}"
                      + (f"  failed: {r.error}" if r.error else ""),
                      markup=False, highlight=False, soft_wrap=True)


def _run_without_gpu(a: _RunArgs, patterns: list[str] | None, report: Path, markdown: Path | None) -> None:
    """``run`` on a machine without a GPU: the catalog mapped (verified), and the report written
    from the shipped H100 data."""
    from gpudissect.report.read.shipped import SHIPPED, shipped_results

    data = shipped_results()
    if data is None:
        fail(f"no NVIDIA GPU here, and no shipped data/{SHIPPED} (of a source checkout) to write the "
             "report from: run on a GPU, or `gpudissect report --data DIR`")
    target = a.target or _target("sm_90")
    _toolchain_ok()
    console.print(f"no NVIDIA GPU here: mapping the catalog for {target.arch} and writing the report from "
                  f"the shipped {SHIPPED.upper()} data ({data})", markup=False, highlight=False, soft_wrap=True)
    vs = _catalog(a.options["catalog"]).select(patterns)
    _, s = _map_variants(vs, target, a.jobs, quiet=True)
    _write_reports(data, report, markdown)
    _some_verified(s, target.arch)


def _write_reports(spec: Path, report: Path | None, markdown: Path | None) -> None:
    """The timing reference and the HTML report of a results database or data directory (each
    where asked for, its path checked before the work), one line each."""
    from gpudissect.report.assemble import write
    from gpudissect.report.read.results import LoadError

    if report is None and markdown is None:
        return
    try:
        rs, data_dir = write.load(Path(spec))
    except LoadError as e:
        fail(str(e))
    if markdown is not None:
        write.markdown(rs, markdown)
    if report is not None:
        write.html(rs, report, data_dir)


def _run_many(gpus, pattern, suite, db, arch, quick, resume, jobs, selfcheck, catalog, isolate,
              timeout) -> None:
    """``run --gpus``: the same run command once per GPU, in parallel processes; then compare."""
    import os

    from gpudissect.device.device import NoGPU
    from gpudissect.device.multi import gpu_indices, run_per_gpu

    try:
        idx = gpu_indices(gpus)
    except (ValueError, NoGPU) as e:
        fail(str(e))
    store = _store(db, create=True)  # create the schema once, before the writers start
    path = store.path.resolve()
    store.close()
    per_jobs = jobs or max(1, (os.cpu_count() or 2) // len(idx))

    def args(i: int) -> list[str]:
        a = ["run", *(pattern or []), "--suite", suite, "--db", str(path), "--gpu", str(i),
             "--jobs", str(per_jobs), "--timeout", str(timeout),
             "--quick" if quick else "--no-quick", "--resume" if resume else "--new",
             "--selfcheck" if selfcheck else "--no-selfcheck", "--isolate" if isolate else "--no-isolate"]
        if arch:
            a += ["--arch", arch]
        for c in catalog or []:
            a += ["--catalog", str(c)]
        return a

    console.print(f"{len(idx)} GPU(s): {', '.join(map(str, idx))} -> {path}")
    codes = run_per_gpu(idx, args, echo=lambda line: console.print(line, highlight=False,
                                                                    soft_wrap=True, markup=False))
    bad = {i: c for i, c in codes.items() if c != 0}
    if len(idx) > 1:
        _print_comparison(_store(path), suite, None, top=10)
    if bad:
        fail("GPU(s) " + ", ".join(f"{i} (exit {c})" for i, c in bad.items())
             + " failed; their stored work is kept: run the same command to resume", code=1)


def _print_comparison(store, suite: str, run_ids: list[int] | None, top: int) -> dict:
    from gpudissect.bench.gpu_spread import compare_gpus, conclusions

    try:
        doc = compare_gpus(store, suite, run_ids)
    except ValueError as e:
        fail(str(e))
    t = Table("run", "GPU", "UUID", "SM clock before/after (MHz)")
    for g in doc["gpus"]:
        cb, ca = g.get("clocks_before") or {}, g.get("clocks_after") or {}
        t.add_row(str(g["run_id"]), g["gpu_name"], g["gpu_uuid"], f"{cb.get('sm_mhz', '-')}/{ca.get('sm_mhz', '-')}")
    console.print(t)
    recs = sorted((r for r in doc["records"] if r["rel_spread"] is not None),
                  key=lambda r: -r["rel_spread"])
    if recs and top:
        t = Table("variant", "measure", "params", "median", "min", "max", "spread", title="largest spreads")
        for r in recs[:top]:
            p = " ".join(f"{k}={v}" for k, v in r["params"].items() if not isinstance(v, (dict, list)))
            t.add_row(r["variant"], r["measure"], p, f"{r['median']:.3f}", f"{r['min']:.3f}",
                      f"{r['max']:.3f}", f"{r['rel_spread']:.2%}")
        console.print(t)
    for line in conclusions(doc):
        console.print(f"- {line}", highlight=False, soft_wrap=True)
    return doc


@app.command("compare-gpus")
def compare_gpus_cmd(
    db: Path = typer.Option(None, "--db"),
    suite: str = typer.Option("instructions", help="suite whose runs to compare"),
    run_ids: list[int] = typer.Option(None, "--run", help="runs to compare (default: the latest "
                                                          "finished run of the suite per GPU)"),
    json_path: Path = typer.Option(None, "--json", help="write the comparison as JSON"),
    top: int = typer.Option(15, help="rows of the largest spreads to show"),
) -> None:
    """Spread of each measurement across GPUs (median, min, max, relative spread)."""
    from gpudissect.bench.gpu_spread import write_json

    outputs_ok(json_path)
    store = _store(db)
    doc = _print_comparison(store, suite, run_ids or None, top)
    if json_path:
        with writing(json_path) as (tmp,):
            write_json(doc, tmp)
        console.print(f"{len(doc['records'])} records -> {json_path}")


@app.command("show")
def show_cmd(
    pattern: str = typer.Argument("*", help="variant glob"),
    db: Path = typer.Option(None, "--db"),
    cls: str = typer.Option(None, "--class", help="instruction class (int, fp32, mufu, ...)"),
    opcode: str = typer.Option(None, help="opcode (add, mad, ...)"),
    type_: str = typer.Option(None, "--type", help="PTX type suffix (u32, f16x2, ...)"),
) -> None:
    """Table of stored results: latency and peak throughput per variant."""
    store = _store(db)
    recs = store.results(variant_like=pattern)
    by: dict[str, dict] = {}
    for r in recs:
        name = r["variant"]
        if opcode and name.split(".")[0] != opcode:
            continue
        if type_ and name.split(".")[-1] != type_:
            continue
        if cls and not (r["cls"] or "").startswith(cls):
            continue
        e = by.setdefault(name, {"flags": set(), "sass": r["sass"], "gpu": r["gpu_name"]})
        if r["measure"] in ("latency", "issue_interval", "throughput_peak"):
            e["latency" if r["measure"] == "issue_interval" else r["measure"]] = r["value"]
            e["flags"].update(f.split(":")[0] for f in r["flags"])
    t = Table("variant", "SASS", "latency (cyc)", "throughput (warp-instr/clk/SM)", "flags")
    for name, e in by.items():
        lat, tp = e.get("latency"), e.get("throughput_peak")
        t.add_row(name, " + ".join(e["sass"] or [])[:60], "-" if lat is None else f"{lat:.2f}",
                  "-" if tp is None else f"{tp:.2f}", ", ".join(sorted(e["flags"])))
    console.print(t)


@app.command("export")
def export_cmd(
    out: Path = typer.Argument(..., help="output file"),
    fmt: str = typer.Option("json", "--format", help="json | csv | parquet | markdown | suite | layouts"),
    db: Path = typer.Option(None, "--db"),
    run_id: int = typer.Option(None, "--run", help="one run only"),
    suite: str = typer.Option(None, "--suite", help="the latest run of this suite (with --format suite)"),
    data: Path = typer.Option(None, "--data", help="read a data directory or suite JSON instead of a DB "
                              "(json, csv, parquet; --suite selects one suite)"),
) -> None:
    """Export results: JSON (stable: variant, measure, value, unit, flags, sass, gpu), CSV, Parquet,
    markdown; 'suite': one run with its provenance and conclusions (data/<gpu>/<suite>.json)."""
    from gpudissect.store.export import (
        layouts_document,
        records,
        table_v,
        write_csv,
        write_document,
        write_json,
        write_suite_json,
    )

    formats = ("json", "csv", "markdown", "suite", "layouts", "parquet")
    if fmt not in formats:
        fail(f"unknown format '{fmt}' ({', '.join(formats)})")
    if data is not None and fmt not in ("json", "csv", "parquet"):
        fail(f"--data exports json, csv or parquet (not {fmt})")
    outputs_ok(out)
    if data is not None or fmt == "parquet":
        from gpudissect.report.present.tabular import ExportError, write_table
        from gpudissect.report.read.results import LoadError, load_result_set

        try:
            recs = (load_result_set(data).records(suite) if data is not None
                    else [{**r, "suite": None} for r in records(_store(db), run_id)])
            with writing(out) as (tmp,):
                n = write_table(recs, tmp, fmt)
        except (LoadError, ExportError) as e:
            fail(str(e))
        console.print(f"{n} records -> {out}")
        return
    store = _store(db)
    if suite and run_id is None:
        run_id = store.latest_run(suite)
        if run_id is None:
            fail(f"no run of suite '{suite}' in {store.name}")
    if fmt in ("suite", "layouts") and run_id is None:
        fail(f"--format {fmt} needs --run N or --suite " + ("NAME" if fmt == "suite" else "tensor"))
    with writing(out) as (tmp,):
        if fmt == "suite":
            n = write_suite_json(store, tmp, run_id)
        elif fmt == "json":
            n = write_json(store, tmp, run_id)
        elif fmt == "csv":
            n = write_csv(store, tmp, run_id)
        elif fmt == "layouts":
            doc = layouts_document(store, run_id)
            write_document(doc, tmp)
            n = len(doc["layouts"])
        else:  # markdown
            recs = records(store, run_id)
            tmp.write_text(table_v(recs))
            n = len(recs)
    console.print(f"{n} records -> {out}")


@app.command("time")
def time_cmd(
    ptx: str = typer.Option(..., "--ptx", help="PTX instruction(s) with {d} (result) and {a},{b},{c} (operands), "
                            "or @FILE"),
    sig: str = typer.Option("d:u32 a:u32 b:u32", "--sig", help="operands as name:type, destination first"),
    arch: str = typer.Option("sm_90"),
    db: Path = typer.Option(None, "--db"),
    gpu: int = typer.Option(0),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="verify and show the SASS only"),
) -> None:
    """Time any PTX instruction or short sequence with the same generators, checks and statistics."""
    from gpudissect.arch.target import TargetError, make_target
    from gpudissect.bench.contract import Context, Item
    from gpudissect.bench.runner import measure_guarded
    from gpudissect.catalog.model import Variant, parse_signature
    from gpudissect.suites.instructions.suite import InstructionsSuite, Plan
    from gpudissect.suites.instructions.verify import autoverify

    try:
        text = Path(ptx[1:]).read_text() if ptx.startswith("@") else ptx
    except (OSError, UnicodeDecodeError) as e:
        fail(f"--ptx {ptx}: cannot read: {getattr(e, 'strerror', None) or e}")
    try:
        ops = parse_signature(sig, "--sig")
    except CatalogError as e:
        fail(str(e))
    import re as _re

    used = set(_re.findall(r"\{([a-z][a-z0-9]*)\}", text))
    missing = {o.name for o in ops} - used
    if missing:
        fail(f"--ptx does not use operand(s) {sorted(missing)} of --sig '{sig}'")
    unknown = used - {o.name for o in ops}
    if unknown:
        fail(f"--ptx uses operand(s) {sorted(unknown)} that --sig '{sig}' does not declare")
    name = "custom:" + text.strip().split()[0] if text.strip() else "custom"
    v = Variant(name=name, opcode="custom", type=ops[0].ptype, modifiers=(), ptx=text.strip(),
                operands=ops, cls="custom")
    try:
        target = make_target(arch)
    except TargetError as e:
        fail(str(e))
    _cache_ok()
    rec = autoverify(v, target)
    console.print(f"{'verified' if rec.verified else '[red]' + rec.status + '[/]'} "
                  f"strategy={rec.strategy} SASS/instance: {' + '.join(rec.sass) or '-'}")
    if not rec.verified:
        if rec.status == "error":  # no strategy assembled: the PTX itself is bad input
            fail(f"the PTX does not assemble: {_ptxas_says(v, rec, target)}")
        fail(rec.reason or "not verified", code=1)
    if no_gpu:
        return
    dev = _device(gpu)
    # the suite's own kernels, checks and clock/noise guard; nothing is stored
    suite = InstructionsSuite(full=Plan(tp_warps=(16, 32)))
    ctx = Context(dev, None, target, jobs=4)
    suite.prepare_mapped(ctx, [v], [rec])
    results = measure_guarded(suite, ctx, Item(v.name, v)).results
    t = Table("measure", "params", "value", "unit", "flags")
    for r in results:
        t.add_row(r.measure, str({k: v for k, v in r.params.items() if k != "lengths"}),
                  "-" if r.value is None else f"{r.value:.3f}", r.unit, "; ".join(r.flags))
    console.print(t)


def _ptxas_says(v, rec, target) -> str:
    """ptxas's whole message on the variant's kernel (its first strategy, one instance), on one
    line: its temporary file called k.ptx, and the kernel line it names quoted."""
    import re

    from gpudissect.kernel.ptx import module_ptx
    from gpudissect.kernel.toolchain import PtxasError, compile_ptx
    from gpudissect.suites.instructions.strategies import strategy
    from gpudissect.suites.instructions.template import generate

    first = rec.attempts[0] if rec.attempts else None
    try:
        strat = strategy(first.strategy)
        ptx = module_ptx([generate(v, strat, target, length=1, name="k")])
        compile_ptx(ptx, target.arch, strat.opt, use_cache=False)
    except PtxasError as e:
        src, quoted, lines = ptx.splitlines(), set(), []
        for line in e.message.splitlines():
            line = " ".join(re.sub(r"\S*/(k\.ptx)", r"\1", line).split())
            m = re.search(r"line (\d+);", line)
            if m and 0 < int(m.group(1)) <= len(src) and m.group(1) not in quoted:
                quoted.add(m.group(1))
                line += f" [{src[int(m.group(1)) - 1].strip()}]"
            lines.append(line)
        return " | ".join(lines)
    except Exception:  # the message as recorded, then
        pass
    return first.reason if first else (rec.reason or "")


@app.command("predict")
def predict_cmd(
    input: Path = typer.Argument(None, help="a cubin, a PTX file (compiled here) or a SASS listing"),
    data: Path = typer.Option(None, "--data", help="tables: a data directory, suite JSON or results "
                              "database (default: the shipped data/h100)"),
    validate: bool = typer.Option(False, "--validate", help="validate the predictor: measure >= 300 "
                                  "generated and real loops on the GPU (or read --measured) and print "
                                  "the error table beside the baselines"),
    measured: Path = typer.Option(None, "--measured", help="with --validate: saved measurements (no GPU)"),
    output: Path = typer.Option(None, "-o", "--output", help="with --validate: JSON to write"),
    figure: Path = typer.Option(None, "--figure", help="with --validate: predicted-vs-measured PNG"),
    count: int = typer.Option(320, "--count", help="with --validate: generated loops"),
    seed: int = typer.Option(20, "--seed", help="with --validate: the generator's seed"),
    only: str = typer.Option(None, "--only", help="with --validate: only these loop sets or categories, "
                             "comma-separated (generated, real, tensor, or a category: tensor_mma, "
                             "tensor_wgmma, wgmma_gemm, sgemm ...); the branch calibration always runs"),
    kernel: str = typer.Option(None, "--kernel", help="only this kernel"),
    loop: int = typer.Option(None, "--loop", help="only innermost loop N of the kernel (from 0)"),
    warps: int = typer.Option(4, "--warps", help="resident warps per SM"),
    timeline: bool = typer.Option(False, "--timeline", help="print one warp's simulated timeline"),
    tables: bool = typer.Option(False, "--tables", help="print the table entries each opcode used"),
) -> None:
    """Predict cycles per iteration of the innermost SASS loops from the measured tables
    (needs no GPU)."""
    from gpudissect.predict.answer import predict_lines, validate_lines

    if validate:
        dev = None if measured is not None else _device(0)
        sel = tuple(x.strip() for x in (only or "").split(",") if x.strip())
        code, lines, errors = validate_lines(dev, data, output, figure, measured, count, seed, sel)
    elif input is None:
        fail("give an input (a cubin, PTX file or SASS listing), or --validate")
    else:
        code, lines, errors = predict_lines(input, data, kernel, loop, warps, timeline, tables)
    for ln in lines:
        console.print(ln, markup=False, highlight=False, soft_wrap=True)
    if errors:
        for e in errors[:-1]:
            err.print(f"[bold red]error:[/] {escape(e)}", highlight=False, soft_wrap=True)
        fail(errors[-1], code)


@app.command("fleet")
def fleet_cmd(
    pattern: list[str] = typer.Argument(None, help="what every GPU runs: SUITE:PATTERN items (bare patterns: "
                                        "instruction variants), as for `run`; default: the quick fleet "
                                        "profile (gpudissect/data/fleet.toml)"),
    address: str = typer.Option(None, "--address", help="the Ray cluster: auto | HOST:PORT (default: start a "
                                "local Ray instance on this machine)"),
    db: Path = typer.Option(None, "--db", help="the fleet's results database (default $GPUDISSECT_DB or "
                            "./results.db)"),
    threshold: float = typer.Option(None, "--threshold", help="relative deviation from the fleet median that "
                                    "makes a GPU an outlier (default from the profile: 0.05)"),
    timeout: float = typer.Option(None, "--timeout", help="seconds one GPU's task may take before it is "
                                  "cancelled and retried once (default from the profile)"),
    resume: bool = typer.Option(True, "--resume/--new", help="resume the fleet stored in --db (its GPUs "
                                "already done are skipped)"),
    isolate: bool = typer.Option(True, "--isolate/--no-isolate", help="each GPU in a worker process with a "
                                 "watchdog per call (as for `run`)"),
    arch: str = typer.Option("", help="architecture (default: each GPU's)"),
    jobs: int = typer.Option(0, help="parallel compile jobs per GPU (0: the node's cores)"),
    json_path: Path = typer.Option(None, "--json", help="write the fleet's outliers document as JSON"),
    report: Path = typer.Option(None, "--report", help="write the HTML report of the database, with its "
                                "fleet page, here"),
) -> None:
    """Run the same per-GPU profile on every GPU of a Ray cluster (one task per GPU), gather the
    results into one database, and list the GPUs that deviate from the fleet (with the evidence:
    clocks, temperature, throttle reasons, ECC). Needs Ray: the package's fleet extra."""
    import json as _json

    from gpudissect.bench.contract import SuiteInputError
    from gpudissect.device.fakes import fake_gpu_count
    from gpudissect.fleet.outliers import analyse, conclusions
    from gpudissect.fleet.page import OUTLIERS_META
    from gpudissect.fleet.profile import load_profile
    from gpudissect.fleet.run import run_fleet
    from gpudissect.fleet.schedule import FleetError, connect

    prof = load_profile(_suite_plan(None, pattern)[0] if pattern else None)
    try:
        prof.validate()
    except (SuiteInputError, CatalogError) as e:
        fail(str(e))
    th = prof.threshold if threshold is None else threshold
    if not th > 0 or (timeout is not None and not timeout > 0):
        fail("--threshold and --timeout must be positive")
    _ready(report, None, db or _default_db(), *([json_path] if json_path else []))
    store = _store(db, create=True)
    try:
        # a local instance offers the fake GPUs of GPUDISSECT_FAKE_DEVICE (tests, demonstrations)
        ray = connect(address, **({"num_gpus": fake_gpu_count()} if fake_gpu_count() and not address else {}))
        state = run_fleet(ray, store, prof, resume=resume, isolate=isolate, arch=arch, jobs=jobs,
                          timeout_s=timeout, echo=lambda s: console.print(s, markup=False, highlight=False))
    except FleetError as e:
        fail(str(e))
    doc = analyse(store, state, th)
    store.set_meta(OUTLIERS_META, doc)
    for line in conclusions(doc):
        console.print(f"- {line}", markup=False, highlight=False, soft_wrap=True)
    path = store.path
    store.close()
    if json_path:
        with writing(json_path) as (tmp,):
            tmp.write_text(_json.dumps(doc, indent=1) + "\n")
    _write_reports(path, report, None)
    if doc["failed"]:
        fail(f"{len(doc['failed'])} GPU(s) failed (each said why above); the others' results are in {path}: "
             "the same command resumes the failed ones", code=1)


@app.command("audit")
def audit_cmd(path: Path = typer.Argument(..., help="a data directory, suite JSON file or results database")) -> None:
    """Check a data set: every clean throughput within its physical limit, nothing timed from a
    kernel below -O3, provenance complete, one GPU, flags consistent with values. One line per
    problem; exit 1 when there is any."""
    from gpudissect.audit import main as audit_main

    code = audit_main(path)
    if code:
        raise typer.Exit(code)


@app.command("advise")
def advise_cmd(
    target: str = typer.Argument(..., help="a variant measured in the data (e.g. fma.rn.f32), or a kernel: "
                                 "a cubin, PTX file or SASS listing"),
    data: Path = typer.Option(None, "--data", help="a data directory, suite JSON or results database "
                              "(default: the shipped data/h100)"),
) -> None:
    """The launch configurations (warps per block, blocks per SM, independent work per thread)
    that reach the maximum rate, and what is lost outside them, with the numbers behind each
    statement (needs no GPU)."""
    from gpudissect.advise import AdviseError
    from gpudissect.advise.advise import advise_lines

    try:
        lines = advise_lines(target, data)
    except AdviseError as e:
        fail(str(e))
    for ln in lines:
        console.print(ln, markup=False, highlight=False, soft_wrap=True)


from gpudissect.report.cli import register as _register_report  # noqa: E402  (report, simexport, compare)

_register_report(app)


def main() -> None:
    import sqlite3

    from gpudissect.store.db import StoreError

    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except (StoreError, sqlite3.DatabaseError) as e:  # a damaged or foreign database file
        err.print(f"[bold red]error:[/] database: {e}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
