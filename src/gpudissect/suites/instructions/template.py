"""One generic PTX benchmark template, driven by a catalog variant.

A kernel runs ``chains`` independent dependence chains of ``length`` instances each,
interleaved, between two ``%clock64`` reads, and repeats the timed region ``reps``
times in a loop that is never unrolled (the last repetition runs with a warm
instruction cache). The three measurements of the mission are all this one template:

* latency: 1 chain, one warp, several lengths (the slope is the latency);
* throughput: K chains per thread, W warps per block, one block per SM;
* dependence distance (Artico's instruction configuration): d interleaved chains in
  one warp, so each instruction consumes the result produced d instructions earlier.

Kernel ABI (all instruction kernels):
``.entry k(.param .u64 in, .param .u64 out, .param .u64 times)``

* ``in``: u64 slots holding operand bit patterns (``Kernel.inputs``), then the zeroed u32
  per-SM counters with which the blocks of an SM start each repetition together
  (``kernel/timing.py`` ``SmSync``; the device zeroes them before each launch);
* ``out``: ``n_sink`` u64 slots per thread receiving the chains' final values;
* ``times``: ``2*reps + 1`` u64 per warp, written by lane 0 after the loop (kernel/timing.py):
  (start, end) clock64 per repetition, then %smid.
"""

from __future__ import annotations

import tomllib
from functools import cache

from gpudissect.arch.target import Target
from gpudissect.catalog.model import (
    ADDRESS_KINDS,
    CATALOG_DIR,
    LD_TYPE,
    REG_DECL,
    REG_PREFIX,
    Operand,
    Variant,
    fill,
)
from gpudissect.catalog.operand_values import bits_for, chain_init_spec, operand_spec
from gpudissect.kernel.ptx import RUN_PROLOGUE, Kernel, ptx_header
from gpudissect.kernel.timing import Repeat, SmSync, repeated, row_words
from gpudissect.suites.instructions.strategies import Strategy

SMEM_BYTES_PER_THREAD = 8
# the register an address operand of each kind reads (set up before the timed region)
ADDRESS_REG = {"smem": "%smem", "gmem": "%gmem"}
# a kernel with a global target (meta "uses_gmem"): the input slot that moves the target, in bytes
# past the thread's output slot (0 as generated: the slot itself)
GMEM_SLOT = 0


class GenerationError(ValueError):
    """The variant cannot be generated with the requested strategy."""


@cache
def _glue_table() -> dict[str, dict[str, str]]:
    return tomllib.loads((CATALOG_DIR / "glue.toml").read_text())


def companion_ptx(op: str, cls: str) -> str:
    """A non-foldable companion ``op`` for a chain register of class ``cls`` ({o} = {o} op {k})."""
    table = _glue_table()["companion"][op]
    if cls not in table:
        raise GenerationError(f"no {op} companion for a .{REG_DECL[cls].lstrip('.')} chain")
    return table[cls]


def companion_measured_by(op: str, cls: str) -> str | None:
    """The catalog variant whose measurement is the companion's own, or None."""
    return _glue_table()["companion_latency"].get(op, {}).get(cls)


def companion_sass(op: str) -> tuple[str, ...]:
    """The SASS opcodes a companion ``op`` becomes."""
    return tuple(_glue_table()["companion_sass"].get(op, ()))


def companion_references() -> list[str]:
    """Every catalog variant that measures a companion alone."""
    return sorted({v for t in _glue_table()["companion_latency"].values() for v in t.values()})


KEY_BITS = {"h": 16, "r": 32, "rd": 64}
KEY_STEP = 0x9E3779B97F4A7C15  # odd: every instance of a chain its own key


def instance_key(step: int, bits: int) -> str:
    """The companion's immediate for instance ``step`` of a chain (strategy key "instance")."""
    return f"{((step + 1) * KEY_STEP) & ((1 << bits) - 1):#x}U"


def glue_ptx(src_cls: str, dst_cls: str) -> str | None:
    if src_cls == dst_cls:
        return None
    return _glue_table()["glue"][f"{src_cls}>{dst_cls}"]


# the registers and label of the repeated timed region (kernel/timing.py), as declared below
REPEAT = Repeat(times="%tp", label="$Lrep", pred="%loop", smid32="%sm", smid64="%toff", nounroll=True,
                pin_start=True)  # no R2UR of the start clock in the region (kernel/timing.py)


