"""What every figure module shares: matplotlib on the Agg backend, and saving a figure as
PNG and SVG under one stem.

A figure whose marks are separate bands (one bar per item, one row per SM) can say so: with
``bands=Bands(ax, count, axis)``, :func:`save_figure` keeps the figure's own layout (no tight
crop, so the axes' place in the picture is known) and writes ``<stem>.meta.json`` beside the
pictures: how many bands the data has, along which axis, and the plot area as fractions of
the picture (left, top, right, bottom). The report puts that on the ``<img>``
(``data-bands``...), and the browser test counts the coloured bands the picture shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Pixels a band needs, at the saved resolution, to stay a band after antialiasing: rows of a
# figure drawn with Bands get at least this many, with a gap between two.
BAND_MIN_PX = 7


@dataclass
class Bands:
    """The bands a figure's data makes. A figure saved with them is not cropped, so draw it
    with ``layout="constrained"`` (its labels then stay inside the picture)."""
    ax: object  # the matplotlib Axes holding the bands
    count: int  # bands the data has (bars, SM rows)
    axis: str = "y"  # "y": bands stacked vertically (horizontal bars); "x": side by side


def band_inches(count: int, dpi: int, px: int = BAND_MIN_PX) -> float:
    """Inches of plot height (or width) that give ``count`` bands ``px`` pixels each."""
    return count * px / dpi


def plot_box(ax) -> list[float]:
    """The axes' plot area as fractions of the whole picture: left, top, right, bottom
    (top-left origin, as a browser's canvas counts)."""
    b = ax.get_position()
    return [round(b.x0, 5), round(1 - b.y1, 5), round(b.x1, 5), round(1 - b.y0, 5)]


def save_figure(fig, outdir: Path, stem: str, dpi: int = 120, bands: Bands | None = None,
                group: str | None = None) -> list[Path]:
    """Write ``fig`` as ``outdir/stem.png`` and ``.svg`` (and ``stem.meta.json`` with
    ``bands`` and ``group``: the report shows the figures of one group together, folded
    away), close it, return the paths of the pictures."""
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        p = outdir / f"{stem}.{ext}"
        fig.savefig(p, dpi=dpi, **({} if bands else {"bbox_inches": "tight"}))
        paths.append(p)
    meta: dict = {}
    if bands is not None:
        meta["bands"] = {"count": int(bands.count), "axis": bands.axis, "box": plot_box(bands.ax)}
    if group:
        meta["group"] = group
    if meta:
        (outdir / f"{stem}.meta.json").write_text(json.dumps(meta) + "\n")
    plt.close(fig)
    return paths
