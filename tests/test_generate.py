"""The PTX generator: kernels assemble, operands come from the input buffer, chains differ."""

from __future__ import annotations

import re

import pytest

from gpudissect.arch.target import make_target, ptx_isa_for
from gpudissect.catalog.operand_values import bits_for
from gpudissect.kernel.build import build_one
from gpudissect.kernel.region import find_region
from gpudissect.kernel.sass import parse_sass
from gpudissect.kernel.toolchain import compile_ptx, disassemble, tool_version
from gpudissect.suites.instructions.strategies import all_strategies, default_order, strategy
from gpudissect.suites.instructions.template import GenerationError, generate, glue_ptx

LOAD_RE = re.compile(r"^\s*ld\.global\.b(?:16|32|64) (%\w+), \[%in\+(\d+)\];$")
OPERAND_TOKEN = re.compile(r"^\{[a-z][a-z0-9]*\}$")


@pytest.fixture(scope="module")
def target():
    return make_target("sm_90")


def timed_body(ptx: str) -> list[str]:
    lines = ptx.splitlines()
    start = lines.index("  mov.u64 %t0, %clock64;")
    end = lines.index("  mov.u64 %t1, %clock64;")
    return [ln.strip() for ln in lines[start + 1 : end]]


def operands_of(line: str) -> list[str]:
    m = re.match(r"^(?:@!?%\w+\s+)?[a-z][\w.:]*\s+(.*);$", line.strip())
    assert m, line
    return [t.strip().strip("[]") for t in m.group(1).split(",")]


def loads(ptx: str) -> dict[str, int]:
    """register -> input slot, for every load from the input buffer."""
    out = {}
    for ln in ptx.splitlines():
        m = LOAD_RE.match(ln)
        if m:
            assert m.group(1) not in out, f"{m.group(1)} loaded twice"
            out[m.group(1)] = int(m.group(2)) // 8
    return out


def template_has_literals(ptx_template: str) -> bool:
    return any(not OPERAND_TOKEN.match(t) for t in operands_of(ptx_template))


# --- assembling ------------------------------------------------------------------------

CASES = [
    ("add.u32", "fib", 1),
    ("add.f32", "reg", 1),
    ("add.f32", "reg", 4),
    ("fma.rn.f32", "reg", 4),
    ("mad.lo.u32", "fib", 4),
    ("add.f16x2", "reg", 4),
    ("add.bf16", "reg", 1),
    ("neg.s32", "companion", 1),
    ("abs.f64", "companion", 4),
    ("setp.lt.and.s32", "reg", 2),
    ("mul.wide.u32", "reg", 1),
    ("atom.shared.add.u32", "reg", 1),
    ("shfl.sync.idx.b32", "reg", 1),
    ("shfl.sync.idx.b32", "fib", 1),
    ("vote.sync.ballot.b32", "reg", 1),
    ("mov.u32.clock", "reg", 1),
]


@pytest.mark.parametrize(("name", "strat", "chains"), CASES)
def test_generated_kernels_assemble(catalog, target, name, strat, chains):
    v = catalog.get(name)
    s = strategy(strat)
    k = generate(v, s, target, chains=chains, length=4, reps=2)
    isa = ptx_isa_for(tool_version("ptxas"))
    assert k.ptx.startswith(f".version {isa}\n.target sm_90\n")
    assert k.ptx == k.header + "\n" + k.entry
    cub = compile_ptx(k.ptx, arch="sm_90", opt=s.opt)
    assert cub.cubin[:4] == b"\x7fELF"
    funcs = parse_sass(disassemble(cub.cubin))
    region = find_region(funcs[k.name].instrs)
    assert region, "the timed region is empty"
    # (start, end) per repetition, then %smid: 5 u64 timestamps per warp, written by lane 0
    assert k.reps == 2 and "  shr.u32 %gw, %gt, 5;" in k.entry
    assert "  mul.wide.u32 %toff, %gw, 40;" in k.entry
    stores = [ln for ln in k.entry.splitlines() if "[%tp+" in ln]
    assert len(stores) == 5 and all(ln.startswith("  @%tlead st.global.u64") for ln in stores)
    assert k.units == 4 * chains
    if chains > 1 and v.chain_operand is not None:
        # every chain has its own sink slot, so no chain is dead code
        assert k.n_sink >= chains


