"""The nvdisasm text parser and its register data-flow view."""

from __future__ import annotations

from gpudissect.kernel.sass import dependency_depth, parse_sass

LISTING = r"""
	.target	sm_90

//--------------------- .text.bench               --------------------------
	.section	.text.bench,"ax",@progbits
bench:
.text.bench:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R0, desc[UR4][R4.64+0x8] ;
        /*0050*/                   CS2R R4, SR_CLOCKLO ;
.L_x_0:
        /*0060*/                   IADD3 R4, P0, -R4, R6, RZ ;
        /*0070*/                   SHFL.IDX PT, R9, R11, R0, 0x1f ;
        /*0080*/                   VOTE.ALL P0, P0 ;
        /*0090*/                   DADD R4, R4, R6 ;
        /*00a0*/                   ISETP.GE.U32.AND P1, PT, R0, 0x2, PT ;
        /*00b0*/                   IMAD.WIDE.U32 R6, R9, 0x28, R6 ;
        /*00c0*/                   STG.E.64 desc[UR4][R6.64], R4 ;
        /*00d0*/              @!P0 BRA `(.L_x_0) ;
        /*00e0*/                   EXIT ;
.L_x_1:
        /*00f0*/                   BRA `(.L_x_1);
        /*0100*/                   NOP;
.L_x_2:

//--------------------- .text.other               --------------------------
.text.other:
        /*0000*/                   MOV R2, 0x5 ;
        /*0010*/                   EXIT ;
"""


def _by_op():
    funcs = parse_sass(LISTING)
    return funcs, {(i.offset, i.opcode): i for i in funcs["bench"].instrs}


def test_functions_and_instructions():
    funcs, _ = _by_op()
    assert set(funcs) == {"bench", "other"}
    bench = funcs["bench"].instrs
    assert len(bench) == 14  # labels and directives are not instructions
    assert [i.opcode for i in funcs["other"].instrs] == ["MOV", "EXIT"]
    assert [i.offset for i in bench][:3] == [0x0, 0x10, 0x50]
    assert bench[-1].opcode == "NOP" and bench[-1].operands == ()
    assert bench[-2].opcode == "BRA" and bench[-2].operands == ("`(.L_x_1)",)


def test_fields():
    _, ins = _by_op()
    cs2r = ins[(0x50, "CS2R")]
    assert cs2r.modifiers == () and cs2r.operands == ("R4", "SR_CLOCKLO") and cs2r.predicate == ""
    assert cs2r.text.startswith("/*0050*/") and cs2r.text.endswith(";")
    assert cs2r.dests() == ["R4"] and cs2r.sources() == []  # SR_CLOCKLO is no register

    ldg = ins[(0x10, "LDG")]
    assert ldg.full == "LDG.E" and ldg.operands == ("R0", "desc[UR4][R4.64+0x8]")
    # the address R4.64 and the descriptor desc[UR4] are pairs
    assert ldg.dests() == ["R0"] and set(ldg.sources()) == {"UR4", "UR5", "R4", "R5"}

    bra = ins[(0xD0, "BRA")]
    assert bra.predicate == "@!P0"
    assert bra.operands == ("`(.L_x_0)",)
    assert bra.dests() == [] and bra.sources() == ["P0"]

    isetp = ins[(0xA0, "ISETP")]
    assert isetp.modifiers == ("GE", "U32", "AND")
    assert isetp.full == "ISETP.GE.U32.AND"
    assert isetp.dests() == ["P1"] and isetp.sources() == ["R0"]


def test_carry_out_and_negated_source():
    _, ins = _by_op()
    iadd = ins[(0x60, "IADD3")]
    assert iadd.operands == ("R4", "P0", "-R4", "R6", "RZ")
    assert iadd.n_dests() == 2
    assert iadd.dests() == ["R4", "P0"]
    assert iadd.sources() == ["R4", "R6"]  # RZ is not a dependence


def test_shfl_vote_and_pairs():
    _, ins = _by_op()
    shfl = ins[(0x70, "SHFL")]
    assert shfl.full == "SHFL.IDX"
    assert shfl.dests() == ["R9"]  # not just the predicate PT
    assert shfl.sources() == ["R11", "R0"]

    vote = ins[(0x80, "VOTE")]
    assert vote.full == "VOTE.ALL"
    assert vote.dests() == ["P0"]
    assert vote.sources() == ["P0"]

    dadd = ins[(0x90, "DADD")]
    assert dadd.pair
    assert dadd.dests() == ["R4", "R5"]
    assert dadd.sources() == ["R4", "R5", "R6", "R7"]

    wide = ins[(0xB0, "IMAD")]
    assert wide.full == "IMAD.WIDE.U32"
    assert wide.dests() == ["R6", "R7"]

    stg = ins[(0xC0, "STG")]
    assert stg.dests() == []  # a store writes no register
    assert {"R6", "R7", "R4", "R5"} <= set(stg.sources())


def test_dependency_depth_chain_vs_independent(sass):
    chain = sass(*["IADD3 R4, R4, R6, RZ"] * 6)
    indep = sass(*[f"IADD3 R{10 + i}, R2, R3, RZ" for i in range(6)])
    assert dependency_depth(chain) == 6
    assert dependency_depth(indep) == 1
    # two interleaved chains of 3: depth 3, not 6
    two = sass(*["IADD3 R4, R4, R6, RZ", "IADD3 R5, R5, R6, RZ"] * 3)
    assert dependency_depth(two) == 3
    # a two-register ('fib') chain x = x + y; y = y + x is fully serial
    fib = sass(*["IADD3 R4, R4, R5, RZ", "IADD3 R5, R5, R4, RZ"] * 3)
    assert dependency_depth(fib) == 6
    assert dependency_depth([]) == 0


def test_dependency_through_predicates_and_pairs(sass):
    # a predicate written by ISETP and read as a guard is a dependence
    pred = sass("IADD3 R4, R4, R6, RZ", "ISETP.NE.AND P0, PT, R4, RZ, PT", "@P0 IADD3 R8, R9, R10, RZ")
    assert dependency_depth(pred) == 3
    # DADD writes R4:R5; a consumer of R5 depends on it
    pairs = sass("DADD R4, R4, R6", "IADD3 R8, R5, R9, RZ")
    assert dependency_depth(pairs) == 2
    # an unrelated 32-bit register above the pair does not
    unrelated = sass("DADD R4, R4, R6", "IADD3 R8, R9, R9, RZ")
    assert dependency_depth(unrelated) == 1


def test_call_orders_later_work_after_earlier_work(sass):
    before = ["IADD3 R4, R4, R6, RZ"] * 3
    after = ["IADD3 R20, R21, R22, RZ"]  # shares no register with the work before
    assert dependency_depth(sass(*before, *after)) == 3
    with_call = sass(*before, "CALL.REL.NOINC `(__internal_0)", *after)
    assert dependency_depth(with_call) == 5
    # even with nothing before it, work after a CALL is one step later
    assert dependency_depth(sass("CALL.REL.NOINC `(f)", "IADD3 R1, R2, R3, RZ")) == 2
