"""Per-SASS timing of the tensor instructions that ptxas splits into several tensor SASS
(seed 001 Tables 2-3: cumulative cycles per SASS "set" and the interval between sets).

For a native variant whose static check (checks.py) shows n > 1 tensor SASS of one
kind per PTX instruction:

1. the *whole* kernel (step_kernels.py) times the instruction itself: a clock read
   before it, one after it, one after a dependent use of its result; its SASS gives the
   steps (accumulator / A / B sharing of the n tensor SASS, checks.py ``sass_steps``);
2. the *partner*: the first single-SASS mma.sync / mma.sp variant of the catalog whose static
   SASS map (compiled here, cached) is exactly one of that same tensor SASS; candidates with
   the same operand types first, then the others;
3. the *split* kernel issues the n partner instructions with those steps, a clock read before
   the first, after each one and after the dependent use; its SASS must keep that order
   (``check_clock_gaps``), else the variant is recorded as not measurable, with the reason.

One warp, ``ROUNDS`` rounds (the first is dropped as a warm-up), medians over rounds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from gpudissect.arch.target import Target
from gpudissect.catalog.tensor import MmaVariant, element, load_tensor_catalog
from gpudissect.device.args import Buf
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.mma import tensor_arch
from gpudissect.kernel.region import find_region
from gpudissect.kernel.sass import SassInstr
from gpudissect.store.db import Result
from gpudissect.suites.tensor.checks import (
    TENSOR_OP,
    TensorCheck,
    Work,
    check_clock_gaps,
    compile_work,
    sass_steps,
)
from gpudissect.suites.tensor.kernels import mma_kernel
from gpudissect.suites.tensor.step_kernels import ONE_STEP, Steps, stepped_in_words, stepped_kernel

ROUNDS = 17
WARMUP = 1
MEASURE = "per_sass"
STATISTIC = ("median over rounds of the cycles between the clock reads after consecutive tensor SASS "
             "(split kernel: the single-SASS partner issued as the instruction's steps; one warp)")

# static SASS map of the candidate partners: (variant, arch, PTX ISA) -> check
_SINGLE: dict[tuple[str, str, str], TensorCheck] = {}


def multi_sass(check: TensorCheck | None) -> dict[str, int] | None:
    """Tensor SASS per PTX instruction of a native check when more than one (else None)."""
    if check is None or not check.ok or not check.sass:
        return None
    counts = {op: Fraction(c) for op, c in check.sass.items()}
    if sum(counts.values()) <= 1 or any(c.denominator != 1 for c in counts.values()):
        return None
    return {op: int(c) for op, c in counts.items()}


def static_check(p: MmaVariant, target: Target) -> TensorCheck:
    """The static SASS map of one variant (two latency kernels, checks.py), cached."""
    key = (p.name, tensor_arch(target), target.ptx_isa)
    if key not in _SINGLE:
        w = Work(p)
        try:
            w.kernels = [mma_kernel(p, f"ps_lat_c1_n{n}", "latency", 1, n, 1, target) for n in (1, 2)]
        except ValueError as e:
            _SINGLE[key] = TensorCheck("error", reason=str(e))
            return _SINGLE[key]
        compile_work(w, target)
        _SINGLE[key] = w.check or TensorCheck("error", reason="not built")
    return _SINGLE[key]


def find_partner(v: MmaVariant, op: str, candidates: list[MmaVariant], target: Target,
                 known: dict[str, TensorCheck] | None = None) -> MmaVariant | None:
    """The first non-wmma variant whose static map is exactly one ``op`` per instruction;
    candidates with v's operand types are tried first. ``known``: checks already made (the
    suite's, for the variants it compiled); the others are compiled here."""
    cands = [p for p in candidates if p.form != "wmma" and p.name != v.name]
    same = [p for p in cands if (p.atype, p.btype, p.ctype) == (v.atype, v.btype, v.ctype)]
    for p in same + [p for p in cands if p not in same]:
        c = (known or {}).get(p.name) or static_check(p, target)
        if c.ok and c.sass == {op: "1"}:
            return p
    return None


def d_words(v: MmaVariant) -> int:
    return v.regs["d"] * element(v.ctype).reg_words


