"""``gpudissect audit PATH``: check a data set for results that cannot be right.

PATH is a data directory, a suite JSON document or a results database (``.db``/``.db.gz``/``.db.xz``),
read with :mod:`gpudissect.report.read.results`. Each problem is one line, tagged with its kind:

* ``[limit]`` a clean instruction throughput above the SM's physical limit for its SASS
  (:mod:`gpudissect.arch.limits`): the method failed, the value cannot be presented. Values
  under a bad flag are not checked (they are not presented as clean), nor are those whose SASS
  list is not what one instance executes (``branch``, ``emulated``);
* ``[opt]`` a value timed from a kernel compiled below -O3 (a strategy whose ``opt`` < 3)
  without a flag that says so;
* ``[provenance]`` a suite document without GPU name, GPU UUID, driver, toolkit or SM clocks
  (NVML before and after; an in-kernel measured clock where the document has one);
* ``[gpu]`` suites of one data set measured on different GPUs (one line naming each mix);
* ``[flags]`` flags that contradict the values: ``noisy`` on samples whose repeats are all
  identical, a derived value that drops its source's ``error``/``exceeds-limit`` flag, a value
  that is NaN or infinite.
"""

from __future__ import annotations

import math
import re

from gpudissect.arch.limits import LimitsError, check, checked_sass, limit_for
from gpudissect.report.read.metrics import BAD_FLAGS
from gpudissect.report.read.results import LoadError, ResultSet, load_result_set
from gpudissect.suites import SUITES, get_suite

# flags under which a value is not presented as clean (such records are not limit-checked)
BAD = tuple(BAD_FLAGS) + ("not timed", "noisy", "poor-fit", "warps-not-overlapping",
                          "exceeds-limit", "clock-changed", "unsupported", "refused", "skipped")
THROUGHPUT_MEASURES = ("throughput", "throughput_peak", "throughput_with_companion",
                       "throughput_peak_with_companion")  # a pair's SASS includes its companion
THROUGHPUT_UNIT = "warp_instr/cycle/SM"
# flags under which the SASS list is not what one instance executes (a data-dependent path, a
# subroutine call): no limit follows from its static counts
NOT_STRAIGHT = ("branch", "emulated")
# flags that say a value was timed from a kernel below -O3
LOW_OPT_FLAGS = ("low-opt", "opt-level", "below-O3")
# provenance: (path, what) that every suite document must have
REQUIRED = ((("gpu_name",), "GPU name"), (("gpu_uuid",), "GPU UUID"), (("driver",), "driver"),
            (("toolkit",), "toolkit"), (("clocks_before", "sm_mhz"), "SM clock before (NVML)"),
            (("clocks_after", "sm_mhz"), "SM clock after (NVML)"))
# the SM clock measured in a kernel (bench/clock.py), at the top of the provenance or in one of
# its tables: where present (or where its measurement failed) it must be a usable number
IN_KERNEL_CLOCK = "sm_mhz_kernel"
IN_KERNEL_CLOCK_ERROR = "sm_mhz_kernel_error"
# flags a derived record must keep from the record it was derived from
STICKY = ("error", "exceeds-limit")
# sample keys that hold no repeats of the measured quantity (windows, wall-clock timings)
NOT_REPEATS = ("warp_windows_one_sm", "gpu_ms", "xs")


def _kinds(flags) -> list[str]:
    return [str(f).split(":")[0].strip() for f in flags or []]


def _bad(flags) -> bool:
    return any(k.startswith(BAD) for k in _kinds(flags))


def _where(r: dict) -> str:
    p = r.get("params") or {}
    cfg = ", ".join(f"{k}={p[k]}" for k in ("chains", "warps", "distance") if k in p)
    return (f"{r.get('suite', '?')} {r.get('variant')} {r.get('measure')}"
            + (f" ({cfg})" if cfg else ""))


def _low_opt_strategies() -> dict[str, int]:
    """Strategy name -> ptxas optimisation level, for today's strategies below -O3 of every
    registered suite (older data names its -O1/-O0 strategies by suffix: see ``_opt_level``)."""
    out: dict[str, int] = {}
    for name in SUITES:
        out.update({n: o for n, o in get_suite(name).compile_levels().items() if o < 3})
    return out


def _opt_level(strategy: str | None, known: dict[str, int]) -> int | None:
    if not strategy:
        return None
    if strategy in known:
        return known[strategy]
    m = re.search(r"-O([0-2])$", strategy)
    return int(m.group(1)) if m else None


