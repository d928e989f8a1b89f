"""Map the whole catalog to SASS (no GPU): parallel autonomic verification of every variant."""

from __future__ import annotations

import csv
import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

from gpudissect.arch.target import Target
from gpudissect.catalog.model import Variant
from gpudissect.kernel.toolchain import ToolchainMissing
from gpudissect.suites.instructions.verify import MapRecord, autoverify, autoverify_many


def default_jobs() -> int:
    return max(2, os.cpu_count() or 2)


def map_catalog(
    variants: list[Variant],
    target: Target,
    jobs: int | None = None,
    progress: Callable[[MapRecord], None] | None = None,
) -> list[MapRecord]:
    """Autoverify every variant (batched modules, parallel); one failing variant never
    stops the others."""
    try:
        return autoverify_many(variants, target, jobs=jobs or default_jobs(), progress=progress)
    except ToolchainMissing:
        raise
    except Exception:  # a crash in a batch: fall back to one variant at a time
        out = []
        for v in variants:
            try:
                out.append(autoverify(v, target))
            except Exception as e:
                out.append(MapRecord(variant=v.name, arch=target.arch, verified=False, sass=[], strategy=None,
                                     reason=f"{type(e).__name__}: {e}", status="error", cls=v.cls))
        return out


def summary(records: list[MapRecord] | list[dict]) -> dict[str, int]:
    s = {"total": len(records)}
    for r in records:
        status = r["status"] if isinstance(r, dict) else r.status
        s[status] = s.get(status, 0) + 1
    return s


def _row(r: MapRecord | dict) -> dict:
    """A record as the map's JSON holds it (another suite's records are dicts already)."""
    return r if isinstance(r, dict) else r.to_json()


def summary_line(s: dict[str, int], arch: str, what: str = "variants") -> str:
    """The map in one line: the verified share of the variants that apply to ``arch``, what else
    they came to, and what was skipped and why ('unsupported': the catalog's min_sm, or ptxas,
    says the variant needs a later architecture or a feature ``arch`` lacks)."""
    skipped = s.get("unsupported", 0)
    applicable = s["total"] - skipped
    verified = s.get("verified", 0)
    share = f" ({100 * verified / applicable:.1f}%)" if applicable else ""
    rest = [f"{k} {v}" for k, v in s.items() if k not in ("total", "verified", "unsupported")]
    line = f"{s['total']} {what} on {arch}: verified {verified} of {applicable} applicable{share}"
    line += "".join(f", {r}" for r in rest)
    if skipped:
        line += f"; {skipped} not applicable on {arch} (need a later architecture or a feature it lacks)"
    return line


def write_json(records: list[MapRecord] | list[dict], path: Path, compress: bool = False) -> None:
    """The map as JSON (gzipped when ``compress``: the shipped map, ``data/<arch>/map.json.gz``):
    the records in order, each one's keys sorted (the same bytes for the same map)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (json.dumps([_row(r) for r in records], indent=1, sort_keys=True) + "\n").encode()
    path.write_bytes(gzip.compress(text, mtime=0) if compress else text)


def write_csv(records: list[MapRecord] | list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "arch", "catalog", "class", "status", "verified", "sass", "strategy", "glue",
                    "stalls", "reason"])
        for r in map(_row, records):
            w.writerow([r["variant"], r["arch"], r.get("catalog", "instructions"), r["cls"], r["status"],
                        r["verified"], " + ".join(r["sass"]), r.get("strategy") or "", r.get("glue") or "",
                        " ".join(f"{op}:{n}" for op, n in (r.get("stalls") or {}).items()), r.get("reason") or ""])
