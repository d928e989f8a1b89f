"""wmma.load / wmma.store: catalog derivation, timing kernels (SASS checked, compiled here),
and the raw data-movement layout experiment against a simulated GPU."""

from __future__ import annotations

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.catalog.tensor import load_tensor_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.mma import tensor_arch
from gpudissect.suites.tensor.checks import Work, compile_work
from gpudissect.suites.tensor.fragments import (
    FragSpec,
    coverage,
    decode,
    describe_tiling,
    design,
    output_bytes,
    pack,
    tiling,
    unpack,
)
from gpudissect.suites.tensor.kernels import wmma_frag_probe
from gpudissect.suites.tensor.layout_probe import (
    build_wmma_probe,
    frag_spec,
    mma_shapes_for,
    run_wmma_fragment,
)
from gpudissect.suites.tensor.layout_reference import Shape, reference_layout
from gpudissect.suites.tensor.suite import Sweep, ldst_kernels

TARGET = make_target("sm_90")
CAT = load_tensor_catalog()
WMMA = {v.name: v for v in CAT.ldst if v.wmma}


def test_derived_variants_cover_every_wmma_fragment():
    assert "wmma.load.a.m16n16k16.row.f16" in WMMA
    assert "wmma.store.d.m8n8k4.col.f64" in WMMA
    assert "wmma.load.b.m8n8k128.col.b1" in WMMA
    assert "wmma.load.a.m8n8k128.col.b1" not in WMMA  # b1 A is row-major only
    v = WMMA["wmma.load.c.m16n16k16.col.f32"]
    assert (v.rows, v.cols, v.ldm, v.regs, v.cls, v.bytes) == (16, 16, 16, 8, ".f32", 1024)
    v = WMMA["wmma.load.a.m32n8k16.col.f16"]
    assert (v.rows, v.cols, v.ldm) == (32, 16, 32)
    # every (shape, type, frag) of a wmma.mma entry has its loads and store
    for m in CAT.mma:
        if m.form == "wmma":
            mm, nn, kk = m.shape
            assert f"wmma.store.d.m{mm}n{nn}k{kk}.row.{m.dtype}" in WMMA


@pytest.mark.parametrize("name,ops", [
    ("wmma.load.a.m16n16k16.row.f16", {"LDSM.16.M88.4"}),
    ("wmma.load.c.m16n16k16.row.f32", {"LDS.64"}),
    ("wmma.store.d.m16n16k16.col.f32", {"STS"}),
    # one 16-byte store per lane: independent stores to one address would be merged away
    ("wmma.store.d.m8n8k4.row.f64", {"STS.128"}),
])
def test_timing_kernels_load_the_whole_fragment(name, ops):
    """Every register of the fragment is used, so ptxas keeps the whole load (16x16 f32 C is
    1 KiB per warp = 4 x LDS.64 per lane, not a narrowed load)."""
    v = WMMA[name]
    w = Work(v, ldst_kernels(v, Sweep(lat_lengths=(4, 8), mma_warps=(4,), thr_lengths=(4, 8)), TARGET, 0))
    compile_work(w, TARGET)
    assert w.check is not None and w.check.ok, w.check
    assert set(w.check.sass) == ops
    per_lane = sum(int(c) * (8 if ".64" in op else 16 if ".128" in op else 4) for op, c in w.check.sass.items())
    if not name.startswith("wmma.load.a"):  # LDSM moves 16 B per lane per matrix
        assert per_lane * 32 == v.bytes


# --- the layout experiment against a simulated GPU -----------------------------------------

def _random_truth(v, seed: int = 0) -> np.ndarray:
    """Some slot -> (row, col) layout covering every element (the tool assumes none)."""
    s = frag_spec(v)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(s.elements)
    el = perm[np.arange(32 * s.slots) % s.elements].reshape(32, s.slots)
    return np.stack(np.divmod(el, s.cols), axis=-1)


