"""The instruction suite's stated conclusions (issue 22), computed from a run's records (stored
rows or exported records alike): its studies' (value-dependent latency: studies/value_classes.py)
and the core's, signed against unsigned forms of the same instruction (seed 000, conclusion 2:
"except for bfind, min and max there is no difference in clock cycles or mapping between a
signed and an unsigned instruction").

Nothing is hard-coded: a pair is two catalog variants whose names differ only in ``s<N>`` against
``u<N>`` type tokens; their SASS is the verified map's, their numbers the run's. Two numbers are
"the same" when their difference lies within its 95% interval, from the records' own repeats
(records.py :func:`~gpudissect.suites.instructions.records.uncertainty`: ``robust_halfwidth`` of
the per-repeat slopes or rates, floored at the clock's resolution, one cycle over the span of the
chain lengths); a pair where either record has no repeats is undetermined (None), not guessed.
"""

from __future__ import annotations

import math
import re

from gpudissect.suites.instructions.core import VariantStudy
from gpudissect.suites.instructions.records import RESOLUTION, index, same_within, uncertainty

BAD = ("noisy", "poor-fit", "not timed", "error", "sass:", "includes companion", "not-saturated")
_SIGNED = re.compile(r"^([su])(\d+)$")
_SIGN_MOD = re.compile(r"\.(U32|S32|U64|S64|U16|S16|U8|S8)\b")


def _clean(r: dict) -> bool:
    return r.get("value") is not None and not any(str(f).startswith(BAD) for f in r.get("flags") or [])


def signed_partner(name: str) -> str | None:
    """The unsigned partner of a signed variant name (every ``s<N>`` token -> ``u<N>``), or None
    when the name has no signed type token."""
    parts = name.split(".")
    out = [("u" + m[2]) if (m := _SIGNED.match(p)) and m[1] == "s" else p for p in parts]
    return ".".join(out) if out != parts else None


def _sass_relation(a: list[str], b: list[str]) -> str:
    if sorted(a) == sorted(b):
        return "identical SASS"
    strip = [sorted(_SIGN_MOD.sub("", x) for x in s) for s in (a, b)]
    if strip[0] == strip[1]:
        return "same SASS but for a signedness modifier"
    return "different SASS"


def _compare(a: dict | None, b: dict | None, idx: dict) -> tuple[bool | None, list[float | None], bool]:
    """(the same?, the two 95% half-widths, undetermined for want of a spread) of two records;
    the verdict None when either is missing or not clean, or has no interval."""
    if not (a and b and _clean(a) and _clean(b)):
        return None, [None, None], False
    ua, ub = uncertainty(a, idx), uncertainty(b, idx)
    same = same_within(a["value"], ua, b["value"], ub)
    return same, [ua, ub], same is None


def signedness(records: list[dict]) -> list[dict]:
    """One row per signed/unsigned pair with both variants' latency and peak throughput in the
    records: the SASS relation, and whether latency and throughput agree within the 95% interval
    of their difference (None: not both clean, or one has no spread: ``undetermined`` names it)."""
    by: dict[str, dict[str, dict]] = {}
    for r in records:
        if r.get("measure") in ("latency", "throughput_peak"):
            by.setdefault(r["variant"], {})[r["measure"]] = r
    idx = index(records)
    rows = []
    for s_name in sorted(by):
        u_name = signed_partner(s_name)
        if u_name is None or u_name not in by:
            continue
        s, u = by[s_name], by[u_name]
        ls, lu = s.get("latency"), u.get("latency")
        ts, tu = s.get("throughput_peak"), u.get("throughput_peak")
        sass_s = list((ls or ts or {}).get("sass") or [])
        sass_u = list((lu or tu or {}).get("sass") or [])
        if not (sass_s and sass_u):
            continue
        lat_same, lat_hw, lat_und = _compare(ls, lu, idx)
        tp_same, tp_hw, tp_und = _compare(ts, tu, idx)
        rows.append({"signed": s_name, "unsigned": u_name, "sass": _sass_relation(sass_s, sass_u),
                     "sass_signed": sass_s, "sass_unsigned": sass_u,
                     "latency": [ls and ls.get("value"), lu and lu.get("value")], "latency_same": lat_same,
                     "latency_halfwidth_95": lat_hw,
                     "throughput": [ts and ts.get("value"), tu and tu.get("value")], "throughput_same": tp_same,
                     "throughput_halfwidth_95": tp_hw,
                     "undetermined": [m for m, x in (("latency", lat_und), ("throughput", tp_und)) if x]})
    return rows


def signedness_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    rel: dict[str, int] = {}
    for r in rows:
        rel[r["sass"]] = rel.get(r["sass"], 0) + 1

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3g}"

    def part(key: str, what: str) -> str:
        done = [r for r in rows if r[f"{key}_same"] is not None]
        diff = [r for r in done if not r[f"{key}_same"]]
        und = [r for r in rows if key in (r.get("undetermined") or [])]
        txt = f"{what} the same (the difference within its 95% interval) in {len(done) - len(diff)} of {len(done)} pairs"
        if diff:
            txt += ": differ " + ", ".join(
                f"{r['signed']} {num(r[key][0])} vs {r['unsigned']} {num(r[key][1])}"
                f" (+-{num(math.hypot(*r[f'{key}_halfwidth_95']))})" for r in diff)
        if und:
            txt += f"; undetermined (no repeats to give a spread) in {len(und)}"
        return txt

    out = [f"signed vs unsigned: {len(rows)} pairs of variants; "
           + ", ".join(f"{n} {k}" for k, n in sorted(rel.items()))
           + "; " + part("latency", "latency") + "; " + part("throughput", "peak throughput")
           + f" (each interval at least {RESOLUTION})"]
    diff = [r for r in rows if r["sass"] == "different SASS"]
    if diff:
        out.append("signed and unsigned map to different SASS: " + "; ".join(
            f"{r['signed']} ({' + '.join(r['sass_signed'])}) vs {r['unsigned']} ({' + '.join(r['sass_unsigned'])})"
            for r in diff[:12]) + (" ..." if len(diff) > 12 else ""))
    eq = next((r for r in rows if r["signed"].startswith("setp.eq.")), None)
    if eq:
        out.append(f"equality: {eq['signed']} ({' + '.join(eq['sass_signed'])}) and {eq['unsigned']} "
                   f"({' + '.join(eq['sass_unsigned'])}): {eq['sass']}; latency {num(eq['latency'][0])} vs "
                   f"{num(eq['latency'][1])} cycles, throughput {num(eq['throughput'][0])} vs "
                   f"{num(eq['throughput'][1])} warp-instr/cycle/SM")
    return out


def summarize(records: list[dict], studies: tuple[VariantStudy, ...]) -> dict:
    """The suite's summary: its conclusions (each study's, then signed against unsigned) and the
    tables behind them."""
    sign = signedness(records)
    out = {"conclusions": [line for s in studies for line in s.conclusions(records)] + signedness_lines(sign),
           "signedness": sign}
    for s in studies:
        out.update(s.tables(records))
    return out
