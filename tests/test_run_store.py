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
from gpudissect.suites.instructions.core import lengths_for
from gpudissect.suites.instructions.suite import QUICK_PLAN
from gpudissect.suites.instructions.template import companion_references


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
    """One row per warp (lane 0 writes it): (smid, t0, t1) for every repetition."""
    t = np.zeros((len(rows), 2 * reps + 1), dtype=np.uint64)
    for i, (sm, a, b) in enumerate(rows):
        for r in range(reps):
            t[i, 2 * r] = a
            t[i, 2 * r + 1] = b
        t[i, -1] = sm
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
    # one row per warp: 32 rows of one SM are 32 warps, not one warp's threads
    many = _times([(5, 0, 40)] * 32)
    assert per_sm(many, rep=0).warps.tolist() == [32]


def test_per_sm_idle_is_the_share_of_the_span_no_warp_covers():
    t = _times([(0, 250, 300), (0, 0, 100), (0, 100, 250),  # SM 0: one after another, no gap
                (3, 80, 100), (3, 0, 50),  # SM 3: nothing runs in [50, 80] of a span of 100
                (7, 150, 200), (7, 20, 60), (7, 0, 100)])  # SM 7: [100, 150] of 200 uncovered
    st = per_sm(t, rep=1)
    assert st.sm.tolist() == [0, 3, 7]
    assert st.span.tolist() == [300.0, 100.0, 200.0]
    assert st.idle.tolist() == pytest.approx([0.0, 0.3, 0.25])
    assert st.overlap.tolist() == [False, False, False]
    # all warps inside at once: no idle time either
    assert per_sm(_times([(2, 0, 90), (2, 10, 100), (2, 5, 95)]), rep=0).idle.tolist() == [0.0]


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
    assert set(timing) == {"compile_s", "gpu_s", "store_s", "analysis_s", "profile"}
    assert timing["profile"]["measure/variant"]["n"] >= 1  # where the time went (bench/spans.py)


def _each_sm(times: np.ndarray, grid: int, wpb: int, sm_count: int):
    """The rows of each SM's warps, in launch order (block g runs on SM g % sm_count)."""
    for sm in range(sm_count):
        yield [g * wpb + w for g in range(sm, grid, sm_count) for w in range(wpb)]


