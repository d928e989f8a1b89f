"""Commands of the results layer: ``report`` (HTML, --markdown, --accel-sim), ``simexport`` and
``compare``; and :func:`write_reports`, the report files that ``run`` and ``fleet`` write at the end."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpudissect.cli.option_groups import grouped
from gpudissect.outputs import OutputError, write_texts
from gpudissect.terminal import console, fail, fails_on, outputs_ok


def _source(data: Path | None, db: Path | None):
    from gpudissect.report.read.results import LoadError, load_result_set
    from gpudissect.store.db import default_path

    if data and db:
        fail("give --data or --db, not both")
    spec = data or db
    if spec is None:
        if default_path().exists():
            spec = default_path()
        else:
            fail(f"no results: give --data DIR (e.g. data/h100) or --db FILE ({default_path()} does not exist)")
    try:
        return load_result_set(spec), (Path(spec) if Path(spec).is_dir() else None)
    except LoadError as e:
        fail(str(e))


def report_cmd(
    out: Path = typer.Option(None, "--out", "-o", help="output file (default report.html, "
                             "timing-reference.md with --markdown, accel-sim.config with --accel-sim)"),
    data: Path = typer.Option(None, "--data", help="data directory with <suite>.json[.xz|.gz] documents "
                             "(e.g. data/h100)"),
    db: Path = typer.Option(None, "--db", help="results database (.db, .db.gz or .db.xz): the latest run of each suite"),
    markdown: bool = typer.Option(False, "--markdown", help="write the timing reference (markdown) instead"),
    accel_sim: bool = typer.Option(False, "--accel-sim", help="write the GPGPU-Sim/Accel-Sim config fragment "
                                   "(and its JSON beside it) instead"),
    compare_with: list[str] = typer.Option(None, "--compare", help="another result set to set beside this "
                                           "one in a 'GPU comparison' section (data directory, suite JSON, "
                                           "results DB, or 'a100'); repeat for more"),
    threshold: float = typer.Option(0.10, help="with --compare: highlight relative differences at least "
                                    "this large"),
) -> None:
    """Self-contained HTML report (offline), the timing reference (--markdown), or the simulator
    export (--accel-sim), from a data directory or a results database (no GPU needed)."""
    if markdown and accel_sim:
        fail("choose one of --markdown and --accel-sim")
    if compare_with and (markdown or accel_sim):
        fail("--compare goes with the HTML report, not with --markdown or --accel-sim")
    if accel_sim:
        out = out or Path("accel-sim.config")
        outputs_ok(out, out.with_suffix(".json"))
        rs, _ = _source(data, db)
        _simexport(rs, out, None)
        return
    from gpudissect.report.assemble import write  # the files `gpudissect run` writes too

    if markdown:
        out = out or Path("timing-reference.md")
        outputs_ok(out)
        rs, _ = _source(data, db)
        with fails_on(OutputError):
            write.markdown(rs, out)
        return
    try:
        import jinja2  # noqa: F401
    except ImportError:
        fail("the HTML report needs jinja2 and matplotlib: pip install 'gpudissect[report]'")
    out = out or Path("report.html")
    outputs_ok(out)
    rs, data_dir = _source(data, db)
    others = _load_sets(compare_with, at_least=1) if compare_with else []
    with fails_on(OutputError):
        write.html(rs, out, data_dir, others, threshold)


def _simexport(rs, out: Path, json_out: Path | None) -> None:
    """The config fragment and its JSON (paths checked by the caller), written together."""
    from gpudissect.report.assemble.simexport import accel_sim_config, simexport_data

    d = simexport_data(rs)
    json_out = json_out or out.with_suffix(".json")
    with fails_on(OutputError):
        write_texts([(out, lambda: accel_sim_config(d)), (json_out, lambda: json.dumps(d, indent=1) + "\n")])
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
    outputs_ok(out, json_out or out.with_suffix(".json"))
    rs, _ = _source(data, db)
    _simexport(rs, out, json_out)


def _and(names: list[str]) -> str:
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def _load_sets(specs: list[str], at_least: int = 2) -> list:
    from gpudissect.report.read.results import LoadError, load_result_set

    if len(specs) < at_least:
        fail("compare needs at least two result sets (e.g. gpudissect compare data/h100 a100)")
    try:
        return [load_result_set(s) for s in specs]
    except LoadError as e:
        fail(str(e))


def _compare_table(sets: list, rows: list, limit: int) -> Table:
    """The comparison on the terminal: a row per quantity, a column per set, then each later
    set's difference to the first; rows that differ in red (bold where every later set does)."""
    from gpudissect.report.assemble.compare import headings, rel_text, show_value

    heads, rel_heads = headings(sets, terminal=True)
    t = Table(title=" vs ".join(s.gpu for s in sets))
    t.add_column("quantity", overflow="fold", min_width=20)
    for name in heads:
        t.add_column(escape(name), justify="right", min_width=6)
    t.add_column("unit", min_width=6)
    for name in rel_heads:
        t.add_column(name, justify="right", min_width=6)
    t.add_column("notes", no_wrap=True, overflow="ellipsis", max_width=40)
    for r in rows[:limit]:
        rels = [f"[bold]{rel_text(r, i) or 'differs'}[/]" if r.partial and r.diffs[i] else rel_text(r, i)
                for i in range(1, len(sets))]
        style = ("red" if r.partial else "bold red") if r.differs else None
        t.add_row(escape(r.label or r.key), *(escape(show_value(v)) for v in r.values), escape(r.unit), *rels,
                  escape(r.notes), style=style)
    return t


