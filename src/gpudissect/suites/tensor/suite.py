"""The tensor-core suite: mma.sync, wmma.mma, mma.sp and wgmma variants of ``catalog/tensor.toml``
(wmma.mma and mma.sp are ``[[mma]]`` entries with a ``form``: same kernels, same checks).

Per variant (one resumable work item): generate the latency and throughput kernels, compile
them as one module, check the SASS (verify/tensor.py), then on the GPU:

* latency: one warp (one warpgroup for wgmma), one accumulator chain, two lengths; the slope
  of the region's cycles is the dependent-accumulator latency;
* throughput: one block per SM, W warps x C independent accumulators (wgmma: warpgroups x
  accumulators, groups committed per round, one wait at the end), two lengths; the slope of
  the median SM span gives tensor instructions per cycle per SM, then FLOP/cycle/SM, TFLOP/s
  at the NVML SM clock read right after the launches and % of the datasheet peak scaled to
  that clock (analyse/peak.py, reference data data/tensor_peaks.toml);
* layout (mma.sync and mma.sp, native or emulated variants): probe experiments,
  analyse/layout.py (numerics: native dense variants);
* per_sass (native variants of several tensor SASS per instruction, e.g. wmma): clock reads
  between the SASS, via single-SASS partners (run/tensor_steps.py).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from gpudissect.bench.stats import fit_line
from gpudissect.device.device import Buf
from gpudissect.kernel.toolchain import PtxasError, resource_usage, tool_version
from gpudissect.store.db import Result, Store
from gpudissect.suites.instructions.template import ptx_isa_for
from gpudissect.suites.tensor.checks import (
    ADDRESS_ADD,
    LDST_OP,
    WMMA_LDST_OP,
    BuiltKernel,
    TensorCheck,
    build_entries,
    check_tensor_family,
    compile_failure,
)
from gpudissect.suites.tensor.kernels import (
    LdstVariant,
    MmaVariant,
    TensorKernel,
    WgmmaVariant,
    ldst_kernel,
    load_tensor_catalog,
    mma_kernel,
    operand_words,
    random_words,
    wgmma_kernel,
)
from gpudissect.suites.tensor.peak import figures, peak_for

SUITE = "tensor"
REPS = 3


@dataclass
class Plan:
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


QUICK = Plan(mma_warps=(8,), wg_n_full=(64, 256), wg_n_other=(256,), wg_configs=((1, 2),))


@dataclass
class Work:
    variant: MmaVariant | WgmmaVariant
    kernels: list[TensorKernel] = field(default_factory=list)
    built: dict[str, BuiltKernel | Exception] = field(default_factory=dict)
    check: TensorCheck | None = None
    checks: dict[str, TensorCheck] = field(default_factory=dict)  # per family (wgmma: per N/source)


def _mma_chains(v: MmaVariant) -> int:
    return max(1, min(8, 32 // max(v.regs["c"] * (2 if v.ctype == "f64" else 1), 1)))


def mma_kernels(v: MmaVariant, plan: Plan, isa: str, idx: int) -> list[TensorKernel]:
    ks = []
    for L in plan.lat_lengths:
        ks.append(mma_kernel(v, f"tc{idx}_lat_c1_n{L}", "latency", 1, L, 1, isa))
    c = _mma_chains(v)
    for w in plan.mma_warps:
        for L in plan.thr_lengths:
            k = mma_kernel(v, f"tc{idx}_thr_w{w}_c{c}_n{L}", "throughput", c, L, w, isa)
            ks.append(k)
    return ks


def wgmma_kernels(v: WgmmaVariant, plan: Plan, isa: str, idx: int) -> list[TensorKernel]:
    ns = plan.wg_n_full if v.name in plan.wg_full else plan.wg_n_other
    ks = []
    for n in ns:
        if n % v.n_step:
            continue
        for a_regs in ((False, True) if v.a_from_registers else (False,)):
            src = "rs" if a_regs else "ss"
            for L in plan.wg_lat_lengths:
                ks.append(wgmma_kernel(v, f"wg{idx}_{src}_n{n}_lat_n{L}", "latency", n, 1, L, 1, a_regs, isa))
            for accs, wgs in plan.wg_configs:
                if accs * v.d_regs(n) > 128:
                    continue
                for L in plan.wg_thr_lengths:
                    ks.append(wgmma_kernel(v, f"wg{idx}_{src}_n{n}_a{accs}_g{wgs}_thr_n{L}", "throughput",
                                           n, accs, L, wgs, a_regs, isa))
    return ks


def ldst_kernels(v: LdstVariant, plan: Plan, isa: str, idx: int) -> list[TensorKernel]:
    ks = []
    if v.op in ("ldmatrix", "wmma.load"):
        for L in plan.lat_lengths:
            ks.append(ldst_kernel(v, f"ls{idx}_lat_c1_n{L}", "latency", 1, L, 1, isa))
    for w in plan.mma_warps:
        for L in plan.thr_lengths:
            ks.append(ldst_kernel(v, f"ls{idx}_thr_w{w}_c4_n{L}", "throughput", 4, L, w, isa))
    return ks


def family_key(k: TensorKernel) -> str:
    """Kernels that differ only in length form one family."""
    return k.name.rsplit("_n", 1)[0]


def compile_work(w: Work, arch: str) -> None:
    ks = w.kernels
    try:
        w.built = build_entries(ks[0].head, [(k.name, k.entry, k.units) for k in ks], arch)
    except Exception as e:  # ptxas rejects the module: unsupported or a generator bug
        w.check = compile_failure(e)
        return
    fams: dict[str, list[BuiltKernel]] = {}
    for k in ks:
        b = w.built.get(k.name)
        if isinstance(b, BuiltKernel):
            fams.setdefault(family_key(k), []).append(b)
    ldst = isinstance(w.variant, LdstVariant)
    op_re = (WMMA_LDST_OP if w.variant.wmma else LDST_OP) if ldst else None
    for key, bs in fams.items():
        try:
            w.checks[key] = (check_tensor_family(bs, op_re=op_re, companion=ADDRESS_ADD,
                                                 companion_max=w.variant.regs + 1,
                                                 lowering_ok=w.variant.wmma) if op_re
                             else check_tensor_family(bs))
        except ValueError as e:
            w.checks[key] = TensorCheck("error", reason=str(e))
    # the variant's status: its latency family (smallest N for wgmma) decides
    lat = [c for key, c in w.checks.items() if "_lat" in key] or list(w.checks.values())
    w.check = lat[0] if lat else TensorCheck("error", reason="no latency kernel built")
    if any(c.ok for c in w.checks.values()) and not w.check.ok:
        w.check = next(c for c in w.checks.values() if c.ok)


def _in_words_mma(v: MmaVariant, reps: int) -> np.ndarray:
    words = [reps, 0]
    words += operand_words(v.atype, v.regs["a"]) + operand_words(v.btype, v.regs["b"])
    words += operand_words(v.ctype, v.regs["c"], "zero")
    return np.array(words, dtype=np.uint32)


def _in_words_wg(v: WgmmaVariant, reps: int) -> np.ndarray:
    words = [reps] + random_words(v.atype, 256, seed=1)
    return np.array(words, dtype=np.uint32)


def _launch(dev, built: BuiltKernel, k: TensorKernel, grid: int, words: np.ndarray):
    threads = grid * 32 * k.warps
    tpt = 2 * REPS + 1
    run = dev.launch(built.cubin, k.name, grid, 32 * k.warps, [
        Buf("tc_in", data=words),
        Buf("tc_out", nbytes=threads * 4),
        Buf("tc_times", nbytes=threads * tpt * 8, read=True, dtype="u8", zero=True),
    ], launches=2)
    t = run.outputs["tc_times"][: threads * tpt].reshape(threads, tpt)
    return t, run.gpu_ms


def _last(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return t[:, 2 * (REPS - 1)].astype(np.int64), t[:, 2 * (REPS - 1) + 1].astype(np.int64), t[:, -1]


def sm_spans(t: np.ndarray, warps_per_block: int) -> tuple[np.ndarray, int]:
    """Span (max end - min start) per SM over the SMs holding the modal number of warps."""
    t0, t1, sm = _last(t)
    sms, counts = np.unique(sm, return_counts=True)
    modal = int(np.bincount(counts).argmax())
    spans = np.array([t1[sm == s].max() - t0[sm == s].min() for s, c in zip(sms, counts, strict=True)
                      if c == modal])
    return spans, modal // 32


def _cite(b: BuiltKernel, texts: dict) -> dict:
    texts[b.ptx_hash] = ("ptx", b.ptx)
    texts[b.sass_hash] = ("sass", b.sass)
    return {"ptx_hash": b.ptx_hash, "sass_hash": b.sass_hash}


def _flags_fit(fit, spreads: list[float]) -> list[str]:
    f = []
    if fit.r2 < 0.99:
        f.append(f"poor-fit: r2={fit.r2:.4f}")
    if spreads and max(spreads) > 0.05:
        f.append(f"noisy: SM-span spread up to {max(spreads):.1%}")
    return f


def _launch_failure(e: Exception, b: BuiltKernel | Exception | None, k: TensorKernel) -> str:
    """The flag of a failed measurement. A launch refused for its registers is a limit of
    this configuration (too many warps for the kernel's registers), not a fault: say so with
    the kernel's register count (cuobjdump), and let the other configurations stand."""
    text = f"{type(e).__name__}: {e}"
    if "OUT_OF_RESOURCES" in text and isinstance(b, BuiltKernel):
        try:
            regs = resource_usage(b.cubin).get(k.name, {}).get("REG")
        except Exception:  # noqa: BLE001 - the count is a courtesy; the refusal stands
            regs = None
        per = f"{regs} registers per thread x " if regs else ""
        total = f" = {regs * 32 * k.warps} registers" if regs else ""
        return (f"refused: launch of {k.warps} warps refused (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES): "
                f"{per}{32 * k.warps} threads{total} exceed what one block may hold; "
                "other warp counts of this variant are measured")
    return f"error: {text}"[:300]


def measure_families(dev, w: Work, words: np.ndarray, flops_of: Callable[[TensorKernel], int],
                     atype: str, texts: dict) -> list[Result]:
    v = w.variant
    sm = dev.info.sm_count
    fams: dict[str, list[TensorKernel]] = {}
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
                assert isinstance(b, BuiltKernel)
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


def select(cat, patterns: list[str] | None) -> list[MmaVariant | WgmmaVariant]:
    allv: list[MmaVariant | WgmmaVariant | LdstVariant] = [*cat.mma, *cat.wgmma, *cat.ldst]
    if not patterns:
        return allv
    return [v for v in allv if any(fnmatch.fnmatch(v.name, p) or p in v.name for p in patterns)]


def run_suite(dev, store: Store, patterns: list[str] | None, *, arch: str = "sm_90a", quick: bool = False,
              resume: bool = True, jobs: int = 8, progress=None, plan: Plan | None = None) -> tuple[int, dict]:
    from gpudissect import __version__

    plan = plan or (QUICK if quick else Plan())
    if not arch.endswith("a") and arch == "sm_90":
        arch = "sm_90a"  # wgmma needs the architecture-specific target; mma is the same code
    toolkit = f"ptxas {tool_version('ptxas')}"
    run_id = store.unfinished_run(SUITE, dev.info.uuid) if resume else None
    if run_id is None:
        run_id = store.start_run(SUITE, dev.info, toolkit, arch, dev.clocks(), plan.to_json(), __version__)
    done = store.done_items(run_id)
    cat = load_tensor_catalog()
    vs = [v for v in select(cat, patterns) if v.name not in done]
    isa = ptx_isa_for(tool_version("ptxas"))
    timing = {"compile_s": 0.0, "gpu_s": 0.0, "layout_s": 0.0, "store_s": 0.0}
    t = time.perf_counter()
    works = []
    for i, v in enumerate(vs):
        w = Work(v)
        try:
            if isinstance(v, MmaVariant):
                w.kernels = mma_kernels(v, plan, isa, i)
            elif isinstance(v, LdstVariant):
                w.kernels = ldst_kernels(v, plan, isa, i)
            else:
                w.kernels = wgmma_kernels(v, plan, isa, i)
        except (ValueError, PtxasError) as e:
            w.check = TensorCheck("error", reason=f"generator: {e}")
        works.append(w)
    with ThreadPoolExecutor(max(1, jobs)) as ex:
        list(ex.map(lambda w: compile_work(w, arch) if w.kernels else None, works))
    timing["compile_s"] = time.perf_counter() - t

    from gpudissect.suites.tensor.layouts import run_layout, run_numerics, run_wmma_fragment
    from gpudissect.suites.tensor.per_sass import run_per_sass

    # the static SASS maps made above: per-SASS timing picks its single-SASS partners from them
    known = {w.variant.name: w.check for w in works if isinstance(w.variant, MmaVariant) and w.check}
    for n, w in enumerate(works):
        v = w.variant
        if progress:
            progress(v.name, n, len(works))
        texts: dict = {}
        status = w.check.to_json() if w.check else {"status": "error"}
        mapping = Result(v.name, "sass_map", None, "", "SASS per PTX instruction (verify/tensor.py)",
                         params={"status": status["status"], "reason": status.get("reason", ""),
                                 "families": {k: c.to_json() for k, c in w.checks.items()},
                                 "kind": v.kind},
                         sass=[f"{c}*{op}" for op, c in (w.check.sass.items() if w.check else [])],
                         flags=[] if (w.check and w.check.ok) else [f"{status['status']}: {status.get('reason', '')}"])
        results = [mapping]
        t = time.perf_counter()
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
                    per_sass = run_per_sass(dev, v, w.check, isa, arch, texts, known=known)
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
                results.append(Result(v.name, "throughput", None, "instr/cycle/SM", "none",
                                      flags=[f"error: {type(e).__name__}: {e}"[:300]]))
        timing["gpu_s"] += time.perf_counter() - t
        t = time.perf_counter()
        if plan.layouts and isinstance(v, LdstVariant) and v.wmma:
            try:  # the wmma fragment layout: raw data movement, independent of the timing check
                results.append(run_wmma_fragment(dev, v, cat.mma, isa, arch, texts))
            except Exception as e:
                results.append(Result(v.name, "layout", None, "", "none",
                                      flags=[f"error: {type(e).__name__}: {e}"[:300]]))
        # fragment-layout probes of the mma.sync / mma.sp fragments (not wmma's opaque ones),
        # native or emulated (the PTX semantics hold either way; rejected variants are skipped);
        # numerics only on native dense variants
        if (plan.layouts and isinstance(v, MmaVariant) and v.form in ("mma", "mma.sp") and w.check
                and w.check.status in ("native", "emulated")):
            try:
                results.append(run_layout(dev, v, isa, arch, texts))
            except Exception as e:
                results.append(Result(v.name, "layout", None, "", "none",
                                      flags=[f"error: {type(e).__name__}: {e}"[:300]]))
            if w.check.ok and v.form == "mma" and v.ctype == "f32" and v.atype in ("f16", "bf16", "tf32"):
                try:
                    results.append(run_numerics(dev, v, isa, arch, texts))
                except Exception as e:
                    results.append(Result(v.name, "numerics", None, "", "none",
                                          flags=[f"error: {type(e).__name__}: {e}"[:300]]))
        timing["layout_s"] += time.perf_counter() - t
        t = time.perf_counter()
        store.save(run_id, v.name, results, texts)
        timing["store_s"] += time.perf_counter() - t
    summary = summarize_run(store, run_id)
    store.set_meta(f"summary:{run_id}", summary)
    store.finish_run(run_id, dev.clocks(), timing)
    return run_id, timing


def _per_sass_line(name: str, d: dict) -> str:
    """One conclusion on a multi-SASS variant's per-SASS timing (run/tensor_steps.py)."""
    p = d["per_sass"]
    head = f"{name} ({' + '.join(d.get('sass') or [])})"
    if p["value"] is None:
        return f"{head}: per-SASS timing not measurable ({'; '.join(p['flags'])})"
    cum = ", ".join(f"{c:.0f}" for c in p["cumulative_cycles"] or [])
    return (f"{head}, split into {p['partner']}: {p['value']:.1f} cycles between the issue of consecutive "
            f"tensor SASS; cumulative cycles after each SASS {cum}, result used after "
            f"{p['cumulative_complete']:.0f}; the instruction itself: issued after {p['whole_issue']:.0f}, "
            f"result used after {p['whole_total']:.0f} cycles" + (f" [{'; '.join(p['flags'])}]" if p["flags"] else ""))


MOVERS = ("ldmatrix", "stmatrix", "wmma.load", "wmma.store")  # data movement: no tensor SASS


def summarize_run(store: Store, run_id: int) -> dict:
    """Conclusions from the stored results (every number quoted is a stored measurement)."""
    rs = store.results(run_id)
    variants: dict[str, dict] = {}
    layouts: dict[str, dict] = {}
    wmma_frags: dict[str, dict] = {}
    for r in rs:
        d = variants.setdefault(r["variant"], {})
        if r["measure"] == "sass_map":
            d["status"] = r["params"].get("status")
            d["sass"] = r["sass"]
            if r["params"].get("reason"):
                d["reason"] = r["params"]["reason"]
        elif r["measure"] == "latency" and r["value"] is not None:
            fam = r["params"].get("family", "")
            d.setdefault("latency_cycles", {})[fam] = round(r["value"], 2)
        elif r["measure"] == "throughput_peak" and r["value"] is not None:
            p = r["params"]
            d.setdefault("peak", {})[p["group"]] = {
                "instr_per_cycle_sm": round(r["value"], 4), "flop_per_cycle_sm": p.get("flop_per_cycle_sm"),
                "tflops": p.get("tflops"), "pct_of_peak": p.get("pct_of_peak"),
                "observed_sm_mhz": p.get("observed_sm_mhz"), "config": p.get("best_family"), "flags": r["flags"]}
        elif r["measure"] == "per_sass":
            d["per_sass"] = {"value": r["value"], "flags": r["flags"], **{k: r["params"].get(k) for k in (
                "partner", "cumulative_cycles", "cumulative_complete", "intervals", "whole_issue", "whole_total")}}
        elif r["measure"] == "numerics" and r["params"].get("cases"):
            d["numerics"] = {k: c["outcome"] for k, c in r["params"]["cases"].items()}
        elif r["measure"] == "layout" and r["params"].get("op", "").startswith("wmma."):
            wmma_frags[r["variant"]] = r["params"] | {"flags": r["flags"], "value": r["value"]}
        elif r["measure"] == "layout":
            layouts[r["variant"]] = {"matches_reference": r["params"].get("matches_reference"),
                                     "differences": r["params"].get("n_differences"), "flags": r["flags"]}
    conc = []
    by_status: dict[str, list[str]] = {}
    for name, d in variants.items():
        by_status.setdefault(d.get("status") or "?", []).append(name)
    for st, names in sorted(by_status.items()):
        conc.append(f"{len(names)} variants {st}" + (f": {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}"
                                                     if st != "native" else ""))
    best_wg: dict[str, tuple] = {}
    for name, d in variants.items():
        for g, p in (d.get("peak") or {}).items():
            if p.get("tflops") is None:
                continue
            cur = best_wg.get(name)
            if cur is None or p["tflops"] > cur[1]["tflops"]:
                best_wg[name] = (g, p)
    for name, (g, p) in best_wg.items():
        pct = f", {p['pct_of_peak']:.1f}% of the clock-scaled datasheet peak" if p.get("pct_of_peak") else ""
        lat = variants[name].get("latency_cycles") or {}
        lat_s = f"; latency {min(lat.values()):.1f} cycles" if lat else ""
        if name.startswith(MOVERS):
            conc.append(f"{name}: {p['instr_per_cycle_sm']:.3f} instr/cycle/SM = {p['flop_per_cycle_sm']:.0f} "
                        f"bytes/cycle/SM ({p['tflops']:.1f} TB/s over all SMs at {p['observed_sm_mhz']:.0f} MHz)"
                        + (f"; latency {min(lat.values()):.1f} cycles incl. the address add tree" if
                           (lat := variants[name].get("latency_cycles") or {}) else "")
                        + f" ({variants[name].get('sass')})")
            continue
        conc.append(f"{name} [{g}]: {p['flop_per_cycle_sm']:.0f} FLOP/cycle/SM, {p['tflops']:.1f} TFLOP/s at "
                    f"{p['observed_sm_mhz']:.0f} MHz{pct}{lat_s} ({variants[name].get('sass')})")
    native = {n: d.get("sass") or [] for n, d in variants.items()
              if d.get("status") == "native" and not n.startswith(MOVERS)}
    single = [n for n, sl in native.items() if len(sl) == 1 and sl[0].startswith("1*")]
    multi = [n for n in native if n not in single]
    timed = [n for n in multi if variants[n].get("per_sass")]
    if native:
        conc.append(f"{len(single)} of {len(native)} native variants map to exactly one SASS instruction per PTX "
                    "instruction (per-SASS timing then equals the instruction's latency and throughput)"
                    + (f"; {len(multi)} map to several ({len(timed)} timed per SASS below)"
                       + (f"; not timed per SASS: {', '.join(n for n in multi if n not in timed)}"
                          if len(timed) < len(multi) else "") if multi else ""))
    conc += [_per_sass_line(n, variants[n]) for n in timed]
    for name in ("wgmma.f32.f16", "wgmma.f32.bf16", "wgmma.f16.f16"):
        pk = {g: p for g, p in (variants.get(name, {}).get("peak") or {}).items() if p.get("pct_of_peak")}
        if not pk:
            continue
        g, p = max(pk.items(), key=lambda x: x[1]["pct_of_peak"])
        verdict = "reaches" if p["pct_of_peak"] >= 90 else "falls short of"
        per_n = ", ".join(f"{gg.split('_', 1)[1]}: {pp['pct_of_peak']:.0f}%" for gg, pp in sorted(pk.items()))
        conc.append(f"{name} {verdict} 90% of the clock-scaled dense peak: best {p['pct_of_peak']:.1f}% "
                    f"({g}, {p['config']}); per N and A source: {per_n}")
    for name, d in variants.items():
        if d.get("numerics"):
            conc.append(f"{name} numerics (D[0][0] of designed inputs): "
                        + "; ".join(f"{k}: {o}" for k, o in d["numerics"].items()))
    if layouts:
        ok = [n for n, d in layouts.items() if d["matches_reference"]]
        bad = [n for n, d in layouts.items() if d["matches_reference"] is False]
        conc.append(f"fragment layouts: {len(ok)} mma variants match the PTX reference layout "
                    f"(up to the unobservable relabelling of rows/cols/k), {len(bad)} differ"
                    + (f": {', '.join(bad)}" if bad else ""))
    conc += wmma_fragment_conclusions(wmma_frags)
    layouts.update({n: {"matches_reference": None, "matches_tiled_mma": p.get("value") == 1.0,
                        "tiling": p.get("tiling_text"), "coverage": p.get("coverage"), "flags": p["flags"]}
                    for n, p in wmma_frags.items()})
    return {"conclusions": conc, "variants": variants, "layouts": layouts}


def wmma_fragment_conclusions(frags: dict[str, dict]) -> list[str]:
    """What the wmma fragment experiments show, from their stored parameters."""
    if not frags:
        return []
    done = {n: p for n, p in frags.items() if p.get("slots") and not p["flags"]}
    tiled = [n for n, p in done.items() if p.get("value") == 1.0]
    flipped = [n for n in tiled if (done[n].get("tiling") or {}).get("transposed")]
    out = [f"wmma fragment layouts (unspecified by the PTX ISA) observed for {len(done)} of {len(frags)} "
           f"wmma.load/store variants; {len(tiled) - len(flipped)} equal the stated mma.sync layouts tiled"
           + (f", {len(flipped)} equal them tiled and transposed (element (row, col) where the mma "
              f"layout puts (col, row)): {', '.join(flipped)}" if flipped else "")
           + (f"; not tiled: {', '.join(n for n in done if n not in tiled)}" if len(tiled) < len(done) else "")]
    dup = sorted({f"{p['frag'].upper()} {p['elem']} ({p['coverage']['copies_max']}x)"
                  for p in done.values() if p["coverage"]["copies_max"] > 1})
    if dup:
        out.append("wmma fragments holding every element more than once: " + ", ".join(dup))
    same, pairs = _same_slots(done, lambda n, p: p["op"] == "wmma.load" and p["frag"] == "c",
                              lambda n: n.replace("wmma.load.c.", "wmma.store.d."))
    if pairs:
        out.append(f"wmma.load.c and wmma.store.d use the same fragment layout in {same} of "
                   f"{pairs} (shape, type, memory layout) cases")
    same, pairs = _same_slots(done, lambda n, p: p["layout"] == "row", lambda n: n.replace(".row.", ".col."))
    if pairs:
        out.append(f"the memory layout (row/col) leaves the fragment unchanged in {same} of "
                   f"{pairs} fragment kinds")
    return out


def _same_slots(done: dict[str, dict], pick: Callable[[str, dict], bool],
                partner: Callable[[str], str]) -> tuple[int, int]:
    """Of the fragments ``pick`` selects that have a ``partner`` observed too: how many hold
    the same layout as it, and how many pairs there are."""
    pairs = [(p, done[partner(n)]) for n, p in done.items() if pick(n, p) and partner(n) in done]
    return sum(p["slots"] == q["slots"] for p, q in pairs), len(pairs)
