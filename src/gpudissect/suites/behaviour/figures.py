"""Figures of the behaviour suite, drawn from its per-suite JSON document (PNG and SVG):
block -> SM timelines (one row per SM, the first launch), the block -> SM histograms of the
fairness probes (per configuration, over launches), the occupancy table (measured vs rules),
the warp-pair slowdown matrix (scheduler sharing), the pipe-pair matrix (add vs compete) and the
per-warp windows of each warp issue-order workload (one SM, per scheduler)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from gpudissect.report.present.fmt import fmt_bytes
from gpudissect.report.present.plotting import BAND_MIN_PX, Bands, band_inches
from gpudissect.report.present.plotting import save_figure as _save


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
    if "launches" in s:  # one trace per launch: the first one drawn
        s = s["launches"][0]
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


def fairness(doc: dict, outdir: Path) -> list[Path]:
    """Block -> SM histograms: one row per fairness configuration, one column per number of
    blocks an SM got (0: idle), the cell the SMs that got it (mean over launches); the rows of
    configurations unfair in some launch labelled in red."""
    conf = ((doc.get("summary") or {}).get("fairness") or {}).get("configurations") or {}
    if not conf:
        return []
    names = list(conf)
    top = max(int(k) for c in conf.values() for k in c["mean_histogram"])
    m = np.full((len(names), top + 1), np.nan)
    for i, n in enumerate(names):
        for k, v in conf[n]["mean_histogram"].items():
            m[i, int(k)] = v
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * (top + 1) + 4), 0.26 * len(names) + 1.6), layout="constrained")
    im = ax.imshow(m, cmap="Blues", aspect="auto", vmin=0)
    fig.colorbar(im, ax=ax, label="SMs (mean over launches)", fraction=0.04, pad=0.01)
    for (i, j), v in np.ndenumerate(m):
        if np.isfinite(v):
            ax.text(j, i, f"{v:g}", ha="center", va="center", fontsize=5,
                    color="white" if v > 0.5 * np.nanmax(m) else "black")
    labels = [f"{n.split(':', 1)[1]} (grid {conf[n]['grid']}, {conf[n]['regs']} regs, "
              f"{conf[n]['smem'] // 1024} KiB; fair {conf[n]['fair_share']:.0%}, maps {conf[n]['distinct_maps']}"
              f"{'; unequal work' if conf[n].get('equal_work') is False else ''})"
              for n in names]
    ax.set_yticks(range(len(names)), labels, fontsize=5)
    for lab, n in zip(ax.get_yticklabels(), names, strict=True):
        if not conf[n]["fair"]:
            lab.set_color("C3")
    ax.set_xticks(range(top + 1))
    ax.set_xlabel("blocks on an SM (0: idle)")
    ax.set_title(f"Block -> SM histograms over repeated launches; red: unfair in some launch ({_gpu(doc)})",
                 fontsize=9)
    return _save(fig, outdir, "behaviour_fairness")


def scheduler(doc: dict, outdir: Path) -> list[Path]:
    r = _rec(doc, "scheduler:pairs")
    if r is None:
        return []
    W = r["params"]["warps"]
    per = r["samples"]["slowdown"]
    launches = per if isinstance(per, list) else [per]
    m = np.ones((W, W))
    for k in launches[0]:
        a, b = (int(x) for x in k.split(","))
        m[a, b] = m[b, a] = float(np.median([d[k] for d in launches]))
    fig, ax = plt.subplots(figsize=(5, 4.2))
    im = ax.imshow(m, cmap="magma", vmin=1)
    fig.colorbar(im, ax=ax, label="pair time / solo time (median of launches)")
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
        xs = [d["position"] for d in v.get("per_launch") or [] if d.get("position") is not None]
        if a in idx and b in idx and xs:
            m[idx[a], idx[b]] = m[idx[b], idx[a]] = float(np.median(xs))
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    im = ax.imshow(m, cmap="coolwarm_r", vmin=0, vmax=1)
    fig.colorbar(im, ax=ax, label="0: compete (one pipe)  1: add (separate pipes)")
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    for (i, j), v in np.ndenumerate(m):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6)
    ax.set_title("Pairs of instruction streams: combined rate between the compete (0) and add (1)\n"
                 f"predictions, median of launches ({_gpu(doc)})", fontsize=9)
    return _save(fig, outdir, "behaviour_pipes")


def issue_order(doc: dict, outdir: Path) -> list[Path]:
    """Per workload: each warp's window (first to last clock of its timed region) on one SM,
    the warps of one scheduler together, one colour per scheduler (first kept repetition)."""
    orders = ((doc.get("summary") or {}).get("scheduler") or {}).get("order") or {}
    wls = {k: v for k, v in orders.items() if isinstance(v, dict) and v.get("windows_lowest_sm")}
    if not wls:
        return []
    fig, axs = plt.subplots(1, len(wls), figsize=(4.6 * len(wls), 5.5), squeeze=False)
    for ax, (wl, o) in zip(axs[0], wls.items(), strict=True):
        groups = o["windows_lowest_sm"][0]
        y = 0
        ticks, labels = [], []
        for gi, g in enumerate(groups):
            for w, wid, t0, t1 in g:
                ax.barh(y, t1 - t0, left=t0, height=0.8, color=f"C{gi % 10}")
                ticks.append(y)
                labels.append(f"w{w} (%warpid {wid})")
                y += 1
            y += 0.6
        ax.set_yticks(ticks, labels, fontsize=5)
        ax.invert_yaxis()
        ax.set_xlabel("cycles after the first warp's start (SM clock)")
        ax.set_title(f"{wl}: {o.get('verdict')}", fontsize=8)
    fig.suptitle(f"Warp issue order: each warp's timed window on SM {next(iter(wls.values())).get('lowest_sm')}, "
                 f"one colour per scheduler ({_gpu(doc)})", fontsize=9)
    return _save(fig, outdir, "behaviour_issue_order")


def figures(doc: dict, outdir: Path) -> list[Path]:
    out: list[Path] = []
    for v in ("dispatch:1d-1perSM", "dispatch:1d-free", "dispatch:regs"):
        out += timeline(doc, outdir, v)
    out += first_wave(doc, outdir)
    out += occupancy(doc, outdir)
    out += fairness(doc, outdir)
    out += scheduler(doc, outdir)
    out += pipes(doc, outdir)
    out += issue_order(doc, outdir)
    return out
