"""The SM clock measured inside a kernel, for every run's provenance.

NVML reports the clock it sees when asked (at idle, before and after a run); what the timed
kernels ran at is better measured where they run: one thread per SM spins on a dependent FMA
chain for a few milliseconds and reads ``%clock64`` (SM cycles) and ``%globaltimer`` (ns)
before and after. Cycles per nanosecond x 1000 is the SM clock in MHz on each SM.

The globaltimer is the GPU's own; the host's timer checks it: the same kernel at two lengths,
each launch timed on the host around its synchronous completion, gives cycles per host
second from the difference (the launch overhead, the same in both, cancels). Right after a
sustained tensor-core load, both can read the SM clock above the maximum NVML reports, for tens
of milliseconds (``scripts/clock_check.py`` shows it on the GPU in hand); a reading is suspect
only when the two disagree, or when it is above NVML's maximum with no host reading to confirm it.
"""

from __future__ import annotations

import numpy as np

from gpudissect.arch.target import Target
from gpudissect.device.args import Buf
from gpudissect.device.device import Device
from gpudissect.kernel.build import build_one
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.kernel.timing import STAMP_WORDS

ITERS = 1 << 20  # dependent FMAs per thread: ~7 M cycles, ~4 ms at 2 GHz
HOST_ITERS = (1 << 21, 1 << 23)  # the host-timer check: ~7 and ~30 ms
HOST_TOL = 0.01  # globaltimer and host readings this far apart: the clock reading is suspect
MAX_TOL = 0.01  # a reading this far above NVML's maximum needs the host's confirmation
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


def _launch(dev: Device, cubin: bytes, iters: int):
    n = dev.info.sm_count
    return dev.launch(cubin, "sm_clock", n, 1,
                      [Buf("clock_out", nbytes=n * WORDS * 8, read=True, dtype="u8", zero=True),
                       np.uint32(iters)])


def host_mhz(cycles: tuple[float, float], walls: tuple[float, float]) -> float | None:
    """The SM clock from two launches' median cycles and host wall times (s): the difference
    cancels the launch overhead. None when the two do not differ (a fake device)."""
    dc, dt = cycles[1] - cycles[0], walls[1] - walls[0]
    return round(dc / dt / 1e6, 1) if dc > 0 and dt > 0 else None


def measure_sm_clock(dev: Device, target: Target) -> dict:
    """``{"sm_mhz_kernel": median, "sm_mhz_kernel_min": .., "sm_mhz_kernel_max": .., "sms": n,
    "sm_mhz_host": ..}`` from one block per SM (the host-timer check where it can be made);
    ``{"sm_mhz_kernel_error": why}`` when it cannot be measured."""
    try:
        b = build_one(clock_kernel(target), target.arch, region=False)
        mhz = mhz_per_sm(_launch(dev, b.cubin, ITERS).outputs["clock_out"])
    except Exception as e:  # provenance never stops a run
        return {"sm_mhz_kernel_error": f"{type(e).__name__}: {e}"[:200]}
    if mhz.size == 0:
        return {"sm_mhz_kernel_error": "no SM reported a usable clock/globaltimer pair"}
    out = {"sm_mhz_kernel": round(float(np.median(mhz)), 1),
           "sm_mhz_kernel_min": round(float(mhz.min()), 1),
           "sm_mhz_kernel_max": round(float(mhz.max()), 1), "sms": int(mhz.size),
           "sm_mhz_kernel_method": "clock64 / globaltimer over ~4 ms, one thread per SM"}
    try:
        cycles, walls = [], []
        for n in HOST_ITERS:
            run = _launch(dev, b.cubin, n)
            w = run.outputs["clock_out"].reshape(-1, WORDS).astype(np.int64)
            cycles.append(float(np.median(w[:, 1] - w[:, 0])))
            walls.append(float(run.wall_s[0]))
        host = host_mhz((cycles[0], cycles[1]), (walls[0], walls[1]))
    except Exception as e:  # noqa: BLE001 - the check is extra: its failure is recorded, not raised
        out["sm_mhz_host_error"] = f"{type(e).__name__}: {e}"[:200]
        return out
    if host is not None:
        out["sm_mhz_host"] = host
        out["sm_mhz_host_method"] = ("clock64 over the host's wall time, difference of two launches "
                                     "(~7 and ~30 ms)")
    return out


