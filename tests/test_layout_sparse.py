"""Fragment-layout experiment for the mma forms beyond dense single-product mma.sync: mma.sp
(compressed A through the metadata), m8n8k4 .f16 (four quad-pair products) and b1
(.and.popc / .xor.popc). A numpy fake of the GPU computes D from the words the probe sends,
with the PTX reference layout or a deliberately wrong one; the inference must recover the
first and report the second."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.catalog.tensor import element, load_tensor_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Result, Store
from gpudissect.suites.tensor import layout_probe as TL
from gpudissect.suites.tensor import layout_reference as L
from gpudissect.suites.tensor import suite as T
from gpudissect.suites.tensor.kernels import probe_kernel

TARGET = make_target("sm_90")

SPARSE = ["mma.sp::ordered_metadata.m16n8k16.f16.f16.f16", "mma.sp.m16n8k32.f32.bf16.f32",
          "mma.sp::ordered_metadata.m16n8k8.f32.tf32.f32", "mma.sp.m16n8k16.f32.tf32.f32",
          "mma.sp.m16n8k32.s32.s8.s32", "mma.sp::ordered_metadata.m16n8k64.s32.u8.s32",
          "mma.sp.m16n8k64.s32.s4.s32", "mma.sp::ordered_metadata.m16n8k128.s32.u4.s32",
          "mma.sp::ordered_metadata.m16n8k64.f32.e4m3.f32", "mma.sp.m16n8k64.f32.e5m2.f32"]
QUADPAIR = ["mma.sync.m8n8k4.f16.f16.f16", "mma.sync.m8n8k4.f32.f16.f32",
            "mma.sync.m8n8k4.row.row.f16.f16.f16", "mma.sync.m8n8k4.row.row.f32.f16.f32",
            "mma.sync.m8n8k4.col.col.f16.f16.f16", "mma.sync.m8n8k4.col.col.f32.f16.f32",
            "mma.sync.m8n8k4.col.row.f16.f16.f16", "mma.sync.m8n8k4.col.row.f32.f16.f32"]
B1 = ["mma.sync.m8n8k128.s32.b1.s32.xor.popc", "mma.sync.m8n8k128.s32.b1.s32.and.popc",
      "mma.sync.m16n8k128.s32.b1.s32.xor.popc", "mma.sync.m16n8k128.s32.b1.s32.and.popc"]
FP8 = ["mma.sync.m16n8k16.f16.e4m3.e5m2.f16", "mma.sync.m16n8k32.f32.e5m2.f32"]


def _variant(name):
    return next(v for v in load_tensor_catalog().mma if v.name == name)


def _swap_a(ref):
    """Two A slots of different rows (lanes 0 and 5) exchanged."""
    bad = {k: v.copy() for k, v in ref.items()}
    bad["a"][0, 0], bad["a"][5, 0] = ref["a"][5, 0].copy(), ref["a"][0, 0].copy()
    return bad


# --- the reference models ---------------------------------------------------------------

def _sp(atype, meta=0x44444444):
    return L.Shape(16, 8, 16, atype, atype, "f32", sp_meta=meta)


@pytest.mark.parametrize("atype,meta,want", [
    ("f16", 0x44444444, [0, 1, 4, 5, 8, 9, 12, 13]),  # 2:4, indices {0, 1} of every 4
    ("f16", 0xEEEEEEEE, [2, 3, 6, 7, 10, 11, 14, 15]),  # indices {2, 3}
    ("s8", 0x44444444, [0, 1, 4, 5, 8, 9, 12, 13]),
    ("e4m3", 0x88888888, [0, 2, 4, 6, 8, 10, 12, 14]),  # indices {0, 2}
    ("tf32", 0x44444444, [0, 2, 4, 6, 8, 10, 12, 14]),  # 1:2, 0b0100: element 0 of a pair
    ("tf32", 0xEEEEEEEE, [1, 3, 5, 7, 9, 11, 13, 15]),  # 0b1110: element 1 of a pair
    ("s4", 0x44444444, [0, 1, 2, 3, 8, 9, 10, 11]),  # 4:8 in pairs: pairs {0, 1} of every 4
])
def test_sparse_metadata_selects_logical_k(atype, meta, want):
    assert L.sparse_k(_sp(atype, meta), np.arange(8)).tolist() == want


@pytest.mark.parametrize("atype,meta", [("f16", 0x4444444E), ("f16", 0), ("f16", 0x11111111),
                                        ("tf32", 0x88888888)])
def test_sparse_metadata_not_modelled_or_invalid(atype, meta):
    with pytest.raises(ValueError):
        L.sparse_k(_sp(atype, meta), np.arange(4))


def test_sparse_reference_follows_ptx_u4_m16n8k128():
    """PTX ISA, sparse m16n8k128 .u4: row = groupID for a_i, 0 <= i < 8 or 16 <= i < 24, else
    groupID + 8; the elements lie in logical columns firstcol..firstcol+15 with firstcol =
    threadID_in_group * 16 (+ 64 for i >= 16)."""
    s = TL.shape_of(_variant("mma.sp.m16n8k128.s32.u4.s32"))
    a = L.reference_layout(s)["a"]
    assert a.shape == (32, 32, 2)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(32):
            row = g if (i < 8 or 16 <= i < 24) else g + 8
            first = t * 16 + (64 if i >= 16 else 0)
            assert a[lane, i, 0] == row and first <= a[lane, i, 1] <= first + 15


def test_quadpair_reference_blocks():
    """m8n8k4: lanes 4q..4q+3 and 16+4q..16+4q+3 hold block q of A, B and C/D only; .row A
    keeps a row per lane, .col A a column per lane."""
    for name in QUADPAIR:
        s = TL.shape_of(_variant(name))
        ref = L.reference_layout(s)
        assert L.valid_layout(s, ref)
        for lane in range(32):
            q = (lane % 16) // 4
            for op, (h, w) in (("a", (8, 4)), ("b", (4, 8)), ("c", (8, 8))):
                r, c = ref[op][lane, :, 0], ref[op][lane, :, 1]
                assert ((r // h == q) & (c // w == q)).all(), (name, op, lane)
        a = ref["a"][0]
        if s.alayout == "row":
            assert set(a[:, 0]) == {0} and sorted(a[:, 1]) == [0, 1, 2, 3]
        else:
            assert set(a[:, 1]) == {0} and sorted(a[:, 0]) == [0, 1, 2, 3]


def test_every_mma_variant_has_a_modelled_layout():
    """The exclusions are gone: every mma / mma.sp variant of the catalog (wmma aside) has a
    reference layout whose fragment sizes are the catalog's registers; only the sm_120a
    f8f6f4 types (no exact codes, ptxas rejects them on sm_90) stay out."""
    out = {}
    for v in load_tensor_catalog().mma:
        if v.form == "wmma":
            assert TL.layout_supported(v)
            continue
        out[v.name] = TL.layout_supported(v)
    assert not [n for n, why in out.items() if why and "kind::f8f6f4" not in n]
    assert all(out[n] is None for n in QUADPAIR + B1 + SPARSE)
    assert TL.layout_supported(_variant("mma.sync.m16n8k256.s32.b1.s32.xor.popc")) is None


def test_shape_of_reads_operand_layouts_bop_and_metadata():
    s = TL.shape_of(_variant("mma.sync.m8n8k4.col.row.f32.f16.f32"))
    assert (s.groups, s.alayout, s.blayout, s.na, s.nb, s.nc) == (4, "col", "row", 4, 4, 8)
    assert TL.shape_of(_variant("mma.sync.m16n8k256.s32.b1.s32.xor.popc")).bop == "xor"
    s = TL.shape_of(_variant("mma.sp.m16n8k16.f32.tf32.f32"))
    assert s.sparse and s.sp_meta == 0x44444444 and s.na == 4 and s.nb == 4


# --- inference on simulated D ------------------------------------------------------------

@pytest.mark.parametrize("name", SPARSE + QUADPAIR + B1 + FP8)
def test_inference_recovers_reference_and_reports_a_permutation(name):
    s = TL.shape_of(_variant(name))
    ref = L.reference_layout(s)
    assert L.valid_layout(s, ref)
    d = L.design(s)
    r = L.check(s, d, L.simulate(s, ref, d))
    assert r.matches and r.coverage_ok and r.c_identity, r.differences[:3]
    assert r.triples == 32 * s.na * s.n
    bad = L.check(s, d, L.simulate(s, _swap_a(ref), d))
    assert not bad.matches and bad.differences


@pytest.mark.parametrize("name", ["mma.sp.m16n8k32.f32.bf16.f32", "mma.sp.m16n8k16.f32.tf32.f32",
                                  "mma.sp::ordered_metadata.m16n8k128.s32.u4.s32"])
def test_sparse_other_selection_is_reported(name):
    """Hardware that kept the other half of each chunk (the metadata read as {2,3}) multiplies
    A with other B rows: reported as k differences."""
    s = TL.shape_of(_variant(name))
    other = dataclasses.replace(s, sp_meta=0xEEEEEEEE)
    d = L.design(s)
    r = L.check(s, d, L.simulate(other, L.reference_layout(other), d))
    assert not r.matches and any("k=" in x for x in r.differences)


def test_quadpair_lanes_paired_differently_is_reported():
    """Quad-pairs made of lanes 4q..4q+3 and 16+4(q+1).. (the high halves rotated)."""
    s = TL.shape_of(_variant("mma.sync.m8n8k4.f32.f16.f32"))
    ref = L.reference_layout(s)
    bad = {op: np.concatenate([x[:16], np.roll(x[16:], 4, axis=0)]) for op, x in ref.items()}
    assert L.valid_layout(s, bad)
    d = L.design(s)
    r = L.check(s, d, L.simulate(s, bad, d))
    assert not r.matches and r.differences


def test_b1_xor_read_as_and_is_reported():
    s = TL.shape_of(_variant("mma.sync.m8n8k128.s32.b1.s32.xor.popc"))
    d = L.design(s)
    assert sum(p["kind"] == "base" for p in d.passes) == 1 + d.digits
    ref = L.reference_layout(s)
    r = L.check(s, d, L.simulate(dataclasses.replace(s, bop="and"), ref, d))
    assert not r.matches and not r.coverage_ok


def test_fp8_codes_encode_exactly():
    assert L.encode("e4m3", np.array([0, 1, 2, 9, 16])).tolist() == [0, 0x38, 0x40, 0x51, 0x58]
    assert L.encode("e5m2", np.array([0, 1, 7, 8])).tolist() == [0, 0x3C, 0x47, 0x48]
    with pytest.raises(ValueError):
        L.encode("e4m3", np.array([17]))


# --- the whole run_layout on a fake GPU ----------------------------------------------------

def _unpack(t, words, n):
    """Element values of fragment words (inverse of ``pack`` for the design's codes)."""
    w = np.asarray(words, dtype=np.uint64)
    if t == "f64":
        bits = w[..., 0::2] | (w[..., 1::2] << np.uint64(32))
    else:
        e, nb = element(t).per_reg, element(t).bits
        shifts = (np.arange(e) * nb).astype(np.uint64)
        bits = ((w[..., None] >> shifts) & np.uint64((1 << nb) - 1)).reshape(*w.shape[:-1], -1)
    codes = L.encode(t, np.arange(element(t).max_code + 1))
    order = np.argsort(codes)
    pos = np.searchsorted(codes[order], bits)
    assert (codes[order][np.minimum(pos, len(codes) - 1)] == bits).all(), f"{t}: not a code"
    return order[pos][..., :n].astype(float)


def _gpu(v, lay):
    """A fake launch: D of each warp from the A, B, C words it was given, by ``lay``."""
    s = TL.shape_of(v)
    wide = element(v.atype).reg_words
    ra, rb = v.regs["a"] * wide, v.regs["b"] * wide

    def model(kernel, grid, block, args, smem):
        words = args[0].data.reshape(grid, 32, -1)
        a = _unpack(v.atype, words[..., :ra], s.na)
        b = _unpack(v.btype, words[..., ra:ra + rb], s.nb)
        c = L.decode(v.ctype, words[..., ra + rb:])
        d = L.simulate(s, lay, L.Design(a, b, c))
        return {args[1].name: L.pack(v.dtype, d.reshape(grid * 32, -1)).ravel()}

    return FakeDevice(launch_model=model)


@pytest.mark.parametrize("name", ["mma.sp::ordered_metadata.m16n8k16.f32.f16.f32", "mma.sp.m16n8k16.f32.tf32.f32",
                                  "mma.sp.m16n8k128.s32.u4.s32", "mma.sp::ordered_metadata.m16n8k64.f32.e4m3.f32",
                                  "mma.sync.m8n8k4.row.row.f32.f16.f32", "mma.sync.m8n8k4.col.col.f16.f16.f16",
                                  "mma.sync.m8n8k128.s32.b1.s32.xor.popc", "mma.sync.m16n8k32.f16.e5m2.e4m3.f16"])
def test_run_layout_on_fake_gpu(name):
    v = _variant(name)
    ref = L.reference_layout(TL.shape_of(v))
    assert ("%spmeta" in probe_kernel(v, "p", TARGET).ptx) == v.sparse
    texts: dict = {}
    r = TL.run_layout(_gpu(v, ref), v, TARGET, texts)
    assert r.value == 1.0 and not r.flags, r.params.get("differences")
    assert r.params["probes"] == L.design(TL.shape_of(v)).a.shape[0] and texts
    bad = TL.run_layout(_gpu(v, _swap_a(ref)), v, TARGET, {})
    assert bad.value == 0.0 and bad.flags[0].startswith("layout-differs")


# --- the suite runs the probes for mma.sp and emulated variants ----------------------------

def _timing_model(kernel, grid, block, args, smem):
    tb = next(a for a in args if getattr(a, "name", "") == "tc_times")
    n = int(kernel.rsplit("_n", 1)[1])
    t = np.zeros((grid * block, 2 * T.REPS + 1), dtype=np.uint64)
    for r in range(T.REPS):
        t[:, 2 * r + 1] = 50 + 32 * n
    return {tb.name: t.ravel()}


def test_suite_runs_layout_for_sparse_and_emulated_not_wmma(tmp_path, monkeypatch):
    calls = []

    def record(kind):
        def f(dev, v, *a, **k):
            calls.append((kind, v.name))
            return Result(v.name, kind, 1.0, "", "recorded")
        return f

    monkeypatch.setattr(TL, "run_layout", record("layout"))
    monkeypatch.setattr(TL, "run_numerics", record("numerics"))
    sweep = T.Sweep(lat_lengths=(2, 4), thr_units=(32, 64), mma_chains=(8,), mma_warps=(4,), thr_lengths=(2, 4),
                    wg_lat_lengths=(2, 4), wg_thr_units=(2, 4), wg_n_full=(64,), wg_n_other=(64,), wg_accs=(1,),
                    wg_groups=(2,), data_variants=())
    names = ["mma.sp::ordered_metadata.m16n8k16.f32.f16.f32",  # native sparse
             "mma.sync.m8n8k4.f32.f16.f32",  # emulated on sm_90 (quad-pairs)
             "mma.sync.m16n8k16.f32.bf16.f32",  # native dense: layout and numerics
             "wmma.mma.m16n16k16.row.col.f32.bf16.f32",
             "mma.sp::ordered_metadata.m16n8k64.kind::f8f6f4.f32.e2m1.f32"]  # ptxas rejects it
    ctx = Context(FakeDevice(sm_count=4, launch_model=_timing_model), Store(tmp_path / "t.db"), TARGET, jobs=2)
    run(T.TensorSuite(sweep), ctx, names)
    assert sorted(calls) == sorted([("layout", names[0]), ("layout", names[1]), ("layout", names[2]),
                                    ("numerics", names[2])])
