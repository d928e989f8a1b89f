"""What every figure module shares: matplotlib on the Agg backend, and saving a figure as
PNG and SVG under one stem."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig, outdir: Path, stem: str, dpi: int = 120) -> list[Path]:
    """Write ``fig`` as ``outdir/stem.png`` and ``.svg``, close it, return the paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        p = outdir / f"{stem}.{ext}"
        fig.savefig(p, dpi=dpi, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    return paths
