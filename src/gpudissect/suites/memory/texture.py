"""What a texture-latency figure measures: the dependent ``tex.1d`` chain of ``latency/tex``
against per-fetch windows, the way benchmarks that time each load between two clock reads do
it (MT4G's texture latency: ``start = clock; i = tex1Dfetch(t, i); end = clock``).

A window closes when its end clock read issues. Issue is in order, and an instruction waits
only for the registers it reads, so a fetch whose result is first used after the end read
leaves the window open for the issue of the fetch (which waits for the PREVIOUS fetch's
result) and nothing of its own latency: the window is the chain period less the work between
two windows. ``tex_win_used`` uses the result inside the window (an ``add`` of a runtime zero
before the end read), so its window holds the whole fetch. Both kernels run ``UNROLL``
windows back to back inside one clock64 region (the chain period per fetch, with the
windows' overhead), after ``warm`` untimed fetches.

The kernels, ``tex_win_open`` and ``tex_win_used``, are ``kernels.window_kernel``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpudissect.device.args import Buf, Tex
from gpudissect.store.db import Result
from gpudissect.suites.memory import kernels as gm

if TYPE_CHECKING:
    from gpudissect.suites.memory.launcher import Launcher

ITEM = "texture/method"


def bench(r: Launcher) -> tuple[list[Result], dict]:
    """Both window kinds over the hot chain of ``latency/tex``, ``lat_launches`` launches."""
    p = r.plan
    ch = gm.build_chain(p.hot_footprint, p.hot_spacing, "random", seed=p.seed, limit=r.limit())
    tex = Tex(Buf("texchain", data=gm.element_indices(ch)))
    out, texts = [], {}
    for kind in gm.WINDOW_KINDS:
        name = f"tex_win_{kind}"
        variant = f"texmethod/{kind}"
        try:
            wins, periods = [], []
            for _ in range(max(2, p.lat_launches)):
                run = r.dev.launch(r.k.cubin, name, 1, 1, [
                    tex, Buf("texwin", nbytes=8 * gm.WINDOW_WORDS, read=True),
                    np.uint32(4 * ch.nodes), np.uint32(0)])
                w = np.asarray(run.outputs["texwin"],
                               dtype=np.uint64)[:gm.WINDOW_WORDS].astype(np.int64)
                periods.append(float(w[0]) / gm.UNROLL)
                wins += [int(x) for x in w[3:]]
            a = np.asarray(wins, dtype=float)
            out.append(r.k.result(
                name, variant=variant, measure="latency", value=float(np.median(a)), unit="cycles",
                statistic="median over fetches and launches of one fetch's clock window",
                params={"kind": kind, "footprint": ch.footprint, "spacing": ch.spacing,
                        "window_min": float(a.min()), "window_max": float(a.max()),
                        "windows_distinct": sorted({int(x) for x in a})[:16],
                        "period_per_fetch": float(np.median(periods)),
                        "method": "32-bit clock read; tex.1d fetch" + (
                            "; add of the result" if kind == "used" else "") + "; 32-bit clock read"},
                samples={"windows": wins, "period_per_fetch": periods}))
            texts.update(r.k.texts(name))
        except Exception as e:  # recorded; the sweep goes on
            out.append(Result(variant, "latency", None, "cycles", "none", cls="memory",
                              strategy="memory", flags=[f"error: {type(e).__name__}: {e}"]))
    return out, texts


def summarize(records: list[dict]) -> dict:
    """Chain latency (``latency/tex``) beside the two windows and their periods."""
    out: dict = {}
    for r in records:
        if r["variant"] == "latency/tex" and r.get("value"):
            out["chain"] = r["value"]
        if r["variant"].startswith("texmethod/") and r.get("value"):
            q = r.get("params") or {}
            out[q.get("kind", r["variant"].split("/")[1])] = {
                "window": r["value"], "min": q.get("window_min"), "max": q.get("window_max"),
                "period": q.get("period_per_fetch")}
    return out


def conclusions(t: dict) -> list[str]:
    chain, op, used = t.get("chain"), t.get("open"), t.get("used")
    if not (chain and op):
        return []
    line = (f"Texture latency: a dependent tex.1d chain (TLD.LZ) takes {chain:.0f} cycles per fetch. "
            f"Timed per fetch between two 32-bit clock reads with the fetched index first used after "
            f"the second (the per-load window of MT4G), the window reads {op['window']:.0f} cycles "
            f"({op['min']:.0f}-{op['max']:.0f}) while the same loop's period is {op['period']:.0f} per fetch")
    if used:
        line += (f"; with the result used inside the window it reads {used['window']:.0f} "
                 f"({used['min']:.0f}-{used['max']:.0f}), period {used['period']:.0f}")
    if op["window"] < 0.75 * chain and (not used or used["window"] >= 0.9 * chain):
        line += (". The open window closes when the fetch issues, holding the wait for the previous "
                 "fetch less the work between windows, not a fetch's latency: a per-load window of "
                 "that kind reads low; the chain figure is the fetch latency.")
    else:
        line += "."
    return [line]
