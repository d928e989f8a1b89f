"""Throughput sweeps of the tensor suite: a variant's rate over warps per SM and independent
accumulators per warp (wgmma: warpgroups per SM and accumulators per warpgroup), each
configuration timed over region lengths with the overlap evidence of the instruction suite
(``bench/stats.py``: the span per SM over its warps, the SM's idle share, one SM's warp
windows kept), and the peak: the best clean configuration with its saturation evidence.

Why both axes: with many warps the H100's warp scheduler runs some warps to the end before
others start (strict priority), so an SM's span ends in a tail with few warps; only enough
independent accumulators per warp keep that tail at the full rate. A configuration's rate is
issuers x accumulators / slope of the (median over SMs of the) SM span against the length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpudissect.bench.clock import clock_disagreement, stamp_clock
from gpudissect.bench.power import Watch
from gpudissect.bench.stats import (
    fit_flag,
    fit_line,
    noise_flag,
    per_sm_reps,
    slopes_per_repeat,
    sm_windows,
)
from gpudissect.device.args import Buf
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built
from gpudissect.kernel.mma import TIMED_REPS
from gpudissect.kernel.timing import STAMP_WORDS, row_words
from gpudissect.store.db import Result

PEAK_TOL = 0.02  # a configuration within this share of the best is at the peak
RISE = 1.02  # more warps that raise an accumulator count's rate by less than this: it stops there
IDLE_TOL = 0.25  # an SM idle for more than this share of its span (late starts) is not saturated
LAUNCHES = 2  # launches per point; each times TIMED_REPS repetitions and drops the first
# flags that keep a configuration out of the peak (its measurement is not trustworthy)
BAD = ("poor-fit", "noisy", "sm-idle", "exceeds-peak", "non-positive", "not timed", "refused", "error",
       "clock-changed")


@dataclass(frozen=True)
class Config:
    """One throughput configuration: a kernel family (its accumulator count) launched with
    ``warps`` warps per SM (one block, or blocks of at most the block limit)."""

    family: str  # kernel family key (checks.family_key)
    group: str  # the peak it competes for ("mma"; wgmma: "<ss|rs>_n<N>")
    chains: int  # independent accumulators per issuer (warp; wgmma: warpgroup)
    warps: int  # warps per SM
    issuer_warps: int = 1  # warps per issuing unit (wgmma: 4, a warpgroup)

    @property
    def issuers(self) -> int:
        return self.warps // self.issuer_warps

    @property
    def parallel(self) -> int:
        """Independent tensor instructions in flight per SM."""
        return self.issuers * self.chains

    def label(self) -> str:
        unit = "warpgroups" if self.issuer_warps > 1 else "warps"
        return f"{self.chains} acc x {self.issuers} {unit}"


def clean(r: Result) -> bool:
    return bool(r.value) and not any(f.startswith(BAD) for f in r.flags)


def blocks_for(warps: int, per_block: int) -> int:
    return -(-warps // per_block)


def register_refusal(regs: int, warps: int, registers_per_sm: int, granule: int) -> str | None:
    """Why ``warps`` warps of a kernel of ``regs`` registers per thread cannot share one SM
    (None when they can): the register file holds them all or none run together. ``granule``:
    registers per thread are allocated in multiples of it (the occupancy rules' unit per warp
    over 32)."""
    need = -(-regs // granule) * granule * 32 * warps
    if regs and need > registers_per_sm:
        return (f"refused: {warps} warps need {need} registers ({regs} registers per thread, allocated in "
                f"{granule}s); the SM holds {registers_per_sm}")
    return None


def launch_times(dev: Device, b: Built, grid: int, block: int, words: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """One launch of a tensor timing kernel (ABI of kernels.py): one row per warp of
    (start, end) clocks per kept repetition, then %smid; and the launch's GPU time."""
    warps = grid * block // 32
    tpt = row_words(TIMED_REPS)
    run = dev.launch(b.cubin, b.kernel.name, grid, block, [
        Buf("tc_in", data=words),
        Buf("tc_out", nbytes=grid * block * 4),
        Buf("tc_times", nbytes=warps * tpt * 8, read=True, dtype="u8", zero=True),
    ], launches=1)
    return run.outputs["tc_times"][: warps * tpt].reshape(warps, tpt), run.gpu_ms


