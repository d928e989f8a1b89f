"""Per-operand latency (issue 19): the latency from each source operand of a variant to its
result, a study of the instruction suite (:data:`STUDY`).

Which variants and which operand positions are data (``strategies.toml`` ``[operand_latency]``).
For operand ``i`` (the PTX source operand index, 1-based after the destination) the chain runs
through that operand alone: the variant with its chain moved there (:func:`operand_variant`),
generated with the table's strategy, every other source a value loaded at run time. Beside the
family checks every timing kernel passes (linear, not folded, depth one per instance), the SASS
data flow must show the chain entering the variant's own instruction through one source slot
(:func:`check_operand_flow`), the slot a table entry allows where it names them. A family that
does not verify is tried again with the table's next strategy (:func:`retry_operands`); the
operand the variant's own chain runs through, with its strategy, shares the latency's kernels
(:func:`alias_result`); a chain with a companion of its own gets its own number after the run
(:func:`operand_companion_removed`).
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from dataclasses import dataclass, replace
from fractions import Fraction

from gpudissect.arch.target import Target
from gpudissect.catalog.model import Operand, Variant
from gpudissect.kernel.build import Built
from gpudissect.kernel.region import is_move
from gpudissect.kernel.sass import REG_RE, SassInstr
from gpudissect.store.db import Result
from gpudissect.suites.instructions.checks import CheckResult, Sample
from gpudissect.suites.instructions.companion import clean_row
from gpudissect.suites.instructions.core import (
    ChainTiming,
    Family,
    Plan,
    VariantStudy,
    VariantWork,
    compile_work,
    lengths_for,
    sass_per_instance,
)
from gpudissect.suites.instructions.own_sass import (
    core_sass,
    equivalent,
    glue_key,
    glue_sass,
    own_counts,
    table,
    without_companion,
)
from gpudissect.suites.instructions.records import PAIR
from gpudissect.suites.instructions.strategies import Strategy
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import (
    GenerationError,
    companion_measured_by,
    companion_sass,
    generate,
)
from gpudissect.suites.instructions.verify import MapRecord, check_built

MEASURE = "latency_operand_{i}"
GUARD = -1  # the slot index of an instruction's guard predicate (@P0)


@dataclass(frozen=True)
class OperandSpec:
    """One operand position of a variant to measure."""

    index: int  # PTX source operand index, 1-based after the destination
    name: str  # the catalog operand's placeholder name
    slots: tuple[int, ...] | None = None  # allowed SASS source slots (None: any one)

    @property
    def measure(self) -> str:
        return MEASURE.format(i=self.index)


def operand_strategies(doc: str | None = None) -> list[str]:
    """The strategies a per-operand chain tries, in order."""
    return [str(x) for x in table(doc).get("strategies", ["reg"])]


def chainable(v: Variant) -> list[Operand]:
    """The register sources of ``v`` in PTX order (index 1 first): what a chain can enter."""
    return [o for o in v.sources if not o.is_address]


def operand_specs(v: Variant, doc: str | None = None) -> list[OperandSpec]:
    """The operand positions of ``v`` the table asks for (first matching entry wins); [] when
    none. An index beyond the variant's register sources is an error in the table."""
    if v.dest is None:
        return []
    srcs = chainable(v)
    for entry in table(doc).get("set", []):
        if not any(fnmatch.fnmatchcase(v.name, p) for p in entry.get("variants", [])):
            continue
        want = entry.get("operands", "all")
        idx = list(range(1, len(srcs) + 1)) if want == "all" else [int(i) for i in want]
        bad = [i for i in idx if not 1 <= i <= len(srcs)]
        if bad:
            raise ValueError(f"[operand_latency]: {v.name} has {len(srcs)} register sources; "
                             f"operand {bad[0]} does not exist")
        slots = {int(k): tuple(int(s) for s in vals) for k, vals in entry.get("sass_slots", {}).items()}
        return [OperandSpec(i, srcs[i - 1].name, slots.get(i)) for i in idx]
    return []


def operand_variant(v: Variant, spec: OperandSpec) -> Variant:
    """``v`` with its dependence chain through operand ``spec`` (the others stay sources)."""
    return replace(v, chain=spec.name)


