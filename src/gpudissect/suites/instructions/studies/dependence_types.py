"""Read-read and write-write instruction configurations (issue 22, thesis section 2.5), with
their controls: part of the configurations study (``configurations.py``).

* ``latency_read_read``: a run of instances that all read the SAME register in one source slot
  and write their own destinations, no instance reading another's result (the cost of reading a
  register again right after an instruction read it);
* ``latency_write_write``: a run of instances that all write the SAME destination register with
  no read of it in between (each under a run-time predicate, all true: no write is provably dead).

Kernels: ``template.generate_config``; the table of variants: strategies.toml
``[dependence_types]``. The value is the slope of cycles against the number of instances (one
warp), as for the latency chains. The SASS check (:func:`check_read_read`,
:func:`check_write_write`) proves on every kernel of a family that the instances are all there
(none merged or removed as dead) and have the intended register pattern; an instance of several
SASS instructions (mul.hi.u64, min.u64, ...) as the region's data-flow groups (:func:`_groups`).
Each is set against its control, the same instructions with no register shared
(:func:`against_control`).
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from collections import Counter
from dataclasses import asdict, dataclass, replace
from fractions import Fraction

import numpy as np

from gpudissect.arch.target import Target
from gpudissect.bench.stats import components, fit_line, slopes_per_repeat
from gpudissect.catalog.model import Variant
from gpudissect.kernel.build import Built
from gpudissect.kernel.control import attach, controls_of
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.region import is_move
from gpudissect.kernel.sass import REG_RE, SassInstr
from gpudissect.store.db import Result
from gpudissect.suites.instructions.checks import Sample
from gpudissect.suites.instructions.own_sass import equivalent
from gpudissect.suites.instructions.records import same_within, uncertainty
from gpudissect.suites.instructions.strategies import STRATEGY_FILE
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import (
    READ_READ,
    WRITE_WRITE,
    GenerationError,
    generate_config,
)

# measure -> the configuration template.generate_config builds
CONFIGS = {"latency_read_read": READ_READ, "latency_write_write": WRITE_WRITE}
# each configuration's control: the same instructions with no register shared (each instance
# reads, or writes, its own: template distance = length), timed alike
CONTROLS = {"control_read_read": READ_READ, "control_write_write": WRITE_WRITE}
CONTROL_OF = {"latency_read_read": "control_read_read", "latency_write_write": "control_write_write"}
MODES = {**CONFIGS, **CONTROLS}
STRATEGY = "reg"  # values loaded at run time; no chain, no companion
WORDS = {"h": 1, "r": 1, "rd": 2}  # 32-bit registers one value of a register class takes


@dataclass(frozen=True)
class ConfigSpec:
    measure: str
    shared: int = 1  # read_read: the source operand (1-based) all instances read
    preds: int = 4  # write_write: the run-time predicates the instances cycle through
    turns: tuple[int, ...] = ()  # read_read: the operands that hold the shared register in turn


def turns_for(v: Variant, shared: int, table: list[int] | None = None) -> tuple[int, ...]:
    """The source operands (1-based) that hold the shared register in turn, instance i in
    ``turns[i % k]`` (``table``: strategies.toml ``turns``): by default the shared operand and
    the last other register source of the same type. Consecutive instances then read the
    register in different operand slots, where the operand reuse cache (which serves a slot of
    the next instruction) cannot stand in for the read, and the control takes the same turns,
    so that test and control can carry the same reuse flags (none): compared in the SASS
    (:func:`bank_pattern`). One operand where no other has the type."""
    if table:
        return tuple(int(t) for t in table)
    srcs = v.sources
    me = srcs[shared - 1]
    other = [j + 1 for j, o in enumerate(srcs) if j != shared - 1 and o.reg_class == me.reg_class
             and o.ptype == me.ptype]
    return (shared, other[-1]) if other else (shared,)


def _table(doc: str | None) -> dict:
    return tomllib.loads(doc if doc is not None else STRATEGY_FILE.read_text()).get("dependence_types", {})


def applies(v: Variant, measure: str, shared: int = 1) -> bool:
    """Whether ``v`` has the configuration at all: one PTX instruction of register operands with
    a register result (a predicate result would need a predicate register per instance), and
    for read_read a register source ``shared`` beside another source (an instruction of one
    source reading one register computes the same in every instance), for write_write a
    register source to vary per instance."""
    if v.dest is None or v.dest.reg_class == "p" or v.ptx.count(";") != 1:
        return False
    if any(o.is_address or o.scratch for o in v.operands):
        return False
    regs = [o for o in v.sources if o.reg_class != "p"]
    if CONFIGS[measure] == READ_READ:  # another register source: else every instance is the same
        return (1 <= shared <= len(v.sources) and v.sources[shared - 1].reg_class != "p"
                and len(regs) >= 2)
    return bool(regs)


def config_specs(v: Variant, doc: str | None = None) -> list[ConfigSpec]:
    """The read-read / write-write measures the table (strategies.toml ``[dependence_types]``,
    first matching entry per measure) gives ``v`` where they apply (:func:`applies`); [] when
    none."""
    t = _table(doc)
    out: dict[str, ConfigSpec] = {}
    for entry in t.get("set", []):
        if not any(fnmatch.fnmatchcase(v.name, p) for p in entry.get("variants", [])):
            continue
        for m in entry.get("measures", list(CONFIGS)):
            if m not in CONFIGS:
                raise ValueError(f"[dependence_types]: unknown measure {m} (known: {', '.join(CONFIGS)})")
            spec = ConfigSpec(m, int(entry.get("shared", 1)), int(t.get("predicates", 4)))
            if m in out:
                continue
            if applies(v, m, spec.shared):
                if m == "latency_read_read":
                    spec = replace(spec, turns=turns_for(v, spec.shared, entry.get("turns")))
                out[m] = spec
            elif "shared" in entry and m == "latency_read_read" and applies(v, m):
                raise ValueError(f"[dependence_types]: {v.name}: source operand {spec.shared} cannot be "
                                 f"the shared register (a register source of 1..{len(v.sources)})")
    return [out[m] for m in CONFIGS if m in out]


def config_lengths(v: Variant, spec: ConfigSpec, units: tuple[int, ...], min_length: int,
                   doc: str | None = None) -> tuple[int, ...]:
    """Instances per region: as many lengths as ``units`` holds, the largest at most max(units)
    and within the register budget (strategies.toml: every instance keeps its own values, and
    under read_read its own destination, live across the region; more would spill). The
    budget is the control's (each instance also its own shared value, or destination), so that
    a configuration and its control time the same lengths."""
    t = _table(doc)
    budget = int(t.get("register_budget", 128))
    if MODES[spec.measure] == READ_READ:  # where ptxas keeps test and control in one bank pattern
        budget = int(t.get("read_read_register_budget", budget))
    srcs = [o for o in v.sources if o.reg_class != "p"]
    dest = WORDS.get(v.dest.reg_class if v.dest else "r", 1)
    if MODES[spec.measure] == READ_READ:
        words = sum(WORDS.get(o.reg_class, 1) for o in srcs) + dest
    else:
        words = (WORDS.get(srcs[0].reg_class, 1) if srcs else 1) + dest
    top = max(min_length, min(max(units), budget // max(words, 1)))
    n = max(len(units), 2)
    out = tuple(sorted({max(min_length, round(top * (k + 1) / n)) for k in range(n)}))
    return out if len(out) > 1 else (out[0], 2 * out[0])  # a slope needs two lengths


def config_measures(v: Variant) -> list[str]:
    """The read-read / write-write measures of ``v``, each followed by its control's."""
    return [m for spec in config_specs(v) for m in (spec.measure, CONTROL_OF[spec.measure])]


