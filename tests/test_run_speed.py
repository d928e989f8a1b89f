"""Issue 36: where a run's time goes (bench/spans.py) and the runner's compile in batches beside
the measurement (bench/runner.py prepare_batches), the shared compile pool (kernel/parallel.py)
and the control codes of one kernel read without the whole module's (kernel/control.py)."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context, Item, Outcome, Plan, SuiteBase
from gpudissect.bench.runner import batches, prepare_in_background, run
from gpudissect.bench.spans import Profile, TimedDevice, activated, span
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.build import build_module
from gpudissect.kernel.control import controls_of, kernel_controls, text_extents
from gpudissect.kernel.parallel import pmap
from gpudissect.store.db import Result, Store

TARGET = make_target("sm_90")


class Stub:
    info = "a device"

    def run(self, *a, **k):
        time.sleep(0.001)
        return []

    def clocks(self):
        return {}

    def free_memory(self):
        return 0


def test_spans_nest_and_device_calls_are_charged_to_the_label_being_measured():
    p, dev = Profile(), TimedDevice(Stub())
    assert dev.info == "a device"  # everything else is the device's
    with activated(p):
        with span("measure", "variant"):
            with span("measure", "grid"):
                dev.free_memory()  # not a timed call
                dev.clocks()
            with span("prepare", "compile"):
                pass
    spans = p.to_json()
    assert set(spans) == {"measure/variant", "measure/grid", "prepare/compile"}
    assert spans["measure/variant"]["s"] >= spans["measure/grid"]["s"]
    with activated(p), span("measure", "latency"):
        dev.run(b"", "k", [], 1, 2, grid=1, block=32)
    assert p.spans["device/latency"][0] == 1  # the run, under the label measured
    assert "device/grid" not in p.spans


def test_nothing_is_recorded_without_an_active_profile_nor_in_another_thread():
    p = Profile()
    with span("measure", "x"):
        pass

    def elsewhere() -> None:
        with span("prepare", "y"):
            pass

    with activated(p):
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
    assert p.spans == {}


def test_batches_start_small_then_double_up_to_the_size():
    items = [Item(str(i)) for i in range(300)]
    sizes = [len(b) for b in batches(items, 64)]
    assert sizes == [16, 32, 64, 64, 64, 60]
    assert [it.name for b in batches(items, 64) for it in b] == [str(i) for i in range(300)]
    assert [len(b) for b in batches(items[:3], 64)] == [3]


class Batched(SuiteBase):
    """Items prepared in batches (each prepare call adds to the state); ``fail_at``: the prepare
    of the batch holding this item raises."""

    name = "batched"
    prepare_batch = 8

    def __init__(self, n: int, fail_at: str | None = None, delay: float = 0.0):
        self.n, self.fail_at, self.delay = n, fail_at, delay
        self.calls: list[list[str]] = []
        self.measured_before_prepared: list[str] = []

    def plan(self, ctx, patterns):
        return Plan([Item(f"i{k:03d}") for k in range(self.n)])

    def prepare(self, ctx, items):
        names = [it.name for it in items]
        self.calls.append(names)
        time.sleep(self.delay)
        if self.fail_at in names:
            raise RuntimeError(f"batch of {self.fail_at} does not compile")
        ctx.state.setdefault("ready", set()).update(names)

    def measure(self, ctx, item, redo=None):
        if item.name not in ctx.state.get("ready", set()):
            self.measured_before_prepared.append(item.name)
        return Outcome([Result(item.name, "x", 1.0, "-", "s")])


def test_the_runner_measures_each_item_after_its_batch_is_prepared(tmp_path):
    suite = Batched(40, delay=0.01)
    store = Store(tmp_path / "r.db")
    ctx = Context(FakeDevice(), store, TARGET)
    out = run(suite, ctx, None)
    assert suite.measured_before_prepared == []
    assert sorted(n for c in suite.calls for n in c) == [f"i{k:03d}" for k in range(40)]
    assert [len(c) for c in suite.calls] == [2, 4, 8, 8, 8, 8, 2]
    assert len(store.done_items(out.run_id)) == 40
    prof = json.loads(store.runs()[0]["timing"])["profile"]
    assert prof["prepare/all"]["n"] == 7
    assert sum(v["n"] for k, v in prof.items() if k.startswith("measure/")) == 40


def test_a_batch_that_fails_to_prepare_fails_the_run_there_and_keeps_what_came_before(tmp_path):
    suite = Batched(40, fail_at="i020")
    store = Store(tmp_path / "r.db")
    ctx = Context(FakeDevice(), store, TARGET)
    with pytest.raises(RuntimeError, match="batch of i020 does not compile"):
        run(suite, ctx, None)
    done = store.done_items(store.unfinished_run("batched", ctx.dev.info.uuid))
    assert {f"i{k:03d}" for k in range(14)} <= done  # the batches before it (2 + 4 + 8 items)
    assert "i020" not in done


def test_a_suite_compiled_ahead_waits_for_the_first_suite_to_prepare_its_own():
    first, order = threading.Event(), []

    class Ahead(SuiteBase):
        name = "ahead"

        def plan(self, ctx, patterns):
            return Plan([Item("a")])

        def prepare(self, ctx, items):
            order.append("ahead prepared")

    ctx = Context(FakeDevice(), None, TARGET)
    (fut,) = prepare_in_background([(Ahead(), ctx, None)], first)
    time.sleep(0.05)
    assert order == [] and not fut.done()
    order.append("first prepared")
    first.set()
    fut.result(timeout=10)
    assert order == ["first prepared", "ahead prepared"]


def _pid(_x: int) -> int:
    return os.getpid()


def test_the_compile_workers_are_shared_by_calls_and_threads():
    a = set(pmap(_pid, range(8), jobs=2))
    got: list[set[int]] = []
    t = threading.Thread(target=lambda: got.append(set(pmap(_pid, range(8), jobs=2))))
    t.start()
    t.join()
    time.sleep(0.2)  # the thread that started them has ended: the workers live on
    b = set(pmap(_pid, range(8), jobs=2))
    assert os.getpid() not in a and len(a | got[0] | b) <= 2


def test_one_kernels_control_codes_are_those_of_the_whole_module(catalog):
    from gpudissect.suites.instructions.strategies import strategy
    from gpudissect.suites.instructions.template import generate

    v = catalog.get("add.u32")
    ks = [generate(v, strategy("reg"), TARGET, chains=1, length=n, reps=2, name=f"k{n}") for n in (8, 16)]
    cubin = next(iter(build_module(ks, TARGET.arch).values())).cubin
    whole = kernel_controls(cubin)
    assert set(text_extents(cubin)) == set(whole) == {"k8", "k16"}
    for name in whole:
        assert controls_of(cubin, name) == whole[name]
    with pytest.raises(KeyError):
        controls_of(cubin, "nope")


def test_a_builds_own_control_codes_are_those_of_its_ptx_recompiled(catalog):
    """sass_steps reads the timed region's control codes from the cubin the run built and
    measured, instead of compiling and disassembling the stored PTX again: the same pairs."""
    from gpudissect.suites.instructions.strategies import strategy
    from gpudissect.suites.instructions.studies.sass_steps import built_controls, whole_controls
    from gpudissect.suites.instructions.template import generate

    v = catalog.get("mad.hi.u16")
    ks = [generate(v, strategy("reg"), TARGET, chains=1, length=n, reps=2, name=f"w{n}") for n in (8, 16)]
    b = build_module(ks, TARGET.arch)["w16"].light()
    texts = dict(b.texts())
    row = {"ptx_hash": b.ptx_hash, "sass_hash": b.sass_hash}
    mine, why = built_controls(b)
    again, why2 = whole_controls(row, lambda h: texts.get(h, (None, None))[1], TARGET.arch)
    assert why == why2 == "" and mine is not None
    assert [(i.text, c) for i, c in mine] == [(i.text, c) for i, c in again]


def test_a_quick_run_says_so_in_the_timing_reference_and_the_comparison(tmp_path, sweep):
    from gpudissect.report.assemble.compare import set_name
    from gpudissect.report.assemble.timing_reference import timing_reference
    from gpudissect.report.read.results import load_result_set

    store = Store(tmp_path / "q.db")
    sweep(FakeDevice(), store, ["add.u32"], quick=True)
    store.close()
    rs = load_result_set(tmp_path / "q.db")
    for quick in (True, False):  # the same set, its run's flag as a full run stores it
        rs.docs["instructions"]["provenance"]["params"]["quick"] = quick
        assert rs.quick_suites() == (["instructions"] if quick else [])
        assert ("QUICK PROFILE (instructions)" in timing_reference(rs)) is quick
        assert set_name(rs).endswith("(quick profile)") is quick


def _script(name: str):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _store_with(path, latency: float, peak: float, verdict: str, flags: list[str] | None = None) -> None:
    store = Store(path)
    run_id = store.start_run("instructions", FakeDevice().info, "ptxas", "sm_90", {}, {}, "0")
    store.save(run_id, "add.u32", [
        Result("add.u32", "latency", latency, "cycles", "slope", params={"chains": 1}, flags=flags or []),
        Result("add.u32", "throughput_peak", peak, "warp_instr/cycle/SM", "max"),
        Result("add.u32", "latency_write_write", 4.0, "cycles", "slope", params={"chains": 1, "verdict": verdict}),
    ])
    store.finish_run(run_id, {}, {})
    store.close()


def test_compare_runs_holds_a_run_to_the_limits_of_issue_36(tmp_path):
    cmp = _script("compare_runs")
    _store_with(tmp_path / "base.db", 4.0, 2.0, "same")
    _store_with(tmp_path / "near.db", 4.4, 1.97, "same")  # within 0.5 cycle and 2%
    _store_with(tmp_path / "far.db", 4.6, 1.9, "faster")
    _store_with(tmp_path / "noisy.db", 9.0, 2.0, "same", flags=["noisy: +-9%"])  # a flagged record is not held

    def broken(new: str) -> list[str]:
        return cmp.compare(cmp.records(tmp_path / new, tmp_path), cmp.records(tmp_path / "base.db", tmp_path),
                           0.5, 0.02)["broken"]

    assert broken("near.db") == [] and broken("noisy.db") == []
    far = broken("far.db")
    assert len(far) == 3
    assert any(b.startswith("latency instructions add.u32 latency") and "4 -> 4.6" in b for b in far)
    assert any(b.startswith("throughput instructions add.u32 throughput_peak") for b in far)
    assert any(b.startswith("verdict") and "same -> faster" in b for b in far)


def test_compare_runs_pairs_peaks_by_their_group(tmp_path):
    """A tensor variant's peaks of several groups at one configuration pair group by group,
    whichever order the two runs stored them in."""
    cmp = _script("compare_runs")
    for name, order in (("a.db", ("ss_n128", "rs_n128")), ("b.db", ("rs_n128", "ss_n128"))):
        store = Store(tmp_path / name)
        run_id = store.start_run("tensor", FakeDevice().info, "ptxas", "sm_90", {}, {}, "0")
        value = {"ss_n128": 0.0123, "rs_n128": 0.0153}
        store.save(run_id, "wgmma.sp.s32.u8", [
            Result("wgmma.sp.s32.u8", "throughput_peak", value[g], "instr/cycle/SM", "max",
                   params={"group": g, "chains": 1, "warps": 4}) for g in order])
        store.finish_run(run_id, {}, {})
        store.close()
    out = cmp.compare(cmp.records(tmp_path / "a.db", tmp_path), cmp.records(tmp_path / "b.db", tmp_path), 0.5, 0.02)
    assert out["broken"] == [] and out["checked"]["throughput peaks"] == 2


def test_the_fast_median_is_numpys_to_the_last_bit():
    import numpy as np

    from gpudissect.bench.stats import median

    rng = np.random.default_rng(36)
    for n in (1, 2, 3, 4, 5, 12, 131, 132, 1000):
        for sample in (rng.normal(1000, 37, n), rng.integers(0, 10**9, n), rng.random(n) * 1e-3):
            assert median(sample) == float(np.median(sample))
            assert median(list(sample)) == float(np.median(sample))
    assert np.isnan(median([1.0, float("nan"), 2.0]))
    with pytest.raises(ValueError):
        median([])


def test_the_idle_share_sorts_by_sm_then_start_as_a_lexsort_does():
    """stats._idle orders the warps with one argsort of an (SM, start) key: the same gaps as the
    two-key lexsort it replaced, ties of equal starts included."""
    import numpy as np

    from gpudissect.bench import stats

    def by_lexsort(inv, t0, t1, n):
        order = np.lexsort((t0, inv))
        g, a, b = inv[order], t0[order] - t0.min(), t1[order] - t0.min()
        big = int(max(b.max(), 1)) + 1
        reach = np.maximum.accumulate(b + g * big)
        gap = np.zeros(len(order), dtype=np.int64)
        gap[1:] = np.where(g[1:] == g[:-1], np.maximum(a[1:] + g[1:] * big - reach[:-1], 0), 0)
        return np.bincount(g, weights=gap, minlength=n).astype(float)

    rng = np.random.default_rng(36)
    for _ in range(100):
        n, sms = int(rng.integers(1, 3000)), int(rng.integers(1, 140))
        inv = rng.integers(0, sms, n)
        t0 = rng.integers(0, int(rng.choice([10, 1000, 10**6])), n) + 10**12
        t0[rng.integers(0, n, n // 5)] = t0[0]
        t1 = t0 + rng.integers(0, 5000, n)
        assert np.array_equal(stats._idle(inv, t0, t1, sms), by_lexsort(inv, t0, t1, sms))


def test_per_sm_of_many_repetitions_is_the_ufunc_at_reduction_to_the_last_bit():
    """stats.per_sm_reps groups the rows by SM once (a sort and one reduceat per column) for
    every repetition: the same SMs, warps, spans, overlaps and idle shares as the per-repetition
    ``ufunc.at`` reduction it replaced, SMs missing or uneven included."""
    import numpy as np

    from gpudissect.bench import stats

    def by_ufunc_at(times, rep):
        smid = times[:, stats.SMID].astype(np.int64)
        t0 = times[:, stats.start_word(rep)].astype(np.int64)
        t1 = times[:, stats.end_word(rep)].astype(np.int64)
        sms, inv = np.unique(smid, return_inverse=True)
        n, big = sms.size, np.iinfo(np.int64).max
        f0, l0, f1, l1 = np.full(n, big), np.full(n, -big), np.full(n, big), np.full(n, -big)
        np.minimum.at(f0, inv, t0)
        np.maximum.at(l0, inv, t0)
        np.minimum.at(f1, inv, t1)
        np.maximum.at(l1, inv, t1)
        span = (l1 - f0).astype(float)
        return (sms, np.bincount(inv, minlength=n), span, f1 > l0,
                stats._idle(inv, t0, t1, n) / np.maximum(span, 1.0))

    rng = np.random.default_rng(36)
    for _ in range(60):
        reps, sms, warps = 4, int(rng.integers(1, 140)), int(rng.integers(1, 70))
        rows = max(1, sms * warps - int(rng.integers(0, warps)))
        times = np.zeros((rows, 2 * reps + 1), dtype=np.uint64)
        base = rng.integers(0, 10 ** int(rng.integers(1, 9)), rows) + 10**9
        for r in range(reps):
            times[:, 2 * r] = base + r * 10**5 + rng.integers(0, 5000, rows)
            times[:, 2 * r + 1] = times[:, 2 * r] + rng.integers(0, 60000, rows)
        times[:, -1] = rng.integers(0, sms, rows)
        for rep, st in zip(range(1, reps), stats.per_sm_reps(times, range(1, reps)), strict=True):
            want = by_ufunc_at(times, rep)
            for got, ref in zip((st.sm, st.warps, st.span, st.overlap, st.idle), want, strict=True):
                assert got.dtype == ref.dtype and np.array_equal(got, ref)
            one = stats.per_sm(times, rep)
            assert np.array_equal(one.span, st.span) and np.array_equal(one.idle, st.idle)


def test_slopes_per_repeat_are_each_fits_slope_to_the_last_bit():
    import numpy as np

    from gpudissect.bench.stats import fit_line, slopes_per_repeat

    rng = np.random.default_rng(36)
    for _ in range(2000):
        m = int(rng.integers(2, 6))
        xs = sorted(rng.choice(np.arange(1, 400), m, replace=False).tolist())
        scale = 10 ** rng.uniform(-3, 6)
        series = [(np.array(xs) * rng.uniform(0, 5) + rng.normal(0, scale, m)).tolist()
                  for _ in range(int(rng.integers(1, 8)))] + [[5.0] * m, [1.0]]
        assert slopes_per_repeat(xs, series) == [fit_line(xs, ys).slope for ys in series[:-1]]
    assert slopes_per_repeat([1, 2], [[1.0]]) == []
    with pytest.raises(ValueError):
        slopes_per_repeat([3, 3], [[1.0, 2.0]])


def test_a_quick_run_leaves_out_the_studies_its_plan_does_not_shrink():
    from gpudissect.suites import get_suite
    from gpudissect.suites.instructions.suite import QUICK_SKIPS

    suite = get_suite("instructions")
    full = [s.name for s in suite.studies_for(Context(FakeDevice(), None, TARGET, quick=False))]
    quick = [s.name for s in suite.studies_for(Context(FakeDevice(), None, TARGET, quick=True))]
    assert set(QUICK_SKIPS) <= set(full) and quick == [n for n in full if n not in QUICK_SKIPS]
    ctx = Context(FakeDevice(), None, TARGET, quick=True)
    assert suite.plan(ctx, ["add.u32"]).params["studies"] == quick  # the run says which it measured


def test_a_familys_lengths_go_to_the_device_in_one_batch_per_module():
    """core._launch_lengths: the kernels of one module in one run_many call (one synchronisation
    for all their launches), a second module in its own; each kernel gets its own launches back,
    in the family's order."""
    from types import SimpleNamespace

    from gpudissect.suites.instructions.core import Plan as InstrPlan
    from gpudissect.suites.instructions.core import _launch_lengths

    class Recording(FakeDevice):
        def __init__(self):
            super().__init__(model=lambda k, c, n, w: 10.0 * n)
            self.batches: list[tuple[bytes, list[str]]] = []

        def run_many(self, cubin, specs):
            self.batches.append((cubin, [s.kernel for s in specs]))
            return super().run_many(cubin, specs)

    def built(cubin: bytes, n: int):
        k = SimpleNamespace(name=f"v0_t4_n{n}", inputs=[1], n_sink=1)
        return SimpleNamespace(cubin=cubin, kernel=k)

    a, b = b"module-a", b"module-b"
    bs = [built(a, 32), built(b, 64), built(a, 128)]
    dev, plan = Recording(), InstrPlan(reps=3, launches=2)
    res = _launch_lengths(dev, bs, plan, grid=4, block=64)[0]
    assert dev.batches == [(a, ["v0_t4_n32", "v0_t4_n128"]), (b, ["v0_t4_n64"])]
    assert [len(r) for r in res] == [2, 2, 2]
    cycles = [int(r[0].times[0, 1]) - int(r[0].times[0, 0]) for r in res]
    assert cycles == [320, 640, 1280]  # each kernel its own launches, in the family's order


