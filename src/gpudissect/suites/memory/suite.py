"""The memory suite: latency of every load path, the footprint staircase (cache sizes, the
L2's near and far partitions), fill granularity and line size, a per-SM map of L2 latency by
address (near/far partition), a page-size-aware TLB study, bandwidth of each level and
shared-memory bank conflicts.

Every benchmark is one item of the run loop (``bench/runner.py``): one resumable store
transaction; a failing one stores a Result with value None and an ``error: ...`` flag and the
sweep goes on. Sizes used by later benchmarks (chain spacing, bandwidth footprints, the L2
flush) come from earlier measurements of the same run, never from known values; when a
measurement is missing the fallback is generic and flagged.
"""

from __future__ import annotations

import fnmatch
import math

import numpy as np

from gpudissect.bench import contract
from gpudissect.bench.contract import Context, Item, Outcome, Redo, SuiteBase
from gpudissect.bench.staircase import detect, pooled_spread, refine_points
from gpudissect.bench.stats import noise_flag
from gpudissect.device.args import TEX1D_LINEAR_MAX_WIDTH, Buf
from gpudissect.store.db import Result
from gpudissect.suites.memory import analyse as am
from gpudissect.suites.memory import bandwidth as bwm
from gpudissect.suites.memory import kernels as gm
from gpudissect.suites.memory import texture as tex
from gpudissect.suites.memory.launcher import TEX_KERNEL, Kernels, Launcher
from gpudissect.suites.memory.plan import QUICK_PLAN, Plan

MiB = 1 << 20

GLOBAL_PATHS = {f"ld.global.{op}": f"chase_{op}" for op in gm.GLOBAL_OPS}
LOCAL_PATHS = {"ld.shared": "chase_lds", "st.shared+ld.shared": "chase_sts", "ld.local": "chase_ldl"}
STORE_ROUND_TRIP = {"st.global+ld.global": "chase_stg"}  # one-word self-loop in a global buffer
STORE_SPANS = {"st.shared": "span_sts", "st.global": "span_stg"}  # store_span/<path>; span_none


def error_result(variant: str, measure: str, unit: str, flag: str, **params) -> Result:
    return Result(variant, measure, None, unit, "none", params=params, cls="memory",
                  flags=[flag], strategy="memory")


def _err(variant: str, measure: str, unit: str, e: Exception, **params) -> Result:
    return error_result(variant, measure, unit, f"error: {type(e).__name__}: {e}", **params)


# --- benchmarks (each returns results and the kernel texts they cite)

def bench_latency(r: Launcher, path: str) -> tuple[list[Result], dict]:
    p = r.plan
    variant = f"latency/{path}"
    if path.startswith("ld.const@"):
        f = int(path.split("@")[1])
        name = f"chase_ldc_{f}"
        ch_nodes = f // p.const_spacing(f)
        vals, _ = r.chase(name, 8, ch_nodes, p.lat_iters, launches=p.lat_launches,
                          chain_buf=Buf("dummy", nbytes=64))
        params = {"footprint": f, "loads": p.lat_iters * gm.UNROLL, "path": "ld.const"}
    else:
        ch = gm.build_chain(p.hot_footprint, p.hot_spacing, "random", seed=p.seed,
                            limit=r.limit())
        if path in STORE_ROUND_TRIP:
            name = STORE_ROUND_TRIP[path]
            vals, _ = r.chase(name, 64, 4 * UNROLL_WARM, p.lat_iters, launches=p.lat_launches,
                              chain_buf=Buf("word", nbytes=64))
        elif path in GLOBAL_PATHS or path == "tex":
            name = GLOBAL_PATHS.get(path, TEX_KERNEL)
            vals, _ = r.chase(name, ch.footprint, 4 * ch.nodes, p.lat_iters, launches=p.lat_launches,
                              chain_buf=r.chain_arg(name, ch))
        else:
            name = LOCAL_PATHS[path]
            words = ch.byte_offsets()
            vals, _ = r.chase(name, words.nbytes, words.size, p.lat_iters, launches=p.lat_launches,
                              chain_buf=Buf("offs", data=words))
        params = {"footprint": ch.footprint, "spacing": ch.spacing, "order": ch.order,
                  "loads": p.lat_iters * gm.UNROLL, "path": path}
        if path in STORE_ROUND_TRIP:
            params = {"footprint": 8, "order": "one-word self-loop: a store, then a load of the "
                      "same word (its result the next address)", "loads": p.lat_iters * gm.UNROLL,
                      "path": path}
    samples = [float(v) for v in vals[:, 0]]
    res = r.k.result(name, variant=variant, measure="latency", value=float(np.median(samples)),
                     unit="cycles", statistic="median over launches of (clock64 span / dependent loads)",
                     params=params, samples=samples)
    return [res], r.k.texts(name)


