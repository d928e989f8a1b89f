"""The tensor-core suite: mma.sync, wmma.mma, mma.sp and wgmma variants of ``catalog/tensor.toml``
(wmma.mma and mma.sp are ``[[mma]]`` entries with a ``form``: same kernels, same checks).

Per variant (one resumable work item): generate the latency and throughput kernels, compile
them as one module, check the SASS (checks.py), then on the GPU:

* latency: one warp (one warpgroup for wgmma), one accumulator chain, two lengths; the slope
  of the region's cycles is the dependent-accumulator latency;
* throughput: one block per SM, W warps x C independent accumulators (wgmma: warpgroups x
  accumulators, groups committed per round, one wait at the end), two lengths; the slope of
  the median SM span gives tensor instructions per cycle per SM, then FLOP/cycle/SM, TFLOP/s
  at the NVML SM clock read right after the launches and % of the datasheet peak scaled to
  that clock (peak.py, reference data data/tensor_peaks.toml);
* layout (mma.sync and mma.sp, native or emulated variants): probe experiments, layout.py
  (numerics: native dense variants); wmma.load / wmma.store: fragments.py;
* per_sass (native variants of several tensor SASS per instruction, e.g. wmma): clock reads
  between the SASS, via single-SASS partners (per_sass.py).

Every kernel is written and compiled for the architecture-specific target (kernels.py
``tensor_arch``: wgmma needs it, mma.sync compiles to the same code).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpudissect.bench.contract import Context, Item, Outcome, Plan, Redo, SuiteBase
from gpudissect.bench.stats import fit_line
from gpudissect.catalog.tensor import (
    LdstVariant,
    MmaVariant,
    TensorCatalog,
    WgmmaVariant,
    element,
    load_tensor_catalog,
)
from gpudissect.device.device import Buf, Device
from gpudissect.kernel.build import Built
from gpudissect.kernel.parallel import pmap
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.timing import row_words
from gpudissect.kernel.toolchain import PtxasError
from gpudissect.store.db import Result
from gpudissect.suites.tensor import layouts
from gpudissect.suites.tensor.analyse import summarize_run
from gpudissect.suites.tensor.checks import (
    TensorCheck,
    Work,
    compile_part,
    family_key,
    parts,
    settle_status,
)
from gpudissect.suites.tensor.kernels import (
    TIMED_REPS,
    ldst_kernel,
    mma_kernel,
    operand_words,
    random_words,
    wgmma_kernel,
)
from gpudissect.suites.tensor.peak import figures, peak_for
from gpudissect.suites.tensor.per_sass import run_per_sass
from gpudissect.target import Target

REPS = TIMED_REPS


@dataclass
class Sweep:
    """The configurations a run measures (stored as the run's parameters)."""

    lat_lengths: tuple[int, ...] = (8, 16, 32)
    thr_lengths: tuple[int, ...] = (16, 32, 64)
    mma_warps: tuple[int, ...] = (8, 16)
    wg_lat_lengths: tuple[int, ...] = (4, 8, 16)
    wg_thr_lengths: tuple[int, ...] = (32, 64, 128)
    # (N values, A sources) for the wgmma sweep; full sweep for the types in ``wg_full``
    wg_n_full: tuple[int, ...] = (8, 16, 32, 64, 128, 192, 256)
    wg_n_other: tuple[int, ...] = (128, 256)
    wg_full: tuple[str, ...] = ("wgmma.f32.f16", "wgmma.f32.bf16")
    wg_configs: tuple[tuple[int, int], ...] = ((1, 2), (1, 3), (2, 2))  # (accs, warpgroups)
    layouts: bool = True

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


QUICK = Sweep(mma_warps=(8,), wg_n_full=(64, 256), wg_n_other=(256,), wg_configs=((1, 2),))


def _mma_chains(v: MmaVariant) -> int:
    return max(1, min(8, 32 // max(v.regs["c"] * element(v.ctype).reg_words, 1)))


def mma_kernels(v: MmaVariant, sweep: Sweep, target: Target, idx: int) -> list[Kernel]:
    ks = []
    for L in sweep.lat_lengths:
        ks.append(mma_kernel(v, f"tc{idx}_lat_c1_n{L}", "latency", 1, L, 1, target))
    c = _mma_chains(v)
    for w in sweep.mma_warps:
        for L in sweep.thr_lengths:
            ks.append(mma_kernel(v, f"tc{idx}_thr_w{w}_c{c}_n{L}", "throughput", c, L, w, target))
    return ks


def wgmma_kernels(v: WgmmaVariant, sweep: Sweep, target: Target, idx: int) -> list[Kernel]:
    ns = sweep.wg_n_full if v.name in sweep.wg_full else sweep.wg_n_other
    ks = []
    for n in ns:
        if n % v.n_step:
            continue
        for a_regs in ((False, True) if v.a_from_registers else (False,)):
            src = "rs" if a_regs else "ss"
            for L in sweep.wg_lat_lengths:
                ks.append(wgmma_kernel(v, f"wg{idx}_{src}_n{n}_lat_n{L}", "latency", n, 1, L, 1, a_regs, target))
            for accs, wgs in sweep.wg_configs:
                if accs * v.d_regs(n) > 128:
                    continue
                for L in sweep.wg_thr_lengths:
                    ks.append(wgmma_kernel(v, f"wg{idx}_{src}_n{n}_a{accs}_g{wgs}_thr_n{L}", "throughput",
                                           n, accs, L, wgs, a_regs, target))
    return ks


def ldst_kernels(v: LdstVariant, sweep: Sweep, target: Target, idx: int) -> list[Kernel]:
    ks = []
    if v.op in ("ldmatrix", "wmma.load"):
        for L in sweep.lat_lengths:
            ks.append(ldst_kernel(v, f"ls{idx}_lat_c1_n{L}", "latency", 1, L, 1, target))
    for w in sweep.mma_warps:
        for L in sweep.thr_lengths:
            ks.append(ldst_kernel(v, f"ls{idx}_thr_w{w}_c4_n{L}", "throughput", 4, L, w, target))
    return ks


def variant_kernels(v: MmaVariant | WgmmaVariant | LdstVariant, sweep: Sweep, target: Target,
                    idx: int) -> list[Kernel]:
    """The timing kernels of one variant (``idx`` keeps their names unique in a run)."""
    if isinstance(v, MmaVariant):
        return mma_kernels(v, sweep, target, idx)
    if isinstance(v, LdstVariant):
        return ldst_kernels(v, sweep, target, idx)
    return wgmma_kernels(v, sweep, target, idx)


def _in_words_mma(v: MmaVariant, reps: int) -> np.ndarray:
    words = [reps, 0]
    words += operand_words(v.atype, v.regs["a"]) + operand_words(v.btype, v.regs["b"])
    words += operand_words(v.ctype, v.regs["c"], "zero")
    return np.array(words, dtype=np.uint32)


def _in_words_wg(v: WgmmaVariant, reps: int) -> np.ndarray:
    words = [reps] + random_words(v.atype, 256, seed=1)
    return np.array(words, dtype=np.uint32)


def _launch(dev: Device, built: Built, k: Kernel, grid: int, words: np.ndarray):
    threads = grid * 32 * k.warps
    warps = grid * k.warps
    tpt = row_words(REPS)
    run = dev.launch(built.cubin, k.name, grid, 32 * k.warps, [
        Buf("tc_in", data=words),
        Buf("tc_out", nbytes=threads * 4),
        Buf("tc_times", nbytes=warps * tpt * 8, read=True, dtype="u8", zero=True),
    ], launches=2)
    t = run.outputs["tc_times"][: warps * tpt].reshape(warps, tpt)
    return t, run.gpu_ms


def _last(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return t[:, 2 * (REPS - 1)].astype(np.int64), t[:, 2 * (REPS - 1) + 1].astype(np.int64), t[:, -1]


def sm_spans(t: np.ndarray, warps_per_block: int) -> tuple[np.ndarray, int]:
    """Span (max end - min start) per SM over the SMs holding the modal number of warps
    (``t``: one row per warp)."""
    t0, t1, sm = _last(t)
    sms, counts = np.unique(sm, return_counts=True)
    modal = int(np.bincount(counts).argmax())
    spans = np.array([t1[sm == s].max() - t0[sm == s].min() for s, c in zip(sms, counts, strict=True)
                      if c == modal])
    return spans, modal


def _cite(b: Built, texts: dict) -> dict:
    texts.update(b.texts())
    return {"ptx_hash": b.ptx_hash, "sass_hash": b.sass_hash}


def _flags_fit(fit, spreads: list[float]) -> list[str]:
    f = []
    if fit.r2 < 0.99:
        f.append(f"poor-fit: r2={fit.r2:.4f}")
    if spreads and max(spreads) > 0.05:
        f.append(f"noisy: SM-span spread up to {max(spreads):.1%}")
    return f


def _launch_failure(e: Exception, b: Built | Exception | None, k: Kernel) -> str:
    """The flag of a failed measurement. A launch refused for its registers is a limit of
    this configuration (too many warps for the kernel's registers), not a fault: say so with
    the kernel's register count (cuobjdump), and let the other configurations stand."""
    text = f"{type(e).__name__}: {e}"
    if "OUT_OF_RESOURCES" in text and isinstance(b, Built):
        try:
            regs = b.regs
        except Exception:  # noqa: BLE001 - the count is a courtesy; the refusal stands
            regs = None
        per = f"{regs} registers per thread x " if regs else ""
        total = f" = {regs * 32 * k.warps} registers" if regs else ""
        return (f"refused: launch of {k.warps} warps refused (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES): "
                f"{per}{32 * k.warps} threads{total} exceed what one block may hold; "
                "other warp counts of this variant are measured")
    return f"error: {text}"[:300]


def measure_families(dev: Device, w: Work, words: np.ndarray, flops_of: Callable[[Kernel], int],
                     atype: str, texts: dict) -> list[Result]:
    v = w.variant
    sm = dev.info.sm_count
    fams: dict[str, list[Kernel]] = {}
    for k in w.kernels:
        fams.setdefault(family_key(k), []).append(k)
    out: list[Result] = []
    peak = peak_for(dev.info.name, atype)
    for key, ks in fams.items():
        chk = w.checks.get(key)
        k0 = ks[0]
        params = {"family": key, "chains": k0.chains, "warps": k0.warps, **k0.meta}
        sass = [f"{c}*{op}" if c != "1" else op for op, c in (chk.sass.items() if chk else [])]
        if chk is None or not chk.ok:
            out.append(Result(v.name, k0.measure, None, "cycles" if k0.measure == "latency" else "instr/cycle/SM",
                              "none", params=params, sass=sass,
                              flags=[f"{chk.status if chk else 'error'}: {chk.reason if chk else 'not built'}"]))
            continue
        xs, ys, raw, spreads, cite, clocks = [], [], {}, [], {}, []
        try:
            for k in sorted(ks, key=lambda k: k.length):
                b = w.built[k.name]
                assert isinstance(b, Built)
                cite = _cite(b, texts)
                if k.measure == "latency":
                    t, _ = _launch(dev, b, k, 1, words)
                    t0, t1, _ = _last(t)
                    c = float(np.median(t1 - t0))
                    raw[str(k.length)] = [int(x) for x in (t1 - t0)[:: max(1, len(t0) // 4)]]
                else:
                    t, ms = _launch(dev, b, k, sm, words)
                    clocks.append(dev.clocks().get("sm_mhz"))
                    spans, warps = sm_spans(t, k.warps)
                    c = float(np.median(spans))
                    q1, q3 = np.percentile(spans, [25, 75])
                    spreads.append(float((q3 - q1) / c) if c else 0.0)
                    raw[str(k.length)] = {"median_sm_span": c, "sms": len(spans), "warps_per_sm": warps,
                                          "gpu_ms": ms, "min": float(spans.min()), "max": float(spans.max())}
                xs.append(k.length)
                ys.append(c)
            fit = fit_line(xs, ys)
        except Exception as e:  # one failing benchmark never takes the sweep down
            out.append(Result(v.name, k0.measure, None, "cycles", "none", params=params, sass=sass,
                              flags=[_launch_failure(e, w.built.get(k.name), k)], **cite))
            continue
        flags = _flags_fit(fit, spreads)
        if k0.measure == "latency":
            per_round = k0.chains  # one instruction per round for chains = 1
            val = fit.slope / per_round if fit.slope > 0 else None
            out.append(Result(v.name, "latency", val, "cycles", "slope of region cycles vs chain length "
                              "(one warp / warpgroup, one accumulator)", params=params, fit=fit.to_json(),
                              samples=raw, flags=flags, sass=sass, **cite))
            continue
        warps = k0.warps
        issuers = warps // 4 if v.kind == "wgmma" else warps
        rate = issuers * k0.chains / fit.slope if fit.slope > 0 else None
        mhz = [c for c in clocks if c]
        obs = float(np.median(mhz)) if mhz else None
        fig = figures(rate, flops_of(k0), sm, obs, peak) if rate else None
        if fig and peak and fig.flop_per_cycle_sm > 1.05 * peak.per_sm_per_cycle():
            # above what the datasheet allows per SM and cycle: the measurement is not trustworthy
            flags.append(f"exceeds-peak: {fig.flop_per_cycle_sm:.0f} FLOP/cycle/SM > datasheet "
                         f"{peak.per_sm_per_cycle():.0f}; measurement suspect")
        params.update({"observed_sm_mhz": obs, "clocks_mhz": clocks})
        samples = {"per_length": raw, "peak": fig.to_json() if fig else None}
        out.append(Result(v.name, "throughput", rate, "instr/cycle/SM",
                          "issuers*accumulators / slope of median SM span vs length", params=params,
                          fit=fit.to_json(), samples=samples, flags=flags, sass=sass, **cite))
    return out


def best_throughput(name: str, rs: list[Result], flops_of_family: dict[str, int]) -> list[Result]:
    """Per (N, A source) for wgmma / per variant for mma: the best clean throughput config."""
    groups: dict[str, list[Result]] = {}
    for r in rs:
        if r.measure != "throughput" or r.value is None or any(
                f.startswith(("poor-fit", "noisy", "exceeds-peak")) for f in r.flags):
            continue
        g = r.params["family"]
        g = g.rsplit("_a", 1)[0] if "_a" in g else "mma"
        groups.setdefault(g, []).append(r)
    out = []
    for g, lst in groups.items():
        best = max(lst, key=lambda r: r.value or 0)
        pk = (best.samples or {}).get("peak") or {}
        params = {"group": g, "best_family": best.params["family"],
                  **{k: best.params.get(k) for k in ("n", "a_from", "warps", "chains", "observed_sm_mhz")},
                  **{k: pk.get(k) for k in ("flop_per_cycle_sm", "tflops", "peak_tflops_scaled", "pct_of_peak")}}
        out.append(Result(name, "throughput_peak", best.value, "instr/cycle/SM",
                          "max over configurations", params=params, flags=sorted(set(best.flags)),
                          sass=best.sass, ptx_hash=best.ptx_hash, sass_hash=best.sass_hash))
    return out


def select(cat: TensorCatalog, patterns: list[str] | None) -> list[MmaVariant | WgmmaVariant | LdstVariant]:
    allv: list[MmaVariant | WgmmaVariant | LdstVariant] = [*cat.mma, *cat.wgmma, *cat.ldst]
    if not patterns:
        return allv
    return [v for v in allv if any(fnmatch.fnmatch(v.name, p) or p in v.name for p in patterns)]


def _error(v, measure: str, unit: str, e: Exception) -> Result:
    return Result(v.name, measure, None, unit, "none", flags=[f"error: {type(e).__name__}: {e}"[:300]])


PART_KERNELS = 24  # kernels per module: a wgmma variant's 156 compile as several, in parallel


def _compiled(job: tuple[Work, list[Kernel], Target, bool]) -> Work:
    """Some of a variant's kernels compiled and checked (in a worker process: the SASS reading
    is Python work that threads would run one at a time), each kernel's resource usage read;
    with ``probe``, the variant's fragment-layout probe kernel built too."""
    w, kernels, target, probe = job
    compile_part(w, kernels, target)
    for b in w.built.values():
        if isinstance(b, Built):
            b.regs  # noqa: B018 - read here, where the cubin's tools run in parallel
    v = w.variant
    if probe and isinstance(v, MmaVariant) and v.form in ("mma", "mma.sp") and layouts.layout_supported(v) is None:
        try:
            w.probe = layouts.build_probe(v, target)
        except Exception:  # noqa: BLE001 - built again (and the failure recorded) when measured
            w.probe = None
    return w


class TensorSuite(SuiteBase):
    """The contract of bench/contract.py: one item per catalog variant. ``sweep``: the
    configurations to measure (default: ``QUICK`` for a quick run, else ``Sweep()``)."""

    name = "tensor"
    description = "tensor cores: mma.sync, wmma, mma.sp, wgmma, ldmatrix/stmatrix, wmma.load/store"

    def __init__(self, sweep: Sweep | None = None):
        self.sweep = sweep

    def plan(self, ctx: Context, patterns: list[str] | None) -> Plan:
        sweep = self.sweep or (QUICK if ctx.quick else Sweep())
        ctx.state["sweep"] = sweep
        return Plan([Item(v.name, v) for v in select(load_tensor_catalog(), patterns)], sweep.to_json())

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        """Generate every variant's kernels, compile and check them (``ctx.jobs`` in parallel)."""
        sweep: Sweep = ctx.state["sweep"]
        works: dict[str, Work] = {}
        for i, item in enumerate(items):
            w = Work(item.data)
            try:
                w.kernels = variant_kernels(item.data, sweep, ctx.target, i)
            except (ValueError, PtxasError) as e:
                w.check = TensorCheck("error", reason=f"generator: {e}")
            works[item.name] = w
        jobs = [(Work(w.variant), part, ctx.target, i == 0) for w in works.values() if w.kernels
                for i, part in enumerate(parts(w.kernels, PART_KERNELS))]
        jobs.sort(key=lambda j: -len(j[1]))  # the largest modules first: no long tail
        for done in pmap(_compiled, jobs, ctx.jobs):
            w = works[done.variant.name]
            w.built.update(done.built)
            w.checks.update(done.checks)
            w.check = w.check or done.check
            w.probe = w.probe or done.probe
        for w in works.values():
            if w.kernels and w.check is not None:  # a module that did not compile fails the variant
                w.built, w.checks = {}, {}
            elif w.kernels:  # the families in kernel order again (the status reads the first latency one)
                order = dict.fromkeys(family_key(k) for k in w.kernels)
                w.checks = {key: w.checks[key] for key in order if key in w.checks}
                settle_status(w)
        ctx.state["works"] = works
        # the static SASS maps made here: per-SASS timing picks its single-SASS partners from them
        ctx.state["known"] = {w.variant.name: w.check for w in works.values()
                              if isinstance(w.variant, MmaVariant) and w.check}

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        sweep: Sweep = ctx.state["sweep"]
        w: Work = ctx.state["works"][item.name]
        v = w.variant
        dev, target = ctx.dev, ctx.target
        texts: dict = {}
        status = w.check.to_json() if w.check else {"status": "error"}
        mapping = Result(v.name, "sass_map", None, "", "SASS per PTX instruction (verify/tensor.py)",
                         params={"status": status["status"], "reason": status.get("reason", ""),
                                 "families": {k: c.to_json() for k, c in w.checks.items()},
                                 "kind": v.kind},
                         sass=[f"{c}*{op}" for op, c in (w.check.sass.items() if w.check else [])],
                         flags=[] if (w.check and w.check.ok) else [f"{status['status']}: {status.get('reason', '')}"])
        results = [mapping]
        if w.kernels and w.built:
            try:
                if isinstance(v, MmaVariant):
                    words = _in_words_mma(v, REPS)
                    # sparse: flops are of the logical (dense-equivalent) shape, compared with
                    # the datasheet's sparse figure ('<type>:sparse' in data/tensor_peaks.toml)
                    pk = f"{v.atype}:sparse" if v.sparse else v.atype
                    rs = measure_families(dev, w, words, lambda k, v=v: v.flops, pk, texts)
                    results += rs + best_throughput(v.name, rs, {})
                    # multi-SASS instructions (wmma): cycles per tensor SASS (never raises)
                    per_sass = run_per_sass(dev, v, w.check, target, texts, known=ctx.state["known"])
                    results += [per_sass] if per_sass else []
                elif isinstance(v, LdstVariant):
                    # 'FLOP' of a load/store = bytes moved per warp instruction (no datasheet peak)
                    words = np.array([REPS, 0], dtype=np.uint32)
                    rs = measure_families(dev, w, words, lambda k, v=v: v.bytes, v.atype, texts)
                    results += rs + best_throughput(v.name, rs, {})
                else:
                    words = _in_words_wg(v, REPS)
                    rs = measure_families(dev, w, words, lambda k, v=v: v.flops(k.meta["n"]), v.atype, texts)
                    results += rs + best_throughput(v.name, rs, {})
            except Exception as e:
                results.append(_error(v, "throughput", "instr/cycle/SM", e))
        if sweep.layouts and isinstance(v, LdstVariant) and v.wmma:
            try:  # the wmma fragment layout: raw data movement, independent of the timing check
                results.append(layouts.run_wmma_fragment(dev, v, load_tensor_catalog().mma, target, texts))
            except Exception as e:
                results.append(_error(v, "layout", "", e))
        # fragment-layout probes of the mma.sync / mma.sp fragments (not wmma's opaque ones),
        # native or emulated (the PTX semantics hold either way; rejected variants are skipped);
        # numerics only on native dense variants
        if (sweep.layouts and isinstance(v, MmaVariant) and v.form in ("mma", "mma.sp") and w.check
                and w.check.status in ("native", "emulated")):
            try:
                results.append(layouts.run_layout(dev, v, target, texts, w.probe))
            except Exception as e:
                results.append(_error(v, "layout", "", e))
            if w.check.ok and v.form == "mma" and v.ctype == "f32" and v.atype in ("f16", "bf16", "tf32"):
                try:
                    results.append(layouts.run_numerics(dev, v, target, texts, w.probe))
                except Exception as e:
                    results.append(_error(v, "numerics", "", e))
        return Outcome(results, texts)

    def summarize(self, ctx: Context) -> dict:
        return summarize_run(ctx.store, ctx.run_id)


SUITE = TensorSuite()
