"""The GPU half of ``predict --validate``: build every validation loop, check that the loop in its
cubin is the one predicted, time it at each occupancy point and write the raw measurements.

Generated loops run at 1 warp per SM and at the fullest occupancy their registers and shared
memory allow; real loops and the tensor model's mma.sync loops at 1, 4 and full; wgmma loops
(a warpgroup at least; built for the architecture-specific target) at 4, 8 and full; the
branch-calibration loops at 1. One launch per
(loop, occupancy point) after a discarded warm-up launch; the region's first repetition (cold
instruction cache) is dropped. A point's value is the median over the SMs that got the
intended warps and the kept repetitions of the SM's span / ``ITERS`` (see
:func:`summarize_times`). A loop that fails (does not build, no single timed
loop, a launch error) is written with its error and the sweep goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.control import kernel_words
from gpudissect.kernel.ptx import ptx_header
from gpudissect.kernel.sass import labels_of
from gpudissect.kernel.toolchain import disassemble, sha256, tool_version
from gpudissect.predict.harness import ITERS, REPS, LoopNotFound, LoopSpec, kernel_of, timed_loop

SCHEMA = "gpudissect.predict-validation/1"
PER_MODULE = 48
POINTS = {"generated": ("1", "full"), "calibration": ("1",),  # every other category: REAL_WARPS
          "tensor_wgmma": ("4", "8", "full"), "wgmma_gemm": ("4", "8", "full")}  # a warpgroup at least
REAL_WARPS = ("1", "4", "full")


@dataclass(frozen=True)
class Launch:
    warps: int  # per SM
    block_warps: int
    blocks_per_sm: int


def full_launch(regs: int, smem: int, rules: dict) -> Launch:
    """The most warps per SM the occupancy rules allow this kernel (blocks of 32, 16, 8 or 4
    warps; a multiple of the 4 schedulers)."""
    from gpudissect.arch.occupancy import predict_blocks

    best = Launch(4, 4, 1)
    for bw in (32, 16, 8, 4):
        nb = predict_blocks(bw * 32, regs, smem, rules)["blocks"]
        nb = min(nb, rules["max_warps_per_sm"] // bw)
        if nb >= 1 and bw * nb > best.warps:
            best = Launch(bw * nb, bw, nb)
    return best


def launch_for(point: str, regs: int, smem: int, rules: dict) -> Launch:
    if point == "full":
        return full_launch(regs, smem, rules)
    w = int(point)
    return Launch(w, w, 1)


def loop_record(spec: LoopSpec, b: Built, labels: dict[str, int]) -> dict:
    """What the analysis needs of a built loop: its SASS lines and control words."""
    lp = timed_loop(spec.name, b.instrs, b.region, labels)
    words = {o: hi for o, _lo, hi in kernel_words(b.cubin)[spec.name]}
    lines = [i.text for i in lp.body]
    return {"start": lp.start, "end": lp.end, "sass": lines,
            "control_hi": [f"{words[i.offset]:#018x}" for i in lp.body],
            "sass_hash": sha256("\n".join(lines))}


def summarize_times(times: np.ndarray, want: int) -> dict:
    """Cycles per iteration from one launch's rows (kernel/timing.py layout), over the SMs that
    ran ``want`` warps and every kept repetition: ``cycles_per_iter``, the median over SMs of
    the SM's span (its first warp's start to its last warp's end) / ITERS, what all its warps
    together take per iteration (the scheduler need not share its cycles fairly, so one warp's
    own region can end early); ``warp_cycles_per_iter``, the median of the warps' own regions."""
    sm = times[:, -1].astype(np.int64)
    ids, inv, counts = np.unique(sm, return_inverse=True, return_counts=True)
    good = counts == want
    flags = []
    if not good.any():
        good = np.ones_like(good)
        flags.append(f"no SM ran {want} warps (per-SM warps {sorted(set(counts.tolist()))})")
    elif not good.all():
        flags.append(f"{int((~good).sum())} of {len(ids)} SMs ran other than {want} warps: left out")
    keep = good[inv]
    spans, warp = [], []
    for r in range(1, REPS):
        t0 = times[:, 2 * r].astype(np.int64)
        t1 = times[:, 2 * r + 1].astype(np.int64)
        first = np.full(len(ids), np.iinfo(np.int64).max)
        last = np.full(len(ids), np.iinfo(np.int64).min)
        np.minimum.at(first, inv, t0)
        np.maximum.at(last, inv, t1)
        spans.append((last - first)[good] / ITERS)
        warp.append((t1 - t0)[keep] / ITERS)
    sp, wc = np.concatenate(spans), np.concatenate(warp)
    return {"cycles_per_iter": float(np.median(sp)),
            "span_rep_medians": [float(np.median(x)) for x in spans],
            "span_p10": float(np.percentile(sp, 10)), "span_p90": float(np.percentile(sp, 90)),
            "warp_cycles_per_iter": float(np.median(wc)),
            "warp_p10": float(np.percentile(wc, 10)), "warp_p90": float(np.percentile(wc, 90)),
            "sms": int(good.sum()), "warps_timed": int(keep.sum()), "flags": flags}