def _simulate(s: FragSpec, truth: np.ndarray):
    """A launch model that moves data the way ``truth`` (slot -> (row, col)) says."""
    from gpudissect.suites.tensor.fragments import positions

    pos = positions(s)

    def model(kernel, grid, block, args, smem):
        inp = args[0].data.view(np.uint8)
        out = bytearray(args[1].nbytes)
        if s.op == "wmma.load":
            per_in, per_out = s.image_elems * s.bits // 8, 32 * s.regs * s.reg_bytes
            for p in range(grid):
                img = unpack(inp[p * per_in:(p + 1) * per_in], s.bits, s.image_elems)
                regs = img[pos[truth[..., 0], truth[..., 1]]]
                out[p * per_out:(p + 1) * per_out] = pack(regs, s.bits)
        else:
            per_in, per_out = 32 * s.regs * s.reg_bytes, s.image_elems * s.bits // 8
            for p in range(grid):
                regs = unpack(inp[p * per_in:(p + 1) * per_in], s.bits, 32 * s.slots).reshape(32, s.slots)
                img = np.zeros(s.image_elems, dtype=np.uint64)
                img[pos[truth[..., 0], truth[..., 1]]] = regs
                out[p * per_out:(p + 1) * per_out] = pack(img, s.bits)
        return {args[1].name: np.frombuffer(bytes(out), dtype=np.uint8)}

    return model


@pytest.mark.parametrize("name", ["wmma.load.a.m16n16k16.row.f16", "wmma.load.b.m16n16k16.row.bf16",
                                  "wmma.load.c.m32n8k16.col.f32", "wmma.store.d.m16n16k16.row.s32",
                                  "wmma.load.a.m8n8k32.row.s4", "wmma.load.b.m8n8k128.col.b1",
                                  "wmma.store.d.m8n8k4.col.f64", "wmma.load.a.m16n16k8.col.tf32"])
def test_experiment_recovers_a_simulated_layout(name):
    v = WMMA[name]
    s = frag_spec(v)
    truth = _random_truth(v)
    assert len(design(s)) == s.passes * (s.image_elems * s.bits // 8 if s.op == "wmma.load"
                                         else 32 * s.regs * s.reg_bytes)
    out = _simulate(s, truth)(None, s.passes, 32, [_B(design(s)), _B(None, output_bytes(s))], 0)
    slots = decode(s, next(iter(out.values())))
    if s.op == "wmma.load":
        assert (slots == truth).all()
    else:  # a store can only show the slot that wrote each element
        got = {tuple(x) for x in slots.reshape(-1, 2).tolist() if x[0] >= 0}
        assert got == {tuple(x) for x in truth.reshape(-1, 2).tolist()}
    cov = coverage(s, slots)
    assert cov["missing_elements"] == 0


class _B:
    def __init__(self, data, nbytes=0):
        self.data = None if data is None else np.frombuffer(data, dtype=np.uint8)
        self.nbytes = nbytes or len(data)
        self.name = "wf_out"


def test_tiling_finds_mma_registers_and_rejects_a_shuffled_layout():
    v = WMMA["wmma.load.c.m16n16k16.row.f32"]
    s = frag_spec(v)
    ref = reference_layout(Shape(16, 8, 16, "f16", "f16", "f32"))["c"]
    truth = np.concatenate([ref, ref + [0, 8]], axis=1)  # two m16n8 C tiles side by side
    t = tiling(s, truth, mma_shapes_for(v, CAT.mma))
    assert t["all"] and t["shape"][:2] == [16, 8]
    assert t["registers"][4] == {"mma_reg": 0, "offset": [0, 8]}
    bad = truth.copy()
    bad[[0, 1]] = bad[[1, 0]]  # two lanes swapped: no longer any mma register
    t2 = tiling(s, bad, mma_shapes_for(v, CAT.mma))
    assert not t2["all"]
    assert not t["transposed"] and "transposed" not in describe_tiling(t)


def test_tiling_recognises_a_transposed_fragment():
    """An m8n32 accumulator holding the m16n8 C layout transposed (four tiles along n) is
    reported as tiled, transposed; the untransposed view matches no register."""
    v = WMMA["wmma.load.c.m8n32k16.row.f32"]
    s = frag_spec(v)
    ref = reference_layout(Shape(16, 8, 16, "f16", "f16", "f32"))["c"]  # (row<16, col<8)
    tr = ref[..., ::-1]  # (row<8, col<16)
    truth = np.concatenate([tr, tr + [0, 16]], axis=1)
    t = tiling(s, truth, mma_shapes_for(v, CAT.mma))
    assert t["all"] and t["transposed"] and t["shape"][:2] == [16, 8]
    assert t["registers"][4] == {"mma_reg": 0, "offset": [16, 0]}  # in the mma's (transposed) frame
    assert "transposed" in describe_tiling(t)
    bad = truth.copy()
    bad[[0, 1]] = bad[[1, 0]]  # two lanes swapped: neither view matches
    assert tiling(s, bad, mma_shapes_for(v, CAT.mma))["all"] is False


