"""Innermost loops of a kernel: backward branches with no other backward branch inside."""

from __future__ import annotations

from dataclasses import dataclass

from gpudissect.kernel.sass import SassInstr, branch_target
from gpudissect.predict import PredictError

# a loop holding one of these cannot be predicted: the work it does is not in the loop body
REFUSED_OPS = frozenset({"CALL", "BRX", "JMX", "JMP", "RET"})


@dataclass(frozen=True)
class Loop:
    kernel: str
    index: int  # among the kernel's innermost loops, in program order (from 0)
    start: int  # offset of the branch target (first instruction of the body)
    end: int  # offset of the backward branch (last instruction of the body)
    body: tuple[SassInstr, ...]
    refused: str | None = None  # why it cannot be predicted (None: it can)

    @property
    def name(self) -> str:
        return f"{self.kernel} loop {self.index} [{self.start:#06x}..{self.end:#06x}]"


def _backward(instrs: list[SassInstr], labels: dict[str, int]) -> list[tuple[int, int]]:
    out = []
    for ins in instrs:
        t = branch_target(ins, labels)
        if t is not None and t < ins.offset:
            out.append((t, ins.offset))
    return out


def innermost_loops(kernel: str, instrs: list[SassInstr], labels: dict[str, int]) -> list[Loop]:
    """Loops whose body [target, branch] holds no other backward branch, in program order."""
    back = _backward(instrs, labels)
    inner = [(s, e) for s, e in back if not any(s <= e2 < e for _, e2 in back if e2 != e)]
    loops = []
    for i, (s, e) in enumerate(sorted(inner)):
        body = tuple(ins for ins in instrs if s <= ins.offset <= e)
        bad = next((ins for ins in body if ins.opcode in REFUSED_OPS), None)
        why = None
        if bad is not None:
            why = (f"{kernel} loop {i} [{s:#06x}..{e:#06x}] holds {bad.opcode} at {bad.offset:#06x}: "
                   "cannot predict a loop with calls or indirect branches")
        loops.append(Loop(kernel, i, s, e, body, why))
    return loops


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
