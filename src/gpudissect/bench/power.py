"""What NVML sees while a long (sustained) run is on the GPU: power draw, SM clock, temperature
and the clock event ("throttle") reasons, polled every ``PERIOD_S`` by a host thread (host-side
queries only: nothing runs on the GPU), summarised for the run's record.

The reason bits are data (``data/fleet.toml`` [throttle_reasons]). Without NVML (no library, no
GPU, a fake device) the summary says ``"unknown"`` and why; it never stops a run.
"""

from __future__ import annotations

import statistics
import threading
import time
import tomllib
from functools import cache
from importlib import resources

PERIOD_S = 0.015  # between readings (NVML's own power reading averages over about this)
UNKNOWN = "unknown"


@cache
def reason_names() -> dict[str, int]:
    """NVML's clock event reason bits by name (data/fleet.toml)."""
    doc = tomllib.loads(resources.files("gpudissect").joinpath("data", "fleet.toml").read_text())
    return {k: int(v) for k, v in doc["throttle_reasons"].items()}


def decode(mask: int, names: dict[str, int] | None = None) -> list[str]:
    """The names of the reason bits set in ``mask``; bits no name covers as one hex value."""
    names = reason_names() if names is None else names
    out = [n for n, bit in names.items() if mask & bit]
    rest = mask & ~sum(names.values())
    return out + ([hex(rest)] if rest else [])


def _reading(nv, h) -> dict:
    get = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return {"t": time.monotonic(), "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "reasons": int(get(h))}


def summarize(samples: list[dict], names: dict[str, int] | None = None, why: str | None = None) -> dict:
    """Readings -> median and max power, min and median SM clock, hottest temperature, the reasons
    seen (each with the share of readings it was set in). No readings: ``"unknown"`` and why."""
    if not samples:
        return {"nvml": UNKNOWN, "why": why or "no reading"}
    power = [s["power_w"] for s in samples]
    mhz = [s["sm_mhz"] for s in samples]
    seen: dict[str, int] = {}
    for s in samples:
        for r in decode(s["reasons"], names):
            seen[r] = seen.get(r, 0) + 1
    return {"nvml": "sampled", "samples": len(samples),
            "span_ms": round((samples[-1]["t"] - samples[0]["t"]) * 1e3, 1),
            "power_w_median": round(statistics.median(power), 1), "power_w_max": round(max(power), 1),
            "sm_mhz_min": min(mhz), "sm_mhz_median": statistics.median(mhz),
            "temp_c_max": max(s["temp_c"] for s in samples),
            "throttle_reasons": sorted(seen),
            "throttle_share": {r: round(n / len(samples), 3) for r, n in sorted(seen.items())},
            **({"why": why} if why else {})}


class Watch:
    """``with Watch(index) as w: <launch>`` then ``w.summary``: NVML readings of GPU ``index``
    every ``period_s`` while the block runs (the whole launch call: its buffer copies too, where
    the GPU may idle; ``throttle_share`` says how many readings a reason was set in). ``index``
    None (a fake device): no readings."""

    def __init__(self, index: int | None, period_s: float = PERIOD_S):
        self.index, self.period_s = index, period_s
        self.samples: list[dict] = []
        self.error: str | None = None if index is not None else "no NVML device (a fake or unknown GPU)"
        self.summary: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self, nv, h) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(_reading(nv, h))
            except Exception as e:  # noqa: BLE001 - a refused query ends the readings, not the run
                self.error = f"{type(e).__name__}: {e}"[:200]
                return
            self._stop.wait(self.period_s)

    def __enter__(self) -> Watch:
        if self.index is None:
            return self
        try:
            import pynvml as nv

            nv.nvmlInit()
            h = nv.nvmlDeviceGetHandleByIndex(self.index)
        except Exception as e:  # noqa: BLE001 - no NVML: the summary says unknown
            self.error = f"{type(e).__name__}: {e}"[:200]
            return self
        self._thread = threading.Thread(target=self._loop, args=(nv, h), name="gpudissect-power",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.summary = summarize(self.samples, why=self.error)


def nvml_index(dev) -> int | None:
    """The NVML index of a device (its ``info.index``), None for a fake one."""
    try:
        if (dev.clocks() or {}).get("fake"):
            return None
    except Exception:  # noqa: BLE001 - no NVML: Watch says unknown
        return None
    idx = getattr(getattr(dev, "info", None), "index", None)
    return idx if isinstance(idx, int) else None
