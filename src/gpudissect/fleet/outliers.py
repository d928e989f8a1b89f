"""The fleet's outliers: for every measure (a suite's variant, measure and parameters, grouped
as ``bench/gpu_spread.py`` groups them, flagged values left out), the fleet median, its spread and
each GPU's deviation ``(value - median) / |median|``; a GPU more than ``threshold`` away on any
measure is an outlier, listed with those measures and its evidence (clocks, temperature,
throttle reasons, ECC and retired pages).

Two GPUs have no median either could deviate from: they are compared with each other instead
(as ``compare-gpus`` compares them), each measure's difference of the second GPU to the first,
``(b - a) / |a|``; those beyond ``threshold`` are listed, the largest first."""

from __future__ import annotations

import statistics

from gpudissect.bench.gpu_spread import compare_gpus

SCHEMA = "gpudissect.fleet-outliers/1"
# with two GPUs the median lies halfway between them: each deviates as much as the other, and
# neither can be singled out; deviations are computed from three GPUs on (two are compared with
# each other: their differences)
MIN_GPUS = 3
PAIR_LINES = 10  # the largest differences of two GPUs the conclusions name


def measure_name(suite: str, rec: dict) -> str:
    p = ", ".join(f"{k}={v}" for k, v in rec["params"].items() if isinstance(v, (int, float, str)))
    return f"{suite}:{rec['variant']} {rec['measure']}" + (f" [{p}]" if p else "")


def _measures(store, state: dict) -> list[dict]:
    done = {k: g for k, g in state["gpus"].items() if g.get("status") == "done"}
    out = []
    for suite in state["plan"]["suites"]:
        key_of = {g["runs"][suite]: k for k, g in done.items() if g.get("runs", {}).get(suite)}
        if not key_of:
            continue
        doc = compare_gpus(store, suite, sorted(key_of))
        label_key = {g["label"]: key_of[g["run_id"]] for g in doc["gpus"]}
        for rec in doc["records"]:
            values = {label_key[lb]: v for lb, v in rec["values"].items()}
            med = rec["median"]
            devs = ({k: (v - med) / abs(med) for k, v in values.items()}
                    if med and len(values) >= MIN_GPUS else {})
            mad = statistics.median(abs(d) for d in devs.values()) if devs else None
            out.append({"name": measure_name(suite, rec), "suite": suite, "variant": rec["variant"],
                        "measure": rec["measure"], "params": rec["params"], "unit": rec["unit"],
                        "n_gpus": rec["n_gpus"], "median": med, "rel_spread": rec["rel_spread"],
                        "rel_mad": mad, "values": values, "deviations": devs,
                        "left_out": {label_key.get(lb, lb): why for lb, why in rec["left_out"].items()}})
    return out


def pair_differences(measures: list[dict], a: str, b: str, threshold: float) -> dict:
    """Two GPUs compared with each other: per measure both have cleanly, the difference of ``b``
    to ``a``, ``(b - a) / |a|``; the measures compared and those beyond ``threshold``, the
    largest first."""
    both = [m for m in measures if a in m["values"] and b in m["values"] and m["values"][a]]
    for m in both:
        m["rel_diff"] = (m["values"][b] - m["values"][a]) / abs(m["values"][a])
    off = sorted((m for m in both if abs(m["rel_diff"]) > threshold), key=lambda m: -abs(m["rel_diff"]))
    return {"a": a, "b": b, "compared": len(both), "statistic": "rel_diff = (b - a) / |a| per measure",
            "differences": [{"measure": m["name"], "unit": m["unit"], "a": m["values"][a], "b": m["values"][b],
                             "rel_diff": m["rel_diff"]} for m in off]}


CLOCK_KEYS = ("sm_mhz", "sm_mhz_kernel", "temp_c", "power_w")


