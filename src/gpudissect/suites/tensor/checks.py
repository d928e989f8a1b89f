"""SASS mapping and region checks of the tensor-core kernels.

A family of kernels of one variant differs only in the number of PTX tensor instructions
in the timed region (``units``). The region must hold ``units * per_instr`` tensor SASS
instructions (HMMA, IMMA, DMMA, BMMA, QMMA, OMMA, HGMMA, IGMMA, QGMMA, BGMMA) with nothing else that
grows with ``units`` except register moves and NOPs, and nothing that distorts a timing
(calls, branches, local/global memory, barriers). Outcomes:

* ``native``: a fixed number of tensor SASS per PTX instruction, nothing else per instance;
* ``emulated``: ptxas lowered the instruction to a subroutine call or to other work per
  instance (conversions, adds): no native tensor-core path for this variant on the arch;
* ``folded``: fewer tensor SASS than instances (the compiler hoisted/merged work);
* ``serialized``: a wgmma throughput kernel in which ptxas waits for each wgmma to complete
  before the next (a ``WARPGROUP.DEPBAR`` per instance: it does so when the in-flight
  instructions need more registers than it has), so the instructions do not overlap;
* ``unsupported``: ptxas rejects the variant for the arch (its message is kept).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from gpudissect.arch.target import Target
from gpudissect.catalog.tensor import LdstVariant, MmaVariant, WgmmaVariant
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.mma import tensor_arch
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.region import is_clock_read, is_move
from gpudissect.kernel.sass import REG_RE, SassInstr
from gpudissect.kernel.toolchain import PtxasError

# (QMMA: the 8-bit-float mma.sync of the generations that have one; OMMA: the 4-bit-float one)
TENSOR_OP = re.compile(r"^(HMMA|IMMA|DMMA|BMMA|QMMA|OMMA|HGMMA|IGMMA|QGMMA|BGMMA)$")
LDST_OP = re.compile(r"^(LDSM|STSM)$")
# wmma.load / wmma.store from shared memory: LDSM/STSM or plain shared loads/stores
WMMA_LDST_OP = re.compile(r"^(LDSM|STSM|LDS|STS)$")
# the address add of the ldmatrix latency chain (one per instance at most)
ADDRESS_ADD = re.compile(r"^(IADD3|IMAD\.IADD|VIADD|IADD)$")
# wgmma brings its own synchronisation (arrive / wait on the warpgroup)
WGMMA_SYNC = re.compile(r"^(WARPGROUP|WARPSYNC|DEPBAR)$")
FORBIDDEN = re.compile(r"^(CALL|BRA|BRX|JMP|RET|LDL|STL|LDG|STG|LD|ST|BAR|MEMBAR|LDS|STS|ATOM|ATOMS|RED)$")


@dataclass
class TensorCheck:
    status: str  # native | emulated | folded | serialized | unsupported | error
    sass: dict[str, str] = field(default_factory=dict)  # tensor SASS per PTX instruction
    other_per_instr: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "native"

    def to_json(self) -> dict:
        return asdict(self)


def _counts(region: list[SassInstr], op_re: re.Pattern = TENSOR_OP) -> tuple[Counter, Counter, Counter]:
    tensor, other, bad = Counter(), Counter(), Counter()
    for i in region:
        if op_re.match(i.opcode):
            tensor[i.full] += 1
        elif FORBIDDEN.match(i.opcode):
            bad[i.full] += 1
        elif is_move(i.full, i) or i.opcode == "NOP" or WGMMA_SYNC.match(i.opcode):
            continue
        else:
            other[i.full] += 1
    return tensor, other, bad


def _waits(region: list[SassInstr]) -> int:
    """The wgmma completion waits in a region (``WARPGROUP.DEPBAR``)."""
    return sum(1 for i in region if i.full.startswith("WARPGROUP.DEPBAR"))


def check_tensor_family(kernels: list[Built], per_instance: int = 1,
                        op_re: re.Pattern = TENSOR_OP, companion: re.Pattern | None = None,
                        companion_max: int = 1, lowering_ok: bool = False,
                        waits_ok: bool = True) -> TensorCheck:
    """Check kernels of one variant at different ``units`` (>= 2 distinct). ``op_re``: the SASS
    the instruction must map to; ``companion``: extra work of the benchmark itself allowed at
    most ``companion_max`` times per instance (the address adds of a load chain);
    ``lowering_ok``: other integer work per instance is part of the instruction's lowering
    (wmma.load/store address arithmetic and register shuffles): it is reported in
    ``other_per_instr`` and does not make the variant 'emulated'. ``waits_ok=False`` (wgmma
    throughput kernels): completion waits that grow with the instances make the family
    'serialized'."""
    ks = sorted(kernels, key=lambda k: k.kernel.units)
    if len(ks) < 2 or ks[0].kernel.units == ks[-1].kernel.units:
        raise ValueError("need kernels at two different instance counts")
    lo, hi = ks[0], ks[-1]
    tlo, olo, blo = _counts(lo.region, op_re)
    thi, ohi, bhi = _counts(hi.region, op_re)
    du = (hi.kernel.units - lo.kernel.units) * per_instance
    per = {op: Fraction(thi[op] - tlo[op], du) for op in thi | tlo}
    other = {op: Fraction(ohi[op] - olo[op], du) for op in ohi | olo}
    other = {op: c for op, c in other.items() if c > 0}
    if companion is not None:
        comp = sum((c for op, c in other.items() if companion.match(op)), Fraction(0))
        if comp <= companion_max:
            other = {op: c for op, c in other.items() if not companion.match(op)}
    res = TensorCheck("native", {op: str(c) for op, c in per.items() if c > 0},
                      {op: str(c) for op, c in other.items()})
    if any(k.spills for k in ks):
        if other and not lowering_ok:  # a software lowering (operand conversions) that spills
            res.status = "emulated"
            res.reason = ("other work per instance beside the tensor SASS: " + _ops(other)
                          + "; the lowering also spills registers (LDL/STL)")
        else:
            res.status, res.reason = "error", "register spills (LDL/STL) in the kernel"
        return res
    if blo or bhi:
        calls = any(op.startswith("CALL") for op in bhi)
        res.status = "emulated" if calls else "error"
        res.reason = ("ptxas lowered the instruction to a subroutine call: "
                      if calls else "timing-distorting instructions in the region: ") + \
            ", ".join(f"{op} x{c}" for op, c in sorted(bhi.items()))
        return res
    total = sum(per.values(), Fraction(0))
    if total <= 0:
        res.status = "emulated" if other else "folded"
        res.reason = "no tensor SASS per instance" + (
            f"; other work per instance: {_ops(other)}"
            if other else " (the compiler removed the work)")
        return res
    if any(c.denominator != 1 for c in per.values()):
        res.status = "folded"
        res.reason = (f"{float(total):g} tensor SASS per PTX instruction (not whole): the compiler "
                      "hoisted or merged instances")
        return res
    if not waits_ok:
        grown = [k for k in ks if _waits(k.region) > _waits(lo.region)]
        if grown:
            k = grown[0]
            res.status = "serialized"
            res.reason = (f"ptxas waits for every wgmma before the next in the {k.kernel.units}-instance kernel "
                          f"({_waits(k.region)} WARPGROUP.DEPBAR, {k.regs} registers per thread; "
                          f"{_waits(lo.region)} in the {lo.kernel.units}-instance one): the instructions "
                          "do not overlap")
            return res
    for k in ks[1:-1]:
        t, _, _ = _counts(k.region, op_re)
        exp = {op: int(Fraction(tlo[op]) + per[op] * (k.kernel.units - lo.kernel.units) * per_instance)
               for op in per}
        if any(t[op] != exp[op] for op in per):
            res.status, res.reason = "folded", "tensor SASS count does not scale with the instances"
            return res
    if other and not lowering_ok:
        res.status = "emulated"
        res.reason = "other work per instance beside the tensor SASS: " + _ops(other)
    return res


def _ops(counts: dict[str, Fraction]) -> str:
    return ", ".join(f"{op} x{float(c):g}" for op, c in counts.items())


def compile_failure(e: Exception) -> TensorCheck:
    if isinstance(e, PtxasError):
        status = "unsupported" if e.unsupported else "error"
        return TensorCheck(status, reason=f"ptxas: {e.message.splitlines()[0] if e.message else e}"[:400])
    return TensorCheck("error", reason=f"{type(e).__name__}: {e}"[:400])


# --- one variant: its kernels compiled as one module, each family checked ----------------------


@dataclass
class Work:
    variant: MmaVariant | WgmmaVariant | LdstVariant
    kernels: list[Kernel] = field(default_factory=list)
    built: dict[str, Built | Exception] = field(default_factory=dict)
    check: TensorCheck | None = None
    checks: dict[str, TensorCheck] = field(default_factory=dict)  # per family (wgmma: per N/source)
    probe: Built | None = None  # the fragment-layout probe kernel, built beside the timing kernels
    per_sass: Any = None  # per_sass.PerSassBuild: a multi-SASS variant's per-SASS kernels, built ahead


def family_key(k: Kernel) -> str:
    """Kernels that differ only in length form one family."""
    return k.name.rsplit("_n", 1)[0]


def compile_part(w: Work, kernels: list[Kernel], target: Target) -> None:
    """Compile ``kernels`` (some of the variant's, whole families) as one module into
    ``w.built`` and check each of their families into ``w.checks``; a module ptxas rejects
    sets ``w.check`` (the variant then fails as a whole)."""
    try:
        built = build_module(kernels, tensor_arch(target))
    except Exception as e:  # ptxas rejects the module: unsupported or a generator bug
        w.check = compile_failure(e)
        return
    w.built.update(built)
    fams: dict[str, list[Built]] = {}
    for k in kernels:
        b = built.get(k.name)
        if isinstance(b, Built):
            fams.setdefault(family_key(k), []).append(b)
    ldst = isinstance(w.variant, LdstVariant)
    op_re = (WMMA_LDST_OP if w.variant.wmma else LDST_OP) if ldst else None
    for key, bs in fams.items():
        try:
            w.checks[key] = (check_tensor_family(bs, op_re=op_re, companion=ADDRESS_ADD,
                                                 companion_max=w.variant.regs + 1,
                                                 lowering_ok=w.variant.wmma) if op_re
                             else check_tensor_family(bs, waits_ok=not (isinstance(w.variant, WgmmaVariant)
                                                                        and bs[0].kernel.measure == "throughput")))
        except ValueError as e:
            w.checks[key] = TensorCheck("error", reason=str(e))


def settle_status(w: Work) -> None:
    """The variant's status: its latency family's (smallest N for wgmma), unless a module of
    it failed to compile."""
    if w.check is not None:
        return
    lat = [c for key, c in w.checks.items() if "_lat" in key] or list(w.checks.values())
    w.check = lat[0] if lat else TensorCheck("error", reason="no latency kernel built")
    if any(c.ok for c in w.checks.values()) and not w.check.ok:
        w.check = next(c for c in w.checks.values() if c.ok)


def compile_work(w: Work, target: Target) -> None:
    """Compile the variant's kernels as one module and check each family's SASS; the
    variant's status is its latency family's (smallest N for wgmma)."""
    compile_part(w, w.kernels, target)
    settle_status(w)


def parts(kernels: list[Kernel], most: int) -> list[list[Kernel]]:
    """The kernels in groups of at most ``most`` (more when one family is larger), whole
    families each: a variant of many kernels compiles as several modules in parallel."""
    fams: dict[str, list[Kernel]] = {}
    for k in kernels:
        fams.setdefault(family_key(k), []).append(k)
    out: list[list[Kernel]] = [[]]
    for ks in fams.values():
        if out[-1] and len(out[-1]) + len(ks) > most:
            out.append([])
        out[-1].extend(ks)
    return [p for p in out if p]


# --- per-SASS timing (clock reads between the tensor SASS of one instruction) -----------------


def _base_reg(operand: str) -> str:
    """The first register of an operand ('R12.reuse' -> 'R12', 'R2.ROW' -> 'R2')."""
    m = REG_RE.search(operand)
    return m.group(1) if m else operand


def sass_steps(tensor: list[SassInstr]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """How the tensor SASS of one instruction use their operands, in issue order: per step the
    accumulator (by destination register), the A and the B fragment (by first register);
    equal index = the same registers (e.g. a wmma m16n16k16: two accumulators, one A)."""
    out: list[tuple[int, ...]] = []
    for pos in (0, 1, 2):
        ids: dict[str, int] = {}
        out.append(tuple(ids.setdefault(_base_reg(i.operands[pos]), len(ids)) for i in tensor))
    return out[0], out[1], out[2]


@dataclass
class StepCheck:
    ok: bool
    reason: str = ""
    gaps: list[list[str]] = field(default_factory=list)  # tensor SASS between consecutive clock reads


def _dest_range(ins: SassInstr, d_words: int) -> set[str]:
    base = _base_reg(ins.operands[0])
    if not base.startswith("R") or base == "RZ":
        return set()
    n = int(base[1:])
    return {f"R{n + i}" for i in range(d_words)}


def check_clock_gaps(instrs: list[SassInstr], expect: list[int], d_words: int,
                     op_re: re.Pattern = TENSOR_OP) -> StepCheck:
    """The clocked rounds of a per-SASS kernel (step_kernels.py): exactly
    ``len(expect) + 1`` 64-bit clock reads (the loop body once), ``expect[g]`` tensor SASS
    between reads g and g+1 with nothing else but register moves and NOPs in a gap that holds
    tensor SASS, and in the last gap (``expect[-1] == 0``) an instruction that reads the
    destination of the last tensor SASS (``d_words`` registers), so the closing read waits for
    its result. Memory, branches and barriers are refused anywhere between the reads."""
    idx = [i for i, ins in enumerate(instrs) if is_clock_read(ins)]
    if len(idx) != len(expect) + 1:
        return StepCheck(False, f"found {len(idx)} 64-bit clock reads, expected {len(expect) + 1} "
                                "(ptxas duplicated, merged or unrolled the timed round)")
    gaps: list[list[str]] = []
    last: SassInstr | None = None
    for g, (lo, hi) in enumerate(zip(idx, idx[1:], strict=False)):
        gap = instrs[lo + 1 : hi]
        tensor = [i for i in gap if op_re.match(i.opcode)]
        gaps.append([i.full for i in tensor])
        bad = [i.full for i in gap if FORBIDDEN.match(i.opcode) or i.opcode in ("BAR", "WARPSYNC", "DEPBAR")]
        if bad:
            return StepCheck(False, f"clock gap {g + 1}: timing-distorting {', '.join(bad)}", gaps)
        if len(tensor) != expect[g]:
            return StepCheck(False, f"clock gap {g + 1}: {len(tensor)} tensor SASS, expected {expect[g]} "
                                    "(ptxas moved a tensor instruction across a clock read)", gaps)
        if tensor:
            other = [i.full for i in gap if not op_re.match(i.opcode) and not is_move(i.full, i)
                     and i.opcode != "NOP"]
            if other:
                return StepCheck(False, f"clock gap {g + 1}: other work beside the tensor SASS: "
                                        f"{', '.join(other)}", gaps)
            last = tensor[-1]
        elif last is not None:
            dst = _dest_range(last, d_words)
            if not any(dst & set(i.sources()) for i in gap):
                return StepCheck(False, f"clock gap {g + 1}: no use of the last tensor result before the "
                                        "closing clock read", gaps)
    if last is None:
        return StepCheck(False, "no tensor SASS between the clock reads", gaps)
    return StepCheck(True, "", gaps)
