"""How the report, the timing reference and the comparisons print numbers.

Formatting only: every function here changes how a value reads (units, significant digits,
dates), never the value itself.
"""

from __future__ import annotations

import datetime as _dt

BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
# keys of the suites' documents whose numbers are byte counts, and Unix times (raw dumps)
BYTE_KEYS = frozenset({"bytes", "footprint", "smem", "reach_bytes", "bracket", "x_below", "x_above",
                       "x_first", "x_last", "hot_footprint", "sweep_min", "sweep_max", "warm_cap",
                       "tlb_spacing", "tlb_max", "bw_bytes", "stride_bytes"})
TIME_KEYS = frozenset({"time", "started", "finished"})
EPOCH_MIN = 1e8  # a Unix time after 1973: smaller numbers under a time key are not timestamps


def fmt_num(v, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.{digits}g}" if abs(v) < 1e5 else f"{v:.4e}"
    return str(v)


def fmt_sig(v, digits: int = 4) -> str:
    """``v`` to ``digits`` significant digits and never with an exponent: 43529.1 -> '43529',
    0.01563 -> '0.01563' (an integer part longer than ``digits`` is kept whole)."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return fmt_num(v)
    if float(v).is_integer() or abs(v) >= 10 ** digits:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def fmt_bytes(n, digits: int = 4) -> str:
    """A byte count in binary units: 262144 -> '256 KiB', 23726592 -> '22.63 MiB'."""
    if n is None or isinstance(n, bool) or not isinstance(n, (int, float)) or n != n:
        return fmt_num(n)
    v, unit = float(n), BINARY_UNITS[0]
    for unit in BINARY_UNITS:
        if abs(v) < 1024 or unit == BINARY_UNITS[-1]:
            break
        v /= 1024
    return f"{fmt_sig(v, digits)} {unit}"


def fmt_bandwidth(gb_s, digits: int = 4) -> str:
    """A bandwidth given in GB/s (10^9 bytes/s): TB/s from 1000 GB/s up."""
    if gb_s is None or isinstance(gb_s, bool) or not isinstance(gb_s, (int, float)):
        return fmt_num(gb_s)
    if abs(gb_s) >= 1000:
        return f"{fmt_sig(gb_s / 1000, digits)} TB/s"
    return f"{fmt_sig(float(gb_s), digits)} GB/s"


def fmt_tera(v, unit: str, digits: int = 4) -> str:
    """A rate already in units of 10^12 per second (TFLOP/s, TOP/s, TB/s) with its unit."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return fmt_num(v)
    return f"{fmt_sig(float(v), digits)} {unit}"


def fmt_timestamp(t) -> str:
    """A Unix time as an ISO date and time in UTC: '2026-11-23 21:31:54 UTC'; '-' if not one."""
    try:
        return _dt.datetime.fromtimestamp(float(t), _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "-"


def fmt_seconds(s, digits: int = 3) -> str:
    if s is None or isinstance(s, bool) or not isinstance(s, (int, float)):
        return fmt_num(s)
    return f"{fmt_sig(float(s), digits)} s"


def fmt_quantity(v, unit: str | None, digits: int = 4) -> tuple[str, str]:
    """(value, unit) as a reader wants them: byte counts in KiB/MiB/GiB, GB/s as TB/s from
    1000 up, anything else as :func:`fmt_num` with the unit unchanged."""
    unit = unit or ""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
        if unit in ("bytes", "B"):
            text, u = fmt_bytes(v, digits).split(" ", 1)
            return text, u
        if unit == "GB/s":
            text, u = fmt_bandwidth(v, digits).split(" ", 1)
            return text, u
    return fmt_num(v, digits), unit


def fmt_keyed(key: str, v):
    """A number of a raw document dump, read by its key: Unix times as dates, byte counts in
    binary units, seconds with 's'; other values as :func:`fmt_num`."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return fmt_num(v)
    k = str(key)
    if k in TIME_KEYS and v > EPOCH_MIN:
        return fmt_timestamp(v)
    if k in BYTE_KEYS or k.endswith(("_bytes", "footprint")):
        return fmt_bytes(v)
    if k == "GB/s":
        return fmt_bandwidth(v)
    if k.endswith("_s"):
        return fmt_seconds(v)
    return fmt_num(v)


def home_note(params: dict | None) -> str:
    """What every view says beside a record timed at several placements of its global target
    whose times fell into two levels (the instruction suite's ``placement.py``: ``far_home``,
    ``far_share``): the value is the near L2 home's, the far home's beside it; "" otherwise."""
    far = (params or {}).get("far_home")
    if far is None:
        return ""
    share = (params or {}).get("far_share")
    return f"near L2 home; far {far:.4g}" + (f" at {share:.0%} of placements" if share is not None else "")
