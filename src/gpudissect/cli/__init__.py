"""The gpudissect command line: the typer ``app`` and its entry point :func:`main`.

Each command family is a module of this package with ``register(app)``: the runs (``run``;
``fleet``; ``compare-gpus``), the stored results (``show``, ``export``, ``audit``), the report
(``report``, ``simexport``, ``compare``) and the tables' advice (``predict``, ``advise``). A suite
that owns commands registers them from its own folder, found through the suite registry
(``suites.suite_commands``): the instruction suite's ``catalog``, ``map`` and ``time``. What the
commands share on the terminal (the error line, progress, Ctrl-C, checked outputs) is
``gpudissect.terminal``.
"""

from __future__ import annotations

import sys

import typer

from gpudissect.cli import (
    advice_commands,
    fleet_command,
    gpu_comparison,
    report_commands,
    results_commands,
    run_command,
)
from gpudissect.suites import suite_commands
from gpudissect.terminal import console, err

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Discover and quantify the undisclosed architecture of NVIDIA GPUs.")

# the order in which `gpudissect --help` lists the commands (one not named here comes last)
HELP_ORDER = ("catalog", "map", "run", "compare-gpus", "show", "export", "time", "predict", "fleet",
              "audit", "advise", "report", "simexport", "compare")


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


for family in (run_command, gpu_comparison, results_commands, advice_commands, fleet_command,
               report_commands, *suite_commands()):
    family.register(app)
app.registered_commands.sort(
    key=lambda c: HELP_ORDER.index(c.name) if c.name in HELP_ORDER else len(HELP_ORDER))


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
