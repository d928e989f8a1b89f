"""The sync suite: atomics under contention, barriers, fences and launch costs.

Items (each a named, selectable, resumable store item; patterns are globs on the names, or a
kind: ``atomic``, ``latency``, ``barrier``, ``fence``, ``launch``):

* ``atomic:<space>:<op>:<mode>``: throughput of ``op`` (kernels.OPS) with the contention
  ``mode`` (kernels.GLOBAL_MODES / SHARED_MODES), one block per SM on every SM, swept over
  warps per SM (``WARPS``) until the rate stops rising: lane operations per clock per SM from
  the slope between two region lengths (median over SM and repetition), chip-wide = that x
  the SMs, for each of ``LAUNCHES`` launches;
* ``latency:<space>:<op>``: one warp, a dependent chain (uncontended: each lane its own word);
* ``barrier:<kind>``: cycles per barrier (kernels.BARRIERS) from a chain's slope, per warps
  per block (all SMs run one block);
* ``fence:<kind>``: cycles per fence, alone and after a store of its own, at 1 and 32 warps;
* ``launch:grid=<n>``: an empty kernel of n blocks: launch latency (a launch and its
  synchronisation: host wall and CUDA events), back-to-back launches and a CUDA graph replay
  (per launch); ``launch:pdl``: pairs of a spinning primary and a secondary that waits on it
  with programmatic dependent launch vs plain stream order.

Every point is the median of ``LAUNCHES`` launches, flagged ``noisy`` when they disagree
(``bench.stats.noise_flag``). Every kernel's timed region is checked against
the architecture's ``sync_sass.toml``; a region that differs is measured and flagged ``sass:``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpudissect.bench.contract import (
    Context,
    Item,
    Outcome,
    Plan,
    Redo,
    SuiteBase,
    select_named,
)
from gpudissect.device.args import Buf
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module, take
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.sync import analyse as an
from gpudissect.suites.sync import branches as B
from gpudissect.suites.sync import kernels as K

LAUNCHES = 3
WARPS = (4, 8, 16, 32)  # warps per SM of the atomic sweeps (one block per SM)
QUICK_WARPS = (8, 32)
ATOM_LENGTHS = (64, 192)  # atomics per thread at the two region lengths
LAT_LENGTHS = (32, 96)
BAR_LENGTHS = (32, 128)
FENCE_LENGTHS = (16, 64)
BAR_WARPS = (1, 2, 4, 8, 16, 32)
PC_WARPS = (2, 4, 8, 16, 32)  # producer/consumer: half of each
FENCE_WARPS = (1, 32)
LAUNCH_BLOCK = 128
LAT_LAUNCHES = 30  # launches timed one by one (each synchronised)
SERIES = 200  # launches in a back-to-back series / graph
PDL_PAIRS = 50
CLS = "sync"


@dataclass
class Probe:
    name: str
    kind: str  # atomic | latency | barrier | fence | launch
    params: dict = field(default_factory=dict)
    kernels: list[str] = field(default_factory=list)


def all_probes(nsm: int, quick: bool) -> list[Probe]:
    """Every item, in run order: the short ones first (latency, barriers, fences, launches),
    then the atomic sweeps (shared, then global)."""
    ps: list[Probe] = []
    for space, ops in (("global", K.LAT_GLOBAL), ("shared", K.LAT_SHARED)):
        for op in ops:
            ops = [op, K.PLACEMENT_OP] if space == "global" else [op]  # global: with the placement probe
            ps.append(Probe(f"latency:{space}:{op}", "latency", {"space": space, "op": op},
                            [K.lat_name(space, o, n) for o in ops for n in LAT_LENGTHS]))
    for kind in K.BARRIERS:
        ps.append(Probe(f"barrier:{kind}", "barrier", {"kind": kind}, [K.bar_name(kind, n) for n in BAR_LENGTHS]))
    for kind in K.FENCES:
        ps.append(Probe(f"fence:{kind}", "fence", {"kind": kind},
                        [K.fence_name(kind, st, n) for st in (False, True) for n in FENCE_LENGTHS]))
    ps.append(Probe("branch:cost", "branch", {}, B.kernel_names()))
    grids = (1, nsm, 16 * nsm) if quick else (1, nsm, 4 * nsm, 16 * nsm, 64 * nsm)
    for g in dict.fromkeys(grids):
        ps.append(Probe(f"launch:grid={g}", "launch", {"grid": g, "block": LAUNCH_BLOCK}, ["launch_empty"]))
    ps.append(Probe("launch:pdl", "launch", {"grid": nsm, "block": 32, "pairs": PDL_PAIRS, "spin": K.PDL_SPIN},
                    ["pdl_primary", "pdl_secondary"]))
    for space, ops, modes in (("shared", K.SHARED_OPS, K.SHARED_MODES), ("global", K.GLOBAL_OPS, K.GLOBAL_MODES)):
        for op in ops:
            for mode in modes:
                ps.append(Probe(f"atomic:{space}:{op}:{mode}", "atomic", {"space": space, "op": op, "mode": mode},
                                [K.atom_name(space, op, mode, n) for n in ATOM_LENGTHS]))
    return ps


KINDS = ("atomic", "latency", "barrier", "fence", "launch", "branch")


def select(probes: list[Probe], patterns: list[str] | None) -> list[Probe]:
    return select_named(probes, patterns, lambda p: p.name, lambda p, pat: p.kind == pat,
                        f"no sync item matches {patterns} (kinds: {', '.join(KINDS)}; or names like "
                        "'atomic:global:*:one')")


def probe_kernels(p: Probe, header: str) -> list[Kernel]:
    q = p.params
    if p.kind == "atomic":
        return [K.atom_kernel(header, q["space"], q["op"], q["mode"], n) for n in ATOM_LENGTHS]
    if p.kind == "latency":
        ops = [q["op"], K.PLACEMENT_OP] if q["space"] == "global" else [q["op"]]
        return [K.lat_kernel(header, q["space"], o, n) for o in ops for n in LAT_LENGTHS]
    if p.kind == "barrier":
        return [K.bar_kernel(header, q["kind"], n) for n in BAR_LENGTHS]
    if p.kind == "fence":
        return [K.fence_kernel(header, q["kind"], st, n) for st in (False, True) for n in FENCE_LENGTHS]
    if p.kind == "branch":
        return [B.branch_kernel(header, k) for k in (*B.KINDS, *B.BASELINES)]
    return [k for k in K.launch_kernels(header) if k.name in p.kernels]


def sass_flags(p: Probe, built: dict[str, Built], arch: str) -> list[str]:
    """``sass:`` flags for the probe's kernels whose timed region breaks the expectations (the
    launch kernels have no region: their griddepcontrol SASS must be there)."""
    out: list[str] = []
    if p.kind == "branch":  # branches.py checks its own regions (flags per result)
        return out
    for name in p.kernels:
        b = built[name]
        if p.kind == "launch":
            exp = an.expectations(arch).get("launch", {}).get(name)
            if exp and not any(an.full_op(i) == exp["main"] for i in b.instrs):
                out.append(f"sass: {name}: no {exp['main']}")
            continue
        if p.kind == "latency" and name.startswith(K.lat_name(p.params["space"], K.PLACEMENT_OP, 0)[:-2]):
            continue  # the placement probe's loads: their latency groups are the check
        table = {"atomic": "atom", "latency": "lat", "barrier": "bar", "fence": "fence"}[p.kind]
        key = f"{p.params['space']}:{p.params['op']}" if p.kind in ("atomic", "latency") else p.params["kind"]
        if p.params.get("mode") == "uniform" and f"{key}@uniform" in an.expectations(arch)[table]:
            key += "@uniform"
        out += [f"sass: {name}: {x}" for x in an.sass_problems(b.region, table, key, b.kernel.length, arch)]
    return out


# ----------------------------------------------------------------- launches of timed kernels
def _times(dev: Device, b: Built, grid: int, warps: int, args: list) -> np.ndarray:
    r = dev.launch(b.cubin, b.name, grid, warps * 32,
                   [*args, Buf("times", nbytes=grid * warps * K.ROW * 8, read=True, dtype="u8", zero=True)])
    return r.outputs["times"].reshape(-1, K.ROW)[: grid * warps].astype(np.int64)


def _atom_args(op: K.AtomOp, nsm: int, latency: bool) -> list:
    if op.cas or latency:
        vals = [0, 0]  # CAS: compare 0, swap in 0 (memory is zero: every CAS succeeds)
    elif op.ptx.endswith("f32"):
        vals = [0x3F800000, 0]
    elif op.ptx.endswith("f64"):
        vals = [0x3FF0000000000000, 0]
    else:
        vals = [1, 0]
    # in[2]: a zero the address arithmetic reads; in[3]: the grid rendezvous counter
    return [Buf("abuf", nbytes=nsm * 1024 * K.LINE + 4096, zero=True),
            Buf("ain", data=np.array([*vals, 0, 0], dtype=np.uint64))]


def run_atomic(dev: Device, p: Probe, bs: list[Built], nsm: int, quick: bool, flags: list[str]) -> Result:
    q = p.params
    op = K.OPS[q["op"]]
    args = _atom_args(op, nsm, latency=False)
    warps = QUICK_WARPS if quick else WARPS
    dlen = ATOM_LENGTHS[1] - ATOM_LENGTHS[0]
    sweep = {}
    for w in warps:
        per, chip = [], []
        for _ in range(LAUNCHES):
            t1, t2 = (_times(dev, b, nsm, w, args) for b in bs)
            per.append(an.per_sm_rate(t1, t2, w, K.REPS, w * 32 * dlen))
            chip.append(an.chip_rate(t1, t2, w, K.REPS, w * 32 * dlen))
        sms = max(d["sms"] for d in per)
        sm_med = an.combine([d["rate"] for d in per])
        if q["space"] == "global":  # the chip's rate: its slowest SM sets the pace
            c = an.combine([d["rate"] for d in chip])
            chip_v = c["value"]
            per_sm_v = None if chip_v is None else chip_v / sms
        else:  # shared atomics: each SM on its own
            c = sm_med
            per_sm_v = c["value"]
            chip_v = None if per_sm_v is None else per_sm_v * sms
        sweep[w] = {"per_sm": per_sm_v, "chip": chip_v, "sms": sms, "per_launch": c["per_launch"],
                    "noise": c["flag"], "sm_median_rate": sm_med["value"],
                    "fairness": [d["fairness"] for d in chip]}
    sat = an.saturation(list(sweep), [v["chip"] for v in sweep.values()])
    fl = list(flags)
    fl += [f"{v['noise']} at {w} warps/SM" for w, v in sweep.items() if v["noise"]]
    if not sat["saturated"]:
        fl.append(f"unsaturated: the rate still rose x{sat['rise']} from {warps[-2]} to {warps[-1]} warps/SM")
    best = sweep.get(sat["peak_warps"]) or {}
    space_desc = (K.GLOBAL_MODES if q["space"] == "global" else K.SHARED_MODES)[q["mode"]]
    return Result(p.name, "throughput", sat["peak"], "lane-ops/clk (chip)",
                  f"peak over warps/SM of the chip's rate from the slope between {ATOM_LENGTHS[0]} and "
                  f"{ATOM_LENGTHS[1]} atomics per thread (global: every SM released together, a repetition as "
                  f"long as its slowest SM, median over repetitions; shared: the median per-SM rate over SM x "
                  f"repetition x SMs), median of {LAUNCHES} launches",
                  params={**q, "mode_text": space_desc, "warps": list(warps), "lengths": list(ATOM_LENGTHS),
                          "launches": LAUNCHES, "blocks_per_sm": 1, "ptx": op.ptx.format(sp=q["space"])},
                  fit={**sat, "per_sm_at_peak": best.get("per_sm"), "sms": best.get("sms"),
                       "sweep": {str(w): v for w, v in sweep.items()}},
                  flags=fl, cls=CLS)


PLACE_LINES = 16  # candidate lines of the global latency chains' L2 placement sweep
PLACE_STRIDE = 65536 + K.LINE  # bytes between them (each step changes low and high address bits)


def _lat_args(op: K.AtomOp, nsm: int, offset: int) -> list:
    """The latency chain's buffers, its chain starting ``offset`` bytes into the buffer (in[3])."""
    bufs = _atom_args(op, nsm, latency=True)
    words = bufs[1].data.copy()
    words[3] = offset
    return [bufs[0], Buf("ain", data=words)]


