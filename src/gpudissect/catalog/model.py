"""The instruction catalog: PTX instruction variants described as data.

The catalog lives in TOML files (``instructions.toml`` beside this module). Each
``[[group]]`` expands over its ``types`` into one :class:`Variant` per type. A variant
knows its PTX text template, its operand signature (which operands are written, which
read, and their PTX types), the minimum architecture, and how to make safe operand
values. Nothing about an instruction is coded in Python branches: the generators read
these records.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

CATALOG_DIR = Path(__file__).parent
DEFAULT_FILES = ("instructions.toml",)

# PTX type -> register class. 'h' = .b16, 'r' = .b32, 'rd' = .b64, 'p' = .pred
REG_CLASS: dict[str, str] = {
    "pred": "p",
    "b16": "h", "u16": "h", "s16": "h", "f16": "h", "bf16": "h",
    "b32": "r", "u32": "r", "s32": "r", "f32": "r", "f16x2": "r", "bf16x2": "r",
    "tf32": "r", "e4m3x2": "h", "e5m2x2": "h", "u8x4": "r", "s8x4": "r",
    "u16x2": "r", "s16x2": "r",
    "b64": "rd", "u64": "rd", "s64": "rd", "f64": "rd",
}
# register class -> PTX declaration type, register name prefix, and load/store type
REG_DECL = {"p": ".pred", "h": ".b16", "r": ".b32", "rd": ".b64"}
REG_PREFIX = {"p": "%p", "h": "%h", "r": "%r", "rd": "%rd"}
LD_TYPE = {"h": "b16", "r": "b32", "rd": "b64"}
# operand kinds that are not plain registers
# operand kinds that are addresses, not values: the register class of the address
ADDRESS_KINDS = {
    "smem": "r",  # a per-thread slot of a per-block shared buffer (a .b32 register)
    "gmem": "rd",  # a per-thread slot of global memory (a .b64 register): its own address per thread
}
SPECIAL_KINDS = set(ADDRESS_KINDS)

OPERAND_RE = re.compile(r"^(?P<name>[a-z][a-z0-9]*)(?P<w>!?)(?P<rw>\+?)(?P<tmp>~?):(?P<type>[a-z0-9]+)$")


class CatalogError(ValueError):
    """A catalog file or entry is malformed."""


class UnknownVariant(KeyError):
    """A variant name that the catalog does not hold."""

    def __init__(self, name: str, suggestions: list[str]):
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown instruction variant '{name}'{hint}")

    def __str__(self) -> str:  # KeyError quotes its argument; we want a plain line
        return self.args[0]


@dataclass(frozen=True)
class Operand:
    """One operand of an instruction's signature."""

    name: str  # placeholder name used in the PTX template: {d}, {a}, ...
    ptype: str  # PTX type (u32, f16x2, pred, ...) or a special kind (smem)
    written: bool  # destination
    read: bool  # source (a destination that is also read has both)
    # neither: a scratch register (``x~:b32``) that a multi-instruction template writes and
    # reads within one instance (a fresh register of the kernel, never loaded or stored)

    @property
    def scratch(self) -> bool:
        return not self.read and not self.written

    @property
    def reg_class(self) -> str:
        if self.ptype in ADDRESS_KINDS:
            return ADDRESS_KINDS[self.ptype]
        return REG_CLASS[self.ptype]

    @property
    def is_address(self) -> bool:
        return self.ptype in ADDRESS_KINDS

    @property
    def is_float(self) -> bool:
        return self.ptype.startswith(("f", "bf", "tf", "e4", "e5"))


