"""Tensor-core suite: generators + SASS mapping (ptxas here), layout inference on synthetic
data, peak maths, and the suite on a FakeDevice."""

from __future__ import annotations

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.arch.tensor_peaks import Peak, figures, peak_for
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.catalog.tensor import load_tensor_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.sass import SassInstr
from gpudissect.kernel.wgmma import descriptor
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.tensor import layout_reference as L
from gpudissect.suites.tensor import suite as T
from gpudissect.suites.tensor.checks import Work, check_tensor_family, compile_work, family_key

TARGET = make_target("sm_90")
SMALL = T.Sweep(lat_lengths=(2, 4), thr_units=(32, 64), mma_chains=(8,), mma_warps=(4,), thr_lengths=(2, 4),
                ldst_warps=(4,), wg_lat_lengths=(2, 4), wg_thr_units=(2, 4), wg_n_full=(64,), wg_n_other=(64,),
                wg_accs=(1,), wg_groups=(2,), data_variants=(), layouts=False)


def _variant(name):
    cat = load_tensor_catalog()
    return next(v for v in [*cat.mma, *cat.wgmma, *cat.ldst] if v.name == name)


def _work(name):
    v = _variant(name)
    w = Work(v)
    gen = {"mma": T.mma_kernels, "wgmma": T.wgmma_kernels, "ldst": T.ldst_kernels}[v.kind]
    w.kernels = gen(v, SMALL, TARGET, 0)
    compile_work(w, TARGET)
    return w


def _run(dev, st, names, sweep=SMALL, jobs=2) -> int:
    """The suite through the one run loop (bench/runner.py); the run's id."""
    return run(T.TensorSuite(sweep), Context(dev, st, TARGET, jobs=jobs), names).run_id


def test_catalog_register_counts():
    cat = load_tensor_catalog()
    v = _variant("mma.sync.m16n8k16.f32.f16.f32")
    assert v.regs == {"a": 4, "b": 2, "c": 4, "d": 4} and v.flops == 2 * 16 * 8 * 16
    assert _variant("mma.sync.m16n8k16.f64.f64.f64").regs["a"] == 8
    assert len(cat.mma) > 60 and len(cat.wgmma) >= 17


@pytest.mark.parametrize("name,sass", [
    ("mma.sync.m16n8k16.f32.f16.f32", "HMMA.16816.F32"),
    ("mma.sync.m16n8k8.f64.f64.f64", "DMMA.16x8x8"),
    ("mma.sync.m16n8k32.s32.s8.s32", "IMMA.16832.S8.S8"),
    ("wgmma.f32.bf16", "HGMMA.64x64x16.F32.BF16"),
])
def test_native_mapping_one_sass_per_instruction(name, sass):
    w = _work(name)
    assert w.check.status == "native", w.check.reason
    assert w.check.sass == {sass: "1"}
    assert all(c.ok for c in w.checks.values())


def test_emulated_variant_reported():
    w = _work("mma.sync.m16n8k32.s32.s4.s32")
    assert w.check.status == "emulated" and "CALL" in w.check.reason


def test_descriptor_fields():
    d = descriptor(0x400, lbo=128, sbo=256, swizzle=1)
    assert d & 0x3FFF == 0x40 and (d >> 16) & 0x3FFF == 8 and (d >> 32) & 0x3FFF == 16 and d >> 62 == 1


@pytest.mark.parametrize("shape", [
    L.Shape(16, 8, 16, "f16", "f16", "f32"), L.Shape(16, 8, 8, "tf32", "tf32", "f32"),
    L.Shape(16, 8, 32, "u8", "u8", "s32"), L.Shape(8, 8, 4, "f64", "f64", "f64"),
    L.Shape(16, 8, 64, "s4", "s4", "s32"),
])
def test_layout_inference_synthetic(shape):
    ref = L.reference_layout(shape)
    assert L.valid_layout(shape, ref)
    d = L.design(shape)
    assert L.check(shape, d, L.simulate(shape, ref, d)).matches
    # a deliberately permuted A layout (two elements swapped) must be reported as different
    bad = {k: v.copy() for k, v in ref.items()}
    bad["a"][0, 0], bad["a"][5, 0] = ref["a"][5, 0].copy(), ref["a"][0, 0].copy()
    r = L.check(shape, d, L.simulate(shape, bad, d))
    assert not r.matches and r.differences


