"""PTX->SASS maps of several architectures side by side (``gpudissect compare`` given map files,
``data/<arch>/map.json.gz`` as ``gpudissect map --json`` writes them): per variant of each
catalog, the SASS one instance becomes on each architecture, its status there, and ptxas's stall
count of each SASS instruction (the control codes the map decoded); rows where the architectures
differ are the point.

The document: a summary per architecture and catalog (variants, applicable, verified, the
verified share of the applicable ones, unverified, not applicable), then the variants whose
SASS differs between the architectures where they verified, the variants verified on some
architectures and not on others where they apply, and the SASS instructions whose stall count
differs. Cells that differ from the first architecture that has a value are in bold.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = "gpudissect.compare-maps/1"
STATUS_CELL = {"unsupported": "n/a", "unverified": "unverified", "error": "error", "emulated": "emulated"}


class MapLoadError(ValueError):
    """A file that is not a PTX->SASS map."""


@dataclass
class ArchMap:
    """One architecture's map: its records by (catalog, variant), in the file's order."""

    path: str
    arch: str
    records: dict[tuple[str, str], dict] = field(default_factory=dict)


def _read(path: Path):
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def is_map_file(spec: str) -> bool:
    """Whether ``spec`` names a PTX->SASS map (a JSON list of records with a variant and an
    architecture, gzipped or not), rather than a result set."""
    p = Path(spec)
    if not p.is_file() or not (p.suffix == ".json" or p.name.endswith(".json.gz")):
        return False
    try:
        data = _read(p)
    except (OSError, ValueError, EOFError):
        return False
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and {"variant", "arch"} <= set(data[0])


def catalog_of(r: dict) -> str:
    return r.get("catalog") or "instructions"


def load_map(spec: str) -> ArchMap:
    p = Path(spec)
    try:
        data = _read(p)
    except (OSError, ValueError, EOFError) as e:
        raise MapLoadError(f"{spec}: cannot read a map: {e}") from e
    if not isinstance(data, list) or not data or not all(isinstance(r, dict) and "variant" in r for r in data):
        raise MapLoadError(f"{spec}: not a PTX->SASS map (a JSON list of variant records)")
    archs = sorted({r.get("arch") for r in data})
    if len(archs) != 1 or not archs[0]:
        raise MapLoadError(f"{spec}: a map of one architecture expected, found {archs}")
    return ArchMap(spec, archs[0], {(catalog_of(r), r["variant"]): r for r in data})


def applicable(r: dict | None) -> bool:
    return r is not None and r.get("status") != "unsupported"


def counts(m: ArchMap) -> dict[str, dict[str, int]]:
    """Per catalog: total, applicable, verified, emulated (no native path: the tensor catalog),
    unverified (error included), not applicable."""
    out: dict[str, dict[str, int]] = {}
    for (cat, _), r in m.records.items():
        c = out.setdefault(cat, {"total": 0, "applicable": 0, "verified": 0, "emulated": 0, "unverified": 0,
                                 "not_applicable": 0})
        c["total"] += 1
        if not applicable(r):
            c["not_applicable"] += 1
            continue
        c["applicable"] += 1
        c["verified" if r.get("verified") else "emulated" if r.get("status") == "emulated" else "unverified"] += 1
    return out


def sass_of(r: dict | None) -> str | None:
    """One instance's SASS where the variant verified, else None."""
    return " + ".join(r.get("sass") or []) if r is not None and r.get("verified") else None


def cell(r: dict | None) -> str:
    if r is None:
        return ""
    s = sass_of(r)
    return s if s is not None else STATUS_CELL.get(r.get("status", ""), r.get("status", ""))


@dataclass
class MapRow:
    catalog: str
    variant: str
    records: list[dict | None]

    @property
    def sass_differs(self) -> bool:
        return len({s for r in self.records if (s := sass_of(r)) is not None}) > 1

    @property
    def status_differs(self) -> bool:
        """Verified on some architectures, not on others where it applies."""
        got = {bool(r.get("verified")) for r in self.records if applicable(r)}
        return len(got) > 1

    def stalls(self) -> list[tuple[str, list[int | None]]]:
        """Each SASS instruction with a stall count on at least two architectures whose counts
        differ: (SASS, the count per architecture, None where it has none)."""
        ops = dict.fromkeys(op for r in self.records if sass_of(r) is not None for op in (r.get("stalls") or {}))
        out = []
        for op in ops:
            vals = [(r.get("stalls") or {}).get(op) if sass_of(r) is not None else None for r in self.records]
            present = {v for v in vals if v is not None}
            if len([v for v in vals if v is not None]) >= 2 and len(present) > 1:
                out.append((op, vals))
        return out