@dataclass(frozen=True)
class Variant:
    """One PTX instruction variant: opcode x type x modifiers."""

    name: str  # e.g. "mad.lo.u32"
    opcode: str  # e.g. "mad"
    type: str  # principal type, e.g. "u32"
    modifiers: tuple[str, ...]
    ptx: str  # template, e.g. "mad.lo.u32 {d}, {a}, {b}, {c};"
    operands: tuple[Operand, ...]
    cls: str  # instruction class for tables ("int", "fp32", "mufu", ...)
    min_sm: int = 50
    min_ptx: str = "6.0"
    chain: str | None = None  # operand that carries the dependence chain
    values: dict[str, str] = field(default_factory=dict)  # operand -> value spec
    allow: tuple[str, ...] = ()  # SASS kinds allowed in the timed region
    warp_collective: bool = False  # needs all lanes converged (shfl, vote)
    expect: tuple[str, ...] = ()  # the SASS one instance must be (opcodes, modifiers optional)
    note: str = ""
    source: str = ""  # file:group index, for error messages

    @property
    def dest(self) -> Operand | None:
        """The written operand; None for an instruction that writes no register (a fence, a
        reduction, a prefetch: ``result = false`` in the catalog)."""
        return next((o for o in self.operands if o.written), None)

    @property
    def sources(self) -> list[Operand]:
        return [o for o in self.operands if o.read]

    def operand(self, name: str) -> Operand:
        for o in self.operands:
            if o.name == name:
                return o
        raise KeyError(name)

    @property
    def chain_operand(self) -> Operand | None:
        """The read operand that takes the previous instruction's result."""
        if self.chain == "none":
            return None
        if self.chain:
            return self.operand(self.chain)
        d = self.dest
        if d is None:
            return None
        same = [o for o in self.sources if o.reg_class == d.reg_class and not o.is_address]
        if same:
            return same[0]
        regs = [o for o in self.sources if not o.is_address]
        return regs[0] if regs else None

    @property
    def fib_operand(self) -> Operand | None:
        """A second read operand of the chain's register class, for two-register chains."""
        c = self.chain_operand
        if c is None:
            return None
        for o in self.sources:
            if o is not c and o.reg_class == c.reg_class and not o.is_address:
                return o
        return None

    def supported_on(self, sm: int) -> bool:
        return sm >= self.min_sm


def parse_signature(sig: str, where: str, result: bool = True) -> tuple[Operand, ...]:
    """Parse 'd!:u32 a:u32 b:u32' (``!`` marks a written operand, ``+`` read-and-written,
    ``~`` a scratch register of a multi-instruction template: ``x~:b32``).

    When no operand carries ``!``, the first one is the destination. ``result=False``: an
    instruction that writes no register; every other operand is read (the signature may be empty).
    """
    tokens = sig.replace(",", " ").split()
    if not result:
        ops = []
        for tok in tokens:
            m = OPERAND_RE.match(tok)
            if not m or m["w"] or m["rw"]:
                raise CatalogError(f"{where}: operand '{tok}' of an instruction without a result must be "
                                   "a source or scratch register (name:type, name~:type)")
            if m["type"] not in REG_CLASS and m["type"] not in SPECIAL_KINDS:
                raise CatalogError(f"{where}: unknown PTX type '{m['type']}' in signature '{sig}'")
            ops.append(Operand(name=m["name"], ptype=m["type"], written=False, read=not m["tmp"]))
        if len({o.name for o in ops}) != len(ops):
            raise CatalogError(f"{where}: duplicate operand names in '{sig}'")
        return tuple(ops)
    if not tokens:
        raise CatalogError(f"{where}: empty operand signature")
    parsed = []
    for tok in tokens:
        m = OPERAND_RE.match(tok)
        if not m:
            raise CatalogError(
                f"{where}: malformed operand '{tok}' in signature '{sig}' "
                "(expected name:type, e.g. 'a:u32', with '!' after the name for a destination)"
            )
        ptype = m["type"]
        if ptype not in REG_CLASS and ptype not in SPECIAL_KINDS:
            raise CatalogError(f"{where}: unknown PTX type '{ptype}' in signature '{sig}'")
        if m["tmp"] and (m["w"] or m["rw"] or ptype in SPECIAL_KINDS):
            raise CatalogError(f"{where}: scratch operand '{tok}' must be a plain register (name~:type)")
        parsed.append((m["name"], bool(m["w"]), bool(m["rw"]), bool(m["tmp"]), ptype))
    explicit = any(w for _, w, _, _, _ in parsed)
    ops = []
    first = next((i for i, p in enumerate(parsed) if not p[3]), -1)
    for i, (name, w, rw, tmp, ptype) in enumerate(parsed):
        written = w or rw or (not explicit and i == first)
        read = rw or not (written or tmp)
        ops.append(Operand(name=name, ptype=ptype, written=written, read=read))
    names = [o.name for o in ops]
    if len(set(names)) != len(names):
        raise CatalogError(f"{where}: duplicate operand names in '{sig}'")
    if sum(o.written for o in ops) != 1:
        raise CatalogError(f"{where}: signature '{sig}' must have exactly one destination")
    return tuple(ops)


