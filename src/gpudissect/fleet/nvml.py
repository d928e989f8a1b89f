"""A GPU's evidence for the fleet's outlier table, through NVML where it is available: clocks,
temperature, power and clock event ("throttle") reasons sampled while the GPU runs its suites,
and its health counters (ECC errors, retired pages, remapped rows) after them. Every query that
NVML refuses is left out and named under ``unavailable``; nothing is guessed."""

from __future__ import annotations

import statistics
import threading
import time


def _nvml():
    import pynvml as nv

    nv.nvmlInit()
    return nv


def decode_reasons(mask: int, names: dict[str, int]) -> list[str]:
    """The names of the reason bits set in ``mask`` (unknown bits as hex)."""
    out = [n for n, bit in names.items() if mask & bit]
    rest = mask & ~sum(names.values())
    return out + ([hex(rest)] if rest else [])


def sample(index: int) -> dict:
    """One reading: SM clock, temperature, power and the clock event reasons mask."""
    nv = _nvml()
    h = nv.nvmlDeviceGetHandleByIndex(index)
    out = {"t": time.time(), "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
           "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
           "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0}
    get = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    out["reasons"] = int(get(h))
    return out


def health(index: int) -> dict:
    """ECC error counts (volatile and aggregate, corrected and uncorrected), retired pages and
    remapped rows: each where NVML gives it."""
    out: dict = {"unavailable": []}
    try:
        nv = _nvml()
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as e:  # no NVML at all
        return {"unavailable": [f"nvml: {type(e).__name__}: {e}"]}
    queries = {
        "ecc_volatile_corrected": lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
        "ecc_volatile_uncorrected": lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
        "ecc_aggregate_corrected": lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
        "ecc_aggregate_uncorrected": lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
        "retired_pages_single_bit": lambda: len(nv.nvmlDeviceGetRetiredPages(
            h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)),
        "retired_pages_double_bit": lambda: len(nv.nvmlDeviceGetRetiredPages(
            h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)),
        "remapped_rows": lambda: dict(zip(("correctable", "uncorrectable", "pending", "failure"),
                                          (int(x) for x in nv.nvmlDeviceGetRemappedRows(h)), strict=False)),
    }
    for name, q in queries.items():
        try:
            out[name] = q()
        except Exception as e:  # not supported on this GPU or driver
            out["unavailable"].append(f"{name}: {type(e).__name__}")
    return out


def summarize(samples: list[dict], names: dict[str, int]) -> dict:
    """Samples -> the SM clock's min/median/max, the hottest temperature, the highest power, and
    for each clock event reason the fraction of samples it was active in."""
    if not samples:
        return {"samples": 0}
    mhz = [s["sm_mhz"] for s in samples]
    seen: dict[str, int] = {}
    for s in samples:
        for r in decode_reasons(s["reasons"], names):
            seen[r] = seen.get(r, 0) + 1
    return {"samples": len(samples), "span_s": samples[-1]["t"] - samples[0]["t"],
            "sm_mhz": {"min": min(mhz), "median": statistics.median(mhz), "max": max(mhz)},
            "temp_c_max": max(s["temp_c"] for s in samples),
            "power_w_max": max(s["power_w"] for s in samples),
            "throttle_reasons": {r: n / len(samples) for r, n in sorted(seen.items())}}


class Sampler:
    """NVML readings of GPU ``index`` every ``period_s`` in a daemon thread (host-side queries
    only: nothing runs on the GPU), until :meth:`stop`."""

    def __init__(self, index: int, period_s: float, names: dict[str, int]):
        self.index, self.period_s, self.names = index, period_s, names
        self.samples: list[dict] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpudissect-nvml", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(sample(self.index))
            except Exception as e:  # no NVML: say so once, sample nothing
                self.error = f"{type(e).__name__}: {e}"
                return
            self._stop.wait(self.period_s)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(5)
        out = summarize(self.samples, self.names)
        if self.error:
            out["unavailable"] = self.error
        return out
