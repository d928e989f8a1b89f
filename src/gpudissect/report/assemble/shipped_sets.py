"""The README's table of the shipped data sets, generated from the sets themselves: per set, the
GPU that measured it (name, UUID, SMs), driver, toolkit, platform, the date of the run, the SM
clock NVML reported and the one measured in a kernel before and after the suites, each suite's
wall time from the run's log, the GPU tests' result and the GPU of the predictor's validation.
Nothing in it is typed: ``python scripts/readme_data.py`` rewrites it and a test fails when it
drifts."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from gpudissect.compressed import decompress
from gpudissect.report.read.results import LoadError, load_result_set
from gpudissect.suites import SUITES

BEGIN = "<!-- shipped-sets: begin (scripts/readme_data.py) -->"
END = "<!-- shipped-sets: end -->"
SETS = ("h100", "h200")  # data/<set>/, in this order
WALL = re.compile(r"^(?P<what>[\w ]+): wall (?P<s>[\d.]+) s$", re.M)  # /usr/bin/time lines of device_run.sh
# the runner's summary line of a suite (``gpudissect run`` of every suite; the console may wrap it)
RUN = re.compile(r"^run \d+ \((?P<what>\w+)\):[^\n]*(?:\n(?!run )[^\n]*)*?total_s (?P<s>[\d.]+) s", re.M)
PYTEST = re.compile(r"^(?:=+ )?(?P<line>\d+ passed.*?)(?: in [\d.]+s)?(?: =+)?$", re.M)


def _clocks(docs: dict) -> tuple[list[float], list[float]]:
    """NVML's and the in-kernel SM clocks (MHz) of every suite, before and after."""
    nvml, kernel = [], []
    for doc in docs.values():
        prov = doc.get("provenance") or {}
        for key in ("clocks_before", "clocks_after"):
            c = prov.get(key) or {}
            if c.get("sm_mhz") is not None:
                nvml.append(float(c["sm_mhz"]))
            if c.get("sm_mhz_kernel") is not None:
                kernel.append(float(c["sm_mhz_kernel"]))
    return nvml, kernel


def _span(xs: list[float]) -> str:
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"


def _one(values: set) -> str:
    vals = sorted(str(v) for v in values if v)
    return ", ".join(vals) if vals else "-"


def _platform(prov: dict) -> str:
    p = prov.get("platform") or {}
    parts = []
    if p.get("ecc"):
        parts.append(f"ECC {p['ecc']}")
    if p.get("power_limit_w"):
        parts.append(f"{p['power_limit_w']:.0f} W")
    if p.get("host"):
        parts.append(str(p["host"]))
    return ", ".join(parts) if parts else "not recorded"


def _log(path: Path) -> str:
    if not path.exists():
        return ""
    return decompress(path.read_bytes(), path).decode(errors="replace")


def _validation_gpu(folder: Path) -> str:
    for name in ("predict-validation.json.xz", "predict-validation.json.gz"):
        p = folder / name
        if p.exists():
            gpu = json.loads(decompress(p.read_bytes(), p)).get("gpu") or {}
            return f"{gpu.get('name', '?')} `{str(gpu.get('uuid', '?'))[:8]}`"
    return "-"


def set_row(folder: Path) -> dict:
    """The facts of one shipped set (a data directory), as strings."""
    docs = load_result_set(folder).docs
    provs = [d.get("provenance") or {} for d in docs.values()]
    started = [p["started"] for p in provs if p.get("started")]
    nvml, kernel = _clocks(docs)
    log = _log(folder / "run.log.gz")
    walls: dict[str, float] = {}
    # a suite cut at a call's limit and resumed in the next: the sum; a set from one run of every
    # suite has no wall lines, but each suite's summary line with its total
    for m in WALL.finditer(log) if WALL.search(log) else RUN.finditer(log):
        walls[m["what"].strip()] = walls.get(m["what"].strip(), 0.0) + float(m["s"])
    tests = ""
    for f in (folder / "gpu-pytest.log", folder / "run.log.gz"):
        found = PYTEST.findall(_log(f)) if f.exists() else []
        if found:
            tests = found[-1].strip()
            break
    return {
        "set": f"`data/{folder.name}`",
        "gpu": _one({p.get("gpu_name") for p in provs}),
        "uuid": _one({f"`{p['gpu_uuid']}`" for p in provs if p.get("gpu_uuid")}),
        "sms": _one({p.get("sm_count") for p in provs}),
        "driver": _one({p.get("driver") for p in provs}),
        "toolkit": _one({p.get("toolkit") for p in provs}),
        "platform": _one({_platform(p) for p in provs}),
        "date": time.strftime("%Y-%m-%d", time.gmtime(min(started))) if started else "-",
        "suites": f"{len(docs)} ({', '.join(s for s in SUITES if s in docs)})",
        "nvml": _span(nvml),
        "kernel": _span(kernel),
        "walls": walls,
        "tests": tests or "not run with this set",
        "validation": _validation_gpu(folder),
    }


def markdown_table(root: Path) -> str:
    """The block (markers included) for the sets under ``root/data``."""
    rows = []
    for name in SETS:
        folder = root / "data" / name
        try:
            rows.append(set_row(folder))
        except LoadError as e:
            rows.append({"set": f"`data/{name}`", "error": str(e)})
    fields = [("GPU", "gpu"), ("UUID", "uuid"), ("SMs", "sms"), ("driver", "driver"), ("toolkit", "toolkit"),
              ("platform (NVML)", "platform"), ("run (UTC date)", "date"), ("suites", "suites"),
              ("SM clock by NVML, MHz (before/after each suite)", "nvml"),
              ("SM clock in a kernel, MHz (before/after each suite)", "kernel")]
    head = "| | " + " | ".join(r["set"] for r in rows) + " |"
    lines = [BEGIN, "", head, "|---|" + "---|" * len(rows)]
    for label, key in fields:
        lines.append(f"| {label} | " + " | ".join(r.get(key, r.get("error", "-")) for r in rows) + " |")
    whats = [w for r in rows for w in r.get("walls", {})]
    for what in dict.fromkeys(whats):
        lines.append(f"| wall time: {what}, s | " + " | ".join(
            f"{r['walls'][what]:.0f}" if what in r.get("walls", {}) else "-" for r in rows) + " |")
    lines.append("| GPU tests on that machine | " + " | ".join(r.get("tests", "-") for r in rows) + " |")
    lines.append("| predictor's validation measured on | " + " | ".join(r.get("validation", "-") for r in rows)
                 + " |")
    lines += ["", END]
    return "\n".join(lines)
