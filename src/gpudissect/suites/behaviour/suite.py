"""The behaviour suite: undisclosed behaviour, found by experiment.

Probes (each a named, selectable, resumable store item; patterns are globs on the names):

* ``dispatch:<config>``: block -> SM assignment for grids of several sizes/shapes and
  occupancy limits (per-block %smid, %globaltimer and %clock64 at start and end);
* ``occupancy:<axis>=<value>``: blocks resident per SM at once vs registers per thread,
  shared memory per block and block size, against the CUDA occupancy rules (``occupancy.toml``
  of the target architecture's folder, ``arch/occupancy.py``);
* ``scheduler:pairs``: which warps share a scheduler (the slowdown of warp pairs, each warp
  able to issue every cycle alone);
* ``scheduler:order:<workload>``: the order a scheduler's warps issue in (each warp's first
  and last clock of the timed region, per scheduler), for a few workloads;
* ``fairness:<grid>:<limit>``: block -> SM placement over ``FAIR_LAUNCHES`` identical
  launches of grids of k x the SM count (and a few non-multiples), blocks per SM limited by
  registers or shared memory: per-SM histograms, fairness, waves, how often a placement
  repeats (``fairness.py``);
* ``pipes:<a>[+<b>]``: catalog variants alone (swept over chains and warps until the rate
  stops rising) and in pairs: combined rates that add vs compete give the pipe groups, the
  highest rate the issue limit;
* ``icache:<W>w``: instruction fetch: loops over straight-line regions of growing size (independent
  FFMAs, 4 KiB to 1 MiB of code), W warps per SM; the warm cycles per instruction against the
  code size give the instruction-cache levels (where the cost rises: a capacity between two
  sizes), the first (cold) pass the cost of code fetched from beyond them;
* ``banks:ffma``: register banks below ptxas: a region of independent register-register FFMAs
  whose source fields are rewritten in the cubin (``kernel/patch.py``) to chosen registers that
  nothing in the region writes (a few of each residue modulo 4, within those its SASS names),
  every ordered pair of them (third source RZ, no reuse flag), then triples and the reuse flag:
  the cycles per FFMA of one warp show which registers conflict (one bank) and what a reused
  operand saves;
* ``efficacy:<variant>``: compiler efficacy: the verified PTX kernel of a variant's chains and a
  CUDA C++ kernel of the same work built by nvcc, timed by the same harness at a few (warps,
  chains) points: nvcc's rate over the verified one (``efficacy.py``).

Every probe is launched ``LAUNCHES`` times; each launch gives its own verdict and a verdict is
stated only when they agree (``analyse.agree``). The probes that time work run one block per SM
(its shared memory leaves room for no second block), so no other block shares the schedulers.
``SUITE`` runs them through the one runner (``bench/runner.py``); the conclusions, with the
numbers behind them (``summary.summarize``): ``store.get_meta(f"summary:{run_id}")``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import combinations

import numpy as np

from gpudissect.arch import occupancy
from gpudissect.bench import stats
from gpudissect.bench.contract import (
    Context,
    Item,
    Outcome,
    Plan,
    Redo,
    SuiteBase,
    select_named,
)
from gpudissect.catalog.model import load_catalog
from gpudissect.device.args import Buf
from gpudissect.device.device import Device, forget
from gpudissect.kernel.build import Built, build_module, take
from gpudissect.kernel.patch import RZ, patch
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.behaviour import analyse as an
from gpudissect.suites.behaviour import efficacy as ef
from gpudissect.suites.behaviour import fairness as fa
from gpudissect.suites.behaviour.kernels import (
    REC_WORDS,
    REPS,
    ROW,
    bank_name,
    order_kernel,
    order_name,
    pipe_kernel,
    pipe_name,
    resid_kernel,
    sched_pair_kernel,
)
from gpudissect.suites.behaviour.launch import pair_spans, timed_launch
from gpudissect.suites.behaviour.summary import summarize

PIPE_VARIANTS = ("fma.rn.f32", "mad.lo.u32", "lop3.b32", "min.s32", "prmt.b32", "fma.rn.f64",
                 "ex2.approx.ftz.f32", "popc.b32")
QUICK_PIPES = ("fma.rn.f32", "mad.lo.u32", "fma.rn.f64", "ex2.approx.ftz.f32")
# (chains per thread, warps per SM) of growing parallelism; the pairs run PAIR_CONFIG, and a
# solo's rate there is saturated when the next configuration (twice the warps) raises it by less
# than analyse.RISE
PIPE_CONFIGS = ((4, 8), (8, 8), (8, 16), (8, 32))
PAIR_CONFIG = (8, 16)
SOLO_UNITS = (256, 512)  # instances per thread at the two region lengths (the slope's two points)
PAIR_UNITS = (128, 256)  # per part: a pair's region holds as many instructions as a solo's
LAUNCHES = 3  # independent launches behind every verdict
SCHED_WARPS = 16
# workload: (independent FFMA chains per warp, chain length, warps per block)
ORDER_WORKLOADS = {"dep32": (1, 128, 32), "ilp32": (4, 32, 32), "dep16": (1, 128, 16)}
LIVE = (0, 10, 22, 34, 42, 54, 66, 78, 90, 106, 122, 138, 150, 165, 180)  # extra live values
SMEM_KIB = (1, 8, 16, 24, 32, 48, 64, 76, 100, 113, 150, 227)
THREADS = (32, 64, 96, 256, 512, 1024)
SPIN_OCC = (100_000, 150_000)  # SM cycles each block spins (uniform range)
SPIN_DISPATCH = (20_000, 60_000)
# fairness: grids as (multiple of the SM count, blocks added); what limits blocks per SM at
# FAIR_THREADS threads: (extra live values: registers, dynamic shared memory in KiB); every
# configuration launched FAIR_LAUNCHES times with the same input, every block spinning FAIR_SPIN
# SM cycles (equal work per block: a fair placement gives equal makespans). The spin is to outlast
# the resid kernel's loads of its live values: on H100 at a 20,000-cycle spin, one-wave launches of
# blocks with 63..254 registers took 1.6-5.6x the spin (every thread loading the same buffer);
# fairness.equal_work checks the premise in every launch

FAIR_GRIDS = {"1x": (1, 0), "1x+1": (1, 1), "1.5x": (1.5, 0), "2x": (2, 0), "3x": (3, 0), "4x": (4, 0),
              "8x": (8, 0)}
FAIR_LIMITS = {"free": (0, 0), "live54": (54, 0), "live106": (106, 0), "live180": (180, 0),
               "smem48KiB": (0, 48), "smem100KiB": (0, 100), "smem200KiB": (0, 200)}
QUICK_FAIR = (("1x", "1x+1", "2x"), ("free", "live180", "smem200KiB"))
FAIR_THREADS = 256
FAIR_LAUNCHES = 10
FAIR_SPIN = 400_000
# the kernels of a probe kind compile as one module; the resid kernels have no timed region
MODULE = {"dispatch": "resid", "occupancy": "resid", "fairness": "resid", "scheduler": "sched", "pipes": "pipes",
          "efficacy": "efficacy", "icache": "icache", "banks": "sched"}
BANK_CHAINS = 8
BANK_LENGTHS = (16, 32)  # per chain: 128 and 256 FFMAs
# instruction fetch: regions of 2^8 .. 2^16 independent FFMAs (16 B of code each: 4 KiB to 1 MiB),
# ICACHE_CHAINS chains (enough to issue one per cycle), at ICACHE_WARPS warps per SM
ICACHE_SIZES = tuple(1 << k for k in range(8, 17))
ICACHE_QUICK = tuple(1 << k for k in range(8, 17, 2))
ICACHE_CHAINS = 8
ICACHE_WARPS = (1, 4)
SASS_BYTES = 16  # one sm_70+ instruction


@dataclass
class Probe:
    name: str
    kind: str  # dispatch | occupancy | fairness | scheduler | pipes
    params: dict = field(default_factory=dict)
    kernels: list[str] = field(default_factory=list)  # the kernels it launches


def _resid(name: str, kind: str, params: dict) -> Probe:
    return Probe(name, kind, params, [f"resid_r{params['live']}"])


def lengths(chains: int, units: tuple[int, ...]) -> list[int]:
    return [u // chains for u in units]


def _tag(parts: list[str]) -> str:
    return "".join(f"v{PIPE_VARIANTS.index(v)}" for v in parts)


def pipe_probe(parts: list[str]) -> Probe:
    """A solo (one variant: every configuration of PIPE_CONFIGS at both lengths) or a pair
    (the last configuration, PAIR_UNITS per part)."""
    if len(parts) == 1:
        ks = [pipe_name(_tag(parts), k, n) for k, _w in PIPE_CONFIGS for n in lengths(k, SOLO_UNITS)]
        ks = list(dict.fromkeys(ks))
    else:
        k = PAIR_CONFIG[0]
        ks = [pipe_name(_tag(parts), k, n) for n in lengths(k, PAIR_UNITS)]
    return Probe("pipes:" + "+".join(parts), "pipes", {"parts": list(parts)}, ks)


def all_probes(nsm: int, quick: bool) -> list[Probe]:
    """Every probe, in run order (with_pipe_solos adds the solos a selection of pairs needs)."""
    ps: list[Probe] = []
    ps.append(_resid("dispatch:1d-1perSM", "dispatch", {"grid": [3 * nsm + nsm // 2, 1], "threads": 128,
                                                         "smem": 200 * 1024, "live": 0}))
    ps.append(_resid("dispatch:1d-free", "dispatch", {"grid": [nsm * 16, 1], "threads": 256, "smem": 0,
                                                      "live": 0}))
    ps.append(_resid("dispatch:2d", "dispatch", {"grid": [16, max(1, nsm // 4)], "threads": 128,
                                                 "smem": 100 * 1024, "live": 0}))
    ps.append(_resid("dispatch:small", "dispatch", {"grid": [max(1, nsm // 2), 1], "threads": 128,
                                                    "smem": 0, "live": 0}))
    ps.append(_resid("dispatch:regs", "dispatch", {"grid": [4 * nsm, 1], "threads": 128, "smem": 0,
                                                   "live": 180}))
    live = LIVE[::3] if quick else LIVE
    smem = SMEM_KIB[::3] if quick else SMEM_KIB
    thr = THREADS[::2] if quick else THREADS
    for n in live:
        ps.append(_resid(f"occupancy:live={n}", "occupancy", {"threads": 128, "smem": 0, "live": n}))
    for k in smem:
        ps.append(_resid(f"occupancy:smem={k}KiB", "occupancy", {"threads": 128, "smem": k * 1024, "live": 0}))
    for t in thr:
        ps.append(_resid(f"occupancy:threads={t}", "occupancy", {"threads": t, "smem": 0, "live": 0}))
    grids, limits = QUICK_FAIR if quick else (tuple(FAIR_GRIDS), tuple(FAIR_LIMITS))
    for g in grids:
        k, add = FAIR_GRIDS[g]
        for lim in limits:
            live, kib = FAIR_LIMITS[lim]
            ps.append(_resid(f"fairness:{g}:{lim}", "fairness", {"grid": int(k * nsm) + add, "threads": FAIR_THREADS,
                                                                  "smem": kib * 1024, "live": live}))
    ps.append(Probe("scheduler:pairs", "scheduler", {"warps": SCHED_WARPS}, ["sched_pair"]))
    for wl, (c, n, w) in ORDER_WORKLOADS.items():
        ps.append(Probe(f"scheduler:order:{wl}", "scheduler", {"chains": c, "length": n, "warps": w},
                        [order_name(c, n)]))
    vs = QUICK_PIPES if quick else PIPE_VARIANTS
    for v in vs:
        ps.append(pipe_probe([v]))
    for a, b in combinations(vs, 2):
        ps.append(pipe_probe([a, b]))
    sizes = ICACHE_QUICK if quick else ICACHE_SIZES
    for w in ICACHE_WARPS:
        ps.append(Probe(f"icache:{w}w", "icache", {"warps": w, "chains": ICACHE_CHAINS, "sizes": list(sizes)},
                        [order_name(ICACHE_CHAINS, n // ICACHE_CHAINS) for n in sizes]))
    ps.append(Probe("banks:ffma", "banks", {"chains": BANK_CHAINS, "lengths": list(BANK_LENGTHS)},
                    [bank_name(BANK_CHAINS, n) for n in BANK_LENGTHS]))
    ps += [Probe(n, "efficacy", q, ks) for n, q, ks in ef.probe_specs()]
    return ps


def select(probes: list[Probe], patterns: list[str] | None) -> list[Probe]:
    kinds = sorted({p.kind for p in probes})
    return select_named(probes, patterns, lambda p: p.name, lambda p, pat: p.kind == pat,
                        f"no behaviour probe matches {patterns} (kinds: {', '.join(kinds)}; "
                        "or names like 'occupancy:smem=*')")


def with_pipe_solos(probes: list[Probe]) -> list[Probe]:
    """The probes, and the solo of every variant of a selected pair (its verdict needs them)."""
    names = {p.name for p in probes}
    needed = sorted({v for p in probes if p.kind == "pipes" for v in p.params["parts"]},
                    key=PIPE_VARIANTS.index)
    return probes + [pipe_probe([v]) for v in needed if f"pipes:{v}" not in names]


def probe_kernels(p: Probe, header: str, cat) -> list[Kernel]:
    """The kernels ``p`` launches, under the module ``header``."""
    if p.kind in ("dispatch", "occupancy", "fairness"):
        return [resid_kernel(header, p.params["live"])]
    if p.name == "scheduler:pairs":
        return [sched_pair_kernel(header)]
    if p.kind == "efficacy":  # the verified twins; build_nvcc builds the CUDA ones
        return ef.ptx_kernels(cat.get(p.params["variant"]), header)
    if p.kind == "scheduler":
        return [order_kernel(header, p.params["chains"], p.params["length"])]
    if p.kind == "icache":
        return [order_kernel(header, ICACHE_CHAINS, n // ICACHE_CHAINS) for n in p.params["sizes"]]
    if p.kind == "banks":
        return [order_kernel(header, BANK_CHAINS, n, registers=True) for n in p.params["lengths"]]
    parts = [cat.get(v) for v in p.params["parts"]]
    if len(parts) == 1:
        return [pipe_kernel(header, _tag(p.params["parts"]), parts, k, n)
                for k in dict.fromkeys(k for k, _w in PIPE_CONFIGS) for n in lengths(k, SOLO_UNITS)]
    k = PAIR_CONFIG[0]
    return [pipe_kernel(header, _tag(p.params["parts"]), parts, k, n) for n in lengths(k, PAIR_UNITS)]


def main_op(built: Built | Exception) -> str:
    """The SASS opcode of a variant's solo pipe kernel (its chains fill the timed region)."""
    ops = Counter(i.opcode for i in built.region) if isinstance(built, Built) else Counter()
    return ops.most_common(1)[0][0] if ops else "?"


