"""The behaviour suite (issue 6): undisclosed behaviour, found by experiment.

Probes (each a named, selectable, resumable store item; patterns are globs on the names):

* ``dispatch:<config>``: block -> SM assignment for grids of several sizes/shapes and
  occupancy limits (per-block %smid, %globaltimer and %clock64 at start and end);
* ``occupancy:<axis>=<value>``: blocks resident per SM at once vs registers per thread,
  shared memory per block and block size, against the CUDA occupancy rules
  (``data/occupancy_sm90.toml``);
* ``scheduler:pairs`` / ``scheduler:order``: which warps share a scheduler (slowdown of warp
  pairs running FFMA streams together) and the order a scheduler picks ready warps;
* ``pipes:<a>[+<b>]``: catalog variants alone and in pairs; throughputs that add vs compete
  give the pipe groups and the issue limit per scheduler.

Conclusions, with the numbers behind them: ``store.get_meta(f"summary:{run_id}")``.
"""

from __future__ import annotations

import fnmatch
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from gpudissect import __version__
from gpudissect.catalog.model import load_catalog
from gpudissect.kernel.region import find_region
from gpudissect.kernel.sass import parse_sass
from gpudissect.kernel.toolchain import (
    compile_ptx,
    disassemble,
    resource_usage,
    sha256,
    tool_version,
)
from gpudissect.store.db import Result, Store
from gpudissect.suites.behaviour import analyse as an
from gpudissect.suites.behaviour.kernels import (
    REC_WORDS,
    SEGMENTS,
    ProbeKernel,
    pipe_kernel,
    probe_module,
    resid_kernel,
    sched_order_kernel,
    sched_pair_kernel,
)
from gpudissect.suites.instructions.template import ptx_isa_for

SUITE = "behaviour"
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


@dataclass
class Probe:
    name: str
    kind: str  # dispatch | occupancy | scheduler | pipes
    params: dict = field(default_factory=dict)


