"""The generated half of the validation set (BHive-like): loop bodies of random instruction mixes
and dependence patterns, drawn from the catalog's verified variants.

A variant is drawn from when the tables hold a clean latency of it that is one SASS instruction
(what the predictor can look up) and its operands are plain registers (no predicates, shared
memory or warp-collective operands). Each loop is made from its own seed (reproducible):

* mix: one variant, two or three, or four to eight;
* pattern: ``chain`` (every instruction reads the last result of its register class: one
  dependent chain), ``parallel`` (k independent chains, round robin) or ``random`` (sources
  drawn from a small pool of loop registers; some operands loop-invariant values);
* 2 to 20 instructions.

Loop registers start from values loaded from ``in`` and end in ``out`` (nothing is dead);
operands that are not loop registers are loaded once before the loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpudissect.arch.limits import parse_sass
from gpudissect.catalog.model import LD_TYPE, Variant, fill, load_catalog
from gpudissect.catalog.operand_values import bits_for, chain_init_spec, operand_spec
from gpudissect.predict.harness import LoopSpec

CLASSES = ("r", "rd", "h")
PREFIX = {"r": "%gr", "rd": "%gd", "h": "%gh"}  # loop registers
CONST = {"r": "%cr", "rd": "%cd", "h": "%ch"}  # loop-invariant operands
DECL = {"r": ".b32", "rd": ".b64", "h": ".b16"}
PATTERNS = ("chain", "parallel", "random")


def usable(v: Variant) -> bool:
    """A variant the generator can place: one instruction of register operands only (no
    address, no scratch register of a multi-instruction template), result and chain in one
    class."""
    if v.warp_collective or any(o.ptype in ("smem", "pred") or o.is_address or o.scratch for o in v.operands):
        return False
    if v.dest is None:
        return False
    if any(o.reg_class not in CLASSES for o in v.operands):
        return False
    c = v.chain_operand
    return c is not None and c.reg_class == v.dest.reg_class


def verified_pool(records: list[dict], sm: int = 90) -> list[Variant]:
    """Catalog variants with a clean one-SASS latency record among ``records`` (the
    instructions suite of the tables) that :func:`usable` accepts, in catalog order."""
    clean = set()
    for r in records:
        if r.get("measure") != "latency" or r.get("flags") or r.get("value") is None:
            continue
        ops = parse_sass(r.get("sass") or [])
        if len(ops) == 1 and ops[0][1] == 1.0:
            clean.add(r["variant"])
    return [v for v in load_catalog().variants if v.name in clean and v.supported_on(sm) and usable(v)]


@dataclass
class _Builder:
    inputs: list[int]
    setup: list[str]
    n_const: dict[str, int]

    def const(self, cls: str, bits: int) -> str:
        n = self.n_const[cls]
        self.n_const[cls] = n + 1
        reg = f"{CONST[cls]}{n}"
        self.setup.append(f"  ld.global.{LD_TYPE[cls]} {reg}, [%in+{8 * len(self.inputs)}];")
        self.inputs.append(bits)
        return reg


def generate_one(pool: list[Variant], seed: int, index: int) -> LoopSpec:
    """Loop ``index`` of the set made from ``seed`` (the same arguments give the same loop)."""
    rng = random.Random(f"{seed}:{index}")
    mix = rng.choice(("one", "few", "many"))
    k = {"one": 1, "few": rng.randint(2, 3), "many": rng.randint(4, 8)}[mix]
    parts = rng.sample(pool, min(k, len(pool)))
    pattern = rng.choice(PATTERNS)
    n = rng.randint(2, 20)
    chains = rng.randint(2, 6) if pattern == "parallel" else (1 if pattern == "chain" else 4)
    b = _Builder([], [], dict.fromkeys(CLASSES, 0))
    loop_regs = {c: [f"{PREFIX[c]}{j}" for j in range(chains)] for c in CLASSES}
    used: set[str] = set()
    for c in CLASSES:  # initial values: a float-like pattern per register, distinct
        for j, reg in enumerate(loop_regs[c]):
            op_t = {"r": "f32", "rd": "f64", "h": "f16"}[c]
            b.setup.append(f"  ld.global.{LD_TYPE[c]} {reg}, [%in+{8 * len(b.inputs)}];")
            b.inputs.append(bits_for(op_t, repr(1.25 + j / 16.0 + index / 4096.0)))
    body: list[str] = []
    consts: dict[tuple[str, str], str] = {}
    for i in range(n):
        v = rng.choice(parts)
        c = v.chain_operand
        assert c is not None
        cls = v.dest.reg_class
        regs = loop_regs[cls]
        slot = i % chains if pattern == "parallel" else (0 if pattern == "chain" else rng.randrange(chains))
        mapping = {v.dest.name: regs[slot]}
        for o in v.sources:
            if o.name in mapping:
                continue
            if o is c:
                mapping[o.name] = regs[slot] if pattern != "random" else regs[rng.randrange(chains)]
            elif pattern == "random" and o.reg_class == cls and rng.random() < 0.5:
                mapping[o.name] = regs[rng.randrange(chains)]
            else:
                key = (v.name, o.name)
                if key not in consts:
                    spec = operand_spec(o, v) if o is not c else chain_init_spec(o, 0, v)
                    consts[key] = b.const(o.reg_class, bits_for(o.ptype, spec))
                mapping[o.name] = consts[key]
        used.update(r for r in mapping.values() if r.startswith(tuple(PREFIX.values())))
        body.append("  " + fill(v.ptx, mapping))
    decls = [f"  .reg {DECL[c]} {PREFIX[c]}<{chains}>;" for c in CLASSES]
    decls += [f"  .reg {DECL[c]} {CONST[c]}<{max(b.n_const[c], 1)}>;" for c in CLASSES]
    sinks = tuple((r, LD_TYPE[c]) for c in CLASSES for r in loop_regs[c] if r in used)
    meta = (("mix", mix), ("pattern", pattern), ("chains", str(chains)), ("seed", f"{seed}:{index}"),
            ("variants", " ".join(sorted({p.name for p in parts}))))
    return LoopSpec(name=f"pv_gen_{index:04d}", category="generated", decls=tuple(decls),
                    setup=tuple(b.setup), body=tuple(body), sinks=sinks, inputs=tuple(b.inputs), meta=meta)


def generate(pool: list[Variant], count: int, seed: int = 20) -> list[LoopSpec]:
    """``count`` loops from ``seed`` (loop i from ``seed:i``)."""
    if not pool:
        raise ValueError("no verified variant the generator can use in the tables")
    return [generate_one(pool, seed, i) for i in range(count)]