def map_rows(maps: list[ArchMap]) -> list[MapRow]:
    """One row per (catalog, variant) of any map, in the first map's order, then the others'."""
    keys = dict.fromkeys(k for m in maps for k in m.records)
    return [MapRow(cat, var, [m.records.get((cat, var)) for m in maps]) for cat, var in keys]


def _bold_diff(values: list[str]) -> list[str]:
    """The cells, those that differ from the first non-empty one in bold."""
    first = next((v for v in values if v not in ("", "n/a")), None)
    return [f"**{v}**" if first is not None and v not in ("", "n/a", first) else v for v in values]


def _esc(s: str) -> str:
    return s.replace("|", "\\|")


def comparison_markdown(maps: list[ArchMap], rows: list[MapRow], command: str) -> str:
    archs = [m.arch for m in maps]
    head = "| " + " | ".join(archs) + " |"
    rule = "|---" * len(archs) + "|"
    L = ["# PTX->SASS across architectures", "",
         f"Generated by `{command}` from the maps of `gpudissect map --arch <arch> --json` "
         f"({', '.join(f'`{m.path}`' for m in maps)}); do not edit by hand.", "",
         "Each map compiles every catalog variant for the architecture, reads the SASS of its timed "
         "region and verifies it (one instance's SASS, nothing that distorts a timing); "
         "'not applicable': the variant needs a later architecture or a feature the architecture "
         "lacks; 'emulated' (tensor catalog): ptxas lowers the instruction to a subroutine call or other "
         "work, no tensor-core SASS, on that architecture. Stall counts are ptxas's static schedule, decoded from the control codes of the "
         "cubin (the median over the timed region of the longest verification kernel).", "",
         "## Summary", "",
         "| architecture | catalog | variants | applicable | verified | verified share | emulated | unverified | "
         "not applicable |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in maps:
        for cat, c in counts(m).items():
            share = f"{100 * c['verified'] / c['applicable']:.1f}%" if c["applicable"] else "-"
            L.append(f"| {m.arch} | {cat} | {c['total']} | {c['applicable']} | {c['verified']} | {share} | "
                     f"{c['emulated']} | {c['unverified']} | {c['not_applicable']} |")
    sass_rows = [r for r in rows if r.sass_differs]
    L += ["", "## SASS that differs between generations", "",
          f"{len(sass_rows)} variants verified on two or more architectures with different SASS "
          "(cells that differ from the first architecture's in bold; 'n/a': not applicable).", "",
          "| variant | catalog " + head, "|---|---" + rule]
    for r in sass_rows:
        L.append(f"| `{r.variant}` | {r.catalog} | " + " | ".join(_esc(c) for c in _bold_diff([cell(x) for x in r.records]))
                 + " |")
    status_rows = [r for r in rows if r.status_differs]
    L += ["", "## Verified on some architectures, not on others", "",
          f"{len(status_rows)} variants (the first reason of each architecture where it did not verify below).", "",
          "| variant | catalog " + head, "|---|---" + rule]
    for r in status_rows:
        L.append(f"| `{r.variant}` | {r.catalog} | " + " | ".join(_esc(c) for c in _bold_diff([cell(x) for x in r.records]))
                 + " |")
    if status_rows:
        L += ["", "Reasons:", ""]
        for r in status_rows:
            for m, x in zip(maps, r.records, strict=True):
                if applicable(x) and not x.get("verified"):
                    reason = (x.get("reason") or "").split("; ")[0][:200]
                    L.append(f"* `{r.variant}` on {m.arch}: {_esc(reason)}")
    stall_rows = [(r, op, vals) for r in rows for op, vals in r.stalls()]
    L += ["", "## Stall counts that differ", "",
          f"{len(stall_rows)} SASS instructions of verified variants to which ptxas gives different stall "
          "counts on different architectures (cycles before the warp's next instruction may issue).", "",
          "| variant | SASS " + head, "|---|---" + rule]
    for r, op, vals in stall_rows:
        L.append(f"| `{r.variant}` | {op} | " + " | ".join(_bold_diff(["" if v is None else str(v) for v in vals]))
                 + " |")
    return "\n".join(L) + "\n"


def comparison_document(maps: list[ArchMap], rows: list[MapRow]) -> dict:
    return {
        "schema": SCHEMA,
        "maps": [{"path": m.path, "arch": m.arch, "counts": counts(m)} for m in maps],
        "rows": [{"catalog": r.catalog, "variant": r.variant,
                  "cells": {m.arch: cell(x) for m, x in zip(maps, r.records, strict=True)},
                  "stalls": {op: dict(zip([m.arch for m in maps], vals, strict=True)) for op, vals in r.stalls()},
                  "sass_differs": r.sass_differs, "status_differs": r.status_differs}
                 for r in rows if r.sass_differs or r.status_differs or r.stalls()],
    }
