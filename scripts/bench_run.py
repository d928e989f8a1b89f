"""Time the whole characterisation on a GPU (issue 36) and write where the time went as JSON:
``gpudissect run`` (every suite, then the report and the timing reference) with an empty
compile cache, then the same with ``--quick``; per suite the runner's split (compile not hidden
behind the GPU, GPU and the analysis inside the measurements, store, analysis after them) and
its profile (``bench/spans.py``: per step and study, the device calls apart); the run logs
beside the JSON. The figures are measured here, so the JSON is generated, not typed.

    python scripts/bench_run.py --out DIR [--skip-quick] [--skip-full] [--snapshot] [--local data/benchmarks/local-2core.json]
                                [-- extra 'gpudissect run' arguments]

``DIR`` receives ``run-<gpu>.json`` (``h200`` for an H200), ``full.log``, ``quick.log``, the
runs' stores (``full.db``, ``quick.db``) and their runs tables (``full-runs.json``, ...); ``--runs
F`` writes the record of a run that was cut short from such a table instead of running; ``--local`` folds in the figures measured without a GPU
(``report_s``, ``tests_fast_s`` of ``scripts/bench_local.py``). ``scripts/compare_runs.py`` then
compares ``full.db`` with a shipped data set.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gpu_key(name: str) -> str:
    """``NVIDIA H200`` -> ``h200``: the set's short name."""
    m = re.search(r"([A-Z]+\d+[A-Z]*)", name.replace("NVIDIA", ""))
    return m.group(1).lower() if m else re.sub(r"\W+", "-", name.lower()).strip("-")


def timed_run(phase: str, out: Path, extra: list[str]) -> dict:
    """One ``gpudissect run`` of every suite into ``out/<phase>.db`` with an empty compile cache,
    its output teed to ``out/<phase>.log``; its wall seconds and exit status."""
    db = out / f"{phase}.db"
    db.unlink(missing_ok=True)
    args = ["--quick"] if phase == "quick" else []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GPUDISSECT_CACHE=cache, PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "gpudissect", "run", "--db", str(db), "--report", str(out / f"{phase}-report.html"),
               "--markdown", str(out / f"{phase}-timing-reference.md"), *args, *extra]
        t0 = time.perf_counter()
        with open(out / f"{phase}.log", "w") as log:
            log.write("$ " + " ".join(cmd[1:]) + "\n")
            log.flush()
            p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - t0
    print(f"{phase}: {wall:.1f} s, exit {p.returncode}", file=sys.stderr)
    return {"s": round(wall, 1), "exit": p.returncode}


def runs_of(db: Path) -> list[dict]:
    """The runs table of a store, its JSON columns read (what ``--runs`` takes)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    cols = ("timing", "clocks_before", "clocks_after", "params")
    return [{**dict(r), **{c: json.loads(r[c] or "{}") for c in cols}}
            for r in con.execute("select * from runs order by id")]


def suites_of(runs: list[dict]) -> tuple[dict, dict]:
    """Per suite run: its timing split and profile (a run not finished: ``finished`` false, no
    split); and the GPU's provenance."""
    out, gpu = {}, {}
    for r in runs:
        t = dict(r["timing"] or {})
        prof = t.pop("profile", {})
        out[r["suite"]] = {**{k: round(v, 1) for k, v in t.items() if isinstance(v, (int, float))},
                           "finished": r.get("finished") is not None, "profile": prof}
        gpu = {"name": r["gpu_name"], "uuid": r["gpu_uuid"], "driver": r["driver"], "toolkit": r["toolkit"],
               "clocks_before": r["clocks_before"] or {}}
    return out, gpu


def phase_record(suites: dict, **fields) -> dict:
    """One run's entry of the JSON: its fields, its suites and the sum of their wall times."""
    return {**fields, "suites": suites, "suites_s": round(sum(s.get("total_s", 0) for s in suites.values()), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the JSON, the logs and the stores")
    ap.add_argument("--skip-quick", action="store_true")
    ap.add_argument("--skip-full", action="store_true")
    ap.add_argument("--local", help="bench_local.py's JSON: its report_s and tests_fast_s are folded in")
    ap.add_argument("--snapshot", action="store_true",
                    help="no run: the runs table of each store in --out whose run is not over, as "
                         "<phase>-runs-sofar.json (a run in progress: what it has timed so far)")
    ap.add_argument("--runs", type=Path, help="no run: the record of a run cut short, from the runs table its "
                                              "store had then (runs_of, as JSON; the wall time is then unknown)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.snapshot:
        for phase in ("full", "quick"):
            db = out / f"{phase}.db"
            if db.exists() and not (out / f"{phase}-runs.json").exists():
                try:
                    (out / f"{phase}-runs-sofar.json").write_text(json.dumps(runs_of(db), indent=1) + "\n")
                except sqlite3.Error as e:  # not yet a store (the run has just begun)
                    print(f"{db}: {e}", file=sys.stderr)
        return 0
    rec: dict = {"date": dt.date.today().isoformat(), "cores": len(os.sched_getaffinity(0)),
                 "commit": os.environ.get("GPUDISSECT_COMMIT") or subprocess.run(
                     ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
                 or None,  # a copy of the tree without its .git (the device tool's) names it in the environment
                 "compile_cache": "empty (a fresh GPUDISSECT_CACHE per run)"}
    if a.runs:
        suites, gpu = suites_of(json.loads(a.runs.read_text()))
        rec.update(gpu=gpu, total_s=None, full=phase_record(suites, s=None, cut_short=True))
        rec["commit"] = os.environ.get("GPUDISSECT_COMMIT") or None
        rec["cores"] = None  # of the machine that ran it: not in its runs table
    if a.local:
        loc = json.loads(Path(a.local).read_text())
        for k in ("report_s", "markdown_s", "tests_fast_s", "tests_slow_s"):
            if k in loc:
                rec[k] = loc[k]
        rec["local"] = {k: loc.get(k) for k in ("machine", "cores", "date", "commit")}
    path = None
    for phase in ("full", "quick"):
        if a.runs or (phase == "full" and a.skip_full) or (phase == "quick" and a.skip_quick):
            continue
        got = timed_run(phase, out, extra)
        runs = runs_of(out / f"{phase}.db")
        (out / f"{phase}-runs.json").write_text(json.dumps(runs, indent=1) + "\n")
        suites, gpu = suites_of(runs)
        rec["gpu"] = rec.get("gpu") or gpu
        rec["total_s" if phase == "full" else "quick_s"] = got["s"]
        rec[phase] = phase_record(suites, **got)
        path = write(rec, out)  # after each phase: a later one cut short leaves this one's figures
    path = path or write(rec, out)
    print(path)
    return 0


def write(rec: dict, out: Path) -> Path:
    path = out / f"run-{_gpu_key((rec.get('gpu') or {}).get('name') or 'gpu')}.json"
    path.write_text(json.dumps(rec, indent=1) + "\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
