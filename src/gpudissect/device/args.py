"""The kernel arguments of a generic launch (``Device.launch``, ``device.py``) that stand for
device memory: a buffer (:class:`Buf`) and a texture object over one (:class:`Tex`). Plain
records, needing no GPU; a tensor map over a buffer is ``tensormap.TensorMap``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Buf:
    """A device-buffer kernel argument of the generic :meth:`Device.launch` (picklable, so a
    launch can be forwarded to a worker process).

    ``data`` is copied to the device before the first launch (else the buffer is zero-filled
    once, when ``zero`` is set); ``read`` copies it back after the last launch as ``dtype``.
    Buffers are device memory of their own for each name and reused (grown on demand) across
    launches of one device, so a large buffer is only uploaded when new ``data`` comes."""

    name: str
    nbytes: int = 0
    data: np.ndarray | None = None
    read: bool = False
    dtype: str = "u8"
    zero: bool = False

    def __post_init__(self) -> None:
        if self.data is not None:
            self.data = np.ascontiguousarray(self.data)
            self.nbytes = max(self.nbytes, int(self.data.nbytes))
        if self.nbytes <= 0:
            raise ValueError(f"buffer '{self.name}' has no size")


# Element formats of texture objects: numpy dtype and CUarray_format member (one channel)
TEX_FORMATS = {"u8": ("u1", "CU_AD_FORMAT_UNSIGNED_INT8"), "u16": ("u2", "CU_AD_FORMAT_UNSIGNED_INT16"),
               "u32": ("u4", "CU_AD_FORMAT_UNSIGNED_INT32")}
TEX1D_LINEAR_MAX_WIDTH = 1 << 27  # elements: CUDA's limit for every compute capability it lists (Programming Guide, technical specifications: 1D texture object bound to linear memory, 2^27); the fallback where the driver is not asked


@dataclass
class Tex:
    """A texture-object kernel argument (picklable): a 1D texture over the linear device
    buffer ``buf`` (one channel of ``fmt`` integers, read as integers, point sampling; a fetch
    outside the texture returns 0). ``buf`` is allocated, uploaded and (``read``) copied back
    like a :class:`Buf` argument (its own memory, aligned for textures); the kernel gets the
    texture object handle as a ``.u64`` parameter (unified texture mode)."""

    buf: Buf
    fmt: str = "u32"

    def __post_init__(self) -> None:
        if self.fmt not in TEX_FORMATS:
            raise ValueError(f"texture format '{self.fmt}': one of {', '.join(TEX_FORMATS)}")
        if self.buf.nbytes % self.itemsize:
            raise ValueError(f"texture over '{self.buf.name}': {self.buf.nbytes} B is not a "
                             f"whole number of {self.fmt} elements")

    @property
    def itemsize(self) -> int:
        return np.dtype(TEX_FORMATS[self.fmt][0]).itemsize

    @property
    def width(self) -> int:
        return self.buf.nbytes // self.itemsize

    def check_width(self, max_width: int) -> None:
        if self.width > max_width:
            raise ValueError(f"texture over '{self.buf.name}': {self.width} elements exceed the "
                             f"device's 1D linear texture width ({max_width} elements): refused")