def region_extra(built: Built, allowed: set[str]) -> dict[str, int]:
    """SASS in the timed region other than the work under test (harness that leaked in)."""
    return dict(Counter(i.opcode for i in built.region if i.opcode not in allowed))


# ----------------------------------------------------------------- running: residency
def _spins(n: int, rng_range: tuple[int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(rng_range[0], rng_range[1], size=n, dtype=np.uint32)


def _resid_launch(dev: Device, built: Built, grid: list[int], threads: int, smem: int,
                  spin_range: tuple[int, int], seed: int) -> dict:
    n = grid[0] * grid[1]
    spins = _spins(n, spin_range, seed)
    vals = (np.arange(4096, dtype=np.uint32) * 2654435761 + 12345).astype(np.uint32)
    run = dev.launch(built.cubin, built.name, (grid[0], grid[1], 1), threads,
                     [Buf("rec", nbytes=n * REC_WORDS * 8, read=True, dtype="u8", zero=True),
                      Buf("spin", data=spins), Buf("vals", data=vals)], smem=smem)
    rec = run.outputs["rec"].reshape(-1, REC_WORDS)[:n]
    bx = rec[:, 6] & 0xFFFFFFFF
    by = rec[:, 6] >> 32
    return {"g0": rec[:, 0], "g1": rec[:, 1], "c0": rec[:, 2], "c1": rec[:, 3], "smid": rec[:, 4],
            "nsmid": rec[:, 5], "lin": by * grid[0] + bx, "warpid": rec[:, 7], "gpu_ms": run.gpu_ms,
            "spins": spins}


def _trace_ok(t: dict) -> str | None:
    if np.any(t["g1"] == 0) or np.any(t["g1"] < t["g0"]):
        return "missing or inconsistent block records (some block did not write)"
    return None


def run_dispatch(dev: Device, p: Probe, built: Built, nsm: int, rules: dict) -> Result:
    q = p.params
    regs = built.regs
    pred = occupancy.predict_blocks(q["threads"], regs, q["smem"], rules)
    launches, modes = [], []
    nsmid = 0
    for i in range(LAUNCHES):
        t = _resid_launch(dev, built, q["grid"], q["threads"], q["smem"], SPIN_DISPATCH, seed=1 + i)
        bad = _trace_ok(t)
        if bad:
            return Result(p.name, "dispatch", None, "blocks/SM", "-", params={**q, "regs": regs},
                          flags=[f"error: launch {i}: {bad}"], cls="behaviour")
        res = an.residency(t["smid"], t["c0"], t["c1"])
        modes.append(res["mode"])
        nsmid = int(np.max(t["nsmid"]))
        g00 = int(t["g0"].min())
        launches.append({"lin": t["lin"].tolist(), "smid": t["smid"].tolist(),
                         "g0_ns": (t["g0"].astype(np.int64) - g00).tolist(),
                         "g1_ns": (t["g1"].astype(np.int64) - g00).tolist(),
                         "c_cycles": (t["c1"].astype(np.int64) - t["c0"].astype(np.int64)).tolist(),
                         "gpu_ms": t["gpu_ms"], "blocks_per_sm_mode": res["mode"]})
    flags = [] if len(set(modes)) == 1 else [f"undetermined: blocks/SM per launch {modes}"]
    fit = {"predicted": pred, "nsmid": nsmid, "sms_reported": nsm, "blocks_per_sm_per_launch": modes}
    return Result(p.name, "dispatch", float(np.median(modes)), "blocks/SM",
                  f"max blocks open at once on an SM (per-SM clock64), mode over SMs, median of {LAUNCHES} "
                  "launches", params={**q, "regs": regs, "launches": LAUNCHES}, fit=fit,
                  samples={"launches": launches}, flags=flags, cls="behaviour")


def run_occupancy(dev: Device, p: Probe, built: Built, nsm: int, rules: dict) -> Result:
    q = p.params
    regs = built.regs
    pred = occupancy.predict_blocks(q["threads"], regs, q["smem"], rules)
    per_sm_max = min(rules["max_blocks_per_sm"], rules["max_threads_per_sm"] // q["threads"])
    grid = [nsm * max(per_sm_max, 1) * 2, 1]
    params = {**q, "regs": regs, "grid": grid, "warps_per_block": -(-q["threads"] // 32), "launches": LAUNCHES}
    per: list[dict] = []
    for i in range(LAUNCHES):
        try:
            t = _resid_launch(dev, built, grid, q["threads"], q["smem"], SPIN_OCC, seed=11 + i)
        except Exception as e:  # a launch the rules forbid fails: that is a measurement too
            per.append({"verdict": 0, "launch_failed": f"{e}"[:200]})
            continue
        bad = _trace_ok(t)
        if bad:
            per.append({"verdict": None, "error": bad})
            continue
        res = an.residency(t["smid"], t["c0"], t["c1"])
        per.append({"verdict": res["max"], "min": res["min"], "mode": res["mode"], "sms": res["sms"],
                    "per_sm_max": [res["per_sm"][s] for s in sorted(res["per_sm"])], "gpu_ms": t["gpu_ms"]})
    v = an.agree(per)
    flags = []
    if not v["agreed"]:
        flags.append(f"undetermined: {v.get('why')}")
    elif v["verdict"] != pred["blocks"]:
        flags.append(f"disagrees: measured {v['verdict']} blocks/SM, rules predict {pred['blocks']}")
    uneven = [d for d in per if d.get("min") is not None and d["min"] != d["verdict"]]
    if uneven:
        flags.append(f"uneven: {uneven[0]['min']}..{uneven[0]['verdict']} blocks/SM across SMs in "
                     f"{len(uneven)} of {LAUNCHES} launches")
    if any("launch_failed" in d for d in per) and pred["blocks"] != 0:
        flags.append("error: launch failed: " + next(d["launch_failed"] for d in per if "launch_failed" in d))
    value = float(v["verdict"]) if v["agreed"] else None
    fit = {"predicted": pred, "measured_per_launch": [d.get("verdict") for d in per],
           "measured_warps": None if value is None else value * params["warps_per_block"], "verdict": v["verdict"]}
    return Result(p.name, "occupancy", value, "blocks/SM",
                  f"max blocks open at once on an SM (per-SM clock64), max over SMs, the same in all {LAUNCHES} "
                  "launches", params=params, fit=fit, samples={"launches": per}, flags=flags, cls="behaviour")


def run_fairness(dev: Device, p: Probe, built: Built, nsm: int, rules: dict) -> Result:
    """FAIR_LAUNCHES identical launches of one configuration: each launch's block -> SM map,
    loads, waves and refill order (fairness.launch_stats), then how often the placement
    repeats and the verdict. Samples: the distinct maps, which one each launch gave, and
    each launch's waves per block (fairness.encode_ids)."""
    q = p.params
    regs = built.regs
    pred = occupancy.predict_blocks(q["threads"], regs, q["smem"], rules)
    params = {**q, "regs": regs, "launches": FAIR_LAUNCHES, "spin_cycles": FAIR_SPIN, "sms_reported": nsm,
              "grid_per_sm": round(q["grid"] / nsm, 4)}
    per, maps, wave_strs, unequal = [], [], [], []
    for i in range(FAIR_LAUNCHES):
        t = _resid_launch(dev, built, [q["grid"], 1], q["threads"], q["smem"], (FAIR_SPIN, FAIR_SPIN + 1), seed=0)
        bad = _trace_ok(t)
        if bad:
            return Result(p.name, "fairness", None, "share", "-", params=params,
                          flags=[f"error: launch {i}: {bad}"], cls="behaviour")
        smid = t["smid"].astype(np.int64)
        d, _load, w = fa.launch_stats(smid, t["g0"], t["g1"], t["c0"], t["c1"], nsm, FAIR_SPIN)
        per.append({**d, "gpu_ms": t["gpu_ms"], "nsmid": int(np.max(t["nsmid"]))})
        if not d["work"]["equal"]:
            unequal.append(f"launch {i}: {d['work'].get('why')}")
        maps.append(smid)
        wave_strs.append(fa.encode_ids(w))
    rpt = fa.repeats(maps, nsm)
    v = fa.verdict(per, rpt)
    distinct = list(dict.fromkeys(fa.encode_ids(m) for m in maps))
    flags = [f"unequal-work: in {len(unequal)} of {FAIR_LAUNCHES} launches the blocks did not do equal work, "
             f"so their loads may follow the blocks' lengths rather than the dispatcher ({unequal[0]})"] if unequal else []
    if per[0]["sms"] > nsm:
        flags.append(f"note: %smid up to {per[0]['sms'] - 1} beyond the {nsm} SMs reported; the histogram "
                     "counts every id up to it")
    fit = {"verdict": v, "repeats": rpt, "predicted": pred, "mean_histogram": fa.mean_histogram(per),
           "equal_work": not unequal, "per_launch": per}
    return Result(p.name, "fairness", v["fair_share"], "share",
                  f"share of {FAIR_LAUNCHES} identical launches in which every SM (idle ones included) got "
                  "floor or ceil of grid / SMs blocks",
                  params=params, fit=fit,
                  samples={"maps": distinct, "launch_map": [distinct.index(fa.encode_ids(m)) for m in maps],
                           "waves": wave_strs},
                  flags=flags, cls="behaviour")


# ----------------------------------------------------------------- running: timed probes
def _count(b: Built, ops: set[str]) -> int:
    return sum(1 for i in b.region if i.opcode in ops)


def _rates(dev: Device, pair: tuple[Built, Built], nsm: int, warps: int, smem: int, ops: set[str]) -> dict:
    """One launch of each of two region lengths: the rate of ``ops`` and the issue rate (every
    SASS of the region) per clock per SM, from the difference of the two lengths (the region's
    constant costs, its clock reads and the barrier's release, cancel)."""
    s1, s2 = pair_spans(dev, pair, nsm, warps, smem)
    d_ops = warps * (_count(pair[1], ops) - _count(pair[0], ops))
    d_all = warps * (len(pair[1].region) - len(pair[0].region))
    r = stats.rate_stats(stats.slope_rates(s1, s2, d_ops))
    return {**r, "issue": stats.rate_stats(stats.slope_rates(s1, s2, d_all))["rate"], "sms": len({sm for _r, sm in s2}),
            "span_median": [round(float(np.median(list(s.values()))), 1) if s else None for s in (s1, s2)]}


def run_pipe_solo(dev: Device, p: Probe, built: dict[str, Built], nsm: int, smem: int, op: str,
                  flags: list[str]) -> Result:
    v = p.params["parts"][0]
    by_k: dict[int, list[Built]] = {}
    for name in p.kernels:
        by_k.setdefault(built[name].kernel.chains, []).append(built[name])
    for bs in by_k.values():
        bs.sort(key=lambda b: b.kernel.length)
    per_launch = []
    for _ in range(LAUNCHES):
        configs = {f"k{k}w{w}": _rates(dev, (by_k[k][0], by_k[k][-1]), nsm, w, smem, {op})
                   for k, w in PIPE_CONFIGS}
        rates = [configs[f"k{k}w{w}"]["rate"] for k, w in PIPE_CONFIGS]
        at = PIPE_CONFIGS.index(PAIR_CONFIG)
        here = configs["k{}w{}".format(*PAIR_CONFIG)]
        per_launch.append({**{x: here[x] for x in ("rate", "hw", "n", "issue")},
                           **stats.saturation(rates[at:at + 2]), "configs": configs})
    unsat = [i for i, d in enumerate(per_launch) if not d["saturated"]]
    if unsat:
        flags = flags + ["unsaturated: still rising in launches " + ", ".join(
            f"{i} (x{per_launch[i]['rise']})" for i in unsat)]
    vals = [d["rate"] for d in per_launch if d["rate"]]
    k, w = PAIR_CONFIG
    big = by_k[k][-1]
    spi = _count(big, {op}) / (big.kernel.chains * big.kernel.length)
    return Result(p.name, "pipes", float(np.median(vals)) if vals else None, "warp-instr/clk/SM",
                  f"{op} per clock per SM at {k} chains x {w} warps (saturated: {2 * w} warps raise it by less "
                  f"than {stats.RISE - 1:.0%}): the slope between two region lengths, median over (SM, repetition), "
                  f"median of {LAUNCHES} launches",
                  params={"parts": [v], "configs": [list(c) for c in PIPE_CONFIGS], "pair_config": list(PAIR_CONFIG),
                          "units": list(SOLO_UNITS), "launches": LAUNCHES, "repetitions_kept": REPS - 1},
                  fit={"sass_op": op, "sass_per_instance": round(spi, 4), "launches": per_launch},
                  flags=flags, cls="behaviour")


def run_pipe_pair(dev: Device, p: Probe, built: dict[str, Built], nsm: int, smem: int, ops: dict[str, str],
                  spi: dict[str, float], flags: list[str]) -> Result:
    a, b = p.params["parts"]
    bs = sorted((built[n] for n in p.kernels), key=lambda x: x.kernel.length)
    k, w = PAIR_CONFIG
    per_launch = [_rates(dev, (bs[0], bs[-1]), nsm, w, smem, {ops[a], ops[b]}) for _ in range(LAUNCHES)]
    ca, cb = _count(bs[-1], {ops[a]}), _count(bs[-1], {ops[b]})
    if ops[a] != ops[b] and ca + cb:  # a's share of the pair's instructions, as compiled
        share_a = ca / (ca + cb)
    else:  # one opcode for both: the shares of their solos' SASS per instance
        share_a = spi[a] / (spi[a] + spi[b]) if spi.get(a) and spi.get(b) else 0.5
    vals = [d["rate"] for d in per_launch if d["rate"]]
    return Result(p.name, "pipes", float(np.median(vals)) if vals else None, "warp-instr/clk/SM",
                  f"{ops[a]} + {ops[b]} per clock per SM together, {k} chains of each x {w} warps: the slope "
                  f"between two region lengths, median over (SM, repetition), median of {LAUNCHES} launches",
                  params={"parts": [a, b], "chains": k, "warps": w, "units": list(PAIR_UNITS),
                          "launches": LAUNCHES, "repetitions_kept": REPS - 1},
                  fit={"sass_ops": [ops[a], ops[b]], "share_a": round(share_a, 4), "launches": per_launch},
                  flags=flags, cls="behaviour")


def run_sched_pairs(dev: Device, p: Probe, b: Built, smem: int, flags: list[str]) -> Result:
    W = p.params["warps"]
    sets = an.pair_masks(W)
    masks = np.array([sum(1 << w for w in s) for s in sets], dtype=np.uint32)
    ffma = _count(b, {"FFMA"})
    per = []
    for _ in range(LAUNCHES):
        out = timed_launch(dev, b, len(sets), W, [Buf("masks", data=masks),
                                                  Buf("wid", nbytes=len(sets) * W * 8, read=True, zero=True)], smem)
        rows = out["times"].reshape(len(sets), W, ROW)
        starts = np.stack([rows[:, :, 2 * r] for r in range(1, REPS)], 1)
        ends = np.stack([rows[:, :, 2 * r + 1] for r in range(1, REPS)], 1)
        per.append(an.sched_launch(starts, ends, sets, W, ffma))
    v = an.agree(per)
    g = per[0] if v["agreed"] else {}
    return Result(p.name, "scheduler", float(g["schedulers"]) if v["agreed"] else None, "schedulers",
                  f"groups of warps that slow each other (pair/solo >= {an.SLOWDOWN}), the same in all "
                  f"{LAUNCHES} launches", params={**p.params, "ffma_per_warp": ffma, "launches": LAUNCHES,
                                                 "blocks": len(sets)},
                  fit={"verdict": v["verdict"], "agreed": v["agreed"], "why": v.get("why"),
                       "groups": g.get("groups"), "rule": g.get("rule"), "mod": g.get("mod"),
                       "per_launch": [{k: x for k, x in d.items() if k != "slowdown"} for d in per]},
                  samples={"slowdown": [d["slowdown"] for d in per]},
                  flags=flags + ([] if v["agreed"] else [f"undetermined: {v.get('why')}"]), cls="behaviour")


def run_sched_order(dev: Device, p: Probe, b: Built, nsm: int, smem: int, groups: dict | None,
                    flags: list[str]) -> Result:
    W = p.params["warps"]
    flags = list(flags)
    if groups is None:
        gs = [list(range(W))]
        flags.append("undetermined: no agreed scheduler:pairs verdict in this run; all warps taken as one group")
    else:
        gs = an.extend_groups(groups["groups"], groups.get("mod"), W)
    per = []
    for _ in range(LAUNCHES):
        out = timed_launch(dev, b, nsm, W, [Buf("wid", nbytes=nsm * W * 8, read=True, zero=True)], smem)
        rows = out["times"].reshape(nsm, W, ROW)
        wid = out["wid"].astype(np.int64)[: nsm * W].reshape(nsm, W)
        smid = rows[:, 0, -1]
        ok = np.array([np.sum(smid == s) == 1 for s in smid])  # blocks alone on their SM
        starts = np.stack([rows[ok, :, 2 * r] for r in range(1, REPS)], 1)
        ends = np.stack([rows[ok, :, 2 * r + 1] for r in range(1, REPS)], 1)
        per.append(an.order_launch(starts, ends, smid[ok], wid[ok], gs))
    v = an.agree(per)
    text = an.order_text(v["verdict"], len(gs[0])) if v["agreed"] else an.UNDETERMINED
    return Result(p.name, "scheduler", per[0]["share"] if v["agreed"] else None, "share",
                  "share of the (SM, repetition, scheduler) cases showing the pattern (first launch); the "
                  f"pattern the same in all {LAUNCHES} launches",
                  params={**p.params, "launches": LAUNCHES, "repetitions_kept": REPS - 1},
                  fit={"verdict": v["verdict"], "policy": text, "agreed": v["agreed"], "why": v.get("why"),
                       "groups": gs, "per_launch": per},
                  flags=flags + ([] if v["agreed"] else [f"undetermined: {v.get('why')}"]), cls="behaviour")


def run_icache(dev: Device, p: Probe, bs: list[Built], nsm: int, smem: int, flags: list[str]) -> Result:
    """Instruction fetch (``icache:<W>w``): per region size, one block of W warps per SM runs the
    region REPS times; per SM and repetition the cycles from the earliest warp's start to the
    latest warp's end over the FFMAs each warp issues. Warm: the repetitions after the first
    (the loop has run once), cold: the first; medians over the SMs whose block ran alone, per
    launch, then the median of the launches. The levels (analyse.icache_levels) from the warm
    costs."""
    W = p.params["warps"]
    sizes, code, warm, cold, per_launch = [], [], [], [], []
    for b in bs:
        n = _count(b, {"FFMA"})
        ws, cs = [], []
        for _ in range(LAUNCHES):
            out = timed_launch(dev, b, nsm, W, [Buf("wid", nbytes=nsm * W * 8, read=True, zero=True)], smem)
            rows = out["times"].reshape(nsm, W, ROW)
            smid = rows[:, 0, -1]
            ok = np.array([np.sum(smid == s) == 1 for s in smid])
            span = np.stack([rows[ok, :, 2 * r + 1].max(1) - rows[ok, :, 2 * r].min(1) for r in range(REPS)], 1)
            ws.append(float(np.median(span[:, 1:])) / n)
            cs.append(float(np.median(span[:, 0])) / n)
        sizes.append(n)
        code.append(len(b.region) * SASS_BYTES)
        warm.append(float(np.median(ws)))
        cold.append(float(np.median(cs)))
        per_launch.append({"warm": [round(x, 4) for x in ws], "cold": [round(x, 4) for x in cs]})
    levels = an.icache_levels(code, warm)
    first = levels[0] if levels else None
    spread = max((max(d["warm"]) / min(d["warm"]) - 1 for d in per_launch if min(d["warm"]) > 0), default=0.0)
    if spread > an.LIMIT_TOL * 5:
        flags = [*flags, f"noisy: the launches' warm cycles per instruction differ by up to {spread:.1%}"]
    return Result(p.name, "icache", float(first["to_bytes"]) / 1024 if first and first["next_bytes"] else None,
                  "KiB", "largest region (code bytes of its timed region) whose warm cycles per FFMA stay within "
                  f"{an.ICACHE_RISE:.0%} of the smallest regions' (a lower bound of the first fetch level's capacity; "
                  "the next size measured is the upper bound)",
                  params={**p.params, "launches": LAUNCHES, "repetitions_kept": REPS - 1},
                  fit={"ffma_per_warp": sizes, "code_bytes": code, "warm_cpi": [round(x, 4) for x in warm],
                       "cold_cpi": [round(x, 4) for x in cold], "levels": levels, "per_launch": per_launch},
                  flags=flags + ([] if first and first["next_bytes"] else
                                 ["undetermined: the warm cost did not rise over the sizes measured"]),
                  cls="behaviour")


def _bank_cost(dev: Device, bs: list[Built], edit: dict, smem: int) -> float:
    """Cycles per FFMA of one warp with every FFMA of both regions patched by ``edit`` (the
    slope between the two region lengths, median over the kept repetitions)."""
    spans = []
    for b in bs:
        offs = {i.offset: edit for i in b.region if i.opcode == "FFMA"}
        pb = replace(b, cubin=patch(b.cubin, b.name, offs))
        try:
            rows = timed_launch(dev, pb, 1, 1, [Buf("wid", nbytes=8, read=True, zero=True)], smem)["times"]
        finally:  # a patched module is run once: not kept loaded
            forget(dev, pb.cubin)
        spans.append((len(offs), float(np.median([rows[0, 2 * r + 1] - rows[0, 2 * r] for r in range(1, REPS)]))))
    (n0, c0), (n1, c1) = spans
    return (c1 - c0) / (n1 - n0)


REGISTER = re.compile(r"\bR(\d+)\b")


def highest_register(b: Built) -> int:
    """The highest register index ``b``'s SASS names: a patched source stays within it (on an
    H200 a kernel of 32 registers faulted with an illegal instruction reading R31, which it never
    named; cuobjdump's count is the allocation, not what the kernel may read)."""
    return max((int(m) for m in REGISTER.findall(b.sass)), default=0)


def run_banks(dev: Device, p: Probe, bs: list[Built], smem: int, flags: list[str]) -> Result:
    """Register banks (``banks:ffma``): the FFMAs' sources pointed at registers that nothing in
    the regions writes (analyse.free_registers) among those its SASS names; every ordered pair (a, b) with c = RZ
    and no reuse gives the conflicts (analyse.bank_groups); triples (the run's first register, b,
    c) the cost of three sources; the reuse flag on each slot of a three-in-one-bank triple what
    the reuse cache saves. The values computed are not the point (sources are rewritten): one
    warp, cycles only."""
    dests = {int(t[1:]) for b in bs for i in b.region if i.opcode == "FFMA"
             for t in i.operands[:1] if t[1:].isdigit()}
    run = an.free_registers(dests, min(highest_register(b) + 1 for b in bs))
    if not run:
        return Result(p.name, "banks", None, "banks", "-", params=p.params,
                      flags=[*flags, f"not timed: too few registers free of the regions' writes ({sorted(dests)})"],
                      cls="behaviour")
    pairs = {(a, b): _bank_cost(dev, bs, {"ra": a, "rb": b, "rc": RZ, "reuse": 0}, smem) for a in run for b in run}
    g = an.bank_groups(pairs)
    r0 = run[0]
    triples = {(r0, b, c): _bank_cost(dev, bs, {"ra": r0, "rb": b, "rc": c, "reuse": 0}, smem) for b in run for c in run}
    same = [r for grp in g.get("groups") or [] if r0 in grp for r in grp if r != r0][:2]
    reuse = {}
    if len(same) == 2:
        for slot, mask in (("none", 0), ("a", 1), ("b", 2), ("c", 4), ("a+b", 3)):
            reuse[slot] = _bank_cost(dev, bs, {"ra": r0, "rb": same[0], "rc": same[1], "reuse": mask}, smem)
    return Result(p.name, "banks", float(g["banks"]) if g.get("banks") else None, "banks",
                  f"groups of registers whose pair of FFMA sources costs more than {an.BANK_EXTRA} cycle per "
                  "instruction above the cheapest pair (one warp, sources patched in the cubin)",
                  params={**p.params, "registers": run, "region_writes": sorted(dests)},
                  fit={**g, "pairs": {f"R{a},R{b}": round(c, 4) for (a, b), c in pairs.items()},
                       "triples": {f"R{a},R{b},R{c}": round(x, 4) for (a, b, c), x in triples.items()},
                       "reuse_same_bank": {k: round(v, 4) for k, v in reuse.items()},
                       "reuse_registers": [r0, *same]},
                  flags=flags + ([] if g.get("banks") else [f"undetermined: {g.get('why')}"]), cls="behaviour")


# ----------------------------------------------------------------- the suite
def pair_groups(ctx: Context) -> dict | None:
    """The agreed scheduler groups of this run's scheduler:pairs probe (it runs first)."""
    r = next((r for r in ctx.store.results(ctx.run_id) if r["variant"] == "scheduler:pairs" and r["fit"]),
             None) if ctx.store is not None else None
    if r is None or not r["fit"].get("agreed"):
        return None
    return {"groups": r["fit"]["groups"], "mod": r["fit"].get("mod")}


def _order_key(p: Probe) -> int:
    """scheduler:pairs first (the order probes use its groups), then the pipe solos (the pairs'
    verdicts use them), then the rest."""
    if p.name == "scheduler:pairs":
        return 0
    if p.kind == "pipes" and len(p.params["parts"]) == 1:
        return 1
    return 2


class BehaviourSuite(SuiteBase):
    name = "behaviour"
    description = "block dispatch and residency, occupancy, warp scheduling and pipes, by experiment"

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        select(all_probes(1, quick=False), patterns)

    def plan(self, ctx: Context, patterns: list[str] | None) -> Plan:
        probes = select(all_probes(ctx.sm_count, ctx.quick), patterns)
        params = {"probes": [p.name for p in probes], "quick": ctx.quick, "launches": LAUNCHES}
        probes = with_pipe_solos(probes)
        rules = occupancy.occupancy_rules(ctx.target)
        ctx.state["rules"] = rules
        ctx.state["smem_one"] = occupancy.one_block_smem(rules)
        ctx.state["probes"] = {p.name: p for p in probes}
        items = [Item(p.name, p) for p in sorted(probes, key=_order_key)]
        return Plan(items, params)

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        """Build the kernels of ``items`` (one module per probe kind), and the solo pipe kernels
        of each variant they time: the main SASS opcode of a solo is what its pairs count; each
        timed region is checked to hold the work alone."""
        probes: list[Probe] = [i.data for i in items]
        variants = sorted({v for p in probes if p.kind == "pipes" for v in p.params["parts"]},
                          key=PIPE_VARIANTS.index)
        solos = [ctx.state["probes"][f"pipes:{v}"] for v in variants]
        header = ptx_header(ctx.target.ptx_isa, ctx.target.arch)
        cat = load_catalog()
        modules: dict[str, dict[str, Kernel]] = {}
        for p in [*probes, *solos]:
            ks = modules.setdefault(MODULE[p.kind], {})
            for k in probe_kernels(p, header, cat):
                ks.setdefault(k.name, k)
        built: dict[str, Built | Exception] = {}
        for mod, ks in modules.items():
            built.update(build_module(list(ks.values()), ctx.target.arch, region=mod != "resid"))
        nv = [p.params["variant"] for p in probes if p.kind == "efficacy"]
        if nv:
            built.update(ef.build_nvcc(nv, built, ctx.target.arch))
        ctx.state["built"] = built
        ops, spi = {}, {}
        for v, s in zip(variants, solos, strict=True):
            big = built[s.kernels[-1]]
            ops[v] = main_op(big)
            if isinstance(big, Built):
                spi[v] = _count(big, {ops[v]}) / (big.kernel.chains * big.kernel.length)
        ctx.state["main_ops"], ctx.state["spi"] = ops, spi

    def _flags(self, ctx: Context, p: Probe, bs: list[Built]) -> list[str]:
        """``sass:`` flags: a kernel whose timed region holds anything but the work under test."""
        if p.kind == "pipes":
            allowed = {ctx.state["main_ops"][v] for v in p.params["parts"]}
        elif p.kind in ("icache", "banks"):  # ptxas's two moves of a timing value to a uniform register
            allowed = {"FFMA", "R2UR"}
        else:
            allowed = {"FFMA"}
        out = []
        for b in bs:
            extra = region_extra(b, allowed)
            if extra or not b.region:
                out.append(f"sass: {b.name}: the timed region holds {extra or 'nothing'} besides "
                           f"{'/'.join(sorted(allowed))}")
        return out

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        p: Probe = item.data
        bs, texts = take(ctx.state["built"], p.kernels)
        built = dict(zip(p.kernels, bs, strict=True))
        smem = ctx.state["smem_one"]
        if p.kind == "efficacy":
            return Outcome(ef.run_efficacy(ctx.dev, p.name, built, ctx.sm_count, smem),  # type: ignore[arg-type]
                           ef.efficacy_texts(built, p.kernels))  # type: ignore[arg-type]
        if p.kind == "dispatch":
            r = run_dispatch(ctx.dev, p, bs[0], ctx.sm_count, ctx.state["rules"])
        elif p.kind == "occupancy":
            r = run_occupancy(ctx.dev, p, bs[0], ctx.sm_count, ctx.state["rules"])
        elif p.kind == "fairness":
            r = run_fairness(ctx.dev, p, bs[0], ctx.sm_count, ctx.state["rules"])
        elif p.name == "scheduler:pairs":
            r = run_sched_pairs(ctx.dev, p, bs[0], smem, self._flags(ctx, p, bs))
        elif p.kind == "icache":
            r = run_icache(ctx.dev, p, bs, ctx.sm_count, smem, self._flags(ctx, p, bs))
        elif p.kind == "banks":
            r = run_banks(ctx.dev, p, bs, smem, self._flags(ctx, p, bs))
        elif p.kind == "scheduler":
            r = run_sched_order(ctx.dev, p, bs[0], ctx.sm_count, smem, pair_groups(ctx), self._flags(ctx, p, bs))
        elif len(p.params["parts"]) == 1:
            r = run_pipe_solo(ctx.dev, p, built, ctx.sm_count, smem,  # type: ignore[arg-type]
                              ctx.state["main_ops"][p.params["parts"][0]], self._flags(ctx, p, bs))
        else:
            r = run_pipe_pair(ctx.dev, p, built, ctx.sm_count, smem, ctx.state["main_ops"],  # type: ignore[arg-type]
                              ctx.state["spi"], self._flags(ctx, p, bs))
        last = bs[-1]
        r.ptx_hash, r.sass_hash = last.ptx_hash, last.sass_hash
        return Outcome([r], texts)

    def error_results(self, item: Item, flag: str) -> list[Result]:
        p: Probe = item.data
        return [Result(p.name, p.kind, None, "-", "-", params=p.params, flags=[flag], cls="behaviour")]

    def summarize(self, ctx: Context) -> dict:
        return summarize(ctx.store, ctx.run_id)


SUITE = BehaviourSuite()
