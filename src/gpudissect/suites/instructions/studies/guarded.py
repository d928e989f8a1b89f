"""Guarded instruction configurations (issue 22, thesis section 2.5): a variant's latency chain
with every instance under a predicate loaded at run time, true (``latency_guarded_true``) or
false (``latency_guarded_false``). Which variants: ``strategies.toml`` ``[configurations]``.

The SASS check (:func:`check_guarded`) follows the guard: ptxas either predicates the variant's
own instructions, or computes the instance unguarded and lands its result under the guard
(``commit``); a guard it turns into a branch is refused. Part of the configurations study
(``configurations.py``).
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from fractions import Fraction

from gpudissect.catalog.model import Variant
from gpudissect.kernel.region import kind_of
from gpudissect.kernel.sass import SassInstr
from gpudissect.suites.instructions.checks import Sample
from gpudissect.suites.instructions.own_sass import equivalent, strategy_table

# instruction configurations (issue 22): measure -> the guard's run-time value
GUARDS = {"latency_guarded_true": True, "latency_guarded_false": False}


def config_measures(v: Variant, doc: str | None = None) -> list[str]:
    """The configuration measures (strategies.toml [configurations]) ``v`` gets; [] when none."""
    t = strategy_table("configurations", doc)
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
