"""Tensor maps (TMA descriptors) as kernel arguments: their encoding parameters and the
driver's rules for them (``cuTensorMapEncodeTiled``, tiled mode), checked on the host before
any launch."""

from __future__ import annotations

from dataclasses import dataclass

from gpudissect.device.args import Buf

# Tensor maps (TMA descriptors): element types (bytes, CUtensorMapDataType value, float?) and
# the other enums of cuTensorMapEncodeTiled (name: (value, bytes where it has a size))
TMAP_DTYPES = {"u8": (1, 0, False), "u16": (2, 1, False), "u32": (4, 2, False), "i32": (4, 3, False),
               "u64": (8, 4, False), "i64": (8, 5, False), "f16": (2, 6, True), "f32": (4, 7, True),
               "f64": (8, 8, True), "bf16": (2, 9, True)}
TMAP_SWIZZLE = {"none": (0, 0), "32B": (1, 32), "64B": (2, 64), "128B": (3, 128)}
TMAP_INTERLEAVE = {"none": (0, 0), "16B": (1, 16), "32B": (2, 32)}
TMAP_L2 = {"none": (0, 0), "64B": (1, 64), "128B": (2, 128), "256B": (3, 256)}
TMAP_OOB = {"none": (0, 0), "nan": (1, 0)}
TMAP_BYTES = 128  # an encoded CUtensorMap
TMAP_ALIGN = 64  # its address alignment


class TensorMapError(ValueError):
    """A tensor map the GPU would refuse: one line naming the broken rule."""


@dataclass
class TensorMap:
    """A tensor-map kernel argument (``cuTensorMapEncodeTiled``, tiled mode; picklable): a view
    of ``offset`` bytes into the buffer ``buf`` (uploaded like a :class:`Buf` argument) as a
    tensor of ``dtype`` elements. ``dims`` (elements) and ``box`` (the tile one copy moves,
    elements) and ``elem_strides`` list the innermost dimension first; ``strides``: the byte
    strides of dimensions 1..rank-1 (rank - 1 of them). The device encodes the 128-byte map over
    the uploaded buffer, copies it to device memory of its own (64-byte aligned) and passes its
    generic address as a ``.u64`` parameter (``cp.async.bulk.tensor`` takes it after
    ``fence.proxy.tensormap::generic.acquire``). :meth:`validate` checks the driver's rules
    before any launch (the fake device applies it too)."""

    buf: Buf
    dtype: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    elem_strides: tuple[int, ...] | None = None
    interleave: str = "none"
    swizzle: str = "none"
    l2_promotion: str = "none"
    oob_fill: str = "none"
    offset: int = 0

    def __post_init__(self) -> None:
        self.dims, self.strides, self.box = tuple(self.dims), tuple(self.strides), tuple(self.box)
        if self.elem_strides is None:
            self.elem_strides = (1,) * len(self.dims)
        self.elem_strides = tuple(self.elem_strides)

    @property
    def rank(self) -> int:
        return len(self.dims)

    def key(self) -> str:
        """The map's encoding parameters as text (a slot name for its device copy)."""
        return repr((self.dtype, self.dims, self.strides, self.box, self.elem_strides, self.interleave,
                     self.swizzle, self.l2_promotion, self.oob_fill, self.offset))

    @property
    def esize(self) -> int:
        return TMAP_DTYPES[self.dtype][0]

    @property
    def box_bytes(self) -> int:
        """Bytes one copy of the box moves (element strides skip elements)."""
        n = self.esize
        for b, e in zip(self.box, self.elem_strides or (), strict=False):
            n *= -(-b // e)
        return n

    def validate(self) -> None:
        """Raise :class:`TensorMapError` (one line) for a map ``cuTensorMapEncodeTiled`` refuses."""
        name = f"tensor map over '{self.buf.name}'"

        def bad(why: str) -> None:
            raise TensorMapError(f"{name}: {why}")

        for key, table in (("dtype", TMAP_DTYPES), ("swizzle", TMAP_SWIZZLE), ("interleave", TMAP_INTERLEAVE),
                           ("l2_promotion", TMAP_L2), ("oob_fill", TMAP_OOB)):
            if getattr(self, key) not in table:
                bad(f"{key} '{getattr(self, key)}': one of {', '.join(table)}")
        r = self.rank
        if not 1 <= r <= 5:
            bad(f"rank {r}: 1 to 5 dimensions")
        if len(self.box) != r or len(self.elem_strides or ()) != r or len(self.strides) != r - 1:
            bad(f"rank {r} needs {r} box sizes, {r} element strides and {r - 1} byte strides "
                f"(got {len(self.box)}, {len(self.elem_strides or ())}, {len(self.strides)})")
        il = TMAP_INTERLEAVE[self.interleave][1]
        if il and r < 3:
            bad(f"interleave {self.interleave} needs rank >= 3 (rank {r})")
        align = 32 if il == 32 else 16
        if self.offset % align:
            bad(f"address offset {self.offset} is not a multiple of {align} bytes")
        if any(not 1 <= d <= 1 << 32 for d in self.dims):
            bad(f"dims {self.dims}: each 1 to 2^32")
        if any(s % align or not 0 < s < 1 << 40 for s in self.strides):
            bad(f"byte strides {self.strides}: each a positive multiple of {align} below 2^40")
        if self.strides and self.strides[0] < self.dims[0] * self.esize:
            bad(f"byte stride {self.strides[0]} of dimension 1 is less than dimension 0's "
                f"{self.dims[0]} x {self.esize} bytes")
        if any(not 1 <= b <= 256 for b in self.box):
            bad(f"box {self.box}: each 1 to 256 elements")
        if any(b > d for b, d in zip(self.box, self.dims, strict=True)):
            bad(f"box {self.box} is larger than the tensor {self.dims}")
        if any(not 1 <= e <= 8 for e in self.elem_strides or ()):
            bad(f"element strides {self.elem_strides}: each 1 to 8")
        inner = self.box[0] * self.esize
        if not il and inner % 16:
            bad(f"box inner dimension {inner} bytes is not a multiple of 16")
        span = TMAP_SWIZZLE[self.swizzle][1]
        if not il and span and inner > span:
            bad(f"box inner dimension {inner} bytes exceeds the {self.swizzle} swizzle span")
        if self.oob_fill != "none" and not TMAP_DTYPES[self.dtype][2]:
            bad(f"oob_fill '{self.oob_fill}' needs a floating-point dtype (not {self.dtype})")
        end = self.offset + (self.strides[-1] * self.dims[-1] if self.strides else self.dims[0] * self.esize)
        if end > self.buf.nbytes:
            bad(f"the tensor spans {end} bytes, the buffer holds {self.buf.nbytes}")
