"""Scheduling control bits of Volta-and-later (128-bit) SASS, decoded straight from a cubin.

Every sm_70+ instruction is 16 bytes, read here as two little-endian u64 words ``lo, hi``
(the 128-bit word is ``hi << 64 | lo``). ptxas stores its static schedule in the top 23 bits,
``hi >> 41`` (bits 105..127 of the 128-bit word). Field by field, from bit 105 up::

    bits     field          meaning
    105-108  stall          cycles the warp waits before it may issue its next instruction
    109      yield (raw)    0 = yield hint set ("Y"), 1 = not set (see below)
    110-112  write barrier  scoreboard (0..5) released when a variable-latency result lands; 7 = none
    113-115  read barrier   scoreboard released once the sources have been read; 7 = none
    116-121  wait mask      bit i: wait for scoreboard i before issuing this instruction
    122-125  reuse          operand-reuse cache flags, bit i = source slot i (a, b, c, d)
    126-127  (always 0 in everything we compiled)

This is the layout documented by maxas / CuAssembler (``decodeCtrlCodes``) and Jia et al.
("Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018). We verified it
here, on Hopper cubins from ptxas 13.0, and found nothing that contradicts it:

* the words we read from ``.text.<kernel>`` equal ``cuobjdump -sass``'s hex pairs
  (``/* 0x<lo> */`` then ``/* 0x<hi> */``) word for word (tests/test_control.py);
* ``-O0``: every instruction of a kernel carries stall 15 (only the padding NOP/BRA after
  EXIT carry 0), raw yield bit 0, wait mask ``0b000011``; ``LDC`` sets write barrier 0 and
  read barrier 1, ``STG`` read barrier 1. Across 142,840 ``-O3`` instructions of 800
  project kernels, no instruction carried stall 15 (the maximum was 14; predicate producers
  feeding a branch carry 13);
* ``-O3`` dependent ``fma.rn.f32`` chain: every FFMA whose result feeds the next carries stall
  4, the last one (feeding nothing) stall 1;
* loads (LDG/LDS/LDC/ATOMS/S2R/MUFU/I2F/...) set a write barrier, and the first reader of
  their destination waits on that barrier's bit; an instruction whose sources a later one
  overwrites sets a read barrier that the overwriter waits on. A scan of 200 project
  kernels at -O0 and -O3 found this for 99.4% of producer/consumer pairs; the rest were
  artefacts of the text-level register model (64-bit pair expansion of addresses);
* the reuse field is non-zero exactly when nvdisasm prints ``.reuse`` on an operand (2,831
  of 2,831 instructions), and bit i marks the i-th source *slot*: ``IMAD.IADD R23, R37,
  0x1, R0.reuse`` has reuse ``0b0100`` (slot c), ``FFMA R14, R0.reuse, R14, R9.reuse``
  ``0b0101``. Bit 3 (slot d) was never seen set.

The yield bit is inverted: a *cleared* bit is the yield hint (CuAssembler prints ``Y`` for a
0 bit, maxas the same on Maxwell). Evidence: ``-O0`` clears it on every instruction, as do
the padding NOPs; at ``-O3`` every stall-1 instruction (10,285 of 10,285) has it set, i.e.
"keep issuing this warp back to back", while nearly all stalls >= 9 have it cleared (the warp
waits anyway, so the scheduler may switch). ``Control.yield_`` is the hint (``True`` when
the raw bit is 0); ``Control.yield_bit`` gives the raw bit.

The stall count is ptxas's static latency model: the consumer of a fixed-latency result
issues ``sum(stall)`` cycles after its producer (:func:`ptxas_latency`). Variable-latency
producers are tracked by scoreboards (write barrier + wait mask) instead.
"""

from __future__ import annotations

import re
import statistics
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gpudissect.kernel.sass import SassInstr

CONTROL_SHIFT = 105  # first control bit of the 128-bit word (= bit 41 of ``hi``)
NO_BARRIER = 7
N_BARRIERS = 6
STALL_O0 = 15  # the stall ptxas -O0 puts on every instruction
# stall >= 15 on at least this fraction of a region's real work: ptxas's -O0 schedule
COMPILER_STALLED_FRACTION = 0.5