def _build(v: MmaVariant, steps: Steps, name: str, target: Target) -> tuple[Built, list[SassInstr]]:
    k = stepped_kernel(v, steps, name, target)
    b = build_module([k], tensor_arch(target), region=False)[k.name]
    if not isinstance(b, Built):
        raise RuntimeError(f"{name} not built: {b}")
    return b, b.instrs


def _launch(dev: Device, b: Built, name: str, words: list[int], clocks: int, rounds: int) -> np.ndarray:
    """Lane 0's raw clocks, (rounds, clocks)."""
    run = dev.launch(b.cubin, name, 1, 32, [
        Buf("ps_in", data=np.array(words, dtype=np.uint32)),
        Buf("ps_out", nbytes=32 * 4),
        Buf("ps_times", nbytes=32 * rounds * clocks * 8, read=True, dtype="u8", zero=True),
    ], launches=2)
    t = np.asarray(run.outputs["ps_times"])[: 32 * rounds * clocks].reshape(32, rounds, clocks)
    return t[0].astype(np.int64)


def analyse(split: np.ndarray, whole: np.ndarray, n: int, warmup: int = WARMUP) -> dict:
    """Per-SASS figures from raw clocks: ``split`` (rounds, n + 2): before SASS 1, after each
    SASS, after the dependent use; ``whole`` (rounds, 3): before, after, after the use."""
    s, w = split[warmup:], whole[warmup:]
    ds, dw = np.diff(s, axis=1), np.diff(w, axis=1)
    flags = []
    if not len(s) or not len(w) or (ds <= 0).any() or (dw <= 0).any():
        return {"value": None, "flags": ["bad-clocks: missing or non-increasing clock reads"],
                "split_deltas": ds.tolist(), "whole_deltas": dw.tolist()}
    cum = s[:, 1:] - s[:, :1]  # after SASS 1..n, then complete
    inter = ds[:, 1:n]  # SASS k issued minus SASS k-1 issued, k = 2..n
    value = float(np.median(inter))
    q1, q3 = np.percentile(inter, [25, 75])
    if q3 - q1 > max(2.0, 0.1 * value):
        flags.append(f"varies: interval quartiles {q1:g}..{q3:g} cycles over rounds")
    med = lambda a: [float(x) for x in np.median(a, axis=0)]  # noqa: E731
    split_total = float(np.median(cum[:, -1]))
    whole_total = float(np.median(w[:, 2] - w[:, 0]))
    if abs(split_total - whole_total) > max(4.0 * n, 0.2 * whole_total):
        flags.append(f"split-differs: split {split_total:g} vs instruction {whole_total:g} cycles to the used "
                     "result (the split does not reproduce the instruction's timing)")
    return {
        "value": value, "flags": flags,
        "cumulative_cycles": med(cum)[:n], "cumulative_complete": med(cum)[n],
        "intervals": med(inter), "first_issue": float(np.median(ds[:, 0])), "tail_after_last": float(np.median(ds[:, n])),
        "split_total": split_total, "whole_issue": float(np.median(w[:, 1] - w[:, 0])),
        "whole_total": whole_total, "split_minus_whole": split_total - whole_total,
        "split_deltas": ds.tolist(), "whole_deltas": dw.tolist(),
    }


def _fail(v: MmaVariant, sass: list[str], params: dict, flag: str, **cite) -> Result:
    return Result(v.name, MEASURE, None, "cycles", "none", params=params, sass=sass, flags=[flag[:400]], **cite)


@dataclass
class PerSassBuild:
    """A variant's per-SASS kernels, built (:func:`build_per_sass`: in the suite's compile pool,
    beside the GPU), or the flag of why it cannot be timed (``fail``)."""

    sass: list[str]
    params: dict
    n: int = 0
    steps: Steps | None = None
    partner: MmaVariant | None = None
    whole: Built | None = None
    split: Built | None = None
    cite: dict = field(default_factory=dict)
    fail: str | None = None

    def texts(self) -> dict:
        return {k: t for b in (self.whole, self.split) if b is not None for k, t in b.texts().items()}