def config_kernels(v: Variant, target: Target, units: tuple[int, ...], min_length: int, reps: int,
                   idx: int) -> list[tuple[str, list[Kernel], str | None]]:
    """(measure, kernels, or why none can be generated) of every read-read / write-write family
    of variant number ``idx`` and of its control (the same lengths)."""
    out: list[tuple[str, list[Kernel], str | None]] = []
    for spec in config_specs(v):
        mode = MODES[spec.measure]
        tag = "rr" if mode == READ_READ else "ww"
        lengths = config_lengths(v, spec, units, min_length)
        for measure, control in ((spec.measure, False), (CONTROL_OF[spec.measure], True)):
            try:
                ks = [generate_config(v, get_strategy(STRATEGY), target, mode, length=n, reps=reps,
                                      measure=measure, shared=spec.shared, preds=spec.preds,
                                      distance=n if control else 1, slots=spec.turns,
                                      name=f"v{idx}_{tag}_{'c' if control else 'r'}1_n{n}")
                      for n in lengths]
                out.append((measure, ks, None))
            except GenerationError as e:
                out.append((measure, [], f"{measure}: {e}"))
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


def _independent(s: Sample, own: dict[str, Fraction], pair: str) -> tuple[list[SassInstr], str | None]:
    """The instances of ``own`` in the region of ``s`` and why they are not independent
    instances writing their own registers (None when they are): as many as PTX instances, none
    reading a register written in the region, no two writing the same register (``pair``: what
    such a pair is called in the message)."""
    inst = _instances(s.region, own)
    why = _count(s, inst, "merged or removed instances")
    if why:
        return inst, why
    written: set[str] = set()
    for ins in s.region:
        if ins in inst and any(r in written for _, rs in _src_tokens(ins) for r in rs):
            return inst, "an instance reads a register written in the region (write-read between instances)"
        written.update(ins.dests())
    dests = [tuple(i.dests()) for i in inst]
    if len(set(dests)) != len(dests):
        return inst, f"two instances write the same register ({pair})"
    return inst, None


# --- instances of several SASS instructions: grouped by data flow ---------------------------


def _multi(own: dict[str, Fraction]) -> bool:
    """Whether an instance of ``own`` is several SASS instructions (checked by data flow)."""
    return sum(own.values(), Fraction(0)) > 1


