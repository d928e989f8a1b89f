"""A GPU's runs, from the store its task filled on its node, copied into the fleet's store
(new run ids; results, done items, the kernels they cite and the suites' summaries with them)."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path


def _columns(db, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})") if r[1] != "id"]


def _copy(src: sqlite3.Connection, dst, table: str, where: str, args: tuple, **override) -> list[int]:
    cols = [c for c in _columns(dst, table) if c in _columns(src, table) or c in override]
    sel = [c for c in cols if c not in override]
    ids = []
    for row in src.execute(f"SELECT {', '.join(sel)} FROM {table} WHERE {where}", args).fetchall():
        vals = dict(zip(sel, row, strict=True)) | override
        cur = dst.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(cols)}) VALUES "
                          f"({', '.join('?' * len(cols))})", [vals[c] for c in cols])
        ids.append(int(cur.lastrowid))
    return ids


def merge_runs(store, db_bytes: bytes, run_ids: list[int]) -> dict[int, int]:
    """Copy runs ``run_ids`` of the database ``db_bytes`` into ``store``; old id -> new id."""
    mapping: dict[int, int] = {}
    with tempfile.TemporaryDirectory(prefix="gpudissect-fleet-") as td:
        path = Path(td) / "gpu.db"
        path.write_bytes(db_bytes)
        src = sqlite3.connect(path)
        try:
            with store.tx():
                dst = store.db
                for rid in run_ids:
                    (new,) = _copy(src, dst, "runs", "id=?", (rid,))
                    mapping[rid] = new
                    _copy(src, dst, "results", "run_id=?", (rid,), run_id=new)
                    _copy(src, dst, "done", "run_id=?", (rid,), run_id=new)
                    row = src.execute("SELECT value FROM meta WHERE key=?", (f"summary:{rid}",)).fetchone()
                    if row:
                        dst.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"summary:{new}", row[0]))
                _copy(src, dst, "kernels", "1", ())  # by hash: those already there are kept
        finally:
            src.close()
    return mapping
