"""Does a run give the same results as a shipped data set (issue 36: a faster run must not change
what it reports)? Compares every record the two hold, matched by suite, variant, measure and
the parameters that name a configuration:

* every instruction-suite latency (a record in cycles) within ``--cycles`` (0.5) of the set's;
* every clean throughput peak (no flag that keeps it out of a table) within ``--rel`` (2%);
* every verdict (a parameter named ``verdict`` or ``*_verdict``) the same;

and says, per suite, how far the other numbers moved (median and largest relative change). Two
runs on a GPU differ by their noise; a record flagged by either run is not held to the limits.

    python scripts/compare_runs.py NEW BASE [--json OUT]

NEW and BASE: a store (``.db``), or a folder of stores (``<suite>.db`` or ``<suite>.db.xz``, as
``data/h200``). Exit 1 when a limit is broken (counted by kind and PTX opcode on the terminal,
each one in ``--json``), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sqlite3
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudissect.report.read.results import UNTRUSTED  # noqa: E402
from gpudissect.suites.instructions.core import BAD as SWEEP_BAD  # noqa: E402

# the parameters that name a configuration (not what was measured in it)
IDENTITY = ("chains", "warps", "distance", "operand", "class", "blocks_per_sm", "config", "level", "footprint",
            "stride", "bytes", "threads", "block", "grid", "cluster", "size", "sm", "probe", "kind", "shape",
            "dtype", "layout", "where", "tile", "swizzle", "data", "pattern", "width", "mode", "op", "scope",
            "group")
BAD = tuple(dict.fromkeys((*UNTRUSTED, *SWEEP_BAD)))  # what keeps a record out of a table or a peak


def stores(path: Path, tmp: Path) -> list[Path]:
    """The SQLite stores of a path (a folder's ``*.db.xz`` unpacked into ``tmp``)."""
    if path.is_file():
        return [path]
    out = sorted(path.glob("*.db"))
    for xz in sorted(path.glob("*.db.xz")):
        dst = tmp / xz.name.removesuffix(".xz")
        dst.write_bytes(lzma.decompress(xz.read_bytes()))
        out.append(dst)
    return out


def records(path: Path, tmp: Path) -> dict[tuple, dict]:
    """(suite, variant, measure, identity, n-th) -> record, of each suite's latest finished run."""
    out: dict[tuple, dict] = {}
    for db in stores(path, tmp):
        con = sqlite3.connect(db)
        con.row_factory = sqlite3.Row
        latest = {r["suite"]: r["id"] for r in con.execute("select id, suite from runs where finished is not null "
                                                          "order by id")}
        for suite, run in latest.items():
            seen: dict[tuple, int] = defaultdict(int)
            for r in con.execute("select variant, measure, params, value, unit, flags from results where run_id=? "
                                 "order by id", (run,)):
                p = json.loads(r["params"] or "{}")
                ident = tuple((k, json.dumps(p[k], sort_keys=True)) for k in IDENTITY if k in p)
                key = (suite, r["variant"], r["measure"], ident)
                n = seen[key]
                seen[key] += 1
                out[(*key, n)] = {"value": r["value"], "unit": r["unit"], "flags": json.loads(r["flags"] or "[]"),
                                  "verdicts": {k: v for k, v in p.items() if k == "verdict" or k.endswith("_verdict")}}
    return out


def clean(rec: dict) -> bool:
    return rec["value"] is not None and not any(str(f).startswith(BAD) for f in rec["flags"])


def compare(new: dict, base: dict, cycles: float, rel: float) -> dict:
    broken: list[str] = []
    checked = defaultdict(int)
    moved: dict[str, list[float]] = defaultdict(list)
    for key in sorted(set(new) & set(base), key=str):
        a, b = new[key], base[key]
        suite, variant, measure = key[:3]
        name = f"{suite} {variant} {measure} {dict(key[3]) or ''}".strip()
        for k in set(a["verdicts"]) | set(b["verdicts"]):
            checked["verdicts"] += 1
            if a["verdicts"].get(k) != b["verdicts"].get(k):
                broken.append(f"verdict {name} {k}: {b['verdicts'].get(k)} -> {a['verdicts'].get(k)}")
        if a["value"] is None or b["value"] is None:
            continue
        if b["value"]:
            moved[suite].append(abs(a["value"] - b["value"]) / abs(b["value"]))
        if not (clean(a) and clean(b)):
            continue
        if suite == "instructions" and str(a["unit"]).startswith("cycles"):
            checked["latencies"] += 1
            if abs(a["value"] - b["value"]) > cycles:
                broken.append(f"latency {name}: {b['value']:.4g} -> {a['value']:.4g} cycles")
        elif measure.removesuffix("_with_companion") == "throughput_peak":
            checked["throughput peaks"] += 1
            if b["value"] and abs(a["value"] - b["value"]) > rel * abs(b["value"]):
                broken.append(f"throughput {name}: {b['value']:.4g} -> {a['value']:.4g} {a['unit']}")
    only_new = len(set(new) - set(base))
    only_base = len(set(base) - set(new))
    return {"checked": dict(checked), "broken": broken, "matched": len(set(new) & set(base)),
            "only_new": only_new, "only_base": only_base,
            "moved": {s: {"records": len(v), "median_rel": round(statistics.median(v), 5), "max_rel": round(max(v), 4)}
                      for s, v in sorted(moved.items()) if v}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new", type=Path)
    ap.add_argument("base", type=Path)
    ap.add_argument("--cycles", type=float, default=0.5, help="a latency's limit, cycles (0.5)")
    ap.add_argument("--rel", type=float, default=0.02, help="a clean throughput's limit, relative (0.02)")
    ap.add_argument("--json", type=Path, help="write the comparison here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        res = compare(records(a.new, Path(td)), records(a.base, Path(td)), a.cycles, a.rel)
    if a.json:  # first: a reader of the lines below may stop early
        a.json.write_text(json.dumps({**res, "new": str(a.new), "base": str(a.base), "cycles": a.cycles,
                                      "rel": a.rel}, indent=1) + "\n")
    print(f"{res['matched']} records matched ({res['only_new']} only in {a.new}, {res['only_base']} only in "
          f"{a.base}); checked: " + ", ".join(f"{n} {k}" for k, n in res["checked"].items()))
    for s, m in res["moved"].items():
        print(f"  {s}: {m['records']} values, median change {m['median_rel']:.2%}, largest {m['max_rel']:.1%}")
    print(f"{len(res['broken'])} beyond the limits (latency {a.cycles} cycles, clean throughput {a.rel:.0%}, "
          "verdicts equal)" + (":" if res["broken"] else ""))
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in res["broken"]:  # by kind and the PTX opcode of the variant (atom, ld, cvt, ...)
        kind, _, variant = line.split()[:3]
        groups[(kind, variant.split(".")[0])].append(line)
    for (kind, op), lines in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(lines)} {kind} of {op}.*, e.g. {lines[0].split(' ', 2)[2]}")
    return 1 if res["broken"] else 0


if __name__ == "__main__":
    sys.exit(main())
