"""Innermost loops of a kernel: backward branches that close a loop, with no other inside.

A backward branch closes a loop only when it is reachable from its own target without leaving
the range [target, branch] (fall-through, and the direct branches that stay in the range; an
unpredicated EXIT, RET or BRA out of the range ends a path). That rule is what real SASS needs:
the warp-collective fallback of a shuffle or cooperative-groups reduction (``BRA.DIV`` to
``WARPSYNC.COLLECTIVE ... ENDCOLLECTIVE`` blocks placed after the kernel's EXIT) jumps back to a
join point with a plain ``BRA``; the range between that join point and the jump holds the
epilogue and an unpredicated EXIT, so the jump is not reachable from its target and is no loop.
A real loop with an early ``@P0 EXIT`` (a return inside the loop) still is one.

The body of a loop is the path that is predicted:

* a CALL inside the loop (ptxas's slow path of an fp32 division or square root, a subroutine
  after the kernel's EXIT) guarded by a predicated forward branch that jumps over it: the
  instructions that branch skips are the rare path. They are left out of ``body`` and listed in
  ``left_out`` (``common_path`` is then true). A CALL, RET or JMP no such branch skips, and any
  indirect branch (BRX, JMX), still refuses the loop;
* any other forward branch inside the loop makes the instructions it skips optional: they stay in
  ``body`` and their offsets are in ``skippable`` (a model can weight them).

Two facts for a caller that counts source iterations:

* ``counter_step``: the constant the loop's counter moves by per trip. The counter is a register
  the compare (ISETP) that sets the backward branch's predicate reads and that the body moves by
  ``IADD3 Rc, Rc, <imm>`` / ``VIADD Rc, Rc, <imm>`` (also the uniform UIADD3). None when the step
  is a register, or no such counter is found. Dividing it by the source loop's stride gives the
  source iterations per trip (an unrolled loop's factor);
* ``role``: "remainder" for a loop whose body is a shorter copy of another innermost loop of the
  same kernel (the tail ptxas emits after an unrolled loop): none of its opcodes missing from the
  other's (control and MOV register copies aside), fewer instructions, and both counters with a
  constant step, the other's k >= 2 times this one's (same sign); "main" for a loop that has such
  a copy (of an unroll-by-16 loop followed by unroll-by-4 and by-1 tails, both tails are
  "remainder"); None otherwise, also where a step is unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gpudissect.kernel.sass import REG_RE, SassInstr, branch_target
from gpudissect.predict import PredictError

INDIRECT = frozenset({"BRX", "JMX"})  # always refused: where they go is data
# refused unless a predicated forward branch in the loop skips them (the rare path)
OFF_PATH = frozenset({"CALL", "RET", "JMP"})
_ENDS = frozenset({"EXIT", "RET", "BRA", "JMP"})  # an unconditional one ends a path
_PRED = re.compile(r"!?U?P(\d+|T)")  # a predicate operand (carry in/out)
_INCREMENT = frozenset({"IADD3", "VIADD", "UIADD3", "IADD"})
# opcodes that are control, not work: left out of the comparison of two loops' bodies
_CONTROL = frozenset({"BRA", "BSSY", "BSYNC", "NOP", "YIELD", "WARPSYNC", "DEPBAR"})


@dataclass(frozen=True)
class Loop:
    kernel: str
    index: int  # among the kernel's innermost loops, in program order (from 0)
    start: int  # offset of the branch target (first instruction of the body)
    end: int  # offset of the backward branch (last instruction of the body)
    body: tuple[SassInstr, ...]  # the common path (without ``left_out``)
    refused: str | None = None  # why it cannot be predicted (None: it can)
    left_out: tuple[SassInstr, ...] = ()  # the rare path: a guarded slow-path CALL block
    skippable: tuple[int, ...] = ()  # offsets of body instructions a forward branch may skip
    counter_step: int | None = None  # the loop counter's constant step per trip
    role: str | None = None  # "main", "remainder" or None

    @property
    def name(self) -> str:
        return f"{self.kernel} loop {self.index} [{self.start:#06x}..{self.end:#06x}]"

    @property
    def common_path(self) -> bool:
        """The body is the loop's common path: a rare path (``left_out``) is not in it."""
        return bool(self.left_out)


