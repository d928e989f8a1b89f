"""The rate of one kernel at W warps per SM, from the spans of its blocks: one block of W warps
on every SM, each block that was alone on its SM timed from its first warp's start to its last
warp's end, per repetition after the first (cold instruction cache). The warps x distance grid's
cells (studies/grid.py) and a configuration's rates over warps against its control's
(studies/configurations.py) are such rates; the launches of one kernel's warp counts go to the
device in one batch (``Device.run_many``).
"""

from __future__ import annotations

import statistics

import numpy as np

from gpudissect.bench.runner import WORKER_FAILED
from gpudissect.bench.stats import SMID, robust_halfwidth
from gpudissect.device.device import Device, LaunchResult, RunSpec
from gpudissect.kernel.build import Built
from gpudissect.kernel.timing import end_word, start_word
from gpudissect.suites.instructions.core import Plan, run_spec


def block_spans(times: np.ndarray, warps: int, reps: int) -> np.ndarray:
    """Per repetition after the first (cold instruction cache): the median over the blocks
    that were alone on their SM of the block's span, from its first warp's start to its last
    warp's end. ``times``: one launch's rows (kernel/timing.py), blocks of ``warps`` rows."""
    return launch_spans([(times, warps)], reps)[0]


def launch_spans(runs: list[tuple[np.ndarray, int]], reps: int) -> list[np.ndarray]:
    """:func:`block_spans` of many launches ((rows, warps per block) each) in one reduction over
    all their rows: a grid has hundreds of launches per variant, and per-launch numpy calls
    would cost more host time than the GPU spends on them."""
    sizes = [t.shape[0] // w for t, w in runs]
    out = [np.empty(0) for _ in runs]
    if reps < 2 or not any(sizes):
        return out
    kept = range(1, reps)  # the first repetition (cold instruction cache) left out
    m = len(kept)
    cols = [start_word(k) for k in kept] + [end_word(k) for k in kept]
    # only the kept repetitions' words of each launch's whole blocks, in one array
    clk = np.concatenate([t[: n * w, cols] for (t, w), n in zip(runs, sizes, strict=True)])
    offsets = np.cumsum([0] + [n * w for (_, w), n in zip(runs, sizes, strict=True)])[:-1]
    starts = np.concatenate([o + w * np.arange(n) for o, (_, w), n in zip(offsets, runs, sizes, strict=True)])
    owner = np.repeat(np.arange(len(runs)), sizes)
    sm = np.concatenate([t[: n * w : w, SMID] for (t, w), n in zip(runs, sizes, strict=True)])  # a block's first warp's
    key = sm.astype(np.int64) + (owner.astype(np.int64) << 32)  # SM id within its launch
    _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    alone = counts[inv] == 1
    t0 = np.minimum.reduceat(clk[:, :m], starts, axis=0).astype(np.int64)  # per block and repetition
    t1 = np.maximum.reduceat(clk[:, m:], starts, axis=0).astype(np.int64)
    span = (t1 - t0).astype(float).T
    edges = np.cumsum([0, *sizes])
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        keep = alone[a:b]
        if keep.any():
            out[i] = row_medians(span[:, a:b][:, keep])
    return out


def row_medians(x: np.ndarray) -> np.ndarray:
    """``np.median(x, axis=1)`` to the last bit (the middle value, or the two middle values'
    sum over 2) from one sort, without np.median's per-call cost (a grid column has 32 launches)."""
    s = np.sort(x, axis=1)
    n = s.shape[1]
    return s[:, n // 2].copy() if n % 2 else (s[:, n // 2 - 1] + s[:, n // 2]) / 2


def cell_rate(work: float, spans: list[float]) -> tuple[float | None, list[float]]:
    """``work`` (warp-instructions of the SM's region: warps x instances per thread) / the
    median span, and the same from each repeat's span."""
    ok = [x for x in spans if x > 0]
    if not ok:
        return None, []
    return work / statistics.median(ok), [work / x for x in ok]


def launch_column(dev: Device, b: Built, ws: list[int], plan: Plan, sm_count: int,
                   notes: list[str]) -> dict[int, list[LaunchResult]]:
    """Every warp count's launches of one column's kernel, in one batch; where the batch is
    refused (a launch the driver does not take), each warp count alone, the refused ones
    noted. A failed worker is raised: the variant's remaining kernels would fail alike."""
    k = b.kernel

    def spec(W: int) -> RunSpec:
        return run_spec(b, plan.reps, sm_count, 32 * W, plan.grid_launches)

    try:
        return dict(zip(ws, dev.run_many(b.cubin, [spec(W) for W in ws]), strict=True))
    except Exception as e:
        if type(e).__name__ == WORKER_FAILED:
            raise
    out = {}
    for W in ws:
        try:
            out[W] = dev.run_many(b.cubin, [spec(W)])[0]
        except Exception as e:
            if type(e).__name__ == WORKER_FAILED:
                raise
            notes.append(f"d={k.chains} W={W}: refused: {type(e).__name__}: {e}"[:200])
    return out


def warp_rates(dev: Device, b: Built, warps: list[int], plan: Plan, sm_count: int,
               notes: list[str]) -> dict[int, tuple[float, float, int]]:
    """The rate of one kernel (warp-instructions per cycle per SM: W x instances per thread over
    the block's span, as a grid cell) at each warp count of ``warps`` (one block of W warps per
    SM, one batch): W -> (rate, the 95% half-width of its median over repeats, the repeats). A
    failed worker is raised."""
    got = launch_column(dev, b, warps, plan, sm_count, notes)
    runs = [(W, r.times) for W in warps if W in got for r in got[W]]
    by_w: dict[int, list[float]] = {}
    for (W, _), sp in zip(runs, launch_spans([(t, W) for W, t in runs], plan.reps), strict=True):
        by_w.setdefault(W, []).extend(sp.tolist())
    out = {}
    for W in warps:
        rate, per = cell_rate(W * b.kernel.units, by_w.get(W, []))
        if rate is not None:
            out[W] = (rate, robust_halfwidth(per), len(per))
    return out
