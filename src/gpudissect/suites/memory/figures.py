"""Figures of the memory suite, drawn from its per-suite JSON document (PNG and SVG):
the latency staircase (log x, detected steps marked, the launches' range as error bars, the
L2 levels named), the per-SM L2 map (SM x line heat map), the TLB study, fill-granularity
stride sweeps and line-size sweeps, bandwidth per level (linear axis from zero), and
shared-memory cycles against the bank-conflict degree."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter

from gpudissect.report.present.fmt import fmt_bandwidth, fmt_bytes
from gpudissect.report.present.plotting import Bands
from gpudissect.report.present.plotting import save_figure as _save
from gpudissect.suites.memory import bandwidth as bwm


def _records(doc: dict, prefix: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in doc.get("records", []):
        if r["variant"].startswith(prefix) and r.get("value") is not None:
            out.setdefault(r["variant"], []).append(r)
    return out


def _spread(r: dict) -> tuple[float, float]:
    """(below, above) the value: the range of the record's repeats (0 where it kept none)."""
    reps = [v for v in r.get("samples") or [] if isinstance(v, (int, float))] \
        if isinstance(r.get("samples"), list) else []
    if not reps:
        return 0.0, 0.0
    return max(0.0, r["value"] - min(reps)), max(0.0, max(reps) - r["value"])


def _series(rows: list[dict], key: str) -> tuple[list, np.ndarray, list[np.ndarray]]:
    """x (params[key]), y and the repeats' range as error bars, sorted by x."""
    rows = sorted(rows, key=lambda r: r["params"][key])
    err = np.array([_spread(r) for r in rows]).reshape(-1, 2)
    return [r["params"][key] for r in rows], np.array([r["value"] for r in rows]), [err[:, 0], err[:, 1]]


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
    summary = doc.get("summary") or {}
    stair = summary.get("staircase", {})
    for variant, rows in sorted(_records(doc, "sweep/").items()):
        x, y, err = _series(rows, "footprint")
        line = ax.errorbar(x, y, yerr=err, fmt="o-", ms=3, capsize=2,
                           label=variant.removeprefix("sweep/")).lines[0]
        for s in (stair.get(variant) or {}).get("steps", []):
            ax.axvspan(s["x_below"], s["x_above"], color=line.get_color(), alpha=0.12)
    for lv in (summary.get("l2") or {}).get("levels") or []:
        ax.annotate(f"{lv['name']}\n{lv['latency_cycles']:.0f} cyc to {fmt_bytes(lv['bytes'])}",
                    (lv["bytes"], lv["latency_cycles"]), textcoords="offset points", xytext=(-10, 12),
                    ha="right", fontsize=7, arrowprops={"arrowstyle": "-", "lw": 0.5})
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
    """Left: cold-pass latency against stride (fill / sector granularity); right: latency
    against footprint of strided chains at several node spacings (line size: the capacity
    step moves up by spacing / line)."""
    lines = _records(doc, "line/")
    if not _records(doc, "stride/") and not lines:
        return []
    fig, axes = plt.subplots(1, 2 if lines else 1, figsize=(11 if lines else 6, 4), squeeze=False)
    ax = axes[0][0]
    for variant, rows in sorted(_records(doc, "stride/").items()):
        pts = sorted((r["params"]["stride"], r["value"]) for r in rows)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=variant.removeprefix("stride/"))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("stride")
    _byte_ticks(ax)
    ax.set_ylabel("cycles per load, one cold pass")
    ax.set_title("Fill (sector) granularity", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    if lines:
        ax = axes[0][1]
        for variant, rows in sorted(lines.items()):
            pts = sorted((r["params"]["footprint"], r["value"]) for r in rows)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3,
                    label=variant.removeprefix("line/") + " B spacing")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _byte_ticks(ax)
        ax.set_xlabel("footprint")
        ax.set_ylabel("cycles per dependent load")
        ax.set_title("Line size: capacity step against node spacing", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(_title(doc, "Fill granularity and line size"))
    return _save(fig, outdir, "memory_line_sizes")


def l2_map(doc: dict, outdir: Path) -> list[Path]:
    """Per-SM L2 latency to each probed line: SMs (rows) and lines (columns) ordered by the
    partition the analysis assigned, so a two-partition L2 shows as two blocks."""
    rec = next((r for v in _records(doc, "l2map/").values() for r in v), None)
    samples = (rec or {}).get("samples") or {}
    mat = samples.get("latency")
    if not mat:
        return []
    m = np.array([[np.nan if v is None else v for v in row] for row in mat], dtype=float)
    sms = list(samples.get("sm") or range(m.shape[0]))
    part = (doc.get("summary") or {}).get("l2map") or (rec.get("params") or {}).get("partition") or {}
    rows = [sms.index(s) for s in part.get("sm_order") or [] if s in sms] or list(range(m.shape[0]))
    cols = part.get("line_order") or list(range(m.shape[1]))
    fig, ax = plt.subplots(figsize=(9, 7), layout="constrained")
    im = ax.imshow(m[np.ix_(rows, cols)], aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(im, ax=ax, label="cycles per dependent .cg load")
    a = len(part.get("side_a") or [])
    if part.get("split") and 0 < a < len(rows):
        ax.axhline(a - 0.5, color="w", lw=1)
        ax.axvline(part.get("lines_near_a", 0) - 0.5, color="w", lw=1)
    ax.set_ylabel("SM (%smid), ordered by group" if part.get("split") else "SM (%smid)")
    ax.set_yticks(range(0, len(rows), max(1, len(rows) // 16)),
                  [str(sms[rows[i]]) for i in range(0, len(rows), max(1, len(rows) // 16))])
    ax.set_xlabel("probed line (random offsets), ordered by the group that sees it near")
    what = (f"{a}/{len(rows) - a} SMs, near {part['near_cycles']:.0f} / far {part['far_cycles']:.0f} cycles"
            if part.get("split") else "no two-group split")
    ax.set_title(_title(doc, f"L2 latency per SM and line: {what}"), fontsize=9)
    return _save(fig, outdir, "memory_l2_map")


def tlb(doc: dict, outdir: Path) -> list[Path]:
    """Latency against pages visited, one line per page stride (launch range as error bars)."""
    series = _records(doc, "tlb/")
    if not series:
        return []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for variant, rows in sorted(series.items(), key=lambda kv: kv[1][0]["params"]["page_stride"]):
        x, y, err = _series(rows, "pages")
        ax.errorbar(x, y, yerr=err, fmt="o-", ms=3, capsize=2,
                    label=variant.removeprefix("tlb/") + " page stride")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("pages visited (random order; footprint = pages x stride)")
    ax.set_ylabel("cycles per dependent .cg load")
    note = (doc.get("summary") or {}).get("tlb", {}).get("note")
    ax.set_title(_title(doc, "TLB study" + (": no translation step" if note else "")), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, outdir, "memory_tlb")


def _bar_color(name: str) -> str:
    return "#4c72b0" if "read" in name else "#dd8452" if "write" in name else "#55a868"


def bandwidth(doc: dict, outdir: Path) -> list[Path]:
    """Bandwidth per level on a linear axis from zero, so bar lengths compare as the rates do
    (a log axis with a cut-off baseline made a 2.7 TB/s bar look a third of a 3.1 TB/s one)."""
    rows = [(r["variant"].removeprefix("bandwidth/") + (" sustained" if r.get("measure") == "bandwidth_sustained"
                                                         else ""), r["value"], (r.get("params") or {}))
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
    for f in (staircase, l2_map, tlb, strides, bandwidth, bank_conflicts, bwm.figures):
        out += f(doc, outdir)
    return out