@dataclass
class CompareRows:
    """Which quantities are compared and shown: the key quantities unless asked for more."""

    threshold: Annotated[float, typer.Option(help="highlight relative differences at least this large")] = 0.10
    only_diff: Annotated[bool, typer.Option(
        "--only-diff", help="show only the quantities that differ (in any set)")] = False
    full: Annotated[bool, typer.Option(
        "--full", help="every quantity the sets have in common, not only the key quantities")] = False
    all_keys: Annotated[bool, typer.Option(
        "--all", help="every quantity, also those missing in some sets (--full and more)")] = False
    key: Annotated[bool, typer.Option(
        "--key", help="only the key quantities (data/metrics.toml groups: latency, bandwidth, sizes, "
                      "tensor peaks, instructions): the default, also without --filter")] = False
    pattern: Annotated[str, typer.Option(
        "--filter", help="glob on the quantity key (e.g. 'instr/add.*'); it selects from every quantity "
                         "unless --key")] = None
    limit: Annotated[int, typer.Option(help="rows printed on the terminal (files get all)")] = 200


@dataclass
class CompareFiles:
    """The files the comparison is written to (None: not asked for)."""

    md: Annotated[Path, typer.Option("--markdown", help="write the comparison as markdown")] = None
    html: Annotated[Path, typer.Option("--html", help="write the comparison as HTML")] = None
    json_out: Annotated[Path, typer.Option("--json", help="write the comparison as JSON")] = None


@grouped
def compare_cmd(
    specs: Annotated[list[str], typer.Argument(
        metavar="SETS", help="result sets, two or more: data directory, suite JSON, results DB, or "
                             "'a100' (the published A100 reference); each later set is compared with "
                             "the first. Or two or more PTX->SASS maps (gpudissect map --json)")],
    shown: CompareRows,
    files: CompareFiles,
) -> None:
    """Result sets side by side (two GPUs, drivers or runs; H100 vs H200 vs the published A100
    reference 'a100'; ...), each against the first, differences highlighted; or PTX->SASS maps
    of several architectures (data/<arch>/map.json.gz): SASS, status and stall counts side by side."""
    from gpudissect.report.assemble.compare import (
        compare_maps,
        comparison_document,
        comparison_html,
        comparison_markdown,
        key_rows,
        platform_lines,
        references,
        values,
    )

    threshold, all_keys, pattern = shown.threshold, shown.all_keys, shown.pattern
    md, html, json_out = files.md, files.html, files.json_out
    outputs_ok(md, html, json_out)
    if _compare_maps(specs, shown, files):
        return
    if shown.key and (shown.full or all_keys):
        fail("--key is the key quantities alone, --full and --all every quantity: give one of them")
    sets = _load_sets(specs)
    vmaps = [values(s) for s in sets]
    # the key view unless every quantity is asked for (--full, --all, or a --filter without --key)
    key = not (shown.full or all_keys or (pattern and not shown.key))
    rows = key_rows(vmaps, threshold) if key else []
    if key and not rows and not shown.key:  # sets without any key quantity: every quantity in common
        key = False
        console.print(f"{_and(specs)} have no key quantities (data/metrics.toml): every quantity in common shown",
                      highlight=False, soft_wrap=True)
    if not key:
        rows = compare_maps(vmaps, threshold, include_one_sided=all_keys)
    if not rows:
        fail(f"{_and(specs)} have no key quantities" if key else
             f"{_and(specs)} have no quantities in common" + ("" if all_keys else
             " (--all lists those missing in some sets)" if len(specs) > 2 else
             " (--all lists those present on one side only)"))
    if pattern:
        rows = [r for r in rows if fnmatch.fnmatchcase(r.key, pattern)]
        if not rows:
            fail(f"no quantity of {_and(specs)} matches '{pattern}'")
    n_common = len(rows)
    if shown.only_diff:
        rows = [r for r in rows if r.differs]
    if rows:
        console.print(_compare_table(sets, rows, shown.limit))
        n = sum(r.differs for r in rows)
        console.print(f"{len(rows)} quantities compared, [bold red]{n}[/] differ by {threshold:.0%} or more"
                      + (f" (first {shown.limit} shown)" if len(rows) > shown.limit else ""))
        if key and not shown.key:
            n_all = len(compare_maps(vmaps, threshold))
            console.print(f"the key quantities (data/metrics.toml); --full compares all {n_all:,} quantities "
                          "in common, --all also those missing in some sets", highlight=False, soft_wrap=True)
    else:  # --only-diff and nothing differs
        console.print(f"no differences: none of the {n_common} quantities compared differs by "
                      f"{threshold:.0%} or more")
    for ref in references(sets):
        console.print(f"reference: {ref['source']['citation']}", markup=False, highlight=False, soft_wrap=True)
    for line in platform_lines(sets):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    view = "key" if key else None
    outs = [(path, text) for path, text in (
        (md, lambda: comparison_markdown(sets, rows, threshold)),
        (html, lambda: comparison_html(sets, rows, threshold)),
        (json_out, lambda: json.dumps(comparison_document(sets, rows, threshold, view), indent=1) + "\n")) if path]
    with fails_on(OutputError):
        write_texts(outs)
    for path, _ in outs:
        console.print(f"-> {path}")