def test_latency_and_throughput_shapes(catalog, target):
    v = catalog.get("fma.rn.f32")
    lat = generate(v, strategy("reg"), target, chains=1, length=8)
    thr = generate(v, strategy("reg"), target, chains=4, length=8)
    assert len(timed_body(lat.ptx)) == 8
    assert len(timed_body(thr.ptx)) == 32
    # throughput: chains are interleaved, each instruction feeds the same chain 4 lines later
    body = timed_body(thr.ptx)
    dests = [operands_of(ln)[0] for ln in body]
    assert len(set(dests)) == 4
    assert dests[:4] == dests[4:8]
    for ln in body:
        ops = operands_of(ln)
        assert ops[0] == ops[v.operands.index(v.chain_operand)]  # d = op(d, ...): a real chain
    b = build_one(thr, target.arch, 3)
    assert sum(1 for i in b.region if i.opcode == "FFMA") == 32


# --- operands come from the input buffer -----------------------------------------------


def test_reg_strategy_has_no_immediates(catalog, target):
    reg = strategy("reg")
    checked = 0
    for v in catalog:
        if not v.operands or v.ptx.count(";") > 1 or template_has_literals(v.ptx) or (
                v.chain_operand is not None and v.chain_operand.is_address):
            continue  # shfl's clamp and mask; a pattern (DPX); a fence's no operand; a pointer chase
        k = generate(v, reg, target, chains=2, length=3)
        if k.meta["glue"]:
            continue  # glue (selp 1, 0) is not the instruction under test
        loaded = loads(k.ptx)
        # predicates are set from loaded words: setp.ne.b32 %pN, %rM, 0
        from_input = set(loaded) | {
            m.group(1) for m in re.finditer(r"setp\.ne\.b32 (%p\d+), (%r\d+), 0;", k.ptx)
            if m.group(2) in loaded
        }
        dest_i = v.operands.index(v.dest) if v.dest is not None else -1  # none: a fence, a reduction
        for ln in timed_body(k.ptx):
            ops = operands_of(ln)
            assert len(ops) == len(v.operands), ln
            for i, tok in enumerate(ops):
                assert tok.startswith("%"), f"{v.name}: immediate {tok!r} in {ln!r}"
                if i == dest_i and v.chain_operand is None:
                    continue  # a fresh register per instance
                assert tok in from_input or tok in ("%smem", "%gmem"), f"{v.name}: {tok} not from the input buffer"
        # every slot of the input buffer is loaded exactly once
        assert sorted(loaded.values()) == list(range(len(k.inputs))), v.name
        checked += 1
    assert checked > 250


def test_fixed_operand_values_are_in_the_input_buffer(catalog, target):
    v = catalog.get("mad.lo.u32")
    k = generate(v, strategy("reg"), target, chains=1, length=4)
    loaded = loads(k.ptx)
    body = timed_body(k.ptx)
    ops = operands_of(body[0])
    names = [o.name for o in v.operands]
    chain = v.chain_operand.name
    for o in v.sources:
        if o.name == chain:
            continue
        reg = ops[names.index(o.name)]
        assert reg in loaded, f"{o.name} ({reg}) is not loaded from the input buffer"
        assert k.inputs[loaded[reg]] == bits_for(o.ptype, v.values.get(o.name, "7"))
        assert all(operands_of(ln)[names.index(o.name)] == reg for ln in body)


def test_imm_strategy_uses_immediates(catalog, target):
    v = catalog.get("add.u32")
    k = generate(v, strategy("imm"), target, chains=1, length=4)
    assert timed_body(k.ptx) == ["add.u32 %r0, %r0, 7;"] * 4
    f = generate(catalog.get("add.f32"), strategy("imm"), target, length=2)
    assert all(operands_of(ln)[2] == "0f3F800000" for ln in timed_body(f.ptx))
    # no immediate form for f16 in PTX
    with pytest.raises(GenerationError, match="no PTX immediate"):
        generate(catalog.get("add.f16"), strategy("imm"), target)


