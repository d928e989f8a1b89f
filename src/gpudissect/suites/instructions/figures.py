"""Figures of the instruction suite: latency against peak throughput, one point per variant."""

from __future__ import annotations

from pathlib import Path

from gpudissect.report.plotting import save_figure
from gpudissect.suites.instructions.view import by_class, instruction_rows


def figures(doc: dict, outdir: Path) -> list[Path]:
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
