"""Figures of the behaviour suite, drawn from its per-suite JSON document (PNG and SVG):
block -> SM timelines (one row per SM), the occupancy table (measured vs rules), the warp-pair slowdown
matrix (scheduler sharing) and the pipe-pair overlap matrix."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from gpudissect.report.fmt import fmt_bytes
from gpudissect.report.plotting import BAND_MIN_PX, Bands, band_inches
from gpudissect.report.plotting import save_figure as _save


def _gpu(doc: dict) -> str:
    return (doc.get("provenance") or {}).get("gpu_name") or "?"


def _rec(doc: dict, variant: str) -> dict | None:
    return next((r for r in doc.get("records", []) if r["variant"] == variant
                 and r.get("value") is not None and r.get("samples")), None)


def lanes(sm: np.ndarray, g0: np.ndarray, g1: np.ndarray) -> tuple[np.ndarray, dict[int, int]]:
    """A lane for each block inside its SM's row, so that blocks resident at once on one SM
    sit side by side instead of over each other (the lowest lane free at the block's start),
    and the lanes each SM needed."""
    lane = np.zeros(len(sm), dtype=int)
    need: dict[int, int] = {}
    for s in np.unique(sm):
        ends: list[float] = []  # per lane: when its last block ended
        for i in sorted(np.flatnonzero(sm == s), key=lambda i: (g0[i], g1[i])):
            free = next((k for k, e in enumerate(ends) if e <= g0[i]), len(ends))
            if free == len(ends):
                ends.append(0.0)
            ends[free] = g1[i]
            lane[i] = free
        need[int(s)] = max(1, len(ends))
    return lane, need


ROW = 0.66  # of an SM's row, the height its blocks fill (the rest is the gap between rows)
TIMELINE_DPI = 100


def timeline(doc: dict, outdir: Path, variant: str) -> list[Path]:
    """Block -> SM timeline: one row per SM (every SM of the data), its blocks as bars in
    time, blocks resident at once in lanes of the row; tall enough that each row keeps
    ``BAND_MIN_PX`` pixels in the PNG (a thin bar per block lost most rows)."""
    r = _rec(doc, variant)
    if r is None:
        return []
    s = r["samples"]
    lin, sm = np.array(s["lin"]), np.array(s["smid"])
    g0, g1 = np.array(s["g0_ns"]) / 1000, np.array(s["g1_ns"]) / 1000
    lane, need = lanes(sm, g0, g1)
    per = np.array([need[int(x)] for x in sm])
    lo, hi = int(sm.min()), int(sm.max())
    plot_h = band_inches(hi - lo + 1, TIMELINE_DPI, BAND_MIN_PX + 1)
    fig, ax = plt.subplots(figsize=(11, plot_h + 1.4), layout="constrained")
    cmap = plt.get_cmap("viridis")
    n = max(len(lin), 1)
    ax.barh(sm - ROW / 2 + lane * ROW / per, g1 - g0, left=g0, height=ROW / per, align="edge",
            color=cmap(lin / n), edgecolor="none")
    sc = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, n))
    fig.colorbar(sc, ax=ax, label="block id (linear)", fraction=0.04, pad=0.01)
    ax.set_ylim(lo - 0.5, hi + 0.5)
    ax.set_xlim(0, float(g1.max()) * 1.01)
    ax.set_xlabel("time (µs, %globaltimer)")
    ax.set_ylabel(f"SM (%smid): {len(need)} SMs, blocks resident at once side by side")
    q = r["params"]
    ax.set_title(f"Block -> SM timeline, {variant} (grid {q['grid']}, {q['threads']} threads, "
                 f"{fmt_bytes(q['smem'])} smem) ({_gpu(doc)})", fontsize=9)
    return _save(fig, outdir, "behaviour_timeline_" + variant.split(":", 1)[1], dpi=TIMELINE_DPI,
                 bands=Bands(ax, len(need), "y"))


def first_wave(doc: dict, outdir: Path) -> list[Path]:
    d = {k: v for k, v in ((doc.get("summary") or {}).get("dispatch") or {}).items() if v.get("first_sms")}
    if not d:
        return []  # no first-wave sequence: no figure rather than empty axes
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, v in d.items():
        seq = v.get("first_sms") or []
        ax.plot(range(len(seq)), seq, ".-", ms=4, lw=0.6, label=name)
    ax.set_xlabel("block id")
    ax.set_ylabel("SM of the block")
    ax.set_title(f"Dispatch order: SM of the first blocks ({_gpu(doc)})")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, outdir, "behaviour_first_wave")


def occupancy(doc: dict, outdir: Path) -> list[Path]:
    occ = (doc.get("summary") or {}).get("occupancy") or {}
    axes_def = [("live=", "regs", "registers per thread (cubin)"),
                ("smem=", "smem", "shared memory per block (KiB)"),
                ("threads=", "threads", "threads per block")]
    if not any(key in k for key, _, _ in axes_def for k in occ):
        return []  # no sweep along registers, shared memory or threads: nothing to draw
    fig, axs = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (key, field, label) in zip(axs, axes_def, strict=True):
        rows = sorted((v[field] / (1024 if field == "smem" else 1), v["measured_warps"], v["predicted_warps"])
                      for k, v in occ.items() if key in k)
        if not rows:
            ax.set_visible(False)
            continue
        x = [r[0] for r in rows]
        ax.step(x, [r[2] for r in rows], where="post", color="0.5", label="CUDA occupancy rules")
        ax.plot(x, [r[1] if r[1] is not None else np.nan for r in rows], "o", color="C3", label="measured")
        ax.set_xlabel(label)
        ax.set_ylabel("resident warps per SM")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Occupancy: resident warps per SM, measured vs rules ({_gpu(doc)})")
    return _save(fig, outdir, "behaviour_occupancy")


def scheduler(doc: dict, outdir: Path) -> list[Path]:
    r = _rec(doc, "scheduler:pairs")
    if r is None:
        return []
    W = r["params"]["warps"]
    m = np.ones((W, W))
    for k, v in r["samples"]["slowdown"].items():
        a, b = (int(x) for x in k.split(","))
        m[a, b] = m[b, a] = v
    fig, ax = plt.subplots(figsize=(5, 4.2))
    im = ax.imshow(m, cmap="magma", vmin=1)
    fig.colorbar(im, ax=ax, label="pair time / solo time")
    ax.set_xlabel("warp")
    ax.set_ylabel("warp")
    ax.set_title(f"FFMA streams: slowdown of warp pairs ({_gpu(doc)})", fontsize=9)
    return _save(fig, outdir, "behaviour_scheduler_pairs")


def pipes(doc: dict, outdir: Path) -> list[Path]:
    p = (doc.get("summary") or {}).get("pipes") or {}
    pairs = p.get("pairs") or {}
    names = sorted(p.get("solo") or {})
    if not pairs or not names:
        return []
    idx = {n: i for i, n in enumerate(names)}
    m = np.full((len(names), len(names)), np.nan)
    for k, v in pairs.items():
        a, b = k.split("+", 1)
        m[idx[a], idx[b]] = m[idx[b], idx[a]] = v["share"]
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    im = ax.imshow(m, cmap="coolwarm", vmin=0, vmax=1)
    fig.colorbar(im, ax=ax, label="0: overlap fully (separate pipes)  1: serialise (shared)")
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    for (i, j), v in np.ndenumerate(m):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6)
    ax.set_title(f"Pairs of instruction streams: added time / shorter solo time\n({_gpu(doc)})",
                 fontsize=9)
    return _save(fig, outdir, "behaviour_pipes")


def figures(doc: dict, outdir: Path) -> list[Path]:
    out: list[Path] = []
    for v in ("dispatch:1d-1perSM", "dispatch:1d-free", "dispatch:regs"):
        out += timeline(doc, outdir, v)
    out += first_wave(doc, outdir)
    out += occupancy(doc, outdir)
    out += scheduler(doc, outdir)
    out += pipes(doc, outdir)
    return out
