"""One row per tensor-core variant (and throughput group) from the tensor suite's records:
SASS, dependent-accumulator latency, peak rate, FLOP/cycle/SM, TFLOP/s and % of the
clock-scaled datasheet peak, as the suite stored them (None where it stored none)."""

from __future__ import annotations

from gpudissect.report.fmt import fmt_num


def tensor_rows(records: list[dict]) -> list[dict]:
    lat: dict[str, float] = {}
    status: dict[str, str] = {}
    sass: dict[str, list[str]] = {}
    for r in records:
        v = r.get("variant") or ""
        if r.get("measure") == "latency" and r.get("value") is not None:
            lat[v] = min(lat.get(v, float("inf")), float(r["value"]))
        elif r.get("measure") == "sass_map":
            status[v] = (r.get("params") or {}).get("status") or ""
        if r.get("sass"):
            sass.setdefault(v, r["sass"])
    rows = []
    seen = set()
    for r in records:
        v = r.get("variant") or ""
        if r.get("measure") != "throughput_peak":
            continue
        p = r.get("params") or {}
        seen.add(v)
        rows.append({"variant": v, "group": p.get("group"), "status": status.get(v),
                     "sass": " + ".join(r.get("sass") or sass.get(v) or []), "latency": lat.get(v),
                     "rate": r.get("value"), "unit": r.get("unit"), "flop_per_cycle_sm": p.get("flop_per_cycle_sm"),
                     "tflops": p.get("tflops"), "pct_of_peak": p.get("pct_of_peak"),
                     "flags": ", ".join(sorted({f.split(":")[0] for f in r.get("flags") or []}))})
    for v in list(lat) + list(status):
        if v not in seen:
            seen.add(v)
            rows.append({"variant": v, "group": None, "status": status.get(v),
                         "sass": " + ".join(sass.get(v) or []), "latency": lat.get(v), "rate": None,
                         "unit": None, "flop_per_cycle_sm": None, "tflops": None, "pct_of_peak": None,
                         "flags": ""})
    return rows


def report_section(doc: dict, rs) -> dict:
    """The tensor suite's part of the HTML report: one row per variant and throughput group."""
    return {"tensor": [{**r, **{f"{k}_s": fmt_num(r[k]) for k in (
        "latency", "rate", "flop_per_cycle_sm", "tflops", "pct_of_peak")}}
        for r in tensor_rows(doc.get("records") or [])]}