def test_run_wmma_fragment_end_to_end_on_a_fake_device():
    v = WMMA["wmma.load.a.m16n16k16.col.f16"]
    s = frag_spec(v)
    ref = reference_layout(Shape(16, 8, 16, "f16", "f16", "f32"))["a"]
    truth = np.concatenate([ref, ref], axis=1)  # the A tile twice
    dev = FakeDevice(sm_count=4, launch_model=_simulate(s, truth))
    texts: dict = {}
    r = run_wmma_fragment(dev, v, CAT.mma, TARGET, texts)
    assert r.measure == "layout" and r.value == 1.0 and not r.flags
    assert r.params["coverage"]["copies_max"] == 2  # 8 f16x2 registers hold 256 elements twice
    assert any(kind == "ptx" for kind, _ in texts.values())
    # a broken machine (one lane's data lost) is flagged, not reported as a layout
    broken = truth.copy()
    dev2 = FakeDevice(sm_count=4, launch_model=_drop_lane(_simulate(s, broken), s))
    r2 = run_wmma_fragment(dev2, v, CAT.mma, TARGET, {})
    assert r2.flags and r2.flags[0].startswith("incomplete") and r2.value == 0.0


def _drop_lane(model, s):
    def m(kernel, grid, block, args, smem):
        out = model(kernel, grid, block, args, smem)
        buf = next(iter(out.values())).copy()
        per = 32 * s.regs * s.reg_bytes
        for p in range(grid):
            buf[p * per:p * per + s.regs * s.reg_bytes] = 0  # lane 0 gets nothing
        return {k: buf for k in out}
    return m


def test_probe_kernel_compiles_for_every_fragment():
    from gpudissect.kernel.build import build_module

    ks = [wmma_frag_probe(v, f"wp{i}", TARGET) for i, v in enumerate(WMMA.values())]
    built = build_module(ks, tensor_arch(TARGET), region=False)
    bad = {n: b for n, b in built.items() if isinstance(b, Exception)}
    assert not bad


def test_suite_times_and_maps_a_wmma_load(tmp_path):
    """The suite on a fake device: the wmma.load variant is timed (latency, throughput) and its
    fragment layout observed; the summary states what was found."""
    import gpudissect.suites.tensor.suite as T
    from gpudissect.bench.contract import Context
    from gpudissect.bench.runner import run
    from gpudissect.store.db import Store

    v = WMMA["wmma.load.c.m16n16k16.row.f32"]
    s = frag_spec(v)
    ref = reference_layout(Shape(16, 8, 16, "f16", "f16", "f32"))["c"]
    sim = _simulate(s, np.concatenate([ref, ref + [0, 8]], axis=1))

    def model(kernel, grid, block, args, smem):
        if kernel == "wprobe":
            return sim(kernel, grid, block, args, smem)
        tb = next(a for a in args if a.name == "tc_times")
        n = int(kernel.rsplit("_n", 1)[1])
        t = np.zeros((grid * block, 2 * T.REPS + 1), dtype=np.uint64)
        t[:, -1] = np.repeat(np.arange(grid), block)
        t[:, 0:-1:2], t[:, 1:-1:2] = 100, 150 + 30 * n
        return {tb.name: t.ravel()}

    st = Store(tmp_path / "t.db")
    sweep = T.Sweep(lat_lengths=(4, 8), thr_lengths=(4, 8), mma_warps=(4,))
    ctx = Context(FakeDevice(sm_count=4, launch_model=model), st, TARGET, jobs=1)
    rid = run(T.TensorSuite(sweep), ctx, [v.name]).run_id
    rs = {r["measure"]: r for r in st.results(rid)}
    assert rs["latency"]["value"] == pytest.approx(30)
    assert rs["layout"]["value"] == 1.0 and rs["layout"]["params"]["tiling"]["shape"][:2] == [16, 8]
    summ = st.get_meta(f"summary:{rid}")
    assert any("1 equal the stated mma.sync layouts tiled" in c for c in summ["conclusions"])
    assert summ["layouts"][v.name]["matches_tiled_mma"] is True


def test_fragment_figure_is_written(tmp_path):
    from gpudissect.suites.tensor.figures import FRAGMENT_FIGS, figures

    v = WMMA[FRAGMENT_FIGS[0]]
    s = frag_spec(v)
    slots = _random_truth(v)
    params = {"frag": v.frag, "op": v.op, "rows": v.rows, "cols": v.cols, "layout": v.layout,
              "slots": slots.tolist(), "coverage": coverage(s, slots), "tiling_text": "x"}
    doc = {"records": [{"variant": v.name, "measure": "layout", "value": 0.0, "params": params},
                       {"variant": "wmma.load.x", "measure": "layout", "value": 0.0, "params": params}]}
    out = figures(doc, tmp_path)
    names = {p.name for p in out}
    assert f"tensor_fragment_{v.name.replace('.', '_')}.png" in names
    assert not any("wmma_load_x" in n for n in names)  # only the selected fragments are drawn


