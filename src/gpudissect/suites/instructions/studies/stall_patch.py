"""Below ptxas (issue 35): a fixed-latency SASS instruction's true latency, from its dependent
chain with ptxas's stall counts patched down (``kernel/patch.py``), a study of the instruction
suite (:data:`STUDY`).

The hardware does not check a fixed-latency result's dependence: ptxas makes the consumer wait
by the stall count in the producer's control bits. So a chain timed as ptxas scheduled it
measures ptxas's stall. Here the core's latency family (one chain, one warp) is run again with
every chain instruction's stall lowered to ``s``, for ``s`` from ptxas's stall down to 1; at each
``s`` the sink values of all 32 lanes are compared with the unpatched kernel's, at the study's own
lengths (else the family's two longest) and for the first two sets of input values under which
the chain's value moves with its length (the kernel's own, its low bits flipped, then seeded
random ones). The smallest ``s`` at which it and every
larger stall still compute the unpatched values is the pipeline's latency (``latency_hw``);
below it the consumer read the register before the producer wrote it. Each stall's cycles per
instance (the slope over the two lengths) show what the schedule costs.

Only variants whose verified chain is one SASS instruction per instance; a chain whose value does
not change from one length to the next (a fixed point) cannot show a wrong schedule: it is swept
again with a companion after each instance whose immediate differs per instance (the latency of
the edge into the companion), else gets no value. Where an instance takes longer than the stall
(less its companion's stalls), the hardware held the consumer: the cycles are kept (``held``),
and right down to stall 1 while held is no value, only a bound. A chain instruction with a write barrier (variable latency: the consumer waits on a
scoreboard) gets the sweep as evidence and no value. A wrong result is never stored as a latency.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from gpudissect.arch.target import Target
from gpudissect.bench.runner import WORKER_FAILED
from gpudissect.bench.stats import fit_line, rep_cycles
from gpudissect.device.device import Device, forget
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.control import Control, attach, controls_of, decode_word
from gpudissect.kernel.parallel import pmap
from gpudissect.kernel.patch import patch, read_word
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.region import find_region
from gpudissect.kernel.sass import SassInstr, parse_sass
from gpudissect.kernel.toolchain import PtxasError
from gpudissect.store.db import Result
from gpudissect.suites.instructions.core import Plan, VariantStudy, VariantWork
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import GMEM_SLOT, GenerationError, generate

MEASURE = "latency_hw"
# the study's own one-chain kernels: two lengths one instance apart (a chain whose value repeats
# with an even period still differs between them) and one twice as long (the slope's span)
OWN_LENGTHS = (64, 65, 128)
# a chain that stays at a fixed point is swept again with a companion after each instance, an XOR
# (else an ADD: a logic operation fuses an XOR into its LOP3) with an immediate of its own per
# instance, which keeps any chain moving: the latency of the edge from the instruction to its
# companion, at two lengths; the strategies in order, with their kernels' name tags
EDGE_STRATEGIES = {"companion-imm": "e1", "companion-add-imm": "a1"}
EDGE_LENGTHS = (64, 65)
PER_MODULE = 16  # kernel sets (a variant's own, each of its edges') that compile as one module
INPUT_XOR = 0x2545  # the second input set: low bits of every operand slot flipped (values, not addresses)
# where the chain's value does not move under those two, further sets are tried (seeded, so a run
# is repeatable): every slot's low 16 bits flipped by a random mask, or random bits throughout
MORE_INPUT_SETS = 12
INPUT_SEED = 35
WRONG_TO_STOP = 2  # the sweep stops after this many wrong stalls in a row
LAUNCHES = 1
HELD = 0.5  # cycles per instance above the stall (and the rest of the instance): the hardware held it
METHOD = ("smallest stall (control bits patched in the cubin) at which the dependent chain still computes "
          "the unpatched kernel's values, every larger stall verified too (two lengths x two input sets, "
          "32 lanes)")


def chain_region(b: Built) -> list[SassInstr]:
    """``b``'s timed region (parsed again where the kernel travelled without it: Built.light)."""
    if b.region:
        return b.region
    funcs = parse_sass(b.sass)
    f = funcs.get(b.kernel.name) or next(iter(funcs.values()), None)
    return find_region(f.instrs) if f is not None else []


