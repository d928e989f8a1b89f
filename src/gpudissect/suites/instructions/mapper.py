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


def summary(records: list[MapRecord]) -> dict[str, int]:
    s = {"total": len(records)}
    for r in records:
        s[r.status] = s.get(r.status, 0) + 1
    return s


def write_json(records: list[MapRecord], path: Path, compress: bool = False) -> None:
    """The map as JSON (gzipped when ``compress``: the shipped map, ``data/<arch>/map.json.gz``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (json.dumps([r.to_json() for r in records], indent=1) + "\n").encode()
    path.write_bytes(gzip.compress(text, mtime=0) if compress else text)


def write_csv(records: list[MapRecord], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "arch", "class", "status", "verified", "sass", "strategy", "glue", "reason"])
        for r in records:
            w.writerow([r.variant, r.arch, r.cls, r.status, r.verified, " + ".join(r.sass),
                        r.strategy or "", r.glue or "", r.reason or ""])
