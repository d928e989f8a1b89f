"""Fragment layouts of wmma.load / wmma.store by raw data movement (seed 001, section 3.1).

The PTX ISA leaves the wmma fragment layout unspecified ("the mapping of matrix elements
into fragments is unspecified"), so the experiment observes it and compares it with what
it is most likely built from: the stated mma.sync layouts, tiled.

* wmma.load: the matrix in memory holds, at each element, a digit of its own code
  (row*cols + col + 1); one pass per digit (one warp each); the fragment registers are
  stored raw, so each register slot (lane, element) yields the code of the element it holds.
* wmma.store: each register slot holds a digit of its own code ((lane*regs + reg)*per_reg +
  position + 1); the stored matrix yields, per element, the slot that wrote it.

Slots are (lane, element) with element = register*elements_per_register + position (low
bits first), as for mma.sync (layout_reference.py). Sub-byte elements are packed low bits
first in memory and in registers. Code 0 means "nothing arrived" (zero-filled buffers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpudissect.catalog.tensor import element
from gpudissect.suites.tensor.layout_reference import Shape, reference_layout

# bits of each element field the digits go into: tf32 keeps them above the 13 low mantissa
# bits that the tensor core ignores, in case a load path ever drops them
SHIFT = {"tf32": 13}


@dataclass(frozen=True)
class FragSpec:
    """What the experiment needs of a wmma.load/store variant."""

    op: str  # wmma.load | wmma.store
    frag: str  # a | b | c | d
    elem: str
    rows: int
    cols: int
    layout: str  # row | col
    ldm: int
    regs: int
    reg_bytes: int  # 4, or 8 for f64 registers

    @property
    def bits(self) -> int:
        return element(self.elem).bits

    @property
    def per_reg(self) -> int:
        return self.reg_bytes * 8 // self.bits

    @property
    def slots(self) -> int:
        return self.regs * self.per_reg

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def image_elems(self) -> int:
        return (self.rows if self.layout == "row" else self.cols) * self.ldm

    @property
    def base(self) -> int:
        return 1 << min(self.bits - SHIFT.get(self.elem, 0), 16)

    @property
    def passes(self) -> int:
        top = (self.elements if self.op == "wmma.load" else 32 * self.slots) + 1
        return max(1, math.ceil(math.log(top) / math.log(self.base) - 1e-12))


def pack(vals: np.ndarray, bits: int) -> bytes:
    """Little-endian packing of unsigned element values of ``bits`` bits each."""
    v = np.asarray(vals, dtype=np.uint64).ravel()
    if bits >= 8:
        return v.astype(f"<u{bits // 8}").tobytes()
    bitarr = ((v[:, None] >> np.arange(bits, dtype=np.uint64)) & 1).astype(np.uint8).ravel()
    return np.packbits(bitarr, bitorder="little").tobytes()


def unpack(buf: bytes | np.ndarray, bits: int, count: int) -> np.ndarray:
    raw = np.frombuffer(bytes(buf), dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.view(np.uint8)
    if bits >= 8:
        return raw[: count * bits // 8].view(f"<u{bits // 8}").astype(np.uint64)
    bitarr = np.unpackbits(raw, bitorder="little")[: count * bits].reshape(count, bits).astype(np.uint64)
    return (bitarr << np.arange(bits, dtype=np.uint64)).sum(axis=1)


def positions(s: FragSpec) -> np.ndarray:
    """Memory element index of matrix element (row, col), shape (rows, cols)."""
    r, c = np.meshgrid(np.arange(s.rows), np.arange(s.cols), indexing="ij")
    return r * s.ldm + c if s.layout == "row" else c * s.ldm + r


def _digits(codes: np.ndarray, s: FragSpec, p: int) -> np.ndarray:
    return ((codes // s.base**p) % s.base) << SHIFT.get(s.elem, 0)


def _undigit(vals: list[np.ndarray], s: FragSpec) -> np.ndarray:
    sh, m = SHIFT.get(s.elem, 0), s.base - 1
    return sum(((v.astype(np.int64) >> sh) & m) * s.base**p for p, v in enumerate(vals))


def design(s: FragSpec) -> bytes:
    """The probe's input: one memory image (load) or one register image (store) per pass."""
    out = []
    if s.op == "wmma.load":
        codes = np.arange(s.elements, dtype=np.int64).reshape(s.rows, s.cols) + 1
        for p in range(s.passes):
            img = np.zeros(s.image_elems, dtype=np.int64)
            img[positions(s).ravel()] = _digits(codes, s, p).ravel()
            out.append(pack(img, s.bits))
    else:
        codes = np.arange(32 * s.slots, dtype=np.int64) + 1
        for p in range(s.passes):
            out.append(pack(_digits(codes, s, p), s.bits))
    return b"".join(out)


def output_bytes(s: FragSpec) -> int:
    per = 32 * s.regs * s.reg_bytes if s.op == "wmma.load" else s.image_elems * s.bits // 8
    return s.passes * per