def region_controls(b: Built) -> list[tuple[SassInstr, Control]]:
    """``b``'s timed region with each instruction's control bits."""
    return attach(chain_region(b), controls_of(b.cubin, b.kernel.name))


def chain_instructions(b: Built, op: str) -> list[tuple[SassInstr, Control]]:
    """The chain's instructions (``op``, the variant's one SASS per instance) in ``b``'s timed
    region, with their control bits."""
    return [(i, c) for i, c in region_controls(b) if i.full == op]


def single_sass(w: VariantWork) -> str | None:
    """The one SASS opcode of a variant whose verified chain is one instruction per instance."""
    sc = w.record.sass_counts or {}
    return next(iter(sc)) if len(sc) == 1 and next(iter(sc.values())) == "1" else None


def latency_family(w: VariantWork):
    return next((f for f in w.families if f.measure == "latency" and f.study is None and len(f.built) >= 2), None)


def own_kernels(w: VariantWork, target: Target, plan: Plan, idx: int, strategy: str | None = None) -> list[Kernel]:
    """The study's kernels of ``w``: its verified chain (strategy and all) at OWN_LENGTHS; with
    ``strategy`` (one of EDGE_STRATEGIES: each instance followed by a companion that keeps a chain
    at a fixed point moving) at EDGE_LENGTHS."""
    strat = get_strategy(strategy or w.record.strategy or "reg")
    lens, tag = (EDGE_LENGTHS, EDGE_STRATEGIES[strategy]) if strategy else (OWN_LENGTHS, "h1")
    return [generate(w.variant, strat, target, chains=1, length=n, reps=plan.reps, measure=MEASURE,
                     name=f"v{idx}_{tag}_n{n}") for n in lens]


def _build(job: tuple[list[tuple[str, int, list[Kernel]]], str]) -> list[tuple[str, list[Built] | str]]:
    """One module per ptxas -O level of a chunk of variants (a worker process): per variant its
    built kernels with their timed regions (the sweep reads them; parsed here, the measuring
    process would parse each kernel's SASS again), or why not."""
    items, arch = job
    out: list[tuple[str, list[Built] | str]] = []
    for opt in sorted({o for _n, o, _k in items}):
        group = [(n, ks) for n, o, ks in items if o == opt]
        try:
            built = build_module([k for _n, ks in group for k in ks], arch, opt)
        except PtxasError:
            if len(group) > 1:
                out += [x for n, ks in group for x in _build(([(n, opt, ks)], arch))]
            else:
                out.append((group[0][0], "ptxas failed on the kernels"))
            continue
        for n, ks in group:
            bs = [built[k.name] for k in ks]
            bad = next((b for b in bs if isinstance(b, Exception)), None)
            out.append((n, str(bad) if bad is not None else
                        [replace(b, instrs=[]) for b in bs]))  # type: ignore[union-attr]
    return out


def _generate_and_build(job: tuple[list[VariantWork], Target, Plan]) -> list[tuple[str, list[Built] | str]]:
    """:func:`_build` of a chunk of variants whose kernels (own and each edge strategy's) are
    generated here, in the worker (Python that would otherwise hold the measuring process);
    a kernel set that cannot be generated comes back as why."""
    works, target, plan = job
    items, failed = [], []
    for w in works:
        for key, strat in (("own", None), *((e, e) for e in EDGE_STRATEGIES)):
            name = f"{w.variant.name}\t{key}"
            try:
                ks = own_kernels(w, target, plan, w.index, strat)
            except GenerationError as e:
                failed.append((name, f"the kernels could not be generated: {e}"))
                continue
            items.append((name, get_strategy(strat or w.record.strategy or "reg").opt, ks))
    return failed + (_build((items, target.arch)) if items else [])