def chain_slots(region: list[SassInstr]) -> Counter[tuple[str, int]]:
    """(opcode with modifiers, source slot) of every real (non-move) instruction whose slot reads
    a register written earlier in ``region`` (the chain: all other inputs are written before the
    region). Slots count from 0 after the destinations; the guard predicate is slot ``GUARD``."""
    written: set[str] = set()
    hits: Counter[tuple[str, int]] = Counter()
    for ins in region:
        if not is_move(ins.full, ins):
            for j, tok in enumerate(ins.operands[ins.n_dests():]):
                if any(r in written for r in ins._regs(tok)):
                    hits[(ins.full, j)] += 1
            if ins.predicate and any(r in written for r in REG_RE.findall(ins.predicate)):
                hits[(ins.full, GUARD)] += 1
        written.update(ins.dests())
    return hits


def check_operand_flow(samples: list[Sample], spec: OperandSpec, own: dict[str, Fraction],
                       per_unit: dict[str, Fraction], glue: str | None,
                       glue_ops: dict[str, tuple[str, ...]]) -> tuple[str | None, dict[str, list[int]]]:
    """Why the family of operand ``spec`` does not time that operand (None when it does), and the
    SASS source slots the chain enters the variant's own instruction through, per opcode.

    ``own``: one instance of the variant's own SASS (:func:`core_sass` of its verified chain);
    ``per_unit``: this family's SASS per instance (check_family), its chain fed through the glue
    ``glue``. Without that glue's SASS the instance must be ``own`` exactly (else ptxas changed
    the instruction when the chain moved operand); the chain must enter ``own``, and where that
    is one instruction, through exactly one source slot per instance (an allowed one, if listed)."""
    real = core_sass(per_unit, glue, glue_ops)
    if real != own:
        return (f"operand {spec.index} ({spec.name}): the instance's SASS changed with the chain "
                f"there ({_show(real)} where the variant is {_show(own)})"), {}
    s = sorted(samples, key=lambda x: x.units)
    lo, hi = chain_slots(s[0].region), chain_slots(s[-1].region)
    du = s[-1].units - s[0].units
    rate = {k: Fraction(hi[k] - lo[k], du) for k in set(hi) | set(lo)}
    same = equivalent()
    mine = {k: r for k, r in rate.items() if r > 0 and same.get(k[0], k[0]) in own}
    if not mine:
        return (f"operand {spec.index} ({spec.name}): the chain does not reach the variant's own SASS "
                "(the data flow runs around it)"), {}
    slots: dict[str, list[int]] = {}
    for op, j in sorted(mine):
        slots.setdefault(op, []).append(j)
    if len(own) == 1 and next(iter(own.values())) == 1:  # one instruction (in any of its forms)
        total = sum(mine.values(), Fraction(0))
        many = {op: js for op, js in slots.items() if len(js) != 1}
        if many or total != 1:
            return (f"operand {spec.index} ({spec.name}): the chain enters the instruction through "
                    f"slots {slots} ({float(total):g} per instance), not one slot"), slots
        off = {op: js[0] for op, js in slots.items() if spec.slots is not None and js[0] not in spec.slots}
        if off:
            return (f"operand {spec.index} ({spec.name}): the chain enters through slot {off}, not "
                    f"the intended {list(spec.slots or ())}"), slots
    return None, slots


def _show(counts: dict[str, Fraction]) -> str:
    return ", ".join(f"{float(c):g}*{op}" for op, c in counts.items()) or "nothing"


