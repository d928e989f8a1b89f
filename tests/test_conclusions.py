"""Conclusions the tool states (issue 22): value-dependent latency (values.py), signed against
unsigned forms (conclusions.py), tensor latency against shape, the PTX<->SASS register
correspondence of the map, branch cost. Synthetic data with known answers; the SASS checks on
SASS built here with ptxas."""

from __future__ import annotations

import re

import pytest

from gpudissect.arch.target import make_target
from gpudissect.catalog.model import load_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.suites.instructions.conclusions import (
    signed_partner,
    signedness,
    signedness_lines,
    summarize,
)
from gpudissect.suites.instructions.studies import value_classes as V
from gpudissect.suites.instructions.suite import STUDIES, Plan, prepare_works
from gpudissect.suites.instructions.verify import autoverify_many

PLAN = Plan(tp_min_length=0, latency_units=(32, 64), tp_chains=(1,), tp_units=(64, 128), tp_warps=(4,), distances=(2,),
            distance_units=(32, 64), reps=3, launches=1, grid_warps=(1,), grid_distances=(1,))


# --- value classes ---------------------------------------------------------------------------

def test_rederived_variant_keeps_the_chain_in_its_class():
    v = load_catalog().get("testp.normal.f32")
    vals = V.classes(v)
    assert {"zero", "denormal", "inf", "nan"} <= set(vals)
    d = V.rederived(v, vals["denormal"])
    assert d.chain == "a" and d.dest.ptype == "f32"  # the chain register is the source's class
    assert "testp.normal.f32 {vr}, {a};" in d.ptx and "selp.b32 {vg}, 1, 0, {vr};" in d.ptx
    assert "lop3.b32 {d}, {vg}, {vm}, {vk}, 0xF8;" in d.ptx
    assert d.values["vm"] == "raw:0" and d.values["vk"] == "raw:0x10"


def test_holds_own_needs_the_variants_sass_and_the_rederivation():
    from fractions import Fraction as F
    own = {"MUFU.RCP": F(1), "FFMA": F(5), "IADD3": F(7, 2)}
    ok = {"MUFU.RCP": F(1), "FFMA": F(5), "VIADD": F(3), "LOP3.LUT": F(1)}  # VIADD ~ IADD3
    assert V.holds_own(ok, own, {"LOP3.LUT": 1}) is None
    assert "MUFU.RCP 0 of 1" in V.holds_own({**ok, "MUFU.RCP": F(0)}, own, {"LOP3.LUT": 1})
    assert "LOP3.LUT" in V.holds_own({**ok, "LOP3.LUT": F(0)}, own, {"LOP3.LUT": 1})


@pytest.fixture(scope="module")
def value_work():
    target = make_target("sm_90", "13.0")
    cat = load_catalog()
    vs = [cat.get("div.rn.f32"), cat.get("popc.b32")]
    recs = autoverify_many(vs, target, jobs=2)
    works = prepare_works(vs, recs, target, PLAN, jobs=2)
    return works, V.prepare(works, target, PLAN, jobs=2), target


def test_value_families_verify_on_real_sass(value_work):
    _, fams, _ = value_work
    div = fams["div.rn.f32"]
    assert [f.cls for f in div] == V.own_type_classes("f32")
    assert all(f.error is None and f.built for f in div), [f.error for f in div]
    assert "CALL.REL.NOINC" in div[0].sass and "LOP3.LUT" in div[0].sass
    assert V.branches(div[0].sass) == ["BRA", "BSSY", "BSYNC", "CALL.REL.NOINC"]
    assert all(f.error is None for f in fams["popc.b32"])


def test_value_latency_measured_and_ranged(value_work):
    """Synthetic clocks: class j of div.rn.f32 costs 40 + 30*(j in {denormal, nan}) cycles."""
    works, fams, _ = value_work
    names = [f.cls for f in fams["div.rn.f32"]]
    slow = {names.index("denormal"), names.index("nan")}

    def model(kernel: str, chains: int, length: int, warps: int) -> float:
        j = int(re.search(r"_k(\d+)_", kernel)[1])
        return 100 + length * (70.0 if j in slow else 40.0)

    w = works[0]
    res, texts = V.measure(FakeDevice(model, sm_count=2), w.variant, fams["div.rn.f32"], PLAN)
    assert [r.params["class"] for r in res] == names and texts
    assert all(r.measure == V.MEASURE for r in res)
    assert res[names.index("one")].value == pytest.approx(40.0)
    assert res[names.index("nan")].value == pytest.approx(70.0)
    rows = [dict(variant=r.variant, measure=r.measure, value=r.value, flags=r.flags, params=r.params,
                 samples=r.samples, sass=r.sass, cls=r.cls) for r in res]
    rng = V.range_result("div.rn.f32", rows)
    assert rng.value == pytest.approx(30.0)
    assert rng.params["min"] == pytest.approx(40.0) and rng.params["max_class"] in ("denormal", "nan")
    assert set(rng.params["slower"]) == {"denormal", "nan"}
    assert "data-dependent path" in rng.params["path"]
    line = V.conclusions([dict(variant="div.rn.f32", measure=V.RANGE, value=rng.value, params=rng.params,
                               flags=[])])[0]
    assert "slower: " in line and "denormal 70 (+30)" in line
    assert "including the re-derivation (the same in every class)" in line
    assert "only the differences between classes are the instruction's" in line


