"""Per-SASS timing of multi-SASS tensor instructions (issue 5): split/whole kernels through
ptxas with their clock-order check, the single-SASS partner lookup, and the analysis of
synthetic clocks on a FakeDevice (no GPU)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.catalog.tensor import load_tensor_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.build import build_module
from gpudissect.kernel.mma import tensor_arch
from gpudissect.kernel.region import is_clock_read
from gpudissect.store.db import Store
from gpudissect.suites.tensor import per_sass as PS
from gpudissect.suites.tensor import suite as T
from gpudissect.suites.tensor.checks import (
    TENSOR_OP,
    TensorCheck,
    Work,
    check_clock_gaps,
    compile_work,
    sass_steps,
)
from gpudissect.suites.tensor.step_kernels import ONE_STEP, Steps, stepped_in_words, stepped_kernel

WMMA = "wmma.mma.m16n16k16.row.col.f32.f16.f32"
PARTNER = "mma.sync.m16n8k16.f32.f16.f32"
TARGET = make_target("sm_90")


def _v(name):
    return next(v for v in load_tensor_catalog().mma if v.name == name)


def _instrs(v, steps, name):
    k = stepped_kernel(v, steps, name, TARGET)
    b = build_module([k], tensor_arch(TARGET), region=False)[k.name]
    return k, b.instrs


def _run(st, names, sweep) -> int:
    """The suite through the one run loop (bench/runner.py) on the fake GPU; the run's id."""
    ctx = Context(FakeDevice(sm_count=4, launch_model=_model), st, TARGET, jobs=2)
    return run(T.TensorSuite(sweep), ctx, names).run_id


@pytest.fixture(scope="module")
def wmma_whole():
    return _instrs(_v(WMMA), ONE_STEP, "ps_whole")


def test_whole_kernel_steps_from_sass(wmma_whole):
    k, ins = wmma_whole
    assert k.meta["clocks"] == 3 and k.ptx.count("%clock64") == 3
    tensor = [i for i in ins if TENSOR_OP.match(i.opcode)]
    assert [i.full for i in tensor] == ["HMMA.16816.F32"] * 2
    # the two HMMA of a m16n16k16 wmma: two accumulators, one A fragment, two B fragments
    assert sass_steps(tensor) == ((0, 1), (0, 0), (0, 1))
    chk = check_clock_gaps(ins, [2, 0], 4)
    assert chk.ok, chk.reason
    assert chk.gaps == [["HMMA.16816.F32"] * 2, []]


def test_split_kernel_keeps_one_tensor_sass_per_clock_gap():
    steps = Steps((0, 1), (0, 0), (0, 1))
    k, ins = _instrs(_v(PARTNER), steps, "ps_split")
    assert k.meta["clocks"] == 4
    assert len(stepped_in_words(_v(PARTNER), steps, 5)) == k.meta["in_words"]
    chk = check_clock_gaps(ins, [1, 1, 0], 4)
    assert chk.ok, chk.reason
    assert chk.gaps == [["HMMA.16816.F32"], ["HMMA.16816.F32"], []]
    clocks = [n for n, i in enumerate(ins) if is_clock_read(i)]
    # a tensor SASS moved across a clock read is caught
    moved = list(ins)
    c1 = clocks[1]
    moved[c1], moved[c1 + 1] = moved[c1 + 1], moved[c1]
    bad = check_clock_gaps(moved, [1, 1, 0], 4)
    assert not bad.ok and "tensor SASS" in bad.reason
    # no dependent use before the closing clock read: the result is not waited for
    no_use = ins[: clocks[-2] + 1] + ins[clocks[-1]:]
    bad = check_clock_gaps(no_use, [1, 1, 0], 4)
    assert not bad.ok and "no use" in bad.reason
    assert not check_clock_gaps(ins, [1, 1, 1, 0], 4).ok  # clock count differs


def test_partner_lookup_from_static_map():
    cat = load_tensor_catalog().mma
    assert PS.find_partner(_v(WMMA), "HMMA.16816.F32", cat, TARGET).name == PARTNER
    assert PS.find_partner(_v("wmma.mma.m16n16k8.row.col.f32.tf32.f32"), "HMMA.1684.F32.TF32", cat,
                           TARGET).name == "mma.sync.m16n8k4.f32.tf32.f32"
    assert PS.find_partner(_v("wmma.mma.m16n16k16.row.col.s32.s8.s32"), "IMMA.16816.S8.S8", cat,
                           TARGET).name == "mma.sync.m16n8k16.s32.s8.s32"
    # the lookup compiles what it is given: an unknown name with the right PTX is found ...
    custom = dataclasses.replace(_v(PARTNER), name="custom.single")
    assert PS.find_partner(_v(WMMA), "HMMA.16816.F32", [custom], TARGET) is custom
    # ... and a candidate of another SASS, or a wmma, is not
    assert PS.find_partner(_v(WMMA), "HMMA.16816.F32", [_v("mma.sync.m16n8k8.f32.f16.f32"), _v(WMMA)],
                           TARGET) is None


