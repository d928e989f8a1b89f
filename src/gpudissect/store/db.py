"""The results store: one SQLite file (WAL, a transaction per benchmark).

Default path: ``$GPUDISSECT_DB`` or ``./results.db``. Tables:

* ``runs``: provenance of a sweep (GPU, UUID, driver, toolkit, clocks before/after, host,
  times, tool version, arch, SM count, suite, parameters, and the GPU's platform as NVML reports
  it: ECC, power limits, persistence, MIG, confidential computing, PCIe, NVLink, maximum clocks);
* ``results``: one measurement (variant, measure, parameters, value, unit, statistic, fit,
  raw samples, flags, SASS of one instance, PTX/SASS hashes, strategy);
* ``kernels``: the PTX and SASS text of every kernel a result cites, by hash.

A sweep interrupted halfway is resumed with the same run id: work whose results are
already stored is skipped.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import sqlite3
import tempfile
import time
import zlib
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    suite TEXT NOT NULL,
    gpu_name TEXT NOT NULL,
    gpu_uuid TEXT NOT NULL,
    driver TEXT,
    toolkit TEXT,
    arch TEXT,
    sm_count INTEGER,
    clocks_before TEXT,
    clocks_after TEXT,
    host TEXT,
    started REAL NOT NULL,
    finished REAL,
    tool_version TEXT,
    params TEXT,
    timing TEXT,
    platform TEXT
);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    variant TEXT NOT NULL,
    cls TEXT,
    measure TEXT NOT NULL,
    params TEXT NOT NULL,
    value REAL,
    unit TEXT NOT NULL,
    statistic TEXT NOT NULL,
    fit TEXT,
    samples TEXT,
    flags TEXT NOT NULL,
    sass TEXT,
    strategy TEXT,
    ptx_hash TEXT,
    sass_hash TEXT,
    created REAL NOT NULL,
    UNIQUE(run_id, variant, measure, params)
);
CREATE TABLE IF NOT EXISTS kernels (
    hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    text BLOB NOT NULL  -- zlib-compressed PTX or SASS text
);
CREATE TABLE IF NOT EXISTS done (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    item TEXT NOT NULL,
    PRIMARY KEY (run_id, item)
);
CREATE INDEX IF NOT EXISTS results_variant ON results(variant);
"""
# columns added to ``runs`` after a store may have been made (added on opening; a store that
# cannot be written, read as it is: the column then reads as absent)
ADDED_RUN_COLUMNS = {"platform": "TEXT"}


class StoreError(RuntimeError):
    pass


SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every SQLite database file


def default_path() -> Path:
    return Path(os.environ.get("GPUDISSECT_DB", "results.db"))


