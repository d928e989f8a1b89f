"""Check that a timed region holds exactly the work that was meant.

Kernels of one variant/strategy are compiled at several chain lengths. The region's
SASS composition must be ``base + units * instance`` for all of them (linear scaling),
where ``instance`` is the per-instruction SASS sequence (rational counts allowed: ptxas
may alternate IADD3 and IMAD.IADD). The verifier rejects what distorts a timing:
barriers, memory accesses and branches that the instruction itself does not bring,
folded or hoisted work (fewer than one real instruction per instance), too many register
moves, and chains the compiler shortened (dependence depth below one per instance).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

from ..sass.parse import SassInstr, dependency_depth

CLOCK_OPERAND = "SR_CLOCKLO"

# SASS kinds, by opcode pattern, that distort a timing unless the variant allows them
KINDS: dict[str, re.Pattern[str]] = {
    "barrier": re.compile(r"^(BAR|WARPSYNC|MEMBAR|ERRBAR|DEPBAR|CCTL)$"),
    "memory": re.compile(r"^(LD|LDG|LDS|LDL|LDC|ULDC|ST|STG|STS|STL|ATOM|ATOMG|ATOMS|RED|REDG|LDSM|STSM|LDGSTS|SUST|SULD|TEX|TLD)$"),
    "shared": re.compile(r"^(LDS|STS|ATOMS|LDSM|STSM)$"),
    "constant": re.compile(r"^(LDC|ULDC)$"),
    "global": re.compile(r"^(LDG|STG|ATOMG|ATOM|RED|REDG)$"),
    "branch": re.compile(r"^(BRA|BRX|JMP|CALL|RET|BSSY|BSYNC|BREAK|BPT|EXIT|KILL)$"),
    "clock": re.compile(r"^(CS2R|S2R|S2UR)$"),
}
MOVE_RE = re.compile(r"^(MOV|UMOV|IMAD\.MOV(\.U32)?|MOV\.\w+|NOP|PRMT\.MOV)$")


ZERO_SRC = re.compile(r"^-?\|?(RZ|URZ)\|?$|^-?(0x)?[0-9a-fA-F.]+$")


def is_move(full: str, ins: SassInstr | None = None) -> bool:
    """Register moves and constant materialisation (``HFMA2.MMA R0, -RZ, RZ, 0, 0``,
    ``IMAD.U32 R0, RZ, RZ, UR4``): no real work of the instruction under test."""
    if MOVE_RE.match(full):
        return True
    if ins is not None and ins.opcode in ("HFMA2", "IMAD", "FFMA") and len(ins.operands) >= 3:
        return bool(ZERO_SRC.match(ins.operands[1]) and ZERO_SRC.match(ins.operands[2]))
    return False


def _key(ins: SassInstr) -> str:
    """Composition key: moves are grouped under MOV-like names so that linearity ignores them."""
    return ins.full if not is_move(ins.full, ins) else ("MOV:" + ins.full)


def is_clock_read(ins: SassInstr) -> bool:
    """A 64-bit %clock64 read (the region delimiters). 32-bit reads (CS2R.32, S2R) are not."""
    return ins.opcode == "CS2R" and "32" not in ins.modifiers and any(CLOCK_OPERAND in o for o in ins.operands)


class RegionNotFound(ValueError):
    pass


def find_region(instrs: list[SassInstr]) -> list[SassInstr]:
    """The instructions between the first two 64-bit clock reads."""
    idx = [i for i, ins in enumerate(instrs) if is_clock_read(ins)]
    if len(idx) < 2:
        raise RegionNotFound(f"found {len(idx)} 64-bit clock reads, need 2 around the timed region")
    return instrs[idx[0] + 1 : idx[1]]


def kind_of(opcode: str) -> set[str]:
    return {k for k, rx in KINDS.items() if rx.match(opcode)}


@dataclass
class Sample:
    """One compiled kernel of the family: ``units`` instances, ``length`` per chain."""

    units: int
    length: int
    region: list[SassInstr]


@dataclass
class CheckResult:
    ok: bool
    reason: str = ""
    per_unit: dict[str, Fraction] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # opcodes in first-seen order
    base: dict[str, Fraction] = field(default_factory=dict)
    depth_per_instance: Fraction = Fraction(0)
    moves_per_unit: Fraction = Fraction(0)

    @property
    def sass(self) -> list[str]:
        """One instance's SASS, e.g. ['IMAD.MOV.U32', 'LOP3.LUT'] or ['0.5*IADD3', '0.5*IMAD.IADD']."""
        out = []
        for op in self.order:
            c = self.per_unit.get(op, Fraction(0))
            if c <= 0:
                continue
            name = op.removeprefix("MOV:")
            if c.denominator == 1:
                out.extend([name] * c.numerator)
            else:
                out.append(f"{float(c):g}*{name}")
        return out

    @property
    def sass_counts(self) -> dict[str, str]:
        return {k.removeprefix("MOV:"): str(v) for k, v in self.per_unit.items() if v > 0}


