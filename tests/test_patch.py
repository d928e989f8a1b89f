"""The cubin patcher (kernel/patch.py) on real ptxas cubins: the control encoder is the exact
inverse of the decoder, a patch changes only the chosen fields of the chosen words, and nvdisasm
reads the patched fields back."""

from __future__ import annotations

import struct

import pytest
from test_control import _compile, _kernel_pairs, fma_chain_ptx, ld_chain_ptx, reuse_ptx

from gpudissect.kernel.control import (
    Control,
    decode_word,
    encode_control,
    kernel_words,
    text_extents,
    with_control,
)
from gpudissect.kernel.patch import patch, read_word, registers
from gpudissect.kernel.sass import parse_sass
from gpudissect.kernel.toolchain import disassemble

INT_PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry ints(.param .u64 p)
{
    .reg .b32 %r<8>;
    .reg .b64 %a;
    ld.param.u64 %a, [p];
    cvta.to.global.u64 %a, %a;
    ld.global.u32 %r0, [%a];
    ld.global.u32 %r1, [%a+4];
    ld.global.u32 %r2, [%a+8];
    mad.lo.u32 %r3, %r0, %r1, %r2;
    lop3.b32 %r4, %r3, %r1, %r0, 0x96;
    st.global.u32 [%a], %r4;
    ret;
}
"""


@pytest.fixture(scope="module")
def cubins() -> dict[str, bytes]:
    return {"fma_chain": _compile(fma_chain_ptx()), "ld_chain": _compile(ld_chain_ptx()),
            "reuse_k": _compile(reuse_ptx()), "ints": _compile(INT_PTX), "fma_chain_O0": _compile(fma_chain_ptx(), 0)}


def test_encode_is_the_exact_inverse_of_decode_on_every_instruction(cubins):
    n = 0
    for cub in cubins.values():
        for words in kernel_words(cub).values():
            for _off, lo, hi in words:
                assert with_control(hi, decode_word(lo, hi)) == hi
                n += 1
    assert n > 100


def test_encode_rejects_values_out_of_range():
    ok = Control(4, False, None, None, 0, 0)
    assert encode_control(ok) & 0xF == 4
    for bad in (Control(16, False, None, None, 0, 0), Control(1, False, 6, None, 0, 0),
                Control(1, False, None, None, 64, 0), Control(1, False, None, None, 0, 16)):
        with pytest.raises(ValueError):
            encode_control(bad)


def test_a_stall_patch_changes_only_those_bits_and_decodes_back(cubins):
    cub = cubins["fma_chain"]
    pairs = _kernel_pairs(cub, "fma_chain")
    ffma = [ins.offset for ins, c in pairs if ins.opcode == "FFMA"]
    assert len(ffma) >= 8
    chosen = ffma[2:6]
    new = patch(cub, "fma_chain", {o: {"stall": 1} for o in chosen})
    start, _size = text_extents(cub)["fma_chain"]
    diff = [i for i in range(len(cub)) if cub[i] != new[i]]
    words = [(start + o, start + o + 16) for o in chosen]
    assert diff and all(any(a <= i < b for a, b in words) for i in diff)  # nothing outside the chosen words
    for o in chosen:  # only the control bits (105..127) of the high word moved
        lo0, hi0 = read_word(cub, "fma_chain", o)
        lo1, hi1 = read_word(new, "fma_chain", o)
        assert lo0 == lo1 and (hi0 ^ hi1) >> 41 != 0 and (hi0 ^ hi1) & ((1 << 41) - 1) == 0
        c0, c1 = decode_word(lo0, hi0), decode_word(lo1, hi1)
        assert c1.stall == 1 and c1 == Control(1, c0.yield_, c0.write_barrier, c0.read_barrier, c0.wait_mask, c0.reuse)
    # the same instructions for nvdisasm: opcodes and operands unchanged
    before, after = parse_sass(disassemble(cub))["fma_chain"].instrs, parse_sass(disassemble(new))["fma_chain"].instrs
    assert [(i.full, i.operands) for i in before] == [(i.full, i.operands) for i in after]
    # a patch of nothing is the same file
    assert patch(cub, "fma_chain", {}) == cub


def test_register_fields_are_read_back_by_nvdisasm(cubins):
    for name, ops in (("fma_chain", {"FFMA"}), ("ints", {"IMAD", "LOP3"})):
        cub = cubins[name]
        for ins, _c in _kernel_pairs(cub, name):
            if ins.opcode not in ops or not all(t.startswith("R") for t in ins.operands[:4]):
                continue
            new = patch(cub, name, {ins.offset: {"rd": 40, "ra": 41, "rb": 42, "rc": 43, "reuse": 0}})
            got = next(i for i in parse_sass(disassemble(new))[name].instrs if i.offset == ins.offset)
            assert got.full == ins.full and got.operands[:4] == ("R40", "R41", "R42", "R43"), got.text
            assert registers(*read_word(new, name, ins.offset)) == {"rd": 40, "ra": 41, "rb": 42, "rc": 43}
            break
        else:
            pytest.fail(f"no register-form {ops} in {name}")


def test_reuse_flags_are_patched_and_shown_by_nvdisasm(cubins):
    cub = cubins["reuse_k"]
    ins, c = next((i, c) for i, c in _kernel_pairs(cub, "reuse_k") if i.opcode == "FFMA" and c.reuse)
    new = patch(cub, "reuse_k", {ins.offset: {"reuse": 0}})
    got = next(i for i in parse_sass(disassemble(new))["reuse_k"].instrs if i.offset == ins.offset)
    assert ".reuse" in ins.text and ".reuse" not in got.text


def test_bad_edits_raise_one_clear_error(cubins):
    cub = cubins["fma_chain"]
    with pytest.raises(ValueError, match="not in the cubin"):
        patch(cub, "nope", {0: {"stall": 1}})
    with pytest.raises(ValueError, match="no instruction"):
        patch(cub, "fma_chain", {8: {"stall": 1}})
    with pytest.raises(ValueError, match="no instruction"):
        patch(cub, "fma_chain", {1 << 20: {"stall": 1}})
    with pytest.raises(ValueError, match="unknown field"):
        patch(cub, "fma_chain", {0: {"stal": 1}})
    with pytest.raises(ValueError, match="out of range"):
        patch(cub, "fma_chain", {0: {"stall": 16}})
    with pytest.raises(ValueError, match="out of range"):
        patch(cub, "fma_chain", {0: {"ra": 256}})
    assert struct.unpack_from("<Q", cub, 0)  # untouched input
