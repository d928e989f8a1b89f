"""The instruction suite's stated conclusions (issue 22), computed from a run's records (stored
rows or exported records alike): value-dependent latency (values.py) and signed against unsigned
forms of the same instruction (seed 000, conclusion 2: "except for bfind, min and max there is
no difference in clock cycles or mapping between a signed and an unsigned instruction").

Nothing is hard-coded: a pair is two catalog variants whose names differ only in ``s<N>`` against
``u<N>`` type tokens; their SASS is the verified map's, their numbers the run's.
"""

from __future__ import annotations

import re

from gpudissect.suites.instructions import values as value_latency

LAT_SAME = 0.5  # cycles: two latencies closer than this are the same
TP_SAME = 0.02  # relative: two throughputs closer than this are the same
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


def signedness(records: list[dict]) -> list[dict]:
    """One row per signed/unsigned pair with both variants' latency and peak throughput in the
    records: the SASS relation, and whether latency and throughput agree (None: not both clean)."""
    by: dict[str, dict[str, dict]] = {}
    for r in records:
        if r.get("measure") in ("latency", "throughput_peak"):
            by.setdefault(r["variant"], {})[r["measure"]] = r
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
        lat_same = (abs(ls["value"] - lu["value"]) <= LAT_SAME
                    if ls and lu and _clean(ls) and _clean(lu) else None)
        tp_same = (abs(ts["value"] - tu["value"]) <= TP_SAME * max(ts["value"], tu["value"])
                   if ts and tu and _clean(ts) and _clean(tu) else None)
        rows.append({"signed": s_name, "unsigned": u_name, "sass": _sass_relation(sass_s, sass_u),
                     "sass_signed": sass_s, "sass_unsigned": sass_u,
                     "latency": [ls and ls.get("value"), lu and lu.get("value")], "latency_same": lat_same,
                     "throughput": [ts and ts.get("value"), tu and tu.get("value")], "throughput_same": tp_same})
    return rows


def signedness_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    rel: dict[str, int] = {}
    for r in rows:
        rel[r["sass"]] = rel.get(r["sass"], 0) + 1
    lat = [r for r in rows if r["latency_same"] is not None]
    tp = [r for r in rows if r["throughput_same"] is not None]
    dl = [r for r in lat if not r["latency_same"]]
    dt = [r for r in tp if not r["throughput_same"]]

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3g}"

    out = [f"signed vs unsigned: {len(rows)} pairs of variants; "
           + ", ".join(f"{n} {k}" for k, n in sorted(rel.items()))
           + f"; latency the same (within {LAT_SAME} cycles) in {len(lat) - len(dl)} of {len(lat)} pairs"
           + (": differ " + ", ".join(f"{r['signed']} {num(r['latency'][0])} vs {r['unsigned']} "
                                      f"{num(r['latency'][1])}" for r in dl) if dl else "")
           + f"; peak throughput the same (within {TP_SAME:.0%}) in {len(tp) - len(dt)} of {len(tp)}"
           + (": differ " + ", ".join(f"{r['signed']} {num(r['throughput'][0])} vs {r['unsigned']} "
                                      f"{num(r['throughput'][1])}" for r in dt) if dt else "")]
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


def summarize(records: list[dict]) -> dict:
    """The suite's summary: its conclusions and the tables behind them."""
    sign = signedness(records)
    vals = {r["variant"]: r.get("params") or {} for r in records if r.get("measure") == value_latency.RANGE}
    return {"conclusions": value_latency.conclusions(records) + signedness_lines(sign),
            "signedness": sign, "value_latency": vals}
