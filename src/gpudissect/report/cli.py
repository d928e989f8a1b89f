"""Commands of the results layer: report (HTML, --markdown, --accel-sim), simexport, compare.

Registered on the main typer app by :func:`register` (one line in ``gpudissect.cli``).
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
err = Console(stderr=True)


def _fail(msg: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _source(data: Path | None, db: Path | None):
    from gpudissect.report.load import LoadError, load_result_set
    from gpudissect.store.db import default_path

    if data and db:
        _fail("give --data or --db, not both")
    spec = data or db
    if spec is None:
        if default_path().exists():
            spec = default_path()
        else:
            _fail(f"no results: give --data DIR (e.g. data/h100) or --db FILE ({default_path()} does not exist)")
    try:
        return load_result_set(spec), (Path(spec) if Path(spec).is_dir() else None)
    except LoadError as e:
        _fail(str(e))


def report_cmd(
    out: Path = typer.Option(None, "--out", "-o", help="output file (default report.html, "
                             "timing-reference.md with --markdown, accel-sim.config with --accel-sim)"),
    data: Path = typer.Option(None, "--data", help="data directory with <suite>.json documents (e.g. data/h100)"),
    db: Path = typer.Option(None, "--db", help="results database (.db or .db.gz): the latest run of each suite"),
    markdown: bool = typer.Option(False, "--markdown", help="write the timing reference (markdown) instead"),
    accel_sim: bool = typer.Option(False, "--accel-sim", help="write the GPGPU-Sim/Accel-Sim config fragment "
                                   "(and its JSON beside it) instead"),
) -> None:
    """Self-contained HTML report (offline), the timing reference (--markdown), or the simulator
    export (--accel-sim), from a data directory or a results database (no GPU needed)."""
    if markdown and accel_sim:
        _fail("choose one of --markdown and --accel-sim")
    rs, data_dir = _source(data, db)
    if accel_sim:
        _simexport(rs, out or Path("accel-sim.config"), None)
        return
    if markdown:
        from gpudissect.report.markdown import timing_reference

        out = out or Path("timing-reference.md")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(timing_reference(rs))
        console.print(f"timing reference of {rs.gpu} ({', '.join(rs.suites())}) -> {out}")
        return
    try:
        import jinja2  # noqa: F401
    except ImportError:
        _fail("the HTML report needs jinja2 and matplotlib: pip install 'gpudissect[report]'")
    from gpudissect.report.html import write_html

    out = out or Path("report.html")
    write_html(rs, out, data_dir)
    console.print(f"report of {rs.gpu} ({', '.join(rs.suites())}) -> {out} ({out.stat().st_size // 1024} KiB)")


def _simexport(rs, out: Path, json_out: Path | None) -> None:
    from gpudissect.report.simexport import accel_sim_config, simexport_data

    d = simexport_data(rs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(accel_sim_config(d))
    json_out = json_out or out.with_suffix(".json")
    json_out.write_text(json.dumps(d, indent=1) + "\n")
    n_set = sum(o["value"] is not None for o in d["options"])
    console.print(f"{n_set} of {len(d['options'])} options measured -> {out}, {json_out}")


def simexport_cmd(
    out: Path = typer.Option(Path("accel-sim.config"), "--out", "-o", help="config fragment"),
    json_out: Path = typer.Option(None, "--json", help="the same data as JSON (default: OUT with .json)"),
    data: Path = typer.Option(None, "--data", help="data directory (e.g. data/h100)"),
    db: Path = typer.Option(None, "--db", help="results database"),
) -> None:
    """GPGPU-Sim / Accel-Sim configuration fragment from the measurements (each line names its
    measurement; unmeasured options are commented out with the reason), plus a JSON."""
    rs, _ = _source(data, db)
    _simexport(rs, out, json_out)


def compare_cmd(
    a: str = typer.Argument(..., help="result set A: data directory, suite JSON, results DB, or 'a100'"),
    b: str = typer.Argument(..., help="result set B (same kinds)"),
    threshold: float = typer.Option(0.10, help="highlight relative differences at least this large"),
    only_diff: bool = typer.Option(False, "--only-diff", help="show only the quantities that differ"),
    all_keys: bool = typer.Option(False, "--all", help="also quantities present on one side only"),
    pattern: str = typer.Option(None, "--filter", help="glob on the quantity key (e.g. 'instr/add.*')"),
    limit: int = typer.Option(200, help="rows printed on the terminal (files get all)"),
    md: Path = typer.Option(None, "--markdown", help="write the comparison as markdown"),
    html: Path = typer.Option(None, "--html", help="write the comparison as HTML"),
    json_out: Path = typer.Option(None, "--json", help="write the comparison as JSON"),
) -> None:
    """Two result sets side by side (two GPUs, drivers or runs; or a GPU against the published
    A100 reference 'a100'), differences highlighted."""
    from gpudissect.report.compare import compare, compare_document, compare_html, compare_markdown
    from gpudissect.report.load import LoadError, load_result_set

    try:
        ra, rb = load_result_set(a), load_result_set(b)
    except LoadError as e:
        _fail(str(e))
    rows = compare(ra, rb, threshold, include_one_sided=all_keys)
    if pattern:
        rows = [r for r in rows if fnmatch.fnmatchcase(r.key, pattern)]
    if only_diff:
        rows = [r for r in rows if r.differs]
    if not rows:
        console.print("no quantities in common" + (f" matching '{pattern}'" if pattern else ""))
    t = Table(title=f"{ra.gpu} vs {rb.gpu}")
    t.add_column("quantity", overflow="fold", min_width=20)
    for name in (f"A: {ra.label}", f"B: {rb.label}"):
        t.add_column(name, justify="right", min_width=6)
    t.add_column("unit", min_width=6)
    t.add_column("B vs A", justify="right", min_width=6)
    t.add_column("notes", no_wrap=True, overflow="ellipsis", max_width=40)
    for r in rows[:limit]:
        from gpudissect.report.compare import _show

        rel = "" if r.rel is None else f"{r.rel:+.0%}"
        style = "bold red" if r.differs else None
        notes = "; ".join(x for x in ((r.a.note if r.a else ""), (r.b.note if r.b else "")) if x)
        t.add_row(escape(r.key), _show(r.a), _show(r.b), escape((r.a or r.b).unit), rel, escape(notes),
                  style=style)
    if rows:
        console.print(t)
    n = sum(r.differs for r in rows)
    console.print(f"{len(rows)} quantities compared, [bold red]{n}[/] differ by {threshold:.0%} or more"
                  + (f" (first {limit} shown)" if len(rows) > limit else ""))
    ref = ra.reference or rb.reference
    if ref:
        console.print(f"reference: {ref['source']['citation']}", markup=False, highlight=False, soft_wrap=True)
    for path, text in ((md, lambda: compare_markdown(ra, rb, rows, threshold)),
                       (html, lambda: compare_html(ra, rb, rows, threshold)),
                       (json_out, lambda: json.dumps(compare_document(ra, rb, rows, threshold), indent=1) + "\n")):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text())
            console.print(f"-> {path}")


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
    app.command("simexport")(simexport_cmd)
    app.command("compare")(compare_cmd)
