"""Figures of the tensor suite from its per-suite JSON document: fragment layouts (lanes
coloured on the matrices A, B, C/D, each cell labelled lane:element) and throughput bars
(measured TFLOP/s beside the clock-scaled datasheet peak)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from gpudissect.report.plotting import save_figure

LAYOUT_FIGS = ("mma.sync.m16n8k16.f32.f16.f32", "mma.sync.m16n8k8.f32.tf32.f32",
               "mma.sync.m16n8k32.s32.s8.s32", "mma.sync.m16n8k8.f64.f64.f64",
               "mma.sync.m8n8k16.s32.s8.s32")
FRAGMENT_FIGS = ("wmma.load.a.m16n16k16.row.f16", "wmma.load.b.m16n16k16.col.f16",
                 "wmma.load.c.m16n16k16.row.f32", "wmma.load.a.m16n16k8.row.tf32",
                 "wmma.load.a.m8n8k32.row.s4", "wmma.load.c.m8n32k16.row.f32")




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
    return save_figure(fig, outdir, "tensor_layout_" + name.replace(".", "_"), dpi=110)


def wmma_fragment_figure(name: str, params: dict, outdir: Path) -> list[Path]:
    """The observed wmma fragment (one operand) with its comparison to the mma.sync layouts."""
    rows, cols = params["rows"], params["cols"]
    fig, ax = plt.subplots(figsize=(1.5 + 0.42 * cols, 0.42 * rows + 1.6))
    cov = params.get("coverage") or {}
    _draw_slots(ax, rows, cols, params["slots"],
                f"{params['frag'].upper()} ({rows}x{cols}, {params['layout']}-major in memory); "
                f"each element held {cov.get('copies_min')}-{cov.get('copies_max')}x")
    fig.suptitle(f"{name}: observed fragment (lane:element)\n{params.get('tiling_text', '')}", fontsize=7)
    return save_figure(fig, outdir, "tensor_fragment_" + name.replace(".", "_"), dpi=110)


def throughput_figure(doc: dict, outdir: Path) -> list[Path]:
    """Per variant, its best configuration: % of the datasheet peak scaled to the observed
    clock (variants without a datasheet figure, b1 and s4/u4, are left out)."""
    best: dict[str, tuple] = {}
    for r in doc.get("records", []):
        if r["measure"] != "throughput_peak" or r["value"] is None:
            continue
        p = r["params"]
        if p.get("pct_of_peak") is None:
            continue
        cfg = "" if p.get("group") == "mma" else f" (N={p.get('n')}, A {p.get('a_from')})"
        if r["variant"] not in best or p["pct_of_peak"] > best[r["variant"]][1]:
            best[r["variant"]] = (r["variant"] + cfg, p["pct_of_peak"], p.get("tflops"))
    rows = sorted(best.values(), key=lambda x: x[1])
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(8, 0.2 * len(rows) + 1.5))
    y = np.arange(len(rows))
    colors = ["tab:green" if "wgmma" in r[0] else "tab:blue" for r in rows]
    ax.barh(y, [r[1] for r in rows], color=colors)
    for yi, r in zip(y, rows, strict=True):
        ax.text(r[1] + 1, yi, f"{r[2]:.0f} TFLOP/s" if r[2] else "", va="center", fontsize=5)
    ax.axvline(100, color="tab:red", lw=0.8)
    ax.axvline(90, color="tab:red", lw=0.5, ls="--")
    ax.set_yticks(y)
    ax.set_yticklabels([r[0] for r in rows], fontsize=5.5)
    ax.set_xlim(0, 120)
    ax.set_xlabel("% of the datasheet dense peak scaled to the observed SM clock (best configuration)")
    ax.set_title(f"Tensor-core throughput (green: wgmma, blue: mma.sync): "
                 f"{doc.get('provenance', {}).get('gpu_name', '')}", fontsize=8)
    return save_figure(fig, outdir, "tensor_throughput", dpi=110)


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