class LateStart(FakeDevice):
    """Each warp of an SM enters its region 10,000 cycles after the previous one: long after
    that one ended, so the SM is idle most of its span."""

    def run(self, cubin, kernel, inputs, n_sink, reps, grid, block, launches=1):
        res = super().run(cubin, kernel, inputs, n_sink, reps, grid, block, launches)
        for r in res:
            assert r.times.shape == (grid * (block // 32), 2 * reps + 1)  # one row per warp
            for rows in _each_sm(r.times, grid, block // 32, self.info.sm_count):
                for k, row in enumerate(rows):
                    r.times[row, : 2 * reps] += np.uint64(10_000 * k)
        return res


class BackToBack(FakeDevice):
    """The warps of an SM run their throughput regions one after another, each starting as the
    previous ends (a greedy scheduler), in the SM span the model gives: the same rate."""

    def run(self, cubin, kernel, inputs, n_sink, reps, grid, block, launches=1):
        res = super().run(cubin, kernel, inputs, n_sink, reps, grid, block, launches)
        if "_t" not in kernel:
            return res
        for r in res:
            for rows in _each_sm(r.times, grid, block // 32, self.info.sm_count):
                for rep in range(reps):
                    t0 = r.times[rows[0], 2 * rep]
                    d = (r.times[rows[0], 2 * rep + 1] - t0) // np.uint64(len(rows))
                    for k, row in enumerate(rows):
                        r.times[row, 2 * rep] = t0 + np.uint64(k) * d
                        r.times[row, 2 * rep + 1] = t0 + np.uint64(k + 1) * d
        return res


def test_warps_that_start_late_leave_the_sm_idle_and_are_not_a_peak(tmp_path, sweep):
    store = Store(tmp_path / "r.db")
    run_id = sweep(LateStart(model, sm_count=4), store, VARIANTS[:1]).run_id
    rows = [r for r in store.results(run_id) if r["variant"] == "add.f32"]
    tps = [r for r in rows if r["measure"] == "throughput"]
    assert tps and all(any(f.startswith("sm-idle: the SMs were idle") for f in r["flags"]) for r in tps)
    assert all(r["samples"]["sm_idle_fraction"] > 0.25 for r in tps)
    # no clean configuration: the peak has no value, and says why
    (peak,) = [r for r in rows if r["measure"] == "throughput_peak"]
    assert peak["value"] is None
    assert peak["flags"] == ["no clean configuration: sm-idle"]


def test_warps_that_run_one_after_another_without_gaps_are_not_flagged(tmp_path, sweep):
    store = Store(tmp_path / "r.db")
    dev = BackToBack(model, sm_count=4)
    run_id = sweep(dev, store, VARIANTS[:1]).run_id
    rows = [r for r in store.results(run_id) if r["variant"] == "add.f32"]
    tps = [r for r in rows if r["measure"] == "throughput"]
    assert len(tps) == len(QUICK_PLAN.tp_chains) * len(QUICK_PLAN.tp_warps)
    for r in tps:
        assert r["flags"] == [], r["flags"]
        assert r["samples"]["sm_idle_fraction"] == 0.0
        windows = r["samples"]["warp_windows_one_sm"]
        # the evidence: no two windows of the SM overlap, each starts where the previous ended
        for w in windows.values():
            assert len(w) == r["params"]["warps"]
            assert all(a[1] == b[0] for a, b in zip(w, w[1:], strict=False))
    (peak,) = [r for r in rows if r["measure"] == "throughput_peak"]
    assert peak["value"] == pytest.approx(2.0, rel=1e-2) and not peak["flags"]


class Recording(FakeDevice):
    """Records the kernels it runs (``v<i>_...``: variant i of the items prepared)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.runs: list[str] = []

    def run(self, cubin, kernel, *a, **k):
        self.runs.append(kernel)
        return super().run(cubin, kernel, *a, **k)


class Dies(Recording):
    """Raises KeyboardInterrupt at the kernel run after ``die_after`` runs of the kernels named
    ``prefix``*: an item measured beside them (the runner measures two at a time) is not hit."""

    def __init__(self, *a, prefix: str, die_after: int, **k):
        super().__init__(*a, **k)
        self.prefix, self.die_after = prefix, die_after

    def run(self, cubin, kernel, *a, **k):
        if kernel.startswith(self.prefix) and sum(r.startswith(self.prefix) for r in self.runs) >= self.die_after:
            raise KeyboardInterrupt  # the sweep is interrupted halfway
        return super().run(cubin, kernel, *a, **k)


def kernel_runs(p=QUICK_PLAN) -> int:
    """At most the kernel runs of one variant (one SASS per instance): a latency family, every
    throughput family at every warps count, every distance family."""
    return (len(lengths_for(p.latency_units, 1, 1.0, p))
            + sum(len(lengths_for(p.tp_units, k, 1.0, p)) for k in p.tp_chains) * len(p.tp_warps)
            + sum(len(lengths_for(p.distance_units, d, 1.0, p)) for d in p.distances))


def runs_alone(sweep, tmp_path, variant: str) -> int:
    """The kernel runs of ``variant`` measured alone in a fresh store."""
    dev = Recording(model, sm_count=4)
    sweep(dev, Store(tmp_path / f"alone-{variant}.db"), [variant])
    return sum(1 for k in dev.runs if k.startswith("v0_"))


@pytest.mark.slow
def test_interrupted_sweep_resumes_where_it_stopped(tmp_path, sweep):
    path = tmp_path / "r.db"
    # dies inside the second variant, at its fourth kernel run
    first = Dies(model, sm_count=4, prefix="v1_", die_after=3)
    with pytest.raises(KeyboardInterrupt):
        sweep(first, Store(path), VARIANTS)
    store = Store(path)
    run_id = store.unfinished_run(SUITE.name, "GPU-fake")
    assert run_id is not None
    done_before = store.done_items(run_id)
    assert done_before == {"add.f32"}  # nothing half-written for the interrupted variant
    assert {k.split("_")[0] for k in first.runs} == {"v0", "v1"}
    second = Recording(model, sm_count=4)
    rid = sweep(second, store, VARIANTS).run_id
    assert rid == run_id
    # the plan adds the companion reference variants (lop3.b32, add.u16/u32/u64)
    assert store.done_items(run_id) == set(VARIANTS) | set(companion_references())
    # only the missing work ran the second time: add.f32 was not launched again
    once = [(r["measure"], json.dumps(r["params"], sort_keys=True)) for r in store.results(run_id)
            if r["variant"] == "add.f32"]
    assert once and len(once) == len(set(once))
    # prepared again, numbered by their place in the plan (the kernels' names of the first
    # attempt): mul.lo.u32 (v1), cvt.u32.u64 (v2, unverified: never launched), the four
    # references (v3..v6); add.f32 (v0) is not among them
    by_variant: dict[str, int] = {}
    for k in second.runs:
        by_variant[k.split("_")[0]] = by_variant.get(k.split("_")[0], 0) + 1
    assert set(by_variant) == {"v1", "v3", "v4", "v5", "v6"}
    assert by_variant["v1"] == runs_alone(sweep, tmp_path, "mul.lo.u32")  # once, in full
    assert store.runs()[0]["finished"] is not None


@pytest.mark.slow
def test_an_interrupt_keeps_the_item_in_flight_that_ended_well(tmp_path):
    """Ctrl-C reaches the main thread while an item is measured in a worker: that item ends
    before the run stops, and is stored whole."""
    import time

    from gpudissect.arch.target import make_target
    from gpudissect.bench.contract import Context
    from gpudissect.bench.runner import run
    from gpudissect.suites import get_suite

    dev = Recording(model, sm_count=4)

    def progress(name: str, n: int, total: int) -> None:
        if n == 2:  # once the second item's measurement has begun (a pending one is cancelled)
            end = time.monotonic() + 120
            while not any(k.startswith("v1_") for k in dev.runs) and time.monotonic() < end:
                time.sleep(0.01)
            raise KeyboardInterrupt
    store = Store(tmp_path / "r.db")
    ctx = Context(dev, store, make_target("sm_90"), quick=True, jobs=2)
    with pytest.raises(KeyboardInterrupt):
        run(get_suite("instructions"), ctx, list(VARIANTS), progress=progress)
    run_id = store.unfinished_run(SUITE.name, "GPU-fake")
    # the first item stored when the second started, the second (in flight) when Ctrl-C came
    assert store.done_items(run_id) == set(VARIANTS[:2])


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


def test_a_suite_prepared_in_the_background_is_only_measured_by_its_run(tmp_path, sweep):
    from gpudissect.arch.target import make_target
    from gpudissect.bench.contract import Context
    from gpudissect.bench.runner import AHEAD, prepare_in_background, run
    from gpudissect.suites import get_suite

    store = Store(tmp_path / "r.db")
    ctx = Context(FakeDevice(model), store, make_target("sm_90"), quick=True, jobs=2)
    suite = get_suite("instructions")
    calls = []
    prepare = suite.prepare
    suite.prepare = lambda c, items: (calls.append(len(items)), prepare(c, items))[1]
    try:
        (fut,) = prepare_in_background([(suite, ctx, ["add.f32"])])
        out = run(suite, ctx, ["add.f32"], ahead=fut)
    finally:
        del suite.prepare
    assert len(calls) == 1 and AHEAD not in ctx.state  # prepared once, in the background
    assert "compile_wait_s" in out.timing and "compile_s" not in out.timing
    assert {r["variant"] for r in store.results(out.run_id)} >= {"add.f32"}
    # a failure of the background prepare is the run's
    bad = Context(FakeDevice(model), store, make_target("sm_90"), quick=True, jobs=2)
    (fut,) = prepare_in_background([(suite, bad, ["no.such.variant"])])
    with pytest.raises(Exception, match="no.such.variant"):
        run(suite, bad, ["no.such.variant"], ahead=fut)


def test_the_suite_document_leaves_the_warp_windows_to_the_store(tmp_path, sweep):
    from gpudissect.store.export import STORE_ONLY_SAMPLES, suite_document

    store = Store(tmp_path / "r.db")
    run_id = sweep(Recording(model, sm_count=4), store, VARIANTS[:1]).run_id
    in_store = {(r["variant"], r["measure"], json.dumps(r["params"], sort_keys=True)): r
                for r in store.results(run_id)}
    assert any("warp_windows_one_sm" in (r["samples"] or {}) for r in in_store.values())
    assert any("per_sm_span" in (r["samples"] or {}) for r in in_store.values())
    doc = suite_document(store, run_id)
    assert doc["samples_in_store_only"] == list(STORE_ONLY_SAMPLES)
    assert len(doc["records"]) == len(in_store)
    for rec in doc["records"]:
        full = in_store[(rec["variant"], rec["measure"], json.dumps(rec["params"], sort_keys=True))]
        kept = {k: v for k, v in (full["samples"] or {}).items() if k not in STORE_ONLY_SAMPLES}
        assert (rec["samples"] or {}) == kept or rec["samples"] == full["samples"]  # raw repeats kept
        assert not set(STORE_ONLY_SAMPLES) & set(rec["samples"] or {})
