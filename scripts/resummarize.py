"""Re-derive a shipped suite's conclusions from its stored records with the current analysis
(no new measurement): unpack ``<dir>/<suite>.db.xz``, run the suite's ``summarize`` on the stored
run, store the summary, export ``<suite>.json.xz``
(replacing an older set's ``.json.gz``) and pack the store again.
``python scripts/resummarize.py data/h100 tensor`` (suites whose summary reads only the store:
memory, tensor, behaviour)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from gpudissect.bench.contract import Context
from gpudissect.store.db import Store
from gpudissect.store.pack import pack, unpack
from gpudissect.suites import get_suite


def main(folder: str, suite: str) -> int:
    d = Path(folder)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / f"{suite}.db"
        unpack(d / f"{suite}.db.xz", db)
        store = Store(db)
        run_id = store.latest_run(suite)
        if run_id is None:
            print(f"error: {d / (suite + '.db.xz')} holds no {suite} run", file=sys.stderr)
            return 2
        ctx = Context(dev=None, store=store, target=None, run_id=run_id)  # type: ignore[arg-type]
        store.set_meta(f"summary:{run_id}", get_suite(suite).summarize(ctx))
        store.close()
        subprocess.run([sys.executable, "-m", "gpudissect", "export", str(d / f"{suite}.json.xz"),
                        "--format", "suite", "--suite", suite, "--db", str(db)], check=True)
        (d / f"{suite}.json.gz").unlink(missing_ok=True)  # an older set's gzipped document, replaced
        pack(db, d / f"{suite}.db.xz")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