def _flow(ins: SassInstr) -> tuple[list[str], list[str]]:
    """(registers read, registers written) of ``ins`` for data flow: every register of every
    source operand (``SassInstr.source_slots``: IMAD.WIDE's factors 32-bit) and the guard
    predicate."""
    srcs = [r for _, rs in ins.source_slots() for r in rs]
    srcs.extend(r for r in REG_RE.findall(ins.predicate) if r not in ("PT", "UPT"))
    return srcs, ins.dests()


@dataclass
class _Group:
    """One instance as data flow shows it: its instructions (region order) and the registers
    it reads that no instruction of the region wrote before (its inputs; a copy of an input
    made in the region counts as that input)."""

    instrs: list[SassInstr]
    inputs: set[str]
    slots: list[tuple[SassInstr, int, str]]  # (instruction, source slot, input register) per input read


def _groups(region: list[SassInstr], own: dict[str, Fraction]) -> tuple[list[_Group], dict[str, list[SassInstr]]]:
    """The region's instructions grouped into connected components of data flow (B reads a
    register A wrote last before B: one group; RZ / PT / URZ are no registers); a move
    copying an input (a register not written in the region, or a constant) is no instruction of
    a group, unless it is a form of the variant's own SASS (``own``): its copy reads as the
    input. Also: the writes of each register that reach the
    region's end (the last, and any predicated ones before it back to an unpredicated one)."""
    n = len(region)
    edges: list[tuple[int, int]] = []
    writers: dict[str, list[int]] = {}
    alias: dict[str, str] = {}  # a register that holds a copy of an input -> that input
    copies: set[int] = set()
    reads: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    for k, ins in enumerate(region):
        srcs, dsts = _flow(ins)
        toks = ins.operands[ins.n_dests():]
        slot_of: dict[str, int] = {}
        for j, rs in ins.source_slots():
            for r in rs:
                slot_of.setdefault(r, j)
        for r in srcs:
            if writers.get(r):  # the latest write that reaches (a predicated one may not replace the
                edges.append((writers[r][-1], k))  # one before: an instance then reads its own)
            else:
                reads[k].append((slot_of.get(r, -1), alias.get(r, r)))
        if (is_move(ins.full, ins) and equivalent().get(ins.full, ins.full) not in own
                and not ins.predicate and len(dsts) == 1
                and not any(writers.get(r) for r in srcs) and len(srcs) <= 1):
            copies.add(k)  # a copy of an input (or a constant): its register reads as the input
            src = alias.get(srcs[0], srcs[0]) if srcs else f"#{', '.join(toks)}"
            writers.pop(dsts[0], None)
            alias[dsts[0]] = src
            continue
        for d in dsts:
            alias.pop(d, None)
            if ins.predicate:
                writers.setdefault(d, []).append(k)
            else:
                writers[d] = [k]
    root = components(n, edges)
    by_root: dict[int, _Group] = {}
    for k, ins in enumerate(region):
        if k in copies:
            continue
        g = by_root.setdefault(int(root[k]), _Group([], set(), []))
        g.instrs.append(ins)
        for j, r in reads[k]:
            g.inputs.add(r)
            g.slots.append((ins, j, r))
    live = {r: [region[w] for w in ws] for r, ws in writers.items() if ws}
    return list(by_root.values()), live


def _mix(ops: Counter[str]) -> str:
    return ", ".join(f"{c:g}*{op}" if c != 1 else op for op, c in sorted(ops.items())) or "nothing"


def _own_of(g: _Group, own: dict[str, Fraction]) -> tuple[Counter[str], list[str]]:
    """The group's instructions of the variant's own SASS (own_sass.equivalent forms as one;
    a form of ``own`` counts even where it looks like a move, as IMAD.X R, RZ, RZ, RZ, P does)
    and those neither own nor a move (what the variant does not compile to)."""
    same = equivalent()
    mine: Counter[str] = Counter()
    foreign = []
    for ins in g.instrs:
        op = same.get(ins.full, ins.full)
        if op in own:
            mine[op] += 1
        elif not is_move(ins.full, ins):
            foreign.append(ins.full)
    return mine, foreign


def _whole(mine: Counter[str], own: dict[str, Fraction]) -> bool:
    """Whether one instance's own SASS ``mine`` is the variant's ``own``: each form as many times
    as ``own`` has it per instance (rounded either way: own is an average over a chain, where
    ptxas may alternate forms), and as many in all."""
    total = sum(own.values(), Fraction(0))
    if not math.floor(total) <= sum(mine.values()) <= math.ceil(total):
        return False
    return all(math.floor(c) <= mine.get(op, 0) <= math.ceil(c) for op, c in own.items())