UNROLL_WARM = 16  # untimed round trips before the timed ones (x 4)


def bench_store_span(r: Launcher, path: str) -> tuple[list[Result], dict]:
    """Seed 000's store method: one store alone between two clock reads, ``store_span_iters``
    regions per launch (mean span per region; median over launches); the empty region (the
    clock pair alone) measured beside it in the same launches' order."""
    p = r.plan
    spans: dict[str, list[float]] = {}
    for name in (STORE_SPANS[path], "span_none"):
        vals, _ = r.chase(name, 64, 0, p.store_span_iters, launches=p.lat_launches,
                          chain_buf=Buf("word", nbytes=64))
        spans[name] = [float(v) * gm.UNROLL for v in vals[:, 0]]  # chase() divides by UNROLL
    name = STORE_SPANS[path]
    samples, empty = spans[name], spans["span_none"]
    res = r.k.result(name, variant=f"store_span/{path}", measure="span", value=float(np.median(samples)),
                     unit="cycles",
                     statistic="median over launches of (sum of clock64 spans of regions holding one "
                               "store) / regions",
                     params={"path": path, "regions": p.store_span_iters,
                             "method": "seed 000 Fig. 3: one store between two clock reads",
                             "empty_span": float(np.median(empty)),
                             "empty_kernel_ok": r.k.checks.get("span_none") is not None
                             and r.k.checks["span_none"].ok},
                     samples={"store": samples, "empty": empty})
    return [res], {**r.k.texts(name), **r.k.texts("span_none")}


def _sweep_points(p: Plan, top: int, start: int) -> list[int]:
    n = int(math.floor(math.log2(top / start) * p.per_octave)) + 1
    pts = sorted({int(round(start * 2 ** (i / p.per_octave) / 64)) * 64 for i in range(n)})
    return [x for x in pts if x <= top]