def test_pack_decode_roundtrip():
    v = np.array([[1.0, 2.0, 3.0, 4.0]])
    w = L.pack("f16", v)
    assert w.shape == (1, 2) and L.decode("f16", w).tolist() == [[1.0, 2.0, 3.0, 4.0]]
    assert L.decode("f64", L.pack("f64", v)).tolist() == v.tolist()
    assert L.pack("s4", np.array([[1, 2, 3, 4, 5, 6, 7, 1]]))[0, 0] == 0x17654321


def test_peak_maths():
    p = Peak(989.4, 1830, 132, "x")
    assert p.per_sm_per_cycle() == pytest.approx(4096, rel=1e-3)
    f = figures(1.0, 4096, 132, 1830, p)  # one 4096-FLOP instruction per cycle per SM
    assert f.pct_of_peak == pytest.approx(100, rel=1e-3)
    f = figures(0.5, 4096, 132, 915, p)
    assert f.tflops == pytest.approx(989.4 / 4, rel=1e-3) and f.pct_of_peak == pytest.approx(50, rel=1e-3)
    assert peak_for("NVIDIA H100 80GB HBM3", "bf16").tflops == 989.4
    assert peak_for("NVIDIA H100 80GB HBM3", "b1") is None
    # sparse figures count the logical shape's FLOPs: twice the dense figure on the datasheet
    assert peak_for("NVIDIA H100 80GB HBM3", "f16:sparse").tflops == pytest.approx(
        2 * peak_for("NVIDIA H100 80GB HBM3", "f16").tflops, rel=1e-3)
    # a GPU that names another's figures (peaks_as) keeps its own source and SM count
    h200 = peak_for("NVIDIA H200", "e4m3:sparse")
    assert h200.tflops == peak_for("NVIDIA H100 80GB HBM3", "e4m3:sparse").tflops and "H200" in h200.source
    assert peak_for("NVIDIA H200", "b1") is None and peak_for("NVIDIA B200", "f16") is None