def time_config(dev: Device, built: list[Built], words: np.ndarray, cfg: Config, per_block: int) -> dict:
    """Time ``cfg`` over the family's lengths: ``{"rate", "fit", "flags", "params", "samples"}``
    (rate None and a flag when no SM held exactly ``cfg.warps`` warps at two lengths)."""
    blocks = blocks_for(cfg.warps, per_block)
    block = 32 * cfg.warps // blocks
    grid = dev.info.sm_count * blocks
    xs, ys, raw, series, idle, ms = [], [], {}, [], [], []
    windows: list = []
    for b in sorted(built, key=lambda b: b.kernel.length):
        spans: list[float] = []
        t = None
        for _ in range(LAUNCHES):
            t, gpu_ms = launch_times(dev, b, grid, block, words)
            ms += gpu_ms
            for st in per_sm_reps(t, range(1, TIMED_REPS)):
                full = st.warps == cfg.warps
                if full.any():
                    spans.append(float(np.median(st.span[full])))
                    idle.append(float(np.median(st.idle[full])))
        if t is not None:  # the evidence kept: one SM's warps in the last repetition of the longest
            windows = sm_windows(t, TIMED_REPS - 1)
        if spans:
            xs.append(b.kernel.length)
            ys.append(float(np.median(spans)))
            raw[str(b.kernel.length)] = spans
            series.append(spans)
    params = {"family": cfg.family, "group": cfg.group, "chains": cfg.chains, "warps": cfg.warps,
              "issuers": cfg.issuers, "blocks_per_sm": blocks, "lengths": xs, "launches": LAUNCHES,
              "repeats_per_launch": TIMED_REPS - 1}
    if len(xs) < 2:
        return {"rate": None, "fit": None, "params": params, "samples": None,
                "flags": [f"not timed: no SM held exactly {cfg.warps} warps"]}
    fit = fit_line(xs, ys)
    n = min(len(s) for s in series)
    cols = [list(c) for c in zip(*[s[:n] for s in series], strict=True)]
    per_repeat = [cfg.parallel / s for s in slopes_per_repeat(xs, cols) if s > 0]
    flags = [f for f in (fit_flag(fit), noise_flag(per_repeat)) if f]
    rate = cfg.parallel / fit.slope if fit.slope > 0 else None
    if rate is None:
        flags.append("non-positive slope")
    sm_idle = float(np.median(idle)) if idle else 0.0
    if sm_idle > IDLE_TOL:
        flags.append(f"sm-idle: the SMs were idle {sm_idle:.0%} of the span (median)")
    samples = {"per_sm_span": raw, "rate_per_repeat": per_repeat, "sm_idle_fraction": sm_idle,
               "warp_windows_one_sm": windows, "gpu_ms": ms}
    return {"rate": rate, "fit": fit, "flags": flags, "params": params, "samples": samples}


def run_sweep(configs: list[Config], measure: Callable[[Config], Result], limit: float | None) -> list[Result]:
    """Measure ``configs`` in order of parallelism (issuers x accumulators, then warps). An
    accumulator count (family) stops at the first clean configuration that more warps no
    longer raise by RISE, and at a refusal or error (more warps need more of what failed);
    the whole sweep stops once a clean configuration is within PEAK_TOL of ``limit`` (the
    physical peak in instructions per cycle per SM: nothing can rise further; the value stays
    the measured one)."""
    out: list[Result] = []
    stopped: set[str] = set()
    best: dict[str, float] = {}
    for cfg in sorted(configs, key=lambda c: (c.parallel, c.warps, c.chains)):
        if cfg.family in stopped:
            continue
        r = measure(cfg)
        out.append(r)
        if r.value is None and any(f.startswith(("refused", "error")) for f in r.flags):
            stopped.add(cfg.family)
            continue
        if not clean(r):
            continue
        b = best.get(cfg.family, 0.0)
        if b and (r.value or 0) < RISE * b:
            stopped.add(cfg.family)
        best[cfg.family] = max(b, r.value or 0)
        if limit and (r.value or 0) >= (1 - PEAK_TOL) * limit:
            break
    return out


