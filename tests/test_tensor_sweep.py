"""The tensor suite's throughput sweep (bench/tensor_sweep.py) on synthetic rates with known
answers, the sparse wgmma kernels (ptxas here), and the conclusions that pair a wgmma
throughput with the latency of its own N."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.bench.tensor_sweep import Config, register_refusal, run_sweep, select_peak
from gpudissect.catalog.tensor import load_tensor_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Result, Store
from gpudissect.suites.tensor import suite as T
from gpudissect.suites.tensor.analyse import summarize_run
from gpudissect.suites.tensor.checks import Work, compile_work

TARGET = make_target("sm_90")


def _r(chains: int, warps: int, value: float | None, flags=(), per_repeat=None) -> Result:
    return Result("v", "throughput", value, "instr/cycle/SM", "s",
                  params={"family": f"c{chains}", "group": "mma", "chains": chains, "warps": warps,
                          "issuers": warps},
                  samples={"rate_per_repeat": per_repeat or [value] * 4}, flags=list(flags))


# --- peak selection and saturation evidence ------------------------------------------------


def test_a_plateau_is_saturated_and_the_best_is_the_highest_clean_rate():
    rs = [_r(4, 4, 0.50), _r(4, 8, 0.655), _r(4, 16, 0.667), _r(8, 8, 0.66), _r(8, 16, 0.664),
          _r(8, 32, 0.70, flags=["noisy: +-5%"])]  # the noisy one is higher but untrusted
    pk = select_peak(rs, limit=1.0)
    assert pk.best.value == pytest.approx(0.667) and pk.best.params["warps"] == 16
    assert pk.evidence and "no longer raises" in pk.evidence
    assert not any(f.startswith("not-saturated") for f in pk.flags)
    assert pk.smallest.params["chains"] == 4 and pk.smallest.params["warps"] == 8  # 0.655 within 2%


def test_a_rate_still_rising_at_the_largest_configuration_is_not_saturated():
    rs = [_r(8, 4, 0.25), _r(8, 8, 0.5), _r(8, 16, 0.8)]
    pk = select_peak(rs, limit=2.0)
    assert pk.best.value == 0.8 and pk.evidence is None
    assert any(f.startswith("not-saturated") and "no larger configuration" in f for f in pk.flags)


def test_a_larger_configuration_that_falls_is_no_saturation_evidence():
    rs = [_r(8, 8, 0.5), _r(8, 16, 0.8), _r(8, 32, 0.7)]
    pk = select_peak(rs, limit=2.0)
    assert pk.best.value == 0.8
    assert any(f.startswith("not-saturated") and "lower by more than 2%" in f for f in pk.flags)


def test_a_refused_larger_configuration_is_named():
    rs = [_r(8, 8, 0.5), _r(8, 16, 0.8), _r(8, 32, None, flags=["refused: 32 warps need ..."])]
    pk = select_peak(rs, limit=2.0)
    assert any("could not be timed" in f and "refused" in f for f in pk.flags if f.startswith("not-saturated"))


def test_the_physical_peak_is_saturation_evidence_by_itself():
    pk = select_peak([_r(1, 4, 0.99)], limit=1.0)
    assert pk.evidence.startswith("at the physical peak") and not pk.flags


def test_no_clean_configuration_gives_no_peak():
    pk = select_peak([_r(8, 8, 0.5, flags=["poor-fit: x"]), _r(8, 16, None, flags=["refused: y"])], limit=1.0)
    assert pk.best is None and pk.flags[0].startswith("no clean configuration") and "poor-fit" in pk.flags[0]


# --- the sweep's order and stop rules ------------------------------------------------------


def _pipe(interval: float, latency: float):
    """A tensor pipe per scheduler (4 per SM) that issues one instruction every ``interval``
    cycles, each with a dependent latency: W warps x C accumulators per warp run at
    W*C / max(latency, C*ceil(W/4)*interval) instructions per cycle per SM (peak 4/interval)."""
    return lambda c, w: w * c / max(latency, c * -(-w // 4) * interval)


def test_the_sweep_stops_an_accumulator_count_once_more_warps_no_longer_raise_it():
    rate = _pipe(6.0, 33.0)
    cfgs = [Config(f"c{c}", "mma", c, w) for c in (1, 2, 4, 8) for w in (4, 8, 16, 32, 64)]
    seen: list[tuple[int, int]] = []

    def measure(cfg: Config) -> Result:
        seen.append((cfg.chains, cfg.warps))
        return _r(cfg.chains, cfg.warps, rate(cfg.chains, cfg.warps))

    rs = run_sweep(cfgs, measure, limit=None)
    par = [c * w for c, w in seen]
    assert par == sorted(par)  # in order of parallelism
    # 8 accumulators saturate at 4 warps (8*6 >= 33): 8 warps no longer raise it, 16 are never run
    assert (8, 8) in seen and (8, 16) not in seen
    # 1 accumulator is latency-bound until 32 warps (4 per scheduler x 6 >= 33 at 24): it runs on
    assert (1, 32) in seen and (1, 64) in seen
    pk = select_peak(rs, limit=None)
    assert pk.best.value == pytest.approx(4 / 6.0) and pk.evidence


def test_the_sweep_stops_at_the_physical_peak():
    rate = _pipe(4.0, 24.0)  # 8 acc x 4 warps reach the limit of 1 instr/cycle/SM
    cfgs = [Config(f"c{c}", "mma", c, w) for c in (4, 8) for w in (4, 8, 16)]
    rs = run_sweep(cfgs, lambda cfg: _r(cfg.chains, cfg.warps, rate(cfg.chains, cfg.warps)), limit=1.0)
    assert [(r.params["chains"], r.params["warps"]) for r in rs] == [(4, 4), (8, 4)]
    assert select_peak(rs, limit=1.0).evidence.startswith("at the physical peak")


def test_a_refusal_stops_its_accumulator_count():
    def measure(cfg: Config) -> Result:
        if cfg.warps >= 16:
            return _r(cfg.chains, cfg.warps, None, flags=["refused: registers"])
        return _r(cfg.chains, cfg.warps, 0.1 * cfg.warps)

    rs = run_sweep([Config("c8", "mma", 8, w) for w in (4, 8, 16, 32)], measure, limit=None)
    assert [r.params["warps"] for r in rs] == [4, 8, 16]


def test_register_refusal_counts_the_allocation_granule():
    assert register_refusal(64, 32, 65536, 8) is None
    assert register_refusal(65, 32, 65536, 8).startswith("refused: 32 warps need 73728 registers")
    assert register_refusal(32, 64, 65536, 8) is None and register_refusal(33, 64, 65536, 8)
    assert register_refusal(33, 62, 65536, 1) is None  # no rounding: 33 x 32 x 62 registers fit


# --- the whole suite on a fake GPU whose tensor pipe saturates -----------------------------


def _pipe_model(interval: float, latency: float, mhz: float = 1500.0):
    rate = _pipe(interval, latency)

    def model(kernel, grid, block, args, smem):
        if kernel == "sm_clock":  # bench/clock.py: (clock0, clock1, globaltimer0, globaltimer1, smid)
            w = np.zeros((grid, 5), dtype=np.uint64)
            w[:, 1], w[:, 3] = int(mhz * 1000), 1_000_000
            return {"clock_out": w.ravel()}
        tb = next(a for a in args if getattr(a, "name", "") == "tc_times")
        length = int(kernel.rsplit("_n", 1)[1])
        m = re.search(r"_(?:c|a)(\d+)(?:_thr)?_n\d+$", kernel)
        chains = int(m.group(1)) if m else 1
        warps = max(1, block // 32)
        per = 32 if kernel.startswith("wg") else 1  # wgmma: one issuer per warpgroup
        issuers = max(1, warps // (4 if per == 32 else 1))
        cyc = length * chains * issuers / rate(chains, issuers) if "_thr" in kernel else length * latency
        t = np.zeros((grid * warps, 2 * T.REPS + 1), dtype=np.uint64)
        t[:, -1] = np.repeat(np.arange(grid), warps)
        for r in range(T.REPS):
            t[:, 2 * r] = 100 + 10_000 * r
            t[:, 2 * r + 1] = 100 + 10_000 * r + 50 + int(round(cyc))
        reps = int(next(a for a in args if getattr(a, "name", "") == "tc_in").data[0])
        return {tb.name: t.ravel(), "_gpu_ms": [reps * (50 + cyc) / (mhz * 1e3)]}

    return model


SWEEP = T.Sweep(lat_lengths=(2, 4), thr_units=(32, 64, 128), mma_chains=(1, 2, 4, 8), mma_warps=(4, 8, 16, 32),
                wg_lat_lengths=(2, 4), wg_thr_units=(4, 8), wg_n_full=(64,), wg_n_other=(64,), wg_accs=(1, 2),
                wg_groups=(1, 2), data_variants=("mma.sync.m16n8k16.f32.f16.f32",), layouts=False)


def test_the_suite_finds_the_saturated_rate_of_a_pipe_and_times_the_data_and_the_issue_interval(tmp_path):
    st = Store(tmp_path / "t.db")
    dev = FakeDevice(sm_count=4, launch_model=_pipe_model(interval=6.0, latency=24.0))
    name = "mma.sync.m16n8k16.f32.f16.f32"
    rid = run(T.TensorSuite(SWEEP), Context(dev, st, TARGET, jobs=1), [name]).run_id
    rs = st.results(rid)
    pk = next(r for r in rs if r["measure"] == "throughput_peak")
    assert pk["value"] == pytest.approx(4 / 6.0, rel=1e-3)
    assert pk["params"]["saturation"] and not any(f.startswith("not-saturated") for f in pk["flags"])
    assert pk["params"]["observed_sm_mhz"] == pytest.approx(1500.0)  # the in-kernel clock, not NVML's 1000
    assert pk["params"]["tflops"] == pytest.approx(4 / 6.0 * 4096 * 4 * 1500e6 / 1e12, rel=1e-3)
    assert pk["params"]["cycles_per_instr_per_scheduler"] == pytest.approx(6.0, rel=1e-3)
    thr = [r for r in rs if r["measure"] == "throughput"]
    assert len(thr) > 4 and all(r["samples"]["warp_windows_one_sm"] for r in thr if r["value"])
    iss = next(r for r in rs if r["measure"] == "issue_interval")
    assert iss["value"] == pytest.approx(6.0, rel=1e-3)  # one warp, 8 accumulators: the pipe interval
    data = {r["params"]["data"]: r for r in rs if r["measure"] == "throughput_data"}
    assert set(data) == {"zero", "random"} and data["zero"]["value"] == pytest.approx(pk["value"], rel=1e-3)
    sus = {r["params"]["order"]: r for r in rs if r["measure"] == "throughput_sustained"}
    assert [sus[o]["params"]["data"] for o in (1, 2, 3)] == ["zero", "random", "zero"]
    # the fake writes no block stamps and has no NVML: both said so, the clock the implied one
    assert sus[2]["params"]["nvml"]["nvml"] == "unknown" and "error" in sus[2]["params"]["sm_mhz_in_kernel"]
    assert sus[2]["params"]["clock"].startswith("implied")
    assert sus[2]["params"]["implied_sm_mhz"] == pytest.approx(1500.0, rel=1e-3)
    # the clock stays in the model: only the fixed cost of each repetition separates the two figures
    assert 0.9 * pk["params"]["tflops"] < sus[2]["value"] < pk["params"]["tflops"]
    assert sus[2]["params"]["gpu_ms"] == pytest.approx(SWEEP.sustained_ms, rel=0.05)
    conc = "\n".join(st.get_meta(f"summary:{rid}")["conclusions"])
    assert "saturated:" in conc and "zero operands" in conc and "sustained about 200 ms" in conc


def test_a_pipe_the_sweep_cannot_fill_is_flagged_not_saturated(tmp_path):
    st = Store(tmp_path / "t.db")
    dev = FakeDevice(sm_count=4, launch_model=_pipe_model(interval=1.0, latency=400.0))
    sweep = T.Sweep(**{**SWEEP.to_json(), "data_variants": ()})
    rid = run(T.TensorSuite(sweep), Context(dev, st, TARGET, jobs=1), ["mma.sync.m16n8k16.f32.f16.f32"]).run_id
    pk = next(r for r in st.results(rid) if r["measure"] == "throughput_peak")
    assert pk["params"]["warps"] == 32 and pk["params"]["chains"] == 8  # the largest configuration
    assert any(f.startswith("not-saturated") for f in pk["flags"]) and pk["params"]["saturation"] is None


# --- sparse wgmma ------------------------------------------------------------------------------


@pytest.mark.parametrize("name,sass", [
    ("wgmma.sp.f32.f16", "HGMMA.SP.64x256x32.F32"),
    ("wgmma.sp.f32.bf16", "HGMMA.SP.64x256x32.F32.BF16"),
    ("wgmma.sp.f32.tf32", "HGMMA.SP.64x256x16.F32.TF32"),
    ("wgmma.sp.f16.e4m3.e5m2", "QGMMA.SP.64x256x64.F16.E4M3.E5M2"),
    ("wgmma.sp.s32.u8.s8", "IGMMA.SP.64x256x64.U8.S8"),
])
def test_sparse_wgmma_assembles_to_the_sparse_mma_sass(name, sass):
    v = next(v for v in load_tensor_catalog().wgmma if v.name == name)
    sweep = T.Sweep(wg_lat_lengths=(2, 4), wg_thr_units=(2, 4), wg_n_other=(256,), wg_accs=(1,))
    w = Work(v, kernels=T.wgmma_kernels(v, sweep, TARGET, 0))
    k = w.kernels[0]
    assert v.sparse and v.peak_key == f"{v.atype}:sparse"
    assert re.search(rf"wgmma\.mma_async\.sp\.sync\.aligned\.m64n256k{v.k}\.", k.ptx)
    assert f"mov.b32 %spmeta, {v.sp_meta:#x};" in k.ptx and k.ptx.count(f"%spmeta, {v.sp_sel}, 1") == k.units
    compile_work(w, TARGET)
    assert w.check.status == "native", w.check.reason
    assert w.check.sass == {sass: "1"}
    assert all(c.ok for c in w.checks.values())


def test_every_sparse_wgmma_type_of_the_ptx_reference_is_in_the_catalog():
    sp = {(v.dtype, v.atype, v.btype) for v in load_tensor_catalog().wgmma if v.sparse}
    f8 = [(a, b) for a in ("e4m3", "e5m2") for b in ("e4m3", "e5m2")]
    i8 = [(a, b) for a in ("s8", "u8") for b in ("s8", "u8")]
    want = {("f32", "f16", "f16"), ("f16", "f16", "f16"), ("f32", "bf16", "bf16"), ("f32", "tf32", "tf32")}
    want |= {(d, a, b) for d in ("f32", "f16") for a, b in f8} | {("s32", a, b) for a, b in i8}
    assert sp == want
    dense_k = {(v.dtype, v.atype, v.btype): v.k for v in load_tensor_catalog().wgmma if not v.sparse}
    assert all(v.k == 2 * dense_k[(v.dtype, v.atype, v.btype)] for v in load_tensor_catalog().wgmma if v.sparse)


# --- conclusions ------------------------------------------------------------------------------


class _Rows:
    def __init__(self, rows: list[dict]):
        self.rows = rows

    def results(self, run_id):
        return self.rows


def _row(variant, measure, value, params, flags=(), sass=()):
    return {"variant": variant, "measure": measure, "value": value, "params": params, "flags": list(flags),
            "sass": list(sass), "samples": None}


def test_the_wgmma_conclusion_pairs_throughput_and_latency_of_the_same_n():
    v = "wgmma.f32.f16"
    peak = {"flop_per_cycle_sm": 4096.0, "tflops": 1000.0, "pct_of_peak": 100.0, "observed_sm_mhz": 1980.0,
            "chains": 1, "issuers": 2, "warps": 8, "saturation": "at the physical peak"}
    rows = [_row(v, "sass_map", None, {"status": "native"}, sass=["1*HGMMA.64x128x16.F32"]),
            _row(v, "latency", 19.0, {"family": "wg3_ss_n8_lat", "group": "ss_n8"}),
            _row(v, "latency", 67.0, {"family": "wg3_ss_n128_lat", "group": "ss_n128"}),
            _row(v, "latency", 130.0, {"family": "wg3_ss_n256_lat"}),  # an older record: no group stored
            _row(v, "throughput_peak", 0.03, {**peak, "group": "ss_n128", "n": 128}),
            _row(v, "throughput_peak", 0.9, {**peak, "group": "ss_n8", "n": 8, "pct_of_peak": 21.0,
                                             "tflops": 210.0, "saturation": None},
                 flags=["not-saturated: 1x2: 0.9 is the best; no larger configuration was timed"])]
    conc = summarize_run(_Rows(rows), 1)["conclusions"]
    line = next(c for c in conc if c.startswith(f"{v} [ss_n128]"))
    assert "latency 67.0 cycles (ss_n128)" in line and "19.0" not in line
    per_n = next(c for c in conc if c.startswith(f"{v} reaches 90%"))
    assert "ss_n8: 21% (latency 19, " in per_n and "ss_n128: 100% (latency 67, " in per_n
    assert per_n.split("ss_n8: ")[1].split(", ss_n")[0].endswith("NOT SATURATED")
    # 128 x 32 B of B and 64 x 32 B of A per instruction at 0.03 instr/cycle
    assert f"{(128 * 32 + 64 * 32) * 0.03:.0f} B/cycle of operands from shared memory" in per_n


def test_sparse_mma_is_compared_with_its_dense_partner():
    sp, dense = "mma.sp.m16n8k32.f32.f16.f32", "mma.sync.m16n8k16.f32.f16.f32"
    rows = [_row(sp, "throughput_peak", 0.5, {"group": "mma", "flop_per_cycle_sm": 4096.0,
                                              "cycles_per_instr_per_scheduler": 8.0}),
            _row(dense, "throughput_peak", 0.6667, {"group": "mma", "flop_per_cycle_sm": 2730.7,
                                                    "cycles_per_instr_per_scheduler": 6.0}),
            _row(sp, "issue_interval", 8.0, {"chains": 8}), _row(dense, "issue_interval", 6.0, {"chains": 8})]
    line = next(c for c in summarize_run(_Rows(rows), 1)["conclusions"] if c.startswith(sp) and "dense" in c)
    assert "1.50x the dense mma.sync.m16n8k16.f32.f16.f32" in line and "NOT twice" in line
    assert "one every 8.00 cycles" in line and "one warp alone: one every 8.00 vs 6.00 cycles" in line


def test_variants_of_identical_sass_that_disagree_are_named():
    rows = []
    for v, val in (("a", 0.666), ("b", 0.667), ("c", 0.5)):
        rows += [_row(v, "sass_map", None, {"status": "native"}, sass=["2*HMMA.16816.F16"]),
                 _row(v, "throughput_peak", val, {"group": "mma", "flop_per_cycle_sm": val * 8192})]
    line = next(c for c in summarize_run(_Rows(rows), 1)["conclusions"] if c.startswith("identical SASS"))
    assert "0 of 1 groups" in line and "c 0.5 vs b 0.667" in line


def test_the_sustained_runs_come_after_every_sweep():
    ctx = Context(FakeDevice(sm_count=4), None, TARGET)
    names = ["wgmma.f32.f16", "mma.sync.m16n8k16.f32.f16.f32", "mma.sync.m16n8k8.f16.f16.f16"]
    items = T.TensorSuite(SWEEP).plan(ctx, names).items
    sustained = [i for i, it in enumerate(items) if it.name.startswith(T.SUSTAINED)]
    assert [items[i].name for i in sustained] == ["sustained:mma.sync.m16n8k16.f32.f16.f32"]
    assert sustained == [len(items) - 1]
    none = T.Sweep(**{**SWEEP.to_json(), "sustained_ms": 0.0})
    assert not any(it.name.startswith(T.SUSTAINED) for it in T.TensorSuite(none).plan(ctx, names).items)


class _Clocked(FakeDevice):
    def clocks(self) -> dict:
        return {"sm_mhz": 1980, "sm_max_mhz": 1980}


def test_an_in_kernel_clock_above_the_maximum_is_flagged():
    dev = _Clocked()
    assert T.clock_flag(dev, [{"sm_mhz_kernel": 1995.0}]) is None  # within 1%
    flag = T.clock_flag(dev, [{"sm_mhz_kernel": 1990.0}, {"sm_mhz_kernel": 2090.0}])
    assert flag.startswith("clock-suspect") and "2090" in flag and "1980" in flag
    assert T.clock_flag(FakeDevice(), [{"sm_mhz_kernel": 5000.0}]) is None  # no maximum to compare with


# --- serialized wgmma, and conclusions that carry the flags of what they state ----------------


def test_a_wgmma_throughput_family_that_waits_after_every_instance_is_serialized():
    import dataclasses

    from gpudissect.kernel.sass import SassInstr
    from gpudissect.suites.tensor.checks import check_tensor_family, family_key

    v = next(v for v in load_tensor_catalog().wgmma if v.name == "wgmma.f32.f16")
    sweep = T.Sweep(wg_lat_lengths=(2, 4), wg_thr_units=(4, 8), wg_n_full=(64,), wg_accs=(1,))
    w = Work(v, kernels=[k for k in T.wgmma_kernels(v, sweep, TARGET, 0) if not k.meta["a_from"] == "registers"])
    compile_work(w, TARGET)
    key = next(family_key(k) for k in w.kernels if k.measure == "throughput")
    fam = sorted((w.built[k.name] for k in w.kernels if family_key(k) == key), key=lambda b: b.kernel.units)
    assert check_tensor_family(fam, waits_ok=False).status == "native"  # ptxas overlaps them here
    wait = SassInstr(0, "WARPGROUP", ("DEPBAR", "LE"), ("gsb0", "0x0"))

    def waiting(b):  # the same kernel as if ptxas waited for each wgmma before the next
        region = [x for i in b.region for x in ((i, wait) if i.opcode.endswith("GMMA") else (i,))]
        return dataclasses.replace(b, region=region)

    ser = check_tensor_family([waiting(b) for b in fam], waits_ok=False)
    assert ser.status == "serialized" and "WARPGROUP.DEPBAR" in ser.reason
    assert check_tensor_family([waiting(b) for b in fam]).status != "serialized"  # latency kernels may wait


def test_the_conclusions_carry_the_flags_of_movers_peaks_and_sustained_runs():
    mover, v = "ldmatrix.m8n8.x1.b16", "mma.sync.m16n8k16.f32.f16.f32"
    peak = {"group": "mma", "flop_per_cycle_sm": 2730.7, "tflops": 700.0, "observed_sm_mhz": 1980.0,
            "chains": 4, "issuers": 4, "warps": 4, "saturation": "plateau"}
    rows = [_row(mover, "throughput_peak", 1.0, {"group": "ldst", "flop_per_cycle_sm": 128.0, "tflops": 33.5,
                                                 "observed_sm_mhz": 1980.0},
                 flags=["not-saturated: 4 acc x 16: 1.0 is the best; no larger configuration was timed"]),
            _row(v, "throughput_peak", 0.6667, peak, flags=["clock-suspect: 2100 MHz above 1980 MHz"])]
    for order, data, tf in ((1, "zero", 640.0), (2, "random", 630.0), (3, "zero", 620.0)):
        rows.append(_row(v, "throughput_sustained", tf, {"order": order, "data": data, "target_ms": 200.0},
                         flags=["clock-suspect: x"] if order == 1 else []))
    rows += [_row(v, "throughput_data", 0.6667, {"data": d, "group": "mma", "chains": 4, "issuers": 4})
             for d in ("zero", "random")]
    conc = summarize_run(_Rows(rows), 1)["conclusions"]
    assert "NOT SATURATED (4 acc x 16" in next(c for c in conc if c.startswith(mover))
    assert "[clock-suspect]" in next(c for c in conc if c.startswith(f"{v} [mma]:"))
    line = next(c for c in conc if "sustained about 200 ms" in c)
    assert "zero 640.0 TFLOP/s [clock-suspect]; random 630.0 TFLOP/s; " in line
    # random lies between the two zero runs: no effect of the data is shown
    assert "random +0.0% against the mean of the zero runs; the zero runs differ by -3.1%: within" in line


def test_the_peak_tflops_are_at_the_clock_the_peak_states(tmp_path):
    calls = iter(range(1000))
    base = _pipe_model(interval=6.0, latency=24.0)

    def model(kernel, grid, block, args, smem):  # the in-kernel clock rises by 10 MHz per reading
        if kernel == "sm_clock":
            return _pipe_model(6.0, 24.0, mhz=1500.0 + 10 * next(calls))(kernel, grid, block, args, smem)
        return base(kernel, grid, block, args, smem)

    st = Store(tmp_path / "t.db")
    sweep = T.Sweep(**{**SWEEP.to_json(), "data_variants": ()})
    rid = run(T.TensorSuite(sweep), Context(FakeDevice(sm_count=4, launch_model=model), st, TARGET, jobs=1),
              ["mma.sync.m16n8k16.f32.f16.f32"]).run_id
    p = next(r for r in st.results(rid) if r["measure"] == "throughput_peak")["params"]
    before, after = (c["sm_mhz_kernel"] for c in p["sm_mhz_kernel"])
    assert after > before and p["observed_sm_mhz"] == pytest.approx((before + after) / 2)
    assert p["tflops"] == pytest.approx(p["flop_per_cycle_sm"] * 4 * p["observed_sm_mhz"] * 1e6 / 1e12, rel=1e-6)