class _Regs:
    def __init__(self) -> None:
        self.count = {c: 0 for c in REG_PREFIX}

    def new(self, cls: str) -> str:
        n = self.count[cls]
        self.count[cls] = n + 1
        return f"{REG_PREFIX[cls]}{n}"

    def decls(self) -> list[str]:
        return [f"  .reg {REG_DECL[c]} {REG_PREFIX[c]}<{max(n, 1)}>;" for c, n in self.count.items()]


class _Loader:
    """Operand values loaded at run time before the timed region: each ``load`` adds an input
    slot and the PTX that reads it into a new register."""

    def __init__(self, regs: _Regs, lines: list[str], inputs: list[int]) -> None:
        self.regs, self.lines, self.inputs = regs, lines, inputs

    def load(self, cls: str, spec_bits: int, vary: bool = False) -> str:
        """Load a slot; ``vary`` adds the lane id to the bits, so that the compiler cannot
        prove the value uniform across the warp (it folds shfl/vote of uniform values)."""
        regs, lines, inputs = self.regs, self.lines, self.inputs
        slot = len(inputs)
        inputs.append(spec_bits)
        if cls == "p":
            tmp = regs.new("r")
            reg = regs.new("p")
            lines.append(f"  ld.global.b32 {tmp}, [%in+{8 * slot}];")
            if vary:
                lines.append(f"  add.u32 {tmp}, {tmp}, %lane;")
            lines.append(f"  setp.ne.b32 {reg}, {tmp}, 0;")
            return reg
        reg = regs.new(cls)
        lines.append(f"  ld.global.{LD_TYPE[cls]} {reg}, [%in+{8 * slot}];")
        if vary:
            lane = {"h": "%lane16", "r": "%lane", "rd": "%lane64"}[cls]
            lines.append(f"  add.u{LD_TYPE[cls][1:]} {reg}, {reg}, {lane};")
        return reg


def _imm_literal(op: Operand, spec: str) -> str | None:
    """A PTX immediate for ``spec``, or None where PTX has no immediate of that type."""
    if op.ptype in ("f32",):
        return f"0f{bits_for(op.ptype, spec):08X}"
    if op.ptype == "f64":
        return f"0d{bits_for(op.ptype, spec):016X}"
    if op.reg_class in ("r", "rd") and not op.is_float and op.ptype != "smem":
        return str(bits_for(op.ptype, spec))
    return None