def _cfg(r: Result) -> tuple[int, int]:
    return r.params["chains"], r.params["issuers"]


def _larger(a: Result, b: Result) -> bool:
    """``a`` runs at least the accumulators and the issuers of ``b``, and more of one."""
    (ca, ia), (cb, ib) = _cfg(a), _cfg(b)
    return ca >= cb and ia >= ib and (ca, ia) != (cb, ib)


def _name(r: Result) -> str:
    c, i = _cfg(r)
    return f"{c} acc x {i}"


@dataclass
class Peak:
    best: Result | None
    smallest: Result | None  # the smallest configuration within PEAK_TOL of the best
    evidence: str | None  # why the best is the saturated rate (None: not shown)
    flags: list[str]


def select_peak(results: list[Result], limit: float | None) -> Peak:
    """The best clean configuration of one group and its saturation evidence: it is within
    PEAK_TOL of ``limit`` (the physical peak), or two clean configurations within PEAK_TOL of
    the best exist, one larger than the other (at least the accumulators and issuers of it:
    more parallelism no longer raised the rate). Otherwise the peak is flagged
    ``not-saturated`` with what the sweep showed."""
    clean_rs = [r for r in results if clean(r)]
    if not clean_rs:
        why = sorted({f.split(":")[0] for r in results for f in r.flags if f.startswith(BAD)})
        return Peak(None, None, None, [f"no clean configuration: {', '.join(why) or 'none measured'}"])
    best = max(clean_rs, key=lambda r: r.value or 0)
    top = best.value or 0.0
    band = [r for r in clean_rs if (r.value or 0) >= (1 - PEAK_TOL) * top]
    smallest = min(band, key=lambda r: (r.params["issuers"] * r.params["chains"], r.params["warps"]))
    flags = sorted({f for f in best.flags if not f.startswith(BAD)})
    if limit and top >= (1 - PEAK_TOL) * limit:
        return Peak(best, smallest, f"at the physical peak: {top / limit:.1%} of {limit:.4g} instr/cycle/SM", flags)
    pairs = [(s, lg) for s in band for lg in band if _larger(lg, s)]
    if pairs:
        s, lg = min(pairs, key=lambda p: (p[0].params["issuers"] * p[0].params["chains"], p[1].params["warps"]))
        return Peak(best, smallest, f"{_name(lg)} ({lg.value:.4g}) is within {PEAK_TOL:.0%} of the best as is "
                                    f"{_name(s)} ({s.value:.4g}): more parallelism no longer raises the rate",
                    flags)
    larger = [r for r in results if r is not best and r.params.get("issuers") and _larger(r, best)]
    timed = [r for r in larger if r.value]
    if timed:
        why = "larger configurations were lower by more than 2%: " + ", ".join(
            f"{_name(r)}: {r.value:.4g}" + (f" [{r.flags[0].split(':')[0]}]" if r.flags else "")
            for r in timed[:3])
    elif larger:
        why = "larger configurations could not be timed: " + ", ".join(
            f"{_name(r)}: {(r.flags or ['?'])[0].split(':')[0]}" for r in larger[:3])
    else:
        why = "no larger configuration was timed"
    flags.append(f"not-saturated: {_name(best)}: {top:.4g} instr/cycle/SM is the best; {why}")
    return Peak(best, smallest, None, flags)


