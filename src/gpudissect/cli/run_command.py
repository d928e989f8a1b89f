"""``gpudissect run``: what it runs (``SUITE:PATTERN`` into a plan of suites), checked before any
GPU work, and which way: one suite, every suite on one GPU, one process per GPU (``--gpus``), or,
on a machine without a GPU, the catalog mapped and the report written from the shipped data."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from gpudissect.catalog.model import CatalogError
from gpudissect.cli.gpu_comparison import print_comparison
from gpudissect.cli.option_groups import DEFAULT_ARCH, grouped
from gpudissect.cli.report_commands import write_reports
from gpudissect.cli.run_options import RunOptions, RunReports
from gpudissect.cli.suite_runs import run_all, run_single
from gpudissect.terminal import (
    cache_ok,
    console,
    default_db,
    fail,
    open_store,
    outputs_ok,
    target_of,
    toolchain_ok,
)


@grouped
def run_cmd(opts: RunOptions) -> None:
    """Run every suite on the GPU into one database, then write the HTML report and the timing
    reference; or one suite (--suite: instructions: latency, throughput, dependence distance of
    every verified variant; memory; tensor; behaviour). Without a GPU: map the catalog and write
    the report from the shipped H100 data."""
    from gpudissect.bench.contract import SuiteInputError
    from gpudissect.suites import get_suite

    plan, one = suite_plan(opts.choice.suite, opts.choice.pattern or [])
    try:
        suites = {name: get_suite(name) for name in plan}
        for name, s in suites.items():
            s.validate(plan[name], opts.manner.suite_options())
    except (SuiteInputError, CatalogError) as e:
        fail(str(e))
    if not opts.processes.timeout > 0:
        fail(f"--timeout must be positive (got {opts.processes.timeout})")
    if opts.processes.gpus and not one:
        fail("--gpus runs one suite at a time: give --suite NAME (then `gpudissect report --db DB` "
             "writes the report of them all)")
    target = target_of(opts.place.arch) if opts.place.arch else None  # a bad --arch before any GPU work
    report, markdown = opts.reports.report, opts.reports.markdown
    if one:
        ready(report, markdown)
        if opts.processes.gpus:
            _run_on_gpus(opts)
            write_reports(opts.place.db or default_db(), report, markdown)
        else:
            run_single(next(iter(suites.values())), next(iter(plan.values())), opts, target)
        return
    report = report or Path("report.html")
    if not _gpu_here():
        ready(report, markdown)
        _run_without_gpu(replace(opts, reports=RunReports(report, markdown)), target, plan.get("instructions"))
        return
    markdown = markdown or Path("timing-reference.md")
    ready(report, markdown, opts.place.db or default_db())
    run_all(suites, plan, replace(opts, reports=RunReports(report, markdown)), target)


def _qualified(pattern: str) -> tuple[str, str] | None:
    """``SUITE:PATTERN`` of a registered suite as (suite, pattern); None for a bare pattern."""
    from gpudissect.suites import SUITES

    name, sep, rest = pattern.partition(":")
    return (name, rest) if sep and name in SUITES else None


def suite_plan(suite: str | None, patterns: list[str]) -> tuple[dict[str, list[str] | None], bool]:
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


def ready(report: Path | None, markdown: Path | None, *more: Path) -> None:
    """Before any GPU work: the output paths writable, the HTML report's packages present when a
    report is asked for, the compile cache usable (one line and exit 2 when not)."""
    outputs_ok(*more, report, markdown)
    if report is not None:
        try:
            import jinja2  # noqa: F401
            import matplotlib  # noqa: F401
        except ImportError:
            fail("the HTML report needs jinja2 and matplotlib: pip install 'gpudissect[report]'")
    cache_ok()


def _gpu_here() -> bool:
    """Whether this machine has a GPU to time on (a fake one counts), asked without a CUDA context."""
    from gpudissect.device import multi
    from gpudissect.device.device import NoGPU

    try:
        return multi.gpu_count() > 0
    except NoGPU:
        return False


def _run_without_gpu(opts: RunOptions, target, patterns: list[str] | None) -> None:
    """``run`` on a machine without a GPU: the catalog mapped (verified) by the instruction
    suite, and the report written from the shipped H100 data."""
    from gpudissect.report.read.shipped import SHIPPED, shipped_results
    from gpudissect.suites import suite_module

    mapping = suite_module("instructions", "commands")
    data = shipped_results()
    if data is None:
        fail(f"no NVIDIA GPU here, and no shipped data/{SHIPPED} (of a source checkout) to write the "
             "report from: run on a GPU, or `gpudissect report --data DIR`")
    target = target or target_of(DEFAULT_ARCH)
    toolchain_ok()
    console.print(f"no NVIDIA GPU here: mapping the catalog for {target.arch} and writing the report from "
                  f"the shipped {SHIPPED.upper()} data ({data})", markup=False, highlight=False, soft_wrap=True)
    s = mapping.map_selected(opts.manner.catalog, patterns, target, opts.manner.jobs)
    write_reports(data, opts.reports.report, opts.reports.markdown)
    mapping.some_verified(s, target.arch)


def _run_on_gpus(opts: RunOptions) -> None:
    """``run --gpus``: the same run command once per GPU, in parallel processes; then compare."""
    import os

    from gpudissect.device.device import NoGPU
    from gpudissect.device.multi import gpu_indices, run_per_gpu

    choice, place, manner, processes = opts.choice, opts.place, opts.manner, opts.processes
    suite = choice.suite or "instructions"
    try:
        idx = gpu_indices(processes.gpus)
    except (ValueError, NoGPU) as e:
        fail(str(e))
    store = open_store(place.db, create=True)  # create the schema once, before the writers start
    path = store.path.resolve()
    store.close()
    per_jobs = manner.jobs or max(1, (os.cpu_count() or 2) // len(idx))

    def args(i: int) -> list[str]:
        a = ["run", *(choice.pattern or []), "--suite", suite, "--db", str(path), "--gpu", str(i),
             "--jobs", str(per_jobs), "--timeout", str(processes.timeout),
             "--quick" if manner.quick else "--no-quick", "--resume" if manner.resume else "--new",
             "--selfcheck" if manner.selfcheck else "--no-selfcheck",
             "--isolate" if processes.isolate else "--no-isolate"]
        if place.arch:
            a += ["--arch", place.arch]
        for c in manner.catalog or []:
            a += ["--catalog", str(c)]
        return a

    console.print(f"{len(idx)} GPU(s): {', '.join(map(str, idx))} -> {path}")
    codes = run_per_gpu(idx, args, echo=lambda line: console.print(line, highlight=False,
                                                                    soft_wrap=True, markup=False))
    bad = {i: c for i, c in codes.items() if c != 0}
    if len(idx) > 1:
        print_comparison(open_store(path), suite, None, top=10)
    if bad:
        fail("GPU(s) " + ", ".join(f"{i} (exit {c})" for i, c in bad.items())
             + " failed; their stored work is kept: run the same command to resume", code=1)


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
