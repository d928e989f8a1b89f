"""``gpudissect fleet``: the same per-GPU profile on every GPU of a Ray cluster, gathered into one
database, and the GPUs that deviate from the fleet listed with their evidence."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from gpudissect.catalog.model import CatalogError
from gpudissect.cli.option_groups import grouped
from gpudissect.cli.report_commands import write_reports
from gpudissect.cli.run_command import ready, suite_plan
from gpudissect.terminal import console, default_db, fail, open_store, writing


@dataclass
class FleetPlace:
    """The cluster and the fleet's database."""

    address: Annotated[str, typer.Option(
        "--address", help="the Ray cluster: auto | HOST:PORT (default: start a local Ray instance on "
                          "this machine)")] = None
    db: Annotated[Path, typer.Option(
        "--db", help="the fleet's results database (default $GPUDISSECT_DB or ./results.db)")] = None


@dataclass
class FleetManner:
    """The outlier threshold, and how each GPU's task runs."""

    threshold: Annotated[float, typer.Option(
        "--threshold", help="relative deviation from the fleet median that makes a GPU an outlier "
                            "(default from the profile: 0.05)")] = None
    timeout: Annotated[float, typer.Option(
        "--timeout", help="seconds one GPU's task may take before it is cancelled and retried once "
                          "(default from the profile)")] = None
    resume: Annotated[bool, typer.Option(
        "--resume/--new", help="resume the fleet stored in --db (its GPUs already done are skipped)")] = True
    isolate: Annotated[bool, typer.Option(
        "--isolate/--no-isolate", help="each GPU in a worker process with a watchdog per call (as for "
                                       "`run`)")] = True
    arch: Annotated[str, typer.Option(help="architecture (default: each GPU's)")] = ""
    jobs: Annotated[int, typer.Option(help="parallel compile jobs per GPU (0: the node's cores)")] = 0


@dataclass
class FleetFiles:
    """The files written at the end (None: none)."""

    json_path: Annotated[Path, typer.Option(
        "--json", help="write the fleet's outliers document as JSON")] = None
    report: Annotated[Path, typer.Option(
        "--report", help="write the HTML report of the database, with its fleet page, here")] = None


@grouped
def fleet_cmd(
    pattern: Annotated[list[str], typer.Argument(
        help="what every GPU runs: SUITE:PATTERN items (bare patterns: instruction variants), as for "
             "`run`; default: the quick fleet profile (gpudissect/data/fleet.toml)")] = None,
    *,
    place: FleetPlace,
    manner: FleetManner,
    files: FleetFiles,
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

    prof = load_profile(suite_plan(None, pattern)[0] if pattern else None)
    try:
        prof.validate()
    except (SuiteInputError, CatalogError) as e:
        fail(str(e))
    th = prof.threshold if manner.threshold is None else manner.threshold
    if not th > 0 or (manner.timeout is not None and not manner.timeout > 0):
        fail("--threshold and --timeout must be positive")
    ready(files.report, None, place.db or default_db(), *([files.json_path] if files.json_path else []))
    store = open_store(place.db, create=True)
    try:
        # a local instance offers the fake GPUs of GPUDISSECT_FAKE_DEVICE (tests, demonstrations)
        ray = connect(place.address,
                      **({"num_gpus": fake_gpu_count()} if fake_gpu_count() and not place.address else {}))
        state = run_fleet(ray, store, prof, resume=manner.resume, isolate=manner.isolate, arch=manner.arch,
                          jobs=manner.jobs, timeout_s=manner.timeout,
                          echo=lambda s: console.print(s, markup=False, highlight=False))
    except FleetError as e:
        fail(str(e))
    doc = analyse(store, state, th)
    store.set_meta(OUTLIERS_META, doc)
    for line in conclusions(doc):
        console.print(f"- {line}", markup=False, highlight=False, soft_wrap=True)
    path = store.path
    store.close()
    if files.json_path:
        with writing(files.json_path) as (tmp,):
            tmp.write_text(_json.dumps(doc, indent=1) + "\n")
    write_reports(path, files.report, None)
    if doc["failed"]:
        fail(f"{len(doc['failed'])} GPU(s) failed (each said why above); the others' results are in {path}: "
             "the same command resumes the failed ones", code=1)


def register(app: typer.Typer) -> None:
    app.command("fleet")(fleet_cmd)
