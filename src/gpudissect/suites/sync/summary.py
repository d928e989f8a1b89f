"""The sync suite's summary: the contention tables, barrier, fence and launch costs from a
run's stored results, with the conclusions as sentences. Values as measured; a point whose
launches disagree keeps its ``noisy`` flag beside it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudissect.suites.sync import analyse as an
from gpudissect.suites.sync import kernels as K
from gpudissect.suites.sync.branches import conclusions as branch_conclusions

if TYPE_CHECKING:
    from gpudissect.store.db import Store, StoredResult

BAD = ("sass:", "error")


def _bad(r: StoredResult) -> list[str]:
    return [f for f in r["flags"] or [] if f.startswith(BAD)]


def atomic_cells(rs: list[StoredResult], space: str) -> dict[tuple[str, str], dict]:
    out = {}
    for r in rs:
        if r["measure"] != "throughput" or not r["variant"].startswith(f"atomic:{space}:") or not r["fit"]:
            continue
        f = r["fit"]
        sweep = f.get("sweep") or {}
        pw = f.get("plateau_warps")
        at = sweep.get(str(pw)) or {}
        hi = at.get("sm_median_rate")  # the median SM's rate over its own span (x SMs below)
        out[(r["params"]["op"], r["params"]["mode"])] = {
            "chip": at.get("chip"), "per_sm": at.get("per_sm"), "plateau_warps": pw, "peak": f.get("peak"),
            "chip_hi": hi * at["sms"] if space == "global" and hi is not None and at.get("sms") else None,
            "peak_warps": f.get("peak_warps"), "saturated": f.get("saturated"), "rise": f.get("rise"),
            "fairness": at.get("fairness"), "sweep": {w: v.get("chip") for w, v in sweep.items()},
            "flags": r["flags"] or []}
    return out


def _atomic(rs: list[StoredResult], out: dict) -> None:
    C = out["conclusions"]
    for space, ops, modes in (("global", K.GLOBAL_OPS, K.GLOBAL_MODES), ("shared", K.SHARED_OPS, K.SHARED_MODES)):
        cells = atomic_cells(rs, space)
        if not cells:
            continue
        ops_here = [o for o in ops if any((o, m) in cells for m in modes)]
        modes_here = [m for m in modes if any((o, m) in cells for o in ops)]
        table = an.contention_table(cells, ops_here, modes_here)
        out["atomic"][space] = {"ops": ops_here, "modes": modes_here, "mode_text": {m: modes[m] for m in modes_here},
                                "cells": {f"{o}|{m}": c for (o, m), c in cells.items()}, "table": table}
        if space == "global":
            C.append("global atomics: chip-wide rate = all SMs' work over the slowest SM's time (every SM released "
                     "together; the L2 serves SMs unequally: the fast ones wait for the slowest); after '..': the "
                     "median SM's own rate (its work over its own time) x SMs")
        C.append(f"{space} atomics, contention table ({'one block per SM on every SM' if space == 'global' else 'per SM'};"
                 f" modes: " + "; ".join(f"{m} = {modes[m]}" for m in modes_here) + "):")
        C.extend("  " + row for row in table)
        unsat = [f"{o}/{m}" for (o, m), c in cells.items() if c.get("saturated") is False]
        if unsat:
            C.append(f"  still rising at the largest warp count (not saturated): {', '.join(unsat)}")
        noisy = [f"{o}/{m}" for (o, m), c in cells.items() if any(f.startswith("noisy") for f in c["flags"])]
        if noisy:
            C.append(f"  noisy points (launches disagree by > 2%): {', '.join(noisy)}")


def _latency(rs: list[StoredResult], out: dict) -> None:
    lat = {r["variant"].split(":", 1)[1]: r["value"] for r in rs if r["measure"] == "latency" and r["value"]}
    out["latency"] = lat
    if lat:
        out["conclusions"].append("uncontended atomic latency (one warp, each lane its own word; a step includes the "
                                  "dependent 64-bit address add; global: on the buffer's first line, its L2 "
                                  "partition not chosen): " + ", ".join(f"{k} {v:.1f}" for k, v in lat.items())
                                  + " cycles")
    placed: dict[str, dict] = {}
    why: dict[str, str] = {}
    for r in rs:
        side = r["measure"].removeprefix("latency_l2_")
        if side in ("near", "far"):
            key = r["variant"].split(":", 1)[1]
            if r["value"] is not None:
                placed.setdefault(key, {})[side] = r["value"]
            elif r["flags"]:
                why[key] = r["flags"][-1]
            fit = r["fit"] or {}
            if fit.get("ld_split"):
                placed.setdefault(key, {}).setdefault("_ld", fit["ld_split"])
                placed[key]["_sms"] = fit.get("sms")
                placed[key]["_own"] = (fit.get("atom_split"), fit.get("atom_agrees_lines"), fit.get("lines"))
    out["latency_l2"] = {k: {s: v for s, v in d.items() if not s.startswith("_")} for k, d in placed.items()}
    parts = []
    for k, d in placed.items():
        if "near" in d and "far" in d:
            ld = d["_ld"]
            own, agree, n = d.get("_own") or (None, None, None)
            extra = ""
            if own and own.get("bimodal") and agree is not None and n and agree < 0.8 * n:
                extra = (f"; the atomic's own groups {own['low_median']:.0f} / {own['high_median']:.0f} fall on the "
                         f"load's side for only {agree} of {n} lines: it does not follow the load's partition")
            parts.append(f"{k} near {d['near']:.1f}, far {d['far']:.1f} (the same lines' ld.global.cg hits "
                         f"{ld['low_median']:.0f} / {ld['high_median']:.0f}; SM {'/'.join(map(str, d['_sms'] or []))}"
                         f"{extra})")
    if parts:
        out["conclusions"].append("global atomic latency by the L2 partition of its line for the SM that runs it "
                                  "(lines placed by a dependent ld.global.cg chain from the same block: its L2 hits "
                                  "fall in a near and a far group): " + "; ".join(parts) + " cycles; the instruction "
                                  "suite's atom latency is a chain on an unplaced line with its own glue")
    for k, w in why.items():
        out["conclusions"].append(f"global {k} latency near/far: {w}")


def _barrier(rs: list[StoredResult], out: dict) -> None:
    for r in rs:
        if r["measure"] != "barrier" or not r["fit"]:
            continue
        kind = r["params"]["kind"]
        sw = r["fit"]["sweep"]
        out["barrier"][kind] = {"axis": r["params"]["axis"], "text": r["params"]["text"],
                                "cycles": {k: v["cycles"] for k, v in sw.items()},
                                "producer_cycles": {k: v.get("producer_cycles") for k, v in sw.items()
                                                    if v.get("producer_cycles") is not None},
                                "flags": r["flags"] or []}
        out["conclusions"].append(
            f"{kind} ({r['params']['text']}): cycles per barrier vs {r['params']['axis']}: "
            + ", ".join(f"{k}: {_f(v['cycles'])}" for k, v in sw.items())
            + (f" [{'; '.join(_bad(r))}]" if _bad(r) else ""))


def _fence(rs: list[StoredResult], out: dict) -> None:
    for r in rs:
        if r["measure"] != "fence" or not r["fit"]:
            continue
        kind = r["params"]["kind"]
        sw = {k: v["cycles"] for k, v in r["fit"]["sweep"].items()}
        out["fence"][kind] = sw
    if out["fence"]:
        keys = list(next(iter(out["fence"].values())))
        out["conclusions"].append("fences, cycles per fence (one block per SM on every SM; 'store': a store just "
                                  "before each fence; wN: warps per block): " + "; ".join(
                                      f"{kind}: " + ", ".join(f"{k} {_f(sw.get(k))}" for k in keys)
                                      for kind, sw in out["fence"].items()))


def _launch(rs: list[StoredResult], out: dict) -> None:
    grid: dict[str, dict] = {}
    for r in rs:
        if r["measure"] != "launch":
            continue
        if r["variant"] == "launch:pdl":
            out["launch"]["pdl"] = {"saved_us_per_pair": r["value"], **(r["fit"] or {}), "flags": r["flags"] or []}
            continue
        parts = r["variant"].split(":")
        if len(parts) == 3:
            g = parts[1].split("=", 1)[1]
            grid.setdefault(g, {})[parts[2]] = r["value"]
    out["launch"]["grid"] = grid
    C = out["conclusions"]
    if grid:
        C.append("launch costs of an empty kernel (128 threads per block), us per launch, by grid size: " + "; ".join(
            f"{g} blocks: launch+sync wall {_f(v.get('sync-wall'))}, events {_f(v.get('sync-event'))}, "
            f"back-to-back {_f(v.get('stream'))}, graph replay {_f(v.get('graph'))}" for g, v in grid.items()))
    pdl = out["launch"].get("pdl")
    if pdl:
        if pdl.get("saved_us_per_pair") is None:
            C.append("programmatic dependent launch: not measured (" + "; ".join(pdl["flags"]) + ")")
        else:
            C.append(f"programmatic dependent launch: a (spinning primary, waiting secondary) pair takes "
                     f"{_f(pdl.get('stream_us_per_pair'))} us in stream order, {_f(pdl.get('pdl_us_per_pair'))} us "
                     f"with PDL: {_f(pdl['saved_us_per_pair'])} us saved per pair")


def _f(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def summarize(store: Store, run_id: int) -> dict:
    rs = store.results(run_id)
    out: dict = {"conclusions": [], "atomic": {}, "latency": {}, "barrier": {}, "fence": {}, "launch": {}}
    _atomic(rs, out)
    _latency(rs, out)
    _barrier(rs, out)
    _fence(rs, out)
    _launch(rs, out)
    out["conclusions"] += branch_conclusions(rs)  # type: ignore[arg-type]
    bad = [f"{r['variant']}: {'; '.join(_bad(r))}" for r in rs if _bad(r)]
    if bad:
        out["conclusions"].append(f"{len(bad)} results carry sass:/error flags: " + " | ".join(bad[:10]))
    return out
