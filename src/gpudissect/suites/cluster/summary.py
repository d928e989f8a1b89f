"""The cluster suite's summary: the topology (GPCs from cluster co-membership), residency per
size against what the GPCs found would hold, launch cost, DSM latency and bandwidth, atomics,
mapa and cluster barriers, as numbers and sentences (``conclusions``)."""

from __future__ import annotations

import numpy as np

from gpudissect.suites.cluster import analyse as an

BAD = ("sass:", "error:")


def _ok(r: dict) -> bool:
    return r["value"] is not None and not any(f.startswith(BAD) for f in r["flags"])


def _refusal(r: dict) -> str | None:
    return next((f[len("refused: "):] for f in r["flags"] if f.startswith("refused: ")), None)


def topology(rs: list[dict]) -> dict:
    """GPCs from every stored placement trace (sizes >= 2 join SMs; size 1 lists them)."""
    clusters: list[list[int]] = []
    seen: set[int] = set()
    for r in rs:
        if r["measure"] != "map" or not isinstance(r["samples"], dict):
            continue
        for ln in r["samples"].get("launches", []):
            sm, cid = np.array(ln["smid"]), np.array(ln["cid"])
            seen.update(int(x) for x in sm.tolist())
            if r["params"]["size"] >= 2:
                clusters += list(an.cluster_members(sm, cid).values())
    groups = an.gpcs(clusters, seen)
    of = {s: i for i, g in enumerate(groups) for s in g}
    biggest = [1] * len(groups)
    for c in clusters:
        biggest[of[c[0]]] = max(biggest[of[c[0]]], len(c))
    return {"gpcs": groups, "gpc_sizes": [len(g) for g in groups], "sms": len(seen),
            "largest_cluster": biggest, "gpc_of_sm": {str(s): i for s, i in of.items()}}


def _map(rs: list[dict], out: dict) -> None:
    C = out["conclusions"]
    topo = topology(rs)
    out["topology"] = topo
    sizes = topo["gpc_sizes"]
    if sizes:
        C.append(f"topology: {topo['sms']} SMs seen form {len(sizes)} sets of SMs that ever shared a cluster (union "
                 f"over every launch and size; a cluster never leaves its GPC, so each set lies in one GPC, and a set "
                 f"only small clusters reached may be part of a larger GPC) of {sizes} SMs, largest cluster each hosted "
                 f"{topo['largest_cluster']}; "
                 + "; ".join(f"set {i}: SMs {g[0]}..{g[-1]}" if g == list(range(g[0], g[-1] + 1))
                             else f"set {i}: SMs {g}" for i, g in enumerate(topo["gpcs"])))
    res = {}
    for r in sorted((r for r in rs if r["measure"] == "map"), key=lambda r: r["params"]["size"]):
        s = r["params"]["size"]
        why = _refusal(r)
        if why:
            res[s] = {"refused": why}
            C.append(f"clusters of {s}: refused by the driver ({why})")
            continue
        if r["value"] is None:
            continue
        per = (r["fit"] or {}).get("per_launch") or []
        pred = an.predicted_resident(sizes, s) if sizes else None
        res[s] = {"resident": int(r["value"]), "per_launch": [d["resident"] for d in per],
                  "predicted_from_gpcs": pred, "sms_used": [d.get("sms") for d in per],
                  "distinct_sms": all(d.get("distinct_sms") for d in per), "flags": r["flags"]}
    out["residency"] = res
    ok = {s: d for s, d in res.items() if "resident" in d}
    if sizes:
        out["gpc_statement"] = an.gpc_statement(sizes, topo["largest_cluster"],
                                                {s: d["resident"] for s, d in ok.items()})
        C.append(out["gpc_statement"])
    if ok:
        C.append("clusters resident at once, one CTA per SM (launch 0, fixed spin; measured / what the sets found would hold): "
                 + ", ".join(f"size {s}: {d['resident']} / {d['predicted_from_gpcs']} "
                             f"({d['resident'] * s} SMs busy)" for s, d in ok.items()))


def _launch(rs: list[dict], out: dict) -> None:
    ls = sorted((r for r in rs if r["measure"] == "launch"), key=lambda r: r["params"]["size"])
    if not ls:
        return
    out["launch"] = {r["params"]["size"]: {"us": r["value"], "refused": _refusal(r),
                                           "spread_ns": (r["fit"] or {}).get("start_spread_ns_last_launch")} for r in ls}
    out["conclusions"].append(
        f"launch cost ({ls[0]['params']['blocks']} blocks of 32 threads, GPU time between events, median): "
        + ", ".join(f"{'no cluster' if not r['params']['size'] else 'cluster ' + str(r['params']['size'])}: "
                    + (f"{r['value']:.2f} us" if r["value"] is not None else "refused") for r in ls))