def generate(
    variant: Variant,
    strategy: Strategy,
    target: Target,
    *,
    chains: int = 1,
    length: int = 8,
    reps: int = 2,
    name: str = "bench",
    measure: str = "",
    guard: bool | None = None,
) -> Kernel:
    """Generate the benchmark kernel for one variant and strategy: ``chains`` dependence
    chains of ``length`` instances, the timed region repeated ``reps`` times. ``guard``: every
    instance of the instruction (not its glue or companion) under a predicate loaded at run
    time, true or false (an instruction configuration, issue 22); None: unguarded."""
    if chains < 1 or length < 1 or reps < 1:
        raise GenerationError("chains, length and reps must be >= 1")
    regs = _Regs()
    lines: list[str] = []
    inputs: list[int] = []
    template = variant.ptx
    dest = variant.dest
    chain_op = variant.chain_operand
    fib_op = variant.fib_operand if strategy.chain == "fib" else None
    if strategy.chain == "fib" and fib_op is None:
        raise GenerationError(f"{variant.name}: no second operand of the chain's class for a two-register chain")
    uses_smem = any(o.ptype == "smem" for o in variant.operands)
    uses_gmem = any(o.ptype == "gmem" for o in variant.operands)
    if set(ADDRESS_REG) != set(ADDRESS_KINDS):
        raise GenerationError("an address kind of the catalog has no register in the template")
    if uses_gmem:  # GMEM_SLOT (a chain's placements move the target: core.gmem_placements)
        inputs.append(0)

    load = _Loader(regs, lines, inputs).load

    # --- chains' registers, each from its own loaded value (so no two chains are equal)
    K = chains
    cur: list[str] = []
    other: list[str] = []
    for k in range(K):
        if chain_op is not None and chain_op.is_address:
            # a chain through an address: a pointer chase. Chain k starts at the thread's
            # output slot k, which holds its own address (each chain its own slot)
            if chain_op.ptype != "gmem":
                raise GenerationError(f"{variant.name}: a chain through a {chain_op.ptype} address is not supported")
            reg = regs.new(chain_op.reg_class)
            lines.append(f"  add.u64 {reg}, %gmem, {8 * k};")
            lines.append(f"  st.global.u64 [{reg}], {reg};")
            cur.append(reg)
        elif chain_op is not None:
            cur.append(load(chain_op.reg_class, bits_for(chain_op.ptype, chain_init_spec(chain_op, k, variant)), vary=True))
        if fib_op is not None:
            other.append(load(fib_op.reg_class, bits_for(fib_op.ptype, chain_init_spec(fib_op, k + K, variant)), vary=True))

    # --- the other read operands, shared by all chains, loaded at run time (or immediates)
    fixed: dict[str, str] = {}
    for op in variant.sources:
        if op is chain_op or op is fib_op:
            continue
        if op.is_address:
            fixed[op.name] = ADDRESS_REG[op.ptype]
            continue
        spec = operand_spec(op, variant)
        vary = spec.startswith("lane:")  # value + %laneid: differs across the warp
        spec = spec.removeprefix("lane:")
        if strategy.operands == "imm" and not vary:
            lit = _imm_literal(op, spec)
            if lit is None:
                raise GenerationError(f"{variant.name}: operand {op.name} ({op.ptype}) has no PTX immediate form")
            fixed[op.name] = lit
        else:
            fixed[op.name] = load(op.reg_class, bits_for(op.ptype, spec), vary=vary)
    for op in variant.operands:  # scratch registers of a multi-instruction template
        if op.scratch:
            fixed[op.name] = regs.new(op.reg_class)
    if strategy.operands == "imm" and not any(o is not chain_op and o is not fib_op for o in variant.sources):
        raise GenerationError(f"{variant.name}: no operand to make immediate")
    pre = "  "
    if guard is not None:
        if template.count(";") != 1 or dest is None or chain_op is None:
            raise GenerationError(f"{variant.name}: a guard needs one chained instruction in the template")
        pre = f"  @{load('p', 1 if guard else 0)} "

    glue = None
    if chain_op is not None and dest is not None and dest.reg_class != chain_op.reg_class:
        glue = glue_ptx(dest.reg_class, chain_op.reg_class)
    if guard is not None and glue:
        raise GenerationError(f"{variant.name}: a guarded chain through glue would skip the glue's input")
    companion = None
    comp_key = ""
    if strategy.chain == "companion":
        if chain_op is None:
            raise GenerationError(f"{variant.name}: no chain to put a companion in")
        if chain_op.is_address:
            raise GenerationError(f"{variant.name}: a companion would corrupt the address the chain follows")
        companion = companion_ptx(strategy.companion, chain_op.reg_class)
        kcls = chain_op.reg_class if chain_op.reg_class != "p" else "r"
        if strategy.key == "instance" and chain_op.reg_class == "p":
            raise GenerationError(f"{variant.name}: a predicate companion takes no immediate")
        comp_key = "" if strategy.key == "instance" else load(kcls, 0x5A5A5A5A5A5A5A5A & ((1 << KEY_BITS[kcls]) - 1))
        if chain_op.reg_class == "p":
            pk = regs.new("p")
            lines.append(f"  setp.ne.b32 {pk}, {comp_key}, 0;")
            comp_key = pk
    dtmp = [regs.new(dest.reg_class) for _ in range(K)] if glue and dest is not None else []
    # without a chain operand (e.g. reads of special registers) each instance writes a fresh
    # register; all are folded into the sinks by XOR after the timed region (none is dead).
    # An instruction without a result (a fence, a reduction) is its own effect: nothing to sink.
    sinks_plain = [regs.new(dest.reg_class) for _ in range(K)] if chain_op is None and dest is not None else []
    fresh: list[tuple[int, str]] = []
    if chain_op is None and dest is not None and dest.reg_class == "p":
        raise GenerationError(f"{variant.name}: a predicate result needs a chain operand")

    def instance(k: int, step: int) -> list[str]:
        m = dict(fixed)
        if dest is None:
            return ["  " + fill(template, m)]
        if chain_op is None:
            r = regs.new(dest.reg_class)
            fresh.append((k, r))
            m[dest.name] = r
            return ["  " + fill(template, m)]
        a, b = cur[k], (other[k] if fib_op is not None else None)
        if fib_op is not None and step % 2 == 1:
            a, b = b, a  # alternate: x = op(x, y); y = op(y, x)
        m[chain_op.name] = a
        if b is not None and fib_op is not None:
            m[fib_op.name] = b
        out = []
        if glue:
            m[dest.name] = dtmp[k]
            out.append(pre + fill(template, m))
            out.append("  " + fill(glue, {"o": a, "i": dtmp[k]}))
        else:
            m[dest.name] = a
            out.append(pre + fill(template, m))
        if companion:
            out.append("  " + fill(companion, {"o": a, "k": comp_key or instance_key(step, KEY_BITS[chain_op.reg_class])}))
        return out

    body: list[str] = []
    for step in range(length):
        for k in range(K):
            body.extend(instance(k, step))

    # --- sink: every chain's final value is stored, so nothing is dead
    fold: list[str] = []
    if chain_op is None and dest is not None:
        first = set()
        for k, r in fresh:
            if k not in first:
                first.add(k)
                fold.append(f"  mov.b{LD_TYPE[dest.reg_class][1:]} {sinks_plain[k]}, {r};")
            else:
                fold.append(f"  xor.b{LD_TYPE[dest.reg_class][1:]} {sinks_plain[k]}, {sinks_plain[k]}, {r};")
    sink_regs = cur + other if chain_op is not None else sinks_plain
    if glue:
        sink_regs = sink_regs + dtmp
    meta = {"strategy": strategy.name, "glue": glue, "companion": companion, "uses_smem": uses_smem,
            "uses_gmem": uses_gmem, **({"guard": guard} if guard is not None else {})}
    return _assemble(variant, strategy, target, name, measure, K, length, reps, regs, lines, inputs, body,
                     fold, sink_regs, meta)


