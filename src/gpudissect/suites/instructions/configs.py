"""Read-read and write-write instruction configurations (issue 22, thesis section 2.5).

* ``latency_read_read``: a run of instances that all read the SAME register in one source slot
  and write their own destinations, no instance reading another's result (the cost of reading a
  register again right after an instruction read it);
* ``latency_write_write``: a run of instances that all write the SAME destination register with
  no read of it in between (each under a run-time predicate, all true: no write is provably dead).

Kernels: ``template.generate_config``; the table of variants: strategies.toml
``[dependence_types]``. The value is the slope of cycles against the number of instances (one
warp), as for the latency chains. The SASS check (:func:`check_read_read`,
:func:`check_write_write`) proves on every kernel of a family that the instances are all there
(none merged or removed as dead) and have the intended register pattern.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from gpudissect.catalog.model import Variant
from gpudissect.kernel.build import Built
from gpudissect.kernel.control import attach, kernel_controls
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.sass import SassInstr
from gpudissect.suites.instructions.checks import Sample
from gpudissect.suites.instructions.operands import equivalent
from gpudissect.suites.instructions.strategies import STRATEGY_FILE
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import (
    READ_READ,
    WRITE_WRITE,
    GenerationError,
    generate_config,
)
from gpudissect.target import Target

# measure -> the configuration template.generate_config builds
MODES = {"latency_read_read": READ_READ, "latency_write_write": WRITE_WRITE}
STRATEGY = "reg"  # values loaded at run time; no chain, no companion
WORDS = {"h": 1, "r": 1, "rd": 2}  # 32-bit registers one value of a register class takes


@dataclass(frozen=True)
class ConfigSpec:
    measure: str
    shared: int = 1  # read_read: the source operand (1-based) all instances read
    preds: int = 4  # write_write: the run-time predicates the instances cycle through


def _table(doc: str | None) -> dict:
    return tomllib.loads(doc if doc is not None else STRATEGY_FILE.read_text()).get("dependence_types", {})


def config_specs(v: Variant, doc: str | None = None) -> list[ConfigSpec]:
    """The read-read / write-write measures the table (strategies.toml ``[dependence_types]``,
    first matching entry per measure) gives ``v``; [] when none."""
    t = _table(doc)
    out: dict[str, ConfigSpec] = {}
    for entry in t.get("set", []):
        if not any(fnmatch.fnmatchcase(v.name, p) for p in entry.get("variants", [])):
            continue
        for m in entry.get("measures", list(MODES)):
            if m not in MODES:
                raise ValueError(f"[dependence_types]: unknown measure {m} (known: {', '.join(MODES)})")
            out.setdefault(m, ConfigSpec(m, int(entry.get("shared", 1)), int(t.get("predicates", 4))))
    return [out[m] for m in MODES if m in out]


def config_lengths(v: Variant, spec: ConfigSpec, units: tuple[int, ...], min_length: int,
                   doc: str | None = None) -> tuple[int, ...]:
    """Instances per region: as many lengths as ``units`` holds, the largest at most max(units)
    and within the register budget (strategies.toml: every instance keeps its own values, and
    under read_read its own destination, live across the region; more would spill)."""
    budget = int(_table(doc).get("register_budget", 128))
    srcs = [o for o in v.sources if o.reg_class != "p"]
    if MODES[spec.measure] == READ_READ:
        own = [o for j, o in enumerate(v.sources) if j != spec.shared - 1 and o.reg_class != "p"]
        words = sum(WORDS.get(o.reg_class, 1) for o in own) + WORDS.get(v.dest.reg_class if v.dest else "r", 1)
    else:
        words = WORDS.get(srcs[0].reg_class, 1) if srcs else 1
    top = max(min_length, min(max(units), budget // max(words, 1)))
    n = max(len(units), 2)
    out = tuple(sorted({max(min_length, round(top * (k + 1) / n)) for k in range(n)}))
    return out if len(out) > 1 else (out[0], 2 * out[0])  # a slope needs two lengths


def config_kernels(v: Variant, target: Target, units: tuple[int, ...], min_length: int, reps: int,
                   idx: int) -> list[tuple[ConfigSpec, list[Kernel], str | None]]:
    """The kernels of every read-read / write-write family of variant number ``idx``, or why
    none can be generated."""
    out: list[tuple[ConfigSpec, list[Kernel], str | None]] = []
    for spec in config_specs(v):
        mode = MODES[spec.measure]
        try:
            ks = [generate_config(v, get_strategy(STRATEGY), target, mode, length=n, reps=reps,
                                  measure=spec.measure, shared=spec.shared, preds=spec.preds,
                                  name=f"v{idx}_{'rr_r' if mode == READ_READ else 'ww_w'}1_n{n}")
                  for n in config_lengths(v, spec, units, min_length)]
            out.append((spec, ks, None))
        except GenerationError as e:
            out.append((spec, [], f"{spec.measure}: {e}"))
    return out


# --- the SASS checks -----------------------------------------------------------------------


def _instances(region: list[SassInstr], own: dict[str, Fraction]) -> list[SassInstr]:
    same = equivalent()
    return [i for i in region if same.get(i.full, i.full) in own]


def _one_instruction(own: dict[str, Fraction]) -> str | None:
    """Why an instance of ``own`` is not one SASS instruction (in one of its forms, e.g. HADD2 or
    HFMA2.MMA as ptxas balances two pipes), or None."""
    if sum(own.values(), Fraction(0)) != 1:
        return f"not one SASS instruction per instance ({', '.join(own)}): no single register pattern to check"
    return None


def _count(s: Sample, inst: list[SassInstr], what: str) -> str | None:
    if len(inst) != s.units:
        return (f"{len(inst)} instances of {inst[0].full if inst else 'the instruction'} in the region of "
                f"{s.units} PTX instances: ptxas {what}")
    return None


def _src_tokens(ins: SassInstr) -> list[tuple[int, list[str]]]:
    """(source slot, its first register) of ``ins``: the register that names the operand (a
    64-bit operand's pair is implied; the parser cannot tell which operands of IMAD.WIDE are
    pairs, so no second register is guessed)."""
    return [(j, ins._regs(t)[:1]) for j, t in enumerate(ins.operands[ins.n_dests():])]


def check_read_read(samples: list[Sample], own: dict[str, Fraction]) -> tuple[str | None, dict]:
    """Why a read-read family does not show its pattern (None when it does), and what it shows:
    in every kernel as many instances of the variant's one SASS instruction as PTX instances (none
    merged), each writing a register of its own that no instance reads (no write-read, no
    write-write between instances), and all reading one register in one source slot (the shared
    one; no other register read by all: the per-instance values were not merged). Info: the
    shared slot per opcode and the share of instances whose shared operand carries ``.reuse``."""
    why = _one_instruction(own)
    if why:
        return why, {}
    slots: Counter[str] = Counter()
    reuse = total = 0
    for s in samples:
        inst = _instances(s.region, own)
        why = _count(s, inst, "merged or removed instances")
        if why:
            return why, {}
        written: set[str] = set()
        for ins in s.region:
            if ins in inst and any(r in written for _, rs in _src_tokens(ins) for r in rs):
                return "an instance reads a register written in the region (write-read between instances)", {}
            written.update(ins.dests())
        dests = [tuple(i.dests()) for i in inst]
        if len(set(dests)) != len(dests):
            return "two instances write the same register (write-write between instances)", {}
        common = set.intersection(*[{r for _, rs in _src_tokens(i) for r in rs if r.startswith("R")}
                                    for i in inst])
        if not common:
            return "no register is read by every instance: the shared operand was not kept in one register", {}
        for ins in inst:
            hit = [(j, rs) for j, rs in _src_tokens(ins) if set(rs) & common]
            if len(hit) != 1 or set(hit[0][1]) != common:
                return (f"the registers every instance reads ({', '.join(sorted(common))}) are not one source "
                        f"operand of each instance (other per-instance values were merged)"), {}
            slots[f"{ins.full}:{hit[0][0]}"] += 1
            total += 1
            reuse += ".reuse" in ins.operands[ins.n_dests() + hit[0][0]]
    by_op: dict[str, list[int]] = {}
    for key in sorted(slots):
        op, j = key.rsplit(":", 1)
        by_op.setdefault(op, []).append(int(j))
    return None, {"shared_slots": by_op, "reuse_fraction": round(reuse / total, 3) if total else 0.0}


def check_write_write(samples: list[Sample], own: dict[str, Fraction]) -> tuple[str | None, dict]:
    """Why a write-write family does not show its pattern (None when it does): in every kernel as
    many instances of the variant's one SASS instruction as PTX instances (no write removed as
    dead), each under its predicate (not converted to a select), all writing the same register,
    and no instruction of the region reading that register from the first instance to the last.
    Info: the predicates the instances run under."""
    why = _one_instruction(own)
    if why:
        return why, {}
    preds: set[str] = set()
    for s in samples:
        inst = _instances(s.region, own)
        why = _count(s, inst, "removed writes as dead or merged instances")
        if why:
            return why, {}
        if any(not i.predicate for i in inst):
            return "an instance lost its predicate (ptxas turned the guarded write into a select)", {}
        dests = {tuple(i.dests()) for i in inst}
        if len(dests) != 1:
            return f"the instances write {len(dests)} different registers, not one", {}
        reg = set(next(iter(dests)))
        first, last = s.region.index(inst[0]), s.region.index(inst[-1])
        if any(reg & set(i.sources()) for i in s.region[first:last + 1]):
            return f"{', '.join(sorted(reg))} is read between the writes (no write-write pair)", {}
        preds.update(i.predicate for i in inst)
    return None, {"predicates": sorted(preds)}


def check_config(measure: str, samples: list[Sample], own: dict[str, Fraction],
                 per_unit: dict[str, Fraction]) -> tuple[str | None, dict]:
    """The check of a read-read / write-write family; ``per_unit``: the family's real SASS per
    instance (check_family, moves out), which must be the variant's own: as many instructions,
    of its forms (the mix of two forms, as HADD2 / HFMA2.MMA, may differ from its chain's)."""
    if sum(per_unit.values(), Fraction(0)) != sum(own.values(), Fraction(0)) or not set(per_unit) <= set(own):
        shown = ", ".join(f"{float(c):g}*{op}" for op, c in per_unit.items()) or "nothing"
        return (f"the instance's SASS changed ({shown} where the variant is "
                f"{', '.join(f'{float(c):g}*{op}' for op, c in own.items())})"), {}
    s = sorted(samples, key=lambda x: x.units)
    return (check_read_read if MODES[measure] == READ_READ else check_write_write)(s, own)


def ptxas_gap(b: Built, own: dict[str, Fraction]) -> float | None:
    """ptxas's own model of the configuration: the median stall cycles (control codes,
    kernel/control.py) from one instance of the variant's instruction to the next in the region
    of ``b``; None where the control codes cannot be read or a scoreboard (variable latency)
    orders the instances instead."""
    try:
        pairs = attach(b.region, kernel_controls(b.cubin)[b.kernel.name])
    except (KeyError, ValueError):
        return None
    mine = set(_instances(b.region, own))
    idx = [k for k, (ins, _) in enumerate(pairs) if ins in mine]
    if len(idx) < 2 or any(pairs[k][1].write_barrier is not None for k in idx):
        return None
    gaps = sorted(sum(c.stall for _, c in pairs[i:j]) for i, j in zip(idx, idx[1:], strict=False))
    return float(gaps[len(gaps) // 2])


def statistic(measure: str) -> str:
    if MODES[measure] == READ_READ:
        return ("slope of median cycles vs instances that all read one register (same source slot) and "
                "write their own, no dependence between them")
    return ("slope of median cycles vs instances that all write one register (each under a run-time "
            "predicate, all true), none reading it")
