"""Sustained headlines (issue 33): every tensor and bandwidth headline has a sustained quantity and
a burst one, each shown with its timing and its SM clock in every view of the key quantities; the
NVML summary of a sustained run; the SM clock of a long launch from its blocks' stamps; the stamps
stay outside the timed region."""

from __future__ import annotations

import numpy as np
import pytest

from gpudissect.bench import power
from gpudissect.bench.clock import WRAP, clock_disagreement, stamp_clock, unwrap_cycles
from gpudissect.kernel.timing import STAMP_WORDS
from gpudissect.report.assemble.compare import key_rows, measured_values
from gpudissect.report.present.markdown import quantity_rows
from gpudissect.report.read.metrics import key_quantities, lookup, metric_specs
from gpudissect.report.read.results import ResultSet

HEADLINE_GROUPS = ("tensor", "bandwidth")
BW_HEADLINES = ("dram_bandwidth", "l2_bandwidth")


def _rates() -> dict[str, dict]:
    return {n: s for n, s in key_quantities().items() if s["group"] in HEADLINE_GROUPS and "timing" in s}


def _record_globs(spec: dict) -> list:
    return [src.get("record") for src in spec["from"] if "record" in src]


def test_every_tensor_and_bandwidth_headline_has_a_sustained_and_a_burst_quantity():
    rates = _rates()
    bursts = {n: s for n, s in rates.items() if s["timing"] == "burst"}
    sustained = {n: s for n, s in rates.items() if s["timing"] == "sustained"}
    tensor_bursts = [n for n, s in bursts.items() if s["group"] == "tensor"]
    assert len(tensor_bursts) >= 6 and all(b in bursts for b in BW_HEADLINES)
    for name, spec in bursts.items():
        twin = [s for n, s in sustained.items() if s["group"] == spec["group"] and s["unit"] == spec["unit"]
                and s["kind"] == spec["kind"] and (_record_globs(s) == _record_globs(spec) if _record_globs(spec)
                                                   else n == name.removesuffix("_peak") + "_sustained")]
        assert len(twin) == 1, f"{name}: no single sustained twin"
        # the sustained headline comes first in the key view, the burst beside it
        order = list(key_quantities())
        sname = next(n for n, s in sustained.items() if s is twin[0])
        assert order.index(sname) < order.index(name), name
    for name, spec in sustained.items():  # a sustained source takes sustained figures only
        for src in spec["from"]:
            if "summary" in src:
                assert "sustained" in src["summary"], name
            if "record" in src:
                assert src.get("match") == {"data": "random"}, name


def _peak(variant: str, tflops: float, **params) -> dict:
    return {"variant": variant, "measure": "throughput_peak", "unit": "instr/cycle/SM", "value": 0.1, "flags": [],
            "params": {"tflops": tflops, **params}}


def _sus(variant: str, tflops: float, data: str, **params) -> dict:
    return {"variant": variant, "measure": "throughput_sustained", "unit": "TFLOP/s", "value": tflops,
            "flags": [], "params": {"data": data, **params}}


NVML = {"nvml": "sampled", "samples": 12, "power_w_median": 650.0, "power_w_max": 700.0, "sm_mhz_min": 1590,
        "sm_mhz_median": 1605, "throttle_reasons": ["sw_power_cap"]}


def _set(new: bool) -> ResultSet:
    """A tensor and a memory document: ``new`` with the in-kernel clock and NVML, else as the
    shipped sets have them (implied clock only, no sustained bandwidth)."""
    sus_params = ({"sm_mhz_in_kernel": {"median": 1600.0, "min": 1590.0, "max": 1610.0}, "nvml": NVML,
                   "implied_sm_mhz": 1598.0} if new else {"implied_sm_mhz": 1540.0})
    tensor = {"records": [_peak("wgmma.f32.bf16", 1070.0, observed_sm_mhz=1976.0),
                          _sus("wgmma.f32.bf16", 900.0, "zero", **sus_params),
                          _sus("wgmma.f32.bf16", 850.0, "random", **sus_params)], "summary": {}}
    bw = {"DRAM/read": {"GB/s": 4500.0, "sm_mhz_kernel": 1980.0},
          "L2/read": {"GB/s": 8800.0, "sm_mhz_kernel": 1979.0}}
    if new:
        bw["DRAM/read"]["sustained"] = {"GB/s": 4400.0, "sm_mhz_kernel": 1700.0, "nvml": NVML}
        bw["L2/read"]["sustained"] = {"GB/s": 8000.0, "sm_mhz_kernel": 1650.0, "nvml": {"nvml": "unknown",
                                                                                         "why": "no NVML"}}
    memory = {"records": [], "summary": {"bandwidth": bw}}
    return ResultSet("syn", "synthetic", {"tensor": tensor, "memory": memory})