def _multi_instances(s: Sample, own: dict[str, Fraction], mode: str,
                     control: bool) -> tuple[list[_Group], str | None]:
    """The instances of a multi-SASS variant in the region of ``s`` (data-flow groups holding its
    own SASS) and why they are not
    ``s.units`` independent whole instances (None when they are)."""
    groups, live = _groups(s.region, own)
    ww = mode == WRITE_WRITE
    foreign: Counter[str] = Counter()
    for g in groups:
        foreign.update(_own_of(g, own)[1])
    if foreign:
        per = Counter({op: c / s.units for op, c in foreign.items()})
        sel = ww and any(op.startswith("SEL") for op in foreign)
        return groups, (f"the region holds {_mix(per)} per instance beside the variant's SASS "
                              f"({', '.join(own)})" + (": ptxas committed the guarded write through a select "
                                                        "(SEL reads the destination: no write-write pair)" if sel else
                                                        ": ptxas compiled the instance differently here"))
    inst = [g for g in groups if _own_of(g, own)[0]]
    if len(inst) < s.units:
        what = ("each instance reads the register an earlier one wrote (a guarded write committed through an "
                "instruction that reads the destination: no write-write pair)" if ww and not control else
                "an instance reads a register another instance's SASS wrote (write-read between instances, "
                "or a computation shared by instances: merged)")
        return inst, f"{len(inst)} independent groups of SASS in the region of {s.units} PTX instances: {what}"
    if len(inst) > s.units:
        return inst, (f"{len(inst)} unconnected groups of SASS in the region of {s.units} PTX instances: an "
                            f"instance's SASS is not connected by data flow inside the region (its halves "
                            f"do not feed each other, as of a 64-bit logical op, or the instruction "
                            f"joining them was moved out of the timed region): no instance to check")
    for g in inst:
        mine = _own_of(g, own)[0]
        if not _whole(mine, own):
            return inst, (f"an instance is {_mix(mine)} where the variant is "
                                f"{', '.join(f'{float(c):g}*{op}' for op, c in own.items())}: ptxas changed "
                                f"the instance or moved part of it out of the timed region")
    if not (ww and not control):  # every instance keeps a result of its own at the region's end
        for g in inst:
            if not any(r.startswith("R") and any(w in g.instrs for w in ws) for r, ws in live.items()):
                return inst, ("an instance's results are all overwritten in the region (a write-write "
                                    "between instances)")
    return inst, None


def _readers(inst: list[_Group]) -> dict[str, int]:
    """Input register -> how many instances read it (32-bit registers only)."""
    out: Counter[str] = Counter()
    for g in inst:
        out.update(r for r in g.inputs if r.startswith("R"))
    return dict(out)


def _one_operand(common: set[str], inst: list[_Group]) -> bool:
    """Whether the registers every instance reads are one operand's: at most two (a 64-bit
    value's words), and no instruction reads them in two source slots (two operands shared)."""
    if len(common) > 2:
        return False
    slots: dict[int, set[int]] = {}
    for g in inst:
        for ins, j, r in g.slots:
            if r in common:
                slots.setdefault(id(ins), set()).add(j)
    return all(len(js) == 1 for js in slots.values())


def _check_read_read_multi(samples: list[Sample], own: dict[str, Fraction]) -> tuple[str | None, dict]:
    slots: Counter[str] = Counter()
    reuse = total = 0
    for s in samples:
        inst, why = _multi_instances(s, own, READ_READ, control=False)
        if why:
            return why, {}
        readers = _readers(inst)
        common = {r for r, c in readers.items() if c == len(inst)}
        some = sorted(r for r, c in readers.items() if 1 < c < len(inst))
        if not common:
            return ("no register is read by every instance: the shared operand was not kept in one register"
                    + (f" ({some[0]} is read by {readers[some[0]]} of {len(inst)})" if some else "")), {}
        if some:
            return (f"{some[0]} is read by {readers[some[0]]} of {len(inst)} instances (per-instance values "
                    f"were merged)"), {}
        if not _one_operand(common, inst):
            return (f"the registers every instance reads ({', '.join(sorted(common))}) are not one "
                    f"operand's (other per-instance values were merged)"), {}
        for g in inst:
            for ins, j, r in g.slots:
                if r in common:
                    slots[f"{ins.full}:{j}"] += 1
                    total += 1
                    reuse += ".reuse" in ins.operands[ins.n_dests() + j]
    by_op: dict[str, list[int]] = {}
    for key in sorted(slots):
        op, j = key.rsplit(":", 1)
        by_op.setdefault(op, []).append(int(j))
    return None, {"shared_slots": by_op, "reuse_fraction": round(reuse / total, 3) if total else 0.0}


def _is_own(ins: SassInstr, own: dict[str, Fraction]) -> bool:
    return equivalent().get(ins.full, ins.full) in own


def _results(g: _Group, own: dict[str, Fraction]) -> list[SassInstr]:
    """The instructions of the variant's own SASS in ``g`` that write its result: a register
    no later such instruction of ``g`` reads (a move copying it after is no result)."""
    mine = [i for i in g.instrs if _is_own(i, own)]
    return [i for k, i in enumerate(mine)
            if any(r.startswith("R") and not any(r in _flow(j)[0] for j in mine[k + 1:]) for r in i.dests())]


