"""The timed region in SASS: the instructions between the two 64-bit clock reads that every
timing kernel puts around its work (``kernel/timing.py`` writes them), and what kind of work
an opcode is (barrier, memory, branch, clock) for the checks each suite makes on it."""

from __future__ import annotations

import re

from gpudissect.kernel.sass import SassInstr

CLOCK_OPERAND = "SR_CLOCKLO"

# SASS kinds, by opcode pattern, that distort a timing unless the variant allows them
KINDS: dict[str, re.Pattern[str]] = {
    "barrier": re.compile(r"^(BAR|WARPSYNC|MEMBAR|ERRBAR|DEPBAR|CCTL)$"),
    "memory": re.compile(r"^(LD|LDG|LDS|LDL|LDC|ULDC|ST|STG|STS|STL|ATOM|ATOMG|ATOMS|RED|REDG|LDSM|STSM|LDGSTS|SUST|SULD|TEX|TLD)$"),
    "shared": re.compile(r"^(LDS|STS|ATOMS|LDSM|STSM)$"),
    "constant": re.compile(r"^(LDC|ULDC)$"),
    "global": re.compile(r"^(LDG|STG|ATOMG|ATOM|RED|REDG)$"),
    "branch": re.compile(r"^(BRA|BRX|JMP|CALL|RET|BSSY|BSYNC|BREAK|BPT|EXIT|KILL)$"),
    "clock": re.compile(r"^(CS2R|CS2UR|S2R|S2UR)$"),
}
# kinds told by the whole SASS name (opcode and modifiers), before KINDS: ptxas's warp-convergence
# guard (``BRA.DIV``: a branch to a slow path taken only when the warp is diverged) that it puts
# before a warp-collective instruction on the generations without converged-warp hardware
# checks; on a converged warp it falls through
FULL_KINDS: dict[str, re.Pattern[str]] = {
    "convergence": re.compile(r"^BRA\.DIV$"),
}
MOVE_RE = re.compile(r"^(MOV|UMOV|IMAD\.MOV(\.U32)?|MOV\.\w+|NOP|PRMT\.MOV)$")


# a guard predicate that is always false (``@!PT``, ``@!UPT``): the instruction never executes;
# ptxas pads tensor-core sequences with ``@!UPT UIADD3 URZ, URZ, URZ, URZ`` on some generations
NEVER = ("@!PT", "@!UPT")
ZERO_SRC = re.compile(r"^-?\|?(RZ|URZ)\|?$|^-?(0x)?[0-9a-fA-F.]+$")


def is_move(full: str, ins: SassInstr | None = None) -> bool:
    """Register moves, constant materialisation (``HFMA2.MMA R0, -RZ, RZ, 0, 0``,
    ``IMAD.U32 R0, RZ, RZ, UR4``) and padding that never executes (``@!UPT UIADD3 URZ, ...``):
    no real work of the instruction under test."""
    if MOVE_RE.match(full):
        return True
    if ins is not None and ins.predicate in NEVER:  # never executes: padding, as a NOP
        return True
    if ins is not None and ins.opcode in ("HFMA2", "IMAD", "FFMA") and len(ins.operands) >= 3:
        return bool(ZERO_SRC.match(ins.operands[1]) and ZERO_SRC.match(ins.operands[2]))
    return False


def is_clock_read(ins: SassInstr) -> bool:
    """A 64-bit %clock64 read (the region delimiters): ``CS2R``, or ``CS2UR`` into a uniform register
    pair (ptxas's choice for some reads on the newest generations). 32-bit reads (CS2R.32,
    S2R) are not."""
    return (ins.opcode in ("CS2R", "CS2UR") and "32" not in ins.modifiers
            and any(CLOCK_OPERAND in o for o in ins.operands))


class RegionNotFound(ValueError):
    pass


def find_region(instrs: list[SassInstr]) -> list[SassInstr]:
    """The instructions between the first two 64-bit clock reads."""
    idx = [i for i, ins in enumerate(instrs) if is_clock_read(ins)]
    if len(idx) < 2:
        raise RegionNotFound(f"found {len(idx)} 64-bit clock reads, need 2 around the timed region")
    return instrs[idx[0] + 1 : idx[1]]


def kind_of(opcode: str, full: str | None = None) -> set[str]:
    """The kinds of an instruction (``full``: its whole name, for the kinds FULL_KINDS tells by
    their modifiers; those replace the opcode's kinds)."""
    if full is not None:
        own = {k for k, rx in FULL_KINDS.items() if rx.match(full)}
        if own:
            return own
    return {k for k, rx in KINDS.items() if rx.match(opcode)}
