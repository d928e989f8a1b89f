"""Per-operand latency (issue 19): the latency from each source operand of a variant to its result.

Which variants and which operand positions are data (``strategies.toml`` ``[operand_latency]``).
For operand ``i`` (the PTX source operand index, 1-based after the destination) the chain runs
through that operand alone: the variant with its chain moved there (:func:`operand_variant`),
generated with the table's strategy, every other source a value loaded at run time. Beside the
family checks every timing kernel passes (linear, not folded, depth one per instance), the SASS
data flow must show the chain entering the variant's own instruction through one source slot
(:func:`check_operand_flow`), the slot a table entry allows where it names them.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cache

from gpudissect.catalog.model import Operand, Variant
from gpudissect.kernel.region import is_move, kind_of
from gpudissect.kernel.sass import REG_RE, SassInstr
from gpudissect.suites.instructions.checks import Sample
from gpudissect.suites.instructions.strategies import STRATEGY_FILE

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


@cache
def _table(text: str) -> dict:
    return tomllib.loads(text).get("operand_latency", {})


def table(doc: str | None = None) -> dict:
    """The ``[operand_latency]`` table (of ``doc``, a TOML text; default: strategies.toml)."""
    return _table(doc if doc is not None else STRATEGY_FILE.read_text())


def operand_strategies(doc: str | None = None) -> list[str]:
    """The strategies a per-operand chain tries, in order."""
    return [str(x) for x in table(doc).get("strategies", ["reg"])]


def glue_sass(doc: str | None = None) -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in table(doc).get("glue_sass", {}).items()}


def equivalent(doc: str | None = None) -> dict[str, str]:
    """SASS form -> the first form of its group of equivalents (strategies.toml)."""
    return {op: group[0] for group in table(doc).get("equivalent", []) for op in group}


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


def glue_key(v: Variant) -> str | None:
    """The glue (catalog/glue.toml key "from>to") the chain of ``v`` needs, or None."""
    c, d = v.chain_operand, v.dest
    if c is None or d is None or c.reg_class == d.reg_class or c.is_address:
        return None
    return f"{d.reg_class}>{c.reg_class}"


def core_sass(counts: dict[str, Fraction], glue: str | None,
              glue_ops: dict[str, tuple[str, ...]]) -> dict[str, Fraction]:
    """One instance's real SASS (moves out) without what its glue ``glue`` adds (at most one
    instruction of the glue's opcodes): the variant's own instruction."""
    same = equivalent()
    out: dict[str, Fraction] = {}
    for op, c in counts.items():
        name = op.removeprefix("MOV:")
        if Fraction(c) > 0 and not op.startswith("MOV:") and not is_move(name):
            out[same.get(name, name)] = out.get(same.get(name, name), Fraction(0)) + Fraction(c)
    need = Fraction(1) if glue else Fraction(0)
    for op in list(out):
        if need > 0 and any(re.match(rf"^{re.escape(a)}(\.|$)", op) for a in glue_ops.get(glue or "", ())):
            take = min(out[op], need)
            out[op] -= take
            need -= take
            if out[op] == 0:
                del out[op]
    return out


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


# instruction configurations (issue 22): measure -> the guard's run-time value
GUARDS = {"latency_guarded_true": True, "latency_guarded_false": False}


def config_measures(v: Variant, doc: str | None = None) -> list[str]:
    """The configuration measures (strategies.toml [configurations]) ``v`` gets; [] when none."""
    t = tomllib.loads(doc if doc is not None else STRATEGY_FILE.read_text()).get("configurations", {})
    if v.dest is None or v.chain_operand is None:
        return []
    for entry in t.get("set", []):
        if any(fnmatch.fnmatchcase(v.name, p) for p in entry.get("variants", [])):
            bad = [m for m in t.get("measures", []) if m not in GUARDS]
            if bad:
                raise ValueError(f"[configurations]: unknown measure {bad[0]} (known: {', '.join(GUARDS)})")
            return list(t.get("measures", []))
    return []


SELECTS = ("SEL", "FSEL")  # opcodes that choose one of two registers by their last operand, a predicate
_PRED = re.compile(r"!?(P\d+)")


def _pred(tok: str) -> str | None:
    """The predicate register a guard (``@!P1``) or a select's operand (``!P1``) names."""
    m = _PRED.fullmatch(tok.strip().lstrip("@"))
    return m.group(1) if m else None


