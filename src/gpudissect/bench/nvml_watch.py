"""What NVML saw while a long kernel ran: a background thread of the host process polls the
GPU every ``PERIOD_S`` (power draw, SM clock, the clock event ("throttle") reasons, temperature)
and :func:`summarize` reduces the samples to what a sustained result carries beside its rate:
median and maximum power, the lowest and the median SM clock, the reasons seen, the highest
temperature.

NVML reports what the driver sees at the moment it is asked (its power reading is itself an
average over a short window); the rate of a sustained run is the kernel's own, and its SM
clock is measured inside that kernel (bench/clock.py). These samples say why the clock was
where it was: power capping, thermal slowdown, none.

Never fails a measurement: without NVML (no binding, no driver, a fake device) the summary
says ``"unknown"`` and why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PERIOD_S = 0.015  # between two polls (each poll is four NVML calls, well under a millisecond)
# the bits of nvmlClocksEventReasons (NVML's ``nvmlClocksThrottleReason*`` / ``nvmlClocksEventReason*``
# constants, nvml.h): the API's definition, the same on every GPU
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
UNKNOWN = "unknown"


def reason_names(mask: int | None) -> list[str]:
    """The names of the bits set in an NVML clock event reasons mask (an unknown bit by its
    value); [] for 0 (no reason: the clock is where the boost policy puts it)."""
    if not mask:
        return []
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return names + ([f"bit_{rest:#x}"] if rest else [])


def summarize(samples: list[dict], why_none: str | None = None) -> dict:
    """The samples of one run (``{"t", "power_w", "sm_mhz", "reasons", "temp_c"}``, any field
    absent) reduced: ``{"samples", "power_w_median", "power_w_max", "sm_mhz_min",
    "sm_mhz_median", "reasons_seen", "temp_c_max", "period_ms"}``; ``{"status": "unknown",
    "why": ...}`` without samples."""
    if not samples:
        return {"status": UNKNOWN, "why": why_none or "no NVML sample"}

    def col(key: str) -> np.ndarray:
        return np.array([s[key] for s in samples if isinstance(s.get(key), (int, float))], dtype=float)

    out: dict[str, Any] = {"status": "sampled", "samples": len(samples)}
    power, mhz, temp = col("power_w"), col("sm_mhz"), col("temp_c")
    if power.size:
        out.update(power_w_median=round(float(np.median(power)), 1), power_w_max=round(float(power.max()), 1))
    if mhz.size:
        out.update(sm_mhz_min=float(mhz.min()), sm_mhz_median=float(np.median(mhz)))
    if temp.size:
        out["temp_c_max"] = float(temp.max())
    masks = [s["reasons"] for s in samples if isinstance(s.get("reasons"), int)]
    if masks:
        seen: dict[str, int] = {}
        for m in masks:
            for name in reason_names(m):
                seen[name] = seen.get(name, 0) + 1
        out["reasons_seen"] = sorted(seen)
        out["reasons_share"] = {k: round(v / len(masks), 3) for k, v in sorted(seen.items())}
    ts = [s["t"] for s in samples if isinstance(s.get("t"), (int, float))]
    if len(ts) > 1:
        out["period_ms"] = round(float(np.median(np.diff(ts))) * 1e3, 2)
    return out


def _nvml_poll(index: int) -> tuple[Callable[[], dict] | None, str | None]:
    """A function that reads one sample of GPU ``index`` through NVML, or None and why not."""
    try:
        import pynvml as nv
    except ImportError:
        return None, "nvidia-ml-py not installed"
    try:
        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as e:  # noqa: BLE001 - no driver, no such GPU: recorded as unknown
        return None, f"NVML: {e}"[:200]
    reasons = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    sm = getattr(nv, "NVML_CLOCK_SM", 1)
    temp = getattr(nv, "NVML_TEMPERATURE_GPU", 0)

    def poll() -> dict:
        s: dict[str, Any] = {"t": time.perf_counter()}
        for key, call in (("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                          ("sm_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, sm)),
                          ("reasons", (lambda: int(reasons(h))) if reasons else None),
                          ("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, temp))):
            if call is None:
                continue
            try:
                s[key] = call()
            except Exception:  # noqa: BLE001 - a field this GPU or binding lacks: left out
                pass
        return s

    return poll, None


class Watch:
    """``with Watch(index) as w: <launch>``, then ``w.summary()``. ``poll``: a sampler of one
    reading (tests; default NVML of GPU ``index``); ``skip``: why not to sample at all (a fake
    device: the NVML of whatever GPU the host has would describe some other kernel)."""

    def __init__(self, index: int = 0, period_s: float = PERIOD_S, poll: Callable[[], dict] | None = None,
                 skip: str | None = None):
        self.period_s = period_s
        self.samples: list[dict] = []
        self.why: str | None = skip
        self._poll = poll
        if poll is None and skip is None:
            self._poll, self.why = _nvml_poll(index)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        assert self._poll is not None
        while True:
            try:
                self.samples.append(self._poll())
            except Exception as e:  # noqa: BLE001 - sampling never stops the measurement
                self.why = f"NVML poll failed: {e}"[:200]
                return
            if self._stop.wait(self.period_s):
                return

    def __enter__(self) -> Watch:
        if self._poll is not None and self.why is None:
            self._thread = threading.Thread(target=self._run, name="nvml-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def summary(self) -> dict:
        return summarize(self.samples, self.why)


def watch_for(dev: Any) -> Watch:
    """A :class:`Watch` of the GPU behind ``dev`` (none for a fake device)."""
    info = getattr(dev, "info", None)
    fake = bool(((getattr(info, "platform", None) or {}).get("fake")) or type(dev).__name__.startswith(
        ("Fake", "Scripted")))
    return Watch(int(getattr(info, "index", 0) or 0), skip="fake device: no NVML of it" if fake else None)
