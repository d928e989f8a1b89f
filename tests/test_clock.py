"""The in-kernel SM clock measurement (bench/clock.py): its kernel really spins between the
clock reads, and the arithmetic from (clock64, globaltimer) pairs to MHz."""

from __future__ import annotations

import numpy as np

from gpudissect.arch.target import make_target
from gpudissect.bench.clock import WORDS, clock_kernel, measure_sm_clock, mhz_per_sm
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.build import build_one
from gpudissect.kernel.region import find_region


def _words(cycles: list[int], ns: list[int]) -> np.ndarray:
    w = np.zeros((len(cycles), WORDS), dtype=np.uint64)
    w[:, 0], w[:, 2] = 1000, 5000
    w[:, 1] = 1000 + np.array(cycles, dtype=np.uint64)
    w[:, 3] = 5000 + np.array(ns, dtype=np.uint64)
    return w.ravel()


def test_mhz_from_cycles_per_ns() -> None:
    mhz = mhz_per_sm(_words([3_960_000, 2_000_000], [2_000_000, 1_000_000]))
    assert np.allclose(mhz, [1980.0, 2000.0])


def test_unusable_pairs_are_dropped() -> None:
    assert mhz_per_sm(_words([2_000_000, 0], [0, 1_000_000])).size == 0


def test_kernel_spins_between_the_clock_reads() -> None:
    t = make_target("sm_90")
    b = build_one(clock_kernel(t), t.arch, region=False)
    region = find_region(b.instrs)
    assert sum(i.opcode == "FFMA" for i in region) >= 1, "the FMA chain was optimised away"
    assert any("SR_GLOBALTIMER" in i.text for i in b.instrs)


def test_measure_on_a_fake_device() -> None:
    def model(kernel, grid, block, args, smem):
        return {"clock_out": _words([4_000_000] * grid, [2_000_000] * grid)}

    dev = FakeDevice(launch_model=model, sm_count=3)
    got = measure_sm_clock(dev, make_target("sm_90"))
    assert got["sm_mhz_kernel"] == 2000.0 and got["sms"] == 3


def test_failure_is_reported_not_raised() -> None:
    got = measure_sm_clock(FakeDevice(), make_target("sm_90"))
    assert "sm_mhz_kernel_error" in got


def test_host_timer_reading_cancels_the_launch_overhead() -> None:
    from gpudissect.bench.clock import host_mhz

    # 2000 MHz: 4 M and 16 M cycles in 2 and 8 ms, each launch 0.3 ms longer on the host
    assert host_mhz((4e6, 16e6), (2.3e-3, 8.3e-3)) == 2000.0
    assert host_mhz((4e6, 16e6), (1e-5, 1e-5)) is None  # a fake device: no usable walls


def test_clock_flag_trusts_a_high_clock_only_when_the_host_confirms_it() -> None:
    from gpudissect.bench.clock import above_max, clock_flag

    assert clock_flag([{"sm_mhz_kernel": 2095.0, "sm_mhz_host": 2090.0}], 1980.0) is None
    assert "confirmed by the host" in above_max([{"sm_mhz_kernel": 2095.0, "sm_mhz_host": 2090.0}], 1980.0)
    unconfirmed = clock_flag([{"sm_mhz_kernel": 2095.0}], 1980.0)
    assert unconfirmed.startswith("clock-suspect") and "no host-timer reading" in unconfirmed
    disagree = clock_flag([{"sm_mhz_kernel": 1980.0}, {"sm_mhz_kernel": 2095.0, "sm_mhz_host": 1980.0}], 1980.0)
    assert disagree.startswith("clock-suspect") and "2095" in disagree and "1980" in disagree
    assert clock_flag([{"sm_mhz_kernel": 1985.0}], 1980.0) is None  # within 1%, nothing to confirm
    assert above_max([{"sm_mhz_kernel": 1985.0, "sm_mhz_host": 1984.0}], 1980.0) is None


def test_measure_reports_the_host_reading_when_launch_times_differ() -> None:
    def model(kernel, grid, block, args, smem):
        n = int(args[1])
        return {"clock_out": _words([7 * n] * grid, [int(7 * n / 2)] * grid), "_gpu_ms": [n * 3.5e-6]}

    class Timed(FakeDevice):  # host walls that follow the launch's length (2000 MHz + 0.2 ms)
        def launch(self, cubin, kernel, grid, block, args, smem=0, launches=1, cluster=None):
            run = super().launch(cubin, kernel, grid, block, args, smem, launches, cluster)
            run.wall_s = [7 * int(args[1]) / 2e9 + 2e-4]
            return run

    got = measure_sm_clock(Timed(launch_model=model, sm_count=3), make_target("sm_90"))
    assert got["sm_mhz_kernel"] == 2000.0 and got["sm_mhz_host"] == 2000.0