def evidence_of(g: dict, store=None) -> dict:
    """A GPU's evidence, short: the SM clock and temperature while it ran, the throttle reasons
    seen (fraction of samples), ECC and retired pages; and each suite run's clocks before and
    after it (NVML's and the SM clock measured in a kernel), from the store."""
    ev = g.get("evidence") or {}
    run = ev.get("during_run") or {}
    health = ev.get("health") or {}
    out = {k: run[k] for k in ("sm_mhz", "temp_c_max", "power_w_max", "throttle_reasons") if k in run}
    out.update({k: v for k, v in health.items() if k != "unavailable"})
    if ev.get("fake"):
        out["fake"] = True
    for suite, rid in (g.get("runs") or {}).items() if store is not None else ():
        r = store.run(rid)
        clocks = {f"{k}_{when}": (r.get(f"clocks_{when}") or {}).get(k) for when in ("before", "after")
                  for k in CLOCK_KEYS}
        clocks = {k: v for k, v in clocks.items() if v is not None}
        if clocks:
            out[f"clocks:{suite}"] = clocks
    return out


def analyse(store, state: dict, threshold: float) -> dict:
    measures = _measures(store, state)
    gpus = [{"key": k, "node": g.get("node"), "index": g.get("index"), "uuid": g.get("uuid"),
             "name": g.get("name"), "status": g.get("status"), "reason": g.get("reason"),
             "attempts": len(g.get("attempts") or [])} for k, g in state["gpus"].items()]
    outliers = []
    for k, g in state["gpus"].items():
        off = [{"measure": m["name"], "value": m["values"][k], "median": m["median"], "unit": m["unit"],
                "deviation": m["deviations"][k], "fleet_rel_mad": m["rel_mad"]}
               for m in measures if abs(m["deviations"].get(k, 0.0)) > threshold]
        if off:
            off.sort(key=lambda o: -abs(o["deviation"]))
            outliers.append({"key": k, "node": g.get("node"), "uuid": g.get("uuid"), "measures": off,
                             "evidence": evidence_of(g, store)})
    done = sorted(k for k, g in state["gpus"].items() if g.get("status") == "done")
    pair = pair_differences(measures, *done, threshold) if len(done) == 2 else None
    compared = [m for m in measures if m["deviations"] or "rel_diff" in m]
    return {"schema": SCHEMA, "fleet": state["id"], "threshold": threshold,
            "statistic": "per measure: the median over the fleet's GPUs (flagged values left out), "
                         "rel_spread = (max - min) / median, rel_mad = median |deviation|; "
                         "deviation = (value - median) / |median|",
            "gpus": gpus, "measures": compared, "outliers": outliers,
            "failed": [g for g in gpus if g["status"] != "done"],
            **({"pair": pair} if pair else {}),
            "evidence": {k: evidence_of(g, store) for k, g in state["gpus"].items() if g.get("status") == "done"}}


def conclusions(doc: dict) -> list[str]:
    ok = sum(g["status"] == "done" for g in doc["gpus"])
    out = [f"{ok} of {len(doc['gpus'])} GPU(s) done; {len(doc['measures'])} measures compared across them"]
    pair = doc.get("pair")
    if pair:
        diffs = pair["differences"]
        out.append(f"2 GPUs: no fleet median (it needs {MIN_GPUS}); compared with each other instead, "
                   f"{pair['b']} against {pair['a']}: {len(diffs)} of {pair['compared']} measures differ by "
                   f"more than {doc['threshold'] * 100:g}%" + (", the largest first:" if diffs else ""))
        out += [f"differs {d['rel_diff']:+.1%} on {d['measure']}: {d['a']:.4g} vs {d['b']:.4g} {d['unit']}"
                for d in diffs[:PAIR_LINES]]
        if len(diffs) > PAIR_LINES:
            out.append(f"... {len(diffs) - PAIR_LINES} more differences (the --json document and the report list all)")
    elif ok < MIN_GPUS:
        out.append(f"fewer than {MIN_GPUS} GPUs measured: no fleet median that one GPU could deviate from")
    for o in doc["outliers"]:
        worst = o["measures"][0]
        out.append(f"outlier {o['key']} ({o['uuid']}): {len(o['measures'])} measure(s) beyond "
                   f"{doc['threshold'] * 100:g}%, most {worst['deviation']:+.1%} on {worst['measure']}")
    for g in doc["failed"]:
        out.append(f"failed {g['key']}: {g['reason']} ({g['attempts']} attempt(s))")
    return out