def _check_write_write_multi(samples: list[Sample], own: dict[str, Fraction]) -> tuple[str | None, dict]:
    preds: set[str] = set()
    for s in samples:
        inst, why = _multi_instances(s, own, WRITE_WRITE, control=False)
        if why:
            return why, {}
        res = [_results(g, own) for g in inst]
        dests = {frozenset(r for i in rs for r in i.dests() if r.startswith("R")) for rs in res}
        if len(dests) != 1 or not next(iter(dests)):
            return f"the instances' results are in {len(dests)} different sets of registers, not one", {}
        dest = set(next(iter(dests)))
        writes = [i for rs in res for i in rs if set(i.dests()) & dest]
        if any(not i.predicate for i in writes):
            return "an instance lost its predicate (ptxas turned the guarded write into a select)", {}
        pos = [s.region.index(i) for i in writes]
        if any(dest & set(_flow(i)[0]) for i in s.region[min(pos):max(pos) + 1]):
            return f"{', '.join(sorted(dest))} is read between the writes (no write-write pair)", {}
        preds.update(i.predicate for i in writes)
    return None, {"predicates": sorted(preds)}


def _check_control_multi(samples: list[Sample], own: dict[str, Fraction], mode: str) -> tuple[str | None, dict]:
    reuse = total = 0
    for s in samples:
        inst, why = _multi_instances(s, own, mode, control=True)
        if why:
            return why, {}
        if mode == READ_READ and len(inst) > 1:
            readers = _readers(inst)
            if any(c == len(inst) for c in readers.values()):
                return "a register is read by every instance (a read-read pair in the control)", {}
            some = sorted(r for r, c in readers.items() if c > 1)
            if some:
                return f"{some[0]} is read by {readers[some[0]]} instances (a read-read pair in the control)", {}
        if mode == WRITE_WRITE:
            if any(not i.predicate for g in inst for i in _results(g, own)):
                return "an instance lost its predicate (ptxas turned the guarded write into a select)", {}
        for g in inst:
            for ins in g.instrs:
                if _is_own(ins, own):
                    srcs = ins.operands[ins.n_dests():]
                    total += len(srcs)
                    reuse += sum(".reuse" in t for t in srcs)
    return None, {"reuse_fraction": round(reuse / total, 3) if total else 0.0}


