"""A synthetic GPU for the bandwidth stream kernels (``suites/memory/stream_kernels.py``): what
their warps would write, (t0, t1, g0, g1, smid, sink) per warp, for a rate model in bytes
per cycle per SM, at a 1 GHz SM clock (cycles = ns). Used by the GPU-free tests."""

from __future__ import annotations

import numpy as np

from gpudissect.suites.memory import stream_kernels as sk

PREFIX = sk.PREFIX
MHZ = 1000.0


def knee_rate(cap: float = 100.0, per_kib: float = 10.0):
    """Rises with the bytes in flight per SM, flat at ``cap`` B/clk/SM (copy and writes too)."""
    def rate(op: str, bits: int, ilp: int, warps: int, footprint: int) -> float:
        return min(cap, per_kib * warps * sk.chunk_bytes(bits, ilp) / 1024)
    return rate


def outputs(kernel: str, grid: int, block: int, args: list, sms: int, rate=None,
            skew: int = 50) -> dict:
    """The ``bwout`` buffer of one launch: every SM's warps stream together, each SM's region
    lasts its bytes / the model's rate; SM s starts ``s * skew`` ns late."""
    rate = rate or knee_rate()
    op, bits, ilp = sk.parse_name(kernel)
    trips, passes = int(args[3]), int(args[4])
    per_dir = 2 if op == "cpcg" else 1
    wpb = block // 32
    warps = grid * wpb
    per_warp = per_dir * trips * sk.chunk_bytes(bits, ilp) * passes
    sm = np.repeat(np.arange(grid) % sms, wpb)
    warps_per_sm = warps // sms
    footprint = int(args[0].nbytes)
    cycles = per_warp * warps_per_sm / rate(op, bits, ilp, warps_per_sm, footprint)
    out = np.zeros((warps, sk.OUT_WORDS), dtype=np.uint64)
    start = 1000 + sm * skew
    out[:, 0] = start
    out[:, 1] = start + int(round(cycles))
    out[:, 2] = (start * 1000 / MHZ).astype(np.uint64)
    out[:, 3] = ((start + cycles) * 1000 / MHZ).astype(np.uint64)
    out[:, 4] = sm
    return {"bwout": out.reshape(-1)}
