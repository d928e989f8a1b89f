"""The options of ``gpudissect run``, in groups: what to run, where, how, in which processes,
and the report files written after it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer


@dataclass
class RunChoice:
    """What to run."""

    pattern: Annotated[list[str], typer.Argument(
        help="what to run: names or globs within --suite; without --suite, SUITE:PATTERN (e.g. "
             "memory:latency/*) picks suites and their items, and a bare pattern is an instruction "
             "variant (the instructions suite alone, as --suite instructions); all when omitted")] = None
    suite: Annotated[str, typer.Option(
        help="one suite: instructions, memory, tensor, behaviour (default: every suite in this order "
             "into one database, then the report and timing reference)")] = None


@dataclass
class RunPlace:
    """Where: the results database, the architecture, the GPU."""

    db: Annotated[Path, typer.Option(
        "--db", help="results database (default $GPUDISSECT_DB or ./results.db)")] = None
    arch: Annotated[str, typer.Option(help="architecture (default: the GPU's)")] = ""
    gpu: Annotated[int, typer.Option(help="GPU index")] = 0


@dataclass
class RunManner:
    """How much and how: the sweep's size, resuming, compile jobs, the instruction suite's options."""

    quick: Annotated[bool, typer.Option(help="fewer lengths/configurations; only the studies a key quantity or the "
                                             "main table reads, no tensor layouts or wmma variants (a smoke run, "
                                             "labelled so in every output)")] = False
    resume: Annotated[bool, typer.Option(
        "--resume/--new", help="resume an unfinished run of this suite and GPU")] = True
    jobs: Annotated[int, typer.Option(help="parallel compile jobs (0: cores)")] = 0
    selfcheck: Annotated[bool, typer.Option(
        "--selfcheck/--no-selfcheck", help="instructions: time a few instructions through nvcc too")] = True
    catalog: Annotated[list[Path], typer.Option(
        "--catalog", help="catalog TOML file(s) (instructions suite)")] = None

    def suite_options(self) -> dict:
        """The options that the suites read (``Context.options``)."""
        return {"catalog": list(self.catalog or []), "selfcheck": self.selfcheck}


@dataclass
class RunProcesses:
    """The processes: the GPU in a worker with a watchdog, one process per GPU."""

    isolate: Annotated[bool, typer.Option(
        "--isolate/--no-isolate", help="run the GPU in a worker process with a watchdog (a fault or hang "
                                       "is recorded and the sweep goes on in a fresh worker)")] = True
    timeout: Annotated[float, typer.Option(
        "--timeout", help="seconds one GPU call may take (--isolate)")] = 60.0
    gpus: Annotated[str, typer.Option(
        "--gpus", help="'all' or '0,1' (with --suite): one process per GPU, each its own run; then "
                       "their comparison")] = ""


@dataclass
class RunReports:
    """The report files written after the run (None: none)."""

    report: Annotated[Path, typer.Option(
        "--report", help="write the HTML report of the database here (default without --suite: "
                         "report.html; with --suite: none)")] = None
    markdown: Annotated[Path, typer.Option(
        "--markdown", help="write the timing reference here (default without --suite: "
                           "timing-reference.md; with --suite: none)")] = None


@dataclass
class RunOptions:
    """Every option of ``run`` (``--help`` lists them in this order)."""

    choice: RunChoice
    place: RunPlace
    manner: RunManner
    processes: RunProcesses
    reports: RunReports