def test_partner_lookup_uses_the_checks_already_made(monkeypatch):
    def no_compile(*a):
        raise AssertionError("a known check must not be compiled again")

    monkeypatch.setattr(PS, "static_check", no_compile)
    known = {"mma.sync.m16n8k8.f32.f16.f32": TensorCheck("native", {"HMMA.1688.F32": "1"}),
             PARTNER: TensorCheck("native", {"HMMA.16816.F32": "1"})}
    cands = [_v("mma.sync.m16n8k8.f32.f16.f32"), _v(PARTNER)]
    assert PS.find_partner(_v(WMMA), "HMMA.16816.F32", cands, TARGET, known) is cands[1]


def test_multi_sass_from_check():
    assert PS.multi_sass(TensorCheck("native", {"HMMA.16816.F32": "2"})) == {"HMMA.16816.F32": 2}
    assert PS.multi_sass(TensorCheck("native", {"HMMA.16816.F32": "1"})) is None
    assert PS.multi_sass(TensorCheck("emulated", {"HMMA.SP.16832.F32": "2"})) is None
    assert PS.multi_sass(None) is None


# --- synthetic clocks ------------------------------------------------------------------------

ISSUE1, INTERVAL, TAIL, WHOLE_ISSUE, WHOLE = 6, 9, 31, 11, 44


def _clocks(clocks: int, rounds: int) -> np.ndarray:
    """Per round: split (n = clocks - 2 steps) or whole (3 clocks) designed deltas."""
    if clocks == 3:
        d = [WHOLE_ISSUE, WHOLE - WHOLE_ISSUE]
    else:
        d = [ISSUE1] + [INTERVAL] * (clocks - 3) + [TAIL]
    row = np.concatenate([[0], np.cumsum(d)])
    t = np.array([1000 + 500 * r + row for r in range(rounds)], dtype=np.uint64)
    t[0] += np.arange(clocks, dtype=np.uint64) * 50  # a slow warm-up round, dropped
    return np.tile(t.ravel(), 32)


