"""The control-code decoder (kernel/control.py) against the disassemblers on every architecture
the toolchain knows from Turing to Blackwell: the same kernels as tests/test_control.py, compiled
for each, their instruction words read from the cubin equal cuobjdump's word for word, the reuse
field equals nvdisasm's ``.reuse`` marks, and the schedule fields read as they do on Hopper
(-O0's stall 15 on everything, a load's write barrier waited on by its reader, one fixed stall
in a dependent FFMA chain). Needs ptxas, nvdisasm and cuobjdump; no GPU."""

from __future__ import annotations

import pytest
from test_control import (
    HEADER,
    N_FMA,
    _cuobjdump_words,
    _ffma_chain_stalls,
    fma_chain_ptx,
    ld_chain_ptx,
    reuse_ptx,
)

from gpudissect.arch.target import ptx_isa_for
from gpudissect.kernel.control import attach, kernel_controls, kernel_words, ptxas_latency
from gpudissect.kernel.sass import parse_sass
from gpudissect.kernel.toolchain import compile_ptx, disassemble, find_tool, tool_version

# every generation of 128-bit SASS the installed ptxas builds for, from Turing to Blackwell
ARCHS = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]


def _tools() -> None:
    try:
        for t in ("ptxas", "nvdisasm", "cuobjdump"):
            find_tool(t)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"toolchain missing: {e}")


def _for(ptx: str, arch: str) -> str:
    """The test kernels (written for sm_90 with PTX ISA 8.0) for ``arch``, under the PTX ISA the
    installed ptxas takes (the newest architectures need a newer one)."""
    return ptx.replace(HEADER, f".version {ptx_isa_for(tool_version('ptxas'))}\n.target {arch}\n.address_size 64\n")


def _compile(ptx: str, arch: str, opt: int = 3) -> bytes:
    return compile_ptx(_for(ptx, arch), arch=arch, opt=opt).cubin


def _pairs(cubin: bytes, name: str):
    funcs = parse_sass(disassemble(cubin))
    return attach(funcs[name].instrs, kernel_controls(cubin)[name])


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("opt", [0, 3])
def test_words_match_cuobjdump_on_every_architecture(arch, opt, tmp_path):
    _tools()
    cubin = _compile(fma_chain_ptx() + ld_chain_ptx().replace(HEADER, ""), arch, opt)
    ours = kernel_words(cubin)
    theirs = _cuobjdump_words(cubin, tmp_path)
    assert set(ours) == set(theirs) == {"fma_chain", "ld_chain"}
    for name in ours:
        mine = {off: (lo, hi) for off, lo, hi in ours[name]}
        assert len(theirs[name]) >= 8
        for off, words in theirs[name].items():
            assert mine[off] == words, (arch, name, hex(off))


@pytest.mark.parametrize("arch", ARCHS)
def test_reuse_matches_nvdisasm_on_every_architecture(arch):
    _tools()
    pairs = _pairs(_compile(reuse_ptx(), arch), "reuse_k")
    n_reuse = 0
    for ins, c in pairs:
        assert (".reuse" in ins.text) == (c.reuse != 0), (arch, ins.text, str(c))
        if ins.opcode == "FFMA" and c.reuse:
            n_reuse += 1
            marked = {i for i, op in enumerate(ins.operands[1:]) if ".reuse" in op}
            assert marked == {i for i in range(4) if c.reuse >> i & 1}, (arch, ins.text)
    assert n_reuse >= 4, arch


@pytest.mark.parametrize("arch", ARCHS)
def test_schedule_fields_on_every_architecture(arch):
    _tools()
    # -O0: stall 15 and the yield hint on every instruction before the padding
    real = [(i, c) for i, c in _pairs(_compile(fma_chain_ptx(), arch, 0), "fma_chain")
            if i.opcode not in ("NOP", "BRA")]
    assert real and all(c.stall == 15 and c.yield_ for _, c in real), arch
    # -O3: one fixed stall on each FFMA of the dependent chain, and it is ptxas's latency
    # (the whole kernel: ptxas for some architectures moves the chain across a clock read)
    region = _pairs(_compile(fma_chain_ptx(), arch), "fma_chain")
    stalls = _ffma_chain_stalls(region)
    assert len(stalls) == 1 and 1 <= min(stalls) < 15, (arch, stalls)
    assert ptxas_latency(region, "FFMA") == min(stalls)
    assert sum(1 for i, _ in region if i.opcode == "FFMA") == N_FMA
    # a load sets a write barrier, and the first reader of its result waits on it
    pairs = _pairs(_compile(ld_chain_ptx(), arch), "ld_chain")
    loads = [i for i, (ins, _) in enumerate(pairs) if ins.opcode == "LDG"]
    assert len(loads) == 4, arch
    for i in loads:
        bar = pairs[i][1].write_barrier
        assert bar is not None, (arch, pairs[i][0].text)
        j = next(j for j in range(i + 1, len(pairs)) if set(pairs[i][0].dests()) & set(pairs[j][0].sources()))
        assert any(c.wait_mask >> bar & 1 for _, c in pairs[i + 1 : j + 1]), (arch, pairs[j][0].text)
