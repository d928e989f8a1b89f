"""kernel/timing.py: the row a timed kernel writes, in PTX (``repeated``) and in CUDA C++
(``cuda_repeated``, the efficacy probe's nvcc kernels), both against the layout functions,
so that one analysis reads both (no GPU, no toolchain)."""

from __future__ import annotations

import re

import pytest

from gpudissect.kernel.timing import (
    Repeat,
    clock_read,
    cuda_clock_read,
    cuda_repeated,
    end_word,
    repeated,
    row_words,
    smid_word,
    start_word,
)

R = Repeat(times="%tp", label="$Lrep", pred="%loop", smid32="%sm", smid64="%toff")
PINNED = Repeat(times="%tp", label="$Lrep", pred="%loop", smid32="%sm", smid64="%toff", pin_start=True)
BODY_PTX = ["  fma.rn.f32 %f0, %f0, %f1, %f2;"]
BODY_CUDA = ["x = __fmaf_rn(x, a, b);"]


def expected_row(keep: int, count: int) -> list:
    """The row the layout functions define after ``count`` repetitions."""
    row: list = [0] * row_words(keep)
    for k in range(keep):
        rep = count - keep + k  # kept repetition k, oldest first
        if rep >= 0:
            row[start_word(k)], row[end_word(k)] = ("start", rep), ("end", rep)
    row[smid_word(keep)] = "smid"
    return row


def ptx_row(keep: int, count: int, r: Repeat = R) -> list:
    """Run the register moves of ``repeated``'s PTX by hand; the row its stores write."""
    lines = [ln.strip() for ln in repeated(BODY_PTX, str(count), r, keep)]
    clocks = [i for i, ln in enumerate(lines) if ln == clock_read(R.t1, "").strip()]
    # the moves after the end clock: plain 64-bit moves, and the start clock's way through a
    # shuffle from lane 0 (split into halves, each shuffled, joined: the same value)
    move = re.compile(r"mov\.b64 (%\w+|\{%\w+, %\w+\}), (%\w+|\{%\w+, %\w+\});"
                      r"|shfl\.sync\.idx\.b32 (%\w+), (%\w+), 0, 31, -1;")
    moves = [move.fullmatch(ln) for ln in lines[clocks[0] + 1:]]
    moves = [m.groups() for m in moves[: next(i for i, m in enumerate(moves) if m is None)]]
    env: dict = {f"%ts{i}": 0 for i in range(2 * keep)}
    for rep in range(count):
        env[R.t0], env[R.t1] = ("start", rep), ("end", rep)
        for dst, src, sdst, ssrc in moves:
            if sdst:  # a shuffle from lane 0: every lane holds the same value
                env[sdst] = env[ssrc]
            elif dst.startswith("{"):  # split: both halves carry the value
                for half in re.findall(r"%\w+", dst):
                    env[half] = env[src]
            elif src.startswith("{"):  # join: the halves of one value
                lo, hi = re.findall(r"%\w+", src)
                assert env[lo] == env[hi]
                env[dst] = env[lo]
            else:
                env[dst] = env[src]
    row: list = [None] * row_words(keep)
    for ln in lines:
        if m := re.fullmatch(r"@%tlead st\.global\.u64 \[%tp\+(\d+)\], (%\w+);", ln):
            off, reg = int(m[1]) // 8, m[2]
            row[off] = "smid" if reg == R.smid64 else env[reg]
    return row


def cuda_row(keep: int, count: int) -> list:
    """The same of ``cuda_repeated``'s C++."""
    lines = [ln.strip() for ln in cuda_repeated(BODY_CUDA, count, keep, "tp")]
    t1 = lines.index(cuda_clock_read("t1_"))
    moves = [re.fullmatch(r"ts_\[(\d+)\] = (ts_\[\d+\]|t0_|t1_);", ln) for ln in lines[t1 + 1:]]
    moves = [m.groups() for m in moves[: next(i for i, m in enumerate(moves) if m is None)]]
    env: dict = {f"ts_[{i}]": 0 for i in range(2 * keep)}
    for rep in range(count):
        env["t0_"], env["t1_"] = ("start", rep), ("end", rep)
        for dst, src in moves:
            env[f"ts_[{dst}]"] = env[src]
    row: list = [None] * row_words(keep)
    for ln in lines:
        if m := re.fullmatch(r"tp_\[(\d+)\] = (ts_\[\d+\]|sm_);", ln):
            row[int(m[1])] = "smid" if m[2] == "sm_" else env[m[2]]
    return row


