"""Canonical quantities (L1 latency, L2 size, ...) looked up in a result set.

Where to look is data (``gpudissect/data/metrics.toml``); a quantity found nowhere is None
and its consumers say "not measured".
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from gpudissect.report.read.results import ResultSet

# flags that make a value unusable for a derived quantity (the report still shows it, flagged)
BAD_FLAGS = ("error", "unverified", "non-positive slope", "sass")
# the groups of the key view of a comparison (a quantity's ``group`` in metrics.toml), in order
KEY_GROUPS = ("device", "latency", "bandwidth", "size", "tensor", "instruction")
# what a quantity is (its ``kind`` in metrics.toml); those a record can carry are told by the
# record's own labels (:func:`record_is`), the others are numbers of a summary or a provenance
KINDS = ("latency", "throughput", "bandwidth", "size", "sector", "line", "count", "dense", "sparse")
RECORD_KINDS = ("latency", "throughput", "dense", "sparse")
STATISTICS = ("first", "max")
# a rate's ``timing``: for a record source, the measure of the records that give it (a summary
# source names its figure by its path: bandwidth's "sustained" entry for the sustained rate)
TIMINGS = {"burst": "throughput_peak", "sustained": "throughput_sustained"}
# element types whose tensor-core rate counts operations, not floating-point ones (TOP/s)
INTEGER_TYPES = frozenset({"s8", "u8", "s4", "u4", "b1"})
# forms that move fragments: their 'tflops' are bytes moved (TB/s)
FRAGMENT_MOVES = ("ldmatrix", "stmatrix", "wmma.load", "wmma.store")


@dataclass
class Found:
    name: str
    value: float
    unit: str
    source: str  # where in the result set: "memory summary latency.l1", "memory record ..."
    what: str
    flags: tuple[str, ...] = ()
    record: dict | None = field(default=None, repr=False)  # the record it was read from, if one
    timing: str | None = None  # a rate's timing (burst, sustained), as its quantity declares
    clock: str | None = None  # a rate's SM clock and power as its record / summary states them


def _timed(where: str, timing: str | None, clock: str | None) -> str:
    """Where a rate was found, with its timing and its clock: what every view shows as its source."""
    return f"{where} [{timing}; {clock or 'SM clock unknown'}]" if timing else where


@cache
def metric_specs() -> dict[str, dict]:
    text = resources.files("gpudissect").joinpath("data", "metrics.toml").read_text()
    specs = tomllib.loads(text)
    for name, spec in specs.items():
        problem = spec_problem(spec)
        if problem:
            raise ValueError(f"data/metrics.toml [{name}]: {problem}")
    return specs


def spec_problem(spec: dict) -> str | None:
    """What a quantity's declaration lacks (unit, kind; statistic with a record source), or None."""
    if not spec.get("unit"):
        return "no unit"
    if spec.get("kind") not in KINDS:
        return f"kind {spec.get('kind')!r} is none of {', '.join(KINDS)}"
    if "timing" in spec and spec["timing"] not in TIMINGS:
        return f"timing {spec['timing']!r} is none of {', '.join(TIMINGS)}"
    if any("record" in src for src in spec.get("from", [])):
        if spec["kind"] not in RECORD_KINDS:
            return f"a record source, but kind {spec['kind']!r} is no record's ({', '.join(RECORD_KINDS)})"
        if spec.get("statistic") not in STATISTICS:
            return f"a record source needs statistic = {' or '.join(STATISTICS)}"
    return None


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


def is_sparse(r: dict) -> bool:
    """A record of a sparse tensor-core form, by its own labels: a ``sp`` part of its variant
    name (mma.sp, mma.sp::ordered_metadata, wgmma.sp) or ``sparse`` in its params."""
    parts = (r.get("variant") or "").split(".")
    return any(p == "sp" or p.startswith("sp::") for p in parts) or bool((r.get("params") or {}).get("sparse"))


def rate_unit(r: dict) -> str:
    """The unit of a tensor-core record's 'tflops' (10^12 per second of its work): TB/s for a
    fragment load or store, TOP/s for integer and binary input types, TFLOP/s for the others."""
    variant = r.get("variant") or ""
    if variant.startswith(tuple(m + "." for m in FRAGMENT_MOVES)):
        return "TB/s"
    return "TOP/s" if INTEGER_TYPES & set(variant.split(".")) else "TFLOP/s"


def record_unit(r: dict, src: dict) -> str:
    """The unit of the number a ``record`` source reads from a record."""
    return rate_unit(r) if src.get("param") == "tflops" else (r.get("unit") or "")


def record_is(r: dict, kind: str) -> bool:
    """Whether a record's own labels (measure, variant name, params) say it is of ``kind``."""
    measure = r.get("measure") or ""
    if kind == "latency":  # a chain's latency, or one by L2 partition (latency_l2_near / _far)
        return measure == "latency" or measure.startswith("latency_l2_")
    if kind == "throughput":
        return measure.startswith("throughput")
    if kind in ("dense", "sparse"):
        return measure.startswith("throughput") and is_sparse(r) == (kind == "sparse")
    return False  # a kind no record carries: a summary's number


def _record_value(r: dict, src: dict) -> float | None:
    """A record's value, or with ``param`` the number under that key of its params (a record whose
    value is itself the rate in 10^12 per second, unit TFLOP/s, gives its value for 'tflops')."""
    if r.get("value") is None:
        return None
    if "param" not in src:
        return float(r["value"])
    v = _number((r.get("params") or {}).get(src["param"]))
    if v is None and src["param"] == "tflops" and r.get("unit") == "TFLOP/s":
        return float(r["value"])
    return v