def fill(template: str, mapping: dict[str, str]) -> str:
    """``{key}`` placeholders of a PTX template replaced (str.format would choke on PTX
    braces: only the mapping's own keys are replaced)."""
    out = template
    for k, v in mapping.items():
        out = out.replace("{" + k + "}", v)
    return out


def _axes(g: dict, where: str) -> list[dict[str, str]]:
    """Every combination of the group's ``types`` ({t}) and ``vary`` axes ({key}, e.g. a
    scope or memory-ordering qualifier), in the order written: one mapping per variant."""
    types = g.get("types", [""])
    if not isinstance(types, list) or not types:
        raise CatalogError(f"{where}: 'types' must be a non-empty list")
    combos: list[dict[str, str]] = [{"t": t} for t in types]
    for key, vals in g.get("vary", {}).items():
        if key == "t" or not re.fullmatch(r"[a-z][a-z0-9]*", key):
            raise CatalogError(f"{where}: vary axis '{key}' is not a placeholder name (or is 't')")
        if not isinstance(vals, list) or not vals or not all(isinstance(x, str) for x in vals):
            raise CatalogError(f"{where}: vary axis '{key}' must be a non-empty list of strings")
        combos = [{**c, key: x} for c in combos for x in vals]
    return combos


def _expand_group(g: dict, where: str) -> Iterator[Variant]:
    for key in ("name", "sig"):
        if key not in g:
            raise CatalogError(f"{where}: missing '{key}'")
    result = bool(g.get("result", True))
    for axes in _axes(g, where):
        t = axes["t"]
        name = fill(g["name"], axes)
        sig = fill(g["sig"], axes)
        operands = parse_signature(sig, f"{where} ({name})", result)
        parts = name.split(".")
        opcode = parts[0]
        typed = [p for p in parts[1:] if p in REG_CLASS]
        ptype = typed[-1] if typed else (parts[-1] if len(parts) > 1 else "")
        mods = tuple(p for p in parts[1:] if p != ptype)
        if "ptx" in g:
            ptx = fill(g["ptx"], axes)
        else:
            ptx = name + " " + ", ".join("{" + o.name + "}" for o in operands) + ";"
        placeholders = set(re.findall(r"\{([a-z][a-z0-9]*)\}", ptx))
        missing = {o.name for o in operands} - placeholders
        extra = placeholders - {o.name for o in operands}
        if missing or extra:
            raise CatalogError(
                f"{where} ({name}): PTX template '{ptx}' and signature '{sig}' disagree "
                f"(missing {sorted(missing)}, unknown {sorted(extra)})"
            )
        values = {k: fill(str(v), axes) for k, v in g.get("values", {}).items()}
        for k in values:
            if k not in {o.name for o in operands}:
                raise CatalogError(f"{where} ({name}): value given for unknown operand '{k}'")
        chain = g.get("chain") if result else "none"
        if chain and chain != "none" and chain not in {o.name for o in operands if o.read}:
            raise CatalogError(f"{where} ({name}): chain operand '{chain}' is not a read operand")
        per_type_sm = g.get("min_sm_by_type", {})
        yield Variant(
            name=name,
            opcode=opcode,
            type=ptype,
            modifiers=mods,
            ptx=ptx,
            operands=operands,
            cls=g.get("class", "misc"),
            min_sm=int(per_type_sm.get(t, g.get("min_sm", 50))),
            min_ptx=str(g.get("min_ptx", "6.0")),
            chain=chain,
            values=values,
            allow=tuple(g.get("allow", ())),
            warp_collective=bool(g.get("warp_collective", False)),
            expect=tuple(g.get("expect", ())),
            note=fill(g.get("note", ""), axes),
            source=where,
        )