@pytest.mark.parametrize("name", ["add.u32", "fma.rn.f32", "add.f16x2", "mad.lo.u64", "add.bf16"])
def test_distinct_chains_start_from_distinct_values(catalog, target, name):
    v = catalog.get(name)
    for strat in ("reg", "fib"):
        k = generate(v, strategy(strat), target, chains=4, length=2)
        loaded = loads(k.ptx)
        body = timed_body(k.ptx)
        chain_regs = [operands_of(ln)[0] for ln in body[:4]]
        assert len(set(chain_regs)) == 4
        starts = [k.inputs[loaded[r]] for r in chain_regs]
        assert len(set(starts)) == 4, f"{name}/{strat}: chains start equal {starts}"
        if strat == "fib":
            ci = v.operands.index(v.fib_operand)
            others = [operands_of(ln)[ci] for ln in body[:4]]
            assert len(set(others)) == 4
            all_starts = starts + [k.inputs[loaded[r]] for r in others]
            assert len(set(all_starts)) == 8


def test_chain_registers_vary_across_lanes(catalog, target):
    # the chain start gets the lane id added, so shfl/vote of it cannot be folded as uniform
    k = generate(catalog.get("add.u32"), strategy("reg"), target, chains=1)
    assert "add.u32 %r0, %r0, %lane;" in k.ptx


def test_fib_alternates_registers(catalog, target):
    k = generate(catalog.get("add.u32"), strategy("fib"), target, chains=1, length=4)
    body = timed_body(k.ptx)
    assert body == ["add.u32 %r0, %r0, %r1;", "add.u32 %r1, %r1, %r0;"] * 2


def test_companion_follows_each_instance(catalog, target):
    k = generate(catalog.get("neg.s32"), strategy("companion"), target, chains=1, length=3)
    body = timed_body(k.ptx)
    assert len(body) == 6
    assert all(ln.startswith("neg.s32") for ln in body[0::2])
    assert all(ln.startswith("xor.b32") for ln in body[1::2])
    key = operands_of(body[1])[2]
    assert key in loads(k.ptx)  # the companion's operand is a run-time value too
    assert k.meta["companion"] == "xor.b32 {o}, {o}, {k};"


def test_glue_for_mixed_register_classes(catalog, target):
    v = catalog.get("mul.wide.u32")
    assert v.dest.reg_class == "rd" and v.chain_operand.reg_class == "r"
    k = generate(v, strategy("reg"), target, chains=1, length=2)
    assert k.meta["glue"] == glue_ptx("rd", "r")
    body = timed_body(k.ptx)
    assert body[0].startswith("mul.wide.u32") and body[1].startswith("mov.b64")
    compile_ptx(k.ptx, "sm_90")


def test_generation_errors(catalog, target):
    with pytest.raises(GenerationError, match="no second operand"):
        generate(catalog.get("not.b32"), strategy("fib"), target)
    with pytest.raises(GenerationError, match="no second operand"):
        generate(catalog.get("popc.b32"), strategy("fib"), target)
    with pytest.raises(GenerationError, match="no operand to make immediate"):
        generate(catalog.get("not.b32"), strategy("imm"), target)
    with pytest.raises(GenerationError, match="no chain"):
        generate(catalog.get("mov.u32.clock"), strategy("companion"), target)
    for bad in ({"chains": 0}, {"length": 0}, {"reps": 0}):
        with pytest.raises(GenerationError, match=">= 1"):
            generate(catalog.get("add.u32"), strategy("reg"), target, **bad)


def test_every_variant_generates_or_refuses_clearly(catalog, target):
    """No strategy may crash the generator with anything but GenerationError."""
    for v in catalog:
        for s in all_strategies().values():
            try:
                generate(v, s, target, chains=2, length=2)
            except GenerationError:
                pass


def test_strategies():
    order = [s.name for s in default_order()]
    assert order[0] == "reg" and "imm" not in order
    assert len(set(order)) == len(order)
    assert strategy("imm").operands == "imm"
    # every strategy compiles at -O3 (an -O0/-O1 schedule is the compiler's, not the GPU's)
    assert order == ["reg", "fib", "companion", "companion-add"]
    assert all(s.opt == 3 for s in all_strategies().values())
    assert strategy("companion").companion == "xor"
    assert strategy("companion-add").companion == "add"
    for gone in ("reg-O0", "reg-O1", "fib-O1"):
        with pytest.raises(KeyError):
            strategy(gone)
    with pytest.raises(KeyError, match="unknown strategy 'nope'"):
        strategy("nope")


def test_ptx_isa_for():
    assert ptx_isa_for("13.0") == "9.0"
    assert ptx_isa_for("12.4") == "8.4"
    assert ptx_isa_for("99.9") == ptx_isa_for("13.2")  # newer than the table: newest known
    assert ptx_isa_for(None) == "8.0"
