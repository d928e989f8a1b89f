"""One store per suite from a store of every suite (``gpudissect run`` without ``--suite``): the
shipped sets keep a store per suite (``data/<gpu>/<suite>.db.xz``). Each copy keeps one suite's
runs, their results, items done and meta (``summary:<run>``, ``selfcheck:<run>``), and the kernel
texts its results cite (a hash in any of their columns: ``ptx_hash``, ``sass_hash``, or inside
params and samples).

    python scripts/split_store.py ALL.db OUTDIR [SUITE ...]   -> OUTDIR/<suite>.db
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import sys
from pathlib import Path

HASH = re.compile(r"[0-9a-f]{64}")


def split(db: Path, out: Path, suite: str) -> Path:
    """``out``/<suite>.db: ``db`` with the runs of ``suite`` alone."""
    dst = out / f"{suite}.db"
    shutil.copyfile(db, dst)
    c = sqlite3.connect(dst)
    keep = [r for (r,) in c.execute("SELECT id FROM runs WHERE suite=?", (suite,))]
    if not keep:
        c.close()
        dst.unlink()
        raise SystemExit(f"{db}: no run of suite '{suite}'")
    marks = ",".join("?" * len(keep))
    c.execute(f"DELETE FROM results WHERE run_id NOT IN ({marks})", keep)
    c.execute(f"DELETE FROM done WHERE run_id NOT IN ({marks})", keep)
    c.execute(f"DELETE FROM runs WHERE id NOT IN ({marks})", keep)
    for (key,) in c.execute("SELECT key FROM meta").fetchall():
        run = key.rpartition(":")[2]
        if ":" in key and run.isdigit() and int(run) not in keep:
            c.execute("DELETE FROM meta WHERE key=?", (key,))
    cited: set[str] = set()
    for row in c.execute("SELECT ptx_hash, sass_hash, params, samples FROM results"):
        for col in row:
            if col:
                cited.update(HASH.findall(col if isinstance(col, str) else str(col)))
    have = [h for (h,) in c.execute("SELECT hash FROM kernels")]
    c.executemany("DELETE FROM kernels WHERE hash=?", [(h,) for h in have if h not in cited])
    c.commit()
    c.execute("VACUUM")
    c.close()
    return dst


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    db, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    c = sqlite3.connect(db)
    suites = argv[2:] or [s for (s,) in c.execute("SELECT DISTINCT suite FROM runs ORDER BY id")]
    c.close()
    for s in suites:
        print(split(db, out, s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
