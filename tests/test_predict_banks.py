"""predict/banks.py: the register-bank rule the behaviour suite measured, applied by model v1 to
a loop's instructions (costs of same-bank sources, the reuse cache, the switch in predict.toml)."""

from __future__ import annotations

from pathlib import Path

from test_predict import _sass, tables  # noqa: F401 - the fixture

from gpudissect.kernel.sass import parse_sass
from gpudissect.predict import loop_model as lm
from gpudissect.predict.banks import BankRule, bank_extras, bank_rule
from gpudissect.predict.tables import load_tables

RULE = BankRule(2, 1.0, "test")
OPS = ("FFMA",)


def _body(text: str):
    return parse_sass(_sass(text))["k"].instrs


def test_sources_in_one_bank_cost_an_extra_cycle_each_and_the_reuse_cache_reads_for_free():
    body = _body("""
FFMA R6, R0, R2, R4
FFMA R7, R1, R2, RZ
FFMA R8, R0.reuse, R3, R5
FFMA R9, R0, R2, R4
DFMA R10, R0, R2, R4
""")
    extra = bank_extras(body, RULE, OPS + ("DFMA",))
    # three even registers: two extra reads; R1/R2 two banks; R3/R5 one odd bank (R0 is cached only
    # after it); R0 from the cache (the FFMA before flagged it in slot a): R2, R4 one bank; a wide
    # operand (DFMA) is left out
    assert extra == {0: 2.0, 2: 1.0, 3: 1.0}
    assert bank_extras(body, BankRule(4, 0.5, "t"), OPS) == {0: 0.5}  # mod 4: only R0 and R4 collide


def test_the_rule_comes_from_the_banks_record_and_needs_one_modulus():
    rec = {"variant": "banks:ffma", "value": 2.0, "fit": {"rule": "bank = register index mod 2", "conflict_cycles": 1.0}}
    r = bank_rule([rec])
    assert (r.banks, r.extra) == (2, 1.0)
    assert bank_rule([{**rec, "fit": {"rule": None, "conflict_cycles": 1.0}}]) is None
    assert bank_rule([]) is None


def test_the_shipped_h200_set_holds_a_rule_and_the_model_applies_it_only_where_switched_on(tables, monkeypatch):  # noqa: F811
    t = load_tables(Path(__file__).parents[1] / "data" / "h200")
    assert t.banks is not None and t.banks.banks >= 2 and t.banks.extra > 0
    body = _body("""
FFMA R6, R0, R2, R4
FFMA R7, R0, R2, R4
FFMA R8, R0, R2, R4
FFMA R9, R0, R2, R4
""")
    tables.banks = RULE
    off = lm.loop_model("k", body, tables, 1)
    assert off.plan is None or not off.plan.operand_cycles  # predict.toml: apply = false
    monkeypatch.setattr(lm, "bank_opcodes", lambda arch: OPS)
    on = lm.loop_model("k", body, tables, 1)
    assert on.plan.operand_cycles == {j: 2.0 for j in range(4)}
    assert on.cycles(None, tables, 64, 0.0) > off.cycles(None, tables, 64, 0.0)
