"""Canonical quantities (L1 latency, L2 size, ...) looked up in a result set.

Where to look is data (``gpudissect/data/metrics.toml``); a quantity found nowhere is None
and its consumers say "not measured".
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gpudissect.report.load import ResultSet

# flags that make a value unusable for a derived quantity (the report still shows it, flagged)
BAD_FLAGS = ("error", "unverified", "non-positive slope", "sass")


@dataclass
class Found:
    name: str
    value: float
    unit: str
    source: str  # where in the result set: "memory summary latency.l1", "memory record ..."
    what: str
    flags: tuple[str, ...] = ()


@cache
def metric_specs() -> dict[str, dict]:
    text = resources.files("gpudissect").joinpath("data", "metrics.toml").read_text()
    return tomllib.loads(text)


def _number(v) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, dict):
        for k in ("value", "cycles", "bytes", "GB/s", "median"):
            if k in v:
                return _number(v[k])
    return None


def _dig(obj, path: list):
    for part in path:
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and isinstance(part, int) and -len(obj) <= part < len(obj):
            obj = obj[part]
        else:
            return None
    return obj


def _where(path: list) -> str:
    return " > ".join(str(p) for p in path)


def lookup(rs: ResultSet, name: str) -> Found | None:
    spec = metric_specs().get(name)
    if spec is None:
        raise KeyError(f"unknown quantity '{name}' (see data/metrics.toml)")
    for src in spec.get("from", []):
        if "provenance" in src:
            key = src["provenance"]
            for s in rs.suites():
                v = _number((rs.docs[s].get("provenance") or {}).get(key))
                if v is not None:
                    return Found(name, v, spec["unit"], f"{s} provenance {key}", spec["what"])
            continue
        doc = rs.docs.get(src.get("suite", ""))
        if doc is None:
            continue
        if "summary" in src:
            v = _number(_dig(doc.get("summary") or {}, src["summary"]))
            if v is not None:
                return Found(name, v, spec["unit"], f"{src['suite']} summary {_where(src['summary'])}",
                             spec["what"])
        elif "record" in src:
            for r in doc.get("records") or []:
                if r.get("value") is None or (src.get("measure") and r.get("measure") != src["measure"]):
                    continue
                if not fnmatch.fnmatchcase(r.get("variant") or "", src["record"]):
                    continue
                flags = tuple(f.split(":")[0] for f in r.get("flags") or [])
                if any(f.startswith(BAD_FLAGS) for f in flags):
                    continue
                return Found(name, float(r["value"]), r.get("unit") or spec["unit"],
                             f"{src['suite']} record {r['variant']} {r.get('measure')}", spec["what"], flags)
    return None


def all_metrics(rs: ResultSet) -> dict[str, Found | None]:
    return {name: lookup(rs, name) for name in metric_specs()}
