"""Figures of the instruction suite: latency against peak throughput, one point per variant; the
warps x distance throughput grid, one heat map per class (the median of its variants' grids,
each over its own maximum)."""

from __future__ import annotations

from pathlib import Path

from gpudissect.report.present.plotting import save_figure
from gpudissect.suites.instructions.view import by_class, class_grid, grid_rows, instruction_rows


def figures(doc: dict, outdir: Path) -> list[Path]:
    return latency_throughput(doc, outdir) + grid_maps(doc, outdir)


def latency_throughput(doc: dict, outdir: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    rows = [r for r in instruction_rows(doc.get("records") or [])
            if r.latency is not None and r.throughput is not None]
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    cmap = plt.get_cmap("tab20")
    for i, (cls, rs) in enumerate(by_class(rows).items()):
        ax.scatter([r.latency for r in rs], [r.throughput for r in rs], s=14, color=cmap(i % 20),
                   label=f"{cls} ({len(rs)})", alpha=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("latency (cycles, dependent chain)")
    ax.set_ylabel("peak throughput (warp-instr / cycle / SM)")
    gpu = (doc.get("provenance") or {}).get("gpu_name") or ""
    ax.set_title(f"Instruction latency vs throughput {gpu}".strip())
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    return save_figure(fig, outdir, "instructions_latency_throughput", dpi=100)


def grid_maps(doc: dict, outdir: Path) -> list[Path]:
    """One small heat map per class: rows warps per SM, columns independent chains per thread,
    colour the class's median of rate / the variant's maximum."""
    import matplotlib.pyplot as plt
    import numpy as np

    by: dict[str, list] = {}
    for r in grid_rows(doc.get("records") or []):
        by.setdefault(r.cls or "other", []).append(r)
    maps = [(cls, len(rs), g) for cls, rs in sorted(by.items()) if (g := class_grid(rs)) is not None]
    if not maps:
        return []
    ncol = min(6, len(maps))
    nrow = -(-len(maps) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(1.9 * ncol, 2.3 * nrow), dpi=80, squeeze=False)
    im = None
    for ax, (cls, n, (ws, ds, med)) in zip(axes.flat, maps, strict=False):
        a = np.array([[np.nan if x is None else x for x in row] for row in med], dtype=float)
        im = ax.imshow(a, aspect="auto", origin="lower", vmin=0, vmax=1, cmap="viridis",
                       extent=(ds[0] - 0.5, ds[-1] + 0.5, ws[0] - 0.5, ws[-1] + 0.5))
        ax.set_title(f"{cls} ({n})", fontsize=8)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(maps):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("warps / SM", fontsize=7)
    for ax in axes[-1, :]:
        ax.set_xlabel("chains (distance)", fontsize=7)
    fig.suptitle("Throughput grid: median over the class of rate / its maximum", fontsize=9)
    fig.tight_layout()
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, pad=0.01)
    return save_figure(fig, outdir, "instructions_grid", dpi=80)