def plan(nsm: int, quick: bool) -> list[Probe]:
    ps: list[Probe] = []
    ps.append(Probe("dispatch:1d-1perSM", "dispatch", {"grid": [3 * nsm + nsm // 2, 1], "threads": 128,
                                                        "smem": 200 * 1024, "live": 0}))
    ps.append(Probe("dispatch:1d-free", "dispatch", {"grid": [nsm * 16, 1], "threads": 256, "smem": 0,
                                                     "live": 0}))
    ps.append(Probe("dispatch:2d", "dispatch", {"grid": [16, max(1, nsm // 4)], "threads": 128,
                                                "smem": 100 * 1024, "live": 0}))
    ps.append(Probe("dispatch:small", "dispatch", {"grid": [max(1, nsm // 2), 1], "threads": 128,
                                                   "smem": 0, "live": 0}))
    ps.append(Probe("dispatch:regs", "dispatch", {"grid": [4 * nsm, 1], "threads": 128, "smem": 0,
                                                  "live": 180}))
    live = LIVE[::3] if quick else LIVE
    smem = SMEM_KIB[::3] if quick else SMEM_KIB
    thr = THREADS[::2] if quick else THREADS
    for n in live:
        ps.append(Probe(f"occupancy:live={n}", "occupancy", {"threads": 128, "smem": 0, "live": n}))
    for k in smem:
        ps.append(Probe(f"occupancy:smem={k}KiB", "occupancy", {"threads": 128, "smem": k * 1024, "live": 0}))
    for t in thr:
        ps.append(Probe(f"occupancy:threads={t}", "occupancy", {"threads": t, "smem": 0, "live": 0}))
    ps.append(Probe("scheduler:pairs", "scheduler", {"warps": SCHED_WARPS, "iters": SCHED_ITERS}))
    ps.append(Probe("scheduler:order", "scheduler", {"warps": ORDER_WARPS}))
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
        raise ValueError(f"no behaviour probe matches {patterns} (kinds: {', '.join(kinds)}; "
                         "or names like 'occupancy:smem=*')")
    return out


# ----------------------------------------------------------------- building
@dataclass
class Module:
    cubin: bytes
    ptx: str
    sass: str
    regs: dict[str, int]
    regions: dict[str, list]  # kernel -> SASS instructions between the clock reads


def build(kernels: list[ProbeKernel], arch: str) -> Module:
    ptx = probe_module(kernels, arch, ptx_isa_for(tool_version("ptxas")))
    cub = compile_ptx(ptx, arch=arch, opt=3).cubin
    text = disassemble(cub)
    funcs = parse_sass(text)
    regions = {}
    for k in kernels:
        f = funcs.get(k.name)
        if f is None:
            continue
        try:
            regions[k.name] = find_region(f.instrs)
        except Exception:
            regions[k.name] = []
    regs = {k: v.get("REG", 0) for k, v in resource_usage(cub).items()}
    return Module(cub, ptx, text, regs, regions)


def _texts(m: Module) -> dict[str, tuple[str, str]]:
    return {sha256(m.ptx): ("ptx", m.ptx), sha256(m.sass): ("sass", m.sass)}


# ----------------------------------------------------------------- running
def _spins(n: int, rng_range: tuple[int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(rng_range[0], rng_range[1], size=n, dtype=np.uint32)


def _resid_launch(dev, m: Module, live: int, grid: list[int], threads: int, smem: int,
                  spin_range: tuple[int, int], seed: int) -> dict:
    from gpudissect.device.device import Buf

    n = grid[0] * grid[1]
    spins = _spins(n, spin_range, seed)
    vals = (np.arange(4096, dtype=np.uint32) * 2654435761 + 12345).astype(np.uint32)
    run = dev.launch(m.cubin, f"resid_r{live}", (grid[0], grid[1], 1), threads,
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


def run_dispatch(dev, p: Probe, m: Module, nsm: int, rules: dict) -> Result:
    q = p.params
    t = _resid_launch(dev, m, q["live"], q["grid"], q["threads"], q["smem"], SPIN_DISPATCH, seed=1)
    bad = _trace_ok(t)
    regs = m.regs.get(f"resid_r{q['live']}", 0)
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


def run_occupancy(dev, p: Probe, m: Module, nsm: int, rules: dict) -> Result:
    q = p.params
    kname = f"resid_r{q['live']}"
    regs = m.regs.get(kname, 0)
    pred = an.predict_blocks(q["threads"], regs, q["smem"], rules)
    per_sm_max = min(rules["max_blocks_per_sm"], rules["max_threads_per_sm"] // q["threads"])
    grid = [nsm * max(per_sm_max, 1) * 2, 1]
    params = {**q, "regs": regs, "grid": grid, "warps_per_block": -(-q["threads"] // 32)}
    try:
        t = _resid_launch(dev, m, q["live"], grid, q["threads"], q["smem"], SPIN_OCC, seed=2)
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


def run_sched_pairs(dev, p: Probe, m: Module, reps: int = 3) -> Result:
    from gpudissect.device.device import Buf

    W, iters = p.params["warps"], p.params["iters"]

    def once(mask: int) -> dict[int, int]:
        ts = []
        for _ in range(reps):
            r = dev.launch(m.cubin, "sched_pair", 1, W * 32,
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
    region = m.regions.get("sched_pair", [])
    ffma = sum(1 for i in region if i.opcode == "FFMA")
    fit = {"groups": g, "solo_cycles": solo, "ffma_in_loop": ffma,
           "solo_ffma_per_clk": round(ffma * iters / float(np.median(list(solo.values()))), 3)}
    return Result(p.name, "scheduler", float(g["schedulers"]), "schedulers",
                  "groups of warps that slow each other (pair/solo >= "
                  f"{an.SLOWDOWN}), median of {reps} launches",
                  params=p.params, fit=fit,
                  samples={"solo": solo, "pairs": pair_t,
                           "slowdown": {f"{a},{b}": round(s, 4) for (a, b), s in slow.items()}},
                  flags=[] if ffma else ["sass: no FFMA in the timed loop"], cls="behaviour")


def run_sched_order(dev, p: Probe, m: Module, groups: list[list[int]] | None) -> Result:
    from gpudissect.device.device import Buf

    W = p.params["warps"]
    r = dev.launch(m.cubin, "sched_order", 1, W * 32,
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


def run_pipe(dev, p: Probe, m: Module, kname: str, kern: ProbeKernel, main_ops: dict[str, str],
             reps: int = 3) -> Result:
    from gpudissect.device.device import Buf

    W = PIPE_WARPS
    ins = np.array(kern.inputs or [0], dtype=np.uint64)
    spans = []
    for _ in range(reps):
        r = dev.launch(m.cubin, kname, 1, W * 32,
                       [Buf("pin", data=ins), Buf("pout", nbytes=W * 32 * 8 * max(kern.n_sink, 1)),
                        Buf("prec", nbytes=W * 24, read=True, dtype="u8", zero=True),
                        np.uint32(PIPE_ITERS)])
        rec = r.outputs["prec"].reshape(-1, 3)[:W].astype(np.int64)
        spans.append(int(rec[:, 1].max() - rec[:, 0].min()))
    cyc = float(np.median(spans))
    region = m.regions.get(kname, [])
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


# ----------------------------------------------------------------- summary
def summarize(store: Store, run_id: int) -> dict:
    rs = store.results(run_id)
    out: dict = {"conclusions": [], "dispatch": {}, "scheduler": {}, "pipes": {}, "occupancy": {}}
    C = out["conclusions"]
    disp = [r for r in rs if r["measure"] == "dispatch" and r["value"] is not None]
    for r in disp:  # the analysis runs again on the stored raw traces
        sm = r["samples"]
        d = r["fit"]["dispatch"] = an.dispatch(np.array(sm["lin"]), np.array(sm["smid"]),
                                               np.array(sm["g0_ns"]), np.array(sm["g1_ns"]),
                                               r["fit"]["nsmid"])
        out["dispatch"][r["variant"]] = {**d, "blocks_per_sm": r["value"],
                                         "predicted_blocks_per_sm": r["fit"]["predicted"]["blocks"],
                                         "params": r["params"]}
    if disp:
        main = next((r for r in disp if r["variant"] == "dispatch:1d-1perSM"), disp[0])
        d = main["fit"]["dispatch"]
        C.append(f"dispatch ({main['variant']}, {d['blocks']} blocks): {d['policy']}; first SMs in block "
                 f"order {d['first_sms'][:24]}...; consecutive blocks on one TPC (smid//2) "
                 f"{100 * d['consecutive_same_tpc']:.0f}%; step between consecutive TPCs visited: "
                 f"{d['tpc_steps_top']} (step in TPCs: count)")
        for r in disp:
            d = r["fit"]["dispatch"]
            refill = ("" if d["refill_gap_ns_median"] is None else
                      f"; a freed slot is refilled after {d['refill_gap_ns_median']:.0f} ns median "
                      f"(p90 {d['refill_gap_ns_p90']:.0f}), blocks take freed slots in the order they "
                      f"were freed in {100 * d['refill_fifo_agreement']:.0f}% of consecutive blocks")
            grid_cap = -(-d["blocks"] // r["fit"]["sms_reported"])
            pred = r["fit"]["predicted"]["blocks"]
            capped = (f"; the grid ({d['blocks']} blocks) allows at most {grid_cap} per SM: blocks on "
                      f"{100 * d['distinct_tpc_share_first_half']:.0f}% distinct TPCs among the first "
                      "half-SM-count blocks, SMs used " + str(sorted(set(r["samples"]["smid"]))))\
                if grid_cap < pred else ""
            C.append(f"{r['variant']}: {int(r['value'])} blocks/SM at once (rules: "
                     f"{pred}{capped}), blocks start in id order: "
                     f"{'yes' if d['in_order'] else 'no'} ({100 * d['start_inversions']:.1f}% inversions, "
                     f"timer step {d['timer_resolution_ns']} ns){refill}")
    occ = [r for r in rs if r["measure"] == "occupancy"]
    dis = []
    for r in occ:
        q = r["params"]
        pred = (r["fit"] or {}).get("predicted", {})
        row = {"threads": q["threads"], "regs": q["regs"], "smem": q["smem"],
               "measured_blocks": r["value"], "predicted_blocks": pred.get("blocks"),
               "measured_warps": None if r["value"] is None else r["value"] * q["warps_per_block"],
               "predicted_warps": pred.get("warps"), "limiters": pred.get("limiters"),
               "flags": r["flags"]}
        out["occupancy"][r["variant"]] = row
        if r["value"] is not None and r["value"] != pred.get("blocks"):
            dis.append(f"{r['variant']} (regs {q['regs']}, smem {q['smem']} B, {q['threads']} threads): "
                       f"measured {int(r['value'])} blocks/SM, rules {pred.get('blocks')}")
    if occ:
        ok = sum(1 for r in occ if r["value"] is not None and r["value"] == r["fit"]["predicted"]["blocks"])
        C.append(f"occupancy: {ok}/{len(occ)} configurations match the CUDA occupancy rules"
                 + ("" if not dis else "; disagreements: " + "; ".join(dis)))
    pairs = next((r for r in rs if r["variant"] == "scheduler:pairs" and r["fit"]), None)
    if pairs:
        g = pairs["fit"]["groups"]
        out["scheduler"]["pairs"] = g
        C.append(f"schedulers: {g['schedulers']} groups of warps that slow each other "
                 f"({g['rule'] or 'no simple rule'}); groups {g['groups']}; pair slowdown "
                 f"{g['slowdown_competing']} (same group) vs {g['slowdown_other']} (different); one warp "
                 f"alone issues {pairs['fit']['solo_ffma_per_clk']} FFMA/clk")
    order = next((r for r in rs if r["variant"] == "scheduler:order" and r["fit"]), None)
    if order:  # the analysis runs again on the stored stamps, with the groups it used
        o = order["fit"] = an.issue_order(np.array(order["samples"]["stamps"]),
                                          [g["warps"] for g in order["fit"]["groups"]])
        out["scheduler"]["order"] = {k: v for k, v in o.items() if k != "groups"}
        C.append(f"warp issue order: {o['policy']} (span overlap {o.get('span_overlap_median')}, mean run "
                 f"of consecutive stamps by one warp {o.get('mean_run_median')} of {SEGMENTS}, finish "
                 f"order tau {o.get('finish_order_tau')}); %warpid of warps 0..: "
                 f"{order['samples']['warpid']}")
    pipes = [r for r in rs if r["measure"] == "pipes" and r["value"] is not None
             and not any(f.startswith(("sass:", "error:")) for f in r["flags"])]
    solo = {r["params"]["parts"][0]: {"cycles": r["value"], "issued": r["fit"]["issued_warp_instr"]}
            for r in pipes if len(r["params"]["parts"]) == 1}
    pr = {tuple(r["params"]["parts"]): {"cycles": r["value"], "issued": r["fit"]["issued_warp_instr"]}
          for r in pipes if len(r["params"]["parts"]) == 2
          and all(v in solo for v in r["params"]["parts"])}
    if solo:
        pp = an.pipe_pairs(solo, pr)
        rates = {r["params"]["parts"][0]: r["fit"]["per_variant"][r["params"]["parts"][0]]
                 for r in pipes if len(r["params"]["parts"]) == 1}
        out["pipes"] = {**pp, "solo": rates}
        C.append(f"pipes: groups that compete {pp['groups']}; issue limit "
                 f"{pp['issue_limit_per_scheduler']} warp-instr/clk per scheduler (max observed, all SASS "
                 "of the loop, 4 schedulers); " + ", ".join(
                     f"{k}: {v['verdict']} ({v['share']})" for k, v in pp["pairs"].items()))
    return out


# ----------------------------------------------------------------- entry point
def run_suite(dev, store: Store, patterns: list[str] | None, *, arch: str, quick: bool = False,
              resume: bool = True, jobs: int = 1, progress=None) -> tuple[int, dict]:
    nsm = dev.info.sm_count
    probes = select(plan(nsm, quick), patterns)
    rules = an.occupancy_rules(arch)
    toolkit = f"ptxas {tool_version('ptxas')}"
    run_id = store.unfinished_run(SUITE, dev.info.uuid) if resume else None
    if run_id is None:
        run_id = store.start_run(SUITE, dev.info, toolkit, arch, dev.clocks(),
                                 {"probes": [p.name for p in probes], "quick": quick}, __version__)
    done = store.done_items(run_id)
    timing = {"compile_s": 0.0, "gpu_s": 0.0}
    t = time.perf_counter()
    cat = load_catalog()
    lives = sorted({p.params["live"] for p in probes if p.kind in ("dispatch", "occupancy")})
    resid = build([resid_kernel(n) for n in lives], arch) if lives else None
    sched = build([sched_pair_kernel(), sched_order_kernel()], arch) if any(
        p.kind == "scheduler" for p in probes) else None
    pipe_probes = [p for p in probes if p.kind == "pipes"]
    pk: dict[str, tuple[str, ProbeKernel]] = {}
    pipes_mod = None
    main_ops: dict[str, str] = {}
    if pipe_probes:
        needed = sorted({v for p in pipe_probes for v in p.params["parts"]})
        for v in needed:  # a pair needs its solos, for the comparison
            pk[v] = (f"pipe_s{len(pk)}", pipe_kernel(f"s{len(pk)}", [(cat.get(v), PIPE_CHAINS)]))
        for p in pipe_probes:
            if len(p.params["parts"]) == 2:
                tag = f"p{len(pk)}"
                pk[p.name] = (f"pipe_{tag}", pipe_kernel(tag, [(cat.get(v), PIPE_CHAINS)
                                                              for v in p.params["parts"]]))
        pipes_mod = build([k for _n, k in pk.values()], arch)
        for v in needed:
            region = pipes_mod.regions.get(pk[v][0], [])
            ops = Counter(i.opcode for i in region)  # the variant's 16 per iteration dominate
            main_ops[v] = ops.most_common(1)[0][0] if ops else "?"
        # solos of pairs run too (the comparison needs them)
        names = {p.name for p in probes}
        for v in needed:
            if f"pipes:{v}" not in names:
                probes.append(Probe(f"pipes:{v}", "pipes", {"parts": [v]}))
    timing["compile_s"] = time.perf_counter() - t
    t = time.perf_counter()
    total = len(probes)
    groups = None
    prev = next((r for r in store.results(run_id) if r["variant"] == "scheduler:pairs" and r["fit"]), None)
    if prev:
        groups = prev["fit"]["groups"]["groups"]
    for i, p in enumerate(sorted(probes, key=lambda p: p.name != "scheduler:pairs")):
        if progress:
            progress(p.name, i, total)
        if p.name in done:
            continue
        mod = {"dispatch": resid, "occupancy": resid, "scheduler": sched, "pipes": pipes_mod}[p.kind]
        try:
            if p.kind == "dispatch":
                r = run_dispatch(dev, p, mod, nsm, rules)
            elif p.kind == "occupancy":
                r = run_occupancy(dev, p, mod, nsm, rules)
            elif p.name == "scheduler:pairs":
                r = run_sched_pairs(dev, p, mod)
                groups = r.fit["groups"]["groups"] if r.fit else None
            elif p.name == "scheduler:order":
                r = run_sched_order(dev, p, mod, groups)
            else:
                key = p.params["parts"][0] if len(p.params["parts"]) == 1 else p.name
                kname, kern = pk[key]
                r = run_pipe(dev, p, mod, kname, kern, main_ops)
        except Exception as e:  # one probe never takes the suite down
            r = Result(p.name, p.kind, None, "-", "-", params=p.params,
                       flags=[f"error: {type(e).__name__}: {e}"], cls="behaviour")
        if mod is not None:
            r.ptx_hash, r.sass_hash = sha256(mod.ptx), sha256(mod.sass)
        store.save(run_id, p.name, [r], _texts(mod) if mod is not None else None)
    timing["gpu_s"] = time.perf_counter() - t
    if progress:
        progress("summary", total, total)
    store.set_meta(f"summary:{run_id}", summarize(store, run_id))
    store.finish_run(run_id, dev.clocks(), timing)
    return run_id, timing
