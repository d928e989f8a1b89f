"""The async suite's conclusions, from its stored records (each sentence names the records
behind it; a value the run did not produce reads '-')."""

from __future__ import annotations

from gpudissect.suites.async_copy import analyse as an
from gpudissect.suites.async_copy import wgmma_feed

FIGURES = ["async_tma_bandwidth"]


def _num(v, digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _values(records: list[dict]) -> dict[str, dict]:
    return {r["variant"]: r for r in records}


def _v(recs: dict[str, dict], name: str) -> float | None:
    r = recs.get(name)
    return None if r is None else r.get("value")


def bandwidth_table(recs: dict[str, dict]) -> dict[str, dict]:
    out = {}
    for name, r in recs.items():
        if not name.startswith("bw:"):
            continue
        fit = r.get("fit") or {}
        sat = fit.get("saturation") or {}
        p = r.get("params") or {}
        out[name] = {"gbps": r.get("value"), "ctas_per_sm": sat.get("at"), "saturated": sat.get("saturated"),
                     "bytes_per_clk_per_sm": fit.get("bytes_per_clk_per_sm"), "tile": p.get("tile"),
                     "where": p.get("where"), "flags": r.get("flags") or []}
        if "ilp" in sat:  # the plain-load sweep: its best configuration and the saturation evidence
            out[name].update(ilp=sat["ilp"], warps_per_sm=sat.get("warps_per_sm"),
                             evidence=sat.get("evidence") or sat.get("why"))
    return out


def _tiles(bw: dict[str, dict], prefix: str) -> dict[int, float]:
    return {d["tile"]: d["gbps"] for n, d in bw.items() if n.startswith(prefix) and d["gbps"] is not None}


def _configs(r: dict) -> dict:
    smp = r.get("samples")
    return (smp.get("configs") or {}) if isinstance(smp, dict) else {}


def little_law(recs: dict[str, dict], prefix: str = "bw:tma.bulk:dram:") -> list[dict]:
    """Per tile, the 1-CTA-per-SM rate of a TMA stream and the turnaround it implies: the bytes
    the SMs keep in flight (SMs x ring depth x tile) over the rate."""
    out = []
    for name, r in recs.items():
        one = _configs(r).get("1") if name.startswith(prefix) else None
        p = r.get("params") or {}
        if one and one.get("gbps") and p.get("sms") and p.get("stages"):
            inflight = p["sms"] * p["stages"] * p["tile"]
            out.append({"tile": p["tile"], "gbps": one["gbps"], "stages": p["stages"],
                        "turnaround_ns": inflight / one["gbps"]})
    return sorted(out, key=lambda d: d["tile"])


def fall_off(recs: dict[str, dict], prefix: str) -> dict[str, dict]:
    """Per stream, the best rate of its sweep and the rate at its largest CTAs per SM."""
    out = {}
    for name, r in recs.items():
        if not name.startswith(prefix):
            continue
        cfg = {int(k): v.get("gbps") for k, v in _configs(r).items() if v.get("gbps") is not None}
        if len(cfg) > 1:
            best = max(cfg, key=lambda k: cfg[k])
            last = max(cfg)
            p = r.get("params") or {}
            fly = best * p["stages"] * p["tile"] if p.get("stages") and p.get("tile") else None
            out[name] = {"best": cfg[best], "best_at": best, "last": cfg[last], "last_at": last,
                         "inflight_per_sm_at_best": fly}
    return out


def baseline_text(base: dict) -> str:
    """The plain-load baseline's best configuration and its saturation evidence, in words."""
    if not base or base.get("gbps") is None:
        return "ld.global.cg.v4: - (not measured)"
    cfg = (f" at ILP {base['ilp']} x {base.get('warps_per_sm')} warps/SM" if "ilp" in base
           else f" at {base.get('ctas_per_sm')} CTAs/SM")
    sat = "saturated" if base.get("saturated") else "NOT saturated"
    ev = f": {base['evidence']}" if base.get("evidence") else ""
    return f"ld.global.cg.v4 best {_num(base['gbps'])} GB/s{cfg} ({sat}{ev})"


def compare_best(tma: dict, base: dict) -> tuple[float | None, str]:
    """TMA's best rate over the plain load's best, only where both are proven saturated (best
    against best); else None and why."""
    if not base or base.get("gbps") is None or tma.get("gbps") is None:
        return None, "a rate is missing"
    if not base.get("saturated"):
        return None, "the plain-load baseline is not proven saturated"
    if not tma.get("saturated"):
        return None, "TMA's best is not proven saturated"
    return an.fraction(tma["gbps"], base["gbps"]), ""


def summarize(records: list[dict]) -> dict:
    recs = _values(records)
    costs = {n.removeprefix("op:"): r.get("value") for n, r in recs.items() if n.startswith("op:")}
    lat = {n: r.get("value") for n, r in recs.items() if not n.startswith(("op:", "bw:", "wgmma:"))}
    bw = bandwidth_table(recs)
    c: list[str] = []
    c.append(
        "mbarrier, back to back in one thread (cycles each): init {}, arrive {}, arrive.expect_tx {}, expect_tx {}, "
        "test_wait {}, try_wait on a completed phase {} ({} with a suspend-time hint); a phase flip (arrive, then "
        "wait for it) {} cycles; a producer/consumer round trip between two warps {} cycles (op:*, mbarrier:*)".format(
            *(_num(costs.get(k), 1) for k in ("mbarrier.init", "mbarrier.arrive", "mbarrier.arrive.expect_tx",
                                              "mbarrier.expect_tx", "mbarrier.test_wait(pending)",
                                              "mbarrier.try_wait(done)", "mbarrier.try_wait(done,hint)")),
            _num(lat.get("mbarrier:phase-flip"), 1), _num(lat.get("mbarrier:handshake"), 1)))
    c.append("try_wait on a phase that never completes returns false after {} cycles ({} with a 1000 ns hint) "
             "(op:mbarrier.try_wait(timeout*))".format(_num(costs.get("mbarrier.try_wait(timeout)")),
                                                       _num(costs.get("mbarrier.try_wait(timeout,hint=1000ns)"))))
    c.append("fences, back to back (cycles each): fence.proxy.async {}, fence.proxy.async.shared::cta {}, "
             "fence.mbarrier_init.release.cluster {}, fence.acq_rel.cluster {}, fence.acq_rel.cta {}".format(
                 *(_num(costs.get(k), 1) for k in ("fence.proxy.async", "fence.proxy.async.shared::cta",
                                                   "fence.mbarrier_init.release.cluster", "fence.acq_rel.cluster",
                                                   "fence.acq_rel.cta"))))
    c.append("cp.async issued and waited for (cycles; ld.global + st.shared of the same bytes in brackets): "
             + ", ".join(f"{v} {_num(lat.get(f'cpasync:{v}'))} ({_num(lat.get(f'sync:{v}'))})"
                         for v in ("ca4", "ca8", "ca16", "cg16"))
             + "; commit_group {} and wait_group with nothing outstanding {} cycles".format(
                 _num(costs.get("cp.async.commit_group"), 1), _num(costs.get("cp.async.wait_group"), 1)))
    for where, what in (("l2", "L2 hit"), ("dram", "DRAM miss")):
        tiles = {int(n.rsplit(":", 1)[1]): v for n, v in lat.items() if n.startswith(f"tma:load:{where}:")}
        c.append(f"TMA bulk load, issue to mbarrier completion, {what} (cycles by tile bytes): "
                 + ", ".join(f"{t} B {_num(v)}" for t, v in sorted(tiles.items()))
                 + f"; a dependent ld.global.cg.u64 {what}: {_num(lat.get(f'ld:{where}'))} cycles (its chain "
                 "holds an AND and a 64-bit add of glue per load)")
    c.append("bulk shared -> global, committed and waited for (cycles by tile bytes): "
             + ", ".join(f"{k.removeprefix('tma:')} {_num(v)}" for k, v in sorted(lat.items())
                         if k.startswith(("tma:store", "tma:reduce"))))
    tens = {k.removeprefix("tensor:"): v for k, v in lat.items() if k.startswith("tensor:")}
    if tens:
        c.append("cp.async.bulk.tensor, L2 hit, issue to completion (cycles): "
                 + ", ".join(f"{k} {_num(v)}" for k, v in tens.items()))
    base = bw.get("bw:ld.v4:dram") or {}
    ld = base.get("gbps")
    cpa = (bw.get("bw:cp.async.cg16:dram") or {}).get("gbps")
    for kind in ("tma.bulk", "tma.tensor2d"):
        pts = _tiles(bw, f"bw:{kind}:dram:")
        if not pts:
            continue
        best_t = max(pts, key=lambda t: pts[t])
        d = bw[f"bw:{kind}:dram:{best_t}"]
        share, why = compare_best(d, base)
        reach = an.first_reaching(pts, ld) if ld and share is not None else None
        c.append(f"{kind} DRAM read: best {_num(pts[best_t])} GB/s at {best_t} B tiles, {d['ctas_per_sm']} CTAs/SM "
                 f"({'saturated' if d['saturated'] else 'NOT saturated'}); the plain-load baseline of the same run, "
                 f"{baseline_text(base)}; cp.async.cg16 {_num(cpa)} GB/s: TMA reaches "
                 + (f"{share:.0%} of the plain load's best" if share is not None and share <= 1.0 else
                    f"{share:.0%} of this run's plain-load best: above it, so this sweep's plain loads, not TMA, "
                    "are what falls short of the DRAM (a plain read can reach the DRAM's rate: the memory suite's "
                    "DRAM read sweep is the plain-load reference)" if share is not None else f"- ({why})")
                 + ("" if share is None else (f"; tiles from {reach} B reach 90% of it" if reach
                                              else "; no tile reaches 90% of it")))
    little = little_law(recs)
    if little:
        c.append("tma.bulk DRAM read at 1 CTA/SM (one issuing thread, a ring of {} tiles): ".format(
            little[0]["stages"]) + ", ".join(f"{d['tile']} B {_num(d['gbps'])} GB/s" for d in little)
            + "; bytes in flight / rate (Little's law) = " + ", ".join(f"{_num(d['turnaround_ns'])}" for d in little)
            + " ns per tile turnaround: latency-bound until the ring holds enough bytes")
    fo = fall_off(recs, "bw:tma.bulk:dram:")
    falls = [f"{n.rsplit(':', 1)[1]} B: {_num(d['best'])} at {d['best_at']} -> {_num(d['last'])} GB/s at "
             f"{d['last_at']} CTAs/SM" for n, d in fo.items() if d["last"] < 0.9 * d["best"]]
    if falls:
        fly = sorted({d["inflight_per_sm_at_best"] for d in fo.values() if d["inflight_per_sm_at_best"]})
        c.append("more TMA streams per SM than the best lower the DRAM rate (" + "; ".join(falls) + "); bytes in "
                 "flight per SM at each tile's best: " + ", ".join(f"{x // 1024} KiB" for x in fly))
    l2 = _tiles(bw, "bw:tma.bulk:l2:")
    if l2:
        best_t = max(l2, key=lambda t: l2[t])
        c.append(f"tma.bulk from an L2-resident footprint: best {_num(l2[best_t])} GB/s at {best_t} B tiles; "
                 f"ld.global.v4 {_num((bw.get('bw:ld.v4:l2') or {}).get('gbps'))}, cp.async.cg16 "
                 f"{_num((bw.get('bw:cp.async.cg16:l2') or {}).get('gbps'))}, cp.async.ca 4/8/16 B "
                 + "/".join(_num((bw.get(f"bw:cp.async.ca{n}:l2") or {}).get("gbps")) for n in (4, 8, 16))
                 + " GB/s (.ca copies may also hit in L1 on later passes over the 8 MiB footprint)")
    extra = {n.removeprefix("bw:"): d["gbps"] for n, d in bw.items()
             if n.startswith(("bw:tma.tensor2d.", "bw:tma.store", "bw:tma.reduce"))}
    if extra:
        c.append("TMA variants, DRAM (GB/s): " + ", ".join(f"{k} {_num(v)}" for k, v in sorted(extra.items())))
    wg = wgmma_feed.summary_rows(recs)
    c += wgmma_feed.conclusions(wg)
    flagged = sorted(r["variant"] for r in records if any(str(f).startswith(("sass:", "error", "unphysical"))
                                                          for f in r.get("flags") or []))
    if flagged:
        c.append(f"flagged (sass / error / unphysical): {', '.join(flagged)}")
    return {"conclusions": c, "costs": costs, "latency": lat, "bandwidth": bw, "wgmma": wg, "figures": FIGURES}
