"""The SM clock measured inside a kernel, for every run's provenance.

NVML reports the clock it sees when asked (at idle, before and after a run); what the timed
kernels ran at is better measured where they run: one thread per SM spins on a dependent FMA
chain for a few milliseconds and reads ``%clock64`` (SM cycles) and ``%globaltimer`` (ns)
before and after. Cycles per nanosecond x 1000 is the SM clock in MHz on each SM.
"""

from __future__ import annotations

import numpy as np

from gpudissect.device.device import Buf, Device
from gpudissect.kernel.build import build_one
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.target import Target

ITERS = 1 << 20  # dependent FMAs per thread: ~4 M cycles, ~2 ms at 2 GHz
WORDS = 5  # per SM: clock0, clock1, globaltimer0, globaltimer1, (smid, the chain's value)

_ENTRY = """\
.visible .entry sm_clock(.param .u64 out, .param .u32 iters)
{
    .reg .u64 %o, %c0, %c1, %g0, %g1, %x;
    .reg .u32 %n, %s;
    .reg .f32 %f;
    .reg .pred %p;
    ld.param.u64 %o, [out];
    cvta.to.global.u64 %o, %o;
    ld.param.u32 %n, [iters];
    mov.u32 %s, %ctaid.x;
    mul.wide.u32 %x, %s, 40;
    add.u64 %o, %o, %x;
    mov.f32 %f, 0f3F800000;
    mov.u64 %g0, %globaltimer;
    mov.u64 %c0, %clock64;
L:
    fma.rn.f32 %f, %f, 0f3F7FFFFE, 0f33800000;
    sub.u32 %n, %n, 1;
    setp.ne.u32 %p, %n, 0;
    @%p bra L;
    mov.u64 %c1, %clock64;
    mov.u64 %g1, %globaltimer;
    st.global.u64 [%o], %c0;
    st.global.u64 [%o+8], %c1;
    st.global.u64 [%o+16], %g0;
    st.global.u64 [%o+24], %g1;
    mov.u32 %s, %smid;
    st.global.u32 [%o+32], %s;
    st.global.f32 [%o+36], %f;
    ret;
}
"""


def clock_kernel(target: Target) -> Kernel:
    return Kernel("sm_clock", ptx_header(target.ptx_isa, target.arch), _ENTRY, measure="clock")


def mhz_per_sm(words: np.ndarray) -> np.ndarray:
    """(blocks, 5) u64 words -> the SM clock (MHz) each block saw."""
    w = words.reshape(-1, WORDS).astype(np.int64)
    cycles = w[:, 1] - w[:, 0]
    ns = w[:, 3] - w[:, 2]
    ok = (ns > 0) & (cycles > 0)
    return cycles[ok] * 1000.0 / ns[ok]


def measure_sm_clock(dev: Device, target: Target) -> dict:
    """``{"sm_mhz_kernel": median, "sm_mhz_kernel_min": .., "sm_mhz_kernel_max": .., "sms": n}``
    from one block per SM; ``{"sm_mhz_kernel_error": why}`` when it cannot be measured."""
    try:
        b = build_one(clock_kernel(target), target.arch, region=False)
        n = dev.info.sm_count
        run = dev.launch(b.cubin, "sm_clock", n, 1,
                         [Buf("clock_out", nbytes=n * WORDS * 8, read=True, dtype="u8", zero=True),
                          np.uint32(ITERS)])
        mhz = mhz_per_sm(run.outputs["clock_out"])
    except Exception as e:  # provenance never stops a run
        return {"sm_mhz_kernel_error": f"{type(e).__name__}: {e}"[:200]}
    if mhz.size == 0:
        return {"sm_mhz_kernel_error": "no SM reported a usable clock/globaltimer pair"}
    return {"sm_mhz_kernel": round(float(np.median(mhz)), 1),
            "sm_mhz_kernel_min": round(float(mhz.min()), 1),
            "sm_mhz_kernel_max": round(float(mhz.max()), 1), "sms": int(mhz.size),
            "sm_mhz_kernel_method": "clock64 / globaltimer over ~2 ms, one thread per SM"}