def clock_flag(clocks: list[dict], nvml_max: float | None) -> str | None:
    """A ``clock-suspect`` flag for in-kernel clock readings (measure_sm_clock) that cannot be
    trusted: globaltimer and host timer disagree, or a reading above NVML's maximum that no host
    reading confirms. None when every reading is sound (above the maximum included, when the
    host confirms it)."""
    for c in clocks:
        k, h = c.get("sm_mhz_kernel"), c.get("sm_mhz_host")
        if not k:
            continue
        if h and abs(k / h - 1) > HOST_TOL:
            return (f"clock-suspect: the SM clock from clock64 / globaltimer ({k:.0f} MHz) disagrees "
                    f"with clock64 over the host's timer ({h:.0f} MHz)")
        if not h and nvml_max and k > (1 + MAX_TOL) * nvml_max:
            return (f"clock-suspect: the SM clock measured in a kernel ({k:.0f} MHz) is above the maximum "
                    f"NVML reports ({nvml_max:.0f} MHz) and no host-timer reading confirms it")
    return None


def above_max(clocks: list[dict], nvml_max: float | None) -> str | None:
    """A note when confirmed in-kernel readings are above NVML's maximum SM clock."""
    seen = [c["sm_mhz_kernel"] for c in clocks if c.get("sm_mhz_kernel") and c.get("sm_mhz_host")]
    if not (nvml_max and seen) or max(seen) <= (1 + MAX_TOL) * nvml_max:
        return None
    return (f"SM clock {max(seen):.0f} MHz measured in a kernel, above the {nvml_max:.0f} MHz NVML "
            "reports as the maximum, confirmed by the host's timer")


# ----------------------------------------------------------------- the clock of a long launch
# A timing kernel run for a long time (a sustained tensor-core run) measures the SM clock it ran
# at itself: the block stamps of kernel/timing.py (stamp_ptx: thread 0 of each block reads the
# 32-bit %clock and %globaltimer before and after the whole repetition loop, outside every timed
# region). Cycles over nanoseconds of the whole loop is the clock its SM ran at; the 32-bit clock
# wraps every 2^32 cycles (about 2 s), which the elapsed globaltimer and a rough clock undo.
WRAP = 1 << 32


def unwrap_cycles(cycles_mod: np.ndarray, ns: np.ndarray, mhz_hint: float | None) -> np.ndarray:
    """Cycles elapsed from their value modulo 2^32 (the 32-bit clock's difference): the wraps that
    the elapsed ``ns`` at about ``mhz_hint`` imply are added back (none without a hint)."""
    c = np.asarray(cycles_mod, dtype=np.int64) % WRAP
    if not mhz_hint:
        return c
    wraps = np.round((np.asarray(ns, dtype=float) * mhz_hint / 1000.0 - c) / WRAP).astype(np.int64)
    return c + np.maximum(wraps, 0) * WRAP


def stamp_clock(words: np.ndarray, mhz_hint: float | None = None) -> dict:
    """The SM clock of a long launch from its blocks' stamps (:func:`stamp_ptx`): per block cycles
    / ns x 1000 (MHz), the median over each SM's blocks, then the median, min and max over the
    SMs. ``{"error": why}`` when no block wrote a usable pair."""
    w = np.asarray(words).reshape(-1, STAMP_WORDS).astype(np.int64)
    ns = w[:, 3] - w[:, 2]
    ok = (w[:, 2] > 0) & (w[:, 3] > 0) & (ns > 0)
    if not ok.any():
        return {"error": "no block wrote a usable clock / globaltimer pair"}
    w, ns = w[ok], ns[ok]
    cycles = unwrap_cycles(w[:, 1] - w[:, 0], ns, mhz_hint)
    mhz = cycles * 1000.0 / ns
    per_sm = np.array([float(np.median(mhz[w[:, 4] == s])) for s in np.unique(w[:, 4])])
    return {"median": round(float(np.median(per_sm)), 1), "min": round(float(per_sm.min()), 1),
            "max": round(float(per_sm.max()), 1), "sms": int(per_sm.size), "blocks": int(mhz.size),
            "span_ms": round(float(np.median(ns)) / 1e6, 3), "cycles_median": float(np.median(cycles)),
            "method": "32-bit clock / globaltimer of thread 0 of each block, before and after the "
                      "whole repetition loop (outside the timed regions); median over each SM's blocks"}


CLOCK_TOL = 0.03  # in-kernel and implied clocks this far apart: the method is wrong somewhere


def clock_disagreement(in_kernel: float | None, implied: float | None, tol: float = CLOCK_TOL) -> str | None:
    """A ``clock-disagrees`` flag when the clock measured in the sustained kernel and the one its
    rates imply (instructions per second over the launch / per cycle of its last repetitions) are
    more than ``tol`` apart: not the hardware, the method (the last repetitions are not the whole
    run, or the launch's time is not the loop's)."""
    if not (in_kernel and implied) or abs(implied / in_kernel - 1) <= tol:
        return None
    return (f"clock-disagrees: {in_kernel:.0f} MHz measured in the sustained kernel, {implied:.0f} MHz "
            f"implied by its rates ({implied / in_kernel - 1:+.1%}; tolerance {tol:.0%})")
