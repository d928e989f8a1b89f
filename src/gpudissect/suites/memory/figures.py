"""Figures of the memory suite, drawn from its per-suite JSON document (PNG and SVG):
the latency staircase (log x, detected steps marked), line-size stride sweeps, bandwidth per
level (linear axis from zero), and shared-memory cycles against the bank-conflict degree."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from gpudissect.report.fmt import fmt_bandwidth, fmt_bytes
from gpudissect.report.plotting import Bands
from gpudissect.report.plotting import save_figure as _save


def _records(doc: dict, prefix: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in doc.get("records", []):
        if r["variant"].startswith(prefix) and r.get("value") is not None:
            out.setdefault(r["variant"], []).append(r)
    return out


def _title(doc: dict, what: str) -> str:
    gpu = (doc.get("provenance") or {}).get("gpu_name") or "?"
    return f"{what} ({gpu})"


def _byte_ticks(ax) -> None:
    """Label a log2 byte axis in KiB/MiB/GiB."""
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: fmt_bytes(x)))


def staircase(doc: dict, outdir: Path) -> list[Path]:
    if not _records(doc, "sweep/"):
        return []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    stair = (doc.get("summary") or {}).get("staircase", {})
    for variant, rows in sorted(_records(doc, "sweep/").items()):
        pts = sorted((r["params"]["footprint"], r["value"]) for r in rows)
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3,
                        label=variant.removeprefix("sweep/"))
        for s in (stair.get(variant) or {}).get("steps", []):
            ax.axvspan(s["x_below"], s["x_above"], color=line.get_color(), alpha=0.12)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("footprint")
    _byte_ticks(ax)
    ax.set_ylabel("cycles per dependent load")
    ax.set_title(_title(doc, "Pointer-chase latency vs footprint; shaded: detected steps"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _save(fig, outdir, "memory_staircase")


def strides(doc: dict, outdir: Path) -> list[Path]:
    if not _records(doc, "stride/"):
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant, rows in sorted(_records(doc, "stride/").items()):
        pts = sorted((r["params"]["stride"], r["value"]) for r in rows)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=variant.removeprefix("stride/"))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("stride")
    _byte_ticks(ax)
    ax.set_ylabel("cycles per load, one cold pass")
    ax.set_title(_title(doc, "Fill granularity"))
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, outdir, "memory_line_sizes")


def _bar_color(name: str) -> str:
    return "#4c72b0" if "read" in name else "#dd8452" if "write" in name else "#55a868"


def bandwidth(doc: dict, outdir: Path) -> list[Path]:
    """Bandwidth per level on a linear axis from zero, so bar lengths compare as the rates do
    (a log axis with a cut-off baseline made a 2.7 TB/s bar look a third of a 3.1 TB/s one)."""
    rows = [(r["variant"].removeprefix("bandwidth/"), r["value"], (r.get("params") or {}))
            for v in _records(doc, "bandwidth/").values() for r in v]
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(10, 4.5), layout="constrained")
    names = [n for n, _, _ in rows]
    tbs = [v / 1000 for _, v, _ in rows]  # GB/s -> TB/s (the same rate in larger units)
    bars = ax.bar(range(len(rows)), tbs, color=[_bar_color(n) for n in names])
    for b, (_, v, p) in zip(bars, rows, strict=True):
        bpc = p.get("bytes_per_cycle_per_sm")
        ax.annotate(fmt_bandwidth(v) + (f"\n{bpc:.0f} B/clk/SM" if bpc else ""),
                    (b.get_x() + b.get_width() / 2, v / 1000), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)), names, rotation=30, ha="right")
    ax.set_ylabel("TB/s (linear, from 0)")
    ax.set_ylim(0, max(tbs) * 1.15)
    ax.set_title(_title(doc, "Bandwidth per level, chip full"))
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, outdir, "memory_bandwidth", bands=Bands(ax, len(rows), "x"))


def bank_conflicts(doc: dict, outdir: Path) -> list[Path]:
    if not _records(doc, "bank/"):
        return []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for variant, rows in sorted(_records(doc, "bank/").items()):
        for ax, model in zip(axes, ("degree_warp", "wavefronts_phase"), strict=True):
            pts = sorted((r["params"][model], r["value"]) for r in rows)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", label=variant.removeprefix("bank/"))
    for ax, model in zip(axes, ("degree_warp", "wavefronts_phase"), strict=True):
        ax.set_xlabel(model.replace("_", " "))
        ax.grid(True, alpha=0.3)
        ax.legend()
    axes[0].set_ylabel("cycles per dependent warp access")
    fig.suptitle(_title(doc, "Shared-memory bank conflicts"))
    return _save(fig, outdir, "memory_bank_conflicts")


def figures(doc: dict, outdir: Path) -> list[Path]:
    outdir = Path(outdir)
    out: list[Path] = []
    for f in (staircase, strides, bandwidth, bank_conflicts):
        out += f(doc, outdir)
    return out
