"""GPU-free tests of the timing side: statistics, per-SM analysis, the suite on a fake device,
the store (schema, resume, bad files) and the JSON export."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpudissect.bench.stats import fit_line, per_sm, sm_windows, summarize
from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Store, StoreError
from gpudissect.store.export import JSON_KEYS, records, table_v, write_json
from gpudissect.suites.instructions import SUITE
from gpudissect.suites.instructions.suite import QUICK_PLAN


# --- statistics -----------------------------------------------------------------------------
def test_fit_line_recovers_slope_and_intercept():
    xs = [8, 16, 32, 64]
    fit = fit_line(xs, [30 + 4.5 * x for x in xs])
    assert fit.slope == pytest.approx(4.5)
    assert fit.intercept == pytest.approx(30)
    assert fit.r2 == pytest.approx(1.0)


def test_fit_line_reports_poor_fit():
    fit = fit_line([1, 2, 3, 4], [10, 40, 5, 30])
    assert fit.r2 < 0.5


def test_fit_line_needs_two_lengths():
    with pytest.raises(ValueError):
        fit_line([8, 8], [1, 2])


def test_summarize_median_and_spread():
    s = summarize([10, 10, 10, 10, 50])
    assert s.median == 10
    assert s.iqr == 0
    assert s.max == 50
    assert summarize([8, 12]).rel_spread == pytest.approx(0.2)


def _times(rows: list[tuple[int, int, int]], reps: int = 2) -> np.ndarray:
    """One warp per row: (smid, t0, t1) for every repetition; 32 identical thread rows each."""
    t = np.zeros((32 * len(rows), 2 * reps + 1), dtype=np.uint64)
    for i, (sm, a, b) in enumerate(rows):
        for r in range(reps):
            t[32 * i : 32 * (i + 1), 2 * r] = a
            t[32 * i : 32 * (i + 1), 2 * r + 1] = b
        t[32 * i : 32 * (i + 1), -1] = sm
    return t


def test_per_sm_span_warps_and_overlap():
    t = _times([(0, 100, 200), (0, 110, 250), (3, 0, 50), (3, 60, 90)])
    st = per_sm(t, rep=1)
    assert st.sm.tolist() == [0, 3]
    assert st.warps.tolist() == [2, 2]
    assert st.span.tolist() == [150.0, 90.0]
    # SM 0: both warps inside [110, 200]; SM 3: the second warp starts after the first ended
    assert st.overlap.tolist() == [True, False]
    assert sm_windows(t, 1) == [(0, 100), (10, 150)]


# --- the suite on a fake device -------------------------------------------------------------
def model(kernel, chains, length, warps):
    """4 cycles per dependent instruction; an SM issues 2 warp-instructions per cycle."""
    if warps == 1:
        return 20 + 4 * length * (1 if "_l" in kernel else chains / min(chains, 4))
    return 20 + chains * length * warps / 2


VARIANTS = ["add.f32", "mul.lo.u32", "cvt.u32.u64"]


def test_suite_measures_what_the_device_shows(tmp_path, sweep):
    dev = FakeDevice(model, sm_count=4)
    store = Store(tmp_path / "r.db")
    out = sweep(dev, store, VARIANTS)
    run_id, timing = out.run_id, out.timing
    res = {(r["variant"], r["measure"]): r for r in store.results(run_id)}
    lat = res[("add.f32", "latency")]
    assert lat["value"] == pytest.approx(4.0, rel=1e-3)
    assert lat["unit"] == "cycles"
    assert lat["flags"] == []
    assert lat["sass"] == ["FADD"]
    assert lat["samples"] and lat["fit"]["r2"] > 0.99
    assert res[("add.f32", "throughput_peak")]["value"] == pytest.approx(2.0, rel=1e-2)
    # unverified variants get no number, and say why
    un = res[("cvt.u32.u64", "latency")]
    assert un["value"] is None
    assert un["flags"] and un["flags"][0].startswith("unverified")
    # provenance of the run and of the cited kernel
    run = store.runs()[0]
    assert run["gpu_name"] == "FakeGPU" and run["finished"] is not None
    assert "ptxas" in run["toolkit"]
    assert "FADD" in store.kernel_text(lat["sass_hash"])
    assert ".entry" in store.kernel_text(lat["ptx_hash"])
    assert set(timing) == {"compile_s", "gpu_s", "store_s", "analysis_s"}


class Serialized(FakeDevice):
    """Warps of a block run their regions one after another (as seen on the H100 with many
    warps per scheduler)."""

    def run(self, cubin, kernel, inputs, n_sink, reps, grid, block, launches=1):
        res = super().run(cubin, kernel, inputs, n_sink, reps, grid, block, launches)
        for r in res:
            for w in range(block // 32):
                for g in range(grid):
                    rows = slice(g * block + 32 * w, g * block + 32 * (w + 1))
                    for rep in range(reps):
                        r.times[rows, 2 * rep] += np.uint64(10_000 * w)
                        r.times[rows, 2 * rep + 1] += np.uint64(10_000 * w)
        return res


def test_non_overlapping_warps_are_flagged_and_not_a_peak(tmp_path, sweep):
    dev = Serialized(model, sm_count=4)
    store = Store(tmp_path / "r.db")
    run_id = sweep(dev, store, VARIANTS[:1]).run_id
    tps = [r for r in store.results(run_id) if r["measure"] == "throughput"]
    assert tps and all(any(f.startswith("warps-not-overlapping") for f in r["flags"]) for r in tps)
    assert not [r for r in store.results(run_id) if r["measure"] == "throughput_peak"]


class Dies(FakeDevice):
    def __init__(self, *a, die_after: int, **k):
        super().__init__(*a, **k)
        self.die_after = die_after

    def run(self, cubin, kernel, *a, **k):
        if self.calls >= self.die_after:
            raise KeyboardInterrupt  # the sweep is interrupted halfway
        return super().run(cubin, kernel, *a, **k)


def test_interrupted_sweep_resumes_where_it_stopped(tmp_path, sweep):
    path = tmp_path / "r.db"
    first = Dies(model, sm_count=4, die_after=12)  # dies inside the second variant
    with pytest.raises(KeyboardInterrupt):
        sweep(first, Store(path), VARIANTS)
    store = Store(path)
    run_id = store.unfinished_run(SUITE.name, "GPU-fake")
    assert run_id is not None
    done_before = store.done_items(run_id)
    assert done_before == {"add.f32"}  # nothing half-written for the interrupted variant
    second = FakeDevice(model, sm_count=4)
    rid = sweep(second, store, VARIANTS).run_id
    assert rid == run_id
    assert store.done_items(run_id) == set(VARIANTS)
    # only the missing work ran the second time: add.f32 was not launched again
    per_variant = len([r for r in store.results(run_id) if r["variant"] == "add.f32"])
    assert per_variant == len([r for r in store.results(run_id) if r["variant"] == "mul.lo.u32"])
    p = QUICK_PLAN
    per_variant_launches = (len(p.latency_lengths) + len(p.tp_chains) * len(p.tp_warps) * len(p.tp_lengths)
                            + len(p.distances) * len(p.distance_lengths))
    assert second.calls == per_variant_launches  # mul.lo.u32 only (cvt.u32.u64 is unverified)
    assert store.runs()[0]["finished"] is not None


def test_new_run_does_not_resume(tmp_path, sweep):
    store = Store(tmp_path / "r.db")
    a = sweep(FakeDevice(model), store, VARIANTS[:1]).run_id
    b = sweep(FakeDevice(model), store, VARIANTS[:1], resume=False).run_id
    assert a != b


def test_store_rejects_a_corrupted_file(tmp_path):
    p = tmp_path / "bad.db"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a gpudissect results database"):
        Store(p)


def test_json_export_is_the_stable_interface(tmp_path, sweep):
    store = Store(tmp_path / "r.db")
    sweep(FakeDevice(model), store, VARIANTS[:1])
    out = tmp_path / "x.json"
    n = write_json(store, out)
    data = json.loads(out.read_text())
    assert len(data) == n > 0
    for rec in data:
        assert set(JSON_KEYS) <= set(rec)
        assert rec["gpu"] == "FakeGPU"
        assert isinstance(rec["flags"], list)
    md = table_v(records(store))
    assert "| `add.f32` | FADD | 4 |" in md
