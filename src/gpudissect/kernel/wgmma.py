"""wgmma's shared-memory operands: the 64-bit matrix descriptor (PTX ISA, "Matrix Descriptor
Format") and the K-major f16 tiles that real kernels feed it, in every swizzle mode (the tile
constants, the leading and stride byte offsets, the descriptor of each K step, and the PTX that
builds those descriptors in registers). Shared by the tensor suite, the async suite's wgmma
feed and the predictor's tensor loops."""

from __future__ import annotations

# K-major, no swizzle: core matrices of 8 rows x 16 bytes; K extent is 32 bytes for every
# dense type (16 f16, 8 tf32, 32 fp8/int8, 256 b1) = 2 core matrices along K. Sparse wgmma:
# A holds K/2 (32 bytes again), B the logical K (64 bytes = 4 core matrices along K).
WG_LBO = 128  # bytes between the core matrices along K
WG_SBO = 256  # bytes between core matrices along M/N (8 rows) of a 32-byte K extent


def wg_sbo(k_bytes: int) -> int:
    """Bytes between 8-row groups along M/N of a tile whose rows hold ``k_bytes`` along K."""
    return 8 * max(k_bytes, 32)


def descriptor(addr_bytes: int, lbo: int = WG_LBO, sbo: int = WG_SBO, swizzle: int = 0) -> int:
    """The 64-bit wgmma matrix descriptor (seed 004): start address, leading and stride byte
    offsets encoded as (x & 0x3FFFF) >> 4, swizzle mode in bits 62-63."""
    enc = lambda x: (x & 0x3FFFF) >> 4  # noqa: E731
    return enc(addr_bytes) | (enc(lbo) << 16) | (enc(sbo) << 32) | ((swizzle & 3) << 62)


# swizzle mode -> (descriptor layout type, atom width in bytes): PTX ISA matrix descriptor
SWIZZLES: dict[str, tuple[int, int]] = {"none": (0, 16), "32B": (3, 32), "64B": (2, 64), "128B": (1, 128)}
M_WG = 64  # rows of A per warpgroup
K_TILE = 64  # f16 elements of K per tile row (128 bytes)
ROW_BYTES = 2 * K_TILE
K_STEP_BYTES = 32  # one wgmma's K (16 f16)
K_STEPS = ROW_BYTES // K_STEP_BYTES  # wgmma per tile
A_TILE = M_WG * ROW_BYTES  # bytes of a 64-row A tile


def atom(swizzle: str) -> int:
    return SWIZZLES[swizzle][1]


def lbo_sbo(swizzle: str, rows: int) -> tuple[int, int]:
    """(leading, stride) byte offsets of a K-major tile of ``rows`` rows in this layout."""
    w = atom(swizzle)
    if swizzle == "none":
        return rows * 16, 8 * 16
    return 16, 8 * w


def kstep_offset(swizzle: str, rows: int, kk: int) -> int:
    """Bytes from a tile's start to where the descriptor of its K step ``kk`` starts."""
    w = atom(swizzle)
    j, within = divmod(kk * K_STEP_BYTES, w)
    return j * rows * w + within


def feed_descriptor(swizzle: str, rows: int, addr: int = 0, kk: int = 0) -> int:
    """The wgmma matrix descriptor of K step ``kk`` of a tile at shared address ``addr``."""
    lbo, sbo = lbo_sbo(swizzle, rows)
    return descriptor(addr + kstep_offset(swizzle, rows, kk), lbo, sbo, SWIZZLES[swizzle][0])


def desc_regs(prefix: str, base: str, swizzle: str, rows: int) -> list[str]:
    """u64 descriptors ``{prefix}0..3`` of the K steps of a tile at the u32 shared address in
    register ``base``."""
    out = [f"  cvt.u64.u32 {prefix}0, {base};", f"  shr.u64 {prefix}0, {prefix}0, 4;",
           f"  and.b64 {prefix}0, {prefix}0, 16383;", f"  or.b64 {prefix}0, {prefix}0, {feed_descriptor(swizzle, rows)};"]
    for kk in range(1, K_STEPS):
        out.append(f"  add.s64 {prefix}{kk}, {prefix}0, {kstep_offset(swizzle, rows, kk) >> 4};")
    return out