def launch_stamped(dev: Device, b: Built, grid: int, block: int, words: np.ndarray
                   ) -> tuple[np.ndarray, list[float], np.ndarray]:
    """:func:`launch_times` of a kernel with block clock stamps (kernel/timing.py stamp_ptx): the
    rows, the GPU time and the blocks' stamp words (STAMP_WORDS u64 per block, after the rows)."""
    warps = grid * block // 32
    tpt = row_words(TIMED_REPS)
    run = dev.launch(b.cubin, b.kernel.name, grid, block, [
        Buf("tc_in", data=words),
        Buf("tc_out", nbytes=grid * block * 4),
        Buf("tc_times", nbytes=(warps * tpt + grid * STAMP_WORDS) * 8, read=True, dtype="u8", zero=True),
    ], launches=1)
    out = run.outputs["tc_times"]
    return out[: warps * tpt].reshape(warps, tpt), run.gpu_ms, out[warps * tpt: warps * tpt + grid * STAMP_WORDS]


def sustained(dev: Device, b: Built, cfg: Config, per_block: int, words: np.ndarray, cycles_per_rep: float,
              mhz: float, target_ms: float, stamped: Built | None = None, nvml: int | None = None) -> dict:
    """``cfg``'s kernel ``b`` run for about ``target_ms``: its region repeated back to back
    (word 0 of ``words``: the repetitions; the clocks of the last TIMED_REPS are kept), long
    enough for the power and clock management to act on it, as a long matrix multiply does.
    Returns the repetitions, the launch's GPU time, the instructions per SM per second over
    the launch, the rate per cycle of its last repetitions (the median SM span) and the SM
    clock these imply (instructions per second / instructions per cycle). With ``stamped`` (the
    same kernel with block clock stamps, run instead of ``b``): the SM clock measured in the
    launch itself over its whole repetition loop (``sm_mhz_in_kernel``), the rate per cycle over
    that loop, and a ``clock-disagrees`` flag when it and the implied clock are apart. NVML
    (power, SM clock, throttle reasons) is sampled during the launch (``nvml``: its index;
    None: recorded as unknown)."""
    reps = max(TIMED_REPS, int(target_ms * 1e3 * mhz / max(cycles_per_rep, 1.0)))
    w = words.copy()
    w[0] = reps
    blocks = blocks_for(cfg.warps, per_block)
    grid, block = dev.info.sm_count * blocks, 32 * cfg.warps // blocks
    stamps = None
    with Watch(nvml) as watch:
        if stamped is not None:
            t, ms, stamps = launch_stamped(dev, stamped, grid, block, w)
        else:
            t, ms = launch_times(dev, b, grid, block, w)
    per_rep = cfg.parallel * b.kernel.length
    spans = []
    for st in per_sm_reps(t, range(1, TIMED_REPS)):
        full = st.warps == cfg.warps
        if full.any():
            spans.append(float(np.median(st.span[full])))
    gpu_ms = float(ms[0]) if ms else None
    per_s = per_rep * reps / (gpu_ms * 1e-3) if gpu_ms else None
    per_cycle = per_rep / float(np.median(spans)) if spans else None
    implied = per_s / per_cycle / 1e6 if (per_s and per_cycle) else None
    out = {"reps": reps, "gpu_ms": gpu_ms, "instr_per_s_sm": per_s, "last_reps_instr_per_cycle_sm": per_cycle,
           "implied_sm_mhz": implied, "target_ms": target_ms, "nvml": watch.summary, "flags": []}
    if stamps is None:
        out["sm_mhz_in_kernel"] = {"error": "no stamped kernel: the clock is the implied one"}
        return out
    clk = stamp_clock(stamps, mhz_hint=mhz)
    out["sm_mhz_in_kernel"] = clk
    if clk.get("median"):
        out["loop_instr_per_cycle_sm"] = per_rep * reps / clk["cycles_median"]
        flag = clock_disagreement(clk["median"], implied)
        out["flags"] += [flag] if flag else []
    return out