def _guarded_by(i: SassInstr, own: dict[str, Fraction] | None = None) -> set[str]:
    """The predicate registers that decide whether ``i``'s result lands: its guard, or the
    choice of a select that is not of the variant's own SASS (``own``: selp's own SEL chooses by
    its operand, not by the guard)."""
    out = {_pred(i.predicate)} if i.predicate else set()
    if i.opcode in SELECTS and i.operands and (own is None or equivalent().get(i.full, i.full) not in own):
        out.add(_pred(i.operands[-1]))
    return {p for p in out if p}


def _guard(region: list[SassInstr], own: dict[str, Fraction]) -> tuple[str | None, list[str]]:
    """The guard of a guarded region: the one predicate register not written in the region that
    guards an instruction (``@P``) or that a select not of ``own`` chooses by; with the
    candidates seen (none or several: no one guard, the family is refused)."""
    written = {r for i in region for r in i.dests()}
    cands = sorted({p for i in region for p in _guarded_by(i, own)} - written)
    return (cands[0] if len(cands) == 1 else None), cands


def check_guarded(samples: list[Sample], own: dict[str, Fraction]) -> tuple[str | None, dict]:
    """Why a guarded family's SASS does not keep the guard on every instance (None when it
    does), and the form ptxas gave it (``guard_form``):

    * ``predicated``: every instruction of ``own``'s opcodes carries the guard (the predicated
      instructions of ``own`` grow by as many per instance as ``own`` holds);
    * ``commit``: ptxas computes the instance unguarded, or guards only part of it, and lands the
      result under the guard through predicated instructions or selects (SEL, FSEL) on it; the
      guard is the one predicate register that guards or selects in the region and is not
      written there (a predicate the instance computes is not the guard; the select operand of
      the variant's own SEL, as selp's, is its operand), and at least one
      instruction per instance must depend on it (``guard_commit``: those instructions per
      instance, opcode -> count, a guard written as ``@``; ``guard_own_predicated``: the
      predicated instructions of ``own`` per instance).

    The chain runs through the commit either way (the family's depth check holds it), so the
    value is the guarded PTX instruction's cost as ptxas compiles it."""
    same = equivalent()
    s = sorted(samples, key=lambda x: x.units)
    span = s[-1].units - s[0].units
    want = sum(own.values(), Fraction(0))
    guards = []
    for x in s:
        g, cands = _guard(x.region, own)
        if g is None:
            return (f"guard: {len(cands)} predicates not computed in the region guard or select "
                    f"({', '.join(cands) or 'none'}): no one guard to follow (ptxas removed or "
                    f"converted it)"), {}
        guards.append(g)

    def own_predicated(x: Sample, g: str) -> int:
        return sum(1 for i in x.region if i.predicate and _pred(i.predicate) == g
                   and same.get(i.full, i.full) in own)

    rate = Fraction(own_predicated(s[-1], guards[-1]) - own_predicated(s[0], guards[0]), span)
    if rate == want:
        return None, {"guard_form": "predicated"}

    def committed(x: Sample, g: str) -> Counter[str]:
        return Counter(("@" if i.predicate and _pred(i.predicate) == g else "") + i.full
                       for i in x.region if g in _guarded_by(i, own))

    lo, hi = committed(s[0], guards[0]), committed(s[-1], guards[-1])
    per = {op: Fraction(hi[op] - lo[op], span) for op in sorted(set(lo) | set(hi))}
    per = {op: c for op, c in per.items() if c}
    jumps = sorted(op for op in per if "branch" in kind_of(op.lstrip("@").split(".")[0]))
    if jumps:
        return (f"guard: ptxas branches around the instance under the guard ({', '.join(jumps)}), "
                f"not a guarded instruction"), {}
    if sum(per.values(), Fraction(0)) < 1:
        return (f"guard: {float(rate):g} of the variant's own SASS per instance under the guard "
                f"{guards[-1]} ({float(want):g} expected), and {float(sum(per.values(), Fraction(0))):g} "
                f"instructions per instance depend on it (ptxas removed or hoisted it)"), {}
    return None, {"guard_form": "commit", "guard_commit": {op: float(c) for op, c in per.items()},
                  "guard_own_predicated": float(rate)}