def _fake_model(kernel, grid, block, args, smem):
    tb = next(a for a in args if getattr(a, "name", "") == "tc_times")
    n = int(kernel.rsplit("_n", 1)[1])
    warps = grid * max(1, block // 32)  # one row per warp, block b on SM b
    t = np.zeros((warps, 2 * T.REPS + 1), dtype=np.uint64)
    t[:, -1] = np.repeat(np.arange(grid), max(1, block // 32))
    for r in range(T.REPS):
        t[:, 2 * r] = 100
        t[:, 2 * r + 1] = 100 + 50 + 32 * n
    return {tb.name: t.ravel()}


def test_suite_on_fake_device(tmp_path):
    assert isinstance(get_suite("tensor"), T.TensorSuite)
    st = Store(tmp_path / "t.db")
    dev = FakeDevice(sm_count=4, launch_model=_fake_model)
    rid = _run(dev, st, ["mma.sync.m16n8k16.f32.f16.f32", "mma.sync.m16n8k32.s32.s4.s32"])
    rs = st.results(rid)
    lat = [r for r in rs if r["measure"] == "latency" and r["variant"].endswith("f16.f32")]
    assert lat and lat[0]["value"] == pytest.approx(32)
    emu = [r for r in rs if r["variant"].endswith("s4.s32")]
    assert emu[0]["measure"] == "sass_map" and emu[0]["flags"][0].startswith("emulated")
    assert all(r["value"] is None for r in emu)  # no timing presented for an emulated variant
    pk = [r for r in rs if r["measure"] == "throughput_peak"]
    assert pk and pk[0]["value"] == pytest.approx(4 * 8 / 32)  # warps * chains / slope
    summ = st.get_meta(f"summary:{rid}")
    assert summ["conclusions"] and summ["variants"]["mma.sync.m16n8k32.s32.s4.s32"]["status"] == "emulated"


def test_numerics_interpretation():
    from gpudissect.suites.tensor.numerics import cases_for, interpret, numerics_design

    s = L.Shape(16, 8, 16, "bf16", "bf16", "f32")
    cs = cases_for("bf16")
    d = numerics_design(s, cs)
    exact = L.simulate(s, L.reference_layout(s), d)
    rn = interpret(s, cs, exact.astype(np.float32).astype(np.float64))  # round-to-nearest-even model
    assert rn["product_0.75ulp_pos"]["outcome"].startswith("rounded up")
    assert rn["product_0.5ulp_tie_odd"]["outcome"].startswith("tie to even")
    trunc = interpret(s, cs, L.simulate(s, L.reference_layout(s), L.Design(d.a * 0, d.b * 0, d.c)))
    assert trunc["product_0.75ulp_pos"]["outcome"].startswith("truncated")  # D = C: product lost
    assert trunc["subnormal_input"]["outcome"] == "flushed to zero"


def test_ldmatrix_mapping_and_unsupported_shape():
    w = _work("ldmatrix.m8n8.x4.trans.b16")
    assert w.check.status == "native", w.check.reason
    assert w.check.sass == {"LDSM.16.MT88.4": "1"}
    w = _work("stmatrix.m16n8.x1.trans.b8")  # sm_100a shape: ptxas refuses it for sm_90a
    assert w.check.status == "unsupported"


@pytest.mark.parametrize("name,sass", [
    ("wmma.mma.m16n16k16.col.row.f32.f16.f32", {"HMMA.16816.F32": "2"}),  # 2 HMMA per wmma
    ("wmma.mma.m8n8k4.row.col.f64.f64.f64", {"DMMA.8x8x4": "1"}),
    ("mma.sp::ordered_metadata.m16n8k32.f32.f16.f32", {"HMMA.SP.16832.F32": "1"}),
])
def test_wmma_and_sparse_mapping(name, sass):
    w = _work(name)
    assert w.check.status == "native", w.check.reason
    assert w.check.sass == sass


def test_sparse_kernel_carries_metadata_and_selector():
    v = _variant("mma.sp.m16n8k16.f32.bf16.f32")
    k = T.mma_kernels(v, SMALL, TARGET, 0)[0]
    assert v.sparse and f"mov.b32 %spmeta, {v.sp_meta:#x};" in k.ptx
    assert k.ptx.count(f", %spmeta, {v.sp_sel};") == k.units
    assert "%spmeta" not in T.mma_kernels(_variant("wmma.mma.m16n16k8.row.col.f32.tf32.f32"),
                                          SMALL, TARGET, 0)[0].ptx


def test_sparse_variant_unsupported_on_sm90():
    w = _work("mma.sp::ordered_metadata.m16n8k64.kind::f8f6f4.f32.e2m1.f32")  # sm_120a only
    assert w.check.status == "unsupported" and "not supported" in w.check.reason


def test_suite_times_wmma_and_sparse_without_layout_probes(tmp_path, monkeypatch):
    import gpudissect.suites.tensor.layout_probe as TL

    def no_probe(*a, **k):  # caught by the suite: an error-flagged result shows that it ran
        raise AssertionError("layout/numerics probes must not run for wmma (mma.sp: layout only)")

    monkeypatch.setattr(TL, "run_layout", no_probe)
    monkeypatch.setattr(TL, "run_numerics", no_probe)
    st = Store(tmp_path / "t.db")
    dev = FakeDevice(sm_count=4, launch_model=_fake_model)
    peaks = []
    monkeypatch.setattr(T, "peak_for", lambda gpu, key: peaks.append(key))
    sweep = T.Sweep(**{**SMALL.to_json(), "layouts": True})
    names = ["wmma.mma.m16n16k16.row.col.f32.bf16.f32", "mma.sp::ordered_metadata.m16n8k16.f32.f16.f32"]
    rid = _run(dev, st, names, sweep)
    rs = st.results(rid)
    for n in names:
        lat = [r for r in rs if r["variant"] == n and r["measure"] == "latency"]
        assert lat and lat[0]["value"] == pytest.approx(32), n
        probes = {r["measure"] for r in rs if r["variant"] == n and r["measure"] in ("layout", "numerics")}
        assert probes == (set() if n.startswith("wmma") else {"layout"}), n
    assert peaks == ["bf16", "f16:sparse"]  # sparse: the sparse figure, not the dense one


class _RegisterLimitedDevice(FakeDevice):
    """Refuses blocks of more than 8 warps as the driver does for a register-hungry kernel."""

    def launch(self, cubin, kernel, grid, block, args, smem=0, launches=1):
        if block > 8 * 32:
            raise RuntimeError("CUDAError: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources")
        return super().launch(cubin, kernel, grid, block, args, smem, launches)


def test_a_launch_refused_for_registers_is_named_and_the_other_warp_count_stands(tmp_path):
    st = Store(tmp_path / "t.db")
    dev = _RegisterLimitedDevice(sm_count=4, launch_model=_fake_model)
    sweep = T.Sweep(**{**SMALL.__dict__, "mma_chains": (4,), "mma_warps": (4, 16)})
    rid = _run(dev, st, ["mma.sync.m16n8k8.f64.f64.f64"], sweep, jobs=1)
    thr = [r for r in st.results(rid) if r["measure"] == "throughput"]
    refused = [r for r in thr if r["params"]["warps"] == 16]
    assert refused and refused[0]["value"] is None
    flag = refused[0]["flags"][0]
    assert flag.startswith("refused:") and "16 warps" in flag
    assert "registers per thread" in flag  # the count comes from the kernel's cubin
    ok = [r for r in thr if r["params"]["warps"] == 4]
    assert ok and ok[0]["value"] and not ok[0]["flags"]
    peak = [r for r in st.results(rid) if r["measure"] == "throughput_peak"]
    assert peak and peak[0]["params"]["warps"] == 4


def test_a_spilling_software_lowering_reads_as_emulated_and_a_spilling_native_one_as_error():
    import dataclasses

    from gpudissect.kernel.build import Built

    spill = SassInstr(0, "LDL", (), ("R0", "[R1]"))

    def family(name):  # the family's kernels as if they spilled registers
        w = _work(name)
        k = next(k for k in w.kernels if "_lat" in k.name)
        return [dataclasses.replace(b, instrs=[*b.instrs, spill]) for kk in w.kernels
                if family_key(kk) == family_key(k) and isinstance(b := w.built[kk.name], Built)]

    emu = check_tensor_family(family("mma.sp.m16n8k64.f32.e4m3.f32"))  # fp8 sparse: no QMMA.SP on sm_90
    assert emu.status == "emulated" and "spills" in emu.reason and "FADD" in emu.reason
    nat = check_tensor_family(family("mma.sync.m16n8k16.f32.f16.f32"))
    assert nat.status == "error" and "spills" in nat.reason


def test_a_variant_compiled_in_parts_gets_the_checks_of_one_module(monkeypatch):
    from gpudissect.arch.target import make_target
    from gpudissect.bench.contract import Context, Item
    from gpudissect.device.device import FakeDevice
    from gpudissect.suites.tensor import suite as ts
    from gpudissect.suites.tensor.checks import Work, compile_work, family_key, parts

    target = make_target("sm_90")
    v = next(v for v in ts.select(ts.load_tensor_catalog(), ["mma.sync.m16n8k16.f32.f16.f32"]))
    ks = ts.variant_kernels(v, ts.QUICK, target, 0)
    ps = parts(ks, 2)
    assert len(ps) > 1 and [k.name for p in ps for k in p] == [k.name for k in ks]
    for p in ps:  # whole families in each part
        assert all(family_key(k) not in {family_key(x) for q in ps if q is not p for x in q} for k in p)
    whole = Work(v, kernels=ks)
    compile_work(whole, target)
    monkeypatch.setattr(ts, "PART_KERNELS", 2)
    suite = ts.TensorSuite(sweep=ts.QUICK)
    ctx = Context(FakeDevice(), None, target, quick=True, jobs=2)
    suite.plan(ctx, [v.name])
    suite.prepare(ctx, [Item(v.name, v)])
    w = ctx.state["works"][v.name]
    assert w.check.to_json() == whole.check.to_json()
    assert [(k, c.to_json()) for k, c in w.checks.items()] == [(k, c.to_json()) for k, c in whole.checks.items()]
    assert set(w.built) == set(whole.built) and w.probe is None  # a quick sweep runs no layout probe


def test_a_quick_run_of_every_variant_leaves_out_wmma_and_one_that_names_them_measures_them():
    target = make_target("sm_90")
    suite = T.TensorSuite()
    every = [it.name for it in suite.plan(Context(FakeDevice(), None, target, quick=True), None).items]
    assert every and not any(n.startswith("wmma.") for n in every)
    assert any(n.startswith("mma.sync.") for n in every) and any(n.startswith("wgmma.") for n in every)
    full = [it.name for it in suite.plan(Context(FakeDevice(), None, target, quick=False), None).items]
    assert any(n.startswith("wmma.") for n in full)
    named = suite.plan(Context(FakeDevice(), None, target, quick=True), ["wmma.mma.*"]).items
    assert named and all(it.name.startswith("wmma.mma.") for it in named)
    assert tuple(T.QUICK.to_json()["left_out"]) == ("wmma.*",)  # the run's parameters say so
