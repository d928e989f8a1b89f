"""What gpudissect does on each architecture it has a folder for (``data/arch/<arch>/``): the
products it knows, the features the folder lists, what each suite runs there (planned and gated
as on a GPU of that architecture, by ``bench.contract.gated``) and how much of the catalog the
shipped PTX->SASS map verifies. The README's table of supported architectures is this module's
output (``scripts/readme_archs.py`` writes it; a test fails when the two drift apart)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field

from gpudissect.arch.target import make_target, supported_archs
from gpudissect.bench.contract import Context, Skipped, gated
from gpudissect.device.device import FakeDevice
from gpudissect.report.read.shipped import shipped_map
from gpudissect.suites import SUITES, get_suite

BEGIN, END = "<!-- architectures: begin (scripts/readme_archs.py) -->", "<!-- architectures: end -->"


@dataclass
class ArchSupport:
    arch: str
    compute_capability: str
    products: list[str]
    features: list[str]
    runs: dict[str, tuple[int, int]] = field(default_factory=dict)  # suite -> (items run, items skipped)
    not_run: dict[str, str] = field(default_factory=dict)  # suite -> why
    # catalog -> (verified, emulated, applicable) in the shipped map
    mapped: dict[str, tuple[int, int, int]] | None = None


def _map_counts(arch: str) -> dict[str, tuple[int, int, int]] | None:
    """Per catalog (instructions, tensor) of the shipped map: (verified, emulated, applicable); a
    variant the architecture lacks what it needs for is ``unsupported`` there, not applicable;
    ``emulated``: ptxas has no tensor-core path for it there (a subroutine or other work, found
    in the SASS)."""
    path = shipped_map(arch)
    if path is None:
        return None
    out: dict[str, list[int]] = {}
    for r in json.loads(gzip.decompress(path.read_bytes())):
        n = out.setdefault(r.get("catalog") or "instructions", [0, 0, 0])
        n[0] += r.get("status") == "verified"
        n[1] += r.get("status") == "emulated"
        n[2] += r.get("status") != "unsupported"
    return {k: (v, e, a) for k, (v, e, a) in out.items()}


def support(arch: str) -> ArchSupport:
    """What each suite plans on ``arch`` (its full plan, gated), and the shipped map's counts."""
    target = make_target(arch)
    own = target.facts["target"]
    cc = own.get("compute_capability") or f"{target.sm // 10}.{target.sm % 10}"
    peaks = (target.facts.get("tensor_peaks") or {}).get("gpu") or {}
    out = ArchSupport(arch, cc, sorted(peaks), sorted(target.features), mapped=_map_counts(arch))
    for name in SUITES:
        ctx = Context(FakeDevice(compute_capability=cc), None, target)
        try:
            plan = gated(get_suite(name), ctx, None)
        except Skipped as e:
            out.not_run[name] = str(e).split(": ", 1)[-1]
            continue
        out.runs[name] = (len(plan.items), len(plan.params.get("skipped", {})))
    return out


def markdown_table(rows: list[ArchSupport] | None = None) -> str:
    """The README's table: one row per architecture folder."""
    rows = rows if rows is not None else [support(a) for a in sorted(supported_archs(), key=_num)]
    lines = [BEGIN,
             "| arch | CC | products with datasheet peaks | features | suites: items run (not run there) | "
             "map: verified of applicable (emulated: no tensor-core path) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        suites = ", ".join(f"{s} {n}" + (f" ({k})" if k else "") for s, (n, k) in r.runs.items())
        suites += "".join(f"; {s}: {why}" for s, why in r.not_run.items())
        mapped = "; ".join(f"{cat} {v} of {a} ({v / a:.0%})" + (f", {e} emulated" if e else "")
                           for cat, (v, e, a) in (r.mapped or {}).items() if a) or "no shipped map"
        lines.append(f"| {r.arch} | {r.compute_capability} | {', '.join(r.products) or '-'} | "
                     f"{', '.join(r.features) or '-'} | {suites} | {mapped} |")
    return "\n".join([*lines, END])


def _num(arch: str) -> int:
    return int(arch.split("_")[1].rstrip("abf"))