def open_store(path: Path | str | None = None, *, create: bool = False) -> Store:
    """The results database at ``path`` (default: :func:`default_path`). For reading
    (``create=False``) a missing file is an error, never a new empty database; a ``.gz`` or a
    packed ``.xz`` file (store/pack.py) is read from an unpacked temporary copy, removed on
    :meth:`Store.close`."""
    path = Path(path) if path else default_path()
    packed = path.name.endswith((".gz", ".xz"))
    if create:
        if packed:
            raise StoreError(f"{path}: a compressed database is read-only here; results go into a .db")
        return Store(path)
    if not path.exists():
        raise StoreError(f"{path}: no such results database (--db FILE or GPUDISSECT_DB names one)")
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a results database")
    if not packed:
        try:  # SQLite would make an empty or short file a new database
            with open(path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except OSError as e:
            raise StoreError(f"{path}: cannot read it ({e.strerror or e})") from None
        if head != SQLITE_HEADER:
            raise StoreError(f"{path}: not a gpudissect results database (no SQLite header)")
        return Store(path)
    from gpudissect.store.pack import unpack

    kind = "xz" if path.name.endswith(".xz") else "gzip"
    tmp = tempfile.TemporaryDirectory(prefix="gpudissect-")
    copy = Path(tmp.name) / path.name[:-3]
    try:
        unpack(path, copy)
        store = Store(copy, name=str(path))
    except BaseException as e:
        tmp.cleanup()
        if isinstance(e, EOFError):
            raise StoreError(f"{path}: truncated {kind} file (it ends before its compressed data does)") from None
        if isinstance(e, (gzip.BadGzipFile, zlib.error, lzma.LZMAError)):
            raise StoreError(f"{path}: not a readable {kind} file ({e})") from None
        if isinstance(e, OSError):
            raise StoreError(f"{path}: cannot read it ({e.strerror or e})") from None
        raise
    store._tmp = tmp
    return store


@dataclass
class Result:
    variant: str
    measure: str  # latency | throughput | distance | ...
    value: float | None
    unit: str
    statistic: str
    params: dict = field(default_factory=dict)
    fit: dict | None = None
    samples: dict | list | None = None
    flags: list[str] = field(default_factory=list)
    sass: list[str] = field(default_factory=list)
    strategy: str | None = None
    ptx_hash: str | None = None
    sass_hash: str | None = None
    cls: str = ""


class StoredResult(TypedDict):
    """A result as read back from the store (JSON columns decoded), with its run's GPU."""

    id: int
    run_id: int
    variant: str
    cls: str | None
    measure: str
    params: dict
    value: float | None
    unit: str
    statistic: str
    fit: dict | None
    samples: dict | list | None
    flags: list[str]
    sass: list[str] | None
    strategy: str | None
    ptx_hash: str | None
    sass_hash: str | None
    created: float
    gpu_name: str
    gpu_uuid: str


class RunRecord(TypedDict):
    """A run's provenance as read back from the store."""

    id: int
    suite: str
    gpu_name: str
    gpu_uuid: str
    driver: str | None
    toolkit: str | None
    arch: str | None
    sm_count: int | None
    clocks_before: dict | None
    clocks_after: dict | None
    host: str | None
    started: float
    finished: float | None
    tool_version: str | None
    params: dict | None
    timing: dict | None
    platform: dict | None


class Store:
    def __init__(self, path: Path | str | None = None, *, name: str | None = None):
        self.path = Path(path) if path else default_path()
        self.name = name or str(self.path)  # what messages call it (a .db.gz is read from a copy)
        self._tmp: tempfile.TemporaryDirectory | None = None  # that copy's folder (open_store)
        try:
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._refuse_foreign()
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(SCHEMA)
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                # OR IGNORE: several processes (one per GPU) may create the store at once
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif str(row[0]) != str(SCHEMA_VERSION):
                raise StoreError(f"{self.name}: schema version {row[0]}, this tool reads {SCHEMA_VERSION}")
            self._add_columns()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.name}: not a gpudissect results database ({e})") from None
        self.db.row_factory = sqlite3.Row

    def _add_columns(self) -> None:
        have = {r[1] for r in self.db.execute("PRAGMA table_info(runs)")}
        for col, kind in ADDED_RUN_COLUMNS.items():
            if col not in have:
                try:
                    self.db.execute(f"ALTER TABLE runs ADD COLUMN {col} {kind}")
                except sqlite3.OperationalError:  # read-only, or another process added it first
                    pass

    def _refuse_foreign(self) -> None:
        """Never add our tables to another program's SQLite file."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return  # a new store
        row = None
        if "meta" in tables:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            self.db.close()
            raise StoreError(f"{self.name}: an SQLite file of another program (tables: "
                             f"{', '.join(sorted(tables)[:6])}), not a gpudissect results database")
        if str(row[0]) != str(SCHEMA_VERSION):  # before anything is written to it
            self.db.close()
            raise StoreError(f"{self.name}: schema version {row[0]}, this tool reads {SCHEMA_VERSION}")

    def _loads(self, text, what: str):
        try:
            return json.loads(text)
        except (TypeError, ValueError) as e:  # a damaged file
            raise StoreError(f"{self.name}: damaged {what}: {e}") from None

    def close(self) -> None:
        self.db.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    @contextmanager
    def tx(self):
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        else:
            self.db.execute("COMMIT")

    # --- runs
    def start_run(self, suite: str, device, toolkit: str, arch: str, clocks: dict, params: dict,
                  tool_version: str) -> int:
        with self.tx():
            platform = getattr(device, "platform", None)
            cur = self.db.execute(
                "INSERT INTO runs (suite, gpu_name, gpu_uuid, driver, toolkit, arch, sm_count, "
                "clocks_before, host, started, tool_version, params, platform) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (suite, device.name, device.uuid, device.driver, toolkit, arch, device.sm_count,
                 json.dumps(clocks), device.host, time.time(), tool_version, json.dumps(params),
                 json.dumps(platform) if platform else None),
            )
            return int(cur.lastrowid)

    def finish_run(self, run_id: int, clocks: dict, timing: dict) -> None:
        with self.tx():
            self.db.execute("UPDATE runs SET finished=?, clocks_after=?, timing=? WHERE id=?",
                            (time.time(), json.dumps(clocks), json.dumps(timing), run_id))

    def set_timing(self, run_id: int, timing: dict) -> None:
        with self.tx():
            self.db.execute("UPDATE runs SET timing=? WHERE id=?", (json.dumps(timing), run_id))

    def unfinished_run(self, suite: str, gpu_uuid: str) -> int | None:
        row = self.db.execute(
            "SELECT id FROM runs WHERE suite=? AND gpu_uuid=? AND finished IS NULL ORDER BY id DESC LIMIT 1",
            (suite, gpu_uuid),
        ).fetchone()
        return int(row["id"]) if row else None

    def runs(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM runs ORDER BY id").fetchall()

    # --- work items
    def is_done(self, run_id: int, item: str) -> bool:
        return self.db.execute("SELECT 1 FROM done WHERE run_id=? AND item=?", (run_id, item)).fetchone() is not None

    def done_items(self, run_id: int) -> set[str]:
        return {r["item"] for r in self.db.execute("SELECT item FROM done WHERE run_id=?", (run_id,))}

    def save(self, run_id: int, item: str, results: Iterable[Result], texts: dict[str, tuple[str, str]] | None = None) -> None:
        """Store one work item's results and mark it done, atomically."""
        with self.tx():
            for h, (kind, text) in (texts or {}).items():
                self.db.execute("INSERT OR IGNORE INTO kernels VALUES (?,?,?)",
                                (h, kind, zlib.compress(text.encode(), 9)))
            for r in results:
                self.db.execute(
                    "INSERT OR REPLACE INTO results (run_id, variant, cls, measure, params, value, unit, "
                    "statistic, fit, samples, flags, sass, strategy, ptx_hash, sass_hash, created) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, r.variant, r.cls, r.measure, json.dumps(r.params, sort_keys=True), r.value,
                     r.unit, r.statistic, json.dumps(r.fit) if r.fit else None,
                     json.dumps(r.samples) if r.samples is not None else None, json.dumps(r.flags),
                     json.dumps(r.sass), r.strategy, r.ptx_hash, r.sass_hash, time.time()),
                )
            self.db.execute("INSERT OR IGNORE INTO done VALUES (?,?)", (run_id, item))

    # --- reading
    def results(self, run_id: int | None = None, variant_like: str | None = None,
                measure: str | None = None) -> list[StoredResult]:
        q = ("SELECT r.*, u.gpu_name, u.gpu_uuid FROM results r JOIN runs u ON u.id = r.run_id WHERE 1=1")
        args: list = []
        if run_id is not None:
            q += " AND r.run_id=?"
            args.append(run_id)
        if variant_like:
            q += " AND r.variant GLOB ?"
            args.append(variant_like)
        if measure:
            q += " AND r.measure=?"
            args.append(measure)
        q += " ORDER BY r.id"
        out = []
        for row in self.db.execute(q, args):
            d = dict(row)
            for k in ("params", "fit", "samples", "flags", "sass"):
                if d.get(k) is not None:
                    d[k] = self._loads(d[k], f"result {d.get('id')}")
            out.append(StoredResult(**d))
        return out

    def set_meta(self, key: str, value) -> None:
        """A JSON value beside the results (a suite's summary: ``summary:<run id>``, ...)."""
        with self.tx():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return self._loads(row["value"], f"meta {key}") if row else default

    def run(self, run_id: int) -> RunRecord:
        row = self.db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"{self.name}: no run {run_id}")
        d = {"platform": None, **dict(row)}
        for k in ("clocks_before", "clocks_after", "params", "timing", "platform"):
            if d.get(k):
                d[k] = self._loads(d[k], f"run {run_id}")
        return RunRecord(**d)

    def measured(self, run_id: int) -> int:
        """How many of the run's results hold a measurement (a value or a fit), not only an error
        or an unsupported variant's flags."""
        row = self.db.execute("SELECT COUNT(*) FROM results WHERE run_id=? AND (value IS NOT NULL "
                              "OR fit IS NOT NULL)", (run_id,)).fetchone()
        return int(row[0])

    def flagged(self, run_id: int) -> int:
        """How many of the run's results carry a flag (noisy, poor-fit, an error, unsupported, ...)."""
        row = self.db.execute("SELECT COUNT(*) FROM results WHERE run_id=? AND flags IS NOT NULL "
                              "AND flags != '[]'", (run_id,)).fetchone()
        return int(row[0])

    def latest_run(self, suite: str, gpu_uuid: str | None = None) -> int | None:
        q, args = "SELECT id FROM runs WHERE suite=?", [suite]
        if gpu_uuid:
            q += " AND gpu_uuid=?"
            args.append(gpu_uuid)
        row = self.db.execute(q + " ORDER BY id DESC LIMIT 1", args).fetchone()
        return int(row["id"]) if row else None

    def kernel_text(self, h: str) -> str | None:
        row = self.db.execute("SELECT text FROM kernels WHERE hash=?", (h,)).fetchone()
        return zlib.decompress(row["text"]).decode() if row else None