# register moves / constant materialisation / padding: excluded when judging a region's schedule
_FILLER_RE = re.compile(r"^(NOP|MOV|UMOV|IMAD\.MOV(\.U32)?|MOV\.\w+|PRMT\.MOV)$")


@dataclass(frozen=True)
class Control:
    """Decoded scheduling control of one instruction.

    ``str()`` is compact, fixed-width: ``S04 Y W2 R- B0-2--- U.b..`` =
    stall 4, yield hint set (``-`` when not), write barrier 2, no read barrier (``-``),
    waits on scoreboards 0 and 2 (one character per scoreboard 0..5, its digit when waited
    on), reuse flag on source slot b (one character per slot a..d, ``.`` when clear).
    """

    stall: int
    yield_: bool  # the yield *hint*: True when the raw bit 109 is 0
    write_barrier: int | None
    read_barrier: int | None
    wait_mask: int
    reuse: int

    @property
    def yield_bit(self) -> int:
        """The raw encoded bit (0 = yield hint)."""
        return 0 if self.yield_ else 1

    @property
    def waits(self) -> tuple[int, ...]:
        """Scoreboard indices this instruction waits on."""
        return tuple(i for i in range(N_BARRIERS) if self.wait_mask >> i & 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "stall": self.stall,
            "yield": self.yield_,
            "write_barrier": self.write_barrier,
            "read_barrier": self.read_barrier,
            "wait_mask": self.wait_mask,
            "waits": list(self.waits),
            "reuse": self.reuse,
            "text": str(self),
        }

    def __str__(self) -> str:
        wb = "-" if self.write_barrier is None else str(self.write_barrier)
        rb = "-" if self.read_barrier is None else str(self.read_barrier)
        mask = "".join(str(i) if self.wait_mask >> i & 1 else "-" for i in range(N_BARRIERS))
        reuse = "".join("abcd"[i] if self.reuse >> i & 1 else "." for i in range(4))
        return f"S{self.stall:02d} {'Y' if self.yield_ else '-'} W{wb} R{rb} B{mask} U{reuse}"


def decode_word(lo: int, hi: int) -> Control:
    """Control bits of one instruction given its two little-endian u64 halves."""
    del lo  # the low half holds no control bits; kept for a symmetric call
    c = (hi >> (CONTROL_SHIFT - 64)) & ((1 << 23) - 1)
    wb = (c >> 5) & 7
    rb = (c >> 8) & 7
    return Control(
        stall=c & 0xF,
        yield_=((c >> 4) & 1) == 0,
        write_barrier=None if wb == NO_BARRIER else wb,
        read_barrier=None if rb == NO_BARRIER else rb,
        wait_mask=(c >> 11) & 0x3F,
        reuse=(c >> 17) & 0xF,
    )


def encode_control(c: Control) -> int:
    """The 23 control bits of ``c`` (bits 105..127 of the instruction, as :func:`decode_word`
    reads them): its exact inverse."""
    for name, v, hi in (("stall", c.stall, 15), ("wait_mask", c.wait_mask, 0x3F), ("reuse", c.reuse, 0xF)):
        if not 0 <= v <= hi:
            raise ValueError(f"control field {name}={v} out of range 0..{hi}")
    for name, b in (("write_barrier", c.write_barrier), ("read_barrier", c.read_barrier)):
        if b is not None and not 0 <= b < N_BARRIERS:
            raise ValueError(f"control field {name}={b} out of range 0..{N_BARRIERS - 1} (or none)")
    wb = NO_BARRIER if c.write_barrier is None else c.write_barrier
    rb = NO_BARRIER if c.read_barrier is None else c.read_barrier
    return c.stall | c.yield_bit << 4 | wb << 5 | rb << 8 | c.wait_mask << 11 | c.reuse << 17


def with_control(hi: int, c: Control) -> int:
    """The high u64 of an instruction with its control bits replaced by ``c`` (all else kept)."""
    shift = CONTROL_SHIFT - 64
    return (hi & ~(((1 << 23) - 1) << shift)) | encode_control(c) << shift


# ---------------------------------------------------------------------------------------------
# a minimal ELF64 little-endian reader


def _text_sections(cubin: bytes) -> dict[str, bytes]:
    """{kernel name: bytes of its ``.text.<kernel>`` section}."""
    return {name: cubin[off : off + size] for name, (off, size) in text_extents(cubin).items()}


