"""Operand values: turn a catalog value spec into the bit pattern a kernel loads at run time.

Values are never immediates in the timed code: the host writes them into the kernel's
input buffer, so the compiler cannot fold them.
"""

from __future__ import annotations

import struct

import numpy as np

from gpudissect.catalog.model import REG_CLASS, CatalogError, Operand, Variant

WIDTH = {"p": 32, "h": 16, "r": 32, "rd": 64}

# default specs by role
DEFAULT_FLOAT = "1.0"
DEFAULT_INT = "7"


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f64_bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _f16_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float16).view(np.uint16)[0])


def _bf16_bits(x: float) -> int:
    b = _f32_bits(x)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even


def bits_for(ptype: str, spec: str) -> int:
    """Bit pattern (as a non-negative int) for ``spec`` interpreted as PTX type ``ptype``."""
    spec = spec.strip().removeprefix("lane:")
    if spec.startswith("raw:"):
        return int(spec[4:], 0)
    if ptype == "smem":
        return 0
    if ptype == "pred":
        return 1 if spec not in ("0", "false") else 0
    is_float = ptype.startswith(("f", "bf", "tf"))
    try:
        if is_float:
            x = float(spec)
            if ptype in ("f32", "tf32"):
                return _f32_bits(x)
            if ptype == "f64":
                return _f64_bits(x)
            if ptype == "f16":
                return _f16_bits(x)
            if ptype == "bf16":
                return _bf16_bits(x)
            if ptype == "f16x2":
                h = _f16_bits(x)
                return h | (h << 16)
            if ptype == "bf16x2":
                h = _bf16_bits(x)
                return h | (h << 16)
            raise CatalogError(f"no float encoding for type {ptype}")
        v = int(spec, 0)
    except ValueError:
        raise CatalogError(f"value '{spec}' is not a valid {ptype} literal") from None
    width = WIDTH[REG_CLASS[ptype]] if ptype in REG_CLASS else 32
    return v & ((1 << width) - 1)


def chain_init_spec(op: Operand, k: int, variant: Variant) -> str:
    """Initial value of chain ``k`` (each chain starts from a different value, so the
    compiler cannot merge chains)."""
    spec = variant.values.get(op.name)
    if spec:
        spec = spec.removeprefix("lane:")  # chains are lane-varied by the generator anyway
    if op.is_float:
        base = float(spec) if spec and not spec.startswith("raw:") else 1.5
        return repr(base + k / 64.0)
    if spec and spec.startswith("raw:"):
        return spec
    base = int(spec, 0) if spec else 0x1234
    return str(base + 0x11 * k)


def operand_spec(op: Operand, variant: Variant) -> str:
    spec = variant.values.get(op.name)
    if spec is not None:
        return spec
    return DEFAULT_FLOAT if op.is_float else DEFAULT_INT