@pytest.mark.parametrize(("keep", "count"), [(1, 1), (2, 1), (2, 2), (4, 3), (4, 4)])
def test_ptx_and_cuda_rows_follow_the_one_layout(keep: int, count: int):
    assert ptx_row(keep, count) == expected_row(keep, count)
    assert ptx_row(keep, count, PINNED) == expected_row(keep, count)  # the start clock through a shuffle
    assert cuda_row(keep, count) == expected_row(keep, count)


def test_cuda_region_is_the_ptx_region():
    """The same clock read (the PTX of clock_read), the same barriers before each repetition,
    nothing but the body between the two clock reads, the loop never unrolled."""
    ptx = [ln.strip() for ln in repeated(BODY_PTX, "4", R, 4)]
    cuda = [ln.strip() for ln in cuda_repeated(BODY_CUDA, 4, 4, "tp", pinned=('"+f"(x)',))]
    assert cuda_clock_read("t0_") == 'asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0_) :: "memory");'
    assert clock_read("%0", "").replace("%clock64", "%%clock64") in cuda_clock_read("t0_")
    c0, c1 = (cuda.index(cuda_clock_read(t, ('"+f"(x)',))) for t in ("t0_", "t1_"))
    assert cuda[c0 + 1:c1] == BODY_CUDA
    p0, p1 = (ptx.index(clock_read(t, "").strip()) for t in (R.t0, R.t1))
    assert ptx[p0 + 1:p1] == [b.strip() for b in BODY_PTX]
    assert sum(ln == "__syncthreads();" for ln in cuda) == sum(ln.startswith("bar.sync") for ln in ptx) == 2
    assert max(i for i, ln in enumerate(cuda) if ln == "__syncthreads();") < c0 and "#pragma unroll 1" in cuda
    assert sum("%%clock64" in ln for ln in cuda) == 2 and sum("%clock64" in ln for ln in ptx) == 2
    assert any("%%smid" in ln for ln in cuda) and any("%%laneid" in ln for ln in cuda)
    with pytest.raises(ValueError):
        cuda_repeated(BODY_CUDA, 5, 4, "tp")


def test_a_pinned_start_clock_leaves_the_timed_region_to_the_work():
    """ptxas moves a warp-uniform start clock into uniform registers (R2UR) inside the region,
    at different places in kernels of different lengths; through the shuffle the instruction
    suite's regions hold their instances alone, in every length (needs ptxas, from the wheels)."""
    from gpudissect.arch.target import make_target
    from gpudissect.catalog.model import load_catalog
    from gpudissect.kernel.build import build_module
    from gpudissect.suites.instructions.strategies import strategy
    from gpudissect.suites.instructions.template import READ_READ, generate, generate_config

    t = make_target("sm_90", "13.0")
    cat = load_catalog()
    ks = [generate(cat.get("fma.rn.f32"), strategy("reg"), t, chains=4, length=n, reps=4, measure="throughput",
                   name=f"k_t4_n{n}") for n in (32, 64)]
    ks += [generate_config(cat.get("min.s32"), strategy("reg"), t, READ_READ, length=n, reps=4, measure="x",
                           name=f"k_rr_n{n}") for n in (14, 28, 42)]
    built = build_module(ks, "sm_90", 3)
    for k in ks:
        ops = {i.full for i in built[k.name].region}
        assert ops in ({"FFMA"}, {"VIMNMX"}), (k.name, ops)
        assert len(built[k.name].region) == k.units