def test_one_latency_for_every_class():
    # repeats spread by +-0.5 cycle: a 95% half-width of about 0.74 each, so 0.3 apart is the same
    rows = [dict(variant="popc.b32", measure=V.MEASURE, value=v, flags=[], params={"class": c, "branches": []},
                 samples={"slope_per_repeat": [v + d for d in (-0.5, 0, 0.5, -0.5, 0, 0.5)]},
                 sass=["POPC", "LOP3.LUT"], cls="int")
            for c, v in (("zero", 10.0), ("ones", 10.2), ("one", 9.9))]
    r = V.range_result("popc.b32", rows)
    assert r.params["slower"] == {} and r.params["path"] == "one latency for every class"
    assert r.params["fastest"] == ["one", "ones", "zero"] and r.params["undetermined"] == []
    rows[1]["value"] = 14.0  # a class 4 cycles slower without a branch: the unit's own
    assert "without a branch" in V.range_result("popc.b32", rows).params["path"]
    rows[1]["flags"] = ["noisy: ..."]  # an unclean class stays out of min/max
    r = V.range_result("popc.b32", rows)
    assert r.params["unclean"] == ["ones"] and r.params["max"] == 10.0


# --- signed vs unsigned ----------------------------------------------------------------------

def _rec(v, m, val, sass, flags=(), spread=0.1):
    """A record with six repeats of its value spread by +-``spread`` (None: no repeats)."""
    key = "slope_per_repeat" if m == "latency" else "rate_per_repeat"
    samples = None if spread is None or val is None else {key: [val + d * spread for d in (-1, 0, 1, -1, 0, 1)]}
    return dict(variant=v, measure=m, value=val, sass=sass, flags=list(flags), params={}, samples=samples)


def test_signed_partner():
    assert signed_partner("setp.eq.s32") == "setp.eq.u32"
    assert signed_partner("cvt.s32.s16") == "cvt.u32.u16"
    assert signed_partner("add.u32") is None and signed_partner("add.f32") is None


def test_signedness_from_records():
    recs = [_rec("setp.eq.s32", "latency", 8.0, ["ISETP.NE.AND", "SEL"]),
            _rec("setp.eq.u32", "latency", 8.2, ["ISETP.NE.U32.AND", "SEL"]),  # +-0.15 each: the same
            _rec("setp.eq.s32", "throughput_peak", 1.0, ["ISETP.NE.AND", "SEL"], spread=0.01),
            _rec("setp.eq.u32", "throughput_peak", 1.0, ["ISETP.NE.U32.AND", "SEL"], spread=0.01),
            _rec("min.s32", "latency", 4.0, ["IMNMX"]), _rec("min.u32", "latency", 6.0, ["IMNMX.U32", "SEL"]),
            _rec("add.s64", "latency", 4.0, ["IADD3", "IADD3.X"]),
            _rec("add.u64", "latency", None, ["IADD3", "IADD3.X"], ["noisy: x"])]
    rows = {r["signed"]: r for r in signedness(recs)}
    assert rows["setp.eq.s32"]["sass"] == "same SASS but for a signedness modifier"
    assert rows["setp.eq.s32"]["latency_same"] is True and rows["setp.eq.s32"]["throughput_same"] is True
    assert rows["min.s32"]["sass"] == "different SASS" and rows["min.s32"]["latency_same"] is False
    assert rows["add.s64"]["sass"] == "identical SASS" and rows["add.s64"]["latency_same"] is None
    lines = signedness_lines(list(rows.values()))
    assert "3 pairs" in lines[0] and "1 of 2 pairs" in lines[0] and "min.s32 4 vs min.u32 6 (+-" in lines[0]
    assert "within its 95% interval" in lines[0] and "undetermined" not in lines[0]
    assert any(x.startswith("equality: setp.eq.s32") for x in lines)
    assert summarize(recs, STUDIES)["conclusions"] == lines


# --- tensor latency against shape ------------------------------------------------------------

