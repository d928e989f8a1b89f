"""Time what runs without a GPU (issue 36) and write the figures as JSON: the fast test tier
(``python -m pytest -q``, the tests marked slow left out), the slow tier (``-m slow``), the
HTML report and the timing reference of a data set. The figures are wall seconds of each
command as a subprocess, measured here, so the JSON is generated, not typed.

    python scripts/bench_local.py [--data data/h200] [--out data/benchmarks/local-2core.json]
                                  [--machine "2-core dev machine"] [--skip tests_slow ...]

``--skip NAME`` leaves out one of report, markdown, tests_fast, tests_slow (an existing
``--out`` keeps its figure). Beside each wall time: the CPU seconds of the command and its
children (user + system) and the load average before it, since other work on the machine
makes the wall time larger but not the CPU time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("report", "markdown", "tests_fast", "tests_slow")


def _timed(cmd: list[str], env: dict | None = None) -> dict:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    tail = (res.stdout + res.stderr).strip().splitlines()[-1:] or [""]
    print(f"{wall:7.1f} s  rc {res.returncode}  {' '.join(cmd[2:])}: {tail[0][:100]}", file=sys.stderr)
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    return {"s": round(wall, 1), "cpu_s": round(cpu, 1), "load_before": None if load is None else round(load, 2), "last_line": tail[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data/h200", help="data set for the report (default data/h200)")
    ap.add_argument("--out", default="data/benchmarks/local-2core.json")
    ap.add_argument("--machine", default="2-core dev machine")
    ap.add_argument("--skip", action="append", default=[], choices=NAMES, help="leave this one out")
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
    nocache = ["-p", "no:cacheprovider"]
    with tempfile.TemporaryDirectory() as td:
        cmds = {"report": ([py, "-m", "gpudissect", "report", "--data", a.data, "-o", f"{td}/r.html"], env),
                "markdown": ([py, "-m", "gpudissect", "report", "--data", a.data, "--markdown", "-o", f"{td}/t.md"],
                             env),
                "tests_fast": ([py, "-m", "pytest", "-q", *nocache], None),
                "tests_slow": ([py, "-m", "pytest", "-q", "-m", "slow", *nocache], None)}
        for k, (cmd, e) in cmds.items():
            if k not in a.skip:
                runs[k] = {**_timed(cmd, e), "commit": rec["commit"]}
    for k in NAMES:
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