def _unconditional(ins: SassInstr) -> bool:
    """Always taken / always ends: no guard, no ``BRA.DIV`` or ``BRA !P2, target`` condition."""
    return ins.predicate in ("", "@PT") and "DIV" not in ins.modifiers and len(ins.operands) <= 1


def _reaches(body: list[SassInstr], labels: dict[str, int]) -> bool:
    """The last instruction of ``body`` (a backward branch) is reachable from the first
    without leaving the body (module docstring)."""
    where = {ins.offset: k for k, ins in enumerate(body)}
    seen: set[int] = set()
    todo = [0]
    while todo:
        k = todo.pop()
        if k in seen or k >= len(body):
            continue
        seen.add(k)
        if k == len(body) - 1:
            return True
        ins = body[k]
        if ins.opcode in INDIRECT:
            return True  # cannot tell: keep it a loop (and refuse it)
        t = branch_target(ins, labels)
        if t is not None and t in where:
            todo.append(where[t])
        if not (ins.opcode in _ENDS and _unconditional(ins)):
            todo.append(k + 1)
    return False


def _backward(instrs: list[SassInstr], labels: dict[str, int]) -> list[tuple[int, int]]:
    """(target, branch) of the backward branches that close a loop."""
    out = []
    for ins in instrs:
        t = branch_target(ins, labels)
        if t is not None and t < ins.offset:
            body = [i for i in instrs if t <= i.offset <= ins.offset]
            if _reaches(body, labels):
                out.append((t, ins.offset))
    return out


def _skips(body: tuple[SassInstr, ...], labels: dict[str, int]) -> list[tuple[SassInstr, int]]:
    """(branch, its target) of the forward branches inside the body that land inside it."""
    out = []
    for ins in body[:-1]:
        t = branch_target(ins, labels)
        if t is not None and ins.offset < t <= body[-1].offset:
            out.append((ins, t))
    return out


def _rare_path(body: tuple[SassInstr, ...], skips: list[tuple[SassInstr, int]]) -> set[int] | None:
    """Offsets of the rare path: for each CALL/RET/JMP, what the narrowest predicated forward
    branch over it skips. None when one of them is skipped by no such branch."""
    rare: set[int] = set()
    for ins in body:
        if ins.opcode not in OFF_PATH:
            continue
        over = [(t - b.offset, b.offset, t) for b, t in skips
                if b.predicate and b.offset < ins.offset < t]
        if not over:
            return None
        _, lo, hi = min(over)
        rare |= {i.offset for i in body if lo < i.offset < hi}
    return rare


def _immediate(tok: str) -> int | None:
    """A 32-bit immediate operand as a signed integer (``0x20``, ``-0x4``, ``0xfffffffc``)."""
    try:
        v = int(tok.strip(), 0)
    except ValueError:
        return None
    return v - (1 << 32) if v >= 1 << 31 else v


def added_constant(ins: SassInstr, reg: str) -> int | None:
    """The constant an add (``IADD3 Rd, P0, reg, 0x10, RZ``, ``VIADD Rd, reg, 0x4``) adds to
    ``reg``, its destination ``reg`` or another register; None for an add of a register or no
    add of ``reg``."""
    if ins.opcode not in _INCREMENT or reg not in ins.sources():
        return None
    others = [t.strip() for t in ins.operands[ins.n_dests():]]
    others = [t for t in others if t not in (reg, "RZ", "URZ") and not _PRED.fullmatch(t)]
    return _immediate(others[0]) if len(others) == 1 else None


def step_of(body: tuple[SassInstr, ...], reg: str) -> tuple[bool, int | None]:
    """(found, step): whether the body moves ``reg`` by an add of itself, and the constant
    step (None for a register step)."""
    for ins in body:
        if ins.opcode in _INCREMENT and reg in ins.dests() and reg in ins.sources():
            return True, added_constant(ins, reg)
    return False, None


def _counter_step(body: tuple[SassInstr, ...]) -> int | None:
    """The constant step of the counter that the backward branch's compare reads."""
    preds = REG_RE.findall(body[-1].predicate)
    if not preds:
        return None
    setps = [i for i in body[:-1] if i.opcode in ("ISETP", "UISETP") and preds[0] in i.dests()]
    for setp in reversed(setps):  # the last compare first (a 64-bit compare's .EX half reads no counter step)
        for reg in setp.sources():
            found, step = step_of(body, reg)
            if found:
                return step
    return None


