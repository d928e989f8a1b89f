"""Exports of the store: the stable JSON interface, CSV, and the Table-V-style markdown."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from gpudissect.compressed import compress
from gpudissect.store.db import Store

JSON_KEYS = ("variant", "measure", "value", "unit", "flags", "sass", "gpu", "gpu_uuid", "cls",
             "params", "statistic", "fit", "samples", "strategy", "ptx_hash", "sass_hash", "run_id")


def records(store: Store, run_id: int | None = None) -> list[dict]:
    out = []
    for r in store.results(run_id):
        d = {k: r.get(k) for k in JSON_KEYS if k not in ("gpu",)}
        d["gpu"] = r["gpu_name"]
        out.append({k: d.get(k) for k in JSON_KEYS})
    return out


def write_json(store: Store, path: Path, run_id: int | None = None) -> int:
    recs = records(store, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recs, indent=1) + "\n")
    return len(recs)


SUITE_SCHEMA = "gpudissect.suite/1"
# evidence kept in the store alone (``<suite>.db.xz``), not in the compact suite document: per
# kernel, the warps' start/end windows on one SM, the per-SM spans behind a throughput point, the
# 95% spread of each grid cell (its rate stays; the raw repeats and statistics stay in both)
STORE_ONLY_SAMPLES = ("warp_windows_one_sm", "per_sm_span", "spread")


def _compact(rec: dict) -> dict:
    samples = rec.get("samples")
    if isinstance(samples, dict) and any(k in samples for k in STORE_ONLY_SAMPLES):
        rec = {**rec, "samples": {k: v for k, v in samples.items() if k not in STORE_ONLY_SAMPLES}}
    return rec


def suite_document(store: Store, run_id: int) -> dict:
    """One suite run as the stable per-suite JSON (``data/<gpu>/<suite>.json``):
    provenance of the run, the suite's summary (its conclusions, with the evidence named),
    and every record (without the evidence of ``STORE_ONLY_SAMPLES``, which the store keeps)."""
    run = store.run(run_id)
    return {
        "schema": SUITE_SCHEMA,
        "suite": run["suite"],
        "provenance": {k: run.get(k) for k in ("gpu_name", "gpu_uuid", "driver", "toolkit", "arch",
                                                "sm_count", "clocks_before", "clocks_after", "host",
                                                "started", "finished", "tool_version", "params", "timing")}
        | ({"platform": run["platform"]} if run.get("platform") else {}),
        "summary": store.get_meta(f"summary:{run_id}", {}),
        "samples_in_store_only": list(STORE_ONLY_SAMPLES),
        "records": [_compact(r) for r in records(store, run_id)],
    }


def write_document(doc: dict, path: Path) -> None:
    """A JSON document, compact, compressed when ``path`` ends in ``.xz`` (xz -9e, the shipped
    suite documents) or ``.gz`` (gzip)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    path.write_bytes(compress(text.encode(), path))


def write_suite_json(store: Store, path: Path, run_id: int) -> int:
    """The run as a suite document (``gpudissect.suite/1``)."""
    doc = suite_document(store, run_id)
    write_document(doc, path)
    return len(doc["records"])


LAYOUTS_SCHEMA = "gpudissect.layouts/1"


def layouts_document(store: Store, run_id: int) -> dict:
    """The fragment layouts of a tensor-suite run (``data/<gpu>/tensor-layouts.json``): per
    variant the layout found (mma: checked against the PTX reference; wmma: observed slot by
    slot and compared with the mma.sync layouts, tiled) and the variants not measured, with why."""
    run = store.run(run_id)
    lay, missing = {}, {}
    for r in store.results(run_id):
        if r["measure"] != "layout":
            continue
        if r["value"] is None:
            missing[r["variant"]] = r["flags"]
        else:
            lay[r["variant"]] = {**r["params"], "flags": r["flags"]}
    return {"schema": LAYOUTS_SCHEMA, "gpu": run["gpu_name"], "gpu_uuid": run["gpu_uuid"], "run_id": run_id,
            "note": "slot = (lane, element); element = register*elements_per_register + position (low bits "
                    "first); layout entries are [row, col]. mma: measured (A,B,D) product triples checked "
                    "against the PTX-reference labels ('reference_layout'); wmma.load/store: 'slots' observed "
                    "by raw data movement (-1: nothing arrived), 'tiling' compares each register with the "
                    "mma.sync layouts",
            "layouts": lay, "not_measured": missing}


def write_csv(store: Store, path: Path, run_id: int | None = None) -> int:
    recs = records(store, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "class", "measure", "params", "value", "unit", "flags", "sass", "gpu"])
        for r in recs:
            w.writerow([r["variant"], r["cls"], r["measure"], json.dumps(r["params"]),
                        "" if r["value"] is None else f"{r['value']:.4g}", r["unit"],
                        "; ".join(r["flags"] or []), " + ".join(r["sass"] or []), r["gpu"]])
    return len(recs)


def fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}g}" if abs(v) < 100 else f"{v:.0f}"


def table_v(recs: list[dict]) -> str:
    """A table shaped like Table V of the Ampere paper: PTX, SASS, latency, throughput."""
    by: dict[str, dict] = {}
    for r in recs:
        e = by.setdefault(r["variant"], {"cls": r["cls"], "sass": r["sass"], "flags": set()})
        if r["measure"] == "latency":
            e["lat"] = r["value"]
            e["flags"].update(f.split(":")[0] for f in r["flags"] or [])
            e["sass"] = r["sass"] or e["sass"]
        elif r["measure"] == "throughput_peak":
            e["tp"] = r["value"]
            e["cfg"] = (r["params"] or {}).get("smallest_within_5pct")
            e["flags"].update(f.split(":")[0] for f in r["flags"] or [])
    gpu = recs[0]["gpu"] if recs else "?"
    lines = [f"# Instruction latency and throughput ({gpu})", "",
             "Latency: cycles per dependent instruction (slope of a chain-length sweep). "
             "Throughput: warp-instructions per cycle per SM at saturation. Flags: see the JSON; "
             "a '-' means not measured (unverified SASS or unsupported).", ""]
    for cls in sorted({e["cls"] for e in by.values()}):
        lines += [f"## {cls}", "", "| PTX | SASS (one instance) | latency (cycles) | throughput (warp-instr/clk/SM) | flags |",
                  "|---|---|---:|---:|---|"]
        for name, e in by.items():
            if e["cls"] != cls:
                continue
            sass = " + ".join(e["sass"] or []) or "-"
            lines.append(f"| `{name}` | {sass} | {fmt(e.get('lat'))} | {fmt(e.get('tp'))} | "
                         f"{', '.join(sorted(e['flags']))} |")
        lines.append("")
    return "\n".join(lines)
