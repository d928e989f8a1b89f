"""The GPU half of the corpus (``predict --validate``): each public kernel, launched as its
``kernels.toml`` says, at each occupancy point and trip count; its loop's cycles from the two
clock reads the harness added around it (``corpus/gd_timing.h``).

Per (case, point): for each trip count T, ``REPEATS`` calls of two launches each (the first
warms the caches and the instruction cache; its times are overwritten by the second's). Per
launch, the span of each SM (its first warp's start to its last warp's end) over the SMs that ran
the intended warps; the value at T is the median over SMs and calls. Cycles per trip of the SASS
loop: the least-squares slope of that value over T (fixed costs: the clock reads, the loop's
entry and exit, the warps' start skew, fall out), times the loop's unroll. One failing point is
written with its error and the sweep goes on.
"""

from __future__ import annotations

import time

import numpy as np

from gpudissect.predict.corpus import (
    CorpusKernel,
    Launch,
    Pool,
    array_of,
    count_of,
    env_of,
    footprint,
    launches,
    scalar_of,
)

REPEATS = 3
LOOP_KEYS = ("start", "end", "sass", "control_hi", "sass_hash", "skippable", "left_out", "lanes")  # of the index
SCHEMA = "gpudissect.corpus-measurement/1"


def spans(times: np.ndarray, want: int) -> tuple[np.ndarray, list[str]]:
    """Each SM's span (max end - min start) from the rows (start, end, SM id) of one launch, over
    the SMs that ran ``want`` warps (all SMs, flagged, when none did)."""
    sm = times[:, 2]
    ids, inv, counts = np.unique(sm, return_inverse=True, return_counts=True)
    first = np.full(len(ids), np.iinfo(np.int64).max)
    last = np.full(len(ids), np.iinfo(np.int64).min)
    np.minimum.at(first, inv, times[:, 0])
    np.maximum.at(last, inv, times[:, 1])
    good = counts == want
    flags = []
    if not good.any():
        good[:] = True
        flags.append(f"no SM ran {want} warps (per-SM warps {sorted(set(counts.tolist()))})")
    return (last - first)[good].astype(float), flags


def slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope of ys over xs and the largest residual relative to the fit's value."""
    a, b = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    fit = a * np.asarray(xs) + b
    rel = float(np.max(np.abs(np.asarray(ys) - fit) / np.maximum(np.abs(fit), 1e-9)))
    return float(a), rel


def _args(k: CorpusKernel, env: dict, pool: Pool, warps_total: int) -> list:
    from gpudissect.device.args import Buf

    out: list = []
    for i, a in enumerate(k.args):
        if "buf" in a:  # one device buffer per argument position, reused (grown) kernel to kernel
            data = array_of(a, env, pool)
            out.append(Buf(f"corpus{i}", max(int(data.nbytes), 16), data=data if data.size else None,
                           zero=not data.size))
        else:
            out.append(scalar_of(a, env))
    out.append(Buf("gd_times", 24 * warps_total, read=True, dtype="i8", zero=True))
    return out


def measure_point(dev, k: CorpusKernel, cubin: bytes, ln: Launch, trips: tuple[int, ...], pool: Pool) -> dict:
    sms = dev.info.sm_count
    grid = ln.blocks_per_sm * sms
    per_t, raw, flags = [], [], []
    fp = 0
    for t in trips:
        env = env_of(ln, sms, t)
        fp = max(fp, footprint(k, env))
        args = _args(k, env, pool, grid * ln.block_threads // 32)
        smem = count_of(k.smem, env)
        vals, wvals = [], []
        for _ in range(REPEATS):
            run = dev.launch(cubin, k.symbol, grid, ln.block, args, smem=smem, launches=2)
            rows = run.outputs["gd_times"].reshape(-1, 3).astype(np.int64)
            sp, fl = spans(rows, ln.warps)
            flags += fl
            vals.append(float(np.median(sp)))
            wvals.append(float(np.median(rows[:, 1] - rows[:, 0])))
            args = [_no_data(a) if getattr(a, "name", "gd_times") != "gd_times" else a for a in args]
        per_t.append(float(np.median(vals)))
        raw.append({"trips": t, "span_medians": vals, "warp_medians": wvals})
    cyc, resid = slope(list(trips), per_t)
    return {"point": ln.point, "warps": ln.warps, "block": list(ln.block), "blocks_per_sm": ln.blocks_per_sm,
            "trips": list(trips), "span": per_t, "cycles_per_source_iter": cyc,
            "cycles_per_iter": cyc * k.unroll, "fit_residual": resid, "footprint": fp,
            "raw": raw, "flags": sorted(set(flags))}


def _no_data(buf):
    """The same device buffer, not uploaded again (its contents stay from the first call)."""
    from gpudissect.device.args import Buf

    return Buf(buf.name, buf.nbytes, read=buf.read, dtype=buf.dtype)


def measure_corpus(dev, kernels: list[CorpusKernel], index: dict, rules: dict, arch: str,
                   log=print) -> list[dict]:
    """One record per kernel: its provenance, loop record (from the index) and measured points."""
    t0 = time.perf_counter()
    out = []
    pool = Pool()
    for k in kernels:
        rec: dict = {"name": k.name, "project": k.project, "source": k.source, "licence": k.licence,
                     "what": k.what, "symbol": k.symbol, "unroll": k.unroll, "split": k.split, "cases": []}
        ix = index.get("kernels", {}).get(k.name)
        try:
            cubin = k.cubin_path(arch).read_bytes()
        except OSError as e:
            ix, rec["error"] = None, f"cubin: {e}"
        if ix is None:
            rec.setdefault("error", "not in corpus/index.json (run scripts/build_corpus.py)")
            out.append(rec)
            continue
        rec["loop"] = {key: ix[key] for key in LOOP_KEYS if key in ix}
        rec.update(regs=ix["regs"], smem_static=ix["smem_static"], cubin_sha256=ix["cubin_sha256"])
        for case in k.cases:
            c = {"category": case.category, "points": []}
            smem = ix["smem_static"] + count_of(k.smem, env_of(Launch("1", 1, (32, 1, 1), 1), 1, case.trips[0]))
            for ln in launches(k, case, ix["regs"], smem, rules):
                try:
                    c["points"].append(measure_point(dev, k, cubin, ln, case.trips, pool))
                except Exception as e:  # one failing point never takes the sweep down
                    c["points"].append({"point": ln.point, "warps": ln.warps,
                                        "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
            rec["cases"].append(c)
        out.append(rec)
        log(f"corpus {k.name}: {sum(len(c['points']) for c in rec['cases'])} points "
            f"({time.perf_counter() - t0:.0f} s)")
    return out
