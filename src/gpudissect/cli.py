"""The gpudissect command line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .catalog.model import CatalogError, UnknownVariant, load_catalog

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Discover and quantify the undisclosed architecture of NVIDIA GPUs.")
console = Console()
err = Console(stderr=True)


def fail(msg: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {msg}", highlight=False)
    raise typer.Exit(code)


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
    json_path: Path = typer.Option(None, "--json", help="write the map as JSON"),
    csv_path: Path = typer.Option(None, "--csv", help="write the map as CSV"),
    jobs: int = typer.Option(0, help="parallel compile jobs (0: 2 x cores)"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no table, only the summary"),
) -> None:
    """PTX->SASS map of the catalog, verified (needs no GPU)."""
    from .pipeline.mapper import map_catalog, summary, write_csv, write_json
    from .toolchain.tools import ToolchainMissing, find_tool

    cat = _catalog(catalog)
    try:
        vs = cat.select(pattern)
        find_tool("ptxas")
        find_tool("nvdisasm")
    except UnknownVariant as e:
        fail(str(e))
    except ToolchainMissing as e:
        fail(str(e))
    t0 = time.perf_counter()
    with _progress() as prog:
        task = prog.add_task(f"mapping {arch}", total=len(vs))
        recs = map_catalog(vs, arch, jobs=jobs or None, progress=lambda r: prog.advance(task))
    dt = time.perf_counter() - t0
    if not quiet:
        t = Table("variant", "status", "SASS (one instance)", "strategy", "reason", show_lines=False)
        for r in recs:
            style = {"verified": "green", "unsupported": "yellow"}.get(r.status, "red")
            t.add_row(r.variant, f"[{style}]{r.status}[/]", " + ".join(r.sass), r.strategy or "",
                      (r.reason or "")[:90])
        console.print(t)
    s = summary(recs)
    console.print(f"{s['total']} variants on {arch}: " + ", ".join(f"{k} {v}" for k, v in s.items() if k != "total")
                  + f"  ({dt:.1f} s)")
    if json_path:
        write_json(recs, json_path)
    if csv_path:
        write_csv(recs, csv_path)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
