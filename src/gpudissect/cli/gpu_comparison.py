"""``gpudissect compare-gpus``: the spread of each measurement across the GPUs of one database
(the runs that ``run --gpus`` makes, one per GPU), printed and written as JSON."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from gpudissect.terminal import console, fail, open_store, outputs_ok, writing


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
    store = open_store(db)
    doc = print_comparison(store, suite, run_ids or None, top)
    if json_path:
        with writing(json_path) as (tmp,):
            write_json(doc, tmp)
        console.print(f"{len(doc['records'])} records -> {json_path}")


def print_comparison(store, suite: str, run_ids: list[int] | None, top: int) -> dict:
    """The GPUs compared, the ``top`` largest spreads and the conclusions printed; the document."""
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


def register(app: typer.Typer) -> None:
    app.command("compare-gpus")(compare_gpus_cmd)
