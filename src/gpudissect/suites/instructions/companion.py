"""The companion removal: a variant measured with a companion (an instruction added to every
instance of its chain so that ptxas cannot fold it) gets its own numbers after the run, from the
pair's (stored under the measure + ``records.PAIR``) and the companion's own, measured in the
same run (item ``derived/<variant>``); a study's chain with a companion of its own gets its own
number from its study (:meth:`VariantStudy.companion_removed`, stored with the variant's item).
"""

from __future__ import annotations

from gpudissect.bench.contract import Context
from gpudissect.catalog.model import Variant
from gpudissect.store.db import Result
from gpudissect.suites.instructions.core import (
    BAD,
    VariantStudy,
    VariantWork,
    base_flags,
    select_variants,
)
from gpudissect.suites.instructions.own_sass import own_sass
from gpudissect.suites.instructions.records import PAIR
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import (
    companion_measured_by,
    companion_references,
    companion_sass,
)
from gpudissect.suites.instructions.verify import autoverify_many


def clean_row(r) -> bool:
    """A stored row with a value and none of the flags that keep a measurement out (core.BAD)."""
    return r["value"] is not None and not any(f.startswith(BAD) for f in r["flags"])


def _clean_single(rows: dict[str, dict], op: str, exclude: set[str]) -> tuple[dict, float] | None:
    """A clean record of a variant whose one instance is exactly the SASS ``op``, with the
    factor that makes its rate that SASS's: 1; or, failing one, a paired record (half an ``op``
    per instance: two instances in its two lanes) and 0.5."""
    clean = [r for v, r in sorted(rows.items()) if v not in exclude and clean_row(r)]
    for sass, factor in (([op], 1.0), ([f"0.5*{op}"], 0.5)):
        r = next((r for r in clean if r["sass"] == sass), None)
        if r is not None:
            return r, factor
    return None


def companion_removed(w: VariantWork, ref: str | None, comp_ops: tuple[str, ...],
                      lat: dict[str, dict], peak: dict[str, dict], pair: dict[str, dict],
                      paired: set[str]) -> list[Result]:
    """The variant's own latency and throughput from the pair's (its chain with the companion)
    and the companion's own, measured in the same run. Latencies add along the chain: the
    companion's (``ref``) is subtracted. A throughput cannot be split that way (the two may
    issue to one pipe or to two): where the variant's own SASS is one instruction, the clean
    throughput of a variant of exactly that SASS stands for it (the same machine instruction);
    otherwise the pair's rate is reported as including the companion."""
    v = w.variant
    comp = w.record.companion or ""
    keep = [f for f in base_flags(w) if not f.startswith("companion:")]  # glue, branch
    n = 2 if v.chain_operand is not None and v.chain_operand.reg_class == "rd" else 1
    own = own_sass(w.record.sass_counts, comp_ops, n)
    sass = [op if c == 1 else f"{c:g}*{op}" for op, c in own.items()]
    base = dict(sass=sass, strategy=w.record.strategy, cls=v.cls)
    out: list[Result] = []
    why = None if ref else f"no variant measures the companion '{comp}' alone"
    pl, rl = pair.get("latency"), lat.get(ref or "")
    if why is None and not (pl and clean_row(pl)):
        why = "the pair's latency is not clean"
    if why is None and not (rl and clean_row(rl)):
        why = f"{ref}'s latency is not clean in this run"
    if why is None:
        value = pl["value"] - rl["value"]
        if value > 0:
            out.append(Result(v.name, "latency", value, "cycles",
                              f"latency of the pair minus {ref}'s (the companion '{comp}')",
                              params={"pair": pl["value"], "companion": {"variant": ref,
                                                                         "latency": rl["value"]}},
                              flags=keep + [f"companion removed: {comp} ({ref}, {rl['value']:.3g} cycles)"],
                              **base))
        else:
            why = f"the pair ({pl['value']:.3g}) is not slower than {ref} ({rl['value']:.3g})"
    if why is not None:
        out.append(Result(v.name, "latency", None, "cycles", "none", params={"pair": pl and pl["value"]},
                          flags=keep + [f"includes companion: {comp}: {why}"], **base))
    pt = pair.get("throughput_peak")
    found = _clean_single(peak, sass[0], paired | {v.name}) if len(own) == 1 and sass == list(own) else None
    if found is not None:
        same, factor = found
        half = "" if factor == 1 else ", halved: it holds two instances per SASS (paired lanes)"
        out.append(Result(v.name, "throughput_peak", same["value"] * factor, "warp_instr/cycle/SM",
                          f"the clean throughput of {same['variant']}: the same single SASS "
                          f"({sass[0]}) as this variant without its companion{half}",
                          params={"same_sass_as": same["variant"], "pair": pt and pt["value"],
                                  **{k: same["params"][k] for k in ("best", "bound")
                                     if k in (same["params"] or {})}},
                          flags=keep + [f"same SASS as {same['variant']}"], **base))
    else:
        why = (f"the pair's rate ({pt['value']:.3g})" if pt and pt["value"] else "the pair has no rate")
        out.append(Result(v.name, "throughput_peak", None, "warp_instr/cycle/SM", "none",
                          params={"pair": pt and pt["value"]},
                          flags=keep + [f"includes companion: {comp}: {why}; no clean variant of the "
                                        "same single SASS to stand for it"], **base))
    return out


def derive(ctx: Context, studies: tuple[VariantStudy, ...]) -> None:
    """The own numbers of every pair of the run (the suite's derive phase): each variant's
    (:func:`companion_removed`, item ``derived/<variant>``), then each study's of its own pairs."""
    works: dict[str, VariantWork] = dict(ctx.state.get("works", {}))
    rows = ctx.store.results(ctx.run_id)
    lat = {r["variant"]: r for r in rows if r["measure"] == "latency"}
    peak = {r["variant"]: r for r in rows if r["measure"] == "throughput_peak"}
    pairs: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["measure"].endswith(PAIR):
            pairs.setdefault(r["variant"], {})[r["measure"].removesuffix(PAIR)] = r
    # a resumed run prepared only the items it measured: map the others again (no GPU)
    need = (set(pairs) | set(companion_references())) - set(works) if pairs else set()
    if need:
        vs = [v for v in select_variants(None, ctx.options.get("catalog")) if v.name in need]
        recs = autoverify_many(vs, ctx.target, jobs=ctx.jobs)
        works.update({v.name: VariantWork(v, r) for v, r in zip(vs, recs, strict=True)})
    for name, w in works.items():
        if not (w.record.verified and w.record.companion and name in pairs):
            continue
        op = get_strategy(w.record.strategy or "companion").companion
        ref = companion_measured_by(op, w.variant.chain_operand.reg_class)
        res = companion_removed(w, ref, companion_sass(op), lat, peak, pairs[name], set(pairs))
        ctx.store.save(ctx.run_id, f"derived/{name}", res)
    cat: dict[str, Variant] | None = None
    for s in studies:
        own = {(v, m): r for v, ms in pairs.items() for m, r in ms.items() if s.writes(m)}
        for (name, _m), pr in sorted(own.items()):
            if cat is None:
                cat = {v.name: v for v in select_variants(None, ctx.options.get("catalog"))}
            res1 = s.companion_removed(cat[name], pr, lat) if name in cat else None
            if res1 is not None:
                # stored with the variant's own item (done already): an item's results stay its own
                ctx.store.save(ctx.run_id, name, [res1])
