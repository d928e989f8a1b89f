"""How the 32 lanes of a warp spread a loop's memory accesses (issue 32): from the kernel's SASS,
each address register as a linear form of the thread index.

A register's :class:`Form` is ``sum(coeff[v] * v)`` over the thread-index components ``x``,
``y``, ``z`` (``SR_TID.X`` ...) and ``lane`` (``SR_LANEID``), plus what every lane of the warp
shares (block index, kernel parameters, uniform registers, loop counters). A coefficient is a
number of bytes, or None where it is a run-time value the code multiplies by (a row length read
from a parameter). ``opaque``: the register depends on the thread index through an operation the
form cannot follow (a division, a mask, a loaded value).

:func:`address_forms` walks the instructions before the loop once, in order, then the body once
(a register the body writes later keeps its form from before the loop: its per-trip update is
taken as the same for every lane). :func:`lines_per_access` turns a form into the number of
distinct cache lines one warp-instruction touches for a block shape: coefficients in bytes give
the lanes' offsets; a run-time coefficient is taken as at least a line (a row length), so each
value of its component is a line of its own. The first warp of the block is the one counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from gpudissect.kernel.sass import SassInstr
from gpudissect.predict.loops import added_constant, step_of

SPECIAL = {"SR_TID.X": "x", "SR_TID.Y": "y", "SR_TID.Z": "z", "SR_LANEID": "lane"}
LANES = 32
IMM = re.compile(r"^-?0x[0-9a-fA-F]+$|^-?\d+$")
GREG = re.compile(r"^(-?)R(\d+)(?:\.64)?(?:\.reuse)?$")
LAST_BRACKET = re.compile(r"\[([^\]]*)\]\s*$")
LEAD_REG = re.compile(r"^\s*(R\d+)(?:\.|\s|[+-]|$)")
# the opcodes that reach global memory (predict/memory.py's spaces are built from them)
GLOBAL_OPS = ("LDG", "STG", "LD", "ST", "ATOM", "ATOMG", "RED", "REDG")


@dataclass(frozen=True)
class Form:
    coeffs: tuple[tuple[str, int | None], ...] = ()  # (component, bytes or None: run-time)
    opaque: bool = False

    @property
    def uniform(self) -> bool:
        return not self.coeffs and not self.opaque

    def to_json(self) -> dict:
        return {"coeffs": dict(self.coeffs), "opaque": self.opaque}

    @staticmethod
    def from_json(d: dict) -> Form:
        return Form(tuple(sorted((k, v) for k, v in (d.get("coeffs") or {}).items())), bool(d.get("opaque")))


UNIFORM = Form()
OPAQUE = Form((), True)


def _form(c: dict[str, int | None], opaque: bool = False) -> Form:
    return Form(tuple(sorted((k, v) for k, v in c.items() if v != 0)), opaque)


def add(a: Form, b: Form) -> Form:
    c: dict[str, int | None] = dict(a.coeffs)
    for k, v in b.coeffs:
        if k not in c:
            c[k] = v
        else:
            old = c[k]
            c[k] = None if (old is None or v is None) else old + v
    return _form(c, a.opaque or b.opaque)


def scale(a: Form, k: int | None) -> Form:
    """``a`` times a value every lane shares: a number, or None (a run-time value)."""
    if k == 0:
        return UNIFORM
    return _form({v: (None if (c is None or k is None) else c * k) for v, c in a.coeffs}, a.opaque)


def _imm(tok: str) -> int | None:
    t = tok.strip()
    return int(t, 0) if IMM.match(t) else None


class _Env:
    """Register forms while walking the code (a register never written is shared by the lanes:
    a parameter or a value the walk did not see)."""

    def __init__(self) -> None:
        self.regs: dict[int, Form] = {}
        self.vals: dict[int, int] = {}  # registers holding a number the code put there

    def get(self, tok: str) -> tuple[Form, int | None]:
        """(the operand's form, its value where it is a number every lane shares)."""
        t = tok.strip().removesuffix(".reuse")
        if t in ("RZ", "-RZ", "URZ"):
            return UNIFORM, 0
        n = _imm(t)
        if n is not None:
            return UNIFORM, n
        m = GREG.match(t)
        if m:
            r = int(m.group(2))
            f = self.regs.get(r, UNIFORM)
            v = self.vals.get(r)
            return (scale(f, -1) if m.group(1) else f), (None if v is None else -v if m.group(1) else v)
        return UNIFORM, None  # uniform registers, constant banks, predicates: the same for every lane

    def set(self, tok: str, f: Form, value: int | None = None) -> None:
        m = GREG.match(tok.strip())
        if m:
            r = int(m.group(2))
            self.regs[r] = f
            if value is None:
                self.vals.pop(r, None)
            else:
                self.vals[r] = value


def address(i: SassInstr) -> str | None:
    """The address operand's last bracket (after a ``desc[...]`` descriptor or a constant bank):
    ``R2.64+0x4`` of ``desc[UR4][R2.64+0x4]``; a store's address is its first operand."""
    for op in i.operands:
        m = LAST_BRACKET.search(op)
        if m:
            return m.group(1)
    return None


def address_register(i: SassInstr) -> str | None:
    """The per-lane register an address starts with (``R2`` of ``R2.64+0x4``), if any."""
    a = address(i)
    m = LEAD_REG.match(a) if a is not None else None
    return m.group(1) if m else None


def _half_bits(tok: str) -> int | None:
    """The bits of an FP16 immediate (HFMA2.MMA R, -RZ, RZ, a, b puts a number in R this way)."""
    try:
        return int(np.array(float(tok), dtype=np.float16).view(np.uint16))
    except ValueError:
        return None


def _mul(env: _Env, a: str, b: str) -> Form:
    fa, va = env.get(a)
    fb, vb = env.get(b)
    if fa.uniform and fb.uniform:
        return UNIFORM
    if fa.uniform:
        return scale(fb, va)
    if fb.uniform:
        return scale(fa, vb)
    return OPAQUE


def _step(env: _Env, i: SassInstr) -> None:
    """One instruction's effect on the forms of the registers it writes."""
    ops, op, mods = list(i.operands), i.opcode, set(i.modifiers)
    if not ops or op in ("ISETP", "FSETP", "DSETP", "PLOP3", "BRA", "EXIT", "BAR", "NOP", "BSSY", "BSYNC",
                         "WARPSYNC", "STG", "ST", "STS", "RED", "REDG", "CALL", "RET"):
        return
    dest = ops[0]
    if not GREG.match(dest.strip()):
        return
    src = [o for o in ops[1:] if not re.match(r"^!?U?P(\d+|T)$", o.strip())]  # carries in and out
    if op == "S2R":
        env.set(dest, _form({SPECIAL[src[0].strip()]: 1}) if src and src[0].strip() in SPECIAL else UNIFORM)
        return
    if "X" in mods or ("HI" in mods and op != "LEA"):  # the high word of a 64-bit sum, IMAD.HI
        lanes = any(not env.get(o)[0].uniform for o in src)
        env.set(dest, OPAQUE if (lanes and op == "IMAD") else UNIFORM)
        return
    if op == "MOV" and src:
        env.set(dest, *env.get(src[0]))
    elif op == "IMAD" and ("MOV" in mods or "U32" in mods and len(mods) == 1) and len(src) >= 3 \
            and src[0].strip() in ("RZ", "-RZ") and src[1].strip() in ("RZ", "-RZ"):
        env.set(dest, *env.get(src[2]))
    elif op == "HFMA2" and "MMA" in mods and len(src) >= 4 and src[0].strip() in ("RZ", "-RZ") \
            and src[1].strip() in ("RZ", "-RZ"):
        hi, lo = _half_bits(src[2]), _half_bits(src[3])
        env.set(dest, UNIFORM, None if hi is None or lo is None else (hi << 16) | lo)
    elif op == "IMAD" and "SHL" in mods and len(src) >= 2:
        env.set(dest, _mul(env, src[0], src[1]))
    elif op == "IMAD" and len(src) >= 3:  # a x b + c (IMAD.IADD, IMAD.WIDE: the low word's form)
        env.set(dest, add(_mul(env, src[0], src[1]), env.get(src[2])[0]))
    elif op in ("IADD3", "IADD"):
        f = UNIFORM
        for o in src:
            f = add(f, env.get(o)[0])
        env.set(dest, f)
    elif op == "VIADD" and src:
        env.set(dest, add(env.get(src[0])[0], env.get(src[1])[0] if len(src) > 1 else UNIFORM))
    elif op == "LEA" and len(src) >= 3:
        k = _imm(src[-1])
        env.set(dest, add(scale(env.get(src[0])[0], None if k is None else 1 << k), env.get(src[1])[0]))
    elif op == "SHF" and "L" in mods and len(src) >= 2 and _imm(src[1]) is not None and "HI" not in mods:
        env.set(dest, scale(env.get(src[0])[0], 1 << (_imm(src[1]) or 0)))
    elif op in ("LDC", "ULDC", "S2UR", "CS2R"):
        env.set(dest, UNIFORM)
    else:  # anything else: shared where its sources are, else not followed
        lanes = any(not env.get(o)[0].uniform for o in src if not o.strip().startswith(("desc[", "c[")))
        reg = address_register(i)
        if reg and not env.get(reg)[0].uniform:
            lanes = True  # a value loaded from a per-lane address
        env.set(dest, OPAQUE if lanes else UNIFORM)
        if i.pair or "WIDE" in mods:
            m = GREG.match(dest.strip())
            if m:
                env.regs[int(m.group(2)) + 1] = OPAQUE if lanes else UNIFORM


def address_forms(kernel: list[SassInstr], start: int, body: list[SassInstr]) -> dict[int, Form]:
    """Per memory instruction of ``body`` (by offset): its address register's form. ``kernel``:
    the function's instructions; those before ``start`` (the loop's first offset) are walked
    first."""
    env = _Env()
    for i in kernel:
        if i.offset >= start:
            break
        _step(env, i)
    out: dict[int, Form] = {}
    for i in body:
        reg = address_register(i) if i.opcode in GLOBAL_OPS else None
        if reg:
            out[i.offset] = env.get(reg)[0]
        _step(env, i)
    return out


def unseen_addresses(kernel: list[SassInstr], start: int, body: list[SassInstr]) -> frozenset[int]:
    """Offsets of the memory instructions of ``body`` whose address depends on a register the
    code before them never wrote (a SASS listing without its prologue): a form says such a
    register is shared by the lanes, which is no evidence that it is (a broadcast needs some)."""
    written: set[str] = set()
    unseen: set[str] = set()
    out: set[int] = set()
    for i in [x for x in kernel if x.offset < start] + list(body):
        srcs = [r for r in i.sources() if r.startswith("R") and r != "RZ"]
        if i.offset >= start and i.opcode in GLOBAL_OPS:
            reg = address_register(i)
            if reg and (reg in unseen or reg not in written):
                out.add(i.offset)
        taint = any(r in unseen or r not in written for r in srcs)
        for d in i.dests():
            if d.startswith("R") and d != "RZ":
                written.add(d)
                (unseen.add if taint else unseen.discard)(d)
    return frozenset(out)


@dataclass
class Lanes:
    """A loop's address forms (per memory instruction offset), as stored with a corpus loop;
    ``unseen``: the accesses whose address depends on a register the code never wrote
    (:func:`unseen_addresses`; none in a whole kernel, the stored loops' case)."""

    forms: dict[int, Form] = field(default_factory=dict)
    unseen: frozenset[int] = frozenset()

    def to_json(self) -> dict:
        return {str(k): f.to_json() for k, f in self.forms.items()}

    @staticmethod
    def from_json(d: dict | None) -> Lanes:
        return Lanes({int(k): Form.from_json(v) for k, v in (d or {}).items()})


def _lane_addresses(f: Form, block: tuple[int, ...]) -> list[tuple[tuple[int, ...], int]]:
    """Per lane of a ``block``'s first warp at form ``f`` (not opaque): (the values of its
    run-time components, its offset in bytes from what the lanes share)."""
    bx = max(block[0] if block else 1, 1)
    by = max(block[1] if len(block) > 1 else 1, 1)
    coeff = dict(f.coeffs)
    out = []
    for lane in range(LANES):
        val = {"x": lane % bx, "y": (lane // bx) % by, "z": lane // (bx * by), "lane": lane}
        out.append((tuple(val[v] for v, c in sorted(coeff.items()) if c is None),
                    sum(c * val[v] for v, c in coeff.items() if c is not None)))
    return out


def lines_per_access(f: Form, block: tuple[int, ...], width: int, line: int) -> int | None:
    """Distinct ``line``-byte lines the first warp of a ``block`` touches with one access of
    ``width`` bytes per lane at address form ``f`` (None: the form is not known)."""
    if f.opaque:
        return None
    return len({(runtime, b // line) for runtime, off in _lane_addresses(f, block) for b in (off, off + width - 1)})


def one_address(f: Form, block: tuple[int, ...]) -> bool:
    """Every lane of a ``block``'s first warp has the same address at form ``f`` (a broadcast:
    ``x[j]`` read by every thread, or a row index from ``threadIdx.y`` in a 32-wide block)."""
    return not f.opaque and len(set(_lane_addresses(f, block))) == 1


def broadcasts_of(lanes: Lanes, body: list[SassInstr], block: tuple[int, ...]) -> frozenset[int]:
    """Offsets of the global loads of ``body`` whose lanes all read one address (:func:`one_address`),
    an address the code computed (not ``lanes.unseen``)."""
    return frozenset(i.offset for i in body if i.opcode in ("LDG", "LD") and i.offset not in lanes.unseen
                     and (f := lanes.forms.get(i.offset)) is not None and one_address(f, block))


def lines_of(lanes: Lanes, body: list[SassInstr], block: tuple[int, ...], line: int | None,
             width_of) -> dict[int, int]:
    """Per memory instruction offset of ``body`` whose form is known: the L1 lines one
    warp-instruction touches (``width_of(instr)``: bytes per lane); empty without a line size."""
    if not line:
        return {}
    out = {}
    for i in body:
        f = lanes.forms.get(i.offset)
        n = lines_per_access(f, block, width_of(i), line) if f is not None else None
        if n is not None:
            out[i.offset] = n
    return out


def misses_of(lines: dict[int, int], body: list[SassInstr], fill: int | None, width_of,
              broadcasts: frozenset[int] = frozenset()) -> dict[int, float]:
    """Per access offset of ``body`` whose lanes each have a line of their own (``lines``: from
    :func:`lines_of`, at least one line per lane), or all read one address (``broadcasts``:
    :func:`broadcasts_of`): the share of its accesses that find their data not yet in the L1.
    A row per lane, or the warp's one address, walks on: its next element is in what its miss
    brought in (``fill`` bytes: the L1's measured fill granularity, a sector), one access in
    fill / width misses."""
    if not fill:
        return {}
    return {i.offset: min(1.0, width_of(i) / fill) for i in body
            if lines.get(i.offset, 0) >= LANES or i.offset in broadcasts}


@dataclass(frozen=True)
class Walk:
    """A load whose address moves with the loop by a constant: its address register, its
    offset from it (bytes) and the bytes the register moves per trip (0: it does not move)."""

    base: str
    offset: int
    step: int


SIMPLE_ADDRESS = re.compile(r"^(R\d+)(?:\.64)?(?:\+(-?0x[0-9a-fA-F]+|-?\d+))?$")


def walks_of(body: list[SassInstr], offsets) -> dict[int, Walk]:
    """Per load offset in ``offsets`` whose address is a register plus a constant (``R10.64+-0x8``)
    that the body moves by a constant per trip, its :class:`Walk`. The register's one writer in
    the body adds a constant to it (``IADD3 R10, P2, R10, 0x10, RZ``: :func:`loops.step_of`), or
    scales a counter that does (``IMAD.WIDE R4, R14, 0x4, R2`` with ``R14`` stepping, ``R2`` not
    written); a register the body never writes does not move. A load after the register's
    writer in the body reads it one step on (its offset says so: the walk's addresses are the
    trip's start's). Any other address is left out."""
    out: dict[int, Walk] = {}
    for i in body:
        if i.offset not in offsets:
            continue
        m = SIMPLE_ADDRESS.match((address(i) or "").replace(" ", ""))
        if m is None:
            continue
        base, off = m.group(1), int(m.group(2) or "0", 0)
        step = _reg_step(body, base)
        if step is not None:
            # a load after the register's writer in the body reads it moved already this trip
            after = any(w.offset < i.offset for w in body if base in w.dests())
            out[i.offset] = Walk(base, off + (step if after else 0), step)
    return out


def _reg_step(body: list[SassInstr], reg: str) -> int | None:
    """The bytes ``reg`` moves per trip (0: not written), or None where that is not a constant."""
    writers = [w for w in body if reg in w.dests()]
    if not writers:
        return 0
    if len(writers) != 1:
        return None
    w = writers[0]
    if reg in w.sources():
        found, step = step_of(tuple(body), reg)
        return step if found else None
    ops = [t.strip() for t in w.operands]
    copied = ops[1] if w.opcode == "MOV" and len(ops) == 2 else \
        ops[3] if w.full == "IMAD.MOV.U32" and len(ops) == 4 and ops[1:3] == ["RZ", "RZ"] else None
    if copied is not None and GREG.match(copied):  # the register's new value made in another one
        k = body.index(w)
        tmp = [x for x in body[:k] if copied in x.dests()][-1:]  # its last writer before the copy
        return added_constant(tmp[0], reg) if tmp else None
    if w.full.startswith("IMAD.WIDE") and len(ops) == 4 and IMM.match(ops[2]) and GREG.match(ops[1]) \
            and GREG.match(ops[3]):
        idx, rest = GREG.match(ops[1]), GREG.match(ops[3])
        idx_reg, rest_reg = f"R{idx.group(2)}", f"R{rest.group(2)}"
        if idx.group(1) or rest.group(1) or any(rest_reg in x.dests() for x in body):
            return None
        found, k = step_of(tuple(body), idx_reg)
        return k * int(ops[2], 0) if found and k is not None else None
    return None
