"""Bandwidth of every memory level (shared, L1, L2, device memory; read, write, copy) at
saturation: the geometry of the stream kernels (``stream_kernels.py``), the sweep over access
width, independent accesses in flight per thread (ILP) and warps per SM, the measurement, and
the analysis (best configuration, saturation evidence, the rate against occupancy, DRAM write
against read).

Timing. Every warp of a stream kernel reads ``%globaltimer`` (ns, one clock for the chip) and
``%clock64`` (its SM's cycles) before and after its timed region and writes (t0, t1, g0, g1,
smid, sink) after it (``stream_kernels.py``). The chip's rate is all bytes over the
globaltimer span from the first warp's start to the last warp's end (start skew counts
against the rate); B/clk/SM is that rate over (SMs x the SM clock measured in the same warps,
cycles / ns); each SM's own rate (its bytes over its clock64 span) is kept beside it. A
configuration whose warps did not all stream at once on their SM (a second wave, or warps held
back) is flagged ``not-concurrent`` and kept out of the peak, as are noisy ones
(``bench/stats.py`` noise_flag).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpudissect.arch.occupancy import occupancy_rules, predict_blocks
from gpudissect.bench.power import Watch, nvml_index
from gpudissect.bench.stats import noise_flag, per_sm
from gpudissect.device.args import Buf
from gpudissect.report.present.fmt import fmt_bytes
from gpudissect.store.db import Result
from gpudissect.suites.memory.stream_kernels import (
    OPS,
    OUT_WORDS,
    SMEM_BYTES,
    chunk_bytes,
    kernel_name,
)

if TYPE_CHECKING:
    from gpudissect.arch.target import Target
    from gpudissect.suites.memory.launcher import Launcher

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


# --- what is measured, and where its footprint sits

# item -> (stream op, untimed warm passes before the region, footprint key); L1 is warmed in
# the kernel (it does not keep lines from one launch to the next)
LEVELS = {
    "shared/read": ("lds", 0, "shared"),
    "shared/write": ("sts", 0, "shared"),
    "L1/read": ("ldca", 1, "l1"),
    "L2/read": ("ldcg", 0, "l2"),  # the calibrating launches leave the footprint in L2
    # every SM reads the whole footprint, each line once per pass on an SM (one block per SM:
    # two blocks of one SM on the same lines would share misses in the SM)
    "L2/read-same-lines": ("ldcgs", 0, "l2"),
    "L2/write": ("stcg", 0, "l2"),
    "DRAM/read": ("ldcg", 0, "dram"),
    "DRAM/write": ("stcg", 0, "dram"),
    "DRAM/copy": ("cpcg", 0, "dram"),
}
ONE_BLOCK_PER_SM = {"L2/read-same-lines"}
MAX_BLOCK_WARPS = 32
FOOTPRINT_ITEM = "footprint"
ITEMS = [f"bandwidth/{k}" for k in (*LEVELS, FOOTPRINT_ITEM)]
ON_CHIP = ("shared", "L1", "L2")

PEAK_TOL = 0.02  # configurations within 2% of the best are "at the peak" (as the instruction suite)
# the headline levels whose best configuration also runs sustained: one launch of about
# SUSTAINED_MS (the sweep's regions, 1-3 ms, are bursts: too short for the power and clock
# management to act), its SM clock measured in the same warps, NVML sampled during it
SUSTAINED_ITEMS = ("L2/read", "DRAM/read")
SUSTAINED_MS = 150.0
BAD = ("noisy", "not-concurrent", "error", "unverified", "refused", "clock-changed")


def footprints(sizes: dict, free: int) -> tuple[dict, dict]:
    """Footprints of the bandwidth runs from the sizes measured earlier in the run (flagged
    generic fallbacks where one was not measured): L1 a quarter of its measured capacity (every
    block of an SM walks the same slice, so it sits in that SM's L1 with room to spare for a
    smaller carveout or an overestimated size); L2 three quarters of the size below the first
    L2 step (the near partition where the suite measured one: the grid walks one slice with .cg
    loads, which L1 does not keep; the footprint check shows where the L2 rate ends); device
    memory 16 x the largest L2 bound measured
    (re-used lines cannot stay in L2), at least 1 GiB, at most a quarter of the free memory
    (a copy holds two buffers)."""
    flags: dict[str, list[str]] = {}
    l1 = (sizes.get("L1") or {}).get("bytes")
    l2 = (sizes.get("L2_near") or sizes.get("L2") or {}).get("bytes")
    tops = [b for k in ("L2", "L2_near", "L2_far", "L2_crosscheck")
            for b in ((sizes.get(k) or {}).get("bracket") or [])[1:]]
    if not l1:
        l1 = 64 * KiB
        flags["L1"] = ["fallback: L1 size not measured; generic 64 KiB footprint"]
    if not l2:
        l2 = 16 * MiB
        flags["L2"] = ["fallback: L2 size not measured; generic 16 MiB footprint"]
    if not tops:
        tops = [2 * l2]
        flags["DRAM"] = ["fallback: DRAM footprint not derived from a measured L2 bound"]
    l2_total = int(max(tops))
    dram = int(min(max(16 * l2_total, GiB), free // 4))
    return {"l1": int(l1) // 4, "l2": int(l2) * 3 // 4, "dram": dram, "l2_total": l2_total,
            "shared": SMEM_BYTES, "largest": int(free // 4)}, flags


@dataclass(frozen=True)
class Config:
    bits: int
    ilp: int
    warps: int  # warps per SM
    block_warps: int  # warps per block (at most)

    @property
    def wpb(self) -> int:
        return min(self.warps, self.block_warps)

    @property
    def bps(self) -> int:
        return self.warps // self.wpb

    @property
    def inflight(self) -> int:
        """Bytes in flight per SM (accesses issued before the first is used)."""
        return self.warps * chunk_bytes(self.bits, self.ilp)

    def key(self) -> dict:
        return {"bits": self.bits, "ilp": self.ilp, "warps": self.warps}


@dataclass(frozen=True)
class Geometry:
    grid: int
    block: int
    trips: int
    stride: int  # bytes a warp moves on per trip
    ctamul: int
    smask: int
    footprint: int  # bytes the timed passes touch (per direction; shared: per block)
    buffer: int  # bytes of the source (and destination) buffer
    bytes_per_warp_pass: int  # read + write bytes one warp moves per pass

    @property
    def warps(self) -> int:
        return self.grid * self.block // 32


def geometry(op_key: str, cfg: Config, sms: int, target: int) -> Geometry:
    """Launch geometry of ``cfg`` for a footprint of about ``target`` bytes (at most it);
    ValueError when the configuration cannot sit in it."""
    op = OPS[op_key]
    chunk = chunk_bytes(cfg.bits, cfg.ilp)
    grid, block = sms * cfg.bps, 32 * cfg.wpb
    per_dir = 2 if (op.load and op.store) else 1
    if op.space == "shared":
        trips = max(1, SMEM_BYTES // chunk)
        return Geometry(grid, block, trips, cfg.wpb * chunk, 0, SMEM_BYTES - 1, SMEM_BYTES, 64,
                        trips * chunk)
    walkers = cfg.wpb if op.local else grid * cfg.wpb
    stride = walkers * chunk
    trips = target // stride
    if trips < 1:
        raise ValueError(f"{walkers} warps x {chunk} B per trip = {stride} B exceed the "
                         f"{target} B footprint of the level")
    fp = trips * stride
    return Geometry(grid, block, trips, stride, 0 if op.local else cfg.wpb, 0, fp, fp,
                    per_dir * trips * chunk)


def configurations(widths, ilps, warps, block_warps: int) -> list[Config]:
    """The sweep in order of bytes in flight per SM, then warps."""
    cs = [Config(b, i, w, block_warps) for b in widths for i in ilps for w in warps]
    return sorted(cs, key=lambda c: (c.inflight, c.warps, c.bits))


def level_configurations(item: str, plan) -> list[Config]:
    """The plan's sweep for one level; a one-block-per-SM level keeps the occupancies one
    block can hold."""
    if item in ONE_BLOCK_PER_SM:
        return configurations(plan.bw_widths, plan.bw_ilps,
                              [w for w in plan.bw_warps if w <= MAX_BLOCK_WARPS], MAX_BLOCK_WARPS)
    return configurations(plan.bw_widths, plan.bw_ilps, plan.bw_warps, plan.bw_block_warps)


# --- the rate of one launch, from what its warps wrote

def launch_rates(words, bytes_per_warp: int, sms: int) -> dict:
    """Rates of one launch from its warps' (t0, t1, g0, g1, smid, sink) rows: the chip's GB/s
    over the globaltimer span of all warps, the SM clock those warps saw (median of each
    warp's cycles / ns), B/clk/SM at that clock, each SM's own B/clk (its bytes over its
    clock64 span, median over SMs), and whether every SM ran all its warps at once."""
    w = np.asarray(words, dtype=np.uint64).reshape(-1, OUT_WORDS).astype(np.int64)
    t0, t1, g0, g1, smid = w[:, 0], w[:, 1], w[:, 2], w[:, 3], w[:, 4]
    span_ns = float(g1.max() - g0.min())
    if span_ns <= 0 or (t1 <= t0).any():
        raise ValueError("a warp reported no positive region (timestamps not written?)")
    total = float(bytes_per_warp) * w.shape[0]
    gbs = total / span_ns
    ns = (g1 - g0).astype(float)
    ok = ns > 0
    mhz = float(np.median((t1 - t0)[ok] / ns[ok])) * 1000.0 if ok.any() else float("nan")
    st = per_sm(np.stack([t0, t1, smid], axis=1), 0)
    own = bytes_per_warp * st.warps / np.maximum(st.span, 1.0)
    return {"GB/s": gbs, "sm_mhz": mhz, "bytes_per_cycle_per_sm": gbs * 1e3 / mhz / sms,
            "own_bytes_per_cycle_per_sm": float(np.median(own)), "span_us": span_ns / 1e3,
            "start_skew_us": float(g0.max() - g0.min()) / 1e3, "sms_seen": int(st.sm.size),
            "warps_per_sm": sorted({int(x) for x in st.warps}),
            "all_at_once": bool(st.overlap.all())}


# --- saturation: the best clean configuration and the evidence that the rate stopped rising

def _cfg(p: dict) -> tuple[int, int, int]:
    q = p["params"]
    return q["bits"], q["ilp"], q["warps"]


def _inflight(p: dict) -> int:
    b, i, w = _cfg(p)
    return w * chunk_bytes(b, i)


def _clean(p: dict) -> bool:
    return bool(p.get("value")) and not any(f.startswith(BAD) for f in p.get("flags") or [])


def _label(p: dict) -> str:
    b, i, w = _cfg(p)
    return f"{b}-bit x ILP {i} x {w} warps/SM"


def saturation(points: list[dict]) -> dict:
    """The saturated rate of one level from its configurations (store-record dicts with
    params bits/ilp/warps, value, flags): the best clean configuration, the smallest one within
    PEAK_TOL of it, the rate against warps per SM (best over width and ILP at each) and against
    ILP (at the best width and warps), and the evidence. Saturated when a larger configuration
    (no dimension smaller, one larger) reaches within PEAK_TOL of the best (the rate stopped
    rising as warps/ILP/width grew), or a smaller one does (it had stopped before the best), or
    every larger one is slower (it stopped rising at the best: ``flag`` says single-peak, the
    figure resting on one configuration); not-saturated only where no larger configuration was
    measured and no smaller one is within PEAK_TOL (the rate still rises at the largest)."""
    clean = [p for p in points if _clean(p)]
    if not clean:
        why = sorted({f.split(":")[0] for p in points for f in p.get("flags") or []})
        return {"best": None, "flag": f"no clean configuration: {', '.join(why) or 'none measured'}"}
    best = max(clean, key=lambda p: p["value"])
    bv, bc = best["value"], _cfg(best)
    near = [p for p in clean if p["value"] >= (1 - PEAK_TOL) * bv]
    smallest = min(near, key=lambda p: (_inflight(p), _cfg(p)[2]))

    def cmp(p: dict, sign: int) -> bool:
        c = _cfg(p)
        return c != bc and all(sign * (a - b) >= 0 for a, b in zip(c, bc, strict=True))

    larger = [p for p in clean if cmp(p, 1)]
    smaller = [p for p in clean if cmp(p, -1)]
    up = [p for p in larger if p["value"] >= (1 - PEAK_TOL) * bv]
    down = [p for p in smaller if p["value"] >= (1 - PEAK_TOL) * bv]
    out = {"best": dict(zip(("bits", "ilp", "warps"), bc, strict=True)), "value": bv,
           "smallest_within_2pct": dict(zip(("bits", "ilp", "warps"), _cfg(smallest), strict=True)),
           "configurations": len(points), "clean": len(clean), "flag": None}
    if up:
        top = max(up, key=lambda p: _inflight(p))
        out["evidence"] = (f"saturated: {_label(top)} (more in flight than the best "
                           f"{_label(best)}) reaches {top['value'] / bv:.1%} of it")
    elif down:
        lo = min(down, key=lambda p: _inflight(p))
        out["evidence"] = (f"saturated: the rate stopped rising before the best: {_label(lo)} "
                           f"reaches {lo['value'] / bv:.1%} of {_label(best)}")
    elif larger:
        # more bytes in flight than the best were measured and all give less: the rate stopped
        # rising (saturated); the figure rests on one configuration, the maximum over the sweep
        top = max(larger, key=lambda p: p["value"])
        out["evidence"] = (f"saturated: every larger configuration (more in flight than the best "
                           f"{_label(best)}) is slower, at most {top['value'] / bv:.1%} of it ({_label(top)})")
        out["flag"] = (f"single-peak: no other configuration within {PEAK_TOL:.0%} of {_label(best)} "
                       f"(larger ones reach at most {top['value'] / bv:.1%}, smaller ones less): the figure "
                       "is the maximum of one configuration")
    else:
        lo = sorted(smaller, key=lambda p: -p["value"])[:1]
        out["flag"] = ("not-saturated: the rate still rises at the largest configuration "
                       f"measured ({_label(best)})" + (f"; the next below, {_label(lo[0])}, reaches "
                                                      f"{lo[0]['value'] / bv:.1%}" if lo else ""))
    out["curve_warps"] = _curve(clean, 2)
    same = [p for p in clean if _cfg(p)[0] == bc[0] and _cfg(p)[2] == bc[2]]
    out["curve_ilp"] = {str(_cfg(p)[1]): p["value"] for p in sorted(same, key=lambda p: _cfg(p)[1])}
    return out


def _curve(points: list[dict], dim: int) -> dict[str, float]:
    """Best value at each setting of ``dim`` (0 bits, 1 ilp, 2 warps) over the others."""
    cur: dict[int, float] = {}
    for p in points:
        k = _cfg(p)[dim]
        cur[k] = max(cur.get(k, 0.0), p["value"])
    return {str(k): cur[k] for k in sorted(cur)}


# --- measuring (on the device)

def _err(variant: str, e: Exception | str, **params) -> Result:
    flag = e if isinstance(e, str) else f"error: {type(e).__name__}: {e}"
    return Result(variant, "bandwidth", None, "GB/s", "none", params=params, flags=[flag],
                  cls="memory", strategy="memory")


def _launch(r: Launcher, kernel: str, geo: Geometry, passes: int, warm: int, copy: bool) -> dict:
    args = [Buf("bwsrc", nbytes=geo.buffer), Buf("bwdst", nbytes=geo.buffer if copy else 64),
            Buf("bwout", nbytes=geo.warps * 8 * OUT_WORDS, read=True),
            np.uint32(geo.trips), np.uint32(passes), np.uint32(warm), np.uint32(geo.ctamul),
            np.uint32(geo.stride), np.uint32(geo.smask)]
    run = r.dev.launch(r.k.cubin, kernel, geo.grid, geo.block, args)
    return launch_rates(run.outputs["bwout"], geo.bytes_per_warp_pass * passes, r.sm)


def _passes(region_us: float, span_us: float) -> int:
    """Timed passes that make a region of about ``region_us`` (one pass took ``span_us``)."""
    return int(min(1 << 24, max(1, math.ceil(region_us / max(span_us, 1e-3)))))


def measure(r: Launcher, variant: str, op_key: str, cfg: Config, target: int, warm: int,
            region_us: float, launches: int, rules: dict | None, flags: list[str],
            extra: dict | None = None) -> Result:
    """One configuration: calibrating launches (dropped; one pass, then more until the region
    lasts at least half of ``region_us``) size the timed passes to a region of ``region_us``;
    then ``launches`` launches, and as many again when their rates leave the median uncertain
    by more than 2% (noise_flag). Value: median GB/s."""
    name = kernel_name(op_key, cfg.bits, cfg.ilp)
    params = {**cfg.key(), "op": op_key, **(extra or {})}
    try:
        geo = geometry(op_key, cfg, r.sm, target)
    except ValueError as e:
        return _err(variant, f"refused: {e}", **params)
    b = r.k.built.get(name)
    if b is None:
        return _err(variant, f"error: kernel {name} was not built", **params)
    if rules is not None:
        occ = predict_blocks(geo.block, b.regs, SMEM_BYTES if OPS[op_key].space == "shared" else 0,
                             rules)
        if occ["blocks"] < cfg.bps:
            return _err(variant, f"refused: {cfg.bps} blocks of {cfg.wpb} warps per SM do not fit at "
                        f"once ({b.regs} registers per thread; {', '.join(occ['limiters'])} allow "
                        f"{occ['blocks']})", **params)
    copy = bool(OPS[op_key].load and OPS[op_key].store)
    try:
        passes = 1
        for _ in range(4):  # calibrate: a short pass is mostly launch skew, so size up in steps
            span = _launch(r, name, geo, passes, warm, copy)["span_us"]
            if span >= region_us / 2:
                break
            passes = min(passes * 1000, _passes(region_us * passes, span))
        runs = [_launch(r, name, geo, passes, warm, copy) for _ in range(launches)]
        fl = list(flags)
        if noise_flag([x["GB/s"] for x in runs]):
            runs += [_launch(r, name, geo, passes, warm, copy) for _ in range(launches)]
            fl.append("remeasured: noisy repeats")
    except Exception as e:  # a failed launch: recorded, the sweep goes on
        return _err(variant, e, **params)
    gbs = [x["GB/s"] for x in runs]
    nf = noise_flag(gbs)
    if nf:
        fl.append(nf)
    if not all(x["all_at_once"] for x in runs):
        fl.append("not-concurrent: on some SM a warp's timed region ended before another's "
                  "began (a second wave, or warps starved in the untimed warm pass)")
    seen = sorted({w for x in runs for w in x["warps_per_sm"]})
    med = {k: float(np.median([x[k] for x in runs])) for k in
           ("bytes_per_cycle_per_sm", "own_bytes_per_cycle_per_sm", "sm_mhz", "span_us",
            "start_skew_us")}
    params.update(geo.__dict__, passes=passes, warm=warm, bytes=geo.bytes_per_warp_pass * passes * geo.warps,
                  warps_per_sm_seen=seen, warps_per_block=cfg.wpb, blocks_per_sm=cfg.bps,
                  registers=b.regs, region_us=med["span_us"], start_skew_us=med["start_skew_us"],
                  sm_mhz_kernel=med["sm_mhz"], bytes_per_cycle_per_sm=med["bytes_per_cycle_per_sm"],
                  own_bytes_per_cycle_per_sm=med["own_bytes_per_cycle_per_sm"],
                  clock="SM clock measured in the same warps (clock64 / globaltimer)")
    samples = {k: [x[k] for x in runs] for k in ("GB/s", "bytes_per_cycle_per_sm",
                                                   "own_bytes_per_cycle_per_sm", "sm_mhz", "span_us")}
    return r.k.result(name, variant=variant, measure="bandwidth", value=float(np.median(gbs)),
                      unit="GB/s", statistic="median over launches of (bytes of all warps / "
                      "globaltimer span from the first warp's start to the last warp's end)",
                      params=params, samples=samples, flags=fl)


def _as_dict(res: Result) -> dict:
    return {"params": res.params, "value": res.value, "flags": res.flags}


def bench_level(r: Launcher, item: str, fp: dict, flags: dict, rules: dict | None
                ) -> tuple[list[Result], dict]:
    """Every configuration of one level/direction, then its peak record (``bandwidth/<item>``)."""
    p = r.plan
    op_key, warm, fkey = LEVELS[item]
    level = item.split("/")[0]
    region = p.bw_region_us if level in ON_CHIP else p.bw_dram_region_us
    fl = list(flags.get(level, []))
    out: list[Result] = []
    for cfg in level_configurations(item, p):
        out.append(measure(r, f"bwconfig/{item}", op_key, cfg, fp[fkey], warm, region,
                           p.bw_launches, rules, fl, {"level": level, "rw": item.split("/")[1]}))
    sat = saturation([_as_dict(x) for x in out])
    texts: dict = {}
    for x in out:  # every timed configuration cites its kernel
        if x.ptx_hash:
            texts.update(r.k.texts(kernel_name(op_key, x.params["bits"], x.params["ilp"])))
    if sat["best"] is None:
        out.append(_err(f"bandwidth/{item}", sat["flag"], level=level))
        return out, texts
    best = next(x for x in out if x.value == sat["value"])
    name = kernel_name(op_key, best.params["bits"], best.params["ilp"])
    bp = best.params
    out.append(r.k.result(
        name, variant=f"bandwidth/{item}", measure="bandwidth", value=sat["value"], unit="GB/s",
        statistic="max over clean configurations (access width, ILP, warps/SM) of the median GB/s",
        params={"level": level, "rw": item.split("/")[1], "footprint": bp["footprint"],
                "bytes_per_cycle_per_sm": bp["bytes_per_cycle_per_sm"],
                "own_bytes_per_cycle_per_sm": bp["own_bytes_per_cycle_per_sm"],
                "sm_mhz_kernel": bp["sm_mhz_kernel"], "region_us": bp["region_us"], **sat},
        samples=best.samples,
        flags=fl + [f for f in best.flags if not f.startswith(BAD)] + ([sat["flag"]] if sat["flag"] else [])))
    if item in SUSTAINED_ITEMS:  # the configuration the saturation analysis names best
        chosen = next((x for x in out if x.value is not None and x.params.get("passes")
                       and {k: x.params.get(k) for k in ("bits", "ilp", "warps")} == sat["best"]), best)
        out.append(measure_sustained(r, item, op_key, chosen, fp[fkey], warm, fl))
    return out, texts


def measure_sustained(r: Launcher, item: str, op_key: str, best: Result, target: int, warm: int,
                      flags: list[str], target_ms: float = SUSTAINED_MS) -> Result:
    """The best configuration of ``item`` (its peak record ``best``) in one launch whose timed
    region lasts about ``target_ms`` (its passes scaled from the best's region), the SM clock
    measured in the same warps over that region (clock64 / globaltimer), NVML's power, clock and
    throttle reasons sampled during the launch."""
    bp = best.params
    variant = f"bandwidth/{item}"
    cfg = Config(bp["bits"], bp["ilp"], bp["warps"], r.plan.bw_block_warps)
    level = item.split("/")[0]
    params = {**cfg.key(), "op": op_key, "level": level, "rw": item.split("/")[1], "target_ms": target_ms}
    try:
        geo = geometry(op_key, cfg, r.sm, target)
        passes = _passes(target_ms * 1e3 * bp["passes"], bp["region_us"])
        name = kernel_name(op_key, cfg.bits, cfg.ilp)
        with Watch(nvml_index(r.dev)) as watch:
            x = _launch(r, name, geo, passes, warm, bool(OPS[op_key].load and OPS[op_key].store))
    except Exception as e:  # a failed launch: recorded, the suite goes on
        return Result(variant, "bandwidth_sustained", None, "GB/s", "none", params=params,
                      flags=[f"error: {type(e).__name__}: {e}"[:300]], cls="memory", strategy="memory")
    fl = list(flags)
    if not x["all_at_once"]:
        fl.append("not-concurrent: on some SM a warp's timed region ended before another's began")
    params.update(passes=passes, footprint=geo.footprint, region_us=x["span_us"], sm_mhz_kernel=x["sm_mhz"],
                  bytes_per_cycle_per_sm=x["bytes_per_cycle_per_sm"],
                  own_bytes_per_cycle_per_sm=x["own_bytes_per_cycle_per_sm"], start_skew_us=x["start_skew_us"],
                  burst_gbs=best.value, nvml=watch.summary,
                  clock="SM clock measured in the same warps over the whole region (clock64 / globaltimer)")
    return r.k.result(name, variant=variant, measure="bandwidth_sustained", value=x["GB/s"], unit="GB/s",
                      statistic="one launch: bytes of all warps / globaltimer span of a region of about target_ms",
                      params=params, flags=fl)


def _best(records: list[dict], item: str, plan, flags: list[str]) -> list[Config]:
    """The best and the smallest-at-peak configurations of ``item`` in this run (a generic
    configuration, flagged, where the run has no peak for it)."""
    peak = next((r.get("params") or {} for r in records
                 if r["variant"] == f"bandwidth/{item}" and r.get("measure") == "bandwidth"), {})
    got = [c for c in (peak.get("best"), peak.get("smallest_within_2pct")) if c]
    if not got:
        got = [{"bits": max(plan.bw_widths), "ilp": max(plan.bw_ilps), "warps": max(plan.bw_warps) // 2}]
        flags.append(f"fallback: no {item} peak in this run; configuration {got[0]}")
    return [Config(c["bits"], c["ilp"], c["warps"], plan.bw_block_warps) for c in got]


# footprint check series: (variant suffix, op, configurations of this item, footprint key)
FOOT_SERIES = (("L2/read", "ldcg", "L2/read", "l2"), ("DRAM/read", "ldcg", "DRAM/read", "l2_total"),
               ("DRAM/write", "stcg", "DRAM/write", "l2_total"),
               ("DRAM/read-L2::256B", "ldpf", "DRAM/read", "l2_total"))


def bench_footprint(r: Launcher, fp: dict, flags: dict, rules: dict | None, records: list[dict]
                    ) -> tuple[list[Result], dict]:
    """Rates against the footprint, each series at its level's best configuration of this run
    (or, where that cannot sit in a footprint, the smallest one at the peak): L2 read at
    fractions of the L2 footprint (where it stops being an L2 rate); device-memory read, write
    and read with a 256-byte L2 prefetch hint at multiples of the largest L2 bound, and at the
    largest footprint with a 4 x longer region (whether writes outrun reads only while the L2
    holds re-written lines or write-back is left undrained, or because of the reads' fetch
    size)."""
    p = r.plan
    out: list[Result] = []
    top = fp["largest"]
    for name, op_key, item, base in FOOT_SERIES:
        if not any(k.meta.get("op") == op_key for k in r.k.kernels.values()):
            continue  # the architecture lacks what its kernels need (Kernels.left_out)
        level = name.split("/")[0]
        fl = list(flags.get(level, []))
        cfgs = _best(records, item, p, fl)
        scale = p.bw_l2_fractions if level == "L2" else p.bw_foot_multiples
        pts = [m for m in scale if m * fp[base] <= top]
        for i, m in enumerate(pts):
            f = int(m * fp[base])
            cfg = next((c for c in cfgs if _fits(op_key, c, r.sm, f)), cfgs[0])
            for s in ((1, 4) if level == "DRAM" and i == len(pts) - 1 else (1,)):
                region = s * (p.bw_region_us if level == "L2" else p.bw_dram_region_us)
                out.append(measure(r, f"bwfoot/{name}", op_key, cfg, f, 0,
                                   region, p.bw_launches, rules, fl,
                                   {"level": level, "rw": name.split("/")[1], "region_scale": s,
                                    "l2_multiple": f / fp["l2_total"], "scale": m,
                                    "l2_bytes": fp["l2_total"]}))
    texts: dict = {}
    for x in out:
        if x.value is not None:
            texts.update(r.k.texts(kernel_name(x.params["op"], x.params["bits"], x.params["ilp"])))
    return out, texts


def _fits(op_key: str, cfg: Config, sms: int, target: int) -> bool:
    try:
        geometry(op_key, cfg, sms, target)
    except ValueError:
        return False
    return True


def bench(r: Launcher, item: str, sizes: dict, free: int, target: Target | None,
          records: list[dict]) -> tuple[list[Result], dict]:
    """One bandwidth item of the memory suite (``bandwidth/<level>/<rw>`` or the DRAM
    footprint check), with the footprints from the sizes measured earlier in the run and the
    target's occupancy rules (configurations that cannot be resident at once are refused)."""
    fp, flags = footprints(sizes, free)
    rules = occupancy_rules(target) if target is not None else None
    key = item.removeprefix("bandwidth/")
    if key == FOOTPRINT_ITEM:
        return bench_footprint(r, fp, flags, rules, records)
    if key not in LEVELS:
        raise ValueError(f"unknown bandwidth item '{item}' ({', '.join(ITEMS)})")
    return bench_level(r, key, fp, flags, rules)


# --- summary and conclusions (from stored records)

def footprint_series(records: list[dict]) -> dict[str, list[dict]]:
    """The footprint check (``bwfoot`` records, clean ones): per series the points in order of
    footprint, with the longer-region points marked."""
    out: dict[str, list[dict]] = {}
    for r in records:
        if r["variant"].startswith("bwfoot/") and _clean(r):
            q = r["params"]
            out.setdefault(r["variant"].removeprefix("bwfoot/"), []).append(
                {"footprint": q["footprint"], "scale": q["scale"], "l2_multiple": q["l2_multiple"],
                 "region_scale": q["region_scale"], "GB/s": r["value"]})
    return {k: sorted(v, key=lambda x: (x["region_scale"], x["footprint"])) for k, v in out.items()}


def dram_write_vs_read(records: list[dict]) -> dict:
    """DRAM write / read against the footprint: per multiple of the L2 bound the rates (read,
    write, read with the 256-byte prefetch hint) and write / read."""
    pts: dict[tuple[float, int], dict[str, float]] = {}
    for name, rows in footprint_series(records).items():
        if name.startswith("DRAM/"):
            for x in rows:
                pts.setdefault((x["scale"], x["region_scale"]), {})[name.removeprefix("DRAM/")] = x["GB/s"]
    rows = [{"l2_multiple": m, "region_scale": s, "read": v.get("read"), "write": v.get("write"),
             "read_prefetch_256B": v.get("read-L2::256B"),
             "write_over_read": v["write"] / v["read"] if v.get("read") and v.get("write") else None}
            for (m, s), v in sorted(pts.items())]
    return {"points": rows}


PER_WIDTH_LEVELS = ("shared/read", "shared/write")  # levels whose rate is stated per access width


def per_width(records: list[dict], level: str) -> dict[str, dict]:
    """The saturated rate of one level at each access width, in B/clk/SM: :func:`saturation`
    over that width's ILP x warps configurations (``bwconfig/<level>`` records), each point's
    rate its B/clk/SM (the SM clock measured in the same warps)."""
    pts: dict[int, list[dict]] = {}
    for r in records:
        p = r.get("params") or {}
        if r["variant"] == f"bwconfig/{level}" and p.get("bits"):
            pts.setdefault(int(p["bits"]), []).append({**r, "value": p.get("bytes_per_cycle_per_sm")})
    out = {}
    for bits, points in sorted(pts.items()):
        sat = saturation(points)
        out[str(bits)] = {"bytes_per_cycle_per_sm": sat.get("value"), "best": sat.get("best"),
                          "smallest_within_2pct": sat.get("smallest_within_2pct"),
                          "evidence": sat.get("evidence"), "flag": sat.get("flag"),
                          "curve_warps": sat.get("curve_warps"), "curve_ilp": sat.get("curve_ilp"),
                          "configurations": len(points)}
    return out


def summarize(records: list[dict]) -> dict:
    """The bandwidth part of the memory summary: per level/direction the saturated figure (the
    shape the report's tables read: GB/s, B/clk/SM, footprint, flags) with its best and
    smallest-at-peak configurations, the evidence and the curves; the DRAM read/copy ratio and
    (``write_vs_read``) the DRAM write/read check."""
    bw: dict = {}
    for r in records:
        if r["variant"].startswith("bandwidth/") and r.get("measure") == "bandwidth":
            p = r.get("params") or {}
            bw[r["variant"].split("/", 1)[1]] = {
                "GB/s": r["value"], "bytes_per_cycle_per_sm": p.get("bytes_per_cycle_per_sm"),
                "footprint": p.get("footprint"), "flags": r.get("flags") or [],
                **{k: p.get(k) for k in ("best", "smallest_within_2pct", "evidence", "sm_mhz_kernel",
                                         "curve_warps", "curve_ilp", "configurations", "clean")}}
    for r in records:  # the sustained runs of the headline levels, beside their burst figure
        if r["variant"].startswith("bandwidth/") and r.get("measure") == "bandwidth_sustained" and r["value"]:
            p = r.get("params") or {}
            bw.setdefault(r["variant"].split("/", 1)[1], {})["sustained"] = {
                "GB/s": r["value"], "flags": r.get("flags") or [],
                **{k: p.get(k) for k in ("sm_mhz_kernel", "bytes_per_cycle_per_sm", "region_us", "nvml",
                                         "bits", "ilp", "warps")}}
    read = (bw.get("DRAM/read") or {}).get("GB/s")
    copy = (bw.get("DRAM/copy") or {}).get("GB/s")
    if read and copy:
        bw["DRAM/read_over_copy"] = read / copy
    bw["write_vs_read"] = dram_write_vs_read(records)
    bw["per_width"] = {lv: w for lv in PER_WIDTH_LEVELS if (w := per_width(records, lv))}
    bw["footprint_check"] = footprint_series(records)
    return bw


def _cfg_text(c: dict | None) -> str:
    return f"{c['bits']}-bit x ILP {c['ilp']} x {c['warps']} warps/SM" if c else "?"


def conclusions(bw: dict) -> list[str]:
    c = []
    for key, v in bw.items():
        if not isinstance(v, dict) or not v.get("GB/s"):
            continue
        bpc = v.get("bytes_per_cycle_per_sm")
        c.append(f"Bandwidth {key}: {v['GB/s']:.0f} GB/s" + (f" ({bpc:.1f} B/clk/SM" + (
            f" at {v['sm_mhz_kernel']:.0f} MHz)" if v.get("sm_mhz_kernel") else ")") if bpc else "")
            + (f", best {_cfg_text(v.get('best'))}, within 2% from "
               f"{_cfg_text(v.get('smallest_within_2pct'))}" if v.get("best") else "")
            + (f", footprint {fmt_bytes(v['footprint'])}" if v.get("footprint") else "")
            + (f"; {v['evidence']}" if v.get("evidence") else "")
            + (" [" + "; ".join(v["flags"]) + "]" if v.get("flags") else "") + ".")
        su = v.get("sustained") or {}
        if su.get("GB/s"):
            nv = su.get("nvml") or {}
            c.append(f"Bandwidth {key} sustained ({su.get('region_us', 0) / 1e3:.0f} ms, same configuration): "
                     f"{su['GB/s']:.0f} GB/s, {su['GB/s'] / v['GB/s']:.1%} of the burst figure"
                     + (f", SM clock {su['sm_mhz_kernel']:.0f} MHz in its warps" if su.get("sm_mhz_kernel") else "")
                     + (f", {nv['power_w_median']:.0f} W median" if nv.get("power_w_median") else ", power unknown")
                     + (f", throttle reasons: {', '.join(nv.get('throttle_reasons') or []) or 'none'}"
                        if nv.get("nvml") == "sampled" else "") + ".")
    if "DRAM/read_over_copy" in bw:
        c.append(f"DRAM read bandwidth is {bw['DRAM/read_over_copy']:.2f} x the copy's (read + "
                 "write bytes) in the same run.")
    c += _l2_conclusion(bw.get("footprint_check") or {})
    c += _same_lines_conclusion(bw)
    c += _dram_conclusion(bw.get("write_vs_read") or {})
    return c


def _same_lines_conclusion(bw: dict) -> list[str]:
    """L2 read where every SM reads the same lines against the read where each line goes to
    one SM per pass, both at their best configuration and the same footprint."""
    one, same = bw.get("L2/read") or {}, bw.get("L2/read-same-lines") or {}
    if not (one.get("GB/s") and same.get("GB/s")):
        return []
    r = same["GB/s"] / one["GB/s"]
    line = (f"L2 read with every SM reading the same lines: {same['GB/s']:.0f} GB/s, {r:.2f} x the "
            f"read where each line goes to one SM per pass ({one['GB/s']:.0f} GB/s)")
    if r > 1 + PEAK_TOL:
        line += (": the L2 serves lines that many SMs read faster than lines spread over the SMs, so "
                 "L2 figures from kernels whose blocks re-read one shared array are the higher of the two.")
    elif r < 1 - PEAK_TOL:
        line += ": lines read by every SM are served slower (requests meet at the same L2 slices)."
    else:
        line += ": the two agree within 2%."
    return [line + _flags_text(one, same)]


def _flags_text(*figures: dict) -> str:
    fl = sorted({f.split(":")[0] for v in figures for f in v.get("flags") or []})
    return f" [flags: {', '.join(fl)}]" if fl else ""


def _dram_conclusion(d: dict) -> list[str]:
    """What the footprint check shows about DRAM write against read (measured, not assumed):
    whether the excess fades as the footprint and the region grow (L2 holding re-written lines,
    write-back left undrained), and whether reads with a 256-byte L2 prefetch close it."""
    pts = [p for p in d.get("points") or [] if p.get("write_over_read")]
    base = [p for p in pts if p["region_scale"] == 1]
    if not base:
        return []
    small, large = base[0], base[-1]
    long = [p for p in pts if p["region_scale"] > 1]
    desc = ", ".join(f"{p['write_over_read']:.3f} at {p['l2_multiple']:g} x L2" for p in base)
    line = f"DRAM write / read (each at its best configuration) against the footprint: {desc}"
    if long:
        line += f"; with a {long[-1]['region_scale']} x longer region {long[-1]['write_over_read']:.3f}"
    lr = large["write_over_read"]
    steady = lr > 1 + PEAK_TOL and (not long or long[-1]["write_over_read"] > 1 + PEAK_TOL)
    if abs(lr - 1) <= PEAK_TOL and small["write_over_read"] > 1 + PEAK_TOL:
        line += (". Writes outrun reads only while the footprint is within a few L2 sizes (re-written "
                 "lines stay dirty in L2 and are not all written back inside the region); with a "
                 "footprint far larger than L2 they agree within 2%.")
    elif steady:
        line += (f". Writes stay {lr - 1:.1%} faster than reads at {large['l2_multiple']:g} x the L2 "
                 "size and with a longer region: not lines held in L2 or write-back left undrained "
                 "at the region's end (either would fade as footprint and region grow); the device "
                 "memory takes streamed writes faster than it serves streamed reads.")
    elif lr < 1 - PEAK_TOL:
        line += f". At {large['l2_multiple']:g} x L2, writes are {1 - lr:.1%} slower than reads."
    else:
        line += ". Write and read agree within 2% at every footprint measured."
    pf = large.get("read_prefetch_256B")
    if pf and large.get("read") and large.get("write"):
        gain = pf / large["read"] - 1
        line += (f" With a 256-byte L2 prefetch hint (ld.global.cg.L2::256B) reads reach {pf:.0f} GB/s "
                 f"({gain:+.1%} on plain reads; write / read {large['write'] / pf:.3f})")
        if steady and abs(large["write"] / pf - 1) <= PEAK_TOL:
            line += (": larger DRAM fetches close the gap, so the reads' excess cost is the size of "
                     "the pieces L2 fetches from device memory.")
        elif steady:
            line += ": the fetch size does not explain the gap."
        else:
            line += "."
    return [line]


def _l2_conclusion(fc: dict) -> list[str]:
    rows = [x for x in fc.get("L2/read") or [] if x["region_scale"] == 1]
    if len(rows) < 2:
        return []
    top = max(x["GB/s"] for x in rows)
    held = [x for x in rows if x["GB/s"] >= (1 - PEAK_TOL) * top]
    return ["L2 read (best configuration) against the footprint: " + ", ".join(
        f"{x['GB/s']:.0f} GB/s at {fmt_bytes(x['footprint'])}" for x in rows)
        + f"; within 2% of its best up to {fmt_bytes(max(x['footprint'] for x in held))}."]


# --- figures (drawn from the suite's JSON document)

_COLOURS = {"read": "#4c72b0", "write": "#dd8452", "copy": "#55a868"}


def _points(doc: dict, prefix: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in doc.get("records", []):
        if r["variant"].startswith(prefix) and r.get("value") is not None:
            out.setdefault(r["variant"].removeprefix(prefix), []).append(r)
    return out


def occupancy_figure(doc: dict, outdir: Path) -> list[Path]:
    """Per level, the rate against warps per SM: the best over width and ILP at each occupancy
    (solid, clean configurations), the best width's ILP 1 (dotted, the latency-bound end), and
    the saturated figure marked; TB/s on a linear axis from 0."""
    import matplotlib.pyplot as plt

    from gpudissect.report.present.plotting import save_figure
    pts = _points(doc, "bwconfig/")
    if not pts:
        return []
    levels = [lv for lv in ("shared", "L1", "L2", "DRAM") if any(k.startswith(lv + "/") for k in pts)]
    fig, axes = plt.subplots(1, len(levels), figsize=(4 * len(levels), 3.8), squeeze=False,
                             layout="constrained")
    gpu = (doc.get("provenance") or {}).get("gpu_name") or "?"
    for ax, lv in zip(axes[0], levels, strict=True):
        for key, rows in sorted(pts.items()):
            if not key.startswith(lv + "/"):
                continue
            rw = key.split("/")[1]
            clean = [r for r in rows if _clean(r)]
            curve = _curve(clean, 2)
            xs = [int(k) for k in curve]
            ax.plot(xs, [curve[str(x)] / 1000 for x in xs], "o-", ms=4, color=_COLOURS.get(rw),
                    label=rw)
            sat = saturation(rows)
            if sat["best"]:
                b = sat["best"]
                low = {int(_cfg(r)[2]): r["value"] for r in clean
                       if _cfg(r)[0] == b["bits"] and _cfg(r)[1] == min(_cfg(q)[1] for q in clean)}
                if low:
                    ks = sorted(low)
                    ax.plot(ks, [low[k] / 1000 for k in ks], ":", color=_COLOURS.get(rw), alpha=0.7)
                ax.plot([b["warps"]], [sat["value"] / 1000], "*", ms=12, color=_COLOURS.get(rw),
                        markeredgecolor="k")
        ax.set_xscale("log", base=2)
        ticks = sorted({_cfg(r)[2] for k, rows in pts.items() if k.startswith(lv + "/") for r in rows})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("warps per SM")
        ax.set_ylim(bottom=0)
        ax.set_title(lv)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("TB/s (linear, from 0)")
    fig.suptitle(f"Bandwidth vs occupancy: solid best over width x ILP, dotted lowest ILP, "
                 f"star the saturated figure ({gpu})", fontsize=9)
    return save_figure(fig, outdir, "memory_bandwidth_occupancy")


def footprint_figure(doc: dict, outdir: Path) -> list[Path]:
    """Rates against the footprint in multiples of the largest L2 bound: L2 read, DRAM read,
    write and read with the 256-byte prefetch hint (open marks: the longer region)."""
    import matplotlib.pyplot as plt

    from gpudissect.report.present.plotting import save_figure
    series = footprint_series(doc.get("records", []))
    if not series:
        return []
    colours = {"L2/read": "#8172b2", "DRAM/read": _COLOURS["read"], "DRAM/write": _COLOURS["write"],
               "DRAM/read-L2::256B": "#64b5cd"}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rows in sorted(series.items()):
        for s, style in ((1, "o-"), (4, "s")):
            pts = [(x["l2_multiple"], x["GB/s"] / 1000) for x in rows if x["region_scale"] == s]
            if pts:
                ax.plot(*zip(*pts, strict=True), style, color=colours.get(name), mfc=None if s == 1 else "none",
                        label=name if s == 1 else f"{name}, 4 x region")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("footprint / largest L2 bound measured")
    ax.set_ylabel("TB/s (linear, from 0)")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    gpu = (doc.get("provenance") or {}).get("gpu_name") or "?"
    ax.set_title(f"Bandwidth against the footprint ({gpu})", fontsize=9)
    return save_figure(fig, outdir, "memory_dram_footprint")


def figures(doc: dict, outdir: Path) -> list[Path]:
    outdir = Path(outdir)
    return occupancy_figure(doc, outdir) + footprint_figure(doc, outdir)
