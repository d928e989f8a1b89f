"""Result sets for the report, the timing reference, the simulator export and compare.

A result set is the per-suite documents of one GPU (schema ``gpudissect.suite/1``:
``{"schema", "suite", "provenance", "summary", "records"}``), read from any of:

* a data directory (``data/h100``): every ``<suite>.json`` in it, plain or compressed
  (``<suite>.json.xz``, the shipped form; ``<suite>.json.gz``, older sets). A plain list of records
  (the older ``instructions.json``) is accepted too; its provenance comes from the runs table
  of the packed or gzipped store beside it (``<suite>.db.xz``, ``<suite>.db.gz``) or, failing that, from ``run.log`` and
  ``nvidia-smi-*.csv``;
* one JSON file, plain, ``.json.xz`` or ``.json.gz`` (a suite document or a list of records);
* a results database (``.db``, ``.db.gz`` or packed ``.db.xz``): the latest run of each suite in it;
* the name of a shipped reference (``a100``: seed 000's published tables), for compare only.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from gpudissect.compressed import ERRORS, decompress, kind
from gpudissect.store.export import SUITE_SCHEMA, suite_document
from gpudissect.store.pack import unpack
from gpudissect.suites import REPORTED_FIRST, SUITES

# flags of a record whose value is not a clean measurement of the instruction (the predictor's
# tables and the per-SASS steps take no value that carries one)
UNTRUSTED = ("refused", "unverified", "not timed", "exceeds-limit", "noisy", "no clean configuration",
             "not-saturated")
VALIDATION_SCHEMA = "gpudissect.predict-validation/"  # predict/measure.py SCHEMA
REFERENCES = {"a100": "reference_a100.json"}
JSON_NAMES = (".json", ".json.xz", ".json.gz")  # a JSON document: plain, xz (shipped) or gzip (older sets)


class LoadError(ValueError):
    pass


@dataclass
class ResultSet:
    label: str
    source: str
    docs: dict[str, dict] = field(default_factory=dict)  # suite -> suite document
    reference: dict | None = None  # a shipped published reference instead of measurements
    extras: dict[str, object] = field(default_factory=dict)  # selfcheck.json, nvidia-smi, ...
    validation: dict | None = None  # predict --validate's measured set and error table, if beside

    def suites(self) -> list[str]:
        known = [s for s in REPORTED_FIRST if s in self.docs]
        return known + sorted(s for s in self.docs if s not in REPORTED_FIRST)

    def records(self, suite: str | None = None) -> list[dict]:
        out = []
        for s in self.suites():
            if suite is None or s == suite:
                for r in self.docs[s].get("records") or []:
                    out.append({**r, "suite": s})
        return out

    def quick_suites(self) -> list[str]:
        """The suites measured with the quick profile (``gpudissect run --quick``: fewer lengths
        and configurations, a smoke run), which every view names."""
        return [s for s in self.suites()
                if ((self.docs[s].get("provenance") or {}).get("params") or {}).get("quick")]

    def quick_note(self) -> str:
        """One line naming the quick profile's suites; empty for a set without them."""
        q = self.quick_suites()
        return (f"QUICK PROFILE ({', '.join(q)}): measured with `gpudissect run --quick`, fewer lengths and "
                "configurations; a smoke run, not a reference") if q else ""

    def provenance(self) -> dict:
        """The provenance of the first suite (GPU, driver, clocks); others are listed per suite."""
        for s in self.suites():
            p = self.docs[s].get("provenance") or {}
            if p:
                return p
        return {}

    @property
    def gpu(self) -> str:
        if self.reference:
            return self.reference.get("gpu", self.label)
        p = self.provenance()
        if p.get("gpu_name"):
            return p["gpu_name"]
        for r in self.records():
            if r.get("gpu"):
                return r["gpu"]
        return self.label


def load_reference(name: str) -> dict:
    fn = REFERENCES.get(name.lower())
    if fn is None:
        raise LoadError(f"unknown reference '{name}' (available: {', '.join(REFERENCES)})")
    return json.loads(resources.files("gpudissect").joinpath("data", fn).read_text())


def _is_record_list(obj) -> bool:
    return isinstance(obj, list) and bool(obj) and all(
        isinstance(r, dict) and "variant" in r and "measure" in r for r in obj[:50])


def _legacy_provenance(records: list[dict], folder: Path | None, suite: str) -> dict:
    prov: dict = {"note": "document predates the gpudissect.suite/1 schema; provenance reassembled"}
    if records:
        prov["gpu_name"] = records[0].get("gpu")
        prov["gpu_uuid"] = records[0].get("gpu_uuid")
    if folder is None:
        return prov
    gz = next((p for p in (folder / f"{suite}.db.xz", folder / f"{suite}.db.gz") if p.exists()), None)
    run_ids = {r.get("run_id") for r in records if r.get("run_id") is not None}
    if gz is not None and len(run_ids) == 1:
        try:
            with tempfile.TemporaryDirectory() as td:
                db = Path(td) / "s.db"
                unpack(gz, db)
                con = sqlite3.connect(db)
                con.row_factory = sqlite3.Row
                row = con.execute("SELECT * FROM runs WHERE id=?", (run_ids.pop(),)).fetchone()
                con.close()
            if row is not None:
                d = dict(row)
                for k in ("clocks_before", "clocks_after", "params", "timing"):
                    if d.get(k):
                        d[k] = json.loads(d[k])
                prov.update({k: d.get(k) for k in (
                    "gpu_name", "gpu_uuid", "driver", "toolkit", "arch", "sm_count", "clocks_before",
                    "clocks_after", "host", "started", "finished", "tool_version", "params", "timing")})
                prov["note"] = f"provenance from the runs table of {gz.name}"
        except (OSError, sqlite3.DatabaseError, EOFError) as e:
            prov["note"] += f" ({gz.name} unreadable: {e})"
    for name in ("nvidia-smi-before.csv", "nvidia-smi-after.csv"):
        p = folder / name
        if p.exists():
            prov[name.removesuffix(".csv").replace("-", "_")] = p.read_text().strip()
    log = folder / "run.log"
    if log.exists() and "gpu_name" not in prov:
        prov["run_log_head"] = log.read_text().splitlines()[:2]
    return prov


