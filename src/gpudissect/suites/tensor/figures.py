"""Figures of the tensor suite from its per-suite JSON document: fragment layouts (lanes
coloured on the matrices A, B, C/D, each cell labelled lane:element; shown folded in the
report) and throughput bars (% of the clock-scaled datasheet peak per form and input type,
labelled in TFLOP/s or, for integer types, TOP/s)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from gpudissect.report.present.fmt import fmt_tera
from gpudissect.report.present.plotting import Bands, save_figure
from gpudissect.suites.tensor.view import op_kind, peak_rows, tensor_rows

LAYOUT_FIGS = ("mma.sync.m16n8k16.f32.f16.f32", "mma.sync.m16n8k8.f32.tf32.f32",
               "mma.sync.m16n8k32.s32.s8.s32", "mma.sync.m16n8k8.f64.f64.f64",
               "mma.sync.m8n8k16.s32.s8.s32")
FRAGMENT_FIGS = ("wmma.load.a.m16n16k16.row.f16", "wmma.load.b.m16n16k16.col.f16",
                 "wmma.load.c.m16n16k16.row.f32", "wmma.load.a.m16n16k8.row.tf32",
                 "wmma.load.a.m8n8k32.row.s4", "wmma.load.c.m8n32k16.row.f32")
LAYOUT_GROUP = "Fragment layouts: which lane holds which element"


def _draw_slots(ax, rows: int, cols: int, slots: list, title: str) -> None:
    """Colour each matrix cell by the lane holding it, labelled lane:element (the last
    slot wins where a fragment holds an element twice)."""
    cmap = plt.get_cmap("tab20", 32)
    grid = np.full((rows, cols), -1)
    label = [["" for _ in range(cols)] for _ in range(rows)]
    for lane, elts in enumerate(slots):
        for e, (r, c) in enumerate(elts):
            if r < 0:
                continue
            grid[r][c] = lane
            label[r][c] = f"{lane}:{e}"
    ax.imshow(np.ma.masked_less(grid, 0), cmap=cmap, vmin=0, vmax=31, aspect="equal")
    if rows * cols <= 512:
        for r in range(rows):
            for c in range(cols):
                ax.text(c, r, label[r][c], ha="center", va="center", fontsize=4.5)
    ax.set_title(title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])


def layout_figure(name: str, params: dict, outdir: Path) -> list[Path]:
    lay = params["reference_layout"]
    m, n, k = params["shape"]
    dims = {"a": (m, k, "A (row i, col k)"), "b": (k, n, "B (row k, col j)"), "c": (m, n, "C/D (row i, col j)")}
    fig, axes = plt.subplots(1, 3, figsize=(4 + 0.35 * (2 * k + n), 0.4 * max(m, k) + 2),
                             gridspec_kw={"width_ratios": [k, n, n]})
    for ax, op in zip(axes, ("a", "b", "c"), strict=True):
        rows, cols, title = dims[op]
        _draw_slots(ax, rows, cols, lay[op], title)
    ok = params.get("matches_reference")
    fig.suptitle(f"{name}: lanes (colour, lane:element) — experiment "
                 f"{'matches' if ok else 'DIFFERS from'} the PTX reference"
                 f" ({params.get('triples')} products checked)", fontsize=9)
    return save_figure(fig, outdir, "tensor_layout_" + name.replace(".", "_"), dpi=110, group=LAYOUT_GROUP)


def wmma_fragment_figure(name: str, params: dict, outdir: Path) -> list[Path]:
    """The observed wmma fragment (one operand) with its comparison to the mma.sync layouts."""
    rows, cols = params["rows"], params["cols"]
    fig, ax = plt.subplots(figsize=(1.5 + 0.42 * cols, 0.42 * rows + 1.6))
    cov = params.get("coverage") or {}
    _draw_slots(ax, rows, cols, params["slots"],
                f"{params['frag'].upper()} ({rows}x{cols}, {params['layout']}-major in memory); "
                f"each element held {cov.get('copies_min')}-{cov.get('copies_max')}x")
    fig.suptitle(f"{name}: observed fragment (lane:element)\n{params.get('tiling_text', '')}", fontsize=7)
    return save_figure(fig, outdir, "tensor_fragment_" + name.replace(".", "_"), dpi=110, group=LAYOUT_GROUP)


def throughput_figure(doc: dict, outdir: Path) -> list[Path]:
    """Per instruction form and input type, its best variant: % of the datasheet peak scaled
    to the observed clock, labelled with its throughput (TFLOP/s, or TOP/s for integer types).
    Types without a datasheet figure (b1, s4/u4) and loads/stores are left out; every variant
    is in the report's table."""
    rows = [r for r in peak_rows(tensor_rows(doc.get("records") or [])) if r["pct_of_peak"] is not None]
    if not rows:
        return []
    rows.sort(key=lambda r: r["pct_of_peak"])
    fig, ax = plt.subplots(figsize=(10, 0.22 * len(rows) + 1.3), layout="constrained")
    y = np.arange(len(rows))
    colors = ["tab:green" if r["form"].startswith("wgmma") else "tab:blue" for r in rows]
    ax.barh(y, [r["pct_of_peak"] for r in rows], height=0.7, color=colors)
    for yi, r in zip(y, rows, strict=True):
        ax.text(r["pct_of_peak"] + 1, yi, f"{fmt_tera(r['tflops'], op_kind(r['variant']).rate)}  {r['variant']}",
                va="center", fontsize=6.5)
    for x, ls in ((100, "-"), (90, "--")):
        ax.axvline(x, color="0.35", lw=0.8, ls=ls)  # grey: the bars alone are coloured
    ax.set_yticks(y, [f"{r['form']} {r['inputs']}" for r in rows], fontsize=7)
    ax.set_xlim(0, 160)
    ax.set_xticks(range(0, 101, 20))
    ax.set_xlabel("% of the datasheet dense peak scaled to the observed SM clock (best variant)")
    ax.set_title(f"Tensor-core throughput per form and input type (green: wgmma, blue: others): "
                 f"{doc.get('provenance', {}).get('gpu_name', '')}", fontsize=9)
    return save_figure(fig, outdir, "tensor_throughput", dpi=100, bands=Bands(ax, len(rows), "y"))


def figures(doc: dict, outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    out = throughput_figure(doc, outdir)
    for r in doc.get("records", []):
        p = r.get("params") or {}
        if r["measure"] == "layout" and r["variant"] in LAYOUT_FIGS and p.get("reference_layout"):
            out += layout_figure(r["variant"], p, outdir)
        elif r["measure"] == "layout" and r["variant"] in FRAGMENT_FIGS and p.get("slots"):
            out += wmma_fragment_figure(r["variant"], p, outdir)
    return out
