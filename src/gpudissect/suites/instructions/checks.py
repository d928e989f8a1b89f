"""Check that a timed region holds exactly the work that was meant.

Kernels of one variant/strategy are compiled at several chain lengths. The region's
SASS composition must be ``base + units * instance`` for all of them (linear scaling),
where ``instance`` is the per-instruction SASS sequence (rational counts allowed: ptxas
may alternate IADD3 and IMAD.IADD). The verifier rejects what distorts a timing:
barriers, memory accesses and branches that the instruction itself does not bring,
folded or hoisted work (fewer than one real instruction per instance), too many register
moves, and chains the compiler shortened (dependence depth below one per instance).

One exception to "fewer than one": two-lane SASS (``paired``: HADD2, HFMA2, ... of the target's
facts) that holds exactly half an instruction per instance. ptxas put two independent 16-bit
instances into the two lanes of one instruction: the work is all there, two instances per SASS
(``CheckResult.paired``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from gpudissect.kernel.region import is_move, kind_of
from gpudissect.kernel.sass import SassInstr, dependency_depth


def _key(ins: SassInstr) -> str:
    """Composition key: moves are grouped under MOV-like names so that linearity ignores them."""
    return ins.full if not is_move(ins.full, ins) else ("MOV:" + ins.full)


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
    paired: bool = False  # two instances per two-lane SASS (see the module's text)

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


def region_mix(region: list[SassInstr], units: int) -> list[str]:
    """Every SASS instruction of a timed region per PTX instance (``"c*OP"``, c = its count over
    ``units``), harness and moves included: what one span of that region issues, so the limit a
    rate from that span alone must obey (arch/limits.limit_for)."""
    counts = Counter(ins.full for ins in region)
    return [f"{c / max(units, 1):.6g}*{op}" for op, c in sorted(counts.items())]


def check_family(
    samples: list[Sample],
    allow: tuple[str, ...] = (),
    max_moves: Fraction = Fraction(1),
    check_depth: bool = True,
    min_real: int = 1,
    paired: Callable[[str], bool] | None = None,
    expect: tuple[str, ...] = (),
) -> CheckResult:
    """Verify a family of kernels that differ only in the number of instances. ``paired``
    tells the opcodes of two-lane SASS (None: no pairing is accepted). ``expect``: the SASS
    one instance must be (``VIMNMX3`` matches ``VIMNMX3.S16x2``): each of them, and no other
    real instruction beside a companion's (a multi-instruction PTX pattern the compiler did
    not fuse into the one SASS it names, or simplified away, fails)."""
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
    kinds_of = {_key(i): kind_of(i.opcode, i.full) for s in samples for i in s.region}

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
        kinds = kinds_of[op]
        if "convergence" in kinds and "convergence" in allow and per_unit.get(op, 0) > 0:
            res.reason = f"convergence guard {op} per instance (allowed once before the region's work only)"
            return res
        bad = kinds - set(allow) - {"shared", "constant", "global"}
        if "memory" in kinds and ({"shared", "constant", "global"} & kinds & set(allow) or "memory" in allow):
            bad.discard("memory")
        if bad:
            res.reason = f"{' and '.join(sorted(bad))} instruction {op} in the timed region"
            return res

    moves = max(sum((c for op, c in per_unit.items() if op.startswith("MOV:")), Fraction(0)), Fraction(0))
    res.moves_per_unit = moves
    work = [op for op, c in per_unit.items() if c > 0 and not op.startswith("MOV:")]
    if (paired is not None and min_real == 1 and real == Fraction(1, 2) and work
            and all(paired(op) for op in work)):
        res.paired = True  # two instances in the two lanes of each SASS: nothing removed
    elif real < min_real:
        extra = " beside the companion" if min_real > 1 else ""
        res.reason = (
            f"folded: {float(real - (min_real - 1)):g} real SASS instructions per PTX instance{extra} "
            "(the compiler merged, hoisted or removed the instruction)"
        )
        return res
    if expect:
        why = _unexpected(per_unit, expect, real - (min_real - 1))
        if why:
            res.reason = why
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


def _unexpected(per_unit: dict[str, Fraction], expect: tuple[str, ...], real: Fraction) -> str | None:
    """Why one instance's SASS is not ``expect`` (None when it is). ``real``: real SASS
    instructions per instance that are the variant's own (a companion's taken out)."""
    work = {op: c for op, c in per_unit.items() if c > 0 and not op.startswith("MOV:")}
    need = Counter(expect)
    missing = []
    for want, n in need.items():
        rx = re.compile(rf"^{re.escape(want)}(\.|$)")
        got = sum((c for op, c in work.items() if rx.match(op)), Fraction(0))
        if got < n:
            missing.append(want)
    shown = ", ".join(f"{float(c):g}*{op}" for op, c in work.items()) or "nothing"
    if missing:
        return f"not the expected SASS: {' + '.join(missing)} missing per instance (found {shown})"
    if real != len(expect):
        return (f"not the expected SASS: {float(real):g} real instructions per instance where "
                f"{' + '.join(expect)} was expected (found {shown}): the pattern was not fused")
    return None