def _model(kernel, grid, block, args, smem):
    if kernel.startswith("ps_"):
        tb = next(a for a in args if a.name == "ps_times")
        inp = next(a for a in args if a.name == "ps_in")
        rounds = int(inp.data[0])
        return {tb.name: _clocks(tb.nbytes // (32 * rounds * 8), rounds)}
    tb = next(a for a in args if a.name == "tc_times")
    n = int(kernel.rsplit("_n", 1)[1])
    t = np.zeros((grid * block, 2 * T.REPS + 1), dtype=np.uint64)
    t[:, -1] = np.repeat(np.arange(grid), block)
    t[:, 0::2][:, :T.REPS] = 100
    t[:, 1::2] = 100 + 32 * n
    return {tb.name: t.ravel()}


def test_analysis_of_synthetic_clocks():
    n, rounds = 4, 9
    split = _clocks(n + 2, rounds)[: rounds * (n + 2)].reshape(rounds, n + 2).astype(np.int64)
    whole = _clocks(3, rounds)[: rounds * 3].reshape(rounds, 3).astype(np.int64)
    a = PS.analyse(split, whole, n)
    # 4 split steps reach the used result after 64 cycles, the designed instruction after 44
    assert a["value"] == INTERVAL and [f.split(":")[0] for f in a["flags"]] == ["split-differs"]
    two = _clocks(4, rounds)[: rounds * 4].reshape(rounds, 4).astype(np.int64)
    assert PS.analyse(two, whole, 2)["flags"] == []  # 46 vs 44 cycles: consistent
    assert a["cumulative_cycles"] == [ISSUE1 + k * INTERVAL for k in range(n)]
    assert a["cumulative_complete"] == ISSUE1 + (n - 1) * INTERVAL + TAIL
    assert a["whole_issue"] == WHOLE_ISSUE and a["whole_total"] == WHOLE
    assert len(a["split_deltas"]) == rounds - PS.WARMUP
    # rounds that disagree are flagged; a non-increasing clock gives no number
    noisy = split.copy()
    noisy[1::2, 1:] += 7 * np.arange(1, n + 2)  # every delta of every other round 7 cycles longer
    assert any(f.startswith("varies") for f in PS.analyse(noisy, whole, n)["flags"])
    broken = split.copy()
    broken[3, 2] = broken[3, 1]
    b = PS.analyse(broken, whole, n)
    assert b["value"] is None and b["flags"][0].startswith("bad-clocks")


def test_run_per_sass_on_fake_device():
    dev = FakeDevice(launch_model=_model)
    texts: dict = {}
    v = _v("wmma.mma.m16n16k8.row.col.f32.tf32.f32")
    w = Work(v)
    w.kernels = T.mma_kernels(v, T.Sweep(lat_lengths=(2, 4), thr_lengths=(2, 4), mma_warps=(4,)), TARGET, 0)
    compile_work(w, TARGET)
    r = PS.run_per_sass(dev, v, w.check, TARGET, texts)
    assert r.measure == "per_sass" and r.value == INTERVAL, r.flags
    assert r.params["partner"] == "mma.sync.m16n8k4.f32.tf32.f32"
    assert r.params["steps"] == {"acc": [0, 1, 0, 1], "a": [0, 0, 1, 1], "b": [0, 1, 2, 3]}
    assert r.params["intervals"] == [INTERVAL] * 3 and r.params["whole_total"] == WHOLE
    assert r.sass == ["4*HMMA.1684.F32.TF32"] and r.sass_hash in texts
    # a single-SASS variant has no per-SASS result; a failing launch is flagged, not raised
    assert PS.run_per_sass(dev, _v(PARTNER), TensorCheck("native", {"HMMA.16816.F32": "1"}), TARGET,
                           texts) is None

    def boom(*a, **k):
        raise RuntimeError("launch failed")

    r = PS.run_per_sass(FakeDevice(launch_model=boom), v, w.check, TARGET, texts)
    assert r.value is None and r.flags[0].startswith("error: RuntimeError")


def test_suite_stores_per_sass_and_concludes(tmp_path):
    st = Store(tmp_path / "t.db")
    sweep = T.Sweep(lat_lengths=(2, 4), thr_lengths=(2, 4), mma_warps=(4,), layouts=False)
    rid = _run(st, [WMMA, PARTNER], sweep)
    rs = [r for r in st.results(rid) if r["measure"] == "per_sass"]
    assert [r["variant"] for r in rs] == [WMMA] and rs[0]["value"] == INTERVAL
    assert rs[0]["params"]["partner"] == PARTNER and rs[0]["samples"]["split_deltas"]
    conc = st.get_meta(f"summary:{rid}")["conclusions"]
    assert any("1 of 2 native variants" in c for c in conc)
    line = next(c for c in conc if c.startswith(WMMA) and "split into" in c)
    assert f"split into {PARTNER}: {INTERVAL:.1f} cycles" in line and f"result used after {WHOLE}" in line


@pytest.mark.gpu
def test_per_sass_on_the_gpu():
    """Behaviour only (no expected cycle counts): clocks increase, every interval is a
    positive number of cycles, the split's steps add up to its total."""
    from gpudissect.device.device import CudaDevice

    v = _v(WMMA)
    w = Work(v)
    w.kernels = T.mma_kernels(v, T.Sweep(lat_lengths=(2, 4), thr_lengths=(2, 4), mma_warps=(4,)), TARGET, 0)
    compile_work(w, TARGET)
    r = PS.run_per_sass(CudaDevice(0), v, w.check, TARGET, {})
    assert r.value is not None and r.value > 0, r.flags
    p = r.params
    assert p["cumulative_cycles"] == sorted(p["cumulative_cycles"]) and p["cumulative_complete"] > 0
    assert all(sum(d) > 0 for d in r.samples["split_deltas"]) and p["whole_total"] > p["whole_issue"] > 0


def test_reordered_split_is_not_measurable(tmp_path, monkeypatch):
    """When the SASS does not keep one tensor SASS per clock gap, no number is recorded."""
    from gpudissect.suites.tensor.checks import StepCheck

    def whole_ok_split_reordered(ins, expect, d):
        return StepCheck(len(expect) == 2, "clock gap 1: 2 tensor SASS")

    monkeypatch.setattr(PS, "check_clock_gaps", whole_ok_split_reordered)
    st = Store(tmp_path / "t.db")
    sweep = T.Sweep(lat_lengths=(2, 4), thr_lengths=(2, 4), mma_warps=(4,), layouts=False)
    rid = _run(st, [WMMA], sweep)
    r = next(r for r in st.results(rid) if r["measure"] == "per_sass")
    assert r["value"] is None and r["flags"] == ["not-measurable: split kernel: clock gap 1: 2 tensor SASS"]
    conc = st.get_meta(f"summary:{rid}")["conclusions"]
    assert any(c.startswith(WMMA) and "per-SASS timing not measurable" in c for c in conc)


def test_the_suite_builds_the_per_sass_kernels_before_it_measures(monkeypatch):
    """Prepare builds a multi-SASS variant's whole and split kernels in its pool; the
    measurement launches those and builds nothing while the GPU waits."""
    from gpudissect.bench.contract import Item

    suite = T.TensorSuite(T.Sweep(lat_lengths=(2, 4), thr_lengths=(2, 4), mma_warps=(4,), layouts=False))
    ctx = Context(FakeDevice(sm_count=4, launch_model=_model), None, TARGET, jobs=1)
    v, single = _v(WMMA), _v(PARTNER)
    suite.plan(ctx, [WMMA, PARTNER])
    suite.prepare(ctx, [Item(WMMA, v), Item(PARTNER, single)])
    pre = ctx.state["works"][WMMA].per_sass
    assert pre is not None and pre.fail is None and pre.partner.name == PARTNER
    assert pre.whole is not None and pre.split is not None and ctx.state["works"][PARTNER].per_sass is None
    monkeypatch.setattr(PS, "_build", lambda *a: (_ for _ in ()).throw(AssertionError("built when measured")))
    out = suite.measure(ctx, Item(WMMA, v))
    r = next(r for r in out.results if r.measure == "per_sass")
    assert r.value == INTERVAL and r.params["partner"] == PARTNER and r.sass_hash in out.texts