def _chain(dev: Device, b1: Built, b2: Built, args: list) -> tuple[dict, set[int]]:
    """A chain's cycles per step over LAUNCHES launches (its slope between the two lengths) and
    the SMs its single block ran on."""
    per, sms = [], set()
    for _ in range(LAUNCHES):
        t1, t2 = (_times(dev, b, 1, 1, args) for b in (b1, b2))
        sms |= {int(t1[0, -1]), int(t2[0, -1])}
        per.append(an.chain_slope(an.row_durations(t1, slice(0, 1), K.REPS),
                                  an.row_durations(t2, slice(0, 1), K.REPS), LAT_LENGTHS))
    return an.combine(per), sms


def run_latency(dev: Device, p: Probe, bs: list[Built], nsm: int, flags: list[str]) -> list[Result]:
    op = K.OPS[p.params["op"]]
    method = (f"cycles per step of a dependent chain (the atomic and the 64-bit add of its result to the "
              f"next address), slope between {LAT_LENGTHS[0]} and {LAT_LENGTHS[1]} steps, one warp, "
              f"median of {LAUNCHES} launches")
    params = {**p.params, "lengths": list(LAT_LENGTHS), "launches": LAUNCHES, "ptx": op.ptx.format(sp=p.params["space"])}
    if p.params["space"] != "global":
        c, _ = _chain(dev, bs[0], bs[1], _atom_args(op, nsm, latency=True))
        return [Result(p.name, "latency", c["value"], "cycles", method, params=params,
                       samples={"per_launch": c["per_launch"]}, flags=flags + ([c["flag"]] if c["flag"] else []),
                       cls=CLS)]
    # global: the chain on PLACE_LINES lines, each also chased by a dependent ld.global.cg from the
    # same single block: the loads' L2-hit latencies fall in two groups where the lines lie in two
    # partitions (near and far for the SM that ran them); the atomic's latency on each group
    atom, ld, sms = [], [], set()
    for k in range(PLACE_LINES):
        args = _lat_args(op, nsm, k * PLACE_STRIDE)
        a, s1 = _chain(dev, bs[0], bs[1], args)
        g, s2 = _chain(dev, bs[2], bs[3], args)
        atom.append(a)
        ld.append(g)
        sms |= s1 | s2
    first = atom[0]
    split = an.two_groups([g["value"] if g["value"] is not None else np.nan for g in ld])
    ok = [i for i, (a, g) in enumerate(zip(atom, ld, strict=True)) if a["value"] is not None and g["value"] is not None]
    side = {i: ("far" if i in split["high"] else "near") if split["bimodal"] else "unplaced" for i in range(PLACE_LINES)}
    where = {"lines": PLACE_LINES, "stride_bytes": PLACE_STRIDE, "sms": sorted(sms),
             "ld_cg_per_line": [g["value"] for g in ld], "atom_per_line": [a["value"] for a in atom],
             "side_per_line": [side[i] for i in range(PLACE_LINES)],
             "ld_split": {k: split[k] for k in ("bimodal", "gap", "spread", "threshold", "low_median", "high_median")}}
    pflags = list(flags)
    if len(sms) > 1:
        pflags.append(f"placement: the single block ran on SMs {sorted(sms)}; a line's partition is near or far "
                      "per SM, so the groups may mix SMs")
    out = [Result(p.name, "latency", first["value"], "cycles",
                  method + f"; on the buffer's first line, its L2 partition not chosen ({side[0]} for SM "
                  f"{'/'.join(map(str, sorted(sms)))} by the placement sweep)",
                  params={**params, "l2": "unplaced", "line_side": side[0]},
                  samples={"per_launch": first["per_launch"]},
                  flags=flags + ([first["flag"]] if first["flag"] else []), cls=CLS)]
    if not split["bimodal"]:
        why = (f"unplaced: the ld.global.cg chains over {PLACE_LINES} lines show no two groups (widest gap "
               f"{split['gap'] or 0:.1f} cycles against a spread of {split['spread'] or 0:.1f})")
        for side_name in ("near", "far"):
            out.append(Result(p.name, f"latency_l2_{side_name}", None, "cycles", method, params={**params, "l2": side_name},
                              fit=where, flags=pflags + [why], cls=CLS))
        return out
    own = an.two_groups([atom[i]["value"] for i in ok])  # the atomic's own groups over the same lines
    where["atom_split"] = {k: own[k] for k in ("bimodal", "gap", "spread", "threshold", "low_median", "high_median")}
    if own["bimodal"]:
        high = {ok[j] for j in own["high"]}
        agree = sum((i in high) == (side[i] == "far") for i in ok)
        where["atom_agrees_lines"] = agree
        where["atom_slow_lines"] = len(high)
        if agree < 0.8 * len(ok):
            pflags.append(
                f"placement: the atomic's latency does not follow the load's partition: its own groups over the "
                f"lines are {own['low_median']:.0f} ({len(ok) - len(high)} lines) and {own['high_median']:.0f} "
                f"cycles ({len(high)} lines), on the load's side for {agree} of {len(ok)} lines; an atomic is "
                "served where its address is homed, which the load's near/far does not show")
    for side_name in ("near", "far"):
        idx = [i for i in ok if side[i] == side_name]
        vals = [atom[i]["value"] for i in idx]
        value = float(np.median(vals)) if vals else None
        ld_med = split["low_median" if side_name == "near" else "high_median"]
        out.append(Result(
            p.name, f"latency_l2_{side_name}", value, "cycles",
            method + f"; median over the {len(idx)} of {PLACE_LINES} lines whose dependent ld.global.cg chain "
            f"from the same block hits the L2 {side_name} partition ({ld_med:.0f} cycles per load; near/far split "
            f"at {split['threshold']:.0f}, gap {split['gap']:.0f} against a spread of {split['spread']:.1f})",
            params={**params, "l2": side_name}, samples={"per_line": vals}, fit=where, flags=pflags, cls=CLS))
    return out