def _assemble(variant: Variant, strategy: Strategy, target: Target, name: str, measure: str, K: int,
              length: int, reps: int, regs: _Regs, lines: list[str], inputs: list[int], body: list[str],
              fold: list[str], sink_regs: list[str], meta: dict) -> Kernel:
    """The kernel around a timed ``body``: set-up ``lines`` (loads of ``inputs``), the repeated
    region with ``fold`` after each repetition, and the ``sink_regs`` stored after the loop."""
    uses_smem, uses_gmem = meta["uses_smem"], meta["uses_gmem"]
    store: list[str] = []
    for i, r in enumerate(sink_regs):
        cls = next(c for c, p in REG_PREFIX.items() if r.startswith(p) and r[len(p):].isdigit())
        if cls == "p":
            tmp = regs.new("r")
            store.append(f"  selp.b32 {tmp}, 1, 0, {r};")
            store.append(f"  st.global.b32 [%outp+{8 * i}], {tmp};")
        else:
            store.append(f"  st.global.{LD_TYPE[cls]} [%outp+{8 * i}], {r};")

    smem_decl = (
        f"  .shared .align 16 .b8 sbuf[{1024 * SMEM_BYTES_PER_THREAD}];" if uses_smem else ""
    )
    smem_setup = (
        [
            "  mov.u32 %smem, sbuf;",
            f"  mad.lo.u32 %smem, %ti, {SMEM_BYTES_PER_THREAD}, %smem;",
            "  st.shared.u64 [%smem], 0;",
        ]
        if uses_smem
        else []
    )
    # global memory: the thread's first output slot (its own address; the sinks are stored over
    # it after the timed region) moved by input 0, zeroed and so in L2 before the region starts
    gmem_setup = ([f"  ld.global.b64 %gmem, [%in+{8 * GMEM_SLOT}];", "  add.u64 %gmem, %gmem, %outp;", "  st.global.u64 [%gmem], 0;"]
                  if uses_gmem else [])
    entry = "\n".join(
        [
            f"// gpudissect: {variant.name}  strategy={strategy.name}  chains={K} length={length} reps={reps}",
            f".visible .entry {name}(.param .u64 p_in, .param .u64 p_out, .param .u64 p_times)",
            "{",
            *regs.decls(),
            "  .reg .b64 %in, %outp, %tp, %t0, %t1, %toff, %sync;",
            *(["  .reg .b64 %gmem;"] if uses_gmem else []),
            "  .reg .b32 %ti, %nt, %ct, %gt, %gw, %rep, %sm, %smem, %lane;",
            "  .reg .b16 %lane16;",
            "  .reg .b64 %lane64;",
            "  .reg .pred %loop;",
            smem_decl,
            *RUN_PROLOGUE,
            "  mov.u32 %lane, %laneid;",
            "  cvt.u16.u32 %lane16, %lane;",
            "  cvt.u64.u32 %lane64, %lane;",
            "  shr.u32 %gw, %gt, 5;",
            f"  mul.wide.u32 %toff, %gw, {8 * row_words(reps)};",
            "  add.u64 %tp, %tp, %toff;",
            f"  mul.wide.u32 %toff, %gt, {8 * max(len(sink_regs), 1)};",
            "  add.u64 %outp, %outp, %toff;",
            *smem_setup,
            *gmem_setup,
            *lines,
            f"  add.u64 %sync, %in, {8 * max(len(inputs), 1)};",  # the SM counters follow the inputs
            *repeated(body, str(reps), REPEAT, keep=reps, after=fold, sync=SmSync("%sync")),
            *store,
            "  ret;",
            "}",
            "",
        ]
    )
    return Kernel(
        name=name,
        header=ptx_header(target.ptx_isa, target.arch),
        entry=entry,
        variant=variant.name,
        measure=measure,
        chains=K,
        length=length,
        warps=0,  # any block size: latency runs one warp, throughput W warps of the same kernel
        reps=reps,
        inputs=inputs,
        n_sink=max(len(sink_regs), 1),
        meta=meta,
    )


