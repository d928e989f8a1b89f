"""The catalog's growth (issue 19): DPX patterns, global atomics and reductions, fences, cache
hints, special registers. The catalog machinery (vary axes, instructions without a result,
global-memory operands, expected SASS) on synthetic input, then samples of every new family
through the real toolchain (ptxas + nvdisasm, no GPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudissect.arch.target import make_target
from gpudissect.catalog.model import CatalogError, load_catalog
from gpudissect.suites.instructions.checks import Sample, check_family
from gpudissect.suites.instructions.strategies import strategy
from gpudissect.suites.instructions.template import GenerationError, generate
from gpudissect.suites.instructions.verify import autoverify_many


@pytest.fixture(scope="module")
def sm90():
    return make_target("sm_90")


def _cat(tmp_path: Path, text: str):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return load_catalog([p])


# --- catalog model --------------------------------------------------------------------------


def test_vary_axes_expand_with_types(tmp_path):
    cat = _cat(tmp_path, '''
[[group]]
name = "atom{sem}{sc}.global.add.{t}"
sig = "d:{t} s:gmem b:{t}"
types = ["u32", "u64"]
vary = { sem = ["", ".relaxed"], sc = [".cta", ".sys"] }
ptx = "atom{sem}{sc}.global.add.{t} {d}, [{s}], {b};"
chain = "b"
note = "{t} at {sc}"
''')
    names = [v.name for v in cat]
    assert len(names) == 8
    assert "atom.cta.global.add.u32" in names and "atom.relaxed.sys.global.add.u64" in names
    v = cat.get("atom.relaxed.cta.global.add.u64")
    assert v.ptx == "atom.relaxed.cta.global.add.u64 {d}, [{s}], {b};"
    assert v.note == "u64 at .cta"
    assert v.operand("s").reg_class == "rd" and v.operand("s").is_address
    assert v.chain_operand.name == "b"


@pytest.mark.parametrize("bad", ['vary = { t = ["x"] }', 'vary = { sc = [] }', 'vary = { sc = "cta" }'])
def test_bad_vary_axis_is_one_clear_error(tmp_path, bad):
    with pytest.raises(CatalogError):
        _cat(tmp_path, f'[[group]]\nname = "fence.{{sc}}"\nsig = ""\nresult = false\n{bad}\n')


def test_instruction_without_result(tmp_path):
    cat = _cat(tmp_path, '''
[[group]]
name = "membar.{t}"
sig = ""
result = false
types = ["cta", "gl"]

[[group]]
name = "red.global.add.u32"
sig = "s:gmem b:u32"
result = false
ptx = "red.global.add.u32 [{s}], {b};"
''')
    m = cat.get("membar.gl")
    assert m.dest is None and m.chain_operand is None and m.operands == ()
    assert m.ptx.startswith("membar.gl")
    r = cat.get("red.global.add.u32")
    assert r.dest is None and all(o.read and not o.written for o in r.operands)


def test_scratch_operands(tmp_path, sm90):
    cat = _cat(tmp_path, '''
[[group]]
name = "two.s32"
sig = "d:s32 a:s32 b:s32 x~:s32 p~:pred"
ptx = "setp.ge.s32 {p}, {a}, {b}; selp.s32 {x}, {a}, {b}, {p}; add.s32 {d}, {x}, 1;"
''')
    v = cat.get("two.s32")
    assert [o.name for o in v.sources] == ["a", "b"] and v.dest.name == "d"
    assert v.operand("x").scratch and v.operand("p").scratch and v.chain_operand.name == "a"
    k = generate(v, strategy("reg"), sm90, length=2)
    assert "{x}" not in k.entry and "{p}" not in k.entry
    assert k.inputs and len(k.inputs) == 2  # the chain and b are loaded; scratch registers are not
    with pytest.raises(CatalogError, match="scratch"):
        _cat(tmp_path, '[[group]]\nname = "y.u32"\nsig = "d:u32 x!~:u32"\n')


def test_written_operand_without_result_is_an_error(tmp_path):
    with pytest.raises(CatalogError, match="without a result"):
        _cat(tmp_path, '[[group]]\nname = "x.u32"\nsig = "d!:u32 a:u32"\nresult = false\n')


def test_catalog_has_grown(catalog):
    assert len(catalog) >= 800
    for name in ("vimax3.s32", "viaddmin.s16x2.relu",
                 "atom.global.add.f64", "red.release.sys.global.add.u64", "fence.acq_rel.gpu",
                 "ld.global.L2::256B.u64", "mov.u32.globaltimer_lo"):
        assert name in catalog, name


# --- expected SASS on synthetic families ------------------------------------------------------


def _fam(sass, per_instance: list[str], lengths=(4, 8, 12)):
    return [Sample(units=n, length=n, region=sass(*[ln for _ in range(n) for ln in per_instance]))
            for n in lengths]


def test_expected_dpx_sass_passes(sass):
    res = check_family(_fam(sass, ["VIMNMX3 R4, R4, R6, R7, !PT"]), expect=("VIMNMX3",))
    assert res.ok, res.reason
    assert res.sass == ["VIMNMX3"]


def test_unfused_pattern_fails(sass):
    res = check_family(_fam(sass, ["VIMNMX R4, R4, R6, !PT", "VIMNMX R4, R4, R7, !PT"]), expect=("VIMNMX3",))
    assert not res.ok and "VIMNMX3 missing" in res.reason


def test_extra_instruction_beside_the_expected_fails(sass):
    res = check_family(_fam(sass, ["VIMNMX3 R4, R4, R6, R7, !PT", "IADD3 R4, R4, R6, RZ"]), expect=("VIMNMX3",))
    assert not res.ok and "not fused" in res.reason


def test_expected_sass_with_companion(sass):
    res = check_family(_fam(sass, ["VIADDMNMX R4, R4, R6, R7, !PT", "LOP3.LUT R4, R4, R9, RZ, 0x3c, !PT"]),
                       expect=("VIADDMNMX",), min_real=2)
    assert res.ok, res.reason


# --- SASS parsing: a leading predicate output, then the result -------------------------------


def test_atomg_and_match_write_their_register(sass):
    atom, match, anym, elect = sass("ATOMG.E.ADD.STRONG.GPU PT, R17, desc[UR6][R2.64], R13",
                                    "MATCH.ALL PT, R12, R13", "MATCH.ANY R5, R4", "ELECT PT, UR4, PT")
    assert atom.dests() == ["R17"] and "R13" in atom.sources()
    assert match.dests() == ["R12"] and match.sources() == ["R13"]
    assert anym.dests() == ["R5"] and anym.sources() == ["R4"]
    assert elect.dests() == ["UR4"]


# --- the real toolchain ------------------------------------------------------------------------

DPX_SAMPLE = {
    "vimax3.s32": "VIMNMX3", "vimin3.u16x2": "VIMNMX3", "vimax3.s16x2.relu": "VIMNMX3",
    "viaddmax.u32": "VIADDMNMX", "viaddmin.s16x2.relu": "VIADDMNMX", "vibmax.s16x2": "VIMNMX",
}

FAMILY_SAMPLE = {  # one or more of each new family -> the SASS opcode its instance must hold
    "atom.global.add.u32": "ATOMG", "atom.global.cas.b64": "ATOMG", "atom.acq_rel.sys.global.cas.b32": "ATOMG",
    "atom.relaxed.cta.global.add.f32": "ATOMG", "atom.global.add.noftz.bf16x2": "ATOMG",
    "red.global.add.f64": "REDG", "red.release.gpu.global.add.u64": "REDG", "red.global.min.s64": "REDG",
    "membar.gl": "MEMBAR", "fence.sc.cta": "MEMBAR", "fence.proxy.async.global": "FENCE",
    "nanosleep.u32": "NANOSLEEP", "prefetch.global.L2": "CCTL", "discard.global.L2": "CCTL",
    "applypriority.global.L2::evict_normal": "CCTL", "ld.global.L2::128B.u64": "LDG",
    "ld.global.L2::cache_hint.L2::evict_last.u64": "LDG", "mov.u32.globaltimer_lo": "S2UR",
    "match.all.sync.b32": "MATCH", "isspacep.shared": "QSPC",
    "redux.sync.add.s32": "REDUX",
}


def test_dpx_templates_give_the_dpx_sass(catalog, sm90):
    recs = autoverify_many([catalog.get(n) for n in DPX_SAMPLE], sm90, jobs=2)
    for r in recs:
        assert r.verified, f"{r.variant}: {r.reason}"
        real = [s for s in r.sass if not s.startswith(("MOV", "IMAD.MOV"))]
        assert real[0].split(".")[0] == DPX_SAMPLE[r.variant], (r.variant, r.sass)
        if catalog.get(r.variant).expect == (DPX_SAMPLE[r.variant],):
            assert len(real) == 1, (r.variant, r.sass)


def test_new_families_generate_compile_and_verify(catalog, sm90):
    recs = autoverify_many([catalog.get(n) for n in FAMILY_SAMPLE], sm90, jobs=2)
    for r in recs:
        assert r.verified, f"{r.variant}: {r.reason}"
        assert any(s.split("*")[-1].split(".")[0] == FAMILY_SAMPLE[r.variant] for s in r.sass), (r.variant, r.sass)


def test_ordering_brings_its_fences(catalog, sm90):
    relaxed, acq_rel = autoverify_many([catalog.get("atom.relaxed.gpu.global.add.u32"),
                                        catalog.get("atom.acq_rel.gpu.global.add.u32")], sm90, jobs=2)
    assert relaxed.verified and acq_rel.verified
    assert not any(s.startswith("MEMBAR") for s in relaxed.sass)
    assert any(s.startswith("MEMBAR") for s in acq_rel.sass)


PATTERNS = '''
[[group]]
name = "removed.s32"
sig = "d:s32 a:s32 b:s32 x~:s32"
ptx = "sub.s32 {x}, {a}, {b}; add.s32 {d}, {x}, {b};"
expect = ["VIADDMNMX"]

[[group]]
name = "unfused.s32"
sig = "d:s32 a:s32 b:s32 c:s32 x~:s32"
ptx = "max.s32 {x}, {a}, {b}; add.s32 {d}, {x}, {c};"
expect = ["VIMNMX3"]

[[group]]
name = "fused.s32"
sig = "d:s32 a:s32 b:s32 c:s32 x~:s32"
ptx = "max.s32 {x}, {a}, {b}; max.s32 {d}, {x}, {c};"
expect = ["VIMNMX3"]
'''


def test_a_removed_or_unfused_chain_fails_verification(tmp_path, sm90):
    cat = _cat(tmp_path, PATTERNS)
    recs = {r.variant: r for r in autoverify_many(list(cat), sm90, jobs=2)}
    assert recs["fused.s32"].verified, recs["fused.s32"].reason  # the control: the same machinery passes
    for name in ("removed.s32", "unfused.s32"):
        r = recs[name]
        assert not r.verified and r.status == "unverified"
        assert re.search(r"folded|not the expected SASS", r.reason), r.reason


def test_pointer_chase_chains_start_at_their_own_slots(catalog, sm90):
    v = catalog.get("ld.global.L2::128B.u64")
    k = generate(v, strategy("reg"), sm90, chains=3, length=4)
    for i in range(3):
        assert f"%gmem, {8 * i};" in k.entry
    assert k.n_sink >= 3  # each chain's slot lies inside the thread's output slots
    with pytest.raises(GenerationError, match="corrupt the address"):
        generate(v, strategy("companion"), sm90)


def test_instruction_without_result_generates_no_sink(catalog, sm90):
    k = generate(catalog.get("red.global.add.u32"), strategy("reg"), sm90, chains=2, length=4)
    assert k.entry.count("red.global.add.u32 [%gmem]") == 8
    assert "st.global.u64 [%gmem], 0;" in k.entry
    assert k.n_sink == 1
