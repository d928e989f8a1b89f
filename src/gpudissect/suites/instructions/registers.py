"""PTX <-> SASS register correspondence of a verified kernel (issue 22; thesis section 4.3: which
SASS registers carry each PTX register of the instruction, and which SASS registers the
instruction uses that carry none).

From one verified map kernel (its PTX, its SASS, the timed region; no GPU):

* a source loaded at run time: the PTX load ``ld.global %rX, [%in+K]`` and the SASS load ``LDG
  Rn, [..+K]`` name the same bytes; the register data flow from there (kernel/sass.py) gives every
  SASS register holding a value of that PTX register alone, and those the region reads are its
  registers (a 64-bit PTX register: a pair);
* the chain register (the chained source and, the chain being ``d = op(d, ...)``, the
  destination): the region holds ``length`` instances of the same SASS; the registers one
  instance writes and the next one reads carry it;
* the SASS registers an instance writes and reads within itself carry no PTX register of the
  instruction (the thesis's "?" row: temporaries).
"""

from __future__ import annotations

import re

from gpudissect.catalog.model import Variant
from gpudissect.kernel.sass import SassInstr

_LD_PTX = re.compile(r"ld\.global\.(?P<t>[a-z]\d+)\s+(?P<reg>%\w+),\s*\[%in\+(?P<off>\d+)\];")
_OFF = re.compile(r"\[[^\]]*?(?:\+\s*(?P<off>0x[0-9a-fA-F]+|\d+))?\s*\]")
_WIDTH = {"b16": 2, "b32": 4, "b64": 8}
REGION_START = "%clock64"  # the timed region opens with a clock read (kernel/timing.py)


def ptx_operands(variant: Variant, ptx: str) -> dict[str, str]:
    """Catalog operand name -> PTX register of the first instance of ``variant`` in ``ptx``."""
    pat = re.escape(variant.ptx)
    for o in variant.operands:
        pat = pat.replace(re.escape("{" + o.name + "}"), f"(?P<{o.name}>[^,;\\s{{}}\\[\\]]+)", 1)
        pat = pat.replace(re.escape("{" + o.name + "}"), f"(?P={o.name})")
    pat = pat.replace(r"\ ", r"\s+")
    m = re.search(pat, ptx[max(ptx.find(REGION_START), 0):])  # the first instance in the timed region
    return {k: v for k, v in m.groupdict().items()} if m else {}


def ptx_loads(ptx: str) -> dict[int, str]:
    """Byte offset in the input buffer -> the PTX register loaded from it (4-byte words)."""
    out: dict[int, str] = {}
    for m in _LD_PTX.finditer(ptx):
        off = int(m["off"])
        for w in range(0, _WIDTH.get(m["t"], 4), 4):
            out[off + w] = m["reg"]
    return out


def _load_dests(ins: SassInstr) -> list[tuple[str, int]]:
    """(SASS register, byte offset) of each word an LDG writes."""
    if not ins.operands:
        return []
    ms = list(_OFF.finditer(",".join(ins.operands[1:])))  # desc[UR6][R2.64+0x8]: the last bracket
    off = int(ms[-1]["off"], 0) if ms and ms[-1]["off"] else 0
    words = {"64": 2, "128": 4}.get(next((x for x in ins.modifiers if x in ("64", "128")), ""), 1)
    r = re.match(r"R(\d+)", ins.operands[0].strip())
    if r is None:
        return []
    return [(f"R{int(r[1]) + j}", off + 4 * j) for j in range(words)]


def taints(instrs: list[SassInstr], loads: dict[int, str]) -> list[dict[str, frozenset[str]]]:
    """Per instruction, the PTX registers (of ``loads``) each of its source registers' values come
    from, following the data flow in program order."""
    t: dict[str, frozenset[str]] = {}
    out = []
    for ins in instrs:
        out.append({r: t.get(r, frozenset()) for r in ins.sources()})
        if ins.opcode == "LDG":
            for reg, off in _load_dests(ins):
                t[reg] = frozenset({loads[off]}) if off in loads else frozenset()
            continue
        src = frozenset().union(*out[-1].values()) if out[-1] else frozenset()
        for r in ins.dests():
            t[r] = src
    return out


def _instances(region: list[SassInstr], length: int) -> list[list[SassInstr]] | None:
    if length < 2 or len(region) % length:
        return None
    k = len(region) // length
    chunks = [region[i * k:(i + 1) * k] for i in range(length)]
    if len({tuple(i.full for i in c) for c in chunks[1:-1]} or {()}) > 1:
        return None
    return chunks