def _finite(v) -> bool:
    return not isinstance(v, (int, float)) or isinstance(v, bool) or math.isfinite(v)


def check_limits(recs: list[dict], arch: str) -> list[str]:
    out = []
    for r in recs:
        if (r.get("measure") not in THROUGHPUT_MEASURES or r.get("unit") != THROUGHPUT_UNIT
                or r.get("value") is None or _bad(r.get("flags")) or not _finite(r["value"])
                or any(k.startswith(NOT_STRAIGHT) for k in _kinds(r.get("flags")))):
            continue
        lim = limit_for(checked_sass(r.get("sass"), r.get("params")), arch)
        flag = check(float(r["value"]), lim) if lim is not None else None
        if flag:
            out.append(f"[limit] {_where(r)}: {flag}")
    return out


def check_opt(recs: list[dict]) -> list[str]:
    known = _low_opt_strategies()
    out = []
    for r in recs:
        level = _opt_level(r.get("strategy"), known)
        if level is None or r.get("value") is None:
            continue
        if any(k.startswith(LOW_OPT_FLAGS) for k in _kinds(r.get("flags"))):
            continue
        out.append(f"[opt] {_where(r)}: value {r['value']:.4g} timed from a kernel compiled at "
                   f"-O{level} (strategy {r['strategy']}) without a flag saying so")
    return out


def check_hw_latency(recs: list[dict]) -> list[str]:
    """Every true latency (``latency_hw``, studies/stall_patch.py) rests on its sweep: the stall it
    names and every larger one swept computed the unpatched kernel's values, and ptxas's own
    stall was among them."""
    out = []
    for r in recs:
        if r.get("measure") != "latency_hw" or r.get("value") is None:
            continue
        p = r.get("params") or {}
        sweep = p.get("sweep") or []
        above = [d for d in sweep if d.get("stall", 0) >= r["value"]]
        if not above or not all(d.get("correct") is True for d in above):
            out.append(f"[hw-latency] {_where(r)}: {r['value']:g} cycles without every stall from it up "
                       "verified correct in its sweep")
        elif p.get("ptxas_stall") is not None and max(d["stall"] for d in above) < p["ptxas_stall"]:
            out.append(f"[hw-latency] {_where(r)}: the sweep did not start at ptxas's stall {p['ptxas_stall']}")
    return out


def _dig(d, path):
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _positive(v) -> bool:
    if isinstance(v, dict):
        v = v.get("sm_mhz", v.get("mhz", v.get("value")))
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _in_kernel_clock_problems(prov: dict) -> list[str]:
    out = []
    tables = [("", prov)] + [(f"{k}.", v) for k, v in prov.items() if isinstance(v, dict)]
    for where, t in tables:
        if IN_KERNEL_CLOCK in t and not _positive(t[IN_KERNEL_CLOCK]):
            out.append(f"in-kernel SM clock ({where}{IN_KERNEL_CLOCK}={t[IN_KERNEL_CLOCK]!r})")
        elif IN_KERNEL_CLOCK_ERROR in t and IN_KERNEL_CLOCK not in t:
            out.append(f"in-kernel SM clock (not measured: {t[IN_KERNEL_CLOCK_ERROR]})")
    return out


def check_provenance(rs: ResultSet) -> list[str]:
    out = []
    for s in rs.suites():
        prov = rs.docs[s].get("provenance") or {}
        missing = []
        for path, what in REQUIRED:
            v = _dig(prov, path)
            ok = _positive(v) if path[-1] == "sm_mhz" else v not in (None, "")
            if not ok:
                missing.append(what)
        missing += _in_kernel_clock_problems(prov)
        if missing:
            out.append(f"[provenance] {s}: missing or unusable: {', '.join(missing)}")
    return out


def _uuid(u) -> str | None:
    if not u:
        return None
    u = str(u).strip().lower()
    return u.removeprefix("gpu-")


def check_one_gpu(rs: ResultSet) -> list[str]:
    by: dict[str, list[str]] = {}
    for s in rs.suites():
        doc = rs.docs[s]
        uuids = {_uuid((doc.get("provenance") or {}).get("gpu_uuid"))}
        uuids |= {_uuid(r.get("gpu_uuid")) for r in doc.get("records") or []}
        for u in sorted(uuids - {None}):
            by.setdefault(u, []).append(s)
    if len(by) <= 1:
        return []
    mix = "; ".join(f"{u}: {', '.join(ss)}" for u, ss in sorted(by.items()))
    return [f"[gpu] data set mixes {len(by)} GPUs (by UUID): {mix}"]