def text_extents(cubin: bytes) -> dict[str, tuple[int, int]]:
    """{kernel name: (file offset, size) of its ``.text.<kernel>`` section}."""
    return dict(_extents(cubin))


@lru_cache(maxsize=32)  # a module's kernels are read one by one, a patched cubin edit by edit
def _extents(cubin: bytes) -> dict[str, tuple[int, int]]:
    """:func:`text_extents`, cached (callers copy it: the dict is shared)."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF (a Volta+ cubin is ELF64 LE)")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shoff == 0 or shentsize < 64:
        raise ValueError("ELF has no section header table")

    def header(i: int) -> tuple[int, int, int, int, int]:
        base = shoff + i * shentsize
        if base + 64 > len(cubin):
            raise ValueError("truncated ELF section header table")
        name, typ, _flags, _addr, off, size, link = struct.unpack_from("<IIQQQQI", cubin, base)
        return name, typ, off, size, link

    if shnum == 0:  # more than 0xff00 sections: the count is in section 0's sh_size
        shnum = header(0)[3]
    if shstrndx == 0xFFFF:  # SHN_XINDEX: the index is in section 0's sh_link
        shstrndx = header(0)[4]
    headers = [header(i) for i in range(shnum)]
    _, _, str_off, str_size, _ = headers[shstrndx]
    strtab = cubin[str_off : str_off + str_size]

    out: dict[str, tuple[int, int]] = {}
    for name_off, typ, off, size, _ in headers:
        end = strtab.find(b"\0", name_off)
        name = strtab[name_off : end if end >= 0 else None].decode("utf-8", "replace")
        if not name.startswith(".text.") or typ == 8:  # SHT_NOBITS holds no code
            continue
        if off + size > len(cubin):
            raise ValueError(f"section {name} runs past the end of the file")
        if size % 16:
            raise ValueError(f"section {name} is {size} bytes, not whole 16-byte instructions")
        out[name[len(".text.") :]] = (off, size)
    return out


def kernel_words(cubin: bytes) -> dict[str, list[tuple[int, int, int]]]:
    """Per kernel, ``(byte offset, lo, hi)`` of every 16-byte instruction word."""
    return {
        name: [(o, *struct.unpack_from("<QQ", data, o)) for o in range(0, len(data), 16)]
        for name, data in _text_sections(cubin).items()
    }


@lru_cache(maxsize=16)  # one module's kernels are asked for one by one
def kernel_controls(cubin: bytes) -> dict[str, list[tuple[int, Control]]]:
    """Per kernel (section name without ``.text.``), ``(byte offset, Control)`` of every
    instruction, padding included."""
    return {name: controls_of(cubin, name) for name in _extents(cubin)}


def controls_of(cubin: bytes, kernel: str) -> list[tuple[int, Control]]:
    """``kernel``'s entry of :func:`kernel_controls`, decoding that kernel's words alone (a
    module holds hundreds of kernels; a KeyError names one it does not hold)."""
    start, size = _extents(cubin)[kernel]
    return [(o, decode_word(*struct.unpack_from("<QQ", cubin, start + o))) for o in range(0, size, 16)]


def attach(
    instrs: Iterable[SassInstr],
    controls: Iterable[tuple[int, Control]] | Mapping[int, Control],
) -> list[tuple[SassInstr, Control]]:
    """Pair parsed instructions with their controls by byte offset.

    ``controls`` is one kernel's entry of :func:`kernel_controls` (or an offset->Control map).
    An instruction whose offset has no control word raises ``KeyError``: the listing and the
    cubin do not belong together.
    """
    by_off = dict(controls.items() if isinstance(controls, Mapping) else controls)
    out = []
    for ins in instrs:
        if ins.offset not in by_off:
            raise KeyError(f"no instruction word at offset {ins.offset:#06x} ({ins.text!r})")
        out.append((ins, by_off[ins.offset]))
    return out


def _is_filler(ins: SassInstr) -> bool:
    return bool(_FILLER_RE.match(ins.full))


def region_stalls(pairs: Sequence[tuple[SassInstr, Control]]) -> dict[str, Any]:
    """Summary of ptxas's static schedule over a region (e.g. the timed region).

    Keys: ``n`` instructions, ``stall_histogram`` {stall: count}, ``max_stall``,
    ``total_stall`` (static issue cycles: the sum of stalls), ``n_stall15`` (instructions with
    stall >= 15, the -O0 signature), ``n_wait`` (instructions that wait on a scoreboard),
    ``work`` (instructions judged: all but NOPs and register moves, or all but NOPs when the
    region is nothing else), ``stall15_fraction`` (of ``work``), and ``compiler_stalled``.

    ``compiler_stalled`` is True when at least half (:data:`COMPILER_STALLED_FRACTION`) of
    the region's work carries stall >= 15: ptxas's conservative non-optimised (-O0) schedule,
    where every instruction waits the maximum 15 cycles whatever its latency, so a timing
    measures that schedule rather than the hardware. ptxas -O3 never emitted stall 15 in
    142,840 instructions of the project's kernels (its maximum was 14), while -O0 puts 15 on
    every instruction, so the two are far apart and the threshold is not delicate.
    """
    hist: dict[int, int] = {}
    for _, c in pairs:
        hist[c.stall] = hist.get(c.stall, 0) + 1
    work = [c for ins, c in pairs if not _is_filler(ins)]
    if not work:
        work = [c for ins, c in pairs if ins.opcode != "NOP"]
    n15 = sum(c.stall >= STALL_O0 for c in work)
    frac = n15 / len(work) if work else 0.0
    return {
        "n": len(pairs),
        "stall_histogram": dict(sorted(hist.items())),
        "max_stall": max(hist, default=0),
        "total_stall": sum(c.stall for _, c in pairs),
        "n_stall15": sum(c.stall >= STALL_O0 for _, c in pairs),
        "n_wait": sum(c.wait_mask != 0 for _, c in pairs),
        "work": len(work),
        "stall15_fraction": frac,
        "compiler_stalled": bool(work) and frac >= COMPILER_STALLED_FRACTION,
    }


def dependent_pairs(
    pairs: Sequence[tuple[SassInstr, Control]], opcode_full: str
) -> list[tuple[int, int]]:
    """``(producer index, consumer index)`` for each instruction of ``opcode_full`` whose
    result a later instruction of the region reads before anything overwrites it."""
    out = []
    for i, (ins, _) in enumerate(pairs):
        if ins.full != opcode_full:
            continue
        live = set(ins.dests())
        for j in range(i + 1, len(pairs)):
            if not live:
                break
            nxt = pairs[j][0]
            if live & set(nxt.sources()):
                out.append((i, j))
                break
            if not nxt.predicate:  # an unconditional overwrite kills the value
                live -= set(nxt.dests())
    return out


def ptxas_latency(pairs: Sequence[tuple[SassInstr, Control]], opcode_full: str) -> float | None:
    """ptxas's latency model for ``opcode_full`` in a dependent chain.

    For each producer of ``opcode_full`` with a dependent consumer later in the region, the
    cycles ptxas makes the consumer wait: the sum of the stall counts from the producer up
    to, not including, the consumer. Returns their median; ``None`` when a producer of that
    opcode sets a write barrier (variable latency: the consumer waits on a scoreboard, not
    on stall counts) or when no dependent pair exists.
    """
    if any(ins.full == opcode_full and c.write_barrier is not None for ins, c in pairs):
        return None
    cycles = [sum(c.stall for _, c in pairs[i:j]) for i, j in dependent_pairs(pairs, opcode_full)]
    return float(statistics.median(cycles)) if cycles else None


def instance_stalls(region: Sequence[SassInstr], cubin: bytes, kernel: str, ops: Iterable[str]) -> dict[str, int]:
    """The stall count ptxas gave each SASS of ``ops`` (full names) in a kernel's timed
    ``region``: the median (lower) over its occurrences; {} where the control codes cannot be
    read (the maps of every suite record it per verified variant)."""
    try:
        pairs = attach(region, controls_of(cubin, kernel))
    except (KeyError, ValueError):
        return {}
    out = {}
    for op in ops:
        st = [c.stall for ins, c in pairs if ins.full == op]
        if st:
            out[op] = statistics.median_low(st)
    return out