def _latency(rs: list[dict], out: dict) -> None:
    C = out["conclusions"]
    local = next((r for r in rs if r["variant"] == "dsm:latency:local" and _ok(r)), None)
    lat = sorted((r for r in rs if r["variant"].startswith("dsm:latency:size=") and _ok(r)),
                 key=lambda r: r["params"]["size"])
    d = {"plain_ld_shared": round(local["value"], 2) if local else None, "sizes": {}}
    for r in lat:
        f = r["fit"]
        d["sizes"][r["params"]["size"]] = {"remote_median": round(r["value"], 2), "remote_min": f["remote_min"],
                                           "remote_max": f["remote_max"], "self_window": f["self_window"],
                                           "distance": f["distance"], "matrix": f["matrix"]}
    out["dsm_latency"] = d
    if lat:
        every = [x for r in lat for i, row in enumerate(r["fit"]["matrix"]) for j, x in enumerate(row)
                 if x is not None and i != j]
        hws = [an.pair_halfwidth(v) for r in lat for k, v in (r["samples"] or {}).get("pairs", {}).items()
               if k.split("->")[0] != k.split("->")[1]]
        selfs = [r["fit"]["self_window"] for r in lat if r["fit"]["self_window"] is not None]
        matters = [r["params"]["size"] for r in lat if r["fit"]["distance"].get("matters")]
        C.append("DSM latency (dependent ld.shared::cluster chase, cycles per step incl. the 2 MOVs ptxas emits "
                 "per LD.E): remote median per cluster size "
                 + ", ".join(f"{r['params']['size']}: {r['value']:.1f}" for r in lat)
                 + f"; over every remote (source, target) pair {min(every):.1f}..{max(every):.1f} (a pair's own "
                 f"95% interval +-{np.median(hws):.2f} median, so the pairs differ beyond noise); own CTA through the "
                 "cluster window "
                 f"{np.median(selfs):.1f}" + (f"; plain ld.shared {local['value']:.1f}" if local else "")
                 + ("; grouped by SM-id relation or rank distance, remote latency differs by more than "
                    f"{an.DISTANCE_TOL:.0%} at sizes {matters}" if matters else
                    "; grouped by SM-id relation (ids +-1 vs farther) and by rank distance, remote latency differs "
                    f"by less than {an.DISTANCE_TOL:.0%} (or {an.DISTANCE_MIN_CYCLES:g} cycles) at every size: "
                    "which pair matters, not these distances"))


def _sweeps(rs: list[dict], out: dict) -> None:
    C = out["conclusions"]
    bw = [r for r in rs if r["variant"].startswith("dsm:bw:") and r["value"] is not None]
    if bw:
        out["dsm_bandwidth"] = {r["variant"]: {"value": r["value"], "warps": r["fit"]["sweep"][-1]["warps"],
                                               "saturated": r["fit"]["saturated"],
                                               "sweep": [(d["warps"], d["rate"]) for d in r["fit"]["sweep"]],
                                               "per_target": r["fit"]["sweep"][-1]["per_target"],
                                               "readers_per_target": r["fit"]["sweep"][-1]["readers_per_target"],
                                               "flags": r["flags"]} for r in bw}
        C.append("DSM bandwidth (B/clk per CTA's SM at the most warps of the sweep, clusters of "
                 f"{bw[0]['params']['size']}; * = still rising; stores: the rate the SM issues them, posted): "
                 + ", ".join(f"{r['variant'][7:]} {r['value']:.1f}{'' if r['fit']['saturated'] else '*'}"
                             + (f" (x{r['fit']['sweep'][-1]['readers_per_target']} readers = "
                                f"{r['fit']['sweep'][-1]['per_target']:.1f} at the target)"
                                if r["fit"]["sweep"][-1]["readers_per_target"] > 1 else "") for r in bw))
    over = [r for r in rs if r["variant"].startswith("dsm:bw:") and any(f.startswith("above-limit") for f in r["flags"])]
    if over:
        C.append("DSM bandwidth not stated (above the shared-memory bound: the method failed there): "
                 + ", ".join(f"{r['variant'][7:]} measured {r['fit']['measured_at_most_warps']}" for r in over))
    at = [r for r in rs if r["variant"].startswith("atomic:") and r["value"] is not None]
    if at:
        out["atomics"] = {r["variant"]: {"value": r["value"], "unit": r["unit"]} for r in at}
        C.append("DSM atomics: " + ", ".join(f"{r['variant'][7:]} {r['value']:.2f} {r['unit']}" for r in at))


def _barrier(rs: list[dict], out: dict) -> None:
    m = next((r for r in rs if r["variant"] == "mapa" and r["value"] is not None), None)
    if m:
        out["mapa"] = m["value"]
        out["conclusions"].append(f"mapa.shared::cluster: {m['value']:.2f} cycles per dependent mapa (one PRMT in SASS)")
    bars: dict[str, dict[int, float | None]] = {}
    for r in rs:
        if r["measure"] == "barrier":
            bars.setdefault(r["params"]["form"], {})[r["params"]["size"]] = r["value"]
    if bars:
        out["barrier"] = bars
        for form, d in bars.items():
            out["conclusions"].append(f"barrier.cluster ({form} arrive + wait), cycles per barrier vs cluster size: "
                                      + ", ".join(f"{s}: {'-' if v is None else f'{v:.0f}'}" for s, v in sorted(d.items())))


def summarize(rs: list[dict]) -> dict:
    out: dict = {"conclusions": []}
    _map(rs, out)
    _launch(rs, out)
    _latency(rs, out)
    _sweeps(rs, out)
    _barrier(rs, out)
    flagged = [r["variant"] for r in rs if any(f.startswith(BAD) for f in r["flags"])]
    if flagged:
        out["conclusions"].append(f"flagged (sass or error, not used): {flagged}")
    return out
