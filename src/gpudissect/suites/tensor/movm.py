"""movmatrix (issue 22): the layout ``movmatrix.sync.aligned.m8n8.trans.b16`` converts, found as
ldmatrix's is: index-valued fragments. Lane ``l`` holds elements ``2l`` and ``2l + 1`` of the
warp's 8x8 b16 matrix (one b32 register, in the ldmatrix fragment layout: row ``l // 4``, columns
``2 (l % 4) + e``); after the instruction, each destination element names the source element it
came from. The map is compared with the transpose of that fragment layout (the PTX ISA's
description); the probe's SASS must hold MOVM. Its latency and throughput are the instruction
suite's (catalog variant ``movmatrix.sync.aligned.m8n8.trans.b16``, verified as MOVM)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudissect.arch.target import Target
from gpudissect.device.args import Buf
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.mma import tensor_arch, tensor_header
from gpudissect.kernel.ptx import Kernel
from gpudissect.store.db import Result

NAME = "movmatrix.m8n8.trans.b16"
PTX = "movmatrix.sync.aligned.m8n8.trans.b16"
MEASURE = "movm_layout"
KERNEL = "movm_layout"


@dataclass(frozen=True)
class MovmJob:
    """The tensor suite's item for the movmatrix layout experiment."""

    name: str = NAME


def wanted(patterns: list[str] | None) -> bool:
    import fnmatch

    return not patterns or any(fnmatch.fnmatch(NAME, p) or fnmatch.fnmatch(PTX, p) or p in NAME for p in patterns)


def probe_kernel(target: Target) -> Kernel:
    entry = "\n".join([
        f".visible .entry {KERNEL}(.param .u64 p_in, .param .u64 p_out)", "{",
        "  .reg .b32 %a, %d, %lane;", "  .reg .b64 %in, %out, %off;",
        "  ld.param.u64 %in, [p_in];", "  ld.param.u64 %out, [p_out];",
        "  cvta.to.global.u64 %in, %in;", "  cvta.to.global.u64 %out, %out;",
        "  mov.u32 %lane, %laneid;", "  mul.wide.u32 %off, %lane, 4;",
        "  add.u64 %in, %in, %off;", "  add.u64 %out, %out, %off;",
        "  ld.global.b32 %a, [%in];", f"  {PTX} %d, %a;", "  st.global.b32 [%out], %d;", "  ret;", "}", ""])
    return Kernel(KERNEL, tensor_header(target), entry, variant=NAME, measure=MEASURE)


def inputs() -> np.ndarray:
    """Lane l's word: element 2l in the low half, 2l + 1 in the high half."""
    lanes = np.arange(32, dtype=np.uint32)
    return (2 * lanes) | ((2 * lanes + 1) << 16)


def decode(words: np.ndarray) -> np.ndarray:
    """(32 lanes, 2 halves): the source element index each destination element holds."""
    w = np.asarray(words, dtype=np.uint32)[:32]
    return np.stack([w & 0xFFFF, w >> 16], axis=1).astype(int)


def fragment_position(index: int) -> tuple[int, int]:
    """(row, col) of element ``index`` (= 2 lane + half) in the ldmatrix fragment layout."""
    lane, half = divmod(index, 2)
    return lane // 4, 2 * (lane % 4) + half


def transpose_reference() -> np.ndarray:
    """The source index of each destination element if the instruction transposes the matrix
    held in the fragment layout: destination (r, c) takes source (c, r)."""
    ref = np.zeros((32, 2), dtype=int)
    for lane in range(32):
        for h in range(2):
            r, c = fragment_position(2 * lane + h)
            ref[lane, h] = 8 * c + r  # source (c, r): lane 4c + r // 2, half r % 2
    return ref


def describe(found: np.ndarray) -> str:
    """The map as a rule on (row, col) positions where one fits (transpose, identity), else how
    many elements move."""
    pos = {i: fragment_position(i) for i in range(64)}
    pairs = [(pos[2 * lane + h], pos[int(found[lane, h])]) for lane in range(32) for h in range(2)]
    if all(d == (s[1], s[0]) for d, s in pairs):
        return "destination (r, c) = source (c, r): the 8x8 matrix transposed in the ldmatrix fragment layout"
    if all(d == s for d, s in pairs):
        return "identity: no element moves"
    return f"{sum(d != s for d, s in pairs)} of 64 elements move (no transpose)"


def build(target: Target) -> Built:
    b = build_module([probe_kernel(target)], tensor_arch(target), region=False).get(KERNEL)
    if not isinstance(b, Built):
        raise RuntimeError(f"movmatrix probe not built: {b}")
    return b


def run(dev: Device, target: Target, texts: dict) -> Result:
    b = build(target)
    sass = sorted({i.full for i in b.instrs if i.opcode == "MOVM"})
    run_ = dev.launch(b.cubin, KERNEL, 1, 32, [Buf("movm_in", data=inputs()),
                                               Buf("movm_out", nbytes=128, read=True, dtype="u4", zero=True)])
    found = decode(run_.outputs["movm_out"])
    ref = transpose_reference()
    ok = bool((found == ref).all()) and sorted(found.ravel().tolist()) == list(range(64))
    texts[b.ptx_hash] = ("ptx", b.kernel.ptx)
    texts[b.sass_hash] = ("sass", b.sass)
    flags = [] if sass else ["sass: no MOVM in the probe's SASS"]
    if not ok:
        flags.append(f"layout-differs: {int((found != ref).sum())} of 64 elements differ from the transpose")
    return Result(NAME, MEASURE, 1.0 if ok else 0.0, "matches_transpose",
                  "index-valued fragments through one movmatrix per warp: each destination element's source",
                  params={"ptx": PTX, "sass": sass, "map": found.tolist(), "rule": describe(found),
                          "matches_transpose": ok}, flags=flags, sass=sass, ptx_hash=b.ptx_hash, sass_hash=b.sass_hash)


def conclusions(rows: list[dict]) -> list[str]:
    r = next((x for x in rows if x["measure"] == MEASURE), None)
    if r is None:
        return []
    p = r["params"] or {}
    return [f"{PTX} ({', '.join(p.get('sass') or ['no MOVM'])}): {p.get('rule', 'not measured')}"
            + (f" [{'; '.join(r['flags'])}]" if r["flags"] else "")]