def spec_arch(spec: LoopSpec, arch: str, specific: str | None) -> str:
    """The target a loop is built for: the architecture-specific one for wgmma loops."""
    return (specific or arch) if spec.arch_specific else arch


def build_all(specs: list[LoopSpec], arch: str, ptx_isa: str,
              specific: str | None = None) -> dict[str, tuple[Built, dict] | str]:
    """Each loop's build and loop record, or why it has none (one line); loops that need the
    architecture-specific target (``specific``) are built in modules of their own."""
    out: dict[str, tuple[Built, dict] | str] = {}
    for a in dict.fromkeys(spec_arch(s, arch, specific) for s in specs):
        _build_some([s for s in specs if spec_arch(s, arch, specific) == a], a, ptx_isa, out)
    return out


def _build_some(specs: list[LoopSpec], arch: str, ptx_isa: str, out: dict) -> None:
    header = ptx_header(ptx_isa, arch)
    for i in range(0, len(specs), PER_MODULE):
        chunk = specs[i:i + PER_MODULE]
        try:
            built = build_module([kernel_of(s, header) for s in chunk], arch)
        except Exception as e:  # a module that does not assemble: its loops fail, the rest go on
            for s in chunk:
                out[s.name] = f"build: {str(e).strip().splitlines()[0] if str(e).strip() else e}"
            continue
        some = next((b for b in built.values() if isinstance(b, Built)), None)
        labels = labels_of(disassemble(some.cubin)) if some else {}
        for s in chunk:
            b = built[s.name]
            if isinstance(b, Exception):
                out[s.name] = f"build: {b}"
                continue
            if b.spills:
                out[s.name] = "build: the kernel spills (LDL/STL)"
                continue
            try:
                out[s.name] = (b, loop_record(s, b, labels.get(s.name, {})))
            except LoopNotFound as e:
                out[s.name] = f"loop: {e}"


def measure(dev, specs: list[LoopSpec], arch: str, ptx_isa: str, rules: dict,
            log=print, specific: str | None = None) -> dict:
    """Build, verify and time ``specs`` on ``dev``; the raw measurement document."""
    t_start = time.perf_counter()
    built = build_all(specs, arch, ptx_isa, specific)
    log(f"built {len(specs)} loops in {time.perf_counter() - t_start:.1f} s "
        f"({sum(isinstance(v, str) for v in built.values())} refused)")
    nsm = dev.info.sm_count
    loops = []
    for s in specs:
        rec: dict = {"name": s.name, "category": s.category, "meta": dict(s.meta),
                     "ptx_hash": sha256(kernel_of(s, ptx_header(ptx_isa, spec_arch(s, arch, specific))).ptx)}
        got = built[s.name]
        if isinstance(got, str):
            rec["error"] = got
            loops.append(rec)
            continue
        b, lrec = got
        rec.update(loop=lrec, regs=b.regs, smem=s.smem, points=[])
        for point in POINTS.get(s.category, REAL_WARPS):
            ln = launch_for(point, b.regs, s.smem, rules)
            try:
                res = dev.run(b.cubin, s.name, list(b.kernel.inputs), b.kernel.n_sink, REPS,
                              ln.blocks_per_sm * nsm, ln.block_warps * 32, launches=2)
                summ = summarize_times(res[-1].times, ln.warps)
            except Exception as e:  # one failing point never takes the sweep down
                rec["points"].append({"point": point, "warps": ln.warps, "error": f"{type(e).__name__}: {e}"})
                continue
            rec["points"].append({"point": point, "warps": ln.warps, "block_warps": ln.block_warps,
                                  "blocks_per_sm": ln.blocks_per_sm, **summ})
        loops.append(rec)
    log(f"measured in {time.perf_counter() - t_start:.1f} s")
    clocks = {}
    try:
        clocks = dev.clocks()
    except Exception as e:
        clocks = {"error": str(e)}
    return {"schema": SCHEMA, "arch": arch, "gpu": dev.info.to_json(), "clocks": clocks,
            "ptxas": tool_version("ptxas"), "iters": ITERS, "reps": REPS,
            "statistic": "median over SMs and kept repetitions of the SM's span (first start to last end) / iters",
            "loops": loops}