def _opcodes(body: tuple[SassInstr, ...]) -> set[str]:
    return {i.opcode for i in body if i.opcode not in _CONTROL and i.opcode != "MOV"}


def _copy_of(a: Loop, b: Loop) -> bool:
    """``a`` is a shorter copy of ``b``: no opcode ``b`` lacks (control and register copies
    aside), fewer instructions, and counters whose steps say ``b`` does k >= 2 of ``a``'s trips."""
    if a is b or a.counter_step is None or not b.counter_step:
        return False
    k, rest = divmod(b.counter_step, a.counter_step)
    return (rest == 0 and k >= 2 and len(a.body) < len(b.body)
            and bool(_opcodes(a.body)) and _opcodes(a.body) <= _opcodes(b.body))


def _roles(loops: list[Loop]) -> list[str | None]:
    """"remainder" / "main" / None for each loop of one kernel (module docstring)."""
    out: list[str | None] = []
    for a in loops:
        if any(_copy_of(a, b) for b in loops):
            out.append("remainder")
        elif any(_copy_of(b, a) for b in loops):
            out.append("main")
        else:
            out.append(None)
    return out


def _loop(kernel: str, i: int, s: int, e: int, instrs: list[SassInstr], labels: dict[str, int]) -> Loop:
    full = tuple(ins for ins in instrs if s <= ins.offset <= e)
    where = f"{kernel} loop {i} [{s:#06x}..{e:#06x}]"
    indirect = next((ins for ins in full if ins.opcode in INDIRECT), None)
    skips = _skips(full, labels)
    rare = _rare_path(full, skips)
    why = None
    if indirect is not None:
        why = (f"{where} holds {indirect.opcode} at {indirect.offset:#06x}: "
               "cannot predict a loop with indirect branches")
    elif rare is None:
        bad = next(ins for ins in full if ins.opcode in OFF_PATH)
        why = (f"{where} holds {bad.opcode} at {bad.offset:#06x} on its common path "
               "(no predicated branch skips it): cannot predict a loop with calls")
        rare = set()
    body = tuple(ins for ins in full if ins.offset not in rare)
    left = tuple(ins for ins in full if ins.offset in rare)
    skippable = sorted({x.offset for b, t in skips for x in body if b.offset < x.offset < t})
    return Loop(kernel, i, s, e, body, why, left, tuple(skippable), _counter_step(body))


def innermost_loops(kernel: str, instrs: list[SassInstr], labels: dict[str, int]) -> list[Loop]:
    """Loops whose body [target, branch] holds no other loop-closing branch, in program order."""
    back = _backward(instrs, labels)
    inner = [(s, e) for s, e in back if not any(s <= e2 < e for _, e2 in back if e2 != e)]
    loops = [_loop(kernel, i, s, e, instrs, labels) for i, (s, e) in enumerate(sorted(inner))]
    return [replace(lp, role=role) for lp, role in zip(loops, _roles(loops), strict=True)]


def select_loops(kernels: dict[str, list[SassInstr]], labels: dict[str, dict[str, int]],
                 kernel: str | None = None, loop: int | None = None) -> list[Loop]:
    """The loops ``--kernel``/``--loop`` pick (all innermost loops without them)."""
    if kernel is not None and kernel not in kernels:
        raise PredictError(f"no kernel '{kernel}' in the input (kernels: {', '.join(sorted(kernels)) or 'none'})")
    names = [kernel] if kernel is not None else sorted(kernels)
    found = [lp for k in names for lp in innermost_loops(k, kernels[k], labels.get(k, {}))]
    if loop is not None:
        if kernel is None and len(names) > 1:
            raise PredictError(f"--loop needs --kernel: the input has {len(names)} kernels "
                               f"({', '.join(names)})")
        found = [lp for lp in found if lp.index == loop]
        if not found:
            raise PredictError(f"no loop {loop} in {names[0]} (it has "
                               f"{len(innermost_loops(names[0], kernels[names[0]], labels.get(names[0], {})))}"
                               " innermost loops, numbered from 0)")
    if not found:
        raise PredictError("no loop (backward branch) in " + (f"kernel {kernel}" if kernel else "the input"))
    return found