def operand_families(v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
    """The per-operand latency families of ``v`` (strategies.toml [operand_latency]): one chain
    through each listed operand, generated with the table's first strategy (the others are tried
    by :func:`retry_operands` where it does not verify)."""
    return [operand_family(v, rec, spec, 0, target, plan, idx) for spec in operand_specs(v)]


def operand_family(v: Variant, rec: MapRecord, spec: OperandSpec, attempt: int, target: Target,
                   plan: Plan, idx: int) -> Family:
    """The family of operand ``spec`` with the table's strategy number ``attempt``. The operand
    the variant's own latency chain runs through, with the same strategy, is the same kernels:
    an alias of ``latency``. A family no kernel can be generated for carries its reason."""
    sname = operand_strategies()[attempt]
    strat = get_strategy(sname)
    f = Family(spec.measure, 1, [], operand=spec, strategy=sname, study=STUDY)
    default = v.chain_operand
    if default is not None and spec.name == default.name and rec.strategy == sname:
        f.alias = "latency"
    elif strat.opt != get_strategy(rec.strategy or sname).opt:
        f.error = f"operand {spec.index}: strategy {sname} compiles at another -O than {rec.strategy}"
    else:
        tag = f"o{spec.index}" + (f"s{attempt}" if attempt else "")
        try:
            lens = lengths_for(plan.latency_units, 1, sass_per_instance(rec), plan)
            f.kernels = [generate(operand_variant(v, spec), strat, target, chains=1, length=n, reps=plan.reps,
                                  measure=spec.measure, name=f"v{idx}_{tag}_l1_n{n}") for n in lens]
        except GenerationError as e:
            f.error = f"{sname}: operand {spec.index} ({spec.name}): {e}"
    return f


def retry_operands(works: list[VariantWork], target: Target, plan: Plan, jobs: int) -> None:
    """Per-operand families that did not verify, tried again with the table's next strategy
    (built and checked like the first), until one verifies or none is left; a family that
    never verifies keeps every strategy's reason."""
    names = operand_strategies()
    index = {w.variant.name: i for i, w in enumerate(works)}
    for attempt in range(1, len(names)):
        redo: list[VariantWork] = []
        for w in works:
            failed = [(i, f) for i, f in enumerate(w.families) if f.operand is not None and f.error
                      and f.strategy == names[attempt - 1]]
            if not failed:
                continue
            fams = [operand_family(w.variant, w.record, f.operand, attempt, target, plan,  # type: ignore[arg-type]
                                   w.index) for _, f in failed]
            for (_, old), new in zip(failed, fams, strict=True):
                new.error = new.error and f"{old.error}; {new.error}"  # not generated: both reasons
            redo.append(VariantWork(w.variant, w.record, fams, index=w.index))
        if not redo:
            return
        compile_work(redo, target, jobs)
        for r in redo:
            w = works[index[r.variant.name]]
            slots = [i for i, f in enumerate(w.families) if f.operand is not None and f.error
                     and f.strategy == names[attempt - 1]]
            for i, new in zip(slots, r.families, strict=True):
                old = w.families[i].error or ""
                old = old if attempt > 1 or old.startswith(f"{names[0]}:") else f"{names[0]}: {old}"
                if new.error and not new.error.startswith(old):
                    new.error = f"{old}; {new.strategy}: {new.error}"
                w.families[i] = new


def _operand_params(f: Family) -> dict:
    op = f.operand
    assert op is not None
    return {"operand": op.index, "operand_name": op.name, "sass_slots": f.slots or {}}


def alias_result(v: Variant, f: Family, results: list[Result]) -> Result:
    """The per-operand result of a family whose kernels are the ``f.alias`` measure's own
    (the variant's default chain): that measurement, under the per-operand name."""
    src = next((r for r in results if r.measure == f.alias), None)
    op = f.operand
    assert op is not None
    if src is None:
        return Result(v.name, f.measure, None, "cycles", "none",
                      params={"operand": op.index, "operand_name": op.name, "same_kernels_as": f.alias},
                      flags=[f"not timed: no {f.alias} result to share kernels with"], cls=v.cls)
    return Result(src.variant, f.measure, src.value, src.unit, src.statistic,
                  params={**src.params, "operand": op.index, "operand_name": op.name,
                          "same_kernels_as": f.alias},
                  fit=src.fit, samples=src.samples, flags=list(src.flags), sass=list(src.sass),
                  strategy=src.strategy, ptx_hash=src.ptx_hash, sass_hash=src.sass_hash, cls=src.cls)


def _with_companion(r: Result) -> bool:
    return any(f.startswith("companion:") for f in r.flags)


def operand_companion_removed(v: Variant, pair: dict, lat: dict[str, dict]) -> Result:
    """An operand's own latency from its chain with a companion (``pair``, a stored row) and the
    companion's own latency measured in the same run (catalog/glue.toml [companion_latency]),
    as for a variant's latency (``companion.companion_removed``)."""
    p = pair["params"] or {}
    op = get_strategy(pair["strategy"] or "companion").companion
    ref = companion_measured_by(op, v.operand(p["operand_name"]).reg_class)
    keep = [f for f in pair["flags"] if not f.startswith("companion:")]
    sass = list(pair["sass"] or [])
    for _ in range(2 if v.operand(p["operand_name"]).reg_class == "rd" else 1):  # the companion's SASS out
        j = next((i for i in range(len(sass) - 1, -1, -1) if sass[i] in companion_sass(op)), None)
        if j is not None:
            sass.pop(j)
    base = dict(sass=sass, strategy=pair["strategy"], cls=v.cls)
    measure = pair["measure"].removesuffix(PAIR)
    rl = lat.get(ref or "")
    why = None if ref else f"no variant measures the companion '{op}' alone"
    if why is None and not clean_row(pair):
        why = "the pair's latency is not clean"
    if why is None and not (rl and clean_row(rl)):
        why = f"{ref}'s latency is not clean in this run"
    if why is None and pair["value"] - rl["value"] <= 0:  # type: ignore[index]
        why = f"the pair ({pair['value']:.3g}) is not slower than {ref} ({rl['value']:.3g})"  # type: ignore[index]
    if why is not None:
        return Result(v.name, measure, None, "cycles", "none", params={**p, "pair": pair["value"]},
                      flags=keep + [f"includes companion: {op}: {why}"], **base)
    return Result(v.name, measure, pair["value"] - rl["value"], "cycles",  # type: ignore[index]
                  f"latency of the chain through operand {p['operand']} with its companion minus "
                  f"{ref}'s (the companion '{op}')",
                  params={**p, "pair": pair["value"], "companion": {"variant": ref, "latency": rl["value"]}},  # type: ignore[index]
                  flags=keep + [f"companion removed: {op} ({ref}, {rl['value']:.3g} cycles)"], **base)  # type: ignore[index]


class OperandLatency(VariantStudy):
    """Per-operand latency as a study of the instruction suite."""

    def families(self, v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
        return operand_families(v, rec, target, plan, idx)

    def built(self, works: list[VariantWork], target: Target, plan: Plan, jobs: int) -> None:
        retry_operands(works, target, plan, jobs)

    def check(self, v: Variant, rec: MapRecord, f: Family, strat: Strategy, bs: list[Built],
              paired=None) -> CheckResult:
        fv = operand_variant(v, f.operand)
        res = check_built(fv, strat, bs, paired=paired)
        if res.ok:
            why, f.slots = check_operand_flow([Sample(b.kernel.units, b.kernel.length, b.region) for b in bs],
                                              f.operand, own_counts(v, rec), without_companion(fv, strat, res.per_unit),
                                              glue_key(fv), glue_sass())
            if why:
                res.ok, res.reason = False, why
        return res

    def own_kernels(self, f: Family) -> bool:
        return True  # the chain through another operand: its own glue, companion and SASS

    def chain_result(self, w: VariantWork, f: Family, t: ChainTiming, cite: dict) -> Result:
        return Result(w.variant.name, f.measure, t.fit.slope, "cycles",
                      f"slope of median cycles vs chain length, the chain through source operand "
                      f"{f.operand.index} alone",
                      params={**t.params, **_operand_params(f)}, fit=t.fit.to_json(), samples=t.samples,
                      flags=t.flags, **cite)

    def alias_result(self, v: Variant, f: Family, results: list[Result]) -> Result:
        return alias_result(v, f, results)

    def with_companion(self, r: Result, companion: bool) -> bool:
        return _with_companion(r)  # its own chain's companion, never the variant's

    def companion_removed(self, v: Variant, pair: dict, lat: dict[str, dict]) -> Result | None:
        return operand_companion_removed(v, pair, lat)


# the latency measure: an operand's chain is the variant's own where it runs through its default
STUDY = OperandLatency("operand_latency", needs=("latency",), adds=("latency_operand_*",))
