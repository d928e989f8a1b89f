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
import math
import tomllib
from collections import Counter
from dataclasses import asdict, dataclass, replace
from fractions import Fraction

from gpudissect.catalog.model import Variant
from gpudissect.kernel.build import Built
from gpudissect.kernel.control import attach, kernel_controls
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.sass import SassInstr
from gpudissect.store.db import Result
from gpudissect.suites.instructions import values as value_latency
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
    budget = int(_table(doc).get("register_budget", 128))
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
                                      distance=n if control else 1,
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


def check_control(samples: list[Sample], own: dict[str, Fraction], mode: str) -> tuple[str | None, dict]:
    """Why a control family (no register shared) does not show its pattern (None when it does):
    in every kernel as many instances of the variant's one SASS instruction as PTX instances, no
    instance reading a register written in the region, every instance writing its own register;
    under read_read no register read by every instance (the shared slot really varies), under
    write_write every instance predicated (its other sources are one register each, as in the
    configuration). Info: the share of instance operands with ``.reuse``."""
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
    of its forms (the mix of two forms, as HADD2 / HFMA2.MMA, may differ from its chain's)."""
    if sum(per_unit.values(), Fraction(0)) != sum(own.values(), Fraction(0)) or not set(per_unit) <= set(own):
        shown = ", ".join(f"{float(c):g}*{op}" for op, c in per_unit.items()) or "nothing"
        return (f"the instance's SASS changed ({shown} where the variant is "
                f"{', '.join(f'{float(c):g}*{op}' for op, c in own.items())})"), {}
    s = sorted(samples, key=lambda x: x.units)
    if measure in CONTROLS:
        return check_control(s, own, MODES[measure])
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

BAD_FLAGS = ("noisy", "poor-fit", "not timed", "error", "sass:", "below-issue-limit")


def _clean(r: Result | None) -> bool:
    return r is not None and r.value is not None and not any(f.startswith(BAD_FLAGS) for f in r.flags)


def one_warp(r: Result, c: Result | None) -> dict:
    """The configuration's one-warp slope against its control's: the excess (cycles per
    instance), its uncertainty (each slope's 95% half-width over repeats, at least the clock's
    resolution, in quadrature: values.uncertainty and values.same_within, the suite's one rule)
    and what it says; verdict None where either is not clean or has no interval."""
    if not (_clean(r) and _clean(c)):
        return {"verdict": None, "why": "the configuration or its control has no clean value"}
    assert r.value is not None and c is not None and c.value is not None
    ua, uc = value_latency.uncertainty(asdict(r)), value_latency.uncertainty(asdict(c))
    same = value_latency.same_within(r.value, ua, c.value, uc)
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
    (W -> (rate, 95% half-width, repeats), grid.warp_rates): where the two differ by more than
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
    one = one_warp(r, c)
    params = {**r.params, "one_warp": one}
    if cfg is not None and ctrl is not None:
        params["over_warps"] = over_warps(cfg, ctrl, units)
    if notes:
        params["notes"] = notes
    verdicts = {one["verdict"], params.get("over_warps", {}).get("verdict")}
    differ = verdicts - {"same"}
    params["verdict"] = (None if None in verdicts else "same" if not differ else
                         next(iter(differ)) if len(differ) == 1 else "mixed")
    return replace(r, params=params)
