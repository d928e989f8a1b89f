"""Figures of the sync suite, drawn from its per-suite JSON document's summary (PNG and SVG):
atomic throughput vs contention (global chip-wide, shared per SM; one bar per op and mode, log
scale), barrier cost vs warps, and launch cost vs grid size."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from gpudissect.report.present.plotting import save_figure as _save


def _gpu(doc: dict) -> str:
    return (doc.get("provenance") or {}).get("gpu_name") or "?"


def atomic_contention(doc: dict, outdir: Path) -> list[Path]:
    at = (doc.get("summary") or {}).get("atomic") or {}
    spaces = [s for s in ("global", "shared") if at.get(s)]
    if not spaces:
        return []
    fig, axs = plt.subplots(1, len(spaces), figsize=(7 * len(spaces), 4.8), squeeze=False)
    for ax, space in zip(axs[0], spaces, strict=True):
        a = at[space]
        modes, ops = a["modes"], a["ops"]
        width = 0.8 / max(len(ops), 1)
        for i, op in enumerate(ops):
            key = "chip" if space == "global" else "per_sm"
            ys = [(a["cells"].get(f"{op}|{m}") or {}).get(key) for m in modes]
            ys = [np.nan if y is None else y for y in ys]
            ax.bar(np.arange(len(modes)) + (i - (len(ops) - 1) / 2) * width, ys, width, label=op)
        ax.set_yscale("log")
        ax.set_xticks(range(len(modes)), modes)
        ax.set_xlabel("contention (left: most)")
        ax.set_ylabel("lane-ops per clock " + ("(whole chip)" if space == "global" else "(per SM)"))
        ax.set_title(f"{space} atomics at the plateau of the warp sweep", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"Atomic throughput vs contention ({_gpu(doc)})", fontsize=10)
    return _save(fig, outdir, "sync_atomic_contention")


def barriers(doc: dict, outdir: Path) -> list[Path]:
    b = (doc.get("summary") or {}).get("barrier") or {}
    if not b:
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for kind, v in b.items():
        pts = sorted((int(k), c) for k, c in v["cycles"].items() if c is not None)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=kind)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("warps per block (bar.sync.n: participating warps of 32)")
    ax.set_ylabel("cycles per barrier")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(f"Barrier cost vs warps ({_gpu(doc)})", fontsize=9)
    return _save(fig, outdir, "sync_barriers")


def launches(doc: dict, outdir: Path) -> list[Path]:
    grid = ((doc.get("summary") or {}).get("launch") or {}).get("grid") or {}
    if not grid:
        return []
    gs = sorted(grid, key=int)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for key, label in (("sync-wall", "launch + sync, host wall"), ("sync-event", "launch + sync, events"),
                       ("stream", "back-to-back"), ("graph", "graph replay")):
        ys = [grid[g].get(key) for g in gs]
        ax.plot([int(g) for g in gs], [np.nan if y is None else y for y in ys], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("blocks of 128 threads (empty kernel)")
    ax.set_ylabel("us per launch")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(f"Launch cost vs grid size ({_gpu(doc)})", fontsize=9)
    return _save(fig, outdir, "sync_launch")


def figures(doc: dict, outdir: Path) -> list[Path]:
    return [*atomic_contention(doc, outdir), *barriers(doc, outdir), *launches(doc, outdir)]
