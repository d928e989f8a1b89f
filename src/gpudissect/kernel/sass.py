"""Parse nvdisasm output into structured SASS records, with a register data-flow view."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LINE_RE = re.compile(
    r"^\s*/\*(?P<off>[0-9a-fA-F]{4,})\*/\s+"
    r"(?:(?P<pred>@!?U?P[0-9T]+)\s+)?"
    r"(?P<op>[A-Z][A-Z0-9_]*)(?P<mods>(?:\.[A-Za-z0-9_]+)*)"
    r"\s*(?P<rest>[^;]*);"
)
FUNC_RE = re.compile(r"^\.text\.(?P<name>[A-Za-z_$][\w$]*):")
REG_RE = re.compile(r"\b(U?R(?:\d+|Z)|U?P(?:\d+|T))\b")
_ADDR_RE = re.compile(r"\[[^\]]*\]")  # a memory address operand part: [R2.64+0x4], desc[UR4]

# opcodes that write no register (their first operand is read)
NO_DEST = {
    "ST", "STG", "STS", "STL", "RED", "REDG", "REDUX_NODEST", "BRA", "BRX", "JMP", "CALL", "RET",
    "EXIT", "BAR", "BSYNC", "BSSY", "WARPSYNC", "NOP", "MEMBAR", "ERRBAR", "CCTL", "YIELD",
    "DEPBAR", "BMOV_NODEST", "STSM", "WARPGROUP", "ARRIVES",
}
# opcodes whose leading destination count the generic rule gets wrong
DEST_COUNT = {"SHFL": 2, "PLOP3": 2, "ISETP": 2, "FSETP": 2, "DSETP": 2, "HSETP2": 2}
# opcodes that write a predicate, then a register, when their first operand is a predicate
# (ATOMG PT, R5, [R2.64], R4; MATCH.ALL PT, R12, R13; ELECT PT, UR4, PT)
LEADING_PRED = {"ATOMG", "ATOM", "MATCH", "ELECT"}
# opcodes whose register operands are 64-bit pairs
PAIR_OPS = {"DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DSET"}


@dataclass(frozen=True)
class SassInstr:
    offset: int
    opcode: str  # base opcode, e.g. "IADD3"
    modifiers: tuple[str, ...]  # e.g. ("X",)
    operands: tuple[str, ...]
    predicate: str = ""  # e.g. "@!P0"
    text: str = ""

    @property
    def full(self) -> str:
        """Opcode with modifiers, e.g. 'IMAD.WIDE.U32'."""
        return ".".join((self.opcode, *self.modifiers))

    @property
    def pair(self) -> bool:
        return (
            self.opcode in PAIR_OPS
            or "64" in self.modifiers
            or "WIDE" in self.modifiers
            or "F64" in self.modifiers
        )

    @property
    def width(self) -> int:
        """Registers per data operand: 4 for a 128-bit access (LDS.128, STG.E.128), 2 for a
        64-bit operation or operand (DADD, LDG.E.64, IMAD.WIDE), else 1."""
        if "128" in self.modifiers:
            return 4
        return 2 if self.pair else 1

    def _regs(self, tok: str) -> list[str]:
        """The registers one operand names. A data operand's registers are :attr:`width` wide;
        inside ``[...]`` is an address, 32-bit unless it says otherwise: ``R2.64`` and the
        descriptor ``desc[UR4]`` are pairs, ``[R7+0x10]`` (shared memory) is R7 alone."""
        out: list[str] = []
        for r in REG_RE.findall(_ADDR_RE.sub(" ", tok)):
            out.extend(_widen(r, self.width))
        for addr in _ADDR_RE.findall(tok):
            for r in REG_RE.findall(addr):
                wide = f"{r}.64" in addr or f"desc[{r}]" in tok
                out.extend(_widen(r, 2 if wide else 1))
        return out

    def n_dests(self) -> int:
        if self.opcode in NO_DEST or not self.operands:
            return 0
        if self.opcode in DEST_COUNT:
            return min(DEST_COUNT[self.opcode], len(self.operands))
        if self.opcode == "VOTE":
            return len(self.operands) - 1
        if (self.opcode in LEADING_PRED and len(self.operands) > 2
                and re.fullmatch(r"!?P(\d+|T)", self.operands[0].strip())):
            return 2
        # the first operand, then predicate/carry outputs right after it (IADD3 R0, P0, ...),
        # always leaving at least one operand as a source
        n = 1
        while n < len(self.operands) - 1 and re.fullmatch(r"!?U?P(\d+|T)", self.operands[n].strip()):
            n += 1
        return n

    def dests(self) -> list[str]:
        out: list[str] = []
        for tok in self.operands[: self.n_dests()]:
            out.extend(self._regs(tok))
        return out

    def source_slots(self) -> list[tuple[int, list[str]]]:
        """(source slot, its registers) of each source operand, slots from 0 after the
        destinations: a 64-bit operand's pair as :meth:`_regs` gives it, but IMAD.WIDE's two
        factors are 32-bit (the ISA: only its addend and its result are pairs)."""
        return [(j, self._regs(t)[:1] if "WIDE" in self.modifiers and j < 2 else self._regs(t))
                for j, t in enumerate(self.operands[self.n_dests():])]

    def sources(self) -> list[str]:
        """Every register read: the source operands' (:meth:`source_slots`, the one definition)
        and the guard predicate's."""
        out = [r for _, rs in self.source_slots() for r in rs]
        if self.predicate:
            out.extend(REG_RE.findall(self.predicate))
        return out