def prepare_kernels(works: list[VariantWork], target: Target, plan: Plan, jobs: int) -> dict[str, dict]:
    """Every single-SASS verified variant's own kernels, built: variant -> {"own": kernels or
    why not, and per edge strategy (EDGE_STRATEGIES) its kernels or why not}."""
    # the variants travel without their families (built cubins): generating needs none of them
    todo = [VariantWork(w.variant, w.record, index=w.index) for w in works
            if w.record.verified and single_sass(w)]
    out: dict[str, dict] = {w.variant.name: {} for w in todo}
    per = max(1, PER_MODULE // (1 + len(EDGE_STRATEGIES)))  # PER_MODULE kernel sets a module, as before
    chunks = [(todo[k:k + per], target, plan) for k in range(0, len(todo), per)]
    for part in pmap(_generate_and_build, chunks, jobs):
        for name, built in part:
            v, key = name.split("\t")
            out[v][key] = built
    return out


def hw_latency(sweep: list[dict]) -> int | None:
    """The smallest stall of ``sweep`` (entries with ``stall`` and ``correct``, any order) below
    which no larger stall was wrong: every stall from it up to the largest swept computed the
    right values. None when the largest stall swept was itself wrong (nothing verified)."""
    done = sorted((d for d in sweep if d.get("correct") is not None), key=lambda d: -d["stall"])
    best = None
    for d in done:
        if not d["correct"]:
            break
        best = d["stall"]
    return best


def _outputs(dev: Device, b: Built, cubin: bytes, inputs: list[int], plan: Plan) -> tuple[np.ndarray, float]:
    res = dev.run(cubin, b.kernel.name, inputs, b.kernel.n_sink, plan.reps, grid=1, block=32, launches=LAUNCHES)
    cyc = [float(rep_cycles(r.times, rep)[0]) for r in res for rep in range(1, plan.reps)]
    return np.asarray(res[0].out).copy(), float(np.median(cyc))


def input_sets(inputs: list[int], more: int = MORE_INPUT_SETS) -> list[tuple[str, list[int]]]:
    """The candidate input sets of a kernel whose operand slots hold ``inputs``: named, the
    kernel's own first, then the low bits flipped, then ``more`` seeded random ones."""
    rng = np.random.default_rng(INPUT_SEED)
    out = [("as generated", list(inputs)), (f"xor {INPUT_XOR:#x}", [x ^ INPUT_XOR for x in inputs])]
    for k in range(more):
        if k % 2 == 0:
            out.append((f"random low bits #{k}", [x ^ int(m) for x, m in zip(inputs, rng.integers(1, 1 << 16, len(inputs)),
                                                                              strict=True)]))
        else:
            out.append((f"random #{k}", [int(m) for m in rng.integers(0, 1 << 63, len(inputs))]))
    return out


def _edits(chain: list[tuple[SassInstr, Control]], s: int) -> dict[int, dict[str, Any]]:
    return {i.offset: {"stall": s} for i, c in chain if c.stall > s}


FIXED = "not timed: the chain's value does not change"
# an edge's result without a value that still says more than a chain at a fixed point
INFORMATIVE = ("scoreboard:", "not determined:")


def sweep_variant(dev: Device, w: VariantWork, plan: Plan, own: dict | list[Built] | str | None = None) -> Result | None:
    """The stall sweep of ``w`` on its own kernels (``own``: {"own": kernels at OWN_LENGTHS or why
    not, and per edge strategy its kernels}), else on the two longest of its latency family; where
    the chain's value does not move, on each edge strategy's kernels in turn until one gives a
    value, a scoreboard's evidence or a bound: the edge to the companion (None where the study
    does not apply: not one SASS per instance, no kernels)."""
    kernels = own if isinstance(own, dict) else {"own": own}
    op = single_sass(w)
    fam = latency_family(w)
    mine = kernels.get("own")
    if op is None or (fam is None and not isinstance(mine, list)):
        return None
    bs = list(mine) if isinstance(mine, list) else sorted(fam.built, key=lambda b: b.kernel.length)[-2:]  # type: ignore[union-attr]
    why = "own" if isinstance(mine, list) else f"the latency family's ({mine or 'no kernels of its own'})"
    r = _sweep(dev, w, plan, op, bs, why)
    if r.value is None and any(f.startswith(FIXED) for f in r.flags):
        tried: dict[str, str] = {}  # per edge strategy: why it gave no value
        for strat in EDGE_STRATEGIES:
            edge = kernels.get(strat)
            if not isinstance(edge, list):
                tried[strat] = str(edge or "no kernels")[:200]
                continue
            e = _sweep(dev, w, plan, op, list(edge), f"the {strat} strategy's: the edge to the companion")
            if e.value is not None or any(f.startswith(INFORMATIVE) for f in e.flags):  # a value, a scoreboard, a bound
                e.params = {**(e.params or {}), "edges_tried": tried}
                return e
            tried[strat] = (e.flags or ["no value"])[0][:200]
        r.params = {**(r.params or {}), "edges_tried": tried}
    return r


def _sweep(dev: Device, w: VariantWork, plan: Plan, op: str, bs: list[Built], kernels: str) -> Result:
    """One stall sweep of ``op``'s instructions in the one-chain kernels ``bs``."""
    v = w.variant
    regions = [region_controls(b) for b in bs]
    chains = [[(i, c) for i, c in r if i.full == op] for r in regions]
    base = dict(variant=v.name, measure=MEASURE, unit="cycles", statistic=METHOD, cls=v.cls,
                ptx_hash=bs[-1].ptx_hash, sass_hash=bs[-1].sass_hash)
    if any(len(ch) != b.kernel.length for ch, b in zip(chains, bs, strict=True)):
        return Result(value=None, flags=[f"not timed: the region does not hold one {op} per instance"], **base)
    stalls = Counter(c.stall for ch in chains for _i, c in ch[:-1])
    ptxas = stalls.most_common(1)[0][0] if stalls else None
    scoreboard = sorted({c.write_barrier for ch in chains for _i, c in ch if c.write_barrier is not None})
    o3 = next((r.value for rs in w.results for r in rs if r.measure == "latency" and r.value is not None), None)
    lengths = [b.kernel.length for b in bs]
    params: dict[str, Any] = {"opcode": op, "ptxas_stall": ptxas, "latency_o3": o3, "lengths": lengths,
                              "launches": LAUNCHES, "scoreboard": scoreboard, "kernels": kernels}
    others = sorted({i.full for r in regions for i, _c in r if i.full != op} - {"R2UR"})
    if others:
        params["consumer"] = others
    # the input sets under which the chain's value moves with its length (a stale read computes
    # the same value where it does not): the first two of the candidates
    inputs: list[list[int]] = []
    ref: list[list[tuple[np.ndarray, float]]] = [[] for _b in bs]
    tried = []
    try:
        for name, x in input_sets(list(bs[0].kernel.inputs)):
            if bs[0].kernel.meta.get("uses_gmem"):  # the target stays where it was generated
                x[GMEM_SLOT] = bs[0].kernel.inputs[GMEM_SLOT]
            outs = [_outputs(dev, b, b.cubin, x, plan) for b in bs]
            tried.append(name)
            if any(not np.array_equal(outs[a][0], outs[c][0]) for a in range(len(bs)) for c in range(a + 1, len(bs))):
                inputs.append(x)
                params.setdefault("input_sets", []).append(name)
                for k, o in enumerate(outs):
                    ref[k].append(o)
                if len(inputs) == 2:
                    break
    except Exception as e:  # a fault or hang too (the worker device restarts on the next call)
        return Result(value=None, params=params, flags=[f"error: the unpatched kernel: {type(e).__name__}: {e}"[:300]],
                      **base)
    params["input_sets_tried"] = len(tried)
    if not inputs:
        return Result(value=None, params=params, flags=[f"{FIXED} from one length to the next under any of "
                                                        f"{len(tried)} input sets: a wrong schedule cannot be seen"],
                      **base)
    sweep: list[dict] = []
    wrong = 0
    for s in range(int(ptxas or 0), 0, -1):
        entry: dict[str, Any] = {"stall": s}
        try:
            got = []
            for b, ch, rf in zip(bs, chains, ref, strict=True):
                cub = patch(b.cubin, b.kernel.name, _edits(ch, s))
                # the patched chain's first instruction as the GPU reads it (the last kernel's)
                entry["control"] = str(decode_word(*read_word(cub, b.kernel.name, ch[0][0].offset)))
                try:
                    got.append([(_outputs(dev, b, cub, x, plan), r) for x, r in zip(inputs, rf, strict=True)])
                finally:  # a patched module is run once: not kept loaded
                    forget(dev, cub)
        except Exception as e:  # a fault (illegal instruction, ...) or hang ends the sweep, not the suite
            entry["error"] = f"{type(e).__name__}: {e}"[:200]
            sweep.append(entry)
            break
        entry["correct"] = all(np.array_equal(o[0], r[0]) for per in got for o, r in per)
        ys = [float(np.median([o[1] for o, _r in per])) for per in got]
        entry["cycles_per_instance"] = round(fit_line(lengths, ys).slope, 4)
        sweep.append(entry)
        wrong = 0 if entry["correct"] else wrong + 1
        if wrong >= WRONG_TO_STOP:
            break
    params["sweep"] = sweep
    hw = hw_latency(sweep)
    first_wrong = next((d["stall"] for d in sweep if d.get("correct") is False), None)
    params["first_wrong_stall"] = first_wrong
    sass = [f"{i.text.strip()}  [{c}]" for i, c in chains[-1][:1]]
    text = chains[-1][0][0].text.strip()
    for key, at in (("sass_at_hw", hw), ("sass_at_first_wrong", first_wrong)):
        d = next((d for d in sweep if d["stall"] == at and "control" in d), None)
        params[key] = f"{text}  [{d['control']}]" if d else None
    if scoreboard:
        timed = [d for d in sweep if d.get("cycles_per_instance") is not None]
        cycles = (f"; cycles per instance {timed[0]['cycles_per_instance']:g} at stall {timed[0]['stall']} -> "
                  f"{timed[-1]['cycles_per_instance']:g} at stall {timed[-1]['stall']}" if timed else "")
        return Result(value=None, params=params, sass=sass,
                      flags=[f"scoreboard: {op} sets write barrier {scoreboard}: its consumer waits on the "
                             f"scoreboard, not on the stall (stalls down to {min(d['stall'] for d in sweep) if sweep else '-'} "
                             f"computed {'right' if first_wrong is None else 'wrong from ' + str(first_wrong)}{cycles})"],
                      **base)
    flags = []
    # the cycles an instance takes at the latency, less what the rest of the instance (a companion)
    # waits by its own stalls: above the stall, the hardware held the consumer back
    rest = sum(c.stall for i, c in regions[-1] if i.full not in (op, "R2UR")) / bs[-1].kernel.length if others else 0.0
    at = next((d for d in sweep if d["stall"] == hw), None)
    held = (round(at["cycles_per_instance"] - rest, 3) if at and at.get("cycles_per_instance") is not None
            and at["cycles_per_instance"] - rest > hw + HELD else None)  # type: ignore[operator]
    params["cycles_at_hw"] = at.get("cycles_per_instance") if at else None
    params["held_cycles"] = held
    if hw is None and sweep and sweep[0].get("correct") is False:
        flags.append("error: ptxas's own stall computed other values than the unpatched kernel (not reproducible)")
    elif hw is not None and first_wrong is None and hw == 1 and held is not None:
        flags.append(f"not determined: every stall down to 1 computed the right values while the hardware held the "
                     f"consumer {held:g} cycles: the latency is at most that")
        hw = None
    elif hw is not None and first_wrong is None and hw == 1:
        flags.append("correct-at-stall-1: every stall down to 1 computed the right values (the pipeline's "
                     "latency is not above one issue)")
    elif held is not None:
        flags.append(f"held: at stall {hw} the hardware held the consumer {held:g} cycles (an instance's cycles less "
                     "its other instructions' stalls): the stall needed is below the time the result takes")
    if any("error" in d for d in sweep):
        flags.append(f"error: at stall {sweep[-1]['stall']}: {sweep[-1]['error']}")
    return Result(value=float(hw) if hw is not None else None, params=params, sass=sass, flags=flags, **base)


def conclusions(records: list[dict]) -> list[str]:
    """How many variants have a true latency and how it stands against ptxas's stall."""
    rs = [r for r in records if r.get("measure") == MEASURE]
    if not rs:
        return []
    got = [r for r in rs if r.get("value") is not None]
    below = [r for r in got if (r.get("params") or {}).get("ptxas_stall") and r["value"] < r["params"]["ptxas_stall"]]
    sb = sum(1 for r in rs if (r.get("params") or {}).get("scoreboard"))
    gaps = [r["params"]["ptxas_stall"] - r["value"] for r in below]
    line = (f"below ptxas: {len(got)} of {len(rs)} single-SASS chains have a true latency (stall patched down "
            f"until the chain computes other values); {len(below)} are below ptxas's stall")
    if gaps:
        line += f" (by {min(gaps):g} to {max(gaps):g} cycles, median {statistics.median(gaps):g})"
    return [line + f"; {sb} wait on a scoreboard (variable latency).", *edge_lines(got)]


def edge_lines(got: list[dict]) -> list[str]:
    """Per consumer that a companion put after the instruction (one SASS): the true latency of
    the edge from each producer, grouped by value (forwarding within a pipe and between pipes)."""
    by: dict[str, dict[float, set[str]]] = {}
    for r in got:
        p = r.get("params") or {}
        cons = p.get("consumer") or []
        if len(cons) == 1 and p.get("opcode"):
            by.setdefault(cons[0], {}).setdefault(r["value"], set()).add(p["opcode"])
    out = []
    for cons, vals in sorted(by.items()):
        if len(vals) > 1:  # the edge's latency depends on the producer
            out.append(f"edges into {cons} (the stall patched on the producer): " + "; ".join(
                f"{v:g} cycles from {', '.join(sorted(ops))}" for v, ops in sorted(vals.items())) + ".")
    return out


class StallPatch(VariantStudy):
    """The stall sweep as a study of the instruction suite: after the core's families, one
    variant at a time, on the latency family's own kernels."""

    def measure_variant(self, dev: Device, w: VariantWork, state: Any, plan: Plan,
                        previous: list[Result] | None) -> tuple[list[Result], dict]:
        if previous is not None:  # measured again: the sweep is kept (the kernels did not change)
            kept = [r for r in previous if r.measure == MEASURE]
            if kept:
                return kept, {}
        if any(WORKER_FAILED in f for rs in w.results for r in rs for f in r.flags):
            if single_sass(w) is None:
                return [], {}
            return [Result(w.variant.name, MEASURE, None, "cycles", METHOD, cls=w.variant.cls,
                           flags=["skipped: a kernel of the variant failed the device worker (hang or fault)"])], {}
        r = sweep_variant(dev, w, plan, (state or {}).get(w.variant.name))
        return ([r] if r is not None else []), {}

    def prepare(self, works: list[VariantWork], target: Target, plan: Plan, jobs: int) -> dict:
        return prepare_kernels(works, target, plan, jobs)

    def conclusions(self, records: list[dict]) -> list[str]:
        return conclusions(records)

    def tables(self, records: list[dict]) -> dict:
        return {"latency_hw": {r["variant"]: {"value": r.get("value"), **(r.get("params") or {})}
                               for r in records if r.get("measure") == MEASURE}}


STUDY = StallPatch("stall_patch", adds=(MEASURE,))