def test_tensor_latency_vs_shape():
    from gpudissect.suites.tensor.shape import latency_vs_shape, shape_conclusions, shape_of

    assert shape_of("mma.sync.m16n8k16.f32.f16.f32", "mma") == ("mma.sync.*.f32.f16.f32 [mma]", "m16n8k16", 2048.0)
    assert shape_of("wgmma.f32.f16", "ss_n64") == ("wgmma.f32.f16 [ss]", "n64", 64.0)
    assert shape_of("ldmatrix.x4", "ldst") is None
    variants = {"mma.sync.m16n8k8.f32.f16.f32": {"latency_cycles": {"mma": 17.0}},
                "mma.sync.m16n8k16.f32.f16.f32": {"latency_cycles": {"mma": 24.0}},
                "mma.sync.m8n8k16.s32.s8.s32": {"latency_cycles": {"mma": 14.0}},
                "mma.sync.m16n8k16.s32.s8.s32": {"latency_cycles": {"mma": 14.5}},
                "mma.sync.m16n8k32.s32.b1.s32": {"latency_cycles": {"mma": 9.0}},  # one shape only
                "wgmma.f32.f16": {"latency_cycles": {"ss_n8": 48.0, "ss_n16": 52.0, "rs_n8": 38.0}},
                "ldmatrix.m8n8.x1.b16": {"latency_cycles": {"ldst": 28.0}}}
    t = latency_vs_shape(variants, skip=("ldmatrix",))
    assert set(t) == {"mma.sync.*.f32.f16.f32 [mma]", "mma.sync.*.s32.s8.s32 [mma]", "wgmma.f32.f16 [ss]"}
    f16 = t["mma.sync.*.f32.f16.f32 [mma]"]
    assert f16["depends"] and f16["span"] == 7.0 and f16["cycles_per_doubling"] == pytest.approx(7.0)
    assert list(f16["shapes"]) == ["m16n8k8", "m16n8k16"]
    assert not t["mma.sync.*.s32.s8.s32 [mma]"]["depends"]  # 0.5 cycles apart: the same
    lines = shape_conclusions(t)
    assert lines[0].startswith("tensor latency vs shape: 2 of 3")
    assert any("independent of shape" in x for x in lines)


# --- PTX <-> SASS register correspondence (thesis 4.3) ---------------------------------------

def test_register_correspondence_on_real_sass():
    from gpudissect.suites.instructions.registers import lines

    target = make_target("sm_90", "13.0")
    cat = load_catalog()
    recs = {r.variant: r for r in autoverify_many([cat.get(n) for n in ("mad.lo.u32", "fma.rn.f64", "setp.eq.s32")],
                                                  target, jobs=2)}
    mad = recs["mad.lo.u32"].registers
    assert {k: mad[k]["ptx"] for k in ("a", "b", "c", "d")} == {"a": "%r0", "b": "%r1", "c": "%r2", "d": "%r0"}
    assert all(len(mad[k]["sass"]) == 1 and mad[k]["sass"][0].startswith("R") for k in "abc")
    assert mad["a"]["sass"] == mad["d"]["sass"] and mad["b"]["sass"] != mad["c"]["sass"]
    fma = recs["fma.rn.f64"].registers  # a 64-bit PTX register: a pair of consecutive SASS registers
    for k in "abc":
        lo, hi = (int(r[1:]) for r in fma[k]["sass"])
        assert hi == lo + 1
    setp = recs["setp.eq.s32"].registers  # the predicate result and the 32-bit chain: P and R registers
    assert setp["d"]["ptx"].startswith("%p") and all(r.startswith("P") for r in setp["d"]["sass"])
    assert all(r.startswith("R") for r in setp["a"]["sass"])
    text = lines([r.to_json() for r in recs.values()])
    assert any(t.startswith("mad.lo.u32: b=%r1->R") for t in text)


def test_register_taint_follows_loads_and_copies():
    from gpudissect.kernel.sass import parse_sass
    from gpudissect.suites.instructions.registers import ptx_loads, taints

    sass = parse_sass("""
        /*0000*/                   LDG.E R4, desc[UR6][R2.64+0x8] ;
        /*0010*/                   LDG.E.64 R6, desc[UR6][R2.64+0x10] ;
        /*0020*/                   MOV R9, R4 ;
        /*0030*/                   IADD3 R10, R9, R6, RZ ;
        /*0040*/                   FADD R11, R10, R7 ;
    """)[""].instrs
    loads = ptx_loads("ld.global.b32 %r1, [%in+8];\n ld.global.b64 %rd1, [%in+16];")
    assert loads == {8: "%r1", 16: "%rd1", 20: "%rd1"}
    t = taints(sass, loads)
    assert t[2] == {"R4": {"%r1"}} and t[3] == {"R9": {"%r1"}, "R6": {"%rd1"}}
    assert t[4]["R10"] == {"%r1", "%rd1"}


