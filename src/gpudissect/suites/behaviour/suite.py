"""The behaviour suite (issue 6): undisclosed behaviour, found by experiment.

Probes (each a named, selectable, resumable store item; patterns are globs on the names):

* ``dispatch:<config>``: block -> SM assignment for grids of several sizes/shapes and
  occupancy limits (per-block %smid, %globaltimer and %clock64 at start and end);
* ``occupancy:<axis>=<value>``: blocks resident per SM at once vs registers per thread,
  shared memory per block and block size, against the CUDA occupancy rules (the data file
  the target's architecture facts name, ``data/occupancy_sm90.toml`` for sm_90);
* ``scheduler:pairs`` / ``scheduler:order``: which warps share a scheduler (slowdown of warp
  pairs running FFMA streams together) and the order a scheduler picks ready warps;
* ``pipes:<a>[+<b>]``: catalog variants alone and in pairs; throughputs that add vs compete
  give the pipe groups and the issue limit per scheduler.

``SUITE`` runs them through the one runner (``bench/runner.py``); the conclusions, with the
numbers behind them (``analyse.summarize``): ``store.get_meta(f"summary:{run_id}")``.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from gpudissect.bench.contract import Context, Item, Outcome, Plan, Redo, SuiteBase, SuiteInputError
from gpudissect.catalog.model import Catalog, load_catalog
from gpudissect.device.device import Buf, Device
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.behaviour import analyse as an
from gpudissect.suites.behaviour.kernels import (
    REC_WORDS,
    SEGMENTS,
    pipe_kernel,
    resid_kernel,
    sched_order_kernel,
    sched_pair_kernel,
)

PIPE_VARIANTS = ("fma.rn.f32", "mad.lo.u32", "lop3.b32", "min.s32", "prmt.b32", "fma.rn.f64",
                 "ex2.approx.ftz.f32", "popc.b32")
QUICK_PIPES = ("fma.rn.f32", "mad.lo.u32", "fma.rn.f64", "ex2.approx.ftz.f32")
PIPE_CHAINS = 4
PIPE_WARPS = 16
PIPE_ITERS = 256
SCHED_WARPS = 8
ORDER_WARPS = 16
SCHED_ITERS = 512
LIVE = (0, 10, 22, 34, 42, 54, 66, 78, 90, 106, 122, 138, 150, 165, 180)  # extra live values
SMEM_KIB = (1, 8, 16, 24, 32, 48, 64, 76, 100, 113, 150, 227)
THREADS = (32, 64, 96, 256, 512, 1024)
SPIN_OCC = (100_000, 150_000)  # SM cycles each block spins (uniform range)
SPIN_DISPATCH = (20_000, 60_000)
# the kernels of a probe kind compile as one module; the resid kernels have no timed region
MODULE = {"dispatch": "resid", "occupancy": "resid", "scheduler": "sched", "pipes": "pipes"}


@dataclass
class Probe:
    name: str
    kind: str  # dispatch | occupancy | scheduler | pipes
    params: dict = field(default_factory=dict)
    kernel: str = ""  # the kernel it launches


def _resid(name: str, kind: str, params: dict) -> Probe:
    return Probe(name, kind, params, f"resid_r{params['live']}")


def all_probes(nsm: int, quick: bool) -> list[Probe]:
    """Every probe, in run order (the pipe probes' kernels are named by :func:`with_pipe_solos`)."""
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
    ps.append(Probe("scheduler:pairs", "scheduler", {"warps": SCHED_WARPS, "iters": SCHED_ITERS}, "sched_pair"))
    ps.append(Probe("scheduler:order", "scheduler", {"warps": ORDER_WARPS}, "sched_order"))
    vs = QUICK_PIPES if quick else PIPE_VARIANTS
    for v in vs:
        ps.append(Probe(f"pipes:{v}", "pipes", {"parts": [v]}))
    for a, b in combinations(vs, 2):
        ps.append(Probe(f"pipes:{a}+{b}", "pipes", {"parts": [a, b]}))
    return ps


def select(probes: list[Probe], patterns: list[str] | None) -> list[Probe]:
    if not patterns:
        return probes
    out = []
    for p in probes:
        for pat in patterns:
            if (fnmatch.fnmatchcase(p.name, pat) or p.name.startswith(pat + ":") or p.kind == pat
                    or p.name == pat):
                out.append(p)
                break
    if not out:
        kinds = sorted({p.kind for p in probes})
        raise SuiteInputError(f"no behaviour probe matches {patterns} (kinds: {', '.join(kinds)}; "
                              "or names like 'occupancy:smem=*')")
    return out


def with_pipe_solos(probes: list[Probe]) -> list[Probe]:
    """Name the pipe kernels (``pipe_s<i>``: one per variant, ``pipe_p<i>``: one per pair) and
    add the solo probe of every variant of a selected pair (the comparison needs it)."""
    pipes = [p for p in probes if p.kind == "pipes"]
    needed = sorted({v for p in pipes for v in p.params["parts"]})
    solo = {v: f"pipe_s{i}" for i, v in enumerate(needed)}
    tag = len(needed)
    for p in pipes:
        if len(p.params["parts"]) == 1:
            p.kernel = solo[p.params["parts"][0]]
        else:
            p.kernel = f"pipe_p{tag}"
            tag += 1
    names = {p.name for p in probes}
    return probes + [Probe(f"pipes:{v}", "pipes", {"parts": [v]}, solo[v]) for v in needed
                     if f"pipes:{v}" not in names]


def probe_kernel(p: Probe, header: str, cat: Catalog) -> Kernel:
    """The kernel ``p`` launches, under the module ``header``."""
    if p.kind in ("dispatch", "occupancy"):
        return resid_kernel(header, p.params["live"])
    if p.kind == "scheduler":
        return sched_pair_kernel(header) if p.kernel == "sched_pair" else sched_order_kernel(header)
    return pipe_kernel(header, p.kernel.removeprefix("pipe_"),
                       [(cat.get(v), PIPE_CHAINS) for v in p.params["parts"]])


def main_op(built: Built | Exception) -> str:
    """The SASS opcode of a variant's solo pipe kernel (the variant's 16 per iteration dominate
    its timed loop)."""
    ops = Counter(i.opcode for i in built.region) if isinstance(built, Built) else Counter()
    return ops.most_common(1)[0][0] if ops else "?"


# ----------------------------------------------------------------- running
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
    t = _resid_launch(dev, built, q["grid"], q["threads"], q["smem"], SPIN_DISPATCH, seed=1)
    bad = _trace_ok(t)
    regs = built.regs
    pred = an.predict_blocks(q["threads"], regs, q["smem"], rules)
    if bad:
        return Result(p.name, "dispatch", None, "blocks/SM", "-", params={**q, "regs": regs}, flags=[f"error: {bad}"])
    res = an.residency(t["smid"], t["c0"], t["c1"])
    nsmid = int(np.max(t["nsmid"]))
    d = an.dispatch(t["lin"], t["smid"], t["g0"], t["g1"], nsmid)
    g00 = int(t["g0"].min())
    samples = {"lin": t["lin"].tolist(), "smid": t["smid"].tolist(),
               "g0_ns": (t["g0"].astype(np.int64) - g00).tolist(),
               "g1_ns": (t["g1"].astype(np.int64) - g00).tolist(),
               "c_cycles": (t["c1"].astype(np.int64) - t["c0"].astype(np.int64)).tolist(),
               "gpu_ms": t["gpu_ms"]}
    fit = {"dispatch": d, "residency": {k: v for k, v in res.items() if k != "per_sm"},
           "predicted": pred, "nsmid": nsmid, "sms_reported": nsm}
    return Result(p.name, "dispatch", float(res["mode"]), "blocks/SM",
                  "max blocks open at once on an SM (per-SM clock64), mode over SMs",
                  params={**q, "regs": regs}, fit=fit, samples=samples, cls="behaviour")


def run_occupancy(dev: Device, p: Probe, built: Built, nsm: int, rules: dict) -> Result:
    q = p.params
    regs = built.regs
    pred = an.predict_blocks(q["threads"], regs, q["smem"], rules)
    per_sm_max = min(rules["max_blocks_per_sm"], rules["max_threads_per_sm"] // q["threads"])
    grid = [nsm * max(per_sm_max, 1) * 2, 1]
    params = {**q, "regs": regs, "grid": grid, "warps_per_block": -(-q["threads"] // 32)}
    try:
        t = _resid_launch(dev, built, grid, q["threads"], q["smem"], SPIN_OCC, seed=2)
    except Exception as e:  # a launch the rules forbid fails: that is a measurement too
        return Result(p.name, "occupancy", 0.0 if pred["blocks"] == 0 else None, "blocks/SM",
                      "launch failed", params=params, fit={"predicted": pred},
                      flags=[f"error: launch failed: {e}"], cls="behaviour")
    bad = _trace_ok(t)
    if bad:
        return Result(p.name, "occupancy", None, "blocks/SM", "-", params=params,
                      fit={"predicted": pred}, flags=[f"error: {bad}"], cls="behaviour")
    res = an.residency(t["smid"], t["c0"], t["c1"])
    flags = []
    if res["max"] != pred["blocks"]:
        flags.append(f"disagrees: measured {res['max']} blocks/SM, rules predict {pred['blocks']}")
    if res["min"] != res["max"]:
        flags.append(f"uneven: {res['min']}..{res['max']} blocks/SM across SMs")
    fit = {"predicted": pred, "measured": {k: v for k, v in res.items() if k != "per_sm"},
           "measured_warps": res["max"] * params["warps_per_block"]}
    samples = {"per_sm_max": [res["per_sm"][s] for s in sorted(res["per_sm"])], "gpu_ms": t["gpu_ms"]}
    return Result(p.name, "occupancy", float(res["max"]), "blocks/SM",
                  "max blocks open at once on an SM (per-SM clock64), max over SMs",
                  params=params, fit=fit, samples=samples, flags=flags, cls="behaviour")


def run_sched_pairs(dev: Device, p: Probe, built: Built, reps: int = 3) -> Result:
    W, iters = p.params["warps"], p.params["iters"]

    def once(mask: int) -> dict[int, int]:
        ts = []
        for _ in range(reps):
            r = dev.launch(built.cubin, built.name, 1, W * 32,
                           [Buf("srec", nbytes=W * 32, read=True, dtype="u8", zero=True),
                            np.uint32(mask), np.uint32(iters)])
            rec = r.outputs["srec"].reshape(-1, 4)[:W]
            ts.append({w: int(rec[w, 1]) - int(rec[w, 0]) for w in range(W) if mask >> w & 1})
        return {w: int(np.median([t[w] for t in ts])) for w in ts[0]}

    solo = {w: once(1 << w)[w] for w in range(W)}
    pair_t, slow = {}, {}
    for a, b in combinations(range(W), 2):
        t = once((1 << a) | (1 << b))
        pair_t[f"{a},{b}"] = [t[a], t[b]]
        slow[(a, b)] = max(t[a] / solo[a], t[b] / solo[b])
    g = an.scheduler_groups(W, slow)
    ffma = sum(1 for i in built.region if i.opcode == "FFMA")
    fit = {"groups": g, "solo_cycles": solo, "ffma_in_loop": ffma,
           "solo_ffma_per_clk": round(ffma * iters / float(np.median(list(solo.values()))), 3)}
    return Result(p.name, "scheduler", float(g["schedulers"]), "schedulers",
                  "groups of warps that slow each other (pair/solo >= "
                  f"{an.SLOWDOWN}), median of {reps} launches",
                  params=p.params, fit=fit,
                  samples={"solo": solo, "pairs": pair_t,
                           "slowdown": {f"{a},{b}": round(s, 4) for (a, b), s in slow.items()}},
                  flags=[] if ffma else ["sass: no FFMA in the timed loop"], cls="behaviour")


def run_sched_order(dev: Device, p: Probe, built: Built, groups: list[list[int]] | None) -> Result:
    W = p.params["warps"]
    r = dev.launch(built.cubin, built.name, 1, W * 32,
                   [Buf("orec", nbytes=W * (SEGMENTS + 1) * 8, read=True, dtype="u8", zero=True)])
    rec = r.outputs["orec"].reshape(-1, SEGMENTS + 1)[:W]
    stamps = rec[:, :SEGMENTS].astype(np.int64)
    flags = []
    if groups is None:
        groups = [list(range(W))]
        flags.append("groups: no scheduler:pairs result in this run; all warps taken as one group")
    else:  # extend the measured grouping rule (over SCHED_WARPS) to ORDER_WARPS by period
        n0 = sum(len(g) for g in groups)
        ext: list[list[int]] = []
        for g in groups:
            ext.append(sorted(w for w in range(W) if (w % n0) in g))
        groups = ext
    o = an.issue_order(stamps, groups)
    base = int(stamps.min())
    return Result(p.name, "scheduler", o["span_overlap_median"] if "span_overlap_median" in o else None,
                  "span overlap", "median pairwise overlap of the active spans of warps sharing a scheduler",
                  params={**p.params, "segments": SEGMENTS}, fit=o,
                  samples={"stamps": (stamps - base).tolist(), "warpid": rec[:, SEGMENTS].tolist()},
                  flags=flags, cls="behaviour")


def run_pipe(dev: Device, p: Probe, built: Built, main_ops: dict[str, str], reps: int = 3) -> Result:
    W = PIPE_WARPS
    ins = np.array(built.kernel.inputs or [0], dtype=np.uint64)
    spans = []
    for _ in range(reps):
        r = dev.launch(built.cubin, built.name, 1, W * 32,
                       [Buf("pin", data=ins), Buf("pout", nbytes=W * 32 * 8 * max(built.kernel.n_sink, 1)),
                        Buf("prec", nbytes=W * 24, read=True, dtype="u8", zero=True),
                        np.uint32(PIPE_ITERS)])
        rec = r.outputs["prec"].reshape(-1, 3)[:W].astype(np.int64)
        spans.append(int(rec[:, 1].max() - rec[:, 0].min()))
    cyc = float(np.median(spans))
    region = built.region
    comp = Counter(i.full for i in region)
    ops = Counter(i.opcode for i in region)
    # the loop's instructions (a constant load ptxas hoists before the loop label is not)
    issued = sum(1 for i in region if i.opcode != "LDC") * PIPE_ITERS * W
    flags = []
    per_variant = {}
    for v in p.params["parts"]:
        op = main_ops.get(v)
        n = ops.get(op, 0) if op else 0
        if not n:
            flags.append(f"sass: no {op or '?'} for {v} in the timed loop")
        per_variant[v] = {"sass_op": op, "per_iter": n,
                          "warp_instr_per_clk_sm": round(n * PIPE_ITERS * W / cyc, 4) if n else None}
    return Result(p.name, "pipes", cyc, "cycles", f"median over {reps} launches of the block's span "
                  "(min start to max end clock64)", params={**p.params, "warps": W, "iters": PIPE_ITERS,
                                                            "chains": PIPE_CHAINS},
                  fit={"issued_warp_instr": issued, "sass_per_iter": dict(comp),
                       "per_variant": per_variant, "issue_per_clk_sm": round(issued / cyc, 4)},
                  samples={"spans": spans}, flags=flags, cls="behaviour")


# ----------------------------------------------------------------- the suite
def pair_groups(ctx: Context) -> list[list[int]] | None:
    """The scheduler groups found by this run's scheduler:pairs probe (it runs first)."""
    r = next((r for r in ctx.store.results(ctx.run_id) if r["variant"] == "scheduler:pairs" and r["fit"]),
             None)
    return r["fit"]["groups"]["groups"] if r else None


class BehaviourSuite(SuiteBase):
    name = "behaviour"
    description = "block dispatch and residency, occupancy, warp scheduling and pipes, by experiment"

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        select(all_probes(1, quick=False), patterns)

    def plan(self, ctx: Context, patterns: list[str] | None) -> Plan:
        probes = select(all_probes(ctx.sm_count, ctx.quick), patterns)
        params = {"probes": [p.name for p in probes], "quick": ctx.quick}
        probes = with_pipe_solos(probes)
        ctx.state["rules"] = an.occupancy_rules(ctx.target)
        ctx.state["probes"] = {p.name: p for p in probes}
        items = [Item(p.name, p) for p in sorted(probes, key=lambda p: p.name != "scheduler:pairs")]
        return Plan(items, params)

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        """Build the kernels of ``items`` (one module per probe kind), and the solo pipe kernel
        of each variant they time: its main SASS opcode is what a pair's verdict counts."""
        probes: list[Probe] = [i.data for i in items]
        variants = sorted({v for p in probes if p.kind == "pipes" for v in p.params["parts"]})
        solos = [ctx.state["probes"][f"pipes:{v}"] for v in variants]
        header = ptx_header(ctx.target.ptx_isa, ctx.target.arch)
        cat = load_catalog()
        modules: dict[str, dict[str, Kernel]] = {}
        for p in [*probes, *solos]:
            ks = modules.setdefault(MODULE[p.kind], {})
            if p.kernel not in ks:
                ks[p.kernel] = probe_kernel(p, header, cat)
        built: dict[str, Built | Exception] = {}
        for mod, ks in modules.items():
            built.update(build_module(list(ks.values()), ctx.target.arch, region=mod != "resid"))
        ctx.state["built"] = built
        ctx.state["main_ops"] = {v: main_op(built[s.kernel]) for v, s in zip(variants, solos, strict=True)}

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        p: Probe = item.data
        built = ctx.state["built"][p.kernel]
        if isinstance(built, Exception):
            raise built
        if p.kind == "dispatch":
            r = run_dispatch(ctx.dev, p, built, ctx.sm_count, ctx.state["rules"])
        elif p.kind == "occupancy":
            r = run_occupancy(ctx.dev, p, built, ctx.sm_count, ctx.state["rules"])
        elif p.name == "scheduler:pairs":
            r = run_sched_pairs(ctx.dev, p, built)
        elif p.name == "scheduler:order":
            r = run_sched_order(ctx.dev, p, built, pair_groups(ctx))
        else:
            r = run_pipe(ctx.dev, p, built, ctx.state["main_ops"])
        r.ptx_hash, r.sass_hash = built.ptx_hash, built.sass_hash
        return Outcome([r], built.texts())

    def error_results(self, item: Item, flag: str) -> list[Result]:
        p: Probe = item.data
        return [Result(p.name, p.kind, None, "-", "-", params=p.params, flags=[flag], cls="behaviour")]

    def summarize(self, ctx: Context) -> dict:
        return an.summarize(ctx.store, ctx.run_id)


SUITE = BehaviourSuite()