def correspondence(variant: Variant, ptx: str, instrs: list[SassInstr], region: list[SassInstr],
                   length: int) -> dict[str, dict]:
    """Operand name -> {ptx, sass, role}, and ``"?"`` -> the SASS registers of an instance that
    carry no PTX register. Empty where the kernel's shape does not allow it (no region)."""
    if not region:
        return {}
    ops = ptx_operands(variant, ptx)
    loads = ptx_loads(ptx)
    start = next((i for i, x in enumerate(instrs) if x.offset == region[0].offset), None)
    if start is None:
        return {}
    tr = taints(instrs, loads)[start:start + len(region)]
    chain = variant.chain_operand
    out: dict[str, dict] = {}
    for o in variant.operands:
        reg = ops.get(o.name)
        if reg is None or (chain is not None and o.name == chain.name) or o.written or not o.read:
            continue
        sass = sorted({r for ts in tr for r, t in ts.items() if t == frozenset({reg})},
                      key=_reg_key)
        out[o.name] = {"ptx": reg, "sass": sass, "role": "source"}
    chunks = _instances(region, length)
    carried: set[str] = set()
    temps: set[str] = set()
    if chunks:
        for a, b in zip(chunks, chunks[1:], strict=False):
            written = {r for ins in a for r in ins.dests()}
            read_next = {r for ins in b for r in ins.sources()}
            carried |= written & read_next
        for c in chunks[1:-1] or chunks:
            seen: set[str] = set()
            for ins in c:
                temps |= {r for r in ins.sources() if r in seen}
                seen |= set(ins.dests())
        temps -= carried
    if chain is not None and chains_through(variant):
        reg = ops.get(chain.name)
        role = "chain: the chained source and the destination" if reg == ops.get(variant.dest.name) else "chain"
        if not chunks and reg is not None:  # instances of unequal SASS: where the chain starts and ends
            carried = {r for r, t in tr[0].items() if t == frozenset({reg})} if tr else set()
            after = taints(instrs, loads)[start + len(region):]
            st = next((i for i, x in enumerate(instrs[start + len(region):]) if x.opcode == "STG"
                       and any(reg in t for t in after[i].values())), None)
            if st is not None:
                x = instrs[start + len(region) + st]
                carried |= {r for r in x.sources() if reg in after[st].get(r, frozenset())
                            and not r.startswith("UR")}
            role += " (where the chain enters the region and leaves it: the instances' SASS differ)"
        for name in dict.fromkeys((chain.name, variant.dest.name)):  # in this order: the map is the same every run
            pred = variant.operand(name).reg_class == "p"
            own = [r for r in carried if r.startswith(("P", "UP")) == pred]
            out[name] = {"ptx": ops.get(name), "sass": sorted(own, key=_reg_key), "role": role}
    if chunks:
        named = {r for v in out.values() for r in v["sass"] or []}
        out["?"] = {"ptx": None, "sass": sorted(temps - named, key=_reg_key),
                    "role": "SASS registers of an instance that carry no PTX register of it"}
    return out


def register_map(variant: Variant, built) -> dict[str, dict]:
    """The correspondence of one built map kernel (kernel/build.py ``Built``); a kernel the
    analysis cannot read gives ``{"error": ...}``, never a failed verification."""
    try:
        return correspondence(variant, built.kernel.entry, built.instrs, built.region, built.kernel.length)
    except Exception as e:  # noqa: BLE001 - the map's record stands without it
        return {"error": {"ptx": None, "sass": None, "role": f"{type(e).__name__}: {e}"[:200]}}


def chains_through(v: Variant) -> bool:
    return v.chain_operand is not None and v.dest is not None and not v.chain_operand.is_address


def _reg_key(r: str) -> tuple[str, int]:
    m = re.match(r"([A-Z]+)(\d+)", r)
    return (m[1], int(m[2])) if m else (r, -1)


def lines(records: list[dict]) -> list[str]:
    """``gpudissect map --registers``: one line per verified variant."""
    out = []
    for r in records:
        regs = r.get("registers") or {}
        if not regs:
            continue
        parts = [f"{k}={v['ptx'] or '?'}->{','.join(v['sass']) if v['sass'] is not None else 'unknown'}"
                 for k, v in regs.items() if k != "?"]
        extra = (regs.get("?") or {}).get("sass")
        out.append(f"{r['variant']}: " + "  ".join(parts) + (f"  (no PTX register: {','.join(extra)})" if extra else ""))
    return out