def test_layouts_export_via_cli(tmp_path):
    """`gpudissect export --format layouts` writes the layouts of the latest tensor run."""
    import json

    from typer.testing import CliRunner

    from gpudissect.cli import app
    from gpudissect.store.db import Result, Store
    from gpudissect.store.export import LAYOUTS_SCHEMA

    st = Store(tmp_path / "t.db")
    rid = st.start_run("tensor", FakeDevice().info, "ptxas x", "sm_90a", {}, {}, "0")
    st.save(rid, "wmma.load.a.m16n16k16.row.f16",
            [Result("wmma.load.a.m16n16k16.row.f16", "layout", 1.0, "matches_tiled_mma", "s",
                    params={"slots": [[[0, 0]]], "frag": "a"})], {})
    st.save(rid, "mma.sync.m8n8k128.s32.b1.s32.and.popc",
            [Result("mma.sync.m8n8k128.s32.b1.s32.and.popc", "layout", None, "", "none", flags=["not-measured: x"])], {})
    st.finish_run(rid, {}, {})
    out = tmp_path / "lay.json"
    res = CliRunner().invoke(app, ["export", str(out), "--format", "layouts", "--suite", "tensor", "--db", str(st.path)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == LAYOUTS_SCHEMA
    assert list(doc["layouts"]) == ["wmma.load.a.m16n16k16.row.f16"]
    assert doc["not_measured"] == {"mma.sync.m8n8k128.s32.b1.s32.and.popc": ["not-measured: x"]}
    bad = CliRunner().invoke(app, ["export", str(out), "--format", "layouts", "--db", str(st.path)])
    assert bad.exit_code != 0 and "needs" in bad.output


def test_conclusions_separate_direct_transposed_and_untiled_fragments():
    from gpudissect.suites.tensor.analyse import wmma_fragment_conclusions

    def frag(transposed: bool | None) -> dict:
        return {"slots": [[[0, 0]]], "flags": [], "value": 0.0 if transposed is None else 1.0,
                "tiling": {"transposed": bool(transposed)}, "frag": "c", "elem": "f32", "op": "wmma.load",
                "layout": "row", "coverage": {"copies_max": 1}}

    text = wmma_fragment_conclusions({"wmma.load.c.a.row.f32": frag(False), "wmma.load.c.b.row.f32": frag(True),
                                      "wmma.load.c.c.row.f32": frag(None)})[0]
    assert "1 equal the stated mma.sync layouts tiled, 1 equal them tiled and transposed" in text
    assert text.endswith("; not tiled: wmma.load.c.c.row.f32")
    assert "(col, row)): wmma.load.c.b.row.f32;" in text  # the transposed one is named


def test_the_wmma_probe_is_built_in_the_compile_pool_and_used_when_measured(monkeypatch):
    """The suite's prepare builds a wmma load's fragment probe beside its timing kernels (in the
    pool, not while the GPU waits); the measurement launches that one and builds nothing."""
    from gpudissect.bench.contract import Context, Item
    from gpudissect.suites.tensor import layout_probe
    from gpudissect.suites.tensor import suite as ts

    v = WMMA["wmma.load.a.m16n16k16.col.f16"]
    suite = ts.TensorSuite(sweep=ts.Sweep(thr_lengths=(16,), mma_warps=(4,)))
    ctx = Context(FakeDevice(), None, TARGET, jobs=1)
    suite.plan(ctx, [v.name])
    suite.prepare(ctx, [Item(v.name, v)])
    w = ctx.state["works"][v.name]
    assert w.probe is not None and w.probe.cubin == build_wmma_probe(v, TARGET).cubin
    s = frag_spec(v)
    ref = reference_layout(Shape(16, 8, 16, "f16", "f16", "f32"))["a"]
    dev = FakeDevice(sm_count=4, launch_model=_simulate(s, np.concatenate([ref, ref], axis=1)))
    monkeypatch.setattr(layout_probe, "_build_probe", lambda *a: (_ for _ in ()).throw(AssertionError("built")))
    r = run_wmma_fragment(dev, v, CAT.mma, TARGET, {}, w.probe)
    assert r.measure == "layout" and r.value == 1.0 and not r.flags
