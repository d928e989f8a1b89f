"""Below ptxas: a built cubin with chosen instructions' control bits or register operands
rewritten, every other byte unchanged.

An instruction is named by its byte offset in its kernel's ``.text.<kernel>`` section (the
``/*0070*/`` of nvdisasm, :attr:`SassInstr.offset`). An edit sets any of

* the control fields of :class:`~gpudissect.kernel.control.Control` (``stall``, ``yield_``,
  ``write_barrier``, ``read_barrier``, ``wait_mask``, ``reuse``), encoded by
  :func:`~gpudissect.kernel.control.encode_control`, the exact inverse of the decoder that
  ``tests/test_control.py`` checks against cuobjdump;
* the register operand fields ``rd``, ``ra``, ``rb``, ``rc`` (8-bit register indices at bits 16,
  24 and 32 of the low word and bit 0 of the high word): the layout of the register-register
  forms of the sm_70+ ALU instructions (CuAssembler's encodings; ``tests/test_patch.py`` shows
  nvdisasm reading each field back on FFMA, IMAD and LOP3 cubins of ptxas). Other forms
  (immediates, constant-bank operands, predicates, uniform registers) are not edited here.

A patched cubin is what the GPU runs: the caller compares its output with the unpatched
kernel's (a schedule that violates a dependence computes other values) and never takes a
wrong result for a timing.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from gpudissect.kernel.control import Control, decode_word, text_extents, with_control

CONTROL_FIELDS = tuple(f.name for f in fields(Control))
REG_FIELDS = {"rd": (0, 16), "ra": (0, 24), "rb": (0, 32), "rc": (1, 0)}  # (word: 0 lo / 1 hi, bit)
RZ = 255  # the zero register's index


def read_word(cubin: bytes, kernel: str, offset: int) -> tuple[int, int]:
    """The two little-endian u64 halves (lo, hi) of ``kernel``'s instruction at ``offset``."""
    return struct.unpack_from("<QQ", cubin, _where(cubin, kernel, offset))


def registers(lo: int, hi: int) -> dict[str, int]:
    """The register operand fields of one instruction word (meaningful for the register forms)."""
    return {k: ((hi if w else lo) >> bit) & 0xFF for k, (w, bit) in REG_FIELDS.items()}


def patch(cubin: bytes, kernel: str, edits: Mapping[int, Mapping[str, Any]]) -> bytes:
    """``cubin`` with ``kernel``'s instruction at each offset of ``edits`` changed as its mapping
    says (control fields and register fields, see the module's text); a ValueError names an
    unknown kernel, an offset that is no instruction, an unknown field or a value out of range."""
    out = bytearray(cubin)
    for offset, edit in edits.items():
        bad = sorted(set(edit) - set(CONTROL_FIELDS) - set(REG_FIELDS))
        if bad:
            raise ValueError(f"unknown field(s) {bad}: control fields {list(CONTROL_FIELDS)}, registers "
                             f"{list(REG_FIELDS)}")
        at = _where(cubin, kernel, offset)
        lo, hi = struct.unpack_from("<QQ", cubin, at)
        ctl = {k: v for k, v in edit.items() if k in CONTROL_FIELDS}
        if ctl:
            hi = with_control(hi, replace(decode_word(lo, hi), **ctl))
        for k, v in edit.items():
            if k in REG_FIELDS:
                if not 0 <= int(v) <= RZ:
                    raise ValueError(f"register field {k}={v} out of range 0..{RZ}")
                w, bit = REG_FIELDS[k]
                if w:
                    hi = (hi & ~(0xFF << bit)) | int(v) << bit
                else:
                    lo = (lo & ~(0xFF << bit)) | int(v) << bit
        struct.pack_into("<QQ", out, at, lo, hi)
    return bytes(out)


def _where(cubin: bytes, kernel: str, offset: int) -> int:
    ext = text_extents(cubin)
    if kernel not in ext:
        raise ValueError(f"kernel {kernel!r} is not in the cubin (kernels: {sorted(ext)})")
    start, size = ext[kernel]
    if offset % 16 or not 0 <= offset < size:
        raise ValueError(f"offset {offset:#x} is no instruction of {kernel} (16-byte words, {size} bytes)")
    return start + offset
