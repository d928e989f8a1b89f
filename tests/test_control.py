"""Scheduling control bits decoded from real cubins (ptxas + nvdisasm + cuobjdump, no GPU)."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

from gpudissect.kernel.control import (
    Control,
    attach,
    decode_word,
    dependent_pairs,
    kernel_controls,
    kernel_words,
    ptxas_latency,
    region_stalls,
)
from gpudissect.kernel.sass import SassInstr, parse_sass
from gpudissect.kernel.toolchain import compile_ptx, disassemble, find_tool

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"
N_FMA = 16


def fma_chain_ptx(n: int = N_FMA) -> str:
    body = "\n".join("    fma.rn.f32 %f1, %f1, %f2, %f3;" for _ in range(n))
    return (
        HEADER
        + f"""
.visible .entry fma_chain(.param .u64 out, .param .f32 a, .param .f32 b)
{{
    .reg .f32 %f<4>;
    .reg .u64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.f32 %f2, [a];
    ld.param.f32 %f3, [b];
    mov.f32 %f1, %f2;
    mov.u64 %rd2, %clock64;
{body}
    mov.u64 %rd3, %clock64;
    sub.s64 %rd4, %rd3, %rd2;
    cvta.to.global.u64 %rd5, %rd1;
    st.global.u64 [%rd5], %rd4;
    st.global.f32 [%rd5+8], %f1;
    ret;
}}
"""
    )


def ld_chain_ptx(n: int = 4) -> str:
    body = "\n".join("    ld.global.u64 %rd2, [%rd2];" for _ in range(n))
    return (
        HEADER
        + f"""
.visible .entry ld_chain(.param .u64 out, .param .u64 p)
{{
    .reg .u64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [p];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u64 %rd6, %clock64;
{body}
    mov.u64 %rd7, %clock64;
    sub.s64 %rd6, %rd7, %rd6;
    st.global.u64 [%rd1], %rd6;
    st.global.u64 [%rd1+8], %rd2;
    ret;
}}
"""
    )


def reuse_ptx() -> str:
    """Four independent accumulators sharing two operands: ptxas marks them .reuse."""
    body = "\n".join(f"    fma.rn.f32 %f{4 + i % 4}, %f1, %f2, %f{4 + i % 4};" for i in range(16))
    return (
        HEADER
        + f"""