def test_a_store_of_every_suite_splits_into_one_store_per_suite(tmp_path):
    """scripts/split_store.py: the shipped sets keep a store per suite; the bench's full run
    stores every suite in one."""
    split = _script("split_store")
    h1, h2, h3 = ("a" * 64, "b" * 64, "c" * 64)
    store = Store(tmp_path / "all.db")
    runs = {}
    for suite, item, h in (("instructions", "add.u32", h1), ("memory", "latency/l1", h2)):
        run_id = runs[suite] = store.start_run(suite, FakeDevice().info, "ptxas", "sm_90", {}, {}, "0")
        store.save(run_id, item, [Result(item, "latency", 4.0, "cycles", "slope", ptx_hash=h,
                                         samples={"hashes": [h3] if suite == "memory" else []})],
                   {h: ("ptx", "// " + item), h3: ("ptx", "// cited in samples")})
        store.set_meta(f"summary:{run_id}", {"suite": suite})
        store.finish_run(run_id, {}, {})
    store.close()
    got = {}
    for suite in ("instructions", "memory"):
        db = split.split(tmp_path / "all.db", tmp_path, suite)
        s = Store(db)
        got[suite] = ([r["suite"] for r in s.runs()], [r["variant"] for r in s.results(runs[suite])],
                      s.get_meta(f"summary:{runs[suite]}"), sorted(h for (h,) in s.db.execute("SELECT hash FROM kernels")))
        s.close()
    assert got["instructions"] == (["instructions"], ["add.u32"], {"suite": "instructions"}, [h1])
    assert got["memory"] == (["memory"], ["latency/l1"], {"suite": "memory"}, [h2, h3])
    with pytest.raises(SystemExit, match="no run of suite 'tensor'"):
        split.split(tmp_path / "all.db", tmp_path, "tensor")


def test_one_sms_warp_windows_are_each_warps_start_and_end_past_the_first_start():
    from gpudissect.bench.stats import sm_windows

    rng = np.random.default_rng(5)
    for _ in range(50):
        rows = int(rng.integers(1, 200))
        t = rng.integers(0, 1 << 40, size=(rows, 7)).astype(np.uint64)
        t[:, -1] = rng.integers(3, 6, size=rows)
        for rep in range(3):
            on = [r for r in t if int(r[-1]) == int(t[:, -1].min())]
            base = min(int(r[2 * rep]) for r in on)
            want = [(int(r[2 * rep]) - base, int(r[2 * rep + 1]) - base) for r in on]
            got = sm_windows(t, rep)
            assert got == want and all(type(a) is int and type(b) is int for a, b in got)
