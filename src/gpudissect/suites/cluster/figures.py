"""Figures of the cluster suite (PNG and SVG): the SMs coloured by the GPC they were found in,
with clusters resident at once per size; the DSM latency matrix of the largest cluster."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from gpudissect.report.present.plotting import save_figure as _save


def _gpu(doc: dict) -> str:
    return (doc.get("provenance") or {}).get("gpu_name") or "?"


def topology(doc: dict, outdir: Path) -> list[Path]:
    s = doc.get("summary") or {}
    topo = s.get("topology") or {}
    gpcs = topo.get("gpcs") or []
    if not gpcs:
        return []
    sms = sorted(x for g in gpcs for x in g)
    cols = 12
    rows = -(-(max(sms) + 1) // cols)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 6.5), gridspec_kw={"width_ratios": [1.4, 1]},
                                 layout="constrained")
    cmap = plt.get_cmap("tab10" if len(gpcs) <= 10 else "tab20")
    for gi, g in enumerate(gpcs):
        for sm in g:
            r, c = divmod(sm, cols)
            ax.add_patch(plt.Rectangle((c, rows - 1 - r), 0.92, 0.92, color=cmap(gi % cmap.N)))
            ax.text(c + 0.46, rows - 1 - r + 0.46, str(sm), ha="center", va="center", fontsize=6)
    ax.set_xlim(0, cols)
    ax.set_ylim(0, rows)
    ax.set_aspect("equal")
    ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(i % cmap.N)) for i in range(len(gpcs))]
    big = topo.get("largest_cluster") or [None] * len(gpcs)
    ax.legend(handles, [f"set {i}: {len(g)} SMs, clusters up to {b}" for i, (g, b) in enumerate(zip(gpcs, big, strict=True))],
              fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3)
    ax.set_title("SMs (%smid) coloured by the set of SMs that ever shared a cluster (each inside one GPC)", fontsize=9)
    res = {int(k): v for k, v in (s.get("residency") or {}).items() if "resident" in v}
    if res:
        xs = sorted(res)
        bx.plot(xs, [res[x]["resident"] for x in xs], "o-", label="measured (launch 0)")
        bx.plot(xs, [res[x]["predicted_from_gpcs"] for x in xs], "x--", color="0.4", label="the sets found would hold")
        bx.set_xlabel("cluster size (CTAs, one per SM)")
        bx.set_ylabel("clusters resident at once")
        bx.set_yscale("log", base=2)
        bx.grid(alpha=0.3)
        bx.legend(fontsize=7)
    else:
        bx.set_visible(False)
    fig.suptitle(f"Thread-block clusters: GPCs and residency ({_gpu(doc)})", fontsize=10)
    return _save(fig, outdir, "cluster_topology")


def latency_matrix(doc: dict, outdir: Path) -> list[Path]:
    sizes = ((doc.get("summary") or {}).get("dsm_latency") or {}).get("sizes") or {}
    if not sizes:
        return []
    top = max(sizes, key=int)
    m = np.array([[np.nan if x is None else x for x in row] for row in sizes[top]["matrix"]], dtype=float)
    fig, ax = plt.subplots(figsize=(6, 5))
    im = ax.imshow(m, cmap="viridis")
    fig.colorbar(im, ax=ax, label="cycles per dependent load")
    ax.set_xlabel("target rank")
    ax.set_ylabel("source rank")
    ax.set_title(f"DSM load latency, cluster of {top} ({_gpu(doc)})", fontsize=9)
    return _save(fig, outdir, "cluster_dsm_latency")


def figures(doc: dict, outdir: Path) -> list[Path]:
    return topology(doc, outdir) + latency_matrix(doc, outdir)