def build_per_sass(v: MmaVariant, check: TensorCheck | None, target: Target,
                   candidates: list[MmaVariant] | None = None,
                   known: dict[str, TensorCheck] | None = None) -> PerSassBuild | None:
    """The whole and split kernels of a multi-SASS native variant, built and checked (None for
    any other variant). Never raises: a failure is the build's ``fail`` flag."""
    counts = multi_sass(check)
    if counts is None:
        return None
    pre = PerSassBuild([f"{c}*{op}" for op, c in counts.items()], {"tensor_sass": counts})
    params = pre.params
    t0 = time.perf_counter()
    try:
        if len(counts) != 1:
            pre.fail = "not-measurable: mixed tensor SASS kinds in one instruction (no single partner)"
            return pre
        (op, n), = counts.items()
        pre.n = n
        pre.whole, winstrs = _build(v, ONE_STEP, "ps_whole", target)
        pre.steps = steps = Steps(*sass_steps([i for i in find_region(winstrs) if TENSOR_OP.match(i.opcode)]))
        params["steps"] = steps.to_json()
        # each tensor SASS writes one accumulator: the instruction's D split over the accumulators
        wchk = check_clock_gaps(winstrs, [n, 0], d_words(v) // steps.count("acc"))
        params["whole_check"] = {"ok": wchk.ok, "reason": wchk.reason, "gaps": wchk.gaps}
        if not wchk.ok:
            pre.fail = f"not-measurable: whole kernel: {wchk.reason}"
            return pre
        p = find_partner(v, op, candidates if candidates is not None else load_tensor_catalog().mma, target,
                         known)
        if p is None:
            pre.fail = f"not-measurable: no single-SASS variant in the catalog maps to {op}"
            return pre
        params["partner"] = p.name
        pre.partner = p
        pre.split, sinstrs = _build(p, steps, "ps_split", target)
        schk = check_clock_gaps(sinstrs, [1] * n + [0], d_words(p))
        pre.cite = {"ptx_hash": pre.split.ptx_hash, "sass_hash": pre.split.sass_hash}
        params["split_check"] = {"ok": schk.ok, "reason": schk.reason, "gaps": schk.gaps}
        params["compile_s"] = round(time.perf_counter() - t0, 3)
        if not schk.ok:
            pre.fail = f"not-measurable: split kernel: {schk.reason}"
    except Exception as e:  # one failing benchmark never takes the sweep down
        pre.fail = f"error: {type(e).__name__}: {e}"
    return pre


def run_per_sass(dev: Device, v: MmaVariant, check: TensorCheck | None, target: Target, texts: dict,
                 rounds: int = ROUNDS, candidates: list[MmaVariant] | None = None,
                 known: dict[str, TensorCheck] | None = None, pre: PerSassBuild | None = None) -> Result | None:
    """The per-SASS Result of a multi-SASS native variant (None for any other variant), from its
    kernels (``pre``: built beforehand, else built here). Never raises: a failure is a flagged
    Result with value None."""
    pre = pre or build_per_sass(v, check, target, candidates, known)
    if pre is None:
        return None
    texts.update(pre.texts())
    sass, params = pre.sass, dict(pre.params)
    if pre.fail is not None:
        return _fail(v, sass, params, pre.fail, **pre.cite)
    assert pre.split is not None and pre.whole is not None and pre.partner is not None and pre.steps is not None
    n = pre.n
    try:
        split = _launch(dev, pre.split, "ps_split", stepped_in_words(pre.partner, pre.steps, rounds), n + 2, rounds)
        whole = _launch(dev, pre.whole, "ps_whole", stepped_in_words(v, ONE_STEP, rounds), 3, rounds)
        a = analyse(split, whole, n)
    except Exception as e:  # one failing benchmark never takes the sweep down
        return _fail(v, sass, params, f"error: {type(e).__name__}: {e}")
    samples = {"split_deltas": a.pop("split_deltas"), "whole_deltas": a.pop("whole_deltas"),
               "warmup_rounds_dropped": WARMUP}
    value, flags = a.pop("value"), a.pop("flags")
    params.update(a, rounds=rounds)
    return Result(v.name, MEASURE, value, "cycles", STATISTIC if value is not None else "none", params=params,
                  samples=samples, flags=flags, sass=sass, **pre.cite)
