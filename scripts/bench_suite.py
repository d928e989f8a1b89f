"""Speed benchmark of a suite: the same run cold (empty compile cache) and warm, with the split
the runner records (compile, GPU, store, analysis) and the wall time. Prints a table.

    python scripts/bench_suite.py [SUITE] [-- extra 'gpudissect run' arguments]

Needs a GPU (or GPUDISSECT_FAKE_DEVICE for a dry run of the machinery)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time


def main(argv: list[str]) -> int:
    suite = argv[0] if argv and not argv[0].startswith("-") else "instructions"
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    rows = []
    with tempfile.TemporaryDirectory() as td:
        env = {**os.environ, "GPUDISSECT_CACHE": os.path.join(td, "cache")}
        for phase in ("cold", "warm"):
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "gpudissect", "run", "--suite", suite, "--db",
                                os.path.join(td, f"{phase}.db"), "--new", "--no-selfcheck", *extra],
                               env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("run ")), "")
            split = dict(re.findall(r"(\w+_s) ([\d.]+) s", line))
            rows.append((phase, wall, split, p.returncode))
            if p.returncode:
                print(p.stdout[-2000:], p.stderr[-2000:], sep="\n")
    keys = ["compile_s", "gpu_s", "store_s", "analysis_s", "total_s"]
    print(f"{suite}: " + " | ".join(["phase", "wall_s", *keys, "exit"]))
    for phase, wall, split, code in rows:
        print(f"{suite}: " + " | ".join([phase, f"{wall:.1f}", *(split.get(k, "-") for k in keys), str(code)]))
    return max(code for *_, code in rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
