"""The instruction catalog: consistency of the built-in data, and clear errors for bad data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudissect.catalog import CatalogError, UnknownVariant, load_catalog
from gpudissect.catalog.model import REG_CLASS, parse_signature
from gpudissect.catalog.operand_values import bits_for, chain_init_spec, operand_spec

PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9]*)\}")

# opcode families of Table V of the A100 microbenchmarking paper
TABLE_V = (
    "add sub mul mad mul24 mad24 sad div rem abs neg min max brev copysign and or xor not "
    "lop3 cnot bfe bfi popc clz bfind testp sin cos lg2 ex2 tanh sqrt rsqrt rcp fma dp4a "
    "dp2a cvt setp"
).split()


# --- the built-in catalog ---------------------------------------------------------------


def test_catalog_loads_with_enough_unique_variants(catalog):
    names = [v.name for v in catalog]
    assert len(catalog) >= 300
    assert len(set(names)) == len(names)
    assert all(n in catalog for n in names)


def test_templates_match_operands(catalog):
    for v in catalog:
        assert set(PLACEHOLDER.findall(v.ptx)) == {o.name for o in v.operands}, v.name
        assert v.ptx.rstrip().endswith(";"), v.name
        written = sum(o.written for o in v.operands)
        # one result, or none for an instruction without one (fence, reduction: no chain)
        assert written == 1 or (written == 0 and v.chain_operand is None), v.name


def test_chain_operands_are_read_operands(catalog):
    chained = 0
    for v in catalog:
        c = v.chain_operand
        if c is None:
            assert v.chain == "none" or not [o for o in v.sources if o.ptype != "smem"], v.name
            continue
        chained += 1
        assert c in v.operands and c.read, v.name
        assert c.ptype != "smem", v.name
        f = v.fib_operand
        if f is not None:
            assert f.read and f is not c and f.reg_class == c.reg_class, v.name
    assert chained > 0.9 * sum(v.dest is not None for v in catalog)


def test_every_value_spec_parses(catalog):
    for v in catalog:
        for name, spec in v.values.items():
            op = v.operand(name)
            bits = bits_for(op.ptype, spec)
            assert bits >= 0, (v.name, name, spec)
        for op in v.sources:
            bits_for(op.ptype, operand_spec(op, v))
        # the generator's chain start values must parse too (for every chain of a throughput run)
        for op in (v.chain_operand, v.fib_operand):
            if op is None or op.ptype == "pred":  # a predicate has two values only
                continue
            starts = {bits_for(op.ptype, chain_init_spec(op, k, v)) for k in range(4)}
            assert len(starts) == 4, f"{v.name}: chains start from equal values {starts}"


def test_every_type_has_a_register_class(catalog):
    for v in catalog:
        for o in v.operands:
            assert o.is_address or o.ptype in REG_CLASS, (v.name, o)
            assert o.reg_class in ("p", "h", "r", "rd")


def test_covers_table_v(catalog):
    opcodes = {v.opcode for v in catalog}
    missing = [op for op in TABLE_V if op not in opcodes]
    assert not missing, f"Table V families missing from the catalog: {missing}"
    clock = [v for v in catalog if v.opcode == "mov" and re.search(r"%clock\b(?!64)", v.ptx)]
    assert clock, "no mov of %clock"
    assert clock[0].dest.ptype in ("u32", "b32")


def test_covers_sm90_extras(catalog):
    by_op: dict[str, set[str]] = {}
    for v in catalog:
        by_op.setdefault(v.opcode, set()).add(v.type)
    for op in ("add", "mul", "fma", "min", "max"):
        for t in ("f16", "f16x2", "bf16", "bf16x2"):
            assert t in by_op[op], f"{op}.{t} missing"
    for op in ("shf", "shl", "shr", "prmt", "selp", "slct", "shfl", "vote"):
        assert op in by_op, op
    names = {v.name for v in catalog}
    assert any(n.startswith("min.relu.") for n in names)
    assert any(n.startswith("max.relu.") for n in names)
    atoms = [v for v in catalog if v.name.startswith("atom.shared.")]
    assert atoms and all(any(o.ptype == "smem" for o in v.operands) for v in atoms)
    assert all("shared" in v.allow for v in atoms)
    assert all(v.warp_collective for v in catalog if v.opcode in ("shfl", "vote"))


def test_min_sm_respected_for_new_types(catalog):
    assert catalog.get("add.bf16").min_sm >= 90
    assert catalog.get("add.u16x2").min_sm >= 90
    assert not catalog.get("add.u16x2").supported_on(80)
    assert catalog.get("add.u32").supported_on(80)


# --- variant lookup ----------------------------------------------------------------------


def test_unknown_variant_suggests(catalog):
    with pytest.raises(UnknownVariant) as ei:
        catalog.get("add.u33")
    assert "add.u32" in ei.value.suggestions
    msg = str(ei.value)
    assert msg.startswith("unknown instruction variant 'add.u33'")
    assert "did you mean" in msg and "add.u32" in msg
    assert isinstance(ei.value, KeyError)


def test_unknown_variant_without_close_match(catalog):
    with pytest.raises(UnknownVariant) as ei:
        catalog.select(["zzzz.qqqq"])
    assert ei.value.suggestions == []
    assert "did you mean" not in str(ei.value)


def test_glob_selection(catalog):
    adds = catalog.select(["add.*"])
    names = [v.name for v in adds]
    assert {"add.u32", "add.f32", "add.f16x2"} <= set(names)
    assert all(n.startswith("add.") for n in names)
    assert "addc.u32" not in names and "sub.u32" not in names
    # an exact name, a bare opcode, several patterns without duplicates
    assert [v.name for v in catalog.select(["add.u32"])] == ["add.u32"]
    assert {v.opcode for v in catalog.select(["popc"])} == {"popc"}
    both = catalog.select(["add.u32", "add.u*"])
    assert len(both) == len({v.name for v in both})
    assert both[0].name == "add.u32"
    # one unknown pattern among good ones still fails
    with pytest.raises(UnknownVariant):
        catalog.select(["add.u32", "add.u33"])


def test_select_by_class(catalog):
    fp16 = catalog.select(classes=["fp16"])
    assert fp16 and all(v.cls.split(".")[0] == "fp16" for v in fp16)
    assert [v.name for v in catalog.select(["add.*"], classes=["fp32"])] == [
        v.name for v in catalog.select(["add.*"]) if v.cls == "fp32"
    ]


# --- signatures and group expansion ----------------------------------------------------


def test_parse_signature_roles():
    d, a, b = parse_signature("d:u32 a:u32 b:u32", "t")
    assert d.written and not d.read and a.read and not a.written and b.read
    ops = parse_signature("a:u32 d!:u32", "t")
    assert [o.name for o in ops if o.written] == ["d"]
    (acc, x) = parse_signature("acc+:f32 x:f32", "t")
    assert acc.written and acc.read and x.read and not x.written


def _write(tmp_path: Path, body: str, name: str = "cat.toml") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def test_small_catalog_expands_types(tmp_path):
    p = _write(
        tmp_path,
        """
