"""Time what runs without a GPU (issue 36) and write the figures as JSON: the fast test tier
(``python -m pytest -q``, the tests marked slow left out), the slow tier (``-m slow``), the
HTML report and the timing reference of a data set. The figures are wall seconds of each
command as a subprocess, measured here, so the JSON is generated, not typed.

    python scripts/bench_local.py [--data data/h200] [--out data/benchmarks/local-2core.json]
                                  [--machine "2-core dev machine"] [--no-tests]

``--no-tests`` times the report and the timing reference only (and keeps the test figures of
an existing ``--out``). The load average before each command is kept beside its time: other
work on the machine makes the figures larger.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(cmd: list[str], env: dict | None = None) -> dict:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    tail = (res.stdout + res.stderr).strip().splitlines()[-1:] or [""]
    print(f"{wall:7.1f} s  rc {res.returncode}  {' '.join(cmd[2:])}: {tail[0][:100]}", file=sys.stderr)
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    return {"s": round(wall, 1), "load_before": None if load is None else round(load, 2), "last_line": tail[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data/h200", help="data set for the report (default data/h200)")
    ap.add_argument("--out", default="data/benchmarks/local-2core.json")
    ap.add_argument("--machine", default="2-core dev machine")
    ap.add_argument("--no-tests", action="store_true", help="time the report and timing reference only")
    a = ap.parse_args()
    out = ROOT / a.out
    py = sys.executable
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    old = json.loads(out.read_text()) if out.exists() else {}
    rec: dict = {"machine": a.machine, "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count(), "date": dt.date.today().isoformat(),
                 "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                          text=True).stdout.strip(), "data": a.data, "python": sys.version.split()[0]}
    runs: dict = {}
    with tempfile.TemporaryDirectory() as td:
        runs["report"] = _timed([py, "-m", "gpudissect", "report", "--data", a.data, "-o", f"{td}/r.html"], env)
        runs["markdown"] = _timed([py, "-m", "gpudissect", "report", "--data", a.data, "--markdown",
                                   "-o", f"{td}/t.md"], env)
    if not a.no_tests:
        nocache = ["-p", "no:cacheprovider"]
        runs["tests_fast"] = _timed([py, "-m", "pytest", "-q", *nocache])
        runs["tests_slow"] = _timed([py, "-m", "pytest", "-q", "-m", "slow", *nocache])
    for k in ("report", "markdown", "tests_fast", "tests_slow"):
        if k in runs:
            rec[f"{k}_s"] = runs[k]["s"]
        elif f"{k}_s" in old:
            rec[f"{k}_s"] = old[f"{k}_s"]
    rec["runs"] = {**old.get("runs", {}), **runs}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"-> {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
