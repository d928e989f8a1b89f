"""The stored results: ``show`` (a table per variant), ``export`` (JSON, CSV, Parquet, markdown,
a suite's document, the tensor layouts) and ``audit`` (a data set checked against the physical
limits and its own provenance)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from gpudissect.cli.option_groups import DEFAULT_ARCH
from gpudissect.terminal import console, fail, open_store, outputs_ok, writing

# the measures of show's table of variants, each in its own column: (measure, heading)
SHOW_COLUMNS = (("latency", "latency"), ("issue_interval", "issue interval"),
                ("throughput_peak", "peak throughput"))
# what a measure is, said under show's table of one variant where the name alone does not say it
MEASURE_LABELS = {
    "latency_hw": "true latency below ptxas: the smallest stall count (patched in the cubin's control "
                  "bits) at which the dependent chain, and every larger stall, still computes the "
                  "unpatched kernel's values",
}


def show_answer(recs: list[dict]) -> str:
    """One measure of one variant as ``show`` says it: the value of its one record, or the
    lowest and highest of its records (configurations, sizes, ...) and how many there are."""
    from gpudissect.report.present.fmt import fmt_sig as _fmt_value
    from gpudissect.report.present.fmt import home_note

    vals = [r["value"] for r in recs if r.get("value") is not None]
    if not vals:
        return "-"
    if len(recs) == 1:
        note = home_note(recs[0].get("params"))
        return _fmt_value(vals[0]) + (f" ({note})" if note else "")
    lo, hi = min(vals), max(vals)
    span = _fmt_value(lo) if lo == hi else f"{_fmt_value(lo)} .. {_fmt_value(hi)}"
    return f"{span} ({len(recs)} records)"


def _units(recs: list[dict]) -> str:
    return " | ".join(u for u in dict.fromkeys(r.get("unit") or "" for r in recs) if u)


def _flags(recs: list[dict]) -> str:
    return ", ".join(sorted({f.split(":")[0] for r in recs for f in r.get("flags") or []}))


def _show_records(db: Path | None, data: Path | None) -> tuple[list[dict], str, str]:
    """The records ``show`` reads (each with variant, measure, value, unit, flags, sass, cls,
    suite), the name of their source and what it holds (its suites)."""
    if data is not None:
        from gpudissect.report.read.results import LoadError, load_result_set

        try:
            rs = load_result_set(data)
        except LoadError as e:
            fail(str(e))
        if rs.reference is not None:
            fail(f"{data}: a published reference, not measurements (show reads a data directory, suite JSON or database)")
        return rs.records(), str(data), ", ".join(rs.suites()) or "no suite"
    store = open_store(db)
    suite_of = {r["id"]: r["suite"] for r in store.runs()}
    recs = [{**r, "suite": suite_of.get(r["run_id"])} for r in store.results()]
    return recs, store.name, ", ".join(sorted(set(suite_of.values()))) or "no run"


def show_cmd(
    pattern: str = typer.Argument("*", help="variant name or glob"),
    db: Path = typer.Option(None, "--db"),
    data: Path = typer.Option(None, "--data", help="read a data directory (every suite in it, e.g. data/h200) "
                              "or a suite JSON instead of a database"),
    cls: str = typer.Option(None, "--class", help="instruction class (int, fp32, mufu, ...)"),
    opcode: str = typer.Option(None, help="opcode (add, mad, ...)"),
    type_: str = typer.Option(None, "--type", help="PTX type suffix (u32, f16x2, ...)"),
) -> None:
    """Stored results. A glob: a table of its variants, latency, issue interval and peak
    throughput each in its own column with its unit. One variant: every measure of it, one
    line each with its unit and flags. An unknown variant: the nearest names, exit 2."""
    import difflib
    import fnmatch

    if db is not None and data is not None:
        fail("give --db or --data, not both")
    recs, source, holds = _show_records(db, data)
    names = list(dict.fromkeys(r["variant"] for r in recs))
    if not names:
        fail(f"{source} holds no results ({holds})")
    by: dict[str, list[dict]] = {}
    for r in recs:
        name = r["variant"]
        if not fnmatch.fnmatchcase(name, pattern):
            continue
        if opcode and name.split(".")[0] != opcode:
            continue
        if type_ and name.split(".")[-1] != type_:
            continue
        if cls and not (r.get("cls") or "").startswith(cls):
            continue
        by.setdefault(name, []).append(r)
    if not by:
        what = f"no variant '{pattern}'" + "".join(f" with {o} {v}" for o, v in (
            ("--class", cls), ("--opcode", opcode), ("--type", type_)) if v)
        near = difflib.get_close_matches(pattern, names, n=5, cutoff=0.5)
        fail(f"{what} in {source} (it holds {len(names)} variants of suite {holds})"
             + (f"; nearest: {', '.join(near)}" if near else ""))
    if len(by) == 1:
        _show_variant(*next(iter(by.items())))
        return
    heads = []
    for m, head in SHOW_COLUMNS:
        unit = _units([r for rs in by.values() for r in rs if r["measure"] == m])
        heads.append(f"{head} ({unit})" if unit else head)
    t = Table("variant", "SASS", *heads, "other measures", "flags")
    for name, rs in by.items():
        cells = [show_answer([r for r in rs if r["measure"] == m]) for m, _ in SHOW_COLUMNS]
        others = list(dict.fromkeys(r["measure"] for r in rs if r["measure"] not in dict(SHOW_COLUMNS)))
        more = ", ".join(others[:2]) + (f" +{len(others) - 2}" if len(others) > 2 else "")
        sass = next((r.get("sass") for r in rs if r.get("sass")), None) or []
        t.add_row(name, " + ".join(sass)[:60], *cells, more, _flags(rs))
    console.print(t)


def _show_variant(name: str, recs: list[dict]) -> None:
    """Every measure of one variant: one line each with its answer, unit and flags."""
    suite = next((r["suite"] for r in recs if r.get("suite")), None)
    sass = next((r.get("sass") for r in recs if r.get("sass")), None) or []
    console.print(f"{name}" + (f"  ({suite} suite)" if suite else "") + (f"  SASS: {' + '.join(sass)}" if sass else ""),
                  highlight=False)
    t = Table("measure", "value", "unit", "flags")
    measures: dict[str, list[dict]] = {}
    for r in recs:
        measures.setdefault(r["measure"], []).append(r)
    for m, rs in measures.items():
        t.add_row(m, show_answer(rs), _units(rs), _flags(rs))
    console.print(t)
    for line in measure_notes(measures):
        console.print(line, highlight=False, markup=False)


def measure_notes(measures: dict[str, list[dict]]) -> list[str]:
    """Lines under one variant's table: what a labelled measure is, and for the true latency its
    evidence (ptxas's stall, the -O3 slope, the sweep: stall:cycles per instance, x = wrong
    values, ! = the launch failed)."""
    from gpudissect.report.present.fmt import fmt_sig

    out = []
    for m, label in MEASURE_LABELS.items():
        if m not in measures:
            continue
        out.append(f"{m}: {label}")
        for r in measures[m]:
            p = r.get("params") or {}
            sweep = " ".join(f"{d['stall']}:" + (fmt_sig(d["cycles_per_instance"])
                                                  if d.get("cycles_per_instance") is not None else "-")
                             + ("" if d.get("correct") else "x" if d.get("correct") is False else "!")
                             for d in p.get("sweep") or [])
            o3 = p.get("latency_o3")
            out.append(f"  {p.get('opcode', '-')}: ptxas stall {p.get('ptxas_stall', '-')}, -O3 slope "
                       f"{fmt_sig(o3) if o3 is not None else '-'}, sweep {sweep or '-'}")
    return out


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
    markdown; 'suite': one run with its provenance and conclusions (data/<gpu>/<suite>.json.xz;
    xz for a .xz name, gzip for a .gz name)."""
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
                    else [{**r, "suite": None} for r in records(open_store(db), run_id)])
            with writing(out) as (tmp,):
                n = write_table(recs, tmp, fmt)
        except (LoadError, ExportError) as e:
            fail(str(e))
        console.print(f"{n} records -> {out}")
        return
    store = open_store(db)
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


def audit_cmd(path: Path = typer.Argument(..., help="a data directory, suite JSON file or results database")) -> None:
    """Check a data set: every clean throughput within its physical limit, nothing timed from a
    kernel below -O3, provenance complete, one GPU, flags consistent with values. One line per
    problem; exit 1 when there is any."""
    from gpudissect.audit import main as audit_main

    code = audit_main(path, DEFAULT_ARCH)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("show")(show_cmd)
    app.command("export")(export_cmd)
    app.command("audit")(audit_cmd)
