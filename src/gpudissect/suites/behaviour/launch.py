"""Launches of the behaviour suite's timed kernels (a repeated timed region, ``kernel/timing.py``,
whose last parameter is the times buffer): one launch read back with one row per warp
(:func:`timed_launch`), and the SM spans of a pipe-ABI kernel at two region lengths
(:func:`pair_spans`), from which the pipes and efficacy probes take their rates.
"""

from __future__ import annotations

import numpy as np

from gpudissect.bench.stats import sm_spans
from gpudissect.device.args import Buf
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built
from gpudissect.suites.behaviour.kernels import REPS, ROW


def timed_launch(dev: Device, b: Built, grid: int, warps: int, bufs: list[Buf], smem: int) -> dict[str, np.ndarray]:
    """One launch of a kernel whose last parameter is the times buffer of its repeated timed
    region (kernel/timing.py): the read-back buffers, ``times`` as one row per warp."""
    r = dev.launch(b.cubin, b.name, grid, warps * 32,
                   [*bufs, Buf("times", nbytes=grid * warps * ROW * 8, read=True, dtype="u8", zero=True)],
                   smem=smem)
    out = dict(r.outputs)
    out["times"] = out["times"].reshape(-1, ROW)[: grid * warps].astype(np.int64)
    return out


def pair_spans(dev: Device, pair: tuple[Built, Built], nsm: int, warps: int, smem: int) -> list[dict]:
    """One launch of each of two region lengths of a pipe-ABI kernel (in, out, times): the SM
    spans of each (``bench.stats.sm_spans``)."""
    spans = []
    for b in pair:
        k = b.kernel
        bufs = [Buf("pin", data=np.array(k.inputs or [0], dtype=np.uint64)),
                Buf("pout", nbytes=nsm * warps * 32 * 8 * max(k.n_sink, 1))]
        spans.append(sm_spans(timed_launch(dev, b, nsm, warps, bufs, smem)["times"], warps, REPS))
    return spans