def _bar_rows(kind: str, grid: int, block_warps: int, k: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Rows (warps) whose durations each kind's cost is read from: (rows, named subsets)."""
    w = np.tile(np.arange(block_warps), grid)
    if kind == "bar.sync.n":
        return w < k, {}
    if kind == "bar.arrive+sync":
        half = block_warps // 2
        return w >= half, {"producers": w < half}
    return np.ones_like(w, dtype=bool), {}


def run_barrier(dev: Device, p: Probe, bs: list[Built], nsm: int, flags: list[str]) -> Result:
    kind = p.params["kind"]
    if kind == "bar.sync.n":
        points = [(32, k) for k in BAR_WARPS]  # (block warps, participating warps)
    elif kind == "bar.arrive+sync":
        points = [(w, w) for w in PC_WARPS]
    else:
        points = [(w, w) for w in BAR_WARPS]
    sweep, fl = {}, list(flags)
    for bw, k in points:
        per, prod = [], []
        for _ in range(LAUNCHES):
            ts = [_times(dev, b, nsm, bw, [Buf("bout", nbytes=64, zero=True), np.uint32(k * 32)]) for b in bs]
            rows, extra = _bar_rows(kind, nsm, bw, k)
            per.append(an.chain_slope(*(an.row_durations(t, rows, K.REPS) for t in ts), BAR_LENGTHS))
            if "producers" in extra:
                prod.append(an.chain_slope(*(an.row_durations(t, extra["producers"], K.REPS) for t in ts),
                                           BAR_LENGTHS))
        c = an.combine(per)
        key = str(k if kind == "bar.sync.n" else bw)
        sweep[key] = {"cycles": c["value"], "per_launch": c["per_launch"], "block_warps": bw, "threads": k * 32}
        if prod:
            sweep[key]["producer_cycles"] = an.combine(prod)["value"]
        if c["flag"]:
            fl.append(f"{c['flag']} at {key} warps")
    axis = "participating warps of a 32-warp block" if kind == "bar.sync.n" else "warps per block"
    last = sweep[list(sweep)[-1]]["cycles"] if sweep else None
    return Result(p.name, "barrier", last, "cycles",
                  f"cycles per barrier at the sweep's largest {axis} (fit.sweep: each point the slope between "
                  f"{BAR_LENGTHS[0]} and {BAR_LENGTHS[1]} barriers, median over warps x repetitions, median of "
                  f"{LAUNCHES} launches)", params={"kind": kind, "text": K.BARRIERS[kind][1], "axis": axis,
                                                   "lengths": list(BAR_LENGTHS), "launches": LAUNCHES,
                                                   "blocks": nsm},
                  fit={"sweep": sweep}, flags=fl, cls=CLS)


def run_fence(dev: Device, p: Probe, built: dict[str, Built], nsm: int, flags: list[str]) -> Result:
    kind = p.params["kind"]
    sweep, fl = {}, list(flags)
    for st in (False, True):
        bs = [built[K.fence_name(kind, st, n)] for n in FENCE_LENGTHS]
        for w in FENCE_WARPS:
            per = []
            for _ in range(LAUNCHES):
                ts = [_times(dev, b, nsm, w, [Buf("fbuf", nbytes=nsm * 1024 * 4 + 4096, zero=True)]) for b in bs]
                per.append(an.chain_slope(*(an.row_durations(t, slice(None), K.REPS) for t in ts), FENCE_LENGTHS))
            c = an.combine(per)
            key = f"{'store' if st else 'alone'}:w{w}"
            sweep[key] = {"cycles": c["value"], "per_launch": c["per_launch"]}
            if c["flag"]:
                fl.append(f"{c['flag']} at {key}")
    v = sweep.get(f"alone:w{FENCE_WARPS[0]}", {}).get("cycles")
    return Result(p.name, "fence", v, "cycles",
                  f"cycles per fence, one warp per SM on every SM, no store (the slope between {FENCE_LENGTHS[0]} "
                  f"and {FENCE_LENGTHS[1]} fences, median over warps x repetitions, median of {LAUNCHES} launches); "
                  f"fit.sweep: with a store before each fence and at {FENCE_WARPS[-1]} warps",
                  params={"kind": kind, "lengths": list(FENCE_LENGTHS), "warps": list(FENCE_WARPS),
                          "launches": LAUNCHES, "blocks": nsm}, fit={"sweep": sweep}, flags=fl, cls=CLS)


# ----------------------------------------------------------------- launch costs
def _us(ms: list[float], n: int) -> list[float]:
    return [1000.0 * m / n for m in ms]


def run_launch_grid(dev: Device, p: Probe, b: Built, flags: list[str]) -> list[Result]:
    g, blk = p.params["grid"], p.params["block"]
    base = {**p.params, "kernel": "launch_empty"}
    out = []
    r = dev.launch(b.cubin, "launch_empty", g, blk, [], launches=LAT_LAUNCHES + 1)
    wall = [1e6 * w for w in r.wall_s[1:]]  # the first launch loads the module
    ev = [1000.0 * m for m in r.gpu_ms[1:]]
    for tag, vals, what in (("sync-wall", wall, "host wall of a launch and its synchronisation"),
                            ("sync-event", ev, "CUDA events around one launch")):
        c = an.combine(vals)
        out.append(Result(f"{p.name}:{tag}", "launch", c["value"], "us",
                          f"{what}, median of {LAT_LAUNCHES} launches (one at a time)",
                          params={**base, "launches": LAT_LAUNCHES}, samples={"per_launch": [round(v, 3) for v in vals]},
                          flags=list(flags), cls=CLS))
    for mode in ("stream", "graph"):
        try:
            s = dev.launch_series(b.cubin, ["launch_empty"], g, blk, SERIES, mode=mode, repeats=LAUNCHES)
        except Exception as e:  # one launch path failing leaves the others measured
            out.append(Result(f"{p.name}:{mode}", "launch", None, "us/launch", "-", params={**base, "mode": mode},
                              flags=[f"error: {type(e).__name__}: {e}"[:400]], cls=CLS))
            continue
        ev = _us(s.gpu_ms, SERIES)
        wall = [1e6 * w / SERIES for w in s.wall_s]
        sub = [1e6 * float(x) / SERIES for x in s.outputs.get("submit_s", [])]
        c = an.combine(ev)
        text = "back-to-back launches" if mode == "stream" else "kernel nodes of a replayed CUDA graph"
        out.append(Result(f"{p.name}:{mode}", "launch", c["value"], "us/launch",
                          f"{text}: CUDA events around {SERIES} of them / {SERIES}, median of {LAUNCHES} series",
                          params={**base, "count": SERIES, "series": LAUNCHES, "mode": mode},
                          samples={"event_us": [round(v, 4) for v in ev], "wall_us": [round(v, 4) for v in wall],
                                   "submit_us": [round(v, 4) for v in sub]},
                          flags=list(flags) + ([c["flag"]] if c["flag"] else []), cls=CLS))
    return out


def run_launch_pdl(dev: Device, p: Probe, b: Built, flags: list[str]) -> list[Result]:
    g, blk, n = p.params["grid"], p.params["block"], 2 * p.params["pairs"]
    res = {}
    for mode in ("stream", "pdl"):
        s = dev.launch_series(b.cubin, ["pdl_primary", "pdl_secondary"], g, blk, n, mode=mode, repeats=LAUNCHES)
        res[mode] = _us(s.gpu_ms, n // 2)
    plain, pdl = an.combine(res["stream"]), an.combine(res["pdl"])
    saved = None if plain["value"] is None or pdl["value"] is None else plain["value"] - pdl["value"]
    fl = list(flags) + [c["flag"] for c in (plain, pdl) if c["flag"]]
    return [Result(p.name, "launch", saved, "us/pair",
                   f"time saved per (primary, secondary) pair by programmatic dependent launch: events around "
                   f"{n // 2} pairs in stream order minus the same with the secondary launched with "
                   f"CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, / pairs, median of {LAUNCHES} series",
                   params=dict(p.params), fit={"stream_us_per_pair": plain["value"], "pdl_us_per_pair": pdl["value"]},
                   samples={"stream_us": plain["per_launch"], "pdl_us": pdl["per_launch"]}, flags=fl, cls=CLS)]


# ----------------------------------------------------------------- the suite
MODULE = {"atomic": "atom", "latency": "lat", "barrier": "bar", "fence": "fence", "launch": "launch",
          "branch": "branch"}


class SyncSuite(SuiteBase):
    name = "sync"
    description = "atomic contention, barriers, fences and launch costs"

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        select(all_probes(1, quick=False), patterns)

    def plan(self, ctx: Context, patterns: list[str] | None) -> Plan:
        probes = select(all_probes(ctx.sm_count, ctx.quick), patterns)
        ctx.state["probes"] = {p.name: p for p in probes}
        return Plan([Item(p.name, p) for p in probes],
                    {"items": [p.name for p in probes], "quick": ctx.quick, "launches": LAUNCHES})

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        """Build every kernel of ``items`` (one module per kind) and check its SASS."""
        header = ptx_header(ctx.target.ptx_isa, ctx.target.arch)
        modules: dict[str, dict[str, Kernel]] = {}
        for it in items:
            p: Probe = it.data
            ks = modules.setdefault(MODULE[p.kind], {})
            for k in probe_kernels(p, header):
                ks.setdefault(k.name, k)
        built: dict[str, Built | Exception] = {}
        for mod, ks in modules.items():
            try:
                built.update(build_module(list(ks.values()), ctx.target.arch, region=mod != "launch"))
            except Exception as e:  # a module that does not assemble fails its items only
                built.update({n: e for n in ks})
        ctx.state["built"] = built

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        p: Probe = item.data
        bs, texts = take(ctx.state["built"], p.kernels)
        built = dict(zip(p.kernels, bs, strict=True))
        flags = sass_flags(p, built, ctx.target.arch)  # type: ignore[arg-type]
        nsm, dev = ctx.sm_count, ctx.dev
        if p.kind == "atomic":
            rs = [run_atomic(dev, p, bs, nsm, ctx.quick, flags)]
        elif p.kind == "latency":
            rs = run_latency(dev, p, bs, nsm, flags)
        elif p.kind == "barrier":
            rs = [run_barrier(dev, p, bs, nsm, flags)]
        elif p.kind == "fence":
            rs = [run_fence(dev, p, built, nsm, flags)]  # type: ignore[arg-type]
        elif p.kind == "branch":
            args = [Buf("bout", nbytes=64, zero=True)]
            rs, _ = B.run(dev, built, lambda b, xs: _times(dev, b, 1, 1, [*args, *xs]), LAUNCHES)  # type: ignore[arg-type]
        elif p.name == "launch:pdl":
            rs = run_launch_pdl(dev, p, bs[0], flags)
        else:
            rs = run_launch_grid(dev, p, bs[0], flags)
        last = bs[-1]
        for r in rs:
            r.ptx_hash, r.sass_hash = last.ptx_hash, last.sass_hash
        return Outcome(rs, texts)

    def error_results(self, item: Item, flag: str) -> list[Result]:
        p: Probe = item.data
        if p.name == "launch:pdl":
            flag = f"{flag} (programmatic dependent launch not reachable through this launch path)"
        return [Result(p.name, p.kind, None, "-", "-", params=p.params, flags=[flag[:400]], cls=CLS)]

    def summarize(self, ctx: Context) -> dict:
        from gpudissect.suites.sync.summary import summarize

        return summarize(ctx.store, ctx.run_id)


SUITE = SyncSuite()