@dataclass
class Catalog:
    variants: list[Variant]

    def __post_init__(self) -> None:
        self._by_name: dict[str, Variant] = {}
        for v in self.variants:
            if v.name in self._by_name:
                raise CatalogError(
                    f"duplicate variant '{v.name}' ({self._by_name[v.name].source} and {v.source})"
                )
            self._by_name[v.name] = v

    def __len__(self) -> int:
        return len(self.variants)

    def __iter__(self) -> Iterator[Variant]:
        return iter(self.variants)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> Variant:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownVariant(
                name, difflib.get_close_matches(name, list(self._by_name), n=3, cutoff=0.6)
            ) from None

    def select(self, patterns: Iterable[str] | None = None, classes: Iterable[str] | None = None) -> list[Variant]:
        """Variants whose name matches any glob pattern (or exact name), optionally by class.

        A pattern that matches nothing raises :class:`UnknownVariant`.
        """
        import fnmatch

        out = list(self.variants)
        if classes:
            cl = set(classes)
            out = [v for v in out if v.cls in cl or v.cls.split(".")[0] in cl]
        if patterns:
            pats = list(patterns)
            chosen: list[Variant] = []
            for p in pats:
                hits = [v for v in out if fnmatch.fnmatchcase(v.name, p) or v.opcode == p]
                if not hits:
                    self.get(p)  # raises with suggestions
                chosen.extend(h for h in hits if h not in chosen)
            out = chosen
        return out


def load_catalog(paths: Iterable[Path | str] | None = None) -> Catalog:
    files = [Path(p) for p in paths] if paths else [CATALOG_DIR / f for f in DEFAULT_FILES]
    variants: list[Variant] = []
    for f in files:
        try:
            doc = tomllib.loads(Path(f).read_text())
        except tomllib.TOMLDecodeError as e:
            raise CatalogError(f"{f}: not valid TOML: {e}") from None
        except OSError as e:
            raise CatalogError(f"{f}: cannot read catalog: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise CatalogError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        groups = doc.get("group", [])
        if not isinstance(groups, list):
            raise CatalogError(f"{f}: 'group' must be an array of tables ([[group]])")
        for i, g in enumerate(groups):
            where = f"{Path(f).name}:group[{i}]"
            if not isinstance(g, dict):
                raise CatalogError(f"{where}: a group must be a table ([[group]])")
            bad = [k for k in ("name", "sig", "ptx", "class", "chain", "min_ptx", "note")
                   if k in g and not isinstance(g[k], str)]
            bad += [k for k in ("types", "allow", "expect") if k in g and not (
                isinstance(g[k], list) and all(isinstance(x, str) for x in g[k]))]
            bad += [k for k in ("values", "min_sm_by_type", "vary") if k in g and not isinstance(g[k], dict)]
            bad += [k for k in ("result",) if k in g and not isinstance(g[k], bool)]
            if bad:
                raise CatalogError(f"{where}: wrong type for {', '.join(repr(k) for k in bad)}")
            try:
                variants.extend(_expand_group(g, where))
            except CatalogError:
                raise
            except (TypeError, ValueError) as e:  # a number that is not one, ...
                raise CatalogError(f"{where}: malformed group: {e}") from None
    return Catalog(variants)
