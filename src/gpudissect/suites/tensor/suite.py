"""The tensor-core suite: mma.sync, wmma.mma, mma.sp and wgmma variants of ``catalog/tensor.toml``
(wmma.mma and mma.sp are ``[[mma]]`` entries with a ``form``: same kernels, same checks).

Per variant (one resumable work item): generate the latency and throughput kernels, compile
them as one module, check the SASS (checks.py), then on the GPU:

* latency: one warp (one warpgroup for wgmma), one accumulator chain, two lengths; the slope
  of the region's cycles is the dependent-accumulator latency;
* throughput (bench/tensor_sweep.py): kernels of 1, 2, 4, 8 independent accumulators per warp (wgmma: 1,
  2, 4 per warpgroup, groups committed per round, one wait at the end) launched with 4 to 64
  warps per SM (wgmma: 1 to 4 warpgroups), in order of parallelism, an accumulator count
  stopping when more warps no longer raise its rate; each configuration: the slope of the
  median SM span over two lengths (issuers x accumulators / slope = instructions per cycle
  per SM), its per-SM idle share and one SM's warp windows kept. The peak of a variant (of
  each A source and N for wgmma) is the best clean configuration with its saturation
  evidence or a ``not-saturated`` flag; FLOP/cycle/SM, TFLOP/s at the SM clock measured in a
  kernel before and after the sweep (bench/clock.py) and % of the datasheet peak
  (arch/tensor_peaks.py, data/arch/<arch>/tensor_peaks.toml: the sparse figure for mma.sp and wgmma.sp); mma: one
  warp's issue interval; the variants of ``Sweep.data_variants``: their peak configuration
  again with zero and with random operands, and (items of their own, after every sweep)
  sustained for about 200 ms with zero, random and zero operands;
* layout (mma.sync and mma.sp, native or emulated variants): probe experiments, layout_reference.py
  (numerics: native dense variants); wmma.load / wmma.store: fragments.py;
* per_sass (native variants of several tensor SASS per instruction, e.g. wmma): clock reads
  between the SASS, via single-SASS partners (per_sass.py).

Every kernel is written and compiled for the architecture-specific target (kernels.py
``tensor_arch``: wgmma needs it, mma.sync compiles to the same code).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpudissect.arch.occupancy import occupancy_rules
from gpudissect.arch.target import Target, arch_need, ptx_needs
from gpudissect.arch.tensor_peaks import Peak as PeakRef
from gpudissect.arch.tensor_peaks import figures, peak_for
from gpudissect.bench.clock import clock_flag as sm_clock_flag
from gpudissect.bench.clock import measure_sm_clock
from gpudissect.bench.contract import Context, Item, Outcome, Plan, Redo, SuiteBase
from gpudissect.bench.power import nvml_index
from gpudissect.bench.runner import WORKER_FAILED
from gpudissect.bench.spans import span
from gpudissect.bench.stats import fit_flag, fit_line
from gpudissect.bench.tensor_sweep import (
    Config,
    clean,
    launch_times,
    register_refusal,
    run_sweep,
    select_peak,
    sustained,
    time_config,
)
from gpudissect.catalog.tensor import (
    LdstVariant,
    MmaVariant,
    TensorCatalog,
    WgmmaVariant,
    element,
    load_tensor_catalog,
)
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_one
from gpudissect.kernel.mma import TIMED_REPS, random_words, tensor_arch
from gpudissect.kernel.parallel import pmap
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.toolchain import PtxasError
from gpudissect.store.db import Result
from gpudissect.suites.tensor import layout_probe as layouts
from gpudissect.suites.tensor import movm
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
    fragment_words,
    ldst_kernel,
    mma_kernel,
    operand_words,
    wgmma_kernel,
)
from gpudissect.suites.tensor.per_sass import build_per_sass, multi_sass, run_per_sass

REPS = TIMED_REPS


@dataclass
class Sweep:
    """The configurations a run measures (stored as the run's parameters)."""

    lat_lengths: tuple[int, ...] = (8, 16, 32)
    # mma throughput: tensor instructions per warp per region (split over its accumulators),
    # accumulators per warp (up to what 32 accumulator registers hold), warps per SM (above
    # the block limit: blocks of 32 warps, where the registers let them share the SM)
    thr_units: tuple[int, ...] = (128, 256)
    mma_chains: tuple[int, ...] = (1, 2, 4, 8)
    mma_warps: tuple[int, ...] = (4, 8, 16, 32, 64)
    thr_lengths: tuple[int, ...] = (16, 32, 64)  # ldmatrix / stmatrix / wmma.load / wmma.store
    ldst_warps: tuple[int, ...] = (8, 16)
    wg_lat_lengths: tuple[int, ...] = (4, 8, 16)
    wg_thr_units: tuple[int, ...] = (64, 128)  # wgmma per warpgroup per region
    # sparse wgmma: ptxas gives every wgmma in flight its own metadata register and waits after
    # each one (serialized) once they no longer fit beside the accumulators: shorter regions
    wg_sp_thr_units: tuple[int, ...] = (32, 64)
    # (N values, A sources) for the wgmma sweep; full sweep for the types in ``wg_full``
    wg_n_full: tuple[int, ...] = (8, 16, 32, 64, 128, 192, 256)
    wg_n_other: tuple[int, ...] = (128, 256)
    wg_full: tuple[str, ...] = ("wgmma.f32.f16", "wgmma.f32.bf16")
    wg_accs: tuple[int, ...] = (1, 2, 4)  # accumulators per warpgroup (up to 128 registers)
    wg_groups: tuple[int, ...] = (1, 2, 3, 4)  # warpgroups per SM
    # variants whose peak configuration is timed again with zero and with random operands, per
    # cycle (the sweep's regions) and sustained for ``sustained_ms`` (zero, random, zero again)
    sustained_ms: float = 200.0
    data_variants: tuple[str, ...] = (
        "mma.sync.m16n8k16.f32.f16.f32", "mma.sync.m16n8k16.f32.bf16.f32", "mma.sync.m16n8k8.f32.tf32.f32",
        "mma.sync.m16n8k32.s32.s8.s32", "wgmma.f32.f16", "wgmma.f32.bf16", "wgmma.f32.tf32",
        "wgmma.f32.e4m3", "wgmma.s32.s8", "mma.sync.m16n8k16.f64.f64.f64")
    layouts: bool = True
    # variants (globs) a run of every variant leaves out (a run that names them measures them)
    left_out: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# a quick run: the rates on fewer configurations, without the fragment-layout probes and
# numerics, and without the wmma variants, whose tensor SASS is mma.sync's (their per-SASS
# study times it so): no key quantity needs them; a quick run says so in every view
QUICK = Sweep(mma_chains=(4, 8), mma_warps=(8, 16), wg_n_full=(64, 256), wg_n_other=(256,), wg_accs=(1,),
              wg_groups=(1, 2), data_variants=(), layouts=False, left_out=("wmma.*",))


def _mma_chains(v: MmaVariant) -> int:
    """The most accumulators per warp: what 32 accumulator registers hold (at most 8)."""
    return max(1, min(8, 32 // max(v.regs["c"] * element(v.ctype).reg_words, 1)))


def mma_chain_counts(v: MmaVariant, sweep: Sweep) -> list[int]:
    top = _mma_chains(v)
    return [c for c in sweep.mma_chains if c <= top] or [top]


def mma_kernels(v: MmaVariant, sweep: Sweep, target: Target, idx: int) -> list[Kernel]:
    ks = []
    for L in sweep.lat_lengths:
        ks.append(mma_kernel(v, f"tc{idx}_lat_c1_n{L}", "latency", 1, L, 1, target))
    for c in mma_chain_counts(v, sweep):  # one family per accumulator count; warps: launch-time
        for u in sweep.thr_units:
            L = max(1, u // c)
            ks.append(mma_kernel(v, f"tc{idx}_thr_c{c}_n{L}", "throughput", c, L, 1, target))
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
            for accs in sweep.wg_accs:  # one family per accumulator count; warpgroups: launch-time
                if accs * v.d_regs(n) > 128:
                    continue
                for u in (sweep.wg_sp_thr_units if v.sparse else sweep.wg_thr_units):
                    L = max(1, u // accs)
                    ks.append(wgmma_kernel(v, f"wg{idx}_{src}_n{n}_a{accs}_thr_n{L}", "throughput",
                                           n, accs, L, 1, a_regs, target))
    return ks


def ldst_kernels(v: LdstVariant, sweep: Sweep, target: Target, idx: int) -> list[Kernel]:
    ks = []
    if v.op in ("ldmatrix", "wmma.load"):
        for L in sweep.lat_lengths:
            ks.append(ldst_kernel(v, f"ls{idx}_lat_c1_n{L}", "latency", 1, L, 1, target))
    for w in sweep.ldst_warps:
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


def group_of(k: Kernel) -> str:
    """The peak a kernel's family competes for: one per variant, per (A source, N) for wgmma."""
    if "n" in k.meta:
        return f"{'rs' if k.meta['a_from'] == 'registers' else 'ss'}_n{k.meta['n']}"
    return "ldst" if k.name.startswith("ls") else "mma"


def throughput_configs(v, kernels: list[Kernel], sweep: Sweep) -> list[Config]:
    """Every (family, warps per SM) the sweep may time: mma over ``mma_warps``, wgmma over
    ``wg_groups`` warpgroups, ldst at the warps its kernels were written for."""
    out = []
    for key, k in {family_key(k): k for k in kernels if k.measure == "throughput"}.items():
        if v.kind == "wgmma":
            out += [Config(key, group_of(k), k.chains, 4 * g, issuer_warps=4) for g in sweep.wg_groups]
        elif v.kind == "ldst":
            out.append(Config(key, group_of(k), k.chains, k.warps))
        else:
            out += [Config(key, group_of(k), k.chains, W) for W in sweep.mma_warps]
    return out


def _in_words_mma(v: MmaVariant, reps: int, data: str = "one") -> np.ndarray:
    words = [reps, 0]
    words += fragment_words(v.atype, v.regs["a"], data, seed=1) + fragment_words(v.btype, v.regs["b"], data, seed=2)
    words += operand_words(v.ctype, v.regs["c"], "zero")
    return np.array(words, dtype=np.uint32)


def _in_words_wg(v: WgmmaVariant, reps: int, data: str = "random") -> np.ndarray:
    """The words the kernel copies into shared memory (A and B tiles, 256 words repeated)."""
    words = [reps] + (random_words(v.atype, 256, seed=1) if data == "random" else fragment_words(v.atype, 256, data))
    return np.array(words, dtype=np.uint32)


def _launch(dev: Device, built: Built, k: Kernel, grid: int, words: np.ndarray):
    return launch_times(dev, built, grid, 32 * k.warps, words)


def _last(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return t[:, 2 * (REPS - 1)].astype(np.int64), t[:, 2 * (REPS - 1) + 1].astype(np.int64), t[:, -1]


def _cite(b: Built, texts: dict) -> dict:
    texts.update(b.texts())
    return {"ptx_hash": b.ptx_hash, "sass_hash": b.sass_hash}


def _launch_failure(e: Exception, b: Built | Exception | None, warps: int) -> str:
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
        total = f" = {regs * 32 * warps} registers" if regs else ""
        return (f"refused: launch of {warps} warps refused (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES): "
                f"{per}{32 * warps} threads{total} exceed what the SM may hold; "
                "other warp counts of this variant are measured")
    return f"error: {text}"[:300]


def _sass_list(chk: TensorCheck | None) -> list[str]:
    return [f"{c}*{op}" if c != "1" else op for op, c in (chk.sass.items() if chk else [])]


def _family_failed(v, key: str, k0: Kernel, chk: TensorCheck | None, params: dict) -> Result:
    return Result(v.name, k0.measure, None, "cycles" if k0.measure == "latency" else "instr/cycle/SM",
                  "none", params=params, sass=_sass_list(chk),
                  flags=[f"{chk.status if chk else 'error'}: {chk.reason if chk else 'not built'}"])


def measure_latency(dev: Device, w: Work, words: np.ndarray, texts: dict) -> list[Result]:
    """The latency families: one warp (one warpgroup for wgmma), one accumulator chain; the
    slope of the region's cycles against the chain length."""
    v = w.variant
    fams: dict[str, list[Kernel]] = {}
    for k in w.kernels:
        if k.measure == "latency":
            fams.setdefault(family_key(k), []).append(k)
    out: list[Result] = []
    for key, ks in fams.items():
        chk = w.checks.get(key)
        k0 = ks[0]
        params = {"family": key, "group": group_of(k0), "chains": k0.chains, "warps": k0.warps, **k0.meta}
        if chk is None or not chk.ok:
            out.append(_family_failed(v, key, k0, chk, params))
            continue
        xs, ys, raw, cite = [], [], {}, {}
        try:
            for k in sorted(ks, key=lambda k: k.length):
                b = w.built[k.name]
                assert isinstance(b, Built)
                cite = _cite(b, texts)
                t, _ = _launch(dev, b, k, 1, words)
                t0, t1, _ = _last(t)
                xs.append(k.length)
                ys.append(float(np.median(t1 - t0)))
                raw[str(k.length)] = [int(x) for x in (t1 - t0)[:: max(1, len(t0) // 4)]]
            fit = fit_line(xs, ys)
        except Exception as e:  # one failing benchmark never takes the sweep down
            out.append(Result(v.name, "latency", None, "cycles", "none", params=params, sass=_sass_list(chk),
                              flags=[_launch_failure(e, w.built.get(k.name), k.warps)], **cite))
            continue
        flags = [f for f in (fit_flag(fit),) if f]
        val = fit.slope if fit.slope > 0 else None
        out.append(Result(v.name, "latency", val, "cycles", "slope of region cycles vs chain length "
                          "(one warp / warpgroup, one accumulator)", params=params, fit=fit.to_json(),
                          samples=raw, flags=flags, sass=_sass_list(chk), **cite))
    return out


def kernel_clock(dev: Device, target: Target) -> dict:
    """The SM clock measured inside a kernel now (bench/clock.py): what the TFLOP/s use."""
    c = measure_sm_clock(dev, target)
    return {k: c[k] for k in ("sm_mhz_kernel", "sm_mhz_kernel_min", "sm_mhz_kernel_max",
                              "sm_mhz_host", "sm_mhz_kernel_error") if k in c}


def clock_flag(dev: Device, clocks: list[dict]) -> str | None:
    """bench/clock.clock_flag against the maximum SM clock NVML reports (when it reports one)."""
    try:
        top = (dev.clocks() or {}).get("sm_max_mhz")
    except Exception:  # noqa: BLE001 - no NVML: nothing to compare with
        top = None
    return sm_clock_flag(clocks, top if isinstance(top, (int, float)) and top > 0 else None)


def _mhz(clocks: list[dict]) -> float | None:
    vals = [c["sm_mhz_kernel"] for c in clocks if c.get("sm_mhz_kernel")]
    return float(np.mean(vals)) if vals else None


@dataclass
class Meter:
    """What one variant's throughput measurements share: the device, the variant's built
    kernels and checks, the FLOPs of a kernel, the datasheet peak, the SM's limits."""

    dev: Device
    w: Work
    flops_of: Callable[[Kernel], int]
    peak: PeakRef | None
    per_block: int
    registers_per_sm: int
    texts: dict
    schedulers: int | None = None  # warp schedulers per SM (target facts: limits.issue)
    reg_granule: int = 1  # registers per thread are allocated in multiples of this

    def kernels(self, family: str) -> list[Kernel]:
        return [k for k in self.w.kernels if family_key(k) == family]

    def time(self, cfg: Config, words: np.ndarray, mhz: float | None, measure: str = "throughput",
             extra: dict | None = None) -> Result:
        """One configuration timed (a refusal by registers is decided before any launch)."""
        v, ks = self.w.variant, self.kernels(cfg.family)
        chk = self.w.checks.get(cfg.family)
        built = [self.w.built[k.name] for k in ks]
        b_last = built[-1]
        assert isinstance(b_last, Built)
        cite = _cite(b_last, self.texts)
        base = {"family": cfg.family, "group": cfg.group, "chains": cfg.chains, "warps": cfg.warps,
                "issuers": cfg.issuers, **ks[0].meta, **(extra or {})}
        unit = "instr/cycle/SM"
        refusal = register_refusal(max(b.regs for b in built if isinstance(b, Built)), cfg.warps,
                                   self.registers_per_sm, self.reg_granule)
        if refusal:
            return Result(v.name, measure, None, unit, "none", params=base, sass=_sass_list(chk), flags=[refusal],
                          **cite)
        try:
            t = time_config(self.dev, [b for b in built if isinstance(b, Built)], words, cfg, self.per_block)
        except Exception as e:  # a launch refused (registers) or failed: recorded on the configuration
            if type(e).__name__ == WORKER_FAILED:
                raise  # the device is gone: the variant's remaining kernels would fail alike
            return Result(v.name, measure, None, unit, "none", params=base, sass=_sass_list(chk),
                          flags=[_launch_failure(e, b_last, cfg.warps)], **cite)
        params = {**t["params"], **base, "observed_sm_mhz": mhz}
        fig = figures(t["rate"], self.flops_of(ks[0]), self.dev.info.sm_count, mhz, self.peak) if t["rate"] else None
        flags = t["flags"]
        if fig and self.peak and fig.flop_per_cycle_sm > 1.05 * self.peak.per_sm_per_cycle():
            # above what the datasheet allows per SM and cycle: the measurement is not trustworthy
            flags.append(f"exceeds-peak: {fig.flop_per_cycle_sm:.0f} FLOP/cycle/SM > datasheet "
                         f"{self.peak.per_sm_per_cycle():.0f}; measurement suspect")
        samples = {**(t["samples"] or {}), "peak": fig.to_json() if fig else None}
        return Result(v.name, measure, t["rate"], unit,
                      "issuers*accumulators / slope of (median over SMs of the SM span) vs length",
                      params=params, fit=t["fit"].to_json() if t["fit"] else None, samples=samples, flags=flags,
                      sass=_sass_list(chk), **cite)

    def longest(self, cfg: Config) -> Kernel:
        return max(self.kernels(cfg.family), key=lambda k: k.length)

    def sustained(self, cfg: Config, spans: list[float], words: np.ndarray, mhz: float, target_ms: float,
                  target: Target, extra: dict, stamped: tuple[Built | None, str | None] = (None, None)) -> Result:
        """``cfg`` sustained for about ``target_ms`` (sweep.sustained) with the operand data of
        ``words``: TFLOP/s over the whole launch, the SM clock measured in it (``stamped``: the
        kernel with block clock stamps, or why there is none: then the clock is the implied one),
        NVML's power, clock and throttle reasons during it, and the SM clock right after it (in
        a kernel)."""
        v = self.w.variant
        k = self.longest(cfg)
        b = self.w.built[k.name]
        assert isinstance(b, Built)
        cite = _cite(b, self.texts)
        params = {"family": cfg.family, "group": cfg.group, "chains": cfg.chains, "warps": cfg.warps,
                  "issuers": cfg.issuers, "length": k.length, **k.meta, **extra}
        if not spans:
            return Result(v.name, "throughput_sustained", None, "TFLOP/s", "none", params=params,
                          flags=["not timed: no span of the configuration's longest kernel"], **cite)
        try:
            s = sustained(self.dev, b, cfg, self.per_block, words, float(np.median(spans)), mhz, target_ms,
                          stamped=stamped[0], nvml=nvml_index(self.dev))
        except Exception as e:  # a failed launch is recorded on this result
            if type(e).__name__ == WORKER_FAILED:
                raise
            return Result(v.name, "throughput_sustained", None, "TFLOP/s", "none", params=params,
                          flags=[_launch_failure(e, b, cfg.warps)], **cite)
        after = kernel_clock(self.dev, target)
        tflops = (s["instr_per_s_sm"] * self.flops_of(k) * self.dev.info.sm_count / 1e12
                  if s["instr_per_s_sm"] else None)
        suspect = clock_flag(self.dev, [after])
        flags = s.pop("flags") + ([suspect] if suspect else [])
        if stamped[1]:
            s["sm_mhz_in_kernel"] = {"error": stamped[1]}
        clock = ("in-kernel: 32-bit clock / globaltimer of each block over the whole repetition loop"
                 if (s.get("sm_mhz_in_kernel") or {}).get("median") else "implied (no in-kernel reading)")
        return Result(v.name, "throughput_sustained", tflops, "TFLOP/s",
                      "instructions of the whole launch / its GPU time (events), the region repeated back to "
                      "back for about target_ms",
                      params={**params, **s, "tflops": tflops, "clock": clock, "sm_mhz_kernel_after": after},
                      flags=flags, sass=_sass_list(self.w.checks.get(cfg.family)), **cite)


def stamped_kernel(m: Meter, cfg: Config, target: Target) -> tuple[Built | None, str | None]:
    """The sustained configuration's kernel again with the block clock stamps (kernel/timing.py
    stamp_ptx, outside the timed region), built; used only when its timed region's SASS is the
    plain kernel's, instruction for instruction. (None, why) otherwise."""
    v, k = m.w.variant, m.longest(cfg)
    try:
        if isinstance(v, MmaVariant):
            sk = mma_kernel(v, k.name.replace("_thr_", "_clk_"), "throughput", k.chains, k.length, k.warps, target, stamps=True)
        elif isinstance(v, WgmmaVariant):
            sk = wgmma_kernel(v, k.name.replace("_thr_", "_clk_"), "throughput", k.meta["n"], k.meta["accs"], k.length,
                              k.meta["warpgroups"], k.meta["a_from"] == "registers", target, stamps=True)
        else:
            return None, f"no stamped kernel for a {v.kind} variant"
        b = build_one(sk, tensor_arch(target))
    except Exception as e:  # noqa: BLE001 - the run goes on with the implied clock
        return None, f"stamped kernel not built: {type(e).__name__}: {e}"[:300]
    plain = m.w.built[k.name]
    assert isinstance(plain, Built)
    if [i.full for i in b.region] != [i.full for i in plain.region]:
        return None, "the stamped kernel's timed region differs from the plain one's in SASS: not used"
    return b, None


def peak_result(m: Meter, group: str, rs: list[Result], limit: float | None, mhz: float | None,
                clocks: list[dict], data: str) -> Result:
    """The group's peak: the best clean configuration, its saturation evidence or a
    ``not-saturated`` flag (sweep.select_peak), FLOP/s at the SM clock measured in a kernel."""
    v = m.w.variant
    pk = select_peak(rs, limit)
    aborted = next((f for r in rs for f in r.flags if f.startswith("error:") and WORKER_FAILED in f), None)
    flags = pk.flags + ([f"sweep-aborted: {aborted.removeprefix('error: ')}"[:300]] if aborted else [])
    best = pk.best
    params: dict = {"group": group, "configurations": len(rs), "clean": sum(clean(r) for r in rs),
                    "saturation": pk.evidence, "data": data, "clock": "in-kernel (clock64 / globaltimer) "
                    "before and after the sweep", "sm_mhz_kernel": clocks, "observed_sm_mhz": mhz,
                    "limit_instr_per_cycle_sm": limit}
    if best is None:
        return Result(v.name, "throughput_peak", None, "instr/cycle/SM", "none", params=params, flags=flags,
                      sass=rs[0].sass if rs else [])
    bp = best.params
    # at the clock this result states (the mean of the in-kernel clocks before and after the sweep),
    # not the one before the sweep that the configuration's own figures were computed at
    fig = (figures(best.value, m.flops_of(m.kernels(bp["family"])[0]), m.dev.info.sm_count, mhz, m.peak).to_json()
           if best.value else (best.samples or {}).get("peak") or {})
    params.update({"best_family": bp["family"], **{k: bp.get(k) for k in ("n", "a_from", "warps", "chains",
                                                                            "issuers", "blocks_per_sm")},
                   **{k: fig.get(k) for k in ("flop_per_cycle_sm", "tflops", "peak_tflops_scaled", "pct_of_peak")},
                   "smallest_within_2pct": {k: pk.smallest.params[k] for k in ("chains", "issuers", "warps")}
                   if pk.smallest else None})
    if v.kind != "wgmma":  # one configuration per (chains, warps): the audit finds the source
        params["best"] = {"chains": bp["chains"], "warps": bp["warps"]}
        params["cycles_per_instr_per_scheduler"] = m.schedulers / best.value if (best.value and m.schedulers) else None
    else:
        params["cycles_per_instr_per_sm"] = 1 / best.value if best.value else None
    return Result(v.name, "throughput_peak", best.value, "instr/cycle/SM",
                  "max over clean (accumulators, warps) configurations", params=params, flags=flags,
                  sass=best.sass, ptx_hash=best.ptx_hash, sass_hash=best.sass_hash)


def measure_throughput(m: Meter, sweep: Sweep, target: Target, data_default: str,
                       words_of: Callable[[str], np.ndarray]) -> list[Result]:
    """Every peak group of the variant swept (sweep.run_sweep), each with its peak; mma: one
    warp's issue interval; the variants of ``sweep.data_variants``: their best configuration
    timed again with zero and with random operands."""
    v = m.w.variant
    cfgs = throughput_configs(v, m.w.kernels, sweep)
    out: list[Result] = []
    groups: dict[str, list[Config]] = {}
    for c in cfgs:
        chk = m.w.checks.get(c.family)
        if chk is None or not chk.ok:
            if not any(r.params.get("family") == c.family for r in out):
                k0 = m.kernels(c.family)[0]
                out.append(_family_failed(v, c.family, k0, chk, {"family": c.family, "group": c.group,
                                                                  "chains": c.chains, **k0.meta}))
            continue
        groups.setdefault(c.group, []).append(c)
    if not groups:
        return out
    clocks = [kernel_clock(m.dev, target)]
    words = words_of(data_default)
    swept: dict[str, tuple[list[Result], float | None]] = {}
    for g, gc in groups.items():
        flops = m.flops_of(m.kernels(gc[0].family)[0])
        limit = m.peak.per_sm_per_cycle() / flops if (m.peak and flops) else None
        mhz = _mhz(clocks)
        swept[g] = (run_sweep(gc, lambda c, mhz=mhz: m.time(c, words, mhz), limit), limit)
    clocks.append(kernel_clock(m.dev, target))
    mhz = _mhz(clocks)
    suspect = clock_flag(m.dev, clocks)
    peaks: dict[str, Result] = {}
    for g, (rs, limit) in swept.items():
        out += rs
        peaks[g] = peak_result(m, g, rs, limit, mhz, clocks, data_default)
        peaks[g].flags += [suspect] if (suspect and peaks[g].value) else []
        out.append(peaks[g])
    if v.kind == "mma":  # one warp per SM, the most accumulators: the issue interval of one warp
        top = max(groups["mma"], key=lambda c: c.chains)
        one = m.time(Config(top.family, "mma", top.chains, 1), words, mhz, measure="issue_rate")
        if one.value:
            one = dataclasses.replace(one, measure="issue_interval", value=1 / one.value, unit="cycles",
                                      statistic="one warp per SM, independent accumulators: cycles per "
                                                "instruction = slope of the region / accumulators")
        out.append(one)
    if v.name in sweep.data_variants:
        valued = [p for p in peaks.values() if p.value]
        if valued:
            p = max(valued, key=lambda p: p.params.get("flop_per_cycle_sm") or 0)
            cfg = next(c for c in groups[p.params["group"]] if c.family == p.params["best_family"]
                       and c.warps == p.params["warps"])
            for data in ("zero", "random"):
                out.append(m.time(cfg, words_of(data), mhz, measure="throughput_data",
                                  extra={"data": data, "data_default": data_default}))
    return out


@dataclass(frozen=True)
class Sustain:
    """The item that runs a variant's peak configuration sustained (after every sweep: its heat
    and clock changes then touch no other measurement)."""

    variant: MmaVariant | WgmmaVariant

    @property
    def name(self) -> str:
        return SUSTAINED + self.variant.name


SUSTAINED = "sustained:"


def best_config(rows: list[dict], kind: str) -> tuple[Config, list[float]] | None:
    """The configuration of a variant's highest peak (FLOP per cycle) among its stored results,
    and the SM spans of its longest kernel (what the sustained run's length is set from)."""
    peaks = [r for r in rows if r["measure"] == "throughput_peak" and r["value"]
             and r["params"].get("best_family")]
    if not peaks:
        return None
    p = max(peaks, key=lambda r: r["params"].get("flop_per_cycle_sm") or 0)["params"]
    cfg = Config(p["best_family"], p["group"], p["chains"], p["warps"], issuer_warps=4 if kind == "wgmma" else 1)
    src = next((r for r in rows if r["measure"] == "throughput" and r["params"].get("family") == cfg.family
                and r["params"].get("warps") == cfg.warps and r["samples"]), None)
    if src is None:
        return None
    spans = src["samples"].get("per_sm_span") or {}
    longest = max(spans, key=int, default=None)
    return (cfg, spans[longest]) if longest else None


def select(cat: TensorCatalog, patterns: list[str] | None) -> list[MmaVariant | WgmmaVariant | LdstVariant]:
    allv: list[MmaVariant | WgmmaVariant | LdstVariant] = [*cat.mma, *cat.wgmma, *cat.ldst]
    if not patterns:
        return allv
    return [v for v in allv if any(fnmatch.fnmatch(v.name, p) or p in v.name for p in patterns)]


def needs(v: MmaVariant | WgmmaVariant | LdstVariant) -> tuple[str, ...]:
    """What a tensor variant needs of the architecture: its catalog's minimum architecture and
    the feature its PTX instruction is (wgmma, mma.sp, ldmatrix, stmatrix: data/features.toml)."""
    text = v.ptx if isinstance(v, (MmaVariant, LdstVariant)) else f"wgmma.{v.name}"
    return (arch_need(v.min_arch), *ptx_needs(text))


def _error(v, measure: str, unit: str, e: Exception) -> Result:
    return Result(v.name, measure, None, unit, "none", flags=[f"error: {type(e).__name__}: {e}"[:300]])


PART_KERNELS = 24  # kernels per module: a wgmma variant's 156 compile as several, in parallel


def _compiled(job: tuple[Work, list[Kernel], Target, bool]) -> Work:
    """Some of a variant's kernels compiled and checked (in a worker process: the SASS reading
    is Python work that threads would run one at a time), each kernel's resource usage read;
    with ``probe``, the variant's fragment-layout probe kernel built too (an mma's, or a wmma
    load's or store's)."""
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
    if probe and isinstance(v, LdstVariant) and v.wmma:
        try:
            w.probe = layouts.build_wmma_probe(v, target)
        except Exception:  # noqa: BLE001 - built again (and the failure recorded) when measured
            w.probe = None
    return w


def _per_sass_built(job: tuple[MmaVariant, TensorCheck, Target, dict]) -> tuple[str, object]:
    """A multi-SASS variant's per-SASS kernels built (in a worker process)."""
    v, check, target, known = job
    return v.name, build_per_sass(v, check, target, known=known)


class TensorSuite(SuiteBase):
    """The contract of bench/contract.py: one item per catalog variant. ``sweep``: the
    configurations to measure (default: ``QUICK`` for a quick run, else ``Sweep()``)."""

    name = "tensor"
    description = "tensor cores: mma.sync, wmma, mma.sp, wgmma, ldmatrix/stmatrix, wmma.load/store"
    overlap = True  # but a sustained run (overlaps)

    def __init__(self, sweep: Sweep | None = None):
        self.sweep = sweep

    def plan(self, ctx: Context, patterns: list[str] | None) -> Plan:
        sweep = self.sweep or (QUICK if ctx.quick else Sweep())
        ctx.state["sweep"] = sweep
        vs = select(load_tensor_catalog(), patterns)
        if not patterns:
            vs = [v for v in vs if not any(fnmatch.fnmatchcase(v.name, g) for g in sweep.left_out)]
        items = [Item(v.name, v, needs(v)) for v in vs]
        if movm.wanted(patterns):  # the movmatrix layout experiment (movm.py)
            items.append(Item(movm.NAME, movm.MovmJob(), ("movmatrix",)))
        if sweep.sustained_ms:  # last: after every sweep
            items += [Item(Sustain(v).name, Sustain(v), needs(v)) for v in vs
                      if v.name in sweep.data_variants and not isinstance(v, LdstVariant)]
        return Plan(items, sweep.to_json())

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        """Generate every variant's kernels, compile and check them (``ctx.jobs`` in parallel);
        a sustained item's variant is prepared once with it."""
        sweep: Sweep = ctx.state["sweep"]
        works: dict[str, Work] = {}
        items = [it for it in items if not isinstance(it.data, movm.MovmJob)]  # built when measured
        vs = {(it.data.variant if isinstance(it.data, Sustain) else it.data).name:
              (it.data.variant if isinstance(it.data, Sustain) else it.data) for it in items}
        for i, v in enumerate(vs.values()):
            w = Work(v)
            try:
                w.kernels = variant_kernels(v, sweep, ctx.target, i)
            except (ValueError, PtxasError) as e:
                w.check = TensorCheck("error", reason=f"generator: {e}")
            works[v.name] = w
        # the layout probes only where the sweep runs them
        jobs = [(Work(w.variant), part, ctx.target, i == 0 and sweep.layouts) for w in works.values() if w.kernels
                for i, part in enumerate(parts(w.kernels, PART_KERNELS))]
        jobs.sort(key=lambda j: -len(j[1]))  # the largest modules first: no long tail
        with span("prepare", "compile and check"):
            compiled = pmap(_compiled, jobs, ctx.jobs)
        for done in compiled:
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
        known = ctx.state["known"] = {w.variant.name: w.check for w in works.values()
                                      if isinstance(w.variant, MmaVariant) and w.check}
        # the per-SASS kernels of the multi-SASS variants (wmma), in the pool too: built when
        # measured they kept the GPU waiting (each a whole kernel, its steps, then a split one)
        multi = [(w.variant, w.check, ctx.target, known) for w in works.values()
                 if isinstance(w.variant, MmaVariant) and w.kernels and w.built and multi_sass(w.check)]
        with span("prepare", "per-SASS kernels"):
            for name, pre in pmap(_per_sass_built, multi, ctx.jobs):
                works[name].per_sass = pre

    def _meter(self, ctx: Context, w: Work, texts: dict) -> tuple[Meter, str, Callable[[str], np.ndarray]]:
        """What the variant's throughput measurements share, its default operand data and the
        input words of each data (kernels.py DATA)."""
        v, dev, target = w.variant, ctx.dev, ctx.target
        facts = target.facts["target"]
        sched = (target.facts.get("limits") or {}).get("issue", {}).get("schedulers_per_sm")
        granule = occupancy_rules(target)["reg_alloc_unit"] // 32
        limits = (facts["max_warps_per_block"], facts["registers_per_sm"], texts, sched, granule)
        if isinstance(v, MmaVariant):
            # sparse: flops are of the logical (dense-equivalent) shape, compared with the
            # datasheet's sparse figure ('<type>:sparse' in the architecture's tensor_peaks.toml)
            return (Meter(dev, w, lambda k: v.flops, peak_for(dev.info.name, v.peak_key), *limits), "one",
                    lambda d: _in_words_mma(v, REPS, d))
        if isinstance(v, LdstVariant):
            # 'FLOP' of a load/store = bytes moved per warp instruction (no datasheet peak)
            words = np.array([REPS, 0], dtype=np.uint32)
            return (Meter(dev, w, lambda k: v.bytes, peak_for(dev.info.name, v.atype), *limits), "zero",
                    lambda d: words)
        return (Meter(dev, w, lambda k: v.flops(k.meta["n"]), peak_for(dev.info.name, v.peak_key), *limits),
                "random", lambda d: _in_words_wg(v, REPS, d))

    def measure_sustained(self, ctx: Context, job: Sustain) -> Outcome:
        """The variant's peak configuration (from its stored results) sustained with zero,
        random and again zero operands (Meter.sustained)."""
        sweep: Sweep = ctx.state["sweep"]
        w: Work = ctx.state["works"][job.variant.name]
        v, texts = w.variant, {}
        rows = ctx.store.results(ctx.run_id, variant_like=v.name) if ctx.store else ctx.state.get("rows", [])
        best = best_config([r for r in rows if r["variant"] == v.name], v.kind)
        if best is None or not w.built:
            return Outcome([Result(v.name, "throughput_sustained", None, "TFLOP/s", "none",
                                   flags=["not timed: no clean peak configuration of the variant to sustain"])])
        cfg, spans = best
        m, _, words_of = self._meter(ctx, w, texts)
        mhz = _mhz([kernel_clock(ctx.dev, ctx.target)])
        if not mhz:
            return Outcome([Result(v.name, "throughput_sustained", None, "TFLOP/s", "none",
                                   flags=["not timed: no SM clock measured in a kernel"])])
        stamped = stamped_kernel(m, cfg, ctx.target)
        out = [m.sustained(cfg, spans, words_of(data), mhz, sweep.sustained_ms, ctx.target,
                           {"data": data, "order": order}, stamped)
               for order, data in enumerate(("zero", "random", "zero"), 1)]
        return Outcome(out, texts)

    def overlaps(self, item: Item) -> bool:
        """Every item but a sustained run, which reads its variant's stored results."""
        return not isinstance(item.data, Sustain)

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        if isinstance(item.data, Sustain):
            return self.measure_sustained(ctx, item.data)
        if isinstance(item.data, movm.MovmJob):
            texts: dict = {}
            return Outcome([movm.run(ctx.dev, ctx.target, texts)], texts)
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
                m, data_default, words_of = self._meter(ctx, w, texts)
                results += measure_latency(dev, w, words_of(data_default), texts)
                results += measure_throughput(m, sweep, target, data_default, words_of)
                if isinstance(v, MmaVariant):  # multi-SASS instructions (wmma): cycles per tensor SASS
                    per_sass = run_per_sass(dev, v, w.check, target, texts, known=ctx.state["known"], pre=w.per_sass)
                    results += [per_sass] if per_sass else []
            except Exception as e:
                results.append(_error(v, "throughput", "instr/cycle/SM", e))
        if sweep.layouts and isinstance(v, LdstVariant) and v.wmma:
            try:  # the wmma fragment layout: raw data movement, independent of the timing check
                results.append(layouts.run_wmma_fragment(dev, v, load_tensor_catalog().mma, target, texts, w.probe))
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