def _compare_maps(specs: list[str], shown: CompareRows, files: CompareFiles) -> bool:
    """PTX->SASS maps side by side (every spec a map file, ``data/<arch>/map.json.gz``): the
    summary per architecture, the variants whose SASS or status differs, the stall counts that
    differ; False where the specs are not maps (result sets, compared as such)."""
    from gpudissect.report.assemble.map_compare import (
        MapLoadError,
        cell,
        comparison_document,
        comparison_markdown,
        counts,
        is_map_file,
        load_map,
        map_rows,
    )

    maps_given = [is_map_file(s) for s in specs]
    if not any(maps_given):
        return False
    if not all(maps_given):
        fail("compare takes PTX->SASS maps only or result sets only: "
             f"{_and([s for s, m in zip(specs, maps_given, strict=True) if not m])} not a map")
    if len(specs) < 2:
        fail("compare needs at least two maps (e.g. gpudissect compare data/sm_80/map.json.gz "
             "data/sm_90/map.json.gz)")
    if files.html or shown.key or shown.full or shown.all_keys:
        fail("--html, --key, --full and --all are for result sets; maps compare to the terminal, --markdown "
             "and --json")
    try:
        maps = [load_map(s) for s in specs]
    except MapLoadError as e:
        fail(str(e))
    rows = map_rows(maps)
    if shown.pattern:
        rows = [r for r in rows if fnmatch.fnmatchcase(r.variant, shown.pattern)]
        if not rows:
            fail(f"no variant of {_and(specs)} matches '{shown.pattern}'")
    t = Table("architecture", "catalog", "variants", "applicable", "verified", "share", "emulated", "unverified",
              "not applicable", title="PTX->SASS maps")
    for m in maps:
        for cat, c in counts(m).items():
            share = f"{100 * c['verified'] / c['applicable']:.1f}%" if c["applicable"] else "-"
            t.add_row(m.arch, cat, *map(str, (c["total"], c["applicable"], c["verified"])), share,
                      *map(str, (c["emulated"], c["unverified"], c["not_applicable"])))
    console.print(t)
    differ = [r for r in rows if r.sass_differs or r.status_differs]
    d = Table("variant", *(escape(m.arch) for m in maps), title="SASS or status that differs")
    for r in differ[: shown.limit]:
        d.add_row(escape(r.variant), *(escape(cell(x)) for x in r.records),
                  style="red" if r.status_differs else None)
    if differ:
        console.print(d)
    n_stall = sum(len(r.stalls()) for r in rows)
    console.print(f"{len(rows)} variants: {sum(r.sass_differs for r in rows)} with different SASS, "
                  f"{sum(r.status_differs for r in rows)} verified on some architectures only, {n_stall} SASS "
                  "with different stall counts" + (f" (first {shown.limit} rows shown)" if len(differ) > shown.limit
                                                   else ""), highlight=False)
    command = "gpudissect compare " + " ".join(specs) + (f" --markdown {files.md}" if files.md else "")
    outs = [(path, text) for path, text in (
        (files.md, lambda: comparison_markdown(maps, rows, command)),
        (files.json_out, lambda: json.dumps(comparison_document(maps, rows), indent=1) + "\n")) if path]
    with fails_on(OutputError):
        write_texts(outs)
    for path, _ in outs:
        console.print(f"-> {path}")
    return True


def write_reports(spec: Path, report: Path | None, markdown: Path | None) -> None:
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
    with fails_on(OutputError):
        if markdown is not None:
            write.markdown(rs, markdown)
        if report is not None:
            write.html(rs, report, data_dir)


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
    app.command("simexport")(simexport_cmd)
    app.command("compare")(compare_cmd)
