"""How the report, the timing reference and the comparisons print numbers."""

from __future__ import annotations


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