def _sweep_top(r: Launcher, op: str) -> tuple[int, str]:
    """The largest footprint of a cache sweep and the rule that set it."""
    p = r.plan
    top = min(p.sweep_max, int(r.dev.free_memory()) // 2 + r.held)
    rule = "min(sweep_max, half the free device memory)"
    if r.l2_reported and p.sweep_l2_multiple:
        top = min(top, p.sweep_l2_multiple * r.l2_reported)
        rule = (f"min(sweep_max, half the free device memory, {p.sweep_l2_multiple} x the "
                f"reported L2 size {am.human(r.l2_reported)})")
    if op == "tex":  # the chain is the texture's element array
        top = min(top, TEX1D_LINEAR_MAX_WIDTH * 4)
        rule += ", the 1D linear texture limit"
    return top, rule


def _repeat_flags(samples: list[float], flags: list[str]) -> list[str]:
    nf = noise_flag(samples)
    return [*flags, nf] if nf else list(flags)


def bench_sweep(r: Launcher, op: str, order: str, spacing: int, spacing_flag: list[str]
                ) -> tuple[list[Result], dict]:
    """Latency against footprint (``sweep_launches`` launches per point, median, noisy points
    flagged), then points inside each detected step's bracket (densely for the sweeps the
    L2 model reads)."""
    p = r.plan
    name = TEX_KERNEL if op == "tex" else GLOBAL_PATHS[f"ld.global.{op}"]
    variant = f"sweep/{op}-{order}"
    top, rule = _sweep_top(r, op)
    results: list[Result] = []
    measured: dict[int, float] = {}

    def point(f: int) -> None:
        try:
            ch = r.chain(f, spacing, order, seed=len(measured))
            arg = r.chain_arg(name, ch)
            warm = min(ch.nodes, p.warm_cap)
            vals, _ = r.chase(name, ch.footprint, warm, p.sweep_iters, chain_buf=arg,
                              launches=p.sweep_launches)
            samples = [float(v) for v in vals[:, 0]]
            v = float(np.median(samples))
            measured[ch.footprint] = v
            results.append(r.k.result(
                name, variant=variant, measure="latency_vs_footprint", value=v, unit="cycles",
                statistic="median over launches of clock64 span / dependent loads",
                params={"footprint": ch.footprint, "spacing": ch.spacing, "order": order,
                        "warm_links": warm, "nodes": ch.nodes, "warm_covers_chain": warm >= ch.nodes,
                        "loads": p.sweep_iters * gm.UNROLL, "launches": len(samples),
                        "top": top, "top_rule": rule},
                samples=samples, flags=_repeat_flags(samples, spacing_flag)))
        except Exception as e:  # a refused or failed point: recorded, the sweep goes on
            results.append(_err(variant, "latency_vs_footprint", "cycles", e, footprint=f))

    for f in _sweep_points(p, top, start=p.sweep_min):
        point(f)
    if p.refine and measured:
        xs = sorted(measured)
        _, steps = detect(xs, [measured[x] for x in xs])
        dense = f"{op}-{order}" in p.dense_sweeps
        for st in steps:
            n = p.refine
            if dense:
                n = max(n, int(math.ceil(math.log2(st.x_above / st.x_below) * p.refine_per_octave)))
            for f in refine_points([st], sorted(measured), n):
                point(int(round(f / 64)) * 64)
    return results, r.k.texts(name)


def bench_stride(r: Launcher, level: str, flush_bytes: int | None, flags: list[str]
                 ) -> tuple[list[Result], dict]:
    """One cold pass over a freshly written strided chain: average latency vs stride; the
    knee is the fill granularity of the level (L1 via .ca; L2 via .cg after an L2 flush)."""
    p = r.plan
    op = "ca" if level == "L1" else "cg"
    name = GLOBAL_PATHS[f"ld.global.{op}"]
    variant = f"stride/{level}"
    results = []
    iters = max(1, p.stride_nodes // gm.UNROLL)
    for s in p.strides:
        try:
            ch = gm.build_chain(s * p.stride_nodes, max(8, s), "strided", limit=r.limit())
            samples = []
            for _ in range(p.stride_reps):
                r.place(ch)
                if flush_bytes:
                    _flush(r, flush_bytes)
                vals, _ = r.chase(name, ch.footprint, 0, iters)
                samples.append(float(vals[0, 0]))
            results.append(r.k.result(
                name, variant=variant, measure="latency_vs_stride", value=float(np.median(samples)),
                unit="cycles", statistic="median over cold passes of clock64 span / loads",
                params={"stride": s, "nodes": ch.nodes, "flush_bytes": flush_bytes, "path": op},
                samples=samples, flags=list(flags)))
        except Exception as e:
            results.append(_err(variant, "latency_vs_stride", "cycles", e, stride=s))
    return results, r.k.texts(name)


def _flush(r: Launcher, nbytes: int) -> None:
    blk = r.plan.bw_block
    grid = r.sm * r.plan.bw_blocks_per_sm
    per = max(4 * blk, (nbytes // 16 // grid) // (4 * blk) * (4 * blk))
    r.dev.launch(r.k.cubin, "bw_st_cg", grid, blk,
                 [Buf("flush", nbytes=per * grid * 16), Buf("bwout", nbytes=24 * grid),
                  np.uint32(per), np.uint32(per), np.uint32(1)])


def bench_l2map(r: Launcher) -> tuple[list[Result], dict]:
    """Per-SM L2 latency by address: one block per SM, each on a one-line self-loop
    (``l2probe``, .cg), lines at random offsets of a buffer; launch k gives block b the line
    (b + k) mod lines, so every SM meets every line; ``l2map_reps`` rounds. The matrix
    (SM x line, median over rounds) shows which SMs see which lines as near."""
    p = r.plan
    name = "l2probe"
    nbytes = int(min(p.l2map_bytes, r.limit() // 4))
    rng = np.random.default_rng(p.seed)
    lines = np.sort(rng.choice(nbytes // 128, size=min(p.l2map_lines, nbytes // 128),
                               replace=False)).astype(np.int64) * 128
    if int(lines.max()) + 8 > nbytes or (lines % 8).any():
        raise gm.ChainError("probe line outside the buffer")
    g, grid = int(lines.size), r.sm
    cells: dict[tuple[int, int], list[float]] = {}
    loads = p.l2map_iters * gm.UNROLL
    for _rep in range(p.l2map_reps):
        for k in range(g):
            group = (np.arange(grid) + k) % g
            run = r.dev.launch(r.k.cubin, name, grid, 1, [
                Buf("l2map", nbytes=nbytes), Buf("out", nbytes=24 * grid, read=True),
                np.uint32(p.l2map_warm), np.uint32(p.l2map_iters),
                Buf("l2offs", data=lines[group].astype(np.uint64)), np.uint64(nbytes - 8)])
            out = np.asarray(run.outputs["out"], dtype=np.uint64)[: 3 * grid].reshape(grid, 3)
            for b in range(grid):
                cells.setdefault((int(out[b, 2]), int(group[b])), []).append(float(out[b, 0]) / loads)
    sms = sorted({sm for sm, _ in cells})
    mat = [[float(np.median(cells[(sm, j)])) if (sm, j) in cells else None for j in range(g)]
           for sm in sms]
    reps = [v for v in cells.values() if len(v) > 1]
    spread = pooled_spread(reps)
    part = am.partition_map(sms, mat)
    flat = [v for row in mat for v in row if v is not None]
    res = r.k.result(name, variant="l2map/ld.global.cg", measure="latency_matrix",
                     value=float(np.median(flat)), unit="cycles",
                     statistic="per (SM, line): median over rounds of clock64 span / loads; "
                               "value: median over the matrix",
                     params={"lines": g, "buffer_bytes": nbytes, "line_offsets": lines.tolist(),
                             "rounds": p.l2map_reps, "loads": loads, "warm": p.l2map_warm,
                             "blocks": grid, "sms_seen": len(sms), "repeat_spread_rel": spread,
                             "l2_reported_bytes": r.l2_reported, "partition": part},
                     samples={"sm": sms, "latency": [[None if v is None else round(v, 2) for v in row]
                                                     for row in mat],
                              # the raw repeats: rounds[k][i][j] = round k, SM sms[i], line j
                              "rounds": [[[round(cells[(sm, j)][k], 1) if len(cells.get((sm, j), [])) > k
                                           else None for j in range(g)] for sm in sms]
                                         for k in range(p.l2map_reps)]})
    out = [res]
    for side in ("near", "far"):  # the map's placement-controlled L2 hits: each SM to its own / the other partition
        v = part.get(f"{side}_cycles") if part.get("split") else None
        out.append(r.k.result(name, variant="l2/ld.global.cg", measure=f"latency_l2_{side}",
                              value=None if v is None else float(v), unit="cycles",
                              statistic=f"median over the per-SM map's (SM, line) cells whose line is {side} for "
                                        "that SM (each cell: the median over rounds of a one-line .cg chase)",
                              params={"l2": side, "lines": g, "sms_seen": len(sms), "partition": part},
                              flags=[] if v is not None else
                              [f"unplaced: the per-SM map shows no near/far split ({part.get('why', 'no split')})"]))
    if r.l2_reported:
        out.append(Result("device/l2_size_reported", "l2_cache_size", float(r.l2_reported),
                          "bytes", "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)",
                          params={"what": "the driver's figure, compared with the measured "
                                          "capacity; not a measurement"},
                          cls="memory", strategy="reported"))
    return out, r.k.texts(name)


def _counts(top: int, per_octave: int, start: int = 2) -> list[int]:
    """Geometric page counts from ``start`` to ``top``, eight times as dense over the last
    quarter octave (a level that runs out near the largest chain still gets two points
    above its step)."""
    if top < start:
        return []
    n = int(math.floor(math.log2(top / start) * per_octave)) + 1
    tail = {int(round(top * 2 ** (-k / (8 * per_octave)))) for k in range(4)}
    return sorted({int(round(start * 2 ** (i / per_octave))) for i in range(n)} | {x for x in tail if x >= start})


def bench_tlb(r: Launcher) -> tuple[list[Result], dict]:
    """Translation reach and miss cost: for each page stride, chains over N pages (random
    page order, a few L2-resident lines per page, .cg loads), N from 2 to what fits in the
    free memory; ``sweep_launches`` launches per point, each with its own page order and
    lines, so their spread holds the line-to-line variation a step must exceed."""
    p = r.plan
    name = GLOBAL_PATHS["ld.global.cg"]
    top = min(p.tlb_max, int(int(r.dev.free_memory()) * p.tlb_free_fraction) + r.held)
    results: list[Result] = []
    for stride in p.tlb_strides:
        variant = f"tlb/{am.human(stride).replace(' ', '')}"
        for n in _counts(top // stride, p.tlb_per_octave):
            lines = max(1, min(p.tlb_lines_per_page, p.tlb_lines // n))
            nbytes = (n - 1) * stride + p.tlb_region
            step = p.tlb_region // lines
            try:
                samples, shifts = [], []
                for k in range(p.sweep_launches):
                    shift = (k * 1088) % step // 64 * 64
                    offs = gm.offset_chain(
                        gm.page_chain_offsets(n, stride, p.tlb_region, lines, seed=p.seed + k, shift=shift),
                        nbytes, limit=r.limit())
                    r.link(offs, nbytes)
                    vals, _ = r.chase(name, nbytes, min(offs.size, p.warm_cap), p.sweep_iters)
                    samples.append(float(vals[0, 0]))
                    shifts.append(shift)
                results.append(r.k.result(
                    name, variant=variant, measure="latency_vs_pages", value=float(np.median(samples)),
                    unit="cycles", statistic="median over launches (each its own page order and "
                                             "lines) of clock64 span / dependent loads",
                    params={"pages": n, "page_stride": stride, "footprint": n * stride,
                            "lines_per_page": lines, "nodes": n * lines, "region": p.tlb_region,
                            "line_shifts": shifts, "loads": p.sweep_iters * gm.UNROLL,
                            "warm_covers_chain": n * lines <= p.warm_cap, "top": top},
                    samples=samples, flags=_repeat_flags(samples, [])))
            except Exception as e:
                results.append(_err(variant, "latency_vs_pages", "cycles", e, pages=n,
                                    page_stride=stride))
    return results, r.k.texts(name)


def bench_line(r: Launcher, level: str, ref_spacing: int, lo: int, hi: int, flags: list[str]
               ) -> tuple[list[Result], dict]:
    """Line (allocation) size: strided chains at node spacings wider than a candidate line
    (odd multiples of powers of two, so every set is used); the capacity step of spacing s
    lies at capacity x max(1, s / line). L1 (.ca): the reference spacing (the fill
    granularity) is swept here too; L2 (.cg): the reference is the staircase."""
    p = r.plan
    op = "ca" if level == "L1" else "cg"
    name = GLOBAL_PATHS[f"ld.global.{op}"]
    spacings = ((ref_spacing, *p.line_spacings_l1) if level == "L1" else p.line_spacings_l2)
    results: list[Result] = []
    n = int(math.floor(math.log2(hi / lo) * p.line_per_octave)) + 1
    for sp in spacings:
        variant = f"line/{level}@{sp}"
        for f in sorted({int(lo * 2 ** (i / p.line_per_octave)) // sp * sp for i in range(n)}):
            try:
                ch = gm.build_chain(f, sp, "strided", limit=r.limit())
                if ch.nodes > p.max_nodes:
                    raise gm.ChainError(f"{ch.nodes} nodes exceed max_nodes {p.max_nodes}")
                r.place(ch)
                warm = min(ch.nodes, p.warm_cap)
                vals, _ = r.chase(name, ch.footprint, warm, p.sweep_iters, launches=p.sweep_launches)
                samples = [float(v) for v in vals[:, 0]]
                results.append(r.k.result(
                    name, variant=variant, measure="latency_vs_footprint",
                    value=float(np.median(samples)), unit="cycles",
                    statistic="median over launches of clock64 span / dependent loads",
                    params={"footprint": ch.footprint, "spacing": sp, "order": "strided",
                            "nodes": ch.nodes, "warm_links": warm, "reference": sp == ref_spacing,
                            "level": level, "launches": len(samples)},
                    samples=samples, flags=_repeat_flags(samples, flags)))
            except Exception as e:
                results.append(_err(variant, "latency_vs_footprint", "cycles", e, footprint=f,
                                    spacing=sp))
    return results, r.k.texts(name)


def bench_bank(r: Launcher, bits: int) -> tuple[list[Result], dict]:
    p = r.plan
    name = f"bank_w{bits}"
    width = bits // 8
    out = []
    for k in p.bank_strides:
        stride = k * width
        try:
            run = r.dev.launch(r.k.cubin, name, 1, 32, [Buf("bankout", nbytes=24, read=True),
                                                        np.uint32(stride), np.uint32(p.lat_iters)],
                               launches=p.lat_launches)
            cyc = float(np.asarray(run.outputs["bankout"], dtype=np.uint64)[0]) / (
                p.lat_iters * gm.UNROLL)
            deg = am.bank_degrees(stride, width)
            out.append(r.k.result(name, variant=f"bank/w{bits}", measure="cycles_per_access",
                                  value=cyc, unit="cycles",
                                  statistic="clock64 span / dependent warp accesses (last launch)",
                                  params={"stride_bytes": stride, "width_bytes": width, **deg},
                                  samples=[cyc]))
        except Exception as e:
            out.append(_err(f"bank/w{bits}", "cycles_per_access", "cycles", e, stride_bytes=stride))
    return out, r.k.texts(name)


def _select(names: list[str], patterns: list[str] | None) -> list[str]:
    if not patterns:
        return names
    return [n for n in names if any(fnmatch.fnmatch(n, pt) or pt in n for pt in patterns)]


def item_names(plan: Plan) -> list[str]:
    """The suite's items in run order (later ones use sizes the earlier ones measured)."""
    lat_paths = [*GLOBAL_PATHS, *LOCAL_PATHS, *STORE_ROUND_TRIP,
                 *(f"ld.const@{f}" for f in plan.const_footprints), "tex"]
    return ([f"latency/{pth}" for pth in lat_paths] + [f"store_span/{s}" for s in STORE_SPANS]
            + ["stride/L1", "stride/L2", "sweep/ca-random",
            "sweep/ca-strided", "sweep/cg-random", "sweep/tex-random", "tlb",
            "line/L1", "line/L2", "l2map", *bwm.ITEMS, tex.ITEM]
            + [f"bank/w{b}" for b in gm.BANK_WIDTHS])


def _flush_bytes(ctx: Context, r: Launcher) -> tuple[int, list[str]]:
    """Bytes the L2 flush streams (4 x the L2): the L2 measured in this run, else the size the
    driver reports (stride/L2 runs before the sweeps), else generic; flagged when not measured."""
    sizes, _ = _derived(ctx)
    l2 = (sizes.get("L2") or {}).get("bytes")
    flags: list[str] = []
    if not l2 and r.l2_reported:
        l2, flags = r.l2_reported, ["flush sized from the driver's L2 size (not measured yet)"]
    flush = 4 * int(l2) if l2 else min(1 << 30, int(ctx.dev.free_memory()) // 4)
    if not l2:
        flags = ["fallback: L2 size neither measured nor reported; flush size generic"]
    return min(flush, int(ctx.dev.free_memory()) // 2), flags


def _sweep_spacing(ctx: Context) -> tuple[int, list[str]]:
    """Node spacing of the cache sweeps: the widest fill granularity measured (L1, L2), as a
    power of two, so no node shares a fill with its neighbour (a strided chain at a finer
    spacing hits the sector its neighbour's miss brought in, a false level between two)."""
    _, fills = _derived(ctx)
    got = {lv: (fills.get(lv) or {}).get("bytes") for lv in ("L1", "L2")}
    have = [int(v) for v in got.values() if v]
    if not have:
        return 256, ["fallback: fill granularity not measured; node spacing 256 B"]
    flags = [f"fallback: {lv} fill granularity not measured; spacing from the other level"
             for lv, v in got.items() if not v]
    return max(32, 1 << int(math.ceil(math.log2(max(have))))), flags


def _line_plan(ctx: Context, level: str) -> tuple[str, int, int, int, list[str]]:
    """(level, reference spacing, lowest and highest footprint, flags) of a line-size item,
    from the sizes and fill granularity this run measured (generic, flagged, where missing)."""
    sizes, fills = _derived(ctx)
    flags: list[str] = []
    if level == "L1":
        fill = (fills.get("L1") or {}).get("bytes")
        cap = (sizes.get("L1") or {}).get("bytes")
        if not fill:
            fill, flags = 32, flags + ["fallback: L1 fill granularity not measured; reference spacing 32 B"]
        if not cap:
            cap, flags = 64 * 1024, flags + ["fallback: L1 size not measured; generic 64 KiB range"]
        return level, int(fill), int(cap) // 2, 8 * int(cap), flags
    near = (sizes.get("L2_near") or sizes.get("L2") or {}).get("bytes")
    cap = (sizes.get("L2") or {}).get("bytes")
    if not near or not cap:
        near = cap = 16 * MiB
        flags.append("fallback: L2 sizes not measured; generic 16 MiB range")
    return level, 0, int(near), 4 * int(cap), flags


def _derived(ctx: Context) -> tuple[dict, dict]:
    """Sizes measured so far in this run (for spacing, flush and bandwidth footprints)."""
    s = am.summarize(ctx.store.results(ctx.run_id))
    return s.get("sizes", {}), s.get("line_sizes", {})


class MemorySuite(SuiteBase):
    name = "memory"
    description = ("latency of every load path, cache sizes and TLB reach, line sizes, L2 "
                   "near/far, bandwidth of each level, shared-memory bank conflicts")
    options = {"plan": "a memory Plan to run instead of the full (or --quick) one"}

    def plan(self, ctx: Context, patterns: list[str] | None) -> contract.Plan:
        plan = ctx.options.get("plan") or (QUICK_PLAN if ctx.quick else Plan())
        ctx.state["plan"] = plan
        return contract.Plan([Item(n) for n in _select(item_names(plan), patterns)],
                             plan.to_json())

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        plan = ctx.state["plan"]
        ctx.state["launcher"] = Launcher(ctx.dev, Kernels(ctx.target, plan), plan)

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        r: Launcher = ctx.state["launcher"]
        name = item.name
        if name.startswith("latency/"):
            return Outcome(*bench_latency(r, name.split("/", 1)[1]))
        if name.startswith("store_span/"):
            return Outcome(*bench_store_span(r, name.split("/", 1)[1]))
        if name.startswith("stride/"):
            level = name.split("/")[1]
            flush, flags = (_flush_bytes(ctx, r) if level == "L2" else (None, []))
            return Outcome(*bench_stride(r, level, flush, flags))
        if name.startswith("sweep/"):
            op, order = name.split("/")[1].split("-")
            spacing, fl = _sweep_spacing(ctx)
            return Outcome(*bench_sweep(r, op, order, spacing, fl))
        if name == "tlb":
            return Outcome(*bench_tlb(r))
        if name.startswith("line/"):
            return Outcome(*bench_line(r, *_line_plan(ctx, name.split("/")[1])))
        if name == "l2map":
            return Outcome(*bench_l2map(r))
        if name.startswith("bandwidth/"):
            return Outcome(*bwm.bench(r, name, _derived(ctx)[0], int(ctx.dev.free_memory()),
                                      ctx.target, ctx.store.results(ctx.run_id)))
        if name == tex.ITEM:
            return Outcome(*tex.bench(r))
        if name.startswith("bank/w"):
            return Outcome(*bench_bank(r, int(name.removeprefix("bank/w"))))
        raise ValueError(f"unknown item {name}")

    def error_results(self, item: Item, flag: str) -> list[Result]:
        return [error_result(item.name, "error", "-", flag)]

    def summarize(self, ctx: Context) -> dict:
        return am.summarize(ctx.store.results(ctx.run_id))


SUITE = MemorySuite()
