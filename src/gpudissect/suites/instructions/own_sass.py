"""A variant's own SASS per instance: its verified chain's SASS with what the measurement adds
taken out (the companion that keeps the chain from folding, the glue that feeds a result of one
register class into an operand of another, register moves), the forms ptxas chooses between for
the same work counted as one.

The forms and the glue's SASS are data: ``strategies.toml`` ``[operand_latency]`` (``equivalent``,
``glue_sass``). Its tables are read here, through :func:`strategy_table`: the per-operand
study's variants and strategies and the guarded configurations' variants from the same file.
"""

from __future__ import annotations

import re
import tomllib
from fractions import Fraction
from functools import cache

from gpudissect.catalog.model import Variant
from gpudissect.kernel.region import is_move
from gpudissect.suites.instructions.strategies import STRATEGY_FILE
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import companion_sass
from gpudissect.suites.instructions.verify import MapRecord


@cache
def _tables(text: str) -> dict:
    return tomllib.loads(text)


def strategy_table(name: str, doc: str | None = None) -> dict:
    """Table ``name`` of strategies.toml (of ``doc``, a TOML text, where given); {} without it."""
    return _tables(doc if doc is not None else STRATEGY_FILE.read_text()).get(name, {})


def table(doc: str | None = None) -> dict:
    """The ``[operand_latency]`` table (of ``doc``, a TOML text; default: strategies.toml)."""
    return strategy_table("operand_latency", doc)


def glue_sass(doc: str | None = None) -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in table(doc).get("glue_sass", {}).items()}


def equivalent(doc: str | None = None) -> dict[str, str]:
    """SASS form -> the first form of its group of equivalents (strategies.toml)."""
    return {op: group[0] for group in table(doc).get("equivalent", []) for op in group}


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


def own_sass(counts: dict[str, str], comp: tuple[str, ...], n: int) -> dict[str, float]:
    """An instance's SASS with ``n`` of the companion's opcodes (``comp``) taken out: a 64-bit
    companion is a low half and a high half with its carry (``.X``), one of each."""
    own = {op: float(Fraction(c)) for op, c in counts.items()}
    halves = [False] if n == 1 else [False, True]  # False: the low half, True: the carry half
    for carry in halves:
        need = 1.0
        for op in own:
            if need > 0 and op in comp and op.endswith(".X") == carry:
                take = min(own[op], need)
                own[op] -= take
                need -= take
        for op in own:  # a companion whose halves ptxas did not split that way
            if need > 0 and op in comp:
                take = min(own[op], need)
                own[op] -= take
                need -= take
    return {op: c for op, c in own.items() if c > 1e-9}


def without_companion(v: Variant, strat, counts: dict[str, str] | dict[str, Fraction]) -> dict[str, Fraction]:
    """One instance's SASS (opcode -> count; moves may be keyed ``MOV:<opcode>``, as in
    check_family) with the companion of ``strat``, if any, taken out."""
    if strat.chain != "companion":
        return {op: Fraction(c) for op, c in counts.items()}
    n = 2 if v.chain_operand is not None and v.chain_operand.reg_class == "rd" else 1
    return {op: Fraction(c).limit_denominator(64)
            for op, c in own_sass(counts, companion_sass(strat.companion), n).items()}


def own_counts(v: Variant, rec: MapRecord) -> dict[str, Fraction]:
    """One instance of the variant's own SASS from its verified chain: the companion (if any)
    and the glue taken out."""
    counts = without_companion(v, get_strategy(rec.strategy or "reg"), rec.sass_counts)
    return core_sass(counts, glue_key(v), glue_sass())