def _composition(region: list[SassInstr]) -> Counter[str]:
    return Counter(_key(ins) for ins in region)


def check_family(
    samples: list[Sample],
    allow: tuple[str, ...] = (),
    max_moves: Fraction = Fraction(1),
    check_depth: bool = True,
    min_real: int = 1,
) -> CheckResult:
    """Verify a family of kernels that differ only in the number of instances."""
    if len(samples) < 2:
        raise ValueError("need at least two chain lengths to verify")
    samples = sorted(samples, key=lambda s: s.units)
    lo, hi = samples[0], samples[-1]
    clo, chi = _composition(lo.region), _composition(hi.region)
    du = hi.units - lo.units
    ops = list(dict.fromkeys([_key(i) for i in hi.region] + [_key(i) for i in lo.region]))
    per_unit = {op: Fraction(chi[op] - clo[op], du) for op in ops}
    base = {op: clo[op] - per_unit[op] * lo.units for op in ops}
    res = CheckResult(ok=False, per_unit=per_unit, order=ops, base=base)
    opcode_of = {_key(i): i.opcode for s in samples for i in s.region}

    def real_count(region: list[SassInstr]) -> int:
        return sum(1 for i in region if not is_move(i.full, i))

    # the real (non-move) work must grow by the same amount per instance at every length;
    # register moves and the choice between equivalent forms (IADD3 / IMAD.IADD / VIADD)
    # may vary with register allocation
    r_lo, r_hi = real_count(lo.region), real_count(hi.region)
    real = Fraction(r_hi - r_lo, du)
    if real < 0:
        res.reason = "region shrinks as the chain grows: the compiler rewrote the chain"
        return res
    # long expansions (div, sqrt) may differ by an instruction between lengths
    tol = 0 if real <= 4 else max(1, real * du / 50)
    for s in samples[1:-1]:
        exp = r_lo + real * (s.units - lo.units)
        if abs(exp - real_count(s.region)) > tol:
            res.reason = (
                f"region does not scale linearly with the chain length ({real_count(s.region)} "
                f"instructions at {s.units} instances, {float(exp):g} expected): the compiler restructured it"
            )
            return res
    if any(c < 0 for op, c in per_unit.items()):
        res.per_unit = {op: c for op, c in per_unit.items() if c > 0}

    # what distorts a timing: anything of a forbidden kind anywhere in the region
    seen = dict.fromkeys(_key(i) for s in samples for i in s.region)
    for op in seen:
        kinds = kind_of(opcode_of[op])
        bad = kinds - set(allow) - {"shared", "constant", "global"}
        if "memory" in kinds and ({"shared", "constant", "global"} & kinds & set(allow) or "memory" in allow):
            bad.discard("memory")
        if bad:
            res.reason = f"{' and '.join(sorted(bad))} instruction {op} in the timed region"
            return res

    moves = max(sum((c for op, c in per_unit.items() if op.startswith("MOV:")), Fraction(0)), Fraction(0))
    res.moves_per_unit = moves
    if real < min_real:
        extra = " beside the companion" if min_real > 1 else ""
        res.reason = (
            f"folded: {float(real - (min_real - 1)):g} real SASS instructions per PTX instance{extra} "
            "(the compiler merged, hoisted or removed the instruction)"
        )
        return res
    bound = max(max_moves, real)
    if moves > bound:
        res.reason = f"{float(moves):g} register moves per instance (at most {float(bound):g} allowed)"
        return res

    looped = any(i.opcode == "BRA" for i in hi.region)  # a CAS loop or slow path: not straight-line
    if check_depth and not looped:
        dlen = hi.length - lo.length
        ddepth = dependency_depth(hi.region) - dependency_depth(lo.region)
        res.depth_per_instance = Fraction(ddepth, dlen) if dlen else Fraction(0)
        if dlen and ddepth < dlen:
            res.reason = (
                f"dependence chain shortened: depth grows by {ddepth} for {dlen} more dependent "
                "instances (the compiler reassociated or hoisted work)"
            )
            return res
    res.ok = True
    return res