def _widen(reg: str, width: int) -> list[str]:
    """``reg`` and the ``width - 1`` registers after it (R4, 2 -> R4, R5); zero registers
    (RZ, URZ, PT, UPT) are none, predicates are never widened."""
    if reg in ("RZ", "URZ", "PT", "UPT"):
        return []
    m = re.fullmatch(r"(U?R)(\d+)", reg)
    if m is None or width <= 1:
        return [reg]
    return [f"{m.group(1)}{int(m.group(2)) + k}" for k in range(width)]


@dataclass
class SassFunction:
    name: str
    instrs: list[SassInstr] = field(default_factory=list)


def _split_operands(rest: str) -> tuple[str, ...]:
    out, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return tuple(out)


def parse_sass(text: str) -> dict[str, SassFunction]:
    """Parse ``nvdisasm -c`` (or cuobjdump -sass) text into functions of instructions."""
    funcs: dict[str, SassFunction] = {}
    cur: SassFunction | None = None
    for line in text.splitlines():
        fm = FUNC_RE.match(line.strip())
        if fm:
            cur = funcs.setdefault(fm["name"], SassFunction(fm["name"]))
            continue
        m = LINE_RE.match(line)
        if not m:
            continue
        if cur is None:
            cur = funcs.setdefault("", SassFunction(""))
        mods = tuple(x for x in m["mods"].split(".") if x)
        cur.instrs.append(
            SassInstr(
                offset=int(m["off"], 16),
                opcode=m["op"],
                modifiers=mods,
                operands=_split_operands(m["rest"]),
                predicate=m["pred"] or "",
                text=line.strip(),
            )
        )
    return funcs


def dependency_depth(instrs: list[SassInstr]) -> int:
    """Longest chain of register dependences (in instructions) through a straight-line block.

    A CALL counts as one step that reads and writes every register (the callee is not in
    the block), so work after it depends on work before it.
    """
    ready: dict[str, int] = {}
    floor = 0  # depth reached by the last CALL: every register is at least this late
    best = 0
    for ins in instrs:
        if ins.opcode == "CALL":
            best += 1
            floor = best
            ready.clear()
            continue
        d = 1 + max([floor] + [ready.get(r, floor) for r in ins.sources()])
        for r in ins.dests():
            ready[r] = d
        best = max(best, d)
    return best


LABEL_RE = re.compile(r"^\s*(\.?[A-Za-z_$][\w$.]*):\s*$")


def labels_of(text: str) -> dict[str, dict[str, int]]:
    """Per kernel, the offset of the instruction that follows each label line (``.L_x_1:``)."""
    out: dict[str, dict[str, int]] = {}
    cur, pending = "", []
    for line in text.splitlines():
        fm = FUNC_RE.match(line.strip())
        if fm:
            cur, pending = fm["name"], []
            continue
        lm = LABEL_RE.match(line)
        if lm:
            pending.append(lm.group(1))
            continue
        m = LINE_RE.match(line)
        if m:
            for name in pending:
                out.setdefault(cur, {})[name] = int(m["off"], 16)
            pending = []
    return out


BRANCH_OPS = frozenset({"BRA"})


_TARGET_RE = re.compile(r"`?\(?\s*([.\w$]+)\s*\)?")


def branch_target(ins: SassInstr, labels: dict[str, int]) -> int | None:
    """The offset a direct BRA jumps to: a hex offset or a label; None when it names neither."""
    if ins.opcode not in BRANCH_OPS or not ins.operands:
        return None
    tok = ins.operands[-1].strip()
    m = _TARGET_RE.fullmatch(tok.strip("`"))
    if m is None:
        return None
    name = m.group(1)
    if re.fullmatch(r"0x[0-9a-fA-F]+", name):
        return int(name, 16)
    return labels.get(name)