.visible .entry reuse_k(.param .u64 out, .param .f32 a, .param .f32 b)
{{
    .reg .f32 %f<10>;
    .reg .u64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.f32 %f1, [a];
    ld.param.f32 %f2, [b];
    mov.f32 %f4, %f1;
    mov.f32 %f5, %f2;
    mov.f32 %f6, 0f3f800000;
    mov.f32 %f7, 0f40000000;
{body}
    add.f32 %f4, %f4, %f5;
    add.f32 %f6, %f6, %f7;
    add.f32 %f4, %f4, %f6;
    cvta.to.global.u64 %rd2, %rd1;
    st.global.f32 [%rd2], %f4;
    ret;
}}
"""
    )


def _compile(ptx: str, opt: int = 3) -> bytes:
    return compile_ptx(ptx, arch="sm_90", opt=opt).cubin


def _kernel_pairs(cubin: bytes, name: str) -> list[tuple[SassInstr, Control]]:
    funcs = parse_sass(disassemble(cubin))
    return attach(funcs[name].instrs, kernel_controls(cubin)[name])


def _timed(pairs: list[tuple[SassInstr, Control]]) -> list[tuple[SassInstr, Control]]:
    """The instructions strictly between the two 64-bit clock reads."""
    idx = [
        i
        for i, (ins, _) in enumerate(pairs)
        if ins.opcode == "CS2R" and "32" not in ins.modifiers and "SR_CLOCKLO" in ins.text
    ]
    assert len(idx) == 2, [p[0].text for p in pairs]
    return pairs[idx[0] + 1 : idx[1]]


@pytest.fixture(scope="module")
def fma3() -> bytes:
    return _compile(fma_chain_ptx(), 3)


@pytest.fixture(scope="module")
def fma0() -> bytes:
    return _compile(fma_chain_ptx(), 0)


@pytest.fixture(scope="module")
def ld3() -> bytes:
    return _compile(ld_chain_ptx(), 3)


# --- the word decoder -------------------------------------------------------------------------


def _word(stall=0, ybit=0, wb=7, rb=7, mask=0, reuse=0, noise: int = 0) -> tuple[int, int]:
    """A hand-built instruction: control bits at 105.., random opcode bits below."""
    ctl = stall | ybit << 4 | wb << 5 | rb << 8 | mask << 11 | reuse << 17
    word = ctl << 105 | (noise & ((1 << 105) - 1))
    return word & (2**64 - 1), word >> 64


@pytest.mark.parametrize("seed", range(5))
def test_decode_word_each_field(seed):
    rng = random.Random(seed)
    noise = rng.getrandbits(105)
    base = decode_word(*_word(noise=noise))
    assert base == Control(0, True, None, None, 0, 0)
    for stall in range(16):
        assert decode_word(*_word(stall=stall, noise=noise)).stall == stall
    assert decode_word(*_word(ybit=1, noise=noise)).yield_ is False
    assert decode_word(*_word(ybit=1, noise=noise)).yield_bit == 1
    assert decode_word(*_word(ybit=0, noise=noise)).yield_ is True
    for b in range(7):
        c = decode_word(*_word(wb=b, noise=noise))
        assert (c.write_barrier, c.read_barrier) == (b, None)
        c = decode_word(*_word(rb=b, noise=noise))
        assert (c.write_barrier, c.read_barrier) == (None, b)
    for mask in range(64):
        c = decode_word(*_word(mask=mask, noise=noise))
        assert c.wait_mask == mask and c.stall == 0 and c.reuse == 0
        assert c.waits == tuple(i for i in range(6) if mask >> i & 1)
    for reuse in range(16):
        c = decode_word(*_word(reuse=reuse, noise=noise))
        assert c.reuse == reuse and c.wait_mask == 0
    # all fields at once, distinct values: a swapped or shifted field cannot pass
    c = decode_word(*_word(stall=9, ybit=1, wb=3, rb=5, mask=0b101010, reuse=0b0110, noise=noise))
    assert c == Control(9, False, 3, 5, 0b101010, 0b0110)


def test_control_str_and_json():
    c = Control(
        stall=4, yield_=True, write_barrier=2, read_barrier=None, wait_mask=0b101, reuse=0b0010
    )
    assert str(c) == "S04 Y W2 R- B0-2--- U.b.."
    assert str(Control(15, False, None, 1, 0b11, 0b1111)) == "S15 - W- R1 B01---- Uabcd"
    j = c.to_json()
    assert j["stall"] == 4 and j["yield"] is True and j["write_barrier"] == 2
    assert j["read_barrier"] is None and j["waits"] == [0, 2] and j["text"] == str(c)


def test_known_sm90_words():
    """Words from a real sm_90 listing (cuobjdump), decoded by hand."""
    assert str(decode_word(0x0000000404007223, 0x000FC80000000005)) == "S04 Y W- R- B------ U...."
    assert str(decode_word(0x00000A00FF017B82, 0x000FE20000000800)) == "S01 - W- R- B------ U...."
    assert str(decode_word(0, 0x00321E0000000800)) == "S15 Y W0 R1 B01---- U...."
    assert str(decode_word(0, 0x001EA8000C1E1B00)) == "S04 - W2 R- B0----- U...."


# --- the ELF reader and cuobjdump -------------------------------------------------------------


def _cuobjdump_words(cubin: bytes, tmp_path: Path) -> dict[str, dict[int, tuple[int, int]]]:
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    r = subprocess.run(
        [str(find_tool("cuobjdump")), "-sass", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, dict[int, tuple[int, int]]] = {}
    name, off, lo = None, None, None
    for line in r.stdout.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m[1]
            out[name] = {}
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/.*/\*\s*0x([0-9a-f]{16})\s*\*/", line)
        if m:
            off, lo = int(m[1], 16), int(m[2], 16)
            continue
        m = re.match(r"\s*/\*\s*0x([0-9a-f]{16})\s*\*/\s*$", line)
        if m and name is not None and off is not None:
            out[name][off] = (lo, int(m[1], 16))
            off = None
    return out


@pytest.mark.parametrize("opt", [0, 3])
def test_words_match_cuobjdump(opt, tmp_path):
    try:
        find_tool("cuobjdump")
    except Exception:
        pytest.skip("cuobjdump not installed")
    cubin = _compile(fma_chain_ptx(), opt)
    ours = kernel_words(cubin)
    theirs = _cuobjdump_words(cubin, tmp_path)
    assert set(ours) == set(theirs) == {"fma_chain"}
    mine = {off: (lo, hi) for off, lo, hi in ours["fma_chain"]}
    assert len(theirs["fma_chain"]) >= N_FMA
    for off, words in theirs["fma_chain"].items():
        assert mine[off] == words, hex(off)


def test_kernel_controls_sections():
    ptx = fma_chain_ptx() + ld_chain_ptx().replace(HEADER, "")
    cubin = _compile(ptx)
    ctl = kernel_controls(cubin)
    assert set(ctl) == {"fma_chain", "ld_chain"}
    funcs = parse_sass(disassemble(cubin))
    for name, entries in ctl.items():
        offs = [o for o, _ in entries]
        assert offs == list(range(0, 16 * len(offs), 16))
        assert {i.offset for i in funcs[name].instrs} <= set(offs)


def test_bad_input():
    with pytest.raises(ValueError):
        kernel_controls(b"not an elf at all" * 8)
    with pytest.raises(ValueError):
        kernel_controls(b"\x7fELF\x01\x01" + bytes(80))  # 32-bit


def test_attach_mismatch(fma3, ld3):
    funcs = parse_sass(disassemble(fma3))
    instrs = funcs["fma_chain"].instrs
    short = kernel_controls(ld3)["ld_chain"][:3]
    with pytest.raises(KeyError):
        attach(instrs, short)
    pairs = attach(instrs, dict(kernel_controls(fma3)["fma_chain"]))
    assert [p[0] for p in pairs] == instrs


def test_reuse_matches_nvdisasm():
    pairs = _kernel_pairs(_compile(reuse_ptx()), "reuse_k")
    n_reuse = 0
    for ins, c in pairs:
        assert (".reuse" in ins.text) == (c.reuse != 0), (ins.text, str(c))
        if ins.opcode == "FFMA" and c.reuse:
            n_reuse += 1
            # FFMA d, a, b, c: slot i is operand i + 1
            marked = {i for i, op in enumerate(ins.operands[1:]) if ".reuse" in op}
            assert marked == {i for i in range(4) if c.reuse >> i & 1}, ins.text
    assert n_reuse >= 4


# --- schedules --------------------------------------------------------------------------------


def test_o0_is_compiler_stalled(fma0, fma3):
    r0 = region_stalls(_timed(_kernel_pairs(fma0, "fma_chain")))
    r3 = region_stalls(_timed(_kernel_pairs(fma3, "fma_chain")))
    assert r0["compiler_stalled"] is True
    assert r0["max_stall"] == 15 and r0["n_stall15"] >= N_FMA
    assert r3["compiler_stalled"] is False
    assert r3["n_stall15"] == 0 and r3["max_stall"] < 15
    assert sum(r3["stall_histogram"].values()) == r3["n"]
    assert r3["total_stall"] < r0["total_stall"]


def test_o0_signature(fma0):
    """ptxas -O0: stall 15 and the yield hint on every instruction before the padding."""
    pairs = _kernel_pairs(fma0, "fma_chain")
    real = [(i, c) for i, c in pairs if i.opcode not in ("NOP", "BRA")]
    assert real and all(c.stall == 15 and c.yield_ for _, c in real)


def _ffma_chain_stalls(pairs) -> set[int]:
    """Stall counts of FFMAs whose very next instruction reads their result."""
    out = set()
    for (a, ca), (b, _) in zip(pairs, pairs[1:], strict=False):
        if a.opcode == "FFMA" and b.opcode == "FFMA" and set(a.dests()) & set(b.sources()):
            out.add(ca.stall)
    return out


def test_ffma_ptxas_latency(fma3, fma0):
    region = _timed(_kernel_pairs(fma3, "fma_chain"))
    stalls = _ffma_chain_stalls(region)
    assert len(stalls) == 1, stalls  # one fixed latency for the whole chain
    (expected,) = stalls
    lat = ptxas_latency(region, "FFMA")
    assert lat is not None and 1 <= lat <= 15
    assert lat == int(lat) == expected
    assert len(dependent_pairs(region, "FFMA")) >= N_FMA - 2
    # -O0's schedule makes the same chain wait the maximum
    lat0 = ptxas_latency(_timed(_kernel_pairs(fma0, "fma_chain")), "FFMA")
    assert lat0 is not None and lat0 >= 15 > lat
    assert ptxas_latency(region, "DFMA") is None  # no such producer


def test_load_sets_write_barrier_and_consumer_waits(ld3):
    pairs = _kernel_pairs(ld3, "ld_chain")
    loads = [i for i, (ins, _) in enumerate(pairs) if ins.opcode == "LDG"]
    assert len(loads) == 4
    checked = 0
    for i in loads:
        bar = pairs[i][1].write_barrier
        assert bar is not None, pairs[i][0].text
        for j in range(i + 1, len(pairs)):
            if set(pairs[i][0].dests()) & set(pairs[j][0].sources()):
                assert any(c.wait_mask >> bar & 1 for _, c in pairs[i + 1 : j + 1]), (
                    pairs[i][0].text,
                    pairs[j][0].text,
                )
                checked += 1
                break
    assert checked >= 3  # the dependent loads of the chain, and the final store
    assert ptxas_latency(pairs, pairs[loads[0]][0].full) is None


def test_region_stalls_synthetic(sass):
    instrs = sass("FFMA R0, R0, R4, R5", "MOV R1, R2", "FFMA R0, R0, R4, R5", "NOP")
    c15 = Control(15, True, None, None, 0, 0)
    c4 = Control(4, False, None, None, 0, 0)
    r = region_stalls(list(zip(instrs, [c15, c4, c15, c4], strict=True)))
    assert r["compiler_stalled"] and r["work"] == 2 and r["n_stall15"] == 2
    assert r["stall_histogram"] == {4: 2, 15: 2} and r["total_stall"] == 38
    r = region_stalls(list(zip(instrs, [c4, c15, c4, c15], strict=True)))
    assert not r["compiler_stalled"] and r["stall15_fraction"] == 0.0
    # the consumer waits 4 + 15 cycles behind its producer, across the MOV
    pairs = list(zip(instrs, [c4, c15, c4, c4], strict=True))
    assert ptxas_latency(pairs, "FFMA") == 19.0
    assert region_stalls([])["compiler_stalled"] is False