# instruction configurations without a dependence chain (issue 22): what generate_config builds
READ_READ, WRITE_WRITE = "read_read", "write_write"


def generate_config(variant: Variant, strategy: Strategy, target: Target, mode: str, *, length: int = 8,
                    reps: int = 2, name: str = "bench", measure: str = "", shared: int = 1,
                    preds: int = 4, distance: int = 1, slots: tuple[int, ...] = ()) -> Kernel:
    """A region of ``length`` instances of the variant's one PTX instruction, no instance reading
    another's result (one warp; the slope over lengths is the configuration's cost per instance).

    * ``read_read``: every instance reads the SAME register in source operand ``shared`` (1-based)
      and writes its own destination; every other register source is a value of its own per
      instance (a predicate source stays one register: a warp holds few), so no two instances
      compute the same thing;
    * ``write_write``: every instance writes the SAME destination register, none reads it; the
      first register source is a value of its own per instance, and instance i runs under
      predicate i mod ``preds`` (values loaded at run time, all true): a later instance under
      another predicate may not write, so no earlier write is provably dead.

    ``distance``: the instances between two that share the register (instance i reads, or
    writes, shared register i mod ``distance``); 1 is the configuration, a distance of ``length``
    its control (no register shared: the same instructions, each reading, or writing, its own).

    All values are loaded at run time (lane-varied) before the region; after each repetition
    (outside the timed region) values the instances read are XORed with a run-time zero, so the
    instances depend on the repetition and cannot be hoisted out of the loop; the destinations
    are stored after the loop (none is dead)."""
    if mode not in (READ_READ, WRITE_WRITE):
        raise GenerationError(f"unknown configuration {mode}")
    dest, srcs = variant.dest, variant.sources
    if dest is None or dest.reg_class == "p":
        raise GenerationError(f"{variant.name}: {mode} needs a register result (a predicate result "
                              "would need a predicate register per instance)")
    if variant.ptx.count(";") != 1 or any(o.is_address or o.scratch for o in variant.operands):
        raise GenerationError(f"{variant.name}: {mode} needs one PTX instruction of register operands")
    if length < 1 or reps < 1 or preds < 1 or not 1 <= distance <= length:
        raise GenerationError("length, reps and preds must be >= 1 and distance within 1..length")
    regs = _Regs()
    lines: list[str] = []
    inputs: list[int] = []
    load = _Loader(regs, lines, inputs).load
    zero: dict[str, str] = {}  # a run-time zero per register class, loaded where needed

    def value(op: Operand, i: int) -> str:
        return load(op.reg_class, bits_for(op.ptype, chain_init_spec(op, i, variant)), vary=op.reg_class != "p")

    if mode == READ_READ:
        if len(srcs) < 2:
            raise GenerationError(f"{variant.name}: read_read needs two source operands (one shared)")
        if not 1 <= shared <= len(srcs) or srcs[shared - 1].reg_class == "p":
            raise GenerationError(f"{variant.name}: source operand {shared} cannot be the shared register")
        turns = tuple(slots) or (shared,)  # instance i reads the shared register in operand turns[i % k]
        if any(not 1 <= t <= len(srcs) or srcs[t - 1].reg_class != srcs[shared - 1].reg_class
               or srcs[t - 1].ptype != srcs[shared - 1].ptype for t in turns):
            raise GenerationError(f"{variant.name}: operands {turns} cannot take turns holding the shared register "
                                  "(register sources of one type)")
        own = [o for j, o in enumerate(srcs) if (j + 1 not in turns or len(turns) > 1) and o.reg_class != "p"]
        fixed = {o.name: value(o, 0) for j, o in enumerate(srcs) if j == shared - 1 or o.reg_class == "p"}
        sh = srcs[shared - 1].name  # instance i reads the shared register number i mod distance
        shared_regs = [fixed[sh]]
        if len(turns) > 1:
            fixed.pop(sh)
        rotating = []
        per = []
        for i in range(length):
            if i % distance == len(shared_regs):
                shared_regs.append(value(srcs[shared - 1], i % distance))
            turn = srcs[turns[i % len(turns)] - 1].name
            rotating.append({turn: shared_regs[i % distance]})
            per.append({o.name: value(o, i + 1) for o in own if o.name != turn})
    else:
        regd = [o for o in srcs if o.reg_class != "p"]
        if not regd:
            raise GenerationError(f"{variant.name}: write_write needs a register source to vary per instance")
        own = regd[:1]
        fixed = {o.name: value(o, 0) for o in srcs if o is not own[0]}
        rotating = [{} for _ in range(length)]
        per = [{o.name: value(o, i + 1) for o in own} for i in range(length)]
    guards = [load("p", 1, vary=True) for _ in range(preds)] if mode == WRITE_WRITE else []
    dcls = dest.reg_class
    dests = ([load(dcls, 0) for _ in range(distance)] if mode == WRITE_WRITE
             else [regs.new(dcls) for _ in range(length)])
    body: list[str] = []
    for i in range(length):
        m = {**fixed, **rotating[i], **per[i],
             dest.name: dests[i % distance] if mode == WRITE_WRITE else dests[i]}
        pre = f"  @{guards[i % preds]} " if guards else "  "
        body.append(pre + fill(variant.ptx, m))
    # after each repetition: a value every instance reads (the shared one; under write_write the
    # fixed sources, or each instance's own where there are none) XORed with a run-time zero, so
    # that no instance is loop-invariant (only few: a 64-bit value XORed splits its register pair,
    # and ptxas moves the halves together again inside the region). The destinations are stored
    # after the loop, not folded after each repetition: ptxas sinks instances whose results a fold
    # reads right after the region below its closing clock read
    carried = [fixed[o.name] for o in srcs if o.name in fixed and o.reg_class != "p"]
    carried += [r for r in dict.fromkeys(r for m in rotating for r in m.values()) if r not in carried]
    after = []
    for r in carried or [r for m in per for r in m.values()]:
        cls = next(c for c in ("rd", "h", "r") if r.startswith(REG_PREFIX[c]) and r[len(REG_PREFIX[c]):].isdigit())
        if cls not in zero:
            zero[cls] = load(cls, 0)
        after.append(f"  xor.b{LD_TYPE[cls][1:]} {r}, {r}, {zero[cls]};")
    meta = {"strategy": strategy.name, "glue": None, "companion": None, "uses_smem": False,
            "uses_gmem": False, "config": mode, "distance": distance,
            **({"shared": shared, "slots": list(slots) or [shared]} if mode == READ_READ else {"preds": preds})}
    return _assemble(variant, strategy, target, name, measure, 1, length, reps, regs, lines, inputs, body,
                     after, dests, meta)