[[group]]
name = "mad.lo.{t}"
sig = "d:{t} a:{t} b:{t} c:{t}"
types = ["u32", "s64"]
class = "int"
chain = "c"
values = { b = "3" }
min_sm_by_type = { s64 = 70 }
""",
    )
    cat = load_catalog([p])
    assert [v.name for v in cat] == ["mad.lo.u32", "mad.lo.s64"]
    v = cat.get("mad.lo.s64")
    assert v.opcode == "mad" and v.type == "s64" and v.modifiers == ("lo",)
    assert v.ptx == "mad.lo.s64 {d}, {a}, {b}, {c};"
    assert v.chain_operand.name == "c"
    assert v.min_sm == 70 and cat.get("mad.lo.u32").min_sm == 50
    assert v.values == {"b": "3"}


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        pytest.param('[[group]]\nname = "x.u32"\nsig = "d:u32 a-u32"\n',
                     ["malformed operand 'a-u32'", "group[0]"], id="bad-signature-token"),
        pytest.param('[[group]]\nname = "x.u33"\nsig = "d:u33 a:u33"\n',
                     ["unknown PTX type 'u33'"], id="unknown-type"),
        pytest.param('[[group]]\nname = "x.u32"\nsig = "d:u32 a:u32 b:u32"\nptx = "x.u32 {d}, {a}, {c};"\n',
                     ["disagree", "'b'", "'c'"], id="template-signature-mismatch"),
        pytest.param('[[group]]\nname = "x.u32"\nsig = "d!:u32 e!:u32 a:u32"\n',
                     ["exactly one destination"], id="two-destinations"),
        pytest.param('[[group]]\nname = "x.u32"\nsig = "d:u32 a:u32"\nvalues = { z = "1" }\n',
                     ["unknown operand 'z'"], id="value-for-unknown-operand"),
        pytest.param('[[group]\nname = "x.u32"\n', ["not valid TOML"], id="bad-toml"),
        pytest.param('[[group]]\nname = "x.u32"\n', ["missing 'sig'"], id="missing-sig"),
        pytest.param('[[group]]\nname = "x.u32"\nsig = "d:u32 a:u32"\nchain = "d"\n',
                     ["chain operand 'd' is not a read operand"], id="chain-not-read"),
        pytest.param('[[group]]\nname = "x.u32"\nsig = "d:u32 a:u32"\n[[group]]\nname = "x.u32"\nsig = "d:u32 a:u32"\n',
                     ["duplicate variant 'x.u32'"], id="duplicate-name"),
        pytest.param('[[group]]\nname = "x.u32"\nsig = "d:u32 a:u32 a:u32"\n',
                     ["duplicate operand names"], id="duplicate-operand"),
        pytest.param('[[group]]\nname = "x.{t}"\nsig = "d:{t} a:{t}"\ntypes = []\n',
                     ["'types' must be a non-empty list"], id="empty-types"),
    ],
)
def test_malformed_catalog_raises_clear_error(tmp_path, body, needles):
    p = _write(tmp_path, body)
    with pytest.raises(CatalogError) as ei:
        load_catalog([p])
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    assert "\n" not in msg.splitlines()[0]
    assert "cat.toml" in msg  # the message names the file


def test_missing_catalog_file(tmp_path):
    with pytest.raises(CatalogError, match="cannot read catalog"):
        load_catalog([tmp_path / "absent.toml"])


def test_bad_value_spec_is_a_catalog_error():
    with pytest.raises(CatalogError, match="not a valid u32 literal"):
        bits_for("u32", "seven")
    assert bits_for("u32", "-1") == 0xFFFFFFFF
    assert bits_for("u16", "0x12345") == 0x2345
    assert bits_for("f32", "1.0") == 0x3F800000
    assert bits_for("f16x2", "1.0") == 0x3C003C00
    assert bits_for("bf16", "1.0") == 0x3F80
    assert bits_for("f64", "raw:0x7ff8000000000000") == 0x7FF8000000000000
    assert bits_for("u32", "lane:1") == 1
