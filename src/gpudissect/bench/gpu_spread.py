"""Spread across GPUs: the same suite measured on several GPUs, compared per variant and measure.

Runs given by id may also be of one GPU (run-to-run spread: the baseline against which a spread
across GPUs means something); their values are then labelled ``<uuid>:run<id>``.

For every (variant, measure, parameters) measured on at least two GPUs: the median, min and max
over the GPUs and the relative spread ``(max - min) / median``. Values with an ``error:`` or
``noisy`` flag, or no value, are left out of the statistics (their count is kept).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

SCHEMA = "gpudissect.compare-gpus/1"
EXCLUDE = ("error", "noisy", "clock-changed", "not timed", "skipped")
# parameters that describe how a value was measured or what came out (a failed measurement has
# none of them), not what is measured: left out of the grouping key
DETAILS = ("lengths", "launches", "repeats_per_launch", "ptxas_stall_cycles", "blocks_per_sm",
           "best", "smallest_within_2pct", "bound", "configurations", "clean")


def comparison_runs(store, suite: str, run_ids: list[int] | None = None) -> list[dict]:
    """The runs to compare: those given, else the latest finished run of ``suite`` per GPU UUID."""
    if run_ids:
        return [store.run(r) for r in run_ids]
    latest: dict[str, int] = {}
    for row in store.runs():
        if row["suite"] == suite and row["finished"] is not None:
            latest[row["gpu_uuid"]] = int(row["id"])
    return [store.run(r) for r in sorted(latest.values())]


def compare_gpus(store, suite: str = "instructions", run_ids: list[int] | None = None) -> dict:
    runs = comparison_runs(store, suite, run_ids)
    uuids = [r["gpu_uuid"] for r in runs]
    same_gpu = len(set(uuids)) != len(uuids)  # runs given by id: run-to-run on one GPU
    for r in runs:
        r["label"] = f"{r['gpu_uuid']}:run{r['id']}" if same_gpu else r["gpu_uuid"]
    groups: dict[tuple, dict] = {}
    for run in runs:
        for r in store.results(run["id"]):
            # the lengths swept (and the other DETAILS) are details of the measurement, not what
            # is measured (a failed measurement has none)
            params = {k: v for k, v in r["params"].items() if k not in DETAILS}
            key = (r["variant"], r["measure"], json.dumps(params, sort_keys=True))
            g = groups.setdefault(key, {"unit": r["unit"], "values": {}, "left_out": {}})
            bad = [f for f in r["flags"] if f.startswith(EXCLUDE)]
            if r["value"] is None or bad:
                g["left_out"][run["label"]] = bad[0] if bad else "no value"
            else:
                g["values"][run["label"]] = float(r["value"])
    records = []
    for (variant, measure, params), g in groups.items():
        vals = list(g["values"].values())
        rec = {"variant": variant, "measure": measure, "params": json.loads(params), "unit": g["unit"],
               "n_gpus": len(vals), "values": g["values"], "left_out": g["left_out"],
               "median": None, "min": None, "max": None, "rel_spread": None}
        if len(vals) >= 2:
            med = statistics.median(vals)
            rec.update(median=med, min=min(vals), max=max(vals),
                       rel_spread=(max(vals) - min(vals)) / abs(med) if med else None)
        records.append(rec)
    spreads = [r["rel_spread"] for r in records if r["rel_spread"] is not None]
    names = {r["gpu_name"] for r in runs}
    summary = {
        "gpus": len(set(uuids)),
        "runs": len(runs),
        "identical_models": len(names) == 1,
        "compared": len(spreads),
        "median_rel_spread": statistics.median(spreads) if spreads else None,
        "max_rel_spread": max(spreads) if spreads else None,
        "above_1pct": sum(s > 0.01 for s in spreads),
        "above_5pct": sum(s > 0.05 for s in spreads),
    }
    gpus = [{"run_id": r["id"], "label": r["label"], "gpu_name": r["gpu_name"], "gpu_uuid": r["gpu_uuid"],
             "driver": r["driver"], "host": r["host"], "clocks_before": r.get("clocks_before"),
             "clocks_after": r.get("clocks_after"), "started": r["started"], "finished": r["finished"]}
            for r in runs]
    return {"schema": SCHEMA, "suite": suite, "gpus": gpus, "summary": summary,
            "statistic": "per (variant, measure, params): median, min, max over GPUs; "
                         "rel_spread = (max - min) / median; flagged values left out",
            "records": records}


def conclusions(doc: dict) -> list[str]:
    s = doc["summary"]
    if s.get("runs", s["gpus"]) > s["gpus"] and s["compared"]:
        return [f"{s['runs']} runs on {s['gpus']} GPU(s) (run to run), {s['compared']} measurements "
                f"compared: median spread {s['median_rel_spread']:.2%}, max {s['max_rel_spread']:.2%}; "
                f"{s['above_1pct']} above 1%, {s['above_5pct']} above 5%"]
    if s["gpus"] < 2:
        return [f"{s['gpus']} GPU(s) with a finished '{doc['suite']}' run: nothing to compare"]
    if not s["compared"]:
        return [f"{s['gpus']} GPUs, but no measurement has a clean value on two of them"]
    out = [f"{s['gpus']} GPUs ({'one model' if s['identical_models'] else 'different models'}), "
           f"{s['compared']} measurements compared: median spread {s['median_rel_spread']:.2%}, "
           f"max {s['max_rel_spread']:.2%}; {s['above_1pct']} above 1%, {s['above_5pct']} above 5%"]
    return out


def write_json(doc: dict, path: Path) -> None:
    Path(path).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
