"""The stored results: ``show`` (a table per variant), ``export`` (JSON, CSV, Parquet, markdown,
a suite's document, the tensor layouts) and ``audit`` (a data set checked against the physical
limits and its own provenance)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from gpudissect.cli.option_groups import DEFAULT_ARCH
from gpudissect.terminal import console, fail, open_store, outputs_ok, writing


def show_cmd(
    pattern: str = typer.Argument("*", help="variant glob"),
    db: Path = typer.Option(None, "--db"),
    cls: str = typer.Option(None, "--class", help="instruction class (int, fp32, mufu, ...)"),
    opcode: str = typer.Option(None, help="opcode (add, mad, ...)"),
    type_: str = typer.Option(None, "--type", help="PTX type suffix (u32, f16x2, ...)"),
) -> None:
    """Table of stored results: latency and peak throughput per variant."""
    store = open_store(db)
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