def test_sustained_and_burst_rates_are_found_with_their_clocks_on_new_data():
    rs = _set(new=True)
    s, b = lookup(rs, "tensor_bf16_sustained"), lookup(rs, "tensor_bf16_peak")
    assert s.value == 850.0  # the random-operand run, not the zero one
    assert "sustained; SM clock 1600 MHz in-kernel (SMs 1590-1610)" in s.source
    assert "650 W median, 700 W max" in s.source and "sw_power_cap" in s.source
    assert b.value == 1070.0 and "burst; SM clock 1976 MHz in a separate kernel" in b.source
    d = lookup(rs, "dram_bandwidth_sustained")
    assert d.value == 4400.0 and "sustained; SM clock 1700 MHz in-kernel" in d.source and "650 W" in d.source
    assert "power unknown (no NVML)" in lookup(rs, "l2_bandwidth_sustained").source
    assert "burst; SM clock 1980 MHz" in lookup(rs, "dram_bandwidth").source


def test_on_the_shipped_shape_the_clock_is_the_implied_one_and_missing_figures_are_not_measured():
    rs = _set(new=False)
    s = lookup(rs, "tensor_bf16_sustained")
    assert s.value == 850.0 and "SM clock 1540 MHz implied by the rates (no in-kernel reading)" in s.source
    assert lookup(rs, "dram_bandwidth_sustained") is None
    assert lookup(rs, "dram_bandwidth").value == 4500.0


@pytest.mark.parametrize("new", [True, False])
def test_the_views_print_both_rates_with_a_clock(new):
    rs = _set(new)
    names = ["tensor_bf16_sustained", "tensor_bf16_peak", "dram_bandwidth_sustained", "dram_bandwidth"]
    table = "\n".join(quantity_rows(rs, [(n, metric_specs()[n]["label"]) for n in names]))
    for n in names:
        row = next(line for line in table.splitlines() if line.startswith(f"| {metric_specs()[n]['label']} |"))
        found = lookup(rs, n)
        if found is None:
            assert "not measured" in row
        else:
            assert f"[{metric_specs()[n]['timing']}; SM clock " in row and "MHz" in row, row
    rows = {r.key: r for r in key_rows([measured_values(rs), measured_values(rs)])}
    for n in ("tensor_bf16_sustained", "tensor_bf16_peak"):
        assert "MHz" in measured_values(rs)[f"quantity/{n}"].note
        assert f"quantity/{n}" in rows


def test_nvml_reasons_decode_to_names_and_unknown_bits_stay_visible():
    names = power.reason_names()
    assert names["sw_power_cap"] == 0x4 and names["gpu_idle"] == 0x1
    assert power.decode(0x4 | 0x1) == ["gpu_idle", "sw_power_cap"]
    assert power.decode(0x4 | 0x10000) == ["sw_power_cap", "0x10000"]
    assert power.decode(0) == []


def test_nvml_summary_and_its_absence():
    samples = [{"t": 0.000, "power_w": 300.0, "sm_mhz": 1980, "temp_c": 40, "reasons": 0x1},
               {"t": 0.015, "power_w": 690.0, "sm_mhz": 1650, "temp_c": 55, "reasons": 0x4},
               {"t": 0.030, "power_w": 700.0, "sm_mhz": 1600, "temp_c": 56, "reasons": 0x4 | 0x8}]
    s = power.summarize(samples)
    assert s["nvml"] == "sampled" and s["samples"] == 3 and s["span_ms"] == 30.0
    assert (s["power_w_median"], s["power_w_max"], s["sm_mhz_min"], s["sm_mhz_median"]) == (690.0, 700.0, 1600, 1650)
    assert s["throttle_reasons"] == ["gpu_idle", "hw_slowdown", "sw_power_cap"]
    assert s["throttle_share"]["sw_power_cap"] == pytest.approx(2 / 3, abs=1e-3)
    none = power.summarize([], why="ImportError: no pynvml")
    assert none == {"nvml": "unknown", "why": "ImportError: no pynvml"}
    with power.Watch(None) as w:  # a fake device: no readings, never a failure
        pass
    assert w.summary["nvml"] == "unknown"