def _repeat_groups(samples) -> list[list[float]]:
    """The groups of repeats in a record's raw samples: lists of numbers (repeats at one
    length or configuration) and {min, max} summaries."""
    groups: list[list[float]] = []

    def walk(obj):
        if isinstance(obj, dict):
            if all(isinstance(obj.get(k), (int, float)) for k in ("min", "max")):
                groups.append([float(obj["min"]), float(obj["max"])])
            for k, v in obj.items():
                if k not in NOT_REPEATS:
                    walk(v)
        elif isinstance(obj, list):
            if len(obj) >= 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                     for x in obj):
                groups.append([float(x) for x in obj])
            else:
                for v in obj:
                    walk(v)

    walk(samples)
    return groups


def check_flags(recs: list[dict]) -> list[str]:
    out = []
    for r in recs:
        v = r.get("value")
        if isinstance(v, float) and not math.isfinite(v):
            out.append(f"[flags] {_where(r)}: value is {v}")
        if "noisy" in _kinds(r.get("flags")):
            groups = _repeat_groups(r.get("samples"))
            if groups and all(max(g) == min(g) for g in groups):
                out.append(f"[flags] {_where(r)}: flagged noisy but its raw samples are "
                           f"identical within every group of repeats")
    # a derived record (the peak over configurations) must keep its source's sticky flags
    src = {}
    for r in recs:
        p = r.get("params") or {}
        if r.get("measure") == "throughput" and "chains" in p and "warps" in p:
            src[(r.get("suite"), r.get("variant"), p["chains"], p["warps"])] = r
    for r in recs:
        best = (r.get("params") or {}).get("best")
        if r.get("measure") != "throughput_peak" or r.get("value") is None or not isinstance(
                best, dict):
            continue
        s = src.get((r.get("suite"), r.get("variant"), best.get("chains"), best.get("warps")))
        if s is None:
            continue
        lost = sorted({k for k in _kinds(s.get("flags")) if k.startswith(STICKY)}
                      - set(_kinds(r.get("flags"))))
        if lost:
            out.append(f"[flags] {_where(r)}: value {v:.4g} presented clean, but its source "
                       f"configuration is flagged {', '.join(lost)}")
    return out


def _arch(rs: ResultSet, default: str | None) -> str:
    """The architecture the set was measured on (its provenance, else ``default``), without a
    specific suffix."""
    a = str(rs.provenance().get("arch") or default or "")
    m = re.fullmatch(r"(sm_\d+)[a-z]?", a)
    if not m:
        raise LimitsError(f"the data names no architecture (provenance arch: {a or 'none'})")
    return m.group(1)


def audit(path, default_arch: str | None = None) -> list[str]:
    """One line per problem found in the data set at ``path`` (empty: none)."""
    return audit_set(load_result_set(path), default_arch)


def audit_set(rs: ResultSet, default_arch: str | None = None) -> list[str]:
    """One line per problem found in a loaded result set (empty: none); ``default_arch``: the
    architecture of a set whose provenance names none."""
    recs = rs.records()
    lines = []
    try:
        lines += check_limits(recs, _arch(rs, default_arch))
    except LimitsError as e:
        lines.append(f"[limit] no limits to check against: {e}")
    lines += check_opt(recs)
    lines += check_provenance(rs)
    lines += check_one_gpu(rs)
    lines += check_flags(recs)
    lines += check_hw_latency(recs)
    return [ln for ln in lines if ln]


def main(path, default_arch: str | None = None) -> int:
    """Print the problems; 0: none, 1: some, 2: PATH missing or unreadable."""
    try:
        rs = load_result_set(path)
    except (LoadError, OSError) as e:
        print(f"audit: cannot read {path}: {e}")
        return 2
    if rs.reference is not None:
        print(f"audit: {path} is a published reference, not a data set")
        return 2
    n = len(rs.records())
    lines = audit_set(rs, default_arch)
    for ln in lines:
        print(ln)
    if not lines:
        print(f"audit: {n} records, no problem")
        return 0
    counts: dict[str, int] = {}
    for ln in lines:
        k = ln.split("]")[0].lstrip("[")
        counts[k] = counts.get(k, 0) + 1
    print(f"audit: {n} records, {len(lines)} problems ("
          + ", ".join(f"{k}: {c}" for k, c in counts.items()) + ")")
    return 1
