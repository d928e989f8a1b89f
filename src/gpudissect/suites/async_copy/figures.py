"""Figures of the async suite: TMA bandwidth against tile size (bulk and 2D tensor, DRAM and L2
footprints; linear axis from zero), the plain ld.global.v4 and cp.async streams of the same run
as horizontal lines; the bulk DRAM sweep's 1-CTA-per-SM points show what one issuing thread
with a 4-deep ring reaches per tile size."""

from __future__ import annotations

from pathlib import Path

from gpudissect.report.present.fmt import fmt_bytes
from gpudissect.report.present.plotting import save_figure


def _series(doc: dict, prefix: str) -> list[tuple[int, float]]:
    pts = [(r["params"]["tile"], r["value"]) for r in doc.get("records") or []
           if r["variant"].startswith(prefix) and r.get("value") is not None and "tile" in (r.get("params") or {})]
    return sorted(pts)


def _series_at(doc: dict, prefix: str, ctas: str) -> list[tuple[int, float]]:
    """(tile, GB/s) of one configuration (CTAs per SM) of the sweep a record keeps."""
    pts = []
    for r in doc.get("records") or []:
        cfg = ((r.get("samples") or {}).get("configs") or {}).get(ctas) if isinstance(r.get("samples"), dict) else None
        if r["variant"].startswith(prefix) and cfg and cfg.get("gbps") is not None:
            pts.append((r["params"]["tile"], cfg["gbps"]))
    return sorted(pts)


def _value(doc: dict, name: str) -> float | None:
    return next((r.get("value") for r in doc.get("records") or [] if r["variant"] == name), None)


def tma_bandwidth(doc: dict, outdir: Path) -> list[Path]:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    lines = {"TMA bulk, DRAM": _series(doc, "bw:tma.bulk:dram:"), "TMA bulk, L2": _series(doc, "bw:tma.bulk:l2:"),
             "TMA tensor 2D, DRAM": _series(doc, "bw:tma.tensor2d:dram:"),
             "TMA bulk, DRAM, 1 CTA/SM only": _series_at(doc, "bw:tma.bulk:dram:", "1")}
    lines = {k: v for k, v in lines.items() if v}
    if not lines:
        return []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    top = 0.0
    for label, pts in lines.items():
        ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], "o--" if "only" in label else "o-", label=label)
        top = max(top, max(p[1] for p in pts) / 1000)
    for name, label, style in (("bw:ld.v4:dram", "ld.global.v4, DRAM", "--"), ("bw:ld.v4:l2", "ld.global.v4, L2", ":"),
                               ("bw:cp.async.cg16:dram", "cp.async.cg 16 B, DRAM", "-."),
                               ("bw:cp.async.cg16:l2", "cp.async.cg 16 B, L2", (0, (1, 3)))):
        v = _value(doc, name)
        if v is not None:
            ax.axhline(v / 1000, ls=style, color="gray", label=label)
            top = max(top, v / 1000)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: fmt_bytes(x)))
    ax.set_xlabel("tile (bytes per copy)")
    ax.set_ylabel("TB/s (linear, from 0)")
    ax.set_ylim(0, top * 1.15 if top else 1)
    gpu = (doc.get("provenance") or {}).get("gpu_name") or "?"
    ax.set_title(f"TMA bandwidth vs tile size, all SMs, best over CTAs/SM ({gpu})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, Path(outdir), "async_tma_bandwidth")


def figures(doc: dict, outdir: Path) -> list[Path]:
    return tma_bandwidth(doc, Path(outdir))