def decode(s: FragSpec, out: bytes | np.ndarray) -> np.ndarray:
    """(row, col) of every slot, shape (32, slots, 2); -1 where nothing consistent arrived."""
    raw = np.frombuffer(bytes(out), dtype=np.uint8)
    res = np.full((32, s.slots, 2), -1, dtype=np.int64)
    if s.op == "wmma.load":
        per = 32 * s.regs * s.reg_bytes
        vals = [unpack(raw[p * per:(p + 1) * per], s.bits, 32 * s.slots) for p in range(s.passes)]
        code = _undigit(vals, s).reshape(32, s.slots)
        ok = (code >= 1) & (code <= s.elements)
        rr, cc = np.divmod(code - 1, s.cols)
        res[..., 0] = np.where(ok, rr, -1)
        res[..., 1] = np.where(ok, cc, -1)
        return res
    per = s.image_elems * s.bits // 8
    vals = [unpack(raw[p * per:(p + 1) * per], s.bits, s.image_elems) for p in range(s.passes)]
    code = _undigit(vals, s)[positions(s)]  # (rows, cols): slot code that wrote each element
    for r in range(s.rows):
        for c in range(s.cols):
            k = int(code[r, c]) - 1
            if 0 <= k < 32 * s.slots:
                res[k // s.slots, k % s.slots] = (r, c)
    return res


def coverage(s: FragSpec, slots: np.ndarray) -> dict:
    """How often each matrix element is held (load) / written (store)."""
    cnt = np.zeros((s.rows, s.cols), dtype=int)
    valid = slots[..., 0] >= 0
    for r, c in slots[valid]:
        cnt[r, c] += 1
    return {"missing_elements": int((cnt == 0).sum()), "invalid_slots": int((~valid).sum()),
            "copies_min": int(cnt.min()), "copies_max": int(cnt.max()),
            "complete": bool((cnt > 0).all() and valid.all())}


def tiling(s: FragSpec, slots: np.ndarray, shapes: list[Shape]) -> dict:
    """Compare each fragment register with the registers of the PTX-stated mma.sync layouts
    (``shapes``: candidate mma shapes of the same operand type): register r matches
    (mma register r', offset (dr, dc)) when every lane and position holds the element the
    mma layout puts there, shifted by (dr, dc). The candidate matching most registers wins;
    where the fragment as observed matches none fully, its transpose (element (r, c) read as
    (c, r)) is tried too, and a full match there is reported with ``transposed``."""
    op = {"a": "a", "b": "b", "c": "c", "d": "c"}[s.frag]
    e = s.per_reg
    best: dict = {"shape": None, "registers": [None] * s.regs, "matched": 0, "transposed": False}
    for transposed in (False, True):
        if best["matched"] == s.regs:
            break
        view = slots[..., ::-1] if transposed else slots
        for sh in shapes:
            ref = reference_layout(sh)[op]
            if ref.shape[1] % e:
                continue
            regs = [_register_match(view[:, r * e:(r + 1) * e, :], ref, e) for r in range(s.regs)]
            n = sum(x is not None for x in regs)
            # ties: the shape whose registers line up with the fragment's without offsets
            zero = sum(x is not None and x["offset"] == [0, 0] for x in regs)
            if (n, zero) > (best["matched"], best.get("_zero", -1)) and (not transposed or n == s.regs):
                best = {"shape": [sh.m, sh.n, sh.k], "registers": regs, "matched": n,
                        "transposed": transposed, "_zero": zero}
    best.pop("_zero", None)
    best["all"] = best["matched"] == s.regs
    return best


def _register_match(blk: np.ndarray, ref: np.ndarray, e: int) -> dict | None:
    """The mma register (and offset) whose layout equals the fragment register ``blk``; of
    several, one whose offset is a whole number of mma tiles, then the smallest offset
    (mma r2+(0,0) rather than r0+(8,0), mma r0+(0,8) rather than r1+(0,7))."""
    if not (blk >= 0).all():
        return None
    hits = []
    for r2 in range(ref.shape[1] // e):
        d = blk - ref[:, r2 * e:(r2 + 1) * e, :]
        if (d == d[0, 0]).all():
            hits.append({"mma_reg": r2, "offset": [int(d[0, 0, 0]), int(d[0, 0, 1])]})
    rows, cols = int(ref[..., 0].max()) + 1, int(ref[..., 1].max()) + 1
    return min(hits, key=lambda h: (h["offset"][0] % rows != 0 or h["offset"][1] % cols != 0,
                                    abs(h["offset"][0]) + abs(h["offset"][1])), default=None)


def describe_tiling(t: dict) -> str:
    if not t.get("shape"):
        return "no register matches a stated mma.sync layout"
    m, n, k = t["shape"]
    parts = [f"r{i}=mma r{x['mma_reg']}+({x['offset'][0]},{x['offset'][1]})" if x else f"r{i}=?"
             for i, x in enumerate(t["registers"])]
    text = f"m{m}n{n}k{k} tiles: " + " ".join(parts)
    if t.get("transposed"):
        text += " (transposed: fragment element (row, col) is where the mma layout puts (col, row))"
    return text
