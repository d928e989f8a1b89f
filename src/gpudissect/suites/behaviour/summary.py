"""The behaviour suite's summary: every verdict from a run's stored results, each stated only
when its launches agree (``analyse.agree``), with the numbers of every launch behind it, and
the conclusions as sentences."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpudissect.suites.behaviour import analyse as an
from gpudissect.suites.behaviour import fairness as fa

if TYPE_CHECKING:
    from gpudissect.store.db import Store, StoredResult

BAD = ("sass:", "error:")  # results no verdict uses


def _said(v: dict) -> str:
    """A verdict as a sentence fragment: the verdict, or 'undetermined (why)'."""
    return str(v["verdict"]) if v["agreed"] else f"{an.UNDETERMINED} ({v.get('why')})"


def _dispatch(rs: list[StoredResult], out: dict) -> None:
    C = out["conclusions"]
    for r in rs:
        if r["measure"] != "dispatch" or not isinstance(r["samples"], dict) or "launches" not in r["samples"]:
            continue
        per = []
        for ln in r["samples"]["launches"]:
            d = an.dispatch(np.array(ln["lin"]), np.array(ln["smid"]), np.array(ln["g0_ns"]), np.array(ln["g1_ns"]),
                            r["fit"]["nsmid"])
            per.append({**d, "blocks_per_sm": ln["blocks_per_sm_mode"]})
        keep = ("policy", "blocks_per_sm", "in_order", "start_inversions", "refill_gap_ns_median",
                "refill_fifo_agreement", "consecutive_same_tpc", "distinct_tpc_share_first_half")
        compact = [{k: d[k] for k in keep} | {"first_sms": d["first_sms"][:16]} for d in per]
        pol = an.agree([{**c, "verdict": c["policy"]} for c in compact])
        blocks = an.agree([{"verdict": c["blocks_per_sm"]} for c in compact])
        order = an.agree([{"verdict": "yes" if c["in_order"] else "no"} for c in compact])
        pred = r["fit"]["predicted"]["blocks"]
        d0 = per[0]
        out["dispatch"][r["variant"]] = {
            **{k: v for k, v in d0.items() if k not in ("policy", "blocks_per_sm", "in_order")},
            "policy": pol["verdict"], "blocks_per_sm": blocks["verdict"] if blocks["agreed"] else None,
            "in_order": (order["verdict"] == "yes") if order["agreed"] else None,
            "predicted_blocks_per_sm": pred, "params": r["params"], "launches": len(per), "per_launch": compact}
        out["verdicts"][f"dispatch policy ({r['variant']})"] = pol
        C.append(f"{r['variant']} ({d0['blocks']} blocks, {len(per)} launches): {_said(pol)}; "
                 f"blocks/SM at once {_said(blocks)} (rules: {pred}); blocks start in id order: {_said(order)} "
                 f"(inversions per launch {[c['start_inversions'] for c in compact]}); first SMs in block order "
                 f"{d0['first_sms'][:16]}...; a freed slot is refilled after "
                 f"{[c['refill_gap_ns_median'] for c in compact]} ns (median, per launch)")


def _occupancy(rs: list[StoredResult], out: dict) -> None:
    occ = [r for r in rs if r["measure"] == "occupancy"]
    if not occ:
        return
    open_, dis = [], []
    for r in occ:
        q, fit = r["params"], r["fit"] or {}
        pred = fit.get("predicted", {})
        row = {"threads": q["threads"], "regs": q["regs"], "smem": q["smem"],
               "measured_blocks": r["value"], "predicted_blocks": pred.get("blocks"),
               "measured_warps": None if r["value"] is None else r["value"] * q["warps_per_block"],
               "predicted_warps": pred.get("warps"), "limiters": pred.get("limiters"),
               "measured_per_launch": fit.get("measured_per_launch"), "flags": r["flags"]}
        out["occupancy"][r["variant"]] = row
        if r["value"] is None:
            open_.append(f"{r['variant']} {fit.get('measured_per_launch')}")
        elif r["value"] != pred.get("blocks"):
            dis.append(f"{r['variant']} (regs {q['regs']}, smem {q['smem']} B, {q['threads']} threads): "
                       f"measured {int(r['value'])} blocks/SM, rules {pred.get('blocks')}")
    ok = sum(1 for r in occ if r["value"] is not None and r["value"] == r["fit"]["predicted"]["blocks"])
    det = len(occ) - len(open_)
    v = {"verdict": f"{ok} of {det} configurations match the CUDA occupancy rules", "agreed": True,
         "undetermined": open_, "disagree": dis}
    out["verdicts"]["occupancy"] = v
    out["conclusions"].append(
        f"occupancy: {ok}/{det} configurations measured alike in every launch match the CUDA occupancy rules"
        + ("" if not dis else "; disagreements: " + "; ".join(dis))
        + ("" if not open_ else f"; undetermined (launches disagree, blocks/SM per launch): {'; '.join(open_)}"))


def _hist_text(h: dict) -> str:
    """A histogram as 'blocks: SMs' pairs (SMs as a mean over launches)."""
    return "{" + ", ".join(f"{k}: {float(v):g}" for k, v in h.items()) + "}"


def _fairness(rs: list[StoredResult], out: dict) -> None:
    """Per configuration: the per-SM histogram (mean over launches), fairness, repeats, waves
    and the loss of the busiest SM against a fair one; then the configurations grouped by what
    may explain their fairness (``fairness.when_fair``)."""
    fr = [r for r in rs if r["measure"] == "fairness" and r["fit"] and not any(f.startswith(BAD) for f in r["flags"])]
    if not fr:
        return
    conf: dict[str, dict] = {}
    for r in fr:
        f, q = r["fit"], r["params"]
        per, rep, v = f["per_launch"], f["repeats"], f["verdict"]
        refill = [d["refill"]["first_freed_share"] for d in per if d["refill"]["first_freed_share"] is not None]
        conf[r["variant"]] = {
            "grid": q["grid"], "grid_per_sm": q.get("grid_per_sm"), "threads": q["threads"], "regs": q["regs"],
            "smem": q["smem"], "live": q["live"], "sms": per[0]["sms"],
            "rules_blocks_per_sm": (f.get("predicted") or {}).get("blocks"),
            "resident_max": max(d["resident_max"] for d in per), "verdict": v["verdict"], "fair": v.get("fair"),
            "deterministic": v.get("deterministic"), "fair_share": v.get("fair_share"), "launches": len(per),
            "mean_histogram": f["mean_histogram"], "max": max(d["max"] for d in per), "min": min(d["min"] for d in per),
            "idle_max": max(d["idle"] for d in per), "fair_max": per[0]["fair_max"],
            "excess_max": max(d["excess"] or 0 for d in per), "loss_max": max(d["loss"] for d in per),
            "waves": sorted({d["waves"] for d in per}), "fair_waves": per[0]["fair_waves"],
            "later_wave_blocks": [d["later_wave_blocks"] for d in per],
            "refill_first_freed_share": float(np.median(refill)) if refill else None,
            "makespan_ns_median": float(np.median([d["makespan_ns"] for d in per])),
            "distinct_maps": rep["distinct_maps"], "modal_share": rep["modal_share"],
            "same_sm_share": rep["same_sm_share"], "distinct_loads": rep["distinct_loads"],
            "equal_work": f.get("equal_work"),
            "work_why": next((d["work"].get("why") for d in per if not d.get("work", {}).get("equal", True)), None),
            "outlive_max": max((d.get("work", {}).get("makespan_over_waves_x_block") or 0) for d in per)}
    # the verdicts whose premise held (every block did equal work) are grouped by what may explain them
    groups = fa.when_fair([{"name": k, "grid": c["grid"], "sms": c["sms"], "waves": max(c["waves"]),
                            "fair": c["fair"], "deterministic": c["deterministic"]} for k, c in conf.items()
                           if c["equal_work"] is not False])
    out["fairness"] = {"configurations": conf, "when_fair": groups}
    n = len(conf)
    fair = [k for k, c in conf.items() if c["fair"]]
    det = [k for k, c in conf.items() if c["deterministic"]]
    L = sorted({c["launches"] for c in conf.values()})
    out["verdicts"]["block -> SM fairness"] = {
        "verdict": f"fair in every launch in {len(fair)} of {n} configurations; the same placement in every launch "
                   f"in {len(det)} of {n}", "agreed": True,
        "per_configuration": {k: c["verdict"] for k, c in conf.items()}}
    C = out["conclusions"]
    confounded = {k: c for k, c in conf.items() if c["equal_work"] is False}
    C.append(f"block -> SM fairness ({n} configurations x {L} identical launches; fair: every SM, idle ones "
             f"included, gets floor or ceil of grid/SMs blocks): fair in every launch in {len(fair)} of {n}; "
             f"the same block -> SM map in every launch in {len(det)} of {n}; by group (the {n - len(confounded)} "
             "whose blocks did equal work): " + "; ".join(
                 f"{g}: fair {d['fair']}/{d['configurations']}, deterministic {d['deterministic']}/{d['configurations']}"
                 for g, d in groups.items() if ", " not in g)
             + ("" if not confounded else f"; blocks did unequal work in {len(confounded)} (their loads may follow "
                "the blocks' lengths, not the dispatcher): " + ", ".join(
                    f"{k} (makespan up to {c['outlive_max']:g}x waves x block)" for k, c in confounded.items())))
    unfair = [(k, c) for k, c in conf.items() if not c["fair"]]
    if unfair:
        C.append("block -> SM fairness, unfair placements (SMs with k blocks, mean over launches; the busiest SM "
                 "against the fair ceil(grid/SMs); share of a work-bound makespan lost): " + "; ".join(
                     f"{k} (grid {c['grid']}, {c['regs']} regs, {c['smem'] // 1024} KiB smem"
                     f"{'; UNEQUAL WORK' if c['equal_work'] is False else ''}): {c['verdict']}, "
                     f"{_hist_text(c['mean_histogram'])}, busiest {c['max']} vs {c['fair_max']} "
                     f"(loss up to {c['loss_max']:.0%}), waves {c['waves']} vs fair {c['fair_waves']}"
                     for k, c in unfair))
    else:
        C.append("block -> SM fairness: no unfair placement in any launch of any configuration")
    var = [(k, c) for k, c in conf.items() if not c["deterministic"]]
    C.append("block -> SM placement repeats: " + ("the same map in every launch of every configuration" if not var
             else f"not the same map in every launch in {len(var)} of {n} (distinct maps / launches, the commonest "
                  "map's share, blocks on their commonest SM, distinct per-SM loads): " + "; ".join(
                      f"{k} {c['distinct_maps']}/{c['launches']}, {c['modal_share']:.0%}, {c['same_sm_share']:.0%}, "
                      f"{c['distinct_loads']}" for k, c in var)))
    rf = {k: c["refill_first_freed_share"] for k, c in conf.items() if c["refill_first_freed_share"] is not None}
    if rf:
        C.append("block -> SM waves: blocks of a later wave took the slot freed first (within the globaltimer "
                 "resolution) in, median over launches: " + ", ".join(f"{k} {v:.0%}" for k, v in rf.items()))


def _scheduler(rs: list[StoredResult], out: dict) -> int | None:
    C = out["conclusions"]
    schedulers = None
    pairs = next((r for r in rs if r["variant"] == "scheduler:pairs" and r["fit"]
                  and not any(f.startswith(BAD) for f in r["flags"])), None)
    if pairs:
        f = pairs["fit"]
        per = f["per_launch"]
        p0 = per[0]
        v = {"verdict": f["verdict"], "agreed": f["agreed"], "why": f.get("why"),
             "per_launch": [{k: d.get(k) for k in ("groups", "rule", "slowdown_competing", "slowdown_other",
                                                   "solo_ffma_per_clk")} for d in per]}
        schedulers = int(pairs["value"]) if f["agreed"] and pairs["value"] else None
        out["scheduler"]["pairs"] = {
            "schedulers": schedulers, "rule": f.get("rule") if f["agreed"] else None,
            "groups": f.get("groups"), "verdict": f["verdict"], "agreed": f["agreed"],
            "slowdown_competing": p0.get("slowdown_competing"), "slowdown_other": p0.get("slowdown_other"),
            "solo_ffma_per_clk": p0.get("solo_ffma_per_clk"), "per_launch": v["per_launch"]}
        out["verdicts"]["schedulers"] = v
        lines = "; ".join(f"{d['slowdown_competing']} vs {d['slowdown_other']}" for d in per)
        if f["agreed"]:
            C.append(f"schedulers ({len(per)} launches agree): {schedulers} groups of warps that slow each other "
                     f"({f.get('rule') or 'no simple rule'}); groups {f['groups']}; pair slowdown same group vs "
                     f"different, per launch: {lines}; one warp alone issues "
                     f"{[d['solo_ffma_per_clk'] for d in per]} FFMA/clk per launch (its region, clock reads "
                     "included)")
        else:
            C.append(f"schedulers: {an.UNDETERMINED} ({f.get('why')}); pair slowdown per launch: {lines}")
    orders = {}
    for r in rs:
        if not r["variant"].startswith("scheduler:order:") or not r["fit"] or any(
                fl.startswith(BAD) for fl in r["flags"]):
            continue
        f = r["fit"]
        wl = r["variant"].split(":", 2)[2]
        per = [{k: d.get(k) for k in ("verdict", "share", "patterns", "late_warps", "cases", "start_order",
                                      "end_spread", "start_end_tau_median")} for d in f["per_launch"]]
        orders[wl] = {"verdict": f["verdict"], "policy": f["policy"], "agreed": f["agreed"], "why": f.get("why"),
                      "params": r["params"], "per_launch": per, "groups": f["groups"],
                      "windows_lowest_sm": f["per_launch"][0].get("windows_lowest_sm"),
                      "lowest_sm": f["per_launch"][0].get("lowest_sm")}
        out["verdicts"][f"warp issue order ({wl})"] = {"verdict": f["policy"] if f["agreed"] else an.UNDETERMINED,
                                                        "agreed": f["agreed"], "why": f.get("why"), "per_launch": per}
        q = r["params"]
        chains = "one dependent FFMA chain" if q["chains"] == 1 else f"{q['chains']} independent FFMA chains"
        what = f"{q['warps']} warps x {chains} of {q['length']}, a barrier before each repetition"
        ev = "; ".join(f"launch {i}: {d['verdict']} in {d['share']:.0%} of {d['cases']} cases, late warps "
                       f"{d['late_warps']}"
                       + (f", ends spread by {d['end_spread']['median']:.0%} of the span (median; p10-p90 "
                          f"{d['end_spread']['p10']:.0%}-{d['end_spread']['p90']:.0%}), start vs end order tau "
                          f"{d['start_end_tau_median']}" if d.get("end_spread") else "")
                       + ", commonest start order of the first scheduler's warps "
                       f"{(d.get('start_order') or [{}])[0].get('order')} "
                       f"({(d.get('start_order') or [{}])[0].get('share', 0):.0%})" for i, d in enumerate(per))
        C.append(f"warp issue order, {wl} ({what}): "
                 f"{f['policy'] if f['agreed'] else an.UNDETERMINED + ' (' + str(f.get('why')) + ')'} [{ev}]")
    if orders:
        out["scheduler"]["order"] = orders
    return schedulers


def _pipes(rs: list[StoredResult], out: dict, schedulers: int | None) -> None:
    pipes = [r for r in rs if r["measure"] == "pipes" and r["fit"] and not any(f.startswith(BAD) for f in r["flags"])]
    solos = {r["params"]["parts"][0]: r for r in pipes if len(r["params"]["parts"]) == 1}
    pairs = {tuple(r["params"]["parts"]): r for r in pipes if len(r["params"]["parts"]) == 2
             and all(v in solos for v in r["params"]["parts"])}
    if not solos:
        return
    pv = an.pipes_verdicts({v: {"launches": r["fit"]["launches"]} for v, r in solos.items()},
                           {k: {"launches": r["fit"]["launches"], "share_a": r["fit"]["share_a"]}
                            for k, r in pairs.items()}, schedulers)
    solo_view = {}
    for v, r in solos.items():
        ls = r["fit"]["launches"]
        solo_view[v] = {"sass_op": r["fit"]["sass_op"], "rate": r["value"],
                        "rate_per_launch": [d["rate"] for d in ls], "saturated_per_launch": [d["saturated"] for d in ls],
                        "rise_per_launch": [d["rise"] for d in ls],
                        "configs": {c: [d["configs"][c]["rate"] for d in ls] for c in ls[0]["configs"]}}
    lim = pv["issue_limit"]
    out["pipes"] = {"solo": solo_view, "pairs": pv["pairs"], "groups": pv["groups"], "overlapping": pv["overlapping"],
                    "undetermined_pairs": pv["undetermined_pairs"], "issue_limit": lim}
    out["verdicts"]["issue limit"] = {k: lim.get(k) for k in ("verdict", "agreed", "why", "per_launch",
                                                                "per_scheduler", "capped_pairs")}
    out["verdicts"]["pipe groups"] = {"verdict": pv["groups"], "agreed": not pv["undetermined_pairs"],
                                      "undetermined_pairs": pv["undetermined_pairs"],
                                      "overlapping": pv["overlapping"]}
    C = out["conclusions"]
    C.append("pipes, solo rates (warp-instr/clk/SM at the pairs' configuration, per launch; saturated = twice "
             "the warps raise it by < 2%): " + "; ".join(
                 f"{v} ({s['sass_op']}): {s['rate_per_launch']}, rise {s['rise_per_launch']}"
                 f"{'' if all(s['saturated_per_launch']) else ' NOT SATURATED'}" for v, s in solo_view.items()))
    per_l = [d.get("value") for d in lim["per_launch"]]
    who = [d.get("reached_by") for d in lim["per_launch"]]
    sched = f" = {lim['per_scheduler']} per scheduler ({schedulers} schedulers, measured)" \
        if lim.get("per_scheduler") else " (per scheduler: the scheduler count is not determined)"
    if lim["agreed"]:
        C.append(f"issue limit ({len(per_l)} launches agree within {an.LIMIT_TOL:.0%}): {lim['value']:.3f} "
                 f"warp-instr/clk/SM{sched}: the highest rate a saturated probe reached, per launch {per_l} "
                 f"(by {who}); pairs of separate pipes that it caps: {lim['capped_pairs'] or 'none'}")
    else:
        C.append(f"issue limit: {an.UNDETERMINED} ({lim.get('why')}); per launch {per_l} (by {who})")
    C.append(f"pipes: groups whose members all compete pairwise {pv['groups']}"
             + (f"; {pv['overlapping']} lie in more than one group: the compete relation is not transitive, "
                "so these are not one pipe each (another shared resource)" if pv["overlapping"] else "")
             + (f"; undetermined pairs (their membership open): {pv['undetermined_pairs']}"
                if pv["undetermined_pairs"] else "") + "; " + ", ".join(
                 f"{k}: {_said(v)} (rate {[d.get('rate') for d in v['per_launch']]} vs add "
                 f"{v['per_launch'][0].get('add')} / compete {v['per_launch'][0].get('compete')}"
                 + (f"; {v['per_launch'][0]['note']}" if v["per_launch"][0].get("note") else "") + ")"
                 for k, v in pv["pairs"].items()))


def _kib(b: int | None) -> str:
    return "-" if b is None else f"{b / 1024:g} KiB"


def _icache(rs: list[StoredResult], out: dict) -> None:
    """Instruction fetch: per warp count, the levels of warm cycles per FFMA against the code size
    and the cold first pass."""
    for r in rs:
        if not r["variant"].startswith("icache:") or not r["fit"]:
            continue
        f = r["fit"]
        levels = f.get("levels") or []
        out.setdefault("icache", {})[r["variant"]] = {"levels": levels, "code_bytes": f.get("code_bytes"),
                                                     "warm_cpi": f.get("warm_cpi"), "cold_cpi": f.get("cold_cpi")}
        steps = "; ".join(f"{lv['cpi']:g} cycles per FFMA from {_kib(lv['from_bytes'])} to {_kib(lv['to_bytes'])}"
                          + (f" (the next size, {_kib(lv['next_bytes'])}, is slower)" if lv["next_bytes"] else "")
                          for lv in levels)
        cold = f.get("cold_cpi") or []
        code = f.get("code_bytes") or []
        C = out["conclusions"]
        C.append(f"instruction fetch, {r['params'].get('warps')} warp(s) per SM, loops over straight-line FFMA "
                 f"regions of {_kib(code[0] if code else None)} to {_kib(code[-1] if code else None)}: {steps or 'no level'}"
                 f"; the first (cold) pass {cold[0] if cold else '-'} cycles per FFMA at the smallest region, "
                 f"{cold[-1] if cold else '-'} at the largest" + (f" [flags: {', '.join(r['flags'])}]" if r["flags"] else ""))


def _banks(rs: list[StoredResult], out: dict) -> None:
    """Register banks below ptxas: the groups of registers whose pair of sources conflicts, the
    rule where one fits, and what the reuse flag saves."""
    for r in rs:
        if r["variant"] != "banks:ffma" or not r["fit"]:
            continue
        f = r["fit"]
        out["banks"] = {k: f.get(k) for k in ("banks", "groups", "rule", "base_cycles", "conflict_cycles",
                                             "reuse_same_bank", "reuse_registers")}
        reuse = f.get("reuse_same_bank") or {}
        out["conclusions"].append(
            f"register banks (FFMA sources patched in the cubin, one warp): {f.get('banks') or 'undetermined'} groups "
            f"of conflicting registers {f.get('groups')}" + (f" ({f['rule']})" if f.get("rule") else "")
            + f"; {f.get('base_cycles')} cycles per FFMA without a conflict, up to +{f.get('conflict_cycles')} with one"
            + (f"; three sources in one bank: {reuse.get('none')} cycles, with the reuse flag on slot a "
               f"{reuse.get('a')}, b {reuse.get('b')}, c {reuse.get('c')}, a and b {reuse.get('a+b')}" if reuse else "")
            + (f" [flags: {', '.join(r['flags'])}]" if r["flags"] else ""))


def summarize(store: Store, run_id: int) -> dict:
    """The suite's verdicts and conclusions, with the numbers behind them, from the run's
    stored results (the dispatch analysis runs again on the stored traces)."""
    rs = store.results(run_id)
    out: dict = {"conclusions": [], "verdicts": {}, "dispatch": {}, "scheduler": {}, "pipes": {}, "occupancy": {}}
    _dispatch(rs, out)
    _occupancy(rs, out)
    _fairness(rs, out)
    schedulers = _scheduler(rs, out)
    _pipes(rs, out, schedulers)
    _icache(rs, out)
    _banks(rs, out)
    return out
