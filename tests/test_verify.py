"""The verifier: region finding and family checks on hand-written SASS, then the real
toolchain (ptxas + nvdisasm from NVIDIA's PyPI wheels; no GPU needed)."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import pytest

from gpudissect.arch.target import Target, arch_number, make_target, ptx_isa_for
from gpudissect.kernel import toolchain as tools
from gpudissect.kernel.region import RegionNotFound, find_region, is_clock_read, is_move
from gpudissect.kernel.toolchain import (
    PtxasError,
    ToolchainMissing,
    cache_dir,
    compile_ptx,
    disassemble,
    find_tool,
    tool_version,
)
from gpudissect.suites.instructions.checks import Sample, check_family
from gpudissect.suites.instructions.strategies import default_order, strategy
from gpudissect.suites.instructions.template import generate
from gpudissect.suites.instructions.verify import autoverify, autoverify_many, verify_family

LENGTHS = (4, 8, 12)


@pytest.fixture(scope="module")
def sm90() -> Target:
    return make_target("sm_90")


@pytest.fixture(scope="module")
def sm80(sm90) -> Target:
    """An older architecture (the tool ships facts for sm_90 only; these tests need just its
    name and the ptxas ISA)."""
    return Target("sm_80", "sm_80", sm90.ptx_isa, {})


def family(sass, make, lengths=LENGTHS, chains=1):
    """Samples whose regions are ``make(n_instances)`` (a list of instruction texts)."""
    return [Sample(units=n * chains, length=n, region=sass(*make(n * chains))) for n in lengths]


CHAIN = "IADD3 R4, R4, R6, RZ"


# --- region finding ----------------------------------------------------------------------


def test_region_between_64bit_clock_reads(sass):
    instrs = sass(
        "BAR.SYNC.DEFER_BLOCKING 0x0",
        "CS2R R4, SR_CLOCKLO",
        CHAIN,
        "CS2R.32 R7, SR_CLOCKLO",  # a 32-bit clock read under test, not a delimiter
        "S2UR UR4, SR_CLOCKLO",  # nor is a uniform-register read
        CHAIN,
        "CS2R R8, SR_CLOCKLO",
        CHAIN,
        "CS2R R10, SR_CLOCKLO",
    )
    region = find_region(instrs)
    assert [i.full for i in region] == ["IADD3", "CS2R.32", "S2UR", "IADD3"]
    assert is_clock_read(instrs[1]) and not is_clock_read(instrs[3]) and not is_clock_read(instrs[4])
    assert not is_clock_read(sass("CS2R R4, SRZ")[0])  # CS2R of zero is no clock read


@pytest.mark.parametrize(
    "lines",
    [
        [],
        [CHAIN],
        ["CS2R R4, SR_CLOCKLO", CHAIN],
        ["CS2R R4, SR_CLOCKLO", CHAIN, "CS2R.32 R6, SR_CLOCKLO"],
        ["S2R R4, SR_CLOCKLO", CHAIN, "S2R R6, SR_CLOCKLO"],
    ],
)
def test_region_not_found(sass, lines):
    with pytest.raises(RegionNotFound, match="need 2"):
        find_region(sass(*lines) if lines else [])


def test_is_move():
    from gpudissect.kernel.sass import parse_sass

    def one(t):
        return next(iter(parse_sass(f"/*0000*/ {t} ;").values())).instrs[0]

    for t in ("MOV R4, R5", "IMAD.MOV.U32 R4, RZ, RZ, R5", "HFMA2.MMA R0, -RZ, RZ, 0, 0",
              "IMAD.U32 R0, RZ, RZ, UR4", "UMOV UR4, 0x1"):
        i = one(t)
        assert is_move(i.full, i), t
    for t in ("IMAD R0, R1, R2, R3", "IADD3 R4, R4, R6, RZ", "FFMA R0, R1, R2, R0", "HFMA2 R0, R1, R2, R0"):
        i = one(t)
        assert not is_move(i.full, i), t


# --- family checks -----------------------------------------------------------------------


def test_clean_linear_family(sass):
    res = check_family(family(sass, lambda n: [CHAIN] * n))
    assert res.ok, res.reason
    assert res.sass == ["IADD3"]
    assert res.per_unit["IADD3"] == 1
    assert res.depth_per_instance == 1
    assert res.moves_per_unit == 0


def test_family_with_alternating_forms(sass):
    def make(n):
        return [CHAIN if i % 2 == 0 else "IMAD.IADD R4, R4, 0x1, R6" for i in range(n)]

    res = check_family(family(sass, make))
    assert res.ok, res.reason
    assert res.sass == ["0.5*IADD3", "0.5*IMAD.IADD"]
    assert res.sass_counts == {"IADD3": "1/2", "IMAD.IADD": "1/2"}


def test_family_with_constant_base(sass):
    # setup outside the chain (a fixed number of instructions) does not disturb the per-unit view
    res = check_family(family(sass, lambda n: ["IMAD.MOV.U32 R6, RZ, RZ, R2", "LOP3.LUT R9, R2, R3, RZ, 0xc0, !PT"]
                              + [CHAIN] * n))
    assert res.ok, res.reason
    assert res.sass == ["IADD3"]
    assert res.base["LOP3.LUT"] == 1


@pytest.mark.parametrize(
    ("make", "lengths"),
    [
        pytest.param(lambda n: ["VIADD R4, R4, 0x1c"], LENGTHS, id="one-for-all"),
        pytest.param(lambda n: [CHAIN] * (n // 4), (4, 8, 12), id="one-per-4"),
        pytest.param(lambda n: [CHAIN] * (n // 8), (8, 16, 24), id="one-per-8"),
    ],
)
def test_folding_is_flagged(sass, make, lengths):
    res = check_family(family(sass, make, lengths))
    assert not res.ok
    assert res.reason.startswith("folded")


def test_folding_not_hidden_by_moves(sass):
    # one real instruction for all instances, padded with one move per instance
    res = check_family(family(sass, lambda n: ["VIADD R4, R4, 0x1c"] + ["MOV R5, R4"] * n))
    assert not res.ok and res.reason.startswith("folded")


def test_nonlinear_scaling_is_flagged(sass):
    counts = {4: 4, 8: 10, 12: 12}
    res = check_family(family(sass, lambda n: [CHAIN] * counts[n]))
    assert not res.ok
    assert "scale linearly" in res.reason and "8 instances" in res.reason


def test_shrinking_region_is_flagged(sass):
    counts = {4: 8, 12: 4}
    res = check_family(family(sass, lambda n: [CHAIN] * counts[n], (4, 12)))
    assert not res.ok and "shrinks" in res.reason


@pytest.mark.parametrize(
    ("extra", "kind", "allow"),
    [
        ("BAR.SYNC.DEFER_BLOCKING 0x0", "barrier", ("memory", "branch")),
        ("LDG.E R8, desc[UR4][R2.64]", "memory", ("global",)),
        ("LDS R8, [R2]", "memory", ("shared",)),
        ("@!P0 BRA `(.L_x_0)", "branch", ("branch",)),
        ("MEMBAR.SC.GPU", "barrier", ()),
    ],
)
def test_forbidden_kinds_in_region(sass, extra, kind, allow):
    def make(n):
        return [CHAIN] * (n // 2) + [extra] + [CHAIN] * (n - n // 2)

    res = check_family(family(sass, make))
    assert not res.ok
    assert res.reason.startswith(kind) and "in the timed region" in res.reason
    first = extra.split()[0] if not extra.startswith("@") else extra.split()[1]
    assert first in res.reason
    if allow and kind != "barrier":
        # the variant may bring that kind itself (atomics on shared memory, CAS loops)
        res = check_family(family(sass, make), allow=allow)
        assert res.ok, res.reason
    elif allow:
        res = check_family(family(sass, make), allow=allow)
        assert not res.ok, "allowing other kinds must not allow a barrier"


def test_global_load_not_allowed_by_shared(sass):
    def make(n):
        return [CHAIN] * n + ["LDG.E R8, desc[UR4][R2.64]"]

    res = check_family(family(sass, make), allow=("shared",))
    assert not res.ok and "LDG" in res.reason


def test_shortened_dependence_chain_is_flagged(sass):
    # the same instruction count as a chain, but every instance independent
    def make(n):
        return [f"IADD3 R{10 + i}, R2, R3, RZ" for i in range(n)]

    res = check_family(family(sass, make))
    assert not res.ok
    assert res.reason.startswith("dependence chain shortened")
    assert res.per_unit["IADD3"] == 1  # the count alone would have passed
    assert check_family(family(sass, make), check_depth=False).ok


def test_half_shortened_chain_is_flagged(sass):
    # pairs reassociated into a tree: depth grows by half an instance per instance
    def make(n):
        out = []
        for _ in range(n // 2):
            out += ["IADD3 R8, R6, R6, RZ", "IADD3 R4, R4, R8, RZ"]
        return out

    res = check_family(family(sass, make))
    assert not res.ok and "shortened" in res.reason


def test_interleaved_chains_keep_their_depth(sass):
    # 4 chains of n: units = 4n, depth grows by n (per chain length, not per unit)
    def make(units):
        regs = ["R4", "R5", "R8", "R9"]
        return [f"IADD3 {regs[i % 4]}, {regs[i % 4]}, R6, RZ" for i in range(units)]

    res = check_family(family(sass, make, chains=4))
    assert res.ok, res.reason
    assert res.depth_per_instance == 1


def test_too_many_moves_are_flagged(sass):
    def two_moves(n):
        return ["MOV R5, R4", "IMAD.MOV.U32 R4, RZ, RZ, R5", CHAIN] * n

    res = check_family(family(sass, two_moves))
    assert not res.ok
    assert "register moves per instance" in res.reason
    assert res.moves_per_unit == 2

    def one_move(n):
        return ["MOV R5, R4", "IADD3 R4, R5, R6, RZ"] * n

    res = check_family(family(sass, one_move))
    assert res.ok, res.reason
    assert res.moves_per_unit == 1
    assert res.sass == ["MOV", "IADD3"]
    # a looser bound lets the two moves pass
    assert check_family(family(sass, two_moves), max_moves=Fraction(2)).ok


def test_companion_needs_two_real_instructions(sass):
    comp = "LOP3.LUT R4, R4, R7, RZ, 0x3c, !PT"

    def with_instr(n):
        return [CHAIN, comp] * n

    def only_companion(n):  # the instruction under test vanished; only the XOR is left
        return [comp] * n

    assert check_family(family(sass, with_instr), min_real=2).ok
    res = check_family(family(sass, only_companion), min_real=2)
    assert not res.ok
    assert res.reason.startswith("folded") and "beside the companion" in res.reason
    assert check_family(family(sass, only_companion), min_real=1).ok


def test_check_family_needs_two_lengths(sass):
    with pytest.raises(ValueError):
        check_family(family(sass, lambda n: [CHAIN] * n, (4,)))


def test_arch_number():
    assert arch_number("sm_90") == 90 and arch_number("sm_90a") == 90 and arch_number("sm_100") == 100
    with pytest.raises(ValueError):
        arch_number("compute")


# --- the real toolchain -----------------------------------------------------------------


def test_cache_is_not_home():
    d = cache_dir()
    assert Path(os.environ["GPUDISSECT_CACHE"]) == d
    assert not str(d).startswith(str(Path.home() / ".cache"))


def _real(region):
    return [i for i in region if not is_move(i.full, i)]


def test_immediate_chain_folds(catalog, sm90):
    """Four (and 8, 12) dependent add.u32 with immediates collapse into one instruction."""
    v = catalog.get("add.u32")
    res, builts = verify_family(v, strategy("imm"), sm90)
    assert not res.ok
    assert "folded" in res.reason
    assert [b.kernel.length for b in builts] == [4, 8, 12]
    for b in builts:
        body = b.kernel.entry
        n = b.kernel.length
        assert body.count("add.u32 %r0, %r0, 7;") == n  # the PTX really holds n dependent adds
        real = _real(b.region)
        assert len(real) == 1, [i.text for i in b.region]
        assert real[0].opcode in ("VIADD", "IADD3", "IMAD.IADD")


def test_autoverify_repairs_folding(catalog, sm90):
    v = catalog.get("add.u32")
    rec = autoverify(v, sm90, strategies=[strategy("imm"), *default_order()])
    assert rec.verified and rec.status == "verified", rec.reason
    assert rec.strategy != "imm"
    assert rec.attempts[0].strategy == "imm" and not rec.attempts[0].ok
    assert "folded" in rec.attempts[0].reason
    assert rec.attempts[-1].ok and rec.attempts[-1].strategy == rec.strategy
    assert all(not a.ok for a in rec.attempts[:-1])
    assert rec.sass and all(any(op in s for op in ("IADD3", "IADD", "VIADD")) for s in rec.sass)
    assert rec.depth_per_instance >= 1
    assert "reason" not in rec.to_json()
    # the repaired strategy verifies on its own, too
    res, _ = verify_family(v, strategy(rec.strategy), sm90)
    assert res.ok, res.reason


def test_throughput_family_verifies(catalog, sm90):
    # 4 interleaved chains: one FADD per instance, the chains are not merged
    res, builts = verify_family(catalog.get("add.f32"), strategy("reg"), sm90, chains=4)
    assert res.ok, res.reason
    assert res.sass == ["FADD"]
    assert res.depth_per_instance == 1
    assert [b.kernel.units for b in builts] == [16, 32, 48]


def test_32bit_clock_read_is_not_a_delimiter(catalog, sm90):
    v = catalog.get("mov.u32.clock")
    res, builts = verify_family(v, strategy("reg"), sm90)
    saw_cs2r32 = False
    for b in builts:
        reads = [i for i in b.region if any("SR_CLOCKLO" in o for o in i.operands)]
        # every PTX %clock read is inside the region: none was taken for the end delimiter
        assert len(reads) == b.kernel.length, [i.text for i in b.region]
        saw_cs2r32 |= any(i.full == "CS2R.32" for i in reads)
        delims = [i for i in b.instrs if is_clock_read(i)]
        assert len(delims) == 2 and all(i.full == "CS2R" for i in delims)
    assert saw_cs2r32, "ptxas emitted no CS2R.32: the test no longer exercises the case"
    assert res.ok, res.reason


def test_variant_above_arch_is_unsupported(catalog, sm80):
    v = catalog.get("add.u16x2")
    assert v.min_sm > 80
    rec = autoverify(v, sm80)
    assert rec.status == "unsupported" and not rec.verified
    assert f"sm_{v.min_sm}" in rec.reason
    assert rec.attempts == []  # nothing was compiled
    recs = autoverify_many([catalog.get("add.u32"), v], sm80)
    assert [r.status for r in recs] == ["verified", "unsupported"]


def test_ptxas_error_carries_message(fresh_cache):
    bad = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n  bogus.op %r1;\n  ret;\n}\n"
    with pytest.raises(PtxasError) as ei:
        compile_ptx(bad, "sm_90")
    e = ei.value
    assert str(e).startswith("ptxas failed:")
    assert "error" in e.message and "line 6" in e.message
    assert "bogus" in e.message
    assert not e.unsupported
    assert not any(fresh_cache.rglob("*.cubin"))  # failures are not cached


def test_unsupported_ptxas_error(fresh_cache):
    ptx = (f".version {ptx_isa_for(tool_version('ptxas'))}\n.target sm_80\n.address_size 64\n"
           ".visible .entry k(.param .u64 p)\n{\n  .reg .b32 %r<3>;\n  .reg .b64 %a;\n"
           "  ld.param.u64 %a, [p];\n  ld.global.b32 %r1, [%a];\n"
           "  add.bf16x2 %r2, %r1, %r1;\n  st.global.b32 [%a], %r2;\n  ret;\n}\n")
    with pytest.raises(PtxasError) as ei:
        compile_ptx(ptx, arch="sm_80")
    assert ei.value.unsupported, ei.value.message


def test_compile_cache(fresh_cache, catalog, sm90, sm80):
    k = generate(catalog.get("add.f32"), strategy("reg"), sm90, length=4)
    first = compile_ptx(k.ptx, "sm_90")
    assert not first.cached
    assert list(fresh_cache.rglob("*.cubin"))
    second = compile_ptx(k.ptx, "sm_90")
    assert second.cached and second.cubin == first.cubin and second.key == first.key
    # a different optimisation level or architecture is a different entry
    assert not compile_ptx(k.ptx, "sm_90", opt=1).cached
    k80 = generate(catalog.get("add.f32"), strategy("reg"), sm80, length=4)
    assert not compile_ptx(k80.ptx, arch="sm_80").cached
    assert compile_ptx(k80.ptx, arch="sm_80").cached
    assert not compile_ptx(k.ptx, "sm_90", use_cache=False).cached
    # disassembly is cached by content as well, and stable
    text = disassemble(first.cubin)
    assert "CS2R" in text and list(fresh_cache.rglob("*.sass"))
    assert disassemble(first.cubin) == text


def test_compile_rejects_bad_arch():
    with pytest.raises(ValueError, match="sm_XX"):
        compile_ptx(".version 8.0\n", arch="hopper")


@pytest.fixture
def no_toolchain(monkeypatch, tmp_path):
    monkeypatch.setattr(tools, "_candidates", lambda tool: [tmp_path / "nowhere" / tool])
    find_tool.cache_clear()
    yield
    find_tool.cache_clear()


def test_toolchain_missing_has_install_hint(no_toolchain):
    with pytest.raises(ToolchainMissing) as ei:
        find_tool("ptxas")
    msg = str(ei.value)
    assert ei.value.tool == "ptxas"
    assert "ptxas not found" in msg
    assert "pip install 'nvidia-cuda-nvcc" in msg
    assert "GPUDISSECT_CUDA_BIN" in msg
    with pytest.raises(ToolchainMissing, match="nvidia-cuda-nvdisasm"):
        find_tool("nvdisasm")


def test_toolchain_found_through_env(monkeypatch, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    exe = fake / "ptxas"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setenv("GPUDISSECT_CUDA_BIN", str(fake))
    assert tools._candidates("ptxas")[0] == exe
    find_tool.cache_clear()
    try:
        assert find_tool("ptxas") == exe
    finally:
        find_tool.cache_clear()


# --- two instances in the two lanes of one SASS (ptxas pairs independent 16-bit chains) ---


def _pairs(units):
    """2 chains in the two lanes of one register: one HMNMX2 per two instances."""
    return ["HMNMX2 R4, R4, R6, !PT"] * (units // 2)


def test_paired_lanes_are_timed_as_two_instances(sass, sm90):
    from gpudissect.arch.target import paired_sass

    res = check_family(family(sass, _pairs, chains=2), paired=paired_sass(sm90.arch).search)
    assert res.ok and res.paired, res.reason
    assert res.sass == ["0.5*HMNMX2"]


def test_paired_lanes_without_the_facts_are_folded(sass):
    res = check_family(family(sass, _pairs, chains=2))
    assert not res.ok and res.reason.startswith("folded") and not res.paired


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda u: ["FMNMX R4, R4, R6, !PT"] * (u // 2), id="one-lane-opcode-halved"),
        pytest.param(lambda u: ["HMNMX2 R4, R4, R6, !PT"] * (u // 4), id="two-lane-quartered"),
    ],
)
def test_only_exact_halves_of_two_lane_sass_pair(sass, sm90, make):
    from gpudissect.arch.target import paired_sass

    res = check_family(family(sass, make, chains=4), paired=paired_sass(sm90.arch).search)
    assert not res.ok and res.reason.startswith("folded")


def test_paired_families_of_the_real_toolchain(sm90):
    """min.f16, 2 chains, as the throughput sweep builds it: ptxas pairs the chains into the
    lanes of HMNMX2 (accepted, timed per PTX instance). In the map's short kernels it fuses two
    dependent steps into one three-input VHMNMX instead: work merged, still folded."""
    from gpudissect.arch.target import paired_sass
    from gpudissect.catalog.model import load_catalog
    from gpudissect.kernel.build import build_module
    from gpudissect.suites.instructions.suite import Plan, timing_families
    from gpudissect.suites.instructions.verify import check_built

    pairs = paired_sass(sm90.arch).search
    v = load_catalog().select(["min.f16"])[0]
    _, short = verify_family(v, strategy("reg"), sm90, chains=2)
    res = check_built(v, strategy("reg"), short, paired=pairs)
    assert not res.ok and res.reason.startswith("folded") and "VHMNMX" in res.per_unit
    rec = autoverify(v, sm90)
    fam = next(f for f in timing_families(v, rec, sm90, Plan(), 0)
               if f.measure == "throughput" and f.chains == 2)
    built = build_module(fam.kernels, sm90.arch, strategy(rec.strategy).opt)
    builts = [built[k.name] for k in fam.kernels]
    assert not check_built(v, strategy("reg"), builts).ok
    res = check_built(v, strategy("reg"), builts, paired=pairs)
    assert res.ok and res.paired and res.sass == ["0.5*HMNMX2"], res.reason