def _stamps(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    return np.array(rows, dtype=np.uint64).reshape(-1)


def test_the_clock_of_a_long_launch_from_its_block_stamps():
    ns = 200_000_000  # 200 ms
    rows = [(1000, 1000 + 2 * ns * 8 // 10, 5_000, 5_000 + ns, 0),  # SM 0: two blocks, 1600 MHz each
            (7, 7 + 2 * ns * 8 // 10, 6_000, 6_000 + ns, 0),
            (50, 50 + 33 * ns // 20, 5_000, 5_000 + ns, 1),  # SM 1: 1650 MHz
            (0, 0, 0, 0, 0)]  # a block that wrote nothing
    c = stamp_clock(_stamps([(a % WRAP, b % WRAP, g0, g1, sm) for a, b, g0, g1, sm in rows]), mhz_hint=1700.0)
    assert (c["median"], c["min"], c["max"], c["sms"], c["blocks"]) == (1625.0, 1600.0, 1650.0, 2, 3)
    assert c["span_ms"] == pytest.approx(200.0)
    # the 32-bit clock wraps: 2.5 s at 1.8 GHz is one wrap and more; the elapsed time undoes it
    long_ns = 2_500_000_000
    cycles = 18 * long_ns // 10
    assert cycles > WRAP
    w = stamp_clock(_stamps([(100, (100 + cycles) % WRAP, 1, 1 + long_ns, 3)]), mhz_hint=1500.0)
    assert w["median"] == pytest.approx(1800.0, abs=0.1)
    assert unwrap_cycles(np.array([5]), np.array([10]), None)[0] == 5  # no hint: no wrap added
    assert stamp_clock(np.zeros(STAMP_WORDS * 2, dtype=np.uint64)) == {
        "error": "no block wrote a usable clock / globaltimer pair"}


def test_in_kernel_and_implied_clocks_apart_is_a_flag_with_both_numbers():
    assert clock_disagreement(1600.0, 1610.0) is None
    f = clock_disagreement(1600.0, 1980.0)
    assert f.startswith("clock-disagrees:") and "1600 MHz" in f and "1980 MHz" in f
    assert clock_disagreement(None, 1700.0) is None


def test_the_stamps_stay_outside_the_timed_region():
    """The stamped kernel's timed region is the plain one's, SASS for SASS: the stamps' 32-bit clock
    reads are no region delimiters, and their stores lie before and after the loop."""
    from gpudissect.arch.target import make_target
    from gpudissect.catalog.tensor import load_tensor_catalog
    from gpudissect.kernel.build import build_module
    from gpudissect.kernel.mma import tensor_arch
    from gpudissect.suites.tensor.kernels import mma_kernel

    target = make_target("sm_90")
    v = next(v for v in load_tensor_catalog().mma if v.name == "mma.sync.m16n8k16.f32.f16.f32")
    plain = mma_kernel(v, "p", "throughput", 4, 16, 1, target)
    stamped = mma_kernel(v, "s", "throughput", 4, 16, 1, target, stamps=True)
    assert "%globaltimer" in stamped.entry and "%globaltimer" not in plain.entry
    built = build_module([plain, stamped], tensor_arch(target))
    p, s = built["p"], built["s"]
    assert [i.full for i in s.region] == [i.full for i in p.region] and p.region
    assert sum("SR_GLOBALTIMER" in " ".join(i.operands) for i in s.instrs) >= 2


class _Run:
    def __init__(self, outputs, gpu_ms):
        self.outputs, self.gpu_ms = outputs, gpu_ms


class _Dev:
    """Two SMs; every warp's kept repetitions span 1000 cycles; the launch takes ``gpu_ms``;
    each block's stamps say its loop ran ``stamp_mhz`` for ``gpu_ms``."""

    def __init__(self, gpu_ms: float, stamp_mhz: float):
        from types import SimpleNamespace
        self.info = SimpleNamespace(sm_count=2, index=0)
        self.gpu_ms, self.stamp_mhz, self.launched = gpu_ms, stamp_mhz, []

    def launch(self, cubin, name, grid, block, args, launches=1):
        from gpudissect.kernel.mma import TIMED_REPS
        from gpudissect.kernel.timing import row_words
        self.launched.append(name)
        warps, tpt = grid * block // 32, row_words(TIMED_REPS)
        rows = np.zeros((warps, tpt), dtype=np.uint64)
        for w in range(warps):
            for k in range(TIMED_REPS):
                rows[w, 2 * k], rows[w, 2 * k + 1] = 10_000 * k, 10_000 * k + 1000
            rows[w, -1] = w // (warps // grid)  # one block per SM here
        buf = next(a for a in args if getattr(a, "name", "") == "tc_times")
        out = np.zeros(buf.nbytes // 8, dtype=np.uint64)
        out[: warps * tpt] = rows.reshape(-1)
        if buf.nbytes // 8 > warps * tpt:
            ns = int(self.gpu_ms * 1e6)
            cyc = int(ns * self.stamp_mhz / 1000)
            for b in range(grid):
                out[warps * tpt + b * STAMP_WORDS: warps * tpt + (b + 1) * STAMP_WORDS] = \
                    [77, (77 + cyc) % WRAP, 1_000, 1_000 + ns, b]
        return _Run({"tc_times": out}, [self.gpu_ms])


def _sustained(stamp_mhz: float, stamped: bool):
    from types import SimpleNamespace

    from gpudissect.bench.tensor_sweep import Config, sustained
    b = SimpleNamespace(cubin=b"", kernel=SimpleNamespace(name="plain", length=16))
    sb = SimpleNamespace(cubin=b"", kernel=SimpleNamespace(name="stamped", length=16))
    dev = _Dev(100.0, stamp_mhz)
    words = np.zeros(4, dtype=np.uint32)
    s = sustained(dev, b, Config("f", "mma", 2, 4), 32, words, 1000.0, 1500.0, 100.0,
                  stamped=sb if stamped else None, nvml=None)
    return s, dev


def test_a_sustained_run_reads_its_clock_from_its_own_stamps():
    s, dev = _sustained(1500.0, True)
    assert dev.launched == ["stamped"] and s["reps"] == 150_000
    assert s["implied_sm_mhz"] == pytest.approx(1500.0) and s["sm_mhz_in_kernel"]["median"] == pytest.approx(1500.0)
    assert s["flags"] == [] and s["loop_instr_per_cycle_sm"] == pytest.approx(0.128)
    assert s["nvml"]["nvml"] == "unknown"
    s, _ = _sustained(1800.0, True)  # the rates imply 1500, the kernel ran at 1800: the method is wrong
    assert s["flags"] and s["flags"][0].startswith("clock-disagrees") and "1800 MHz" in s["flags"][0]
    s, dev = _sustained(1800.0, False)  # no stamped kernel: the implied clock only, said so
    assert dev.launched == ["plain"] and "error" in s["sm_mhz_in_kernel"] and s["flags"] == []


def test_a_summary_entrys_flags_reach_the_key_quantity_and_its_row():
    """A bandwidth figure the memory summary flags (single-peak, not-saturated) carries the flag's
    kind into every view that reads it: the key quantity and its table row."""
    rs = _set(new=True)
    rs.docs["memory"]["summary"]["bandwidth"]["L2/read"]["flags"] = ["single-peak: one configuration"]
    f = lookup(rs, "l2_bandwidth")
    assert f.flags == ("single-peak",)
    assert lookup(rs, "dram_bandwidth").flags == ()
    row = next(r for r in quantity_rows(rs, [("l2_bandwidth", "L2")]) if r.startswith("| L2 |"))
    assert row.endswith("[flags: single-peak] |"), row
