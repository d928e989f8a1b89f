"""Efficiency losses (thesis chapter 8), pure functions on measured rates and the occupancy rules.

* A *cell* is one launch configuration of a variant with its measured rate: warps per SM x
  independent chains per thread (the dependence distance), in warp-instructions per clock per
  SM, and the record it comes from (the warps x distance grid, or the throughput records per
  (chains, warps)). Its *efficiency* is its rate over the largest rate of the variant's cells.
* :func:`distribution`: the losses of a variant's cells: the share within 5%, 10%, 50% of the
  maximum, the loss histogram, the worst cells, the fewest warps that reach the maximum.
* :func:`launch_efficiency`: a grid of B blocks of T threads on the GPU's SMs: blocks per SM
  from the occupancy rules (``behaviour.analyse.predict_blocks``), per-SM loads (a fair
  placement, or a measured one), waves, and the share of the ideal time reached when every
  block does the same work and an SM's rate depends on the warps it holds (``rate``; without
  it the SM's rate is taken as constant, which isolates the placement's loss).
* :func:`padding`: the cure of an unfair placement (thesis procedure 8.18): raise registers
  per thread (or shared memory per block) until the rules allow no more than the fair
  ceil(B / SMs) blocks on an SM; :func:`padding_check` compares that prediction with
  measured block -> SM placements (the behaviour suite's ``fairness`` results).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gpudissect.arch.occupancy import predict_blocks

# flags that keep a record out of the efficiency analysis (its number is not trustworthy)
BAD_FLAGS = ("exceeds-limit", "sass", "error", "not timed", "noisy", "poor-fit", "undetermined")


@cache
def settings() -> dict:
    """``data/advise.toml``: levels, the loss bins, the reference variants."""
    return tomllib.loads(resources.files("gpudissect.data").joinpath("advise.toml").read_text())


@dataclass(frozen=True)
class Cell:
    warps: int  # warps per SM
    chains: int  # independent chains per thread (the dependence distance)
    rate: float  # warp-instructions per clock per SM
    source: str  # the record and coordinates it comes from
    blocks: int = 1  # blocks per SM the warps were measured in

    @property
    def label(self) -> str:
        return f"{self.warps} warp{'s' if self.warps != 1 else ''} x {self.chains} chain{'s' if self.chains != 1 else ''}"


def clean(rec: dict) -> bool:
    """A record whose value the analysis may use: measured, no flag that distrusts it."""
    v = rec.get("value")
    return (v is not None and math.isfinite(v) and v > 0
            and not any(str(f).split(":")[0].strip() in BAD_FLAGS for f in rec.get("flags") or []))


def cells_from_grid(rec: dict) -> list[Cell]:
    """The cells of a ``grid`` record (samples.rates: rows = warps, columns = distances)."""
    p, s = rec.get("params") or {}, rec.get("samples") or {}
    ws, ds, rows = p.get("warps") or [], p.get("distances") or [], s.get("rates") or []
    out = []
    for i, w in enumerate(ws):
        for j, d in enumerate(ds):
            r = rows[i][j] if i < len(rows) and j < len(rows[i]) else None
            if r is not None and math.isfinite(r) and r > 0:
                out.append(Cell(int(w), int(d), float(r), f"grid W={w} d={d}"))
    return out


def cells_from_throughput(recs: list[dict]) -> list[Cell]:
    """The cells of a variant's clean ``throughput`` records (one per (chains, warps); their
    ``warps`` are warps per SM, in ``blocks_per_sm`` blocks)."""
    out = []
    for r in recs:
        if r.get("measure") != "throughput" or not clean(r):
            continue
        p = r.get("params") or {}
        if "chains" not in p or "warps" not in p:
            continue
        bps = int(p.get("blocks_per_sm") or 1)
        out.append(Cell(int(p["warps"]), int(p["chains"]), float(r["value"]),
                        f"throughput chains={p['chains']} warps={p['warps']}"
                        + (f" blocks_per_sm={bps}" if bps != 1 else ""), bps))
    return out


def best(cells: list[Cell]) -> Cell:
    """The cell of the largest rate (the fewest warps, then the fewest chains, on a tie)."""
    return max(cells, key=lambda c: (c.rate, -c.warps, -c.chains))


def efficiency(cell: Cell, top: float) -> float:
    return cell.rate / top


def reaching(cells: list[Cell], share: float | None = None) -> list[Cell]:
    """The cells whose rate is at least ``share`` (default: the settings' reach) of the maximum,
    fewest warps first."""
    share = settings()["reach"] if share is None else share
    top = best(cells).rate
    return sorted((c for c in cells if c.rate >= share * top), key=lambda c: (c.warps, c.chains))


def distribution(cells: list[Cell]) -> dict:
    """The losses of a variant's cells against their maximum (thesis Tables 8.4-8.13)."""
    if not cells:
        return {"cells": 0}
    st = settings()
    top = best(cells)
    eff = [(c, c.rate / top.rate) for c in cells]
    n = len(eff)
    within = {f"{lv:.0%}": round(sum(1 for _c, e in eff if e >= 1 - lv - 1e-12) / n, 4) for lv in st["within"]}
    bins = st["loss_bins"]
    hist = []
    for lo, hi in zip(bins, bins[1:], strict=False):
        k = sum(1 for _c, e in eff if lo <= 1 - e < hi or (hi == bins[-1] and 1 - e >= hi))
        hist.append({"loss": f"{lo:.0%}-{hi:.0%}", "cells": k, "share": round(k / n, 4)})
    worst = sorted(eff, key=lambda x: (x[1], x[0].warps, x[0].chains))[: st["worst"]]
    reach = reaching(cells)
    return {
        "cells": n, "max_rate": top.rate, "max_at": {"warps": top.warps, "chains": top.chains, "source": top.source},
        "within": within, "loss_histogram": hist,
        "worst": [{"warps": c.warps, "chains": c.chains, "rate": c.rate, "efficiency": round(e, 4),
                   "source": c.source} for c, e in worst],
        "reach": st["reach"],
        "fewest_warps": ({"warps": reach[0].warps, "chains": reach[0].chains, "rate": reach[0].rate,
                          "efficiency": round(reach[0].rate / top.rate, 4), "source": reach[0].source}
                         if reach else None),
        "mean_efficiency": round(sum(e for _c, e in eff) / n, 4),
    }


def efficiency_matrix(cells: list[Cell]) -> tuple[list[int], list[int], dict[tuple[int, int], float]]:
    """Warps (rows), chains (columns) and each measured cell's efficiency (thesis Table 8.4)."""
    top = best(cells).rate
    ws = sorted({c.warps for c in cells})
    ks = sorted({c.chains for c in cells})
    return ws, ks, {(c.warps, c.chains): c.rate / top for c in cells}


def rate_at(cells: list[Cell], warps: int, chains: int) -> Cell | None:
    """The measured cell for ``warps`` per SM at ``chains``: the one of the most warps not
    above ``warps`` (a rate does not fall by adding warps beyond the measured ones: saturation
    is proven by the sweep); None when no cell of that chain count has so few warps."""
    cand = [c for c in cells if c.chains == chains and c.warps <= warps]
    return max(cand, key=lambda c: c.warps) if cand else None


# ----------------------------------------------------------------- launches
def fair_loads(blocks: int, nsm: int) -> list[int]:
    """Blocks per SM of a fair placement: floor or ceil of blocks / SMs on every SM."""
    q, r = divmod(blocks, nsm)
    return [q + 1] * r + [q] * (nsm - r)


def stacked_loads(blocks: int, per_sm: int, nsm: int) -> list[int]:
    """The most unfair placement the rules allow: SMs filled to ``per_sm`` blocks one after
    another (the rest idle)."""
    full, rest = divmod(blocks, per_sm)
    if full + (rest > 0) > nsm:  # more than one wave: every SM full, the rest as fair
        return fair_loads(blocks, nsm)
    return [per_sm] * full + ([rest] if rest else []) + [0] * (nsm - full - (rest > 0))


def sm_time(load: int, per_sm: int, warps_per_block: int, rate: Callable[[int], float]) -> float:
    """Time of an SM that runs ``load`` equal blocks, ``per_sm`` at a time (rounds), each block
    ``warps_per_block`` warps of unit work; ``rate(w)``: the SM's rate with w warps."""
    t, left = 0.0, load
    while left > 0:
        m = min(left, per_sm)
        t += m * warps_per_block / rate(m * warps_per_block)
        left -= m
    return t


def launch_efficiency(blocks: int, threads: int, regs: int, smem: int, rules: dict, nsm: int,
                      loads: list[int] | None = None, rate: Callable[[int], float] | None = None) -> dict:
    """A launch of ``blocks`` blocks of ``threads`` threads (``regs`` registers per thread,
    ``smem`` bytes of shared memory per block) on ``nsm`` SMs: blocks per SM by the rules,
    waves, and the efficiency (ideal time / the busiest SM's time) under the placement
    ``loads`` (default: fair) and the SM rate ``rate(warps)`` (default: constant)."""
    if blocks < 1 or threads < 1 or nsm < 1:
        raise ValueError("blocks, threads and SMs must be at least 1")
    pred = predict_blocks(threads, regs, smem, rules)
    per_sm = pred["blocks"]
    wpb = -(-threads // 32)
    if per_sm < 1:
        return {"blocks_per_sm": 0, "limiters": pred["limiters"], "efficiency": None,
                "why": f"the rules allow no block of {threads} threads, {regs} registers, {smem} B"}
    loads = list(loads) if loads is not None else fair_loads(blocks, nsm)
    r = rate or (lambda _w: 1.0)
    top = max(r(w) for w in range(1, per_sm * wpb + 1))
    ideal = blocks * wpb / (nsm * top)
    times = [sm_time(n, per_sm, wpb, r) for n in loads]
    slowest = max(times)
    slots = nsm * per_sm
    waves = -(-max(loads) // per_sm)
    tail = blocks - (math.ceil(blocks / slots) - 1) * slots
    return {"blocks": blocks, "threads": threads, "warps_per_block": wpb, "regs": regs, "smem": smem,
            "blocks_per_sm": per_sm, "limiters": pred["limiters"], "slots": slots,
            "waves": waves, "fair_waves": math.ceil(blocks / slots), "last_wave_blocks": tail,
            "max_load": max(loads), "fair_max": -(-blocks // nsm), "idle_sms": sum(1 for n in loads if n == 0),
            "efficiency": round(ideal / slowest, 4) if slowest > 0 else None}


def padding(blocks: int, threads: int, regs: int, smem: int, rules: dict, nsm: int) -> dict:
    """The cure of an unfair placement of one wave: the fewest registers per thread (and,
    apart, the least shared memory per block) at which the rules allow at most the fair
    ceil(blocks / SMs) blocks on an SM, so no SM can get more than its share. Also what an
    unfair placement can cost without it (every SM filled to the rules' limit first)."""
    pred = predict_blocks(threads, regs, smem, rules)
    now = pred["blocks"]
    target = -(-blocks // nsm)
    out = {"blocks": blocks, "threads": threads, "regs": regs, "smem": smem, "blocks_per_sm": now,
           "limiters": pred["limiters"], "fair_max": target, "needed": now > target and blocks <= nsm * now}
    if not out["needed"]:
        out["why"] = ("the rules already allow no more than the fair share" if now <= target
                      else "more than one wave: every SM is filled to the limit anyway")
        return out
    worst = min(now, blocks)
    out["worst_case_efficiency"] = round(blocks / nsm / worst, 4)  # the busiest SM holds `worst`
    out["padded_regs"] = next((r for r in range(max(regs, 1), rules["max_regs_per_thread"] + 1)
                               if 1 <= predict_blocks(threads, r, smem, rules)["blocks"] <= target), None)
    unit = rules["smem_alloc_unit"]
    out["padded_smem"] = next((s for s in range(smem, rules["max_smem_per_block"] + 1, unit)
                               if 1 <= predict_blocks(threads, regs, s, rules)["blocks"] <= target), None)
    if out["padded_regs"] is not None:
        out["padded_blocks_per_sm"] = predict_blocks(threads, out["padded_regs"], smem, rules)["blocks"]
    return out


def min_paddable_warps(blocks: int, warps: int, regs: int, smem: int, rules: dict, nsm: int) -> int | None:
    """The fewest warps per block, from ``warps`` up, at which register padding alone can bring
    blocks per SM down to the fair share (thesis: at least 9 warps per block on the C2070)."""
    top = rules["max_threads_per_block"] // 32
    for w in range(warps, top + 1):
        p = padding(blocks, w * 32, regs, smem, rules, nsm)
        if not p["needed"] or p.get("padded_regs") is not None:
            return w
    return None


def padding_check(fairness: list[dict], rules: dict, nsm: int) -> list[dict]:
    """Per measured placement (behaviour ``fairness`` records): whether the rules guarantee
    that no SM gets more than ceil(grid / SMs) blocks (one wave, blocks per SM at most that)
    and what the launches showed (the most blocks on an SM against that share, per launch)."""
    rows = []
    for r in fairness:
        p, fit = r.get("params") or {}, r.get("fit") or {}
        per = fit.get("per_launch") or []
        if not per or "grid" not in p:
            continue
        grid = int(p["grid"])
        bps = predict_blocks(int(p["threads"]), int(p.get("regs") or 0), int(p.get("smem") or 0), rules)["blocks"]
        share = -(-grid // nsm)
        guaranteed = 1 <= bps <= share and grid <= nsm * bps
        worst = max(int(d["max"]) for d in per)
        rows.append({"config": r["variant"], "grid": grid, "threads": p["threads"], "regs": p.get("regs"),
                     "smem": p.get("smem"), "blocks_per_sm": bps, "fair_max": share, "guaranteed": guaranteed,
                     "launches": len(per), "max_load": worst,
                     "losses": [d.get("loss") for d in per],
                     "agrees": (worst <= share) if guaranteed else None})
    return rows
