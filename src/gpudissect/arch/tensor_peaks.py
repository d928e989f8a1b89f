"""Tensor-core datasheet peaks per product (reference data: ``tensor_peaks.toml`` of each
architecture's folder, products by their device name) and the peak maths: FLOP/cycle/SM,
TFLOP/s at the observed clock, % of the datasheet peak scaled to that clock."""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from gpudissect.arch.target import arch_facts, supported_archs


@dataclass(frozen=True)
class Peak:
    tflops: float
    clock_mhz: float
    sm_count: int
    source: str

    def per_sm_per_cycle(self) -> float:
        """FLOP per cycle per SM implied by the datasheet figure."""
        return self.tflops * 1e12 / (self.sm_count * self.clock_mhz * 1e6)

    def scaled_tflops(self, observed_mhz: float) -> float:
        """The datasheet peak scaled linearly to an observed SM clock."""
        return self.tflops * observed_mhz / self.clock_mhz


@cache
def _table(path: str | None = None) -> dict:
    """One peaks file (``path``), or every architecture's products together."""
    if path:
        return tomllib.loads(Path(path).read_text())
    gpus: dict = {}
    for arch in supported_archs():
        gpus.update(arch_facts(arch).get("tensor_peaks", {}).get("gpu", {}))
    return {"gpu": gpus}


def peak_for(gpu_name: str, atype: str, path: str | None = None) -> Peak | None:
    """The dense peak for an input type on a GPU, or None when the table has none."""
    gpus = _table(path).get("gpu", {})
    g = gpus.get(gpu_name)
    if not g:
        return None
    # a GPU whose datasheet gives the same figures as another's names it (peaks_as)
    p = (gpus.get(g["peaks_as"], {}) if "peaks_as" in g else g).get("peaks", {}).get(atype)
    if not p:
        return None
    return Peak(float(p["tflops"]), float(p["clock_mhz"]), int(g["sm_count"]), str(g["source"]))


@dataclass
class PeakFigures:
    flop_per_cycle_sm: float
    tflops: float | None  # at the observed clock and the device's SM count
    peak_tflops_scaled: float | None
    pct_of_peak: float | None
    observed_mhz: float | None
    peak_source: str | None

    def to_json(self) -> dict:
        return asdict(self)


def figures(instr_per_cycle_sm: float, flops_per_instr: int, sm_count: int,
            observed_mhz: float | None, peak: Peak | None) -> PeakFigures:
    """From a measured rate (tensor instructions per cycle per SM)."""
    fpc = instr_per_cycle_sm * flops_per_instr
    tflops = fpc * sm_count * observed_mhz * 1e6 / 1e12 if observed_mhz else None
    scaled = peak.scaled_tflops(observed_mhz) * sm_count / peak.sm_count if (peak and observed_mhz) else None
    pct = 100.0 * tflops / scaled if (tflops is not None and scaled) else None
    return PeakFigures(fpc, tflops, scaled, pct, observed_mhz, peak.source if peak else None)
