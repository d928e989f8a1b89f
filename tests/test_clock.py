"""The in-kernel SM clock measurement (bench/clock.py): its kernel really spins between the
clock reads, and the arithmetic from (clock64, globaltimer) pairs to MHz."""

from __future__ import annotations

import numpy as np

from gpudissect.bench.clock import WORDS, clock_kernel, measure_sm_clock, mhz_per_sm
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.build import build_one
from gpudissect.kernel.region import find_region
from gpudissect.target import make_target


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