def _matches(r: dict, src: dict) -> bool:
    """A record's params hold every key = value of the source's ``match`` (e.g. data = "random")."""
    p = r.get("params") or {}
    return all(p.get(k) == v for k, v in (src.get("match") or {}).items())


def _usable_records(spec: dict, src: dict, doc: dict) -> list[tuple[dict, float]]:
    """The records a ``record`` source names (variant globs, measure) whose own labels say the
    quantity's kind, timing and unit, without those whose flags make them unusable, each with
    its value."""
    out = []
    measure = TIMINGS[spec["timing"]] if "timing" in spec else src.get("measure")
    for r in doc.get("records") or []:
        if measure and r.get("measure") != measure:
            continue
        if not record_is(r, spec["kind"]) or record_unit(r, src) != spec["unit"]:
            continue
        if not any(fnmatch.fnmatchcase(r.get("variant") or "", g) for g in _globs(src["record"])):
            continue
        if not _matches(r, src):
            continue
        if any(f.split(":")[0].startswith(BAD_FLAGS) for f in r.get("flags") or []):
            continue
        v = _record_value(r, src)
        if v is not None:
            out.append((r, v))
    return out


def _from_records(name: str, spec: dict, src: dict, doc: dict) -> Found | None:
    """The first usable record of a ``record`` source, or with ``statistic = "max"`` the highest."""
    usable = _usable_records(spec, src, doc)
    if not usable:
        return None
    best = spec["statistic"] == "max"
    r, v = max(usable, key=lambda rv: rv[1]) if best else usable[0]
    where = f"{src['suite']} record {r['variant']} {r.get('measure')}"
    if "param" in src:
        where += f" {src['param']}"
    if best:
        where += f" (highest of {len(usable)} {spec['kind']})"
    flags = tuple(f.split(":")[0] for f in r.get("flags") or [])
    timing = spec.get("timing")
    clock = clock_text(r.get("params") or {}) if timing else None
    return Found(name, v, spec["unit"], _timed(where, timing, clock), spec["what"], flags, r, timing, clock)


def _mhz(v) -> float | None:
    n = _number(v)
    return n if n and n > 0 else None


def clock_text(p: dict) -> str:
    """The SM clock a rate's record params (or summary entry) state, and how it was had: measured
    in the kernel itself over its whole run (``sm_mhz_in_kernel``: per-SM median, min, max;
    ``sm_mhz_kernel``: a bandwidth kernel's own warps), measured in a separate kernel before and
    after the burst sweep (``observed_sm_mhz``), or only implied by the rates (``implied_sm_mhz``:
    a sustained record without the in-kernel reading); then NVML's power and throttle reasons
    during the run where sampled."""
    ik = p.get("sm_mhz_in_kernel")
    if isinstance(ik, dict) and _mhz(ik.get("median")):
        out = f"SM clock {ik['median']:.0f} MHz in-kernel (SMs {ik.get('min', 0):.0f}-{ik.get('max', 0):.0f})"
    elif _mhz(p.get("sm_mhz_kernel")):
        out = f"SM clock {_mhz(p.get('sm_mhz_kernel')):.0f} MHz in-kernel (its own warps)"
    elif _mhz(p.get("observed_sm_mhz")):
        out = f"SM clock {_mhz(p.get('observed_sm_mhz')):.0f} MHz in a separate kernel before and after the sweep"
    elif _mhz(p.get("implied_sm_mhz")):
        out = f"SM clock {_mhz(p.get('implied_sm_mhz')):.0f} MHz implied by the rates (no in-kernel reading)"
    else:
        out = "SM clock unknown"
    if "nvml" in p:
        out += "; " + power_text(p.get("nvml"))
    return out


def power_text(s) -> str:
    """NVML's view of a run (bench/power.py summarize): power, SM clock, throttle reasons seen."""
    if not isinstance(s, dict) or s.get("nvml") != "sampled":
        why = s.get("why") if isinstance(s, dict) else None
        return "power unknown" + (f" ({why})" if why else "")
    reasons = ", ".join(s.get("throttle_reasons") or []) or "none"
    return (f"power {s.get('power_w_median', 0):.0f} W median, {s.get('power_w_max', 0):.0f} W max, NVML SM "
            f"clock {s.get('sm_mhz_min', 0):.0f}-{s.get('sm_mhz_median', 0):.0f} MHz, throttle reasons: {reasons}")


def _summary_flags(doc: dict, path: list) -> tuple[str, ...]:
    """The flags (their kind, before ':') that the summary's dicts along ``path`` carry (a
    bandwidth figure's 'not-saturated' reaches every view that reads it)."""
    out: list[str] = []
    d = doc.get("summary") or {}
    for k in path[:-1]:
        d = d.get(k) if isinstance(d, dict) else None
        if not isinstance(d, dict):
            break
        fl = d.get("flags")
        for f in [fl] if isinstance(fl, str) else (fl or []):
            if isinstance(f, str) and (kind := f.split(":")[0]) not in out:
                out.append(kind)
    return tuple(out)


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
                near = _dig(doc.get("summary") or {}, src["summary"][:-1])
                clock = clock_text(near) if (spec.get("timing") and isinstance(near, dict)) else None
                where = _timed(f"{src['suite']} summary {_where(src['summary'])}", spec.get("timing"), clock)
                return Found(name, v, spec["unit"], where, spec["what"], flags=_summary_flags(doc, src["summary"]),
                             timing=spec.get("timing"), clock=clock)
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
