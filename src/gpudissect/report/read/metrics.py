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

from gpudissect.report.read.results import ResultSet

# flags that make a value unusable for a derived quantity (the report still shows it, flagged)
BAD_FLAGS = ("error", "unverified", "non-positive slope", "sass")
# the groups of the key view of a comparison (a quantity's ``group`` in metrics.toml), in order
KEY_GROUPS = ("device", "latency", "bandwidth", "size", "tensor", "instruction")


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


def _globs(pattern) -> list[str]:
    return list(pattern) if isinstance(pattern, (list, tuple)) else [pattern]


def _record_value(r: dict, src: dict) -> float | None:
    """A record's value, or with ``param`` the number under that key of its params."""
    if r.get("value") is None:
        return None
    return _number((r.get("params") or {}).get(src["param"])) if "param" in src else float(r["value"])


def _usable_records(doc: dict, src: dict) -> list[tuple[dict, float]]:
    """The records a ``record`` source names (variant globs, measure), without those whose
    flags make them unusable, each with its value."""
    out = []
    for r in doc.get("records") or []:
        if src.get("measure") and r.get("measure") != src["measure"]:
            continue
        if not any(fnmatch.fnmatchcase(r.get("variant") or "", g) for g in _globs(src["record"])):
            continue
        if any(f.split(":")[0].startswith(BAD_FLAGS) for f in r.get("flags") or []):
            continue
        v = _record_value(r, src)
        if v is not None:
            out.append((r, v))
    return out


def _from_records(name: str, spec: dict, src: dict, doc: dict) -> Found | None:
    """The first usable record of a ``record`` source, or with ``best = "max"`` the highest."""
    usable = _usable_records(doc, src)
    if not usable:
        return None
    r, v = max(usable, key=lambda rv: rv[1]) if src.get("best") == "max" else usable[0]
    where = f"{src['suite']} record {r['variant']} {r.get('measure')}"
    if "param" in src:
        where += f" {src['param']}"
    if src.get("best") == "max":
        where += f" (highest of {len(usable)})"
    flags = tuple(f.split(":")[0] for f in r.get("flags") or [])
    unit = spec["unit"] if "param" in src else (r.get("unit") or spec["unit"])
    return Found(name, v, unit, where, spec["what"], flags)


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
        if doc is None:  # also a "reference" source: published figures, read by compare
            continue
        if "summary" in src:
            v = _number(_dig(doc.get("summary") or {}, src["summary"]))
            if v is not None:
                return Found(name, v, spec["unit"], f"{src['suite']} summary {_where(src['summary'])}",
                             spec["what"])
        elif "record" in src:
            found = _from_records(name, spec, src, doc)
            if found is not None:
                return found
    return None


def key_quantities() -> dict[str, dict]:
    """The quantities of the key view of a comparison (those with a ``group``), group by
    group in the order of :data:`KEY_GROUPS`, each group in the file's order."""
    specs = {n: s for n, s in metric_specs().items() if s.get("group")}
    rank = {g: i for i, g in enumerate(KEY_GROUPS)}
    return dict(sorted(specs.items(), key=lambda kv: rank.get(kv[1]["group"], len(rank))))


def all_metrics(rs: ResultSet) -> dict[str, Found | None]:
    return {name: lookup(rs, name) for name in metric_specs()}
