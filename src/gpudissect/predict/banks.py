"""Register-bank conflicts for model v1: the cycles an instruction holds its scheduler beyond its
one issue slot while it reads sources that share a bank, by the rule the behaviour suite's
``banks:ffma`` probe measured on the GPU of the tables (``bank = register index mod k``, and what
one more read of a bank costs; on an H200: two banks, one cycle per extra read, a source read
from the reuse cache free).

A source is read from the reuse cache when the instruction before it in the loop (program
order; the body's last before its first) named the same register in the same operand slot with
``.reuse``: that is how the probe's costs fall (three sources in one bank: 3 cycles; the reuse
flag on one slot: 2; on two: 1). The rule is applied to the instructions of 32-bit register
sources the architecture's ``predict.toml`` lists (``[banks] opcodes``); wider operands read two
registers, which the probe did not measure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpudissect.kernel.sass import SassInstr


@dataclass(frozen=True)
class BankRule:
    banks: int  # bank = register index mod banks
    extra: float  # cycles per read of a bank beyond its first
    source: str  # the record it comes from


def _sources(ins: SassInstr) -> list[tuple[int, str, bool]]:
    """(slot, register, reuse flag) of each general-register source operand (not RZ)."""
    out = []
    for k, tok in enumerate(ins.operands[ins.n_dests():]):
        head = tok.split("[")[0].lstrip("-|!~")
        name = head.split(".")[0]
        if name.startswith("R") and name[1:].isdigit():
            out.append((k, name, ".reuse" in head))
    return out


def bank_extras(body: list[SassInstr], rule: BankRule, opcodes: tuple[str, ...]) -> dict[int, float]:
    """Body index -> cycles beyond the one issue slot the instruction's bank conflicts cost (only
    the instructions that have some)."""
    out: dict[int, float] = {}
    srcs = [_sources(i) for i in body]
    for j, ins in enumerate(body):
        if ins.opcode not in opcodes or ins.pair:
            continue
        prev = srcs[j - 1]  # the body's last before its first: a loop
        cached = {(k, r) for k, r, reuse in prev if reuse}
        reads = {r for k, r, _u in srcs[j] if (k, r) not in cached}
        per_bank = Counter(int(r[1:]) % rule.banks for r in reads)
        n = sum(c - 1 for c in per_bank.values())
        if n:
            out[j] = n * rule.extra
    return out


def bank_rule(records: list[dict]) -> BankRule | None:
    """The measured rule from the behaviour suite's ``banks:ffma`` record, or None where the set
    has none or the banks were not the residues of one modulus."""
    r = next((x for x in records if x.get("variant") == "banks:ffma" and x.get("value")), None)
    fit = (r or {}).get("fit") or {}
    rule = fit.get("rule") or ""
    if r is None or not rule.startswith("bank = register index mod "):
        return None
    k = int(rule.rsplit(" ", 1)[1])
    extra = fit.get("conflict_cycles")
    if not extra or extra <= 0:
        return None
    return BankRule(k, float(extra), f"behaviour banks:ffma, {rule}")