# --- branch cost -----------------------------------------------------------------------------

def test_branch_kernels_branch_in_sass():
    from gpudissect.kernel.build import build_module
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.sync import branches as B

    target = make_target("sm_90", "13.0")
    ks = [B.branch_kernel(ptx_header(target.ptx_isa, target.arch), k) for k in (*B.KINDS, *B.BASELINES)]
    built = build_module(ks, target.arch, region=True)
    for k in ks:
        assert B.sass_problems(k.meta["kind"], built[k.name].region) == [], k.name
    assert "BSSY" in B.branch_sass(built["branch_thread"].region)  # a per-thread predicate: reconvergence
    assert "BSSY" not in B.branch_sass(built["branch_uniform"].region)  # provably uniform: a plain BRA


def test_branch_costs_from_synthetic_clocks():
    import numpy as np

    from gpudissect.kernel.sass import parse_sass
    from gpudissect.suites.sync import branches as B
    from gpudissect.suites.sync.kernels import REPS, ROW

    cost = {("branch_uniform", 0xFFFFFFFF): 9.0, ("branch_uniform", 0): 21.0,
            ("branch_thread", 0xFFFFFFFF): 12.0, ("branch_thread", 0): 24.0, ("branch_thread", 16): 40.0,
            ("branch_loop", 0xFFFFFFFF): 6.0, ("branch_block", 0xFFFFFFFF): 19.0}
    region = parse_sass("/*0000*/  @!P0 BRA `(.L_x_0) ;\n/*0010*/  @!P1 BRA `(.L_x_1) ;")[""].instrs

    class Fake:
        def __init__(self, n):
            self.name, self.region, self.ptx_hash, self.sass_hash = n, region, "p", "s"

    def times(b, args):
        t, n = int(args[0]), int(args[1])
        row = np.zeros((1, ROW), dtype=np.int64)
        for r in range(REPS):
            row[0, 2 * r], row[0, 2 * r + 1] = 1000 * r, 1000 * r + 50 + n * cost[(b.name, t)]
        return row

    bs = {B.name(k): Fake(B.name(k)) for k in (*B.KINDS, *B.BASELINES)}
    res, per = B.run(None, bs, times, launches=2)
    assert per["thread:divergent"] == pytest.approx(40.0) and per["loop"] == pytest.approx(6.0)
    assert "uniform:divergent" not in per  # a uniform predicate cannot diverge
    c = B.costs(per)
    assert c["uniform:taken"] == pytest.approx(3.0) and c["thread:not-taken"] == pytest.approx(5.0)
    assert c["thread:divergent"] == pytest.approx(21.0)
    rows = [dict(variant=r.variant, measure=r.measure, value=r.value, params=r.params, flags=r.flags) for r in res]
    line = B.conclusions(rows)[0]
    assert "thread:divergent 40 (+21)" in line and "the loop alone 6" in line


# --- movmatrix -------------------------------------------------------------------------------

def test_movm_layout_found_from_index_valued_fragments():
    import numpy as np

    from gpudissect.suites.tensor import movm

    target = make_target("sm_90", "13.0")
    b = movm.build(target)
    assert any(i.opcode == "MOVM" for i in b.instrs)  # ptxas makes it MOVM

    def transposing(kernel, grid, block, args, smem):  # a device that transposes the fragment
        src = np.asarray(args[0].data, dtype=np.uint32)
        el = np.stack([src & 0xFFFF, src >> 16], axis=1).ravel()  # element i = 2 lane + half
        out = np.zeros(32, dtype=np.uint32)
        for lane in range(32):
            r, c = lane // 4, 2 * (lane % 4)
            lo, hi = el[8 * c + r], el[8 * (c + 1) + r]
            out[lane] = lo | (hi << 16)
        return {"movm_out": out}

    from gpudissect.device.device import FakeDevice

    r = movm.run(FakeDevice(launch_model=transposing), target, {})
    assert r.value == 1.0 and r.params["matches_transpose"] and "transposed" in r.params["rule"]
    assert r.params["sass"] and not r.flags
    ident = movm.run(FakeDevice(launch_model=lambda k, g, bl, a, s: {"movm_out": a[0].data}), target, {})
    assert ident.value == 0.0 and ident.params["rule"].startswith("identity")
    assert any(f.startswith("layout-differs") for f in ident.flags)
    line = movm.conclusions([dict(measure=movm.MEASURE, params=r.params, flags=r.flags)])[0]
    assert "MOVM" in line and "transposed" in line
