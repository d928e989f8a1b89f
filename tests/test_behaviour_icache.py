"""Instruction fetch (behaviour suite, ``icache:<W>w``): the levels of the warm cost per
instruction against the code size, and the probe end to end on a FakeDevice with a planted
instruction cache."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.behaviour import analyse as an
from gpudissect.suites.behaviour import suite as bh
from gpudissect.suites.behaviour.kernels import REPS, ROW

KiB = 1024


def test_levels_split_where_the_warm_cost_rises_and_bound_each_capacity():
    code = [4 * KiB, 8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB, 128 * KiB, 256 * KiB]
    cpi = [1.02, 1.0, 1.01, 1.6, 1.62, 4.0, 4.1]
    lv = an.icache_levels(code, cpi)
    assert [x["to_bytes"] for x in lv] == [16 * KiB, 64 * KiB, 256 * KiB]
    assert [x["next_bytes"] for x in lv] == [32 * KiB, 128 * KiB, None]
    assert lv[0]["cpi"] == pytest.approx(1.01) and lv[2]["sizes"] == 2
    # a slow smallest region (start effects) does not hide the rise from the level's lowest
    assert an.icache_levels([1, 2, 3], [1.3, 1.0, 1.2])[0]["next_bytes"] == 3
    assert an.icache_levels([1, 2], [1.0, None])[0]["sizes"] == 1  # a size without a value skipped
    assert len(an.icache_levels(code, [1.0] * 7)) == 1  # no rise: one level, no upper bound


def _planted(capacity: int, warm_in: float, warm_out: float, cold: float):
    """A launch model: every order_c8_n<L> kernel's warps take ``warm_in`` cycles per FFMA while
    its code (16 B per FFMA) fits ``capacity`` bytes, ``warm_out`` beyond, ``cold`` on the first pass."""

    def model(kernel, grid, block, args, smem):
        m = re.fullmatch(r"order_c8_n(\d+)", kernel)
        assert m, kernel
        n = 8 * int(m.group(1))
        W = (block if isinstance(block, int) else block[0]) // 32
        warm = warm_in if n * 16 <= capacity else warm_out
        rows = np.zeros((grid * W, ROW), np.uint64)
        for b in range(grid):
            t = 1000
            for r in range(REPS):
                d = int(n * (cold if r == 0 else warm))
                rows[b * W:(b + 1) * W, 2 * r] = t
                rows[b * W:(b + 1) * W, 2 * r + 1] = t + d
                t += d + 100
            rows[b * W:(b + 1) * W, -1] = b
        return {"times": rows.reshape(-1)}

    return model


def test_the_probe_finds_a_planted_instruction_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(bh, "ICACHE_SIZES", (256, 512, 1024, 2048, 4096))  # 4 to 64 KiB: a quick compile
    dev = FakeDevice(sm_count=4, launch_model=_planted(16 * KiB, 1.0, 2.5, 6.0))
    store = Store(tmp_path / "b.db")
    rid = run(get_suite("behaviour"), Context(dev, store, make_target("sm_90")), ["icache:1w"], resume=True).run_id
    r = next(x for x in store.results(rid) if x["variant"] == "icache:1w")
    # the largest region within the planted capacity holds a little more than its FFMAs (the region's
    # two R2UR): the first size beyond the capacity is the upper bound
    f = r["fit"]
    assert [lv["cpi"] for lv in f["levels"]] == [pytest.approx(1.0, abs=0.01), pytest.approx(2.5, abs=0.01)]
    assert 8 <= r["value"] <= 16.1 and 16 * KiB < f["levels"][0]["next_bytes"] <= 33 * KiB
    assert f["cold_cpi"][0] == pytest.approx(6.0, abs=0.05)
    s = store.get_meta(f"summary:{rid}")
    assert any(c.startswith("instruction fetch, 1 warp(s) per SM") for c in s["conclusions"])
    assert s["icache"]["icache:1w"]["levels"][0]["to_bytes"] == f["levels"][0]["to_bytes"]


def test_icache_sizes_span_the_fetch_levels_and_compile_as_their_own_module():
    ps = [p for p in bh.all_probes(8, quick=False) if p.kind == "icache"]
    assert [p.params["warps"] for p in ps] == list(bh.ICACHE_WARPS)
    assert ps[0].params["sizes"][0] * bh.SASS_BYTES <= 4 * KiB and ps[0].params["sizes"][-1] * bh.SASS_BYTES >= 1024 * KiB
    assert bh.MODULE["icache"] == "icache"