def check_read_read(samples: list[Sample], own: dict[str, Fraction]) -> tuple[str | None, dict]:
    """Why a read-read family does not show its pattern (None when it does), and what it shows:
    in every kernel as many instances of the variant's one SASS instruction as PTX instances (none
    merged), each writing a register of its own that no instance reads (no write-read, no
    write-write between instances), and all reading one register in one source slot (the shared
    one; no other register read by all: the per-instance values were not merged). Info: the
    shared slot per opcode and the share of instances whose shared operand carries ``.reuse``.

    An instance of several SASS instructions (:func:`_multi_instances`): as many data-flow groups
    as PTX instances, each the variant's own SASS, none reading what another wrote, each leaving
    a result of its own; every input register read by one instance or by all, those read by all
    one operand (a register or a 64-bit value's two). Info: the slots, per opcode, that read the
    shared registers, and the share of those reads with ``.reuse``."""
    if _multi(own):
        return _check_read_read_multi(samples, own)
    why = _one_instruction(own)
    if why:
        return why, {}
    slots: Counter[str] = Counter()
    reuse = total = 0
    for s in samples:
        inst, why = _independent(s, own, "write-write between instances")
        if why:
            return why, {}
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
    Info: the predicates the instances run under.

    An instance of several SASS instructions: as many data-flow groups as PTX instances, each the
    variant's own SASS (a select added to commit a guarded write is refused: it reads the
    destination), all writing the same registers (those the region leaves written), every
    write of them predicated and none read between the first and the last."""
    if _multi(own):
        return _check_write_write_multi(samples, own)
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


def check_control(samples: list[Sample], own: dict[str, Fraction], mode: str) -> tuple[str | None, dict]:
    """Why a control family (no register shared) does not show its pattern (None when it does):
    in every kernel as many instances of the variant's one SASS instruction as PTX instances, no
    instance reading a register written in the region, every instance writing its own register;
    under read_read no register read by every instance (the shared slot really varies), under
    write_write every instance predicated (its other sources are one register each, as in the
    configuration). Info: the share of instance operands with ``.reuse``. An instance of several
    SASS instructions: as for the configuration (data-flow groups), under read_read no input
    register read by more than one instance, under write_write every write of a register the
    region leaves written predicated."""
    if _multi(own):
        return _check_control_multi(samples, own, mode)
    why = _one_instruction(own)
    if why:
        return why, {}
    reuse = total = 0
    for s in samples:
        inst, why = _independent(s, own, "a write-write pair in the control")
        if why:
            return why, {}
        if mode == READ_READ and len(inst) > 1 and set.intersection(
                *[{r for _, rs in _src_tokens(i) for r in rs if r.startswith("R")} for i in inst]):
            return "a register is read by every instance (a read-read pair in the control)", {}
        if mode == WRITE_WRITE and any(not i.predicate for i in inst):
            return "an instance lost its predicate (ptxas turned the guarded write into a select)", {}
        for ins in inst:
            srcs = ins.operands[ins.n_dests():]
            total += len(srcs)
            reuse += sum(".reuse" in t for t in srcs)
    return None, {"reuse_fraction": round(reuse / total, 3) if total else 0.0}


def check_config(measure: str, samples: list[Sample], own: dict[str, Fraction],
                 per_unit: dict[str, Fraction]) -> tuple[str | None, dict]:
    """The check of a read-read / write-write family; ``per_unit``: the family's real SASS per
    instance (check_family, moves out), which must be the variant's own: as many instructions,
    of its forms (the mix of two forms, as HADD2 / HFMA2.MMA, may differ from its chain's). An
    instance of several SASS instructions is compared per instance instead (the checks' data-flow
    groups: a move-like form of the variant, as IMAD.X R, RZ, RZ, RZ, P, counts there)."""
    if not _multi(own) and (sum(per_unit.values(), Fraction(0)) != sum(own.values(), Fraction(0))
                            or not set(per_unit) <= set(own)):
        shown = ", ".join(f"{float(c):g}*{op}" for op, c in per_unit.items()) or "nothing"
        return (f"the instance's SASS changed ({shown} where the variant is "
                f"{', '.join(f'{float(c):g}*{op}' for op, c in own.items())})"), {}
    s = sorted(samples, key=lambda x: x.units)
    if measure in CONTROLS:
        why, info = check_control(s, own, MODES[measure])
    else:
        why, info = (check_read_read if MODES[measure] == READ_READ else check_write_write)(s, own)
    if why is None and MODES[measure] == READ_READ and not _multi(own):
        pats = {str(x.units): bank_pattern(x.region, own) for x in s}
        info = {**info, "bank_pattern": {k: p["bank_pattern"] for k, p in pats.items()},
                "bank_parities": {k: p["bank_parities"] for k, p in pats.items()}}
    return why, ({**info, "moves_per_instance": moves_per_instance(s, own)} if why is None else info)


# --- register banks and operand reuse: a read-read and its control must show the same ------

def bank_signature(ins: SassInstr) -> str:
    """The register-bank pattern of one instruction's source operands, slot by slot: ``-`` an
    operand that is no general register (immediate, constant, RZ, uniform register), else a
    letter for the parity of its register index (the first register of a wide operand), ``A``
    the parity met first, ``B`` the other, and ``r`` after it when the operand carries ``.reuse``.
    The model: two banks chosen by register index parity (Jia et al., Volta and Turing; measured
    for Hopper by the behaviour suite's ``banks:ffma`` probe on an H200, data/h200: bank =
    register index mod 2, one cycle per extra read of a bank; untested on other architectures):
    two operands collide when their parities are equal, whatever the parity is, so ``100`` and
    ``011`` are one pattern (``ABB``)."""
    out, seen = [], {}
    for tok in ins.operands[ins.n_dests():]:
        regs = [r for r in REG_RE.findall(tok.split("[")[0]) if r.startswith("R") and r != "RZ"]
        if not regs:
            out.append("-")
            continue
        par = int(regs[0][1:]) % 2
        if par not in seen:
            seen[par] = "AB"[len(seen)]
        label = seen[par]
        out.append(label + ("r" if ".reuse" in tok else ""))
    return "".join(out)


def bank_pattern(region: list[SassInstr], own: dict[str, Fraction]) -> dict:
    """How many instances of the variant's instruction in ``region`` show each bank signature
    (:func:`bank_signature`), and their absolute parities (evidence). A read-read family keeps
    one per region length (``check_config``)."""
    inst = _instances(region, own)
    sig = Counter(f"{i.full}:{bank_signature(i)}" for i in inst)
    par = Counter("".join(("r" if ".reuse" in t else "") + (str(int(rs[0][1:]) % 2) if rs and rs[0] != "RZ" else "-")
                          for t in i.operands[i.n_dests():]
                          for rs in [[r for r in REG_RE.findall(t.split("[")[0]) if r.startswith("R")]])
                  for i in inst)
    return {"bank_pattern": dict(sorted(sig.items())), "bank_parities": dict(sorted(par.items()))}


def bank_mismatch(r: Result, c: Result | None) -> str | None:
    """Why a read-read result and its control are not the same instructions as far as register
    banks and operand reuse go (None when their SASS shows the same pattern): both patterns
    must be known and equal, else the comparison would time bank conflicts or reuse, not the
    read-read dependence."""
    if MODES.get(r.measure) != READ_READ or c is None:
        return None
    a, b = (r.params or {}).get("bank_pattern"), (c.params or {}).get("bank_pattern")
    if a is None or b is None:
        return "the register bank / reuse pattern of the configuration or its control is unknown (not checked)"
    if a != b:
        return (f"register banks / operand reuse differ from the control's: {a} against {b} "
                "(signature per source slot: bank of the register's index parity, r = .reuse)")
    return None


def agreeing_lengths(r: Result, c: Result) -> list[int]:
    """The region lengths at which a read-read result and its control show the same register-bank
    / reuse pattern (:func:`bank_pattern`, per length), where both were timed: ptxas places the
    registers of the shortest regions differently more often than of the long ones, and the two
    are the same instructions, bank for bank, at these lengths only."""
    a, b = (r.params or {}).get("bank_pattern") or {}, (c.params or {}).get("bank_pattern") or {}
    rl, cl = set((r.params or {}).get("lengths") or []), set((c.params or {}).get("lengths") or [])
    return sorted(int(k) for k in a if k in b and a[k] == b[k] and int(k) in rl & cl)


def over_lengths(r: Result, keep: list[int]) -> Result:
    """``r`` (a one-warp slope result) fitted again over the lengths ``keep`` only, from its own
    stored cycles (median per length; the slope of each repeat for the interval); ``r``
    unchanged where its samples lack a length."""
    raw = (r.samples or {}).get("cycles_per_repeat") or {}
    if not all(str(n) in raw and raw[str(n)] for n in keep):
        return r
    cols = [list(map(float, raw[str(n)])) for n in keep]
    fit = fit_line(keep, [float(np.median(x)) for x in cols])
    per = slopes_per_repeat(keep, [list(x) for x in zip(*cols, strict=False)])
    return replace(r, value=fit.slope, fit=fit.to_json(), params={**(r.params or {}), "lengths": keep},
                   samples={"cycles_per_repeat": {str(n): raw[str(n)] for n in keep}, "slope_per_repeat": per})


def moves_per_instance(samples: list[Sample], own: dict[str, Fraction]) -> float:
    """The register moves (not of the variant's own SASS) a region holds per PTX instance: their
    growth from the shortest region to the longest. A configuration and its control are the same
    instructions only where they hold as many (:func:`one_warp`)."""
    same = equivalent()
    s = sorted(samples, key=lambda x: x.units)

    def n(x: Sample) -> int:
        return sum(1 for i in x.region if is_move(i.full, i) and same.get(i.full, i.full) not in own)

    return round(float(Fraction(n(s[-1]) - n(s[0]), s[-1].units - s[0].units)), 4) if len(s) > 1 else 0.0


def ptxas_gap(b: Built, own: dict[str, Fraction]) -> float | None:
    """ptxas's own model of the configuration: the median stall cycles (control codes,
    kernel/control.py) from one instance of the variant's instruction to the next in the region
    of ``b``; None where the control codes cannot be read, a scoreboard (variable latency)
    orders the instances instead, or an instance is several SASS instructions (no one gap)."""
    if _multi(own):
        return None
    try:
        pairs = attach(b.region, controls_of(b.cubin, b.kernel.name))
    except (KeyError, ValueError):
        return None
    mine = set(_instances(b.region, own))
    idx = [k for k, (ins, _) in enumerate(pairs) if ins in mine]
    if len(idx) < 2 or any(pairs[k][1].write_barrier is not None for k in idx):
        return None
    gaps = sorted(sum(c.stall for _, c in pairs[i:j]) for i, j in zip(idx, idx[1:], strict=False))
    return float(gaps[len(gaps) // 2])


def statistic(measure: str) -> str:
    if measure in CONTROLS:
        what = ("reads its own registers" if MODES[measure] == READ_READ else
                "writes its own register (each under a run-time predicate, all true)")
        return (f"slope of median cycles vs instances, one warp, each of which {what}: the "
                f"configuration's control (no register shared, no dependence)")
    if MODES[measure] == READ_READ:
        return ("slope of median cycles vs instances that all read one register (same source slot) and "
                "write their own, no dependence between them, one warp: the interval at which a warp "
                "re-reads a register (the read-read latency is at most this); the control and the "
                "rates over warps are in params")
    return ("slope of median cycles vs instances that all write one register (each under a run-time "
            "predicate, all true), none reading it, one warp: the interval at which a warp re-writes "
            "a register (the write-write latency is at most this); the control and the rates over "
            "warps are in params")


# --- a configuration against its control ---------------------------------------------------

MOVES_APART = 0.25  # moves per instance by which a configuration and its control are other instructions
BAD_FLAGS = ("noisy", "poor-fit", "not timed", "error", "sass:", "below-issue-limit")


def _clean(r: Result | None) -> bool:
    return r is not None and r.value is not None and not any(f.startswith(BAD_FLAGS) for f in r.flags)


def one_warp(r: Result, c: Result | None) -> dict:
    """The configuration's one-warp slope against its control's: the excess (cycles per
    instance), its uncertainty (each slope's 95% half-width over repeats, at least the clock's
    resolution, in quadrature: records.uncertainty and records.same_within, the suite's one rule)
    and what it says; verdict None where either is not clean or has no interval, or where the
    two regions hold different numbers of register moves per instance (other instructions)."""
    if not (_clean(r) and _clean(c)):
        return {"verdict": None, "why": "the configuration or its control has no clean value"}
    assert r.value is not None and c is not None and c.value is not None
    mr, mc = (r.params or {}).get("moves_per_instance"), (c.params or {}).get("moves_per_instance")
    if mr is not None and mc is not None and abs(mr - mc) >= MOVES_APART:
        return {"verdict": None, "why": f"the configuration's region holds {mr:g} register moves per instance, "
                                        f"its control's {mc:g}: not the same instructions"}
    ua, uc = uncertainty(asdict(r)), uncertainty(asdict(c))
    same = same_within(r.value, ua, c.value, uc)
    if same is None:
        return {"verdict": None, "why": "the configuration or its control has no repeats to give an interval"}
    excess = r.value - c.value
    return {"verdict": "same" if same else ("slower" if excess > 0 else "faster"),
            "excess_cycles": round(excess, 4), "uncertainty_cycles": round(math.hypot(ua, uc), 4),  # type: ignore[arg-type]
            "control_cycles": round(c.value, 4),
            "control_ptxas_stall": (c.params or {}).get("ptxas_stall_between_instances")}


def over_warps(cfg: dict[int, tuple[float, float, int]], ctrl: dict[int, tuple[float, float, int]],
               units: tuple[int, int] = (0, 0)) -> dict:
    """The configuration's rate against its control's at each warp count both were timed at
    (W -> (rate, 95% half-width, repeats), block_rates.warp_rates): where the two differ by more than
    their intervals (each at least the clock's resolution, one cycle of the span of W warps x
    ``units`` instances per thread; in quadrature), and by how much. The two kernels run in
    separate launches, whose spread the repeats of one launch do not hold: a difference counts
    only where it holds, with one sign, at two or more neighbouring warp counts (``runs``); a
    lone one is listed (``differ``) but decides nothing."""

    def unc(r: tuple[float, float, int], W: int, n: int) -> float:
        return max(r[1], r[0] * r[0] / (W * n)) if n > 0 and r[0] > 0 else r[1]

    ws = sorted(set(cfg) & set(ctrl))
    rows: dict = {"warps": ws, "rate": [round(cfg[W][0], 4) for W in ws],
                  "rate_halfwidth": [round(cfg[W][1], 4) for W in ws],
                  "control_rate": [round(ctrl[W][0], 4) for W in ws],
                  "control_halfwidth": [round(ctrl[W][1], 4) for W in ws]}
    differ = []
    for W in ws:
        a, b = cfg[W][0], ctrl[W][0]
        if b > 0 and abs(a - b) > math.hypot(unc(cfg[W], W, units[0]), unc(ctrl[W], W, units[1])):
            differ.append([W, round((a - b) / b, 4)])
    rows["differ"] = differ  # [W, (rate - control) / control] where outside the intervals
    runs: list[list[int]] = []  # neighbouring warp counts (in the order timed) differing with one sign
    pos = {W: k for k, W in enumerate(ws)}
    for k, (W, d) in enumerate(differ):
        prev = differ[k - 1] if k else None
        if prev is not None and pos[W] == pos[prev[0]] + 1 and (d > 0) == (prev[1] > 0):
            runs[-1].append(W)
        else:
            runs.append([W])
    held = [r for r in runs if len(r) >= 2]
    signs = {d > 0 for W, d in differ if any(W in r for r in held)}
    rows["runs"] = held
    rows["verdict"] = None if not ws else ("same" if not held else
                                           "mixed" if len(signs) > 1 else
                                           "faster" if signs == {True} else "slower")
    return rows


def against_control(r: Result, c: Result | None, cfg: dict | None = None, ctrl: dict | None = None,
                    notes: list[str] | None = None, units: tuple[int, int] = (0, 0)) -> Result:
    """``r`` (a read-read / write-write result) with its control's comparison in its params:
    ``one_warp`` (the slopes) and ``over_warps`` (the rates at each warp count); ``verdict``:
    whether sharing the register costs anything the hardware shows (``same``: no cost beyond
    what the same instructions with no register shared cost, at one warp and at every warp
    count; None where undetermined)."""
    if r.value is None:
        return r
    bank = bank_mismatch(r, c)
    keep = agreeing_lengths(r, c) if bank and c is not None else []
    rk, ck = (over_lengths(r, keep), over_lengths(c, keep)) if len(keep) >= 2 and c is not None else (r, c)
    longest_agrees = False
    if rk is not r and ck is not c:  # compared where they are the same instructions, bank for bank
        assert c is not None
        longest = max((r.params or {}).get("lengths") or [0])
        longest_agrees = longest in keep and longest == max((c.params or {}).get("lengths") or [0])
        one = {**one_warp(rk, ck), "lengths": keep,
               "why_lengths": f"the lengths whose register-bank / reuse pattern agrees with the control's ({bank})"}
    else:
        if bank:
            r = replace(r, flags=[*r.flags, f"sass: {bank}"])
        one = one_warp(r, c)
    params = {**r.params, "one_warp": one}
    if bank and not longest_agrees:  # the rated kernels (the longest) differ in more than the shared register
        params["over_warps"] = {"verdict": None, "why": "the register-bank / reuse patterns differ from the control's"}
    elif cfg is not None and ctrl is not None:
        params["over_warps"] = over_warps(cfg, ctrl, units)
    if notes:
        params["notes"] = notes
    verdicts = {one["verdict"], params.get("over_warps", {}).get("verdict")}
    differ = verdicts - {"same"}
    params["verdict"] = (None if None in verdicts else "same" if not differ else
                         next(iter(differ)) if len(differ) == 1 else "mixed")
    return replace(r, params=params)
