"""What every figure module shares: matplotlib on the Agg backend, and saving a figure as
PNG and SVG under one stem.

A figure whose marks are separate bands (one bar per item, one row per SM) can say so: with
``bands=Bands(ax, count, axis)``, :func:`save_figure` keeps the figure's own layout (no tight
crop, so the axes' place in the picture is known) and writes ``<stem>.meta.json`` beside the
pictures: how many bands the data has, along which axis, and the plot area as fractions of
the picture (left, top, right, bottom). The report puts that on the ``<img>``
(``data-bands``...), and the browser test counts the coloured bands the picture shows.

The report embeds one picture per figure, the PNG: while it draws, :func:`only_formats` limits
:func:`save_figure` to that format, so no SVG is drawn that the report would throw away.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Pixels a band needs, at the saved resolution, to stay a band after antialiasing: rows of a
# figure drawn with Bands get at least this many, with a gap between two.
BAND_MIN_PX = 7

FORMATS = ("png", "svg")
_formats: ContextVar[tuple[str, ...]] = ContextVar("figure_formats", default=FORMATS)


@contextmanager
def only_formats(*formats: str) -> Iterator[None]:
    """Within this block, :func:`save_figure` writes only ``formats`` (of png, svg)."""
    bad = set(formats) - set(FORMATS)
    if bad or not formats:
        raise ValueError(f"figure formats must be some of {FORMATS}, not {formats}")
    token = _formats.set(tuple(f for f in FORMATS if f in formats))
    try:
        yield
    finally:
        _formats.reset(token)


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
    """Write ``fig`` as ``outdir/stem.png`` and ``.svg`` (only those of :func:`only_formats`
    within such a block; and ``stem.meta.json`` with ``bands`` and ``group``: the report shows
    the figures of one group together, folded away), close it, return the paths of the pictures."""
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    box = None
    for ext in _formats.get():
        p = outdir / f"{stem}.{ext}"
        fig.savefig(p, dpi=dpi, **({} if bands else {"bbox_inches": "tight"}))
        paths.append(p)
        if bands is not None and box is None:
            # the plot area of the first picture, the PNG the report shows: a constrained
            # layout is redone at each save, and the SVG's moves the axes by a pixel or two
            box = plot_box(bands.ax)
    meta: dict = {}
    if bands is not None:
        meta["bands"] = {"count": int(bands.count), "axis": bands.axis, "box": box}
    if group:
        meta["group"] = group
    if meta:
        (outdir / f"{stem}.meta.json").write_text(json.dumps(meta) + "\n")
    plt.close(fig)
    return paths