def _doc_from_json(obj, path: Path) -> dict | None:
    if isinstance(obj, dict) and obj.get("schema") == SUITE_SCHEMA:
        if not isinstance(obj.get("records"), list) or not isinstance(obj.get("summary") or {}, dict) \
                or not isinstance(obj.get("provenance") or {}, dict):
            raise LoadError(f"{path}: a {SUITE_SCHEMA} document without its records, summary or "
                            "provenance in their form (damaged?)")
        return obj
    if _is_record_list(obj):
        suite = _json_stem(path)
        return {"schema": SUITE_SCHEMA, "suite": suite,
                "provenance": _legacy_provenance(obj, path.parent, suite),
                "summary": {}, "records": obj}
    return None


def _read_json(path: Path):
    """A JSON file, plain or compressed (``.json.xz``, ``.json.gz``)."""
    try:
        raw = path.read_bytes()
        text = decompress(raw, path)
        if not text.strip():
            raise LoadError(f"{path}: empty file")
        return json.loads(text)
    except EOFError:
        raise LoadError(f"{path}: truncated {kind(path)} file (it ends before its compressed data does)") from None
    except ERRORS as e:
        raise LoadError(f"{path}: not a readable {kind(path)} file ({e})") from None
    except OSError as e:
        raise LoadError(f"{path}: cannot read it ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LoadError(f"{path}: not valid JSON ({e})") from None


def _json_stem(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".xz").removesuffix(".json")


def _from_db(path: Path, label: str) -> ResultSet:
    from gpudissect.store.db import StoreError, open_store

    rs = ResultSet(label=label, source=str(path))
    try:
        store = open_store(path)
        try:
            for suite in sorted({r["suite"] for r in store.runs()}):
                rid = store.latest_run(suite)
                if rid is not None:
                    rs.docs[suite] = suite_document(store, rid)
        finally:
            store.close()
    except StoreError as e:
        raise LoadError(str(e)) from None
    except sqlite3.DatabaseError as e:
        raise LoadError(f"{path}: damaged results database ({e})") from None
    if not rs.docs:
        raise LoadError(f"{path}: no runs in this database")
    return rs


def load_result_set(spec: str | Path, label: str | None = None) -> ResultSet:
    """Read a data directory, a JSON document, a results database or a reference name."""
    s = str(spec)
    p = Path(s)
    if not p.exists() and s.lower() in REFERENCES:
        ref = load_reference(s)
        return ResultSet(label=label or s.lower(), source=f"reference:{s.lower()}", reference=ref)
    if not p.exists():
        raise LoadError(f"{s}: no such file or directory (nor a reference: {', '.join(REFERENCES)})")
    if p.is_dir():
        rs = ResultSet(label=label or p.name, source=str(p))
        for f in sorted([*p.glob("*.json"), *p.glob("*.json.gz"), *p.glob("*.json.xz")]):
            obj = _read_json(f)
            doc = _doc_from_json(obj, f)
            if doc is None and _json_stem(f) in SUITES:  # a suite's file must be its document
                raise LoadError(f"{f}: not a {SUITE_SCHEMA} document nor a list of records "
                                f"(empty or damaged?)")
            if doc is not None:
                rs.docs[doc.get("suite") or _json_stem(f)] = doc
            elif isinstance(obj, dict) and str(obj.get("schema", "")).startswith(VALIDATION_SCHEMA):
                rs.validation = obj
            elif not (isinstance(obj, dict) and str(obj.get("schema", "")).startswith("gpudissect.")):
                rs.extras[f.name] = obj  # e.g. selfcheck.json; our own outputs (simexport, ...) are skipped
        if not rs.docs:
            raise LoadError(f"{p}: no suite documents (<suite>.json) in this directory")
        return rs
    if p.name.endswith(JSON_NAMES):
        doc = _doc_from_json(_read_json(p), p)
        if doc is None:
            raise LoadError(f"{p}: neither a {SUITE_SCHEMA} document nor a list of records")
        stem = _json_stem(p)
        return ResultSet(label=label or stem, source=str(p), docs={doc.get("suite") or stem: doc})
    if p.suffix in (".db", ".gz", ".xz", ".sqlite"):
        return _from_db(p, label or p.name.split(".")[0])
    raise LoadError(f"{p}: expected a data directory, a .json document or a .db results database")
