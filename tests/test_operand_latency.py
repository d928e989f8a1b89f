"""Per-operand latency (issue 19) and instruction configurations (issue 22) of the instructions
suite: the data table decides what is measured, the kernels of each operand carry the chain
through that operand's SASS slot (real ptxas + nvdisasm, no GPU), chains that ptxas breaks or
folds are rejected, and the analysis on synthetic timings (FakeDevice) gives known answers."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from gpudissect.arch.target import make_target
from gpudissect.catalog.model import load_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Result
from gpudissect.suites.instructions import own_sass
from gpudissect.suites.instructions.checks import Sample
from gpudissect.suites.instructions.core import measure_work
from gpudissect.suites.instructions.studies.guarded import check_guarded, config_measures
from gpudissect.suites.instructions.studies.operand_latency import (
    OperandSpec,
    chain_slots,
    check_operand_flow,
    operand_companion_removed,
    operand_specs,
)
from gpudissect.suites.instructions.suite import Plan, prepare_works
from gpudissect.suites.instructions.verify import autoverify_many

PLAN = Plan(tp_min_length=0, latency_units=(32, 64, 96), tp_chains=(1,), tp_units=(64, 128), tp_warps=(4,),
            distances=(2,), distance_units=(32, 64), reps=3, launches=1)

TABLE = """
[operand_latency]
strategies = {strategies}
equivalent = [["IADD3", "IMAD.IADD", "VIADD"]]
[[operand_latency.set]]
variants = ["fma.rn.f32"]
operands = "all"
sass_slots = {{ 3 = [2] }}
[[operand_latency.set]]
variants = ["prmt.b32", "min.u32"]
operands = "all"
[[operand_latency.set]]
variants = ["lop3.*"]
operands = [2]
[operand_latency.glue_sass]
"r>p" = ["ISETP"]
[configurations]
measures = ["latency_guarded_true", "latency_guarded_false"]
[[configurations.set]]
variants = ["fma.rn.f32", "lop3.b32"]
"""


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Point the operand module at a table of the test's own (``strategies`` list as TOML)."""

    def use(strategies: str = '["reg"]') -> None:
        f = tmp_path / "strategies.toml"
        f.write_text(TABLE.format(strategies=strategies))
        monkeypatch.setattr(own_sass, "STRATEGY_FILE", f)

    return use


@pytest.fixture(scope="module")
def sm90():
    return make_target("sm_90", "13.0")


def prepared(names: list[str], target):
    cat = load_catalog()
    vs = [cat.get(n) for n in names]
    recs = autoverify_many(vs, target, jobs=1)
    return {w.variant.name: w for w in prepare_works(vs, recs, target, PLAN, jobs=1)}


def ops(w) -> dict[str, object]:
    return {f.measure: f for f in w.families if f.operand is not None}


# --- the data table ------------------------------------------------------------------------


def test_table_decides_variants_and_operands(table):
    table()
    cat = load_catalog()
    assert [(s.index, s.name, s.slots) for s in operand_specs(cat.get("fma.rn.f32"))] == [
        (1, "a", None), (2, "b", None), (3, "c", (2,))]
    assert [s.index for s in operand_specs(cat.get("lop3.b32"))] == [2]
    assert operand_specs(cat.get("add.f32")) == []  # not in the table: nothing extra
    assert config_measures(cat.get("lop3.b32")) == ["latency_guarded_true", "latency_guarded_false"]
    assert config_measures(cat.get("prmt.b32")) == []
    bad = TABLE.format(strategies='["reg"]').replace("operands = [2]", "operands = [7]")
    with pytest.raises(ValueError, match="operand 7 does not exist"):
        operand_specs(cat.get("lop3.b32"), bad)


# --- SASS data flow on hand-written SASS ---------------------------------------------------


def _fam(sass, make, lengths=(4, 8)):
    return [Sample(units=n, length=n, region=sass(*make(n))) for n in lengths]


def test_chain_slots_follow_the_register_written_in_the_region(sass):
    region = sass("FFMA R4, R0, R1, R4", "FFMA R4, R0, R1, R4", "FFMA R4, R4, R1, R2")
    assert chain_slots(region) == {("FFMA", 2): 1, ("FFMA", 0): 1}  # the first reads a loaded R4


def test_operand_flow_accepts_one_slot_and_rejects_two_or_a_wrong_one(sass):
    own = {"FFMA": Fraction(1)}
    spec = OperandSpec(3, "c", (2,))
    good = _fam(sass, lambda n: ["FFMA R4, R0, R1, R4"] * n)
    assert check_operand_flow(good, spec, own, {"FFMA": Fraction(1)}, None, {}) == (None, {"FFMA": [2]})
    twice = _fam(sass, lambda n: ["FFMA R4, R4, R1, R4"] * n)  # the chain in two slots
    why, _ = check_operand_flow(twice, spec, own, {"FFMA": Fraction(1)}, None, {})
    assert why and "not one slot" in why
    wrong = _fam(sass, lambda n: ["FFMA R4, R4, R1, R2"] * n)  # slot 0: not the addend
    why, _ = check_operand_flow(wrong, spec, own, {"FFMA": Fraction(1)}, None, {})
    assert why and "not the intended [2]" in why
    changed = _fam(sass, lambda n: ["FFMA R4, R0, R1, R4", "FADD R4, R4, R0"] * n)
    why, _ = check_operand_flow(changed, spec, own, {"FFMA": Fraction(1), "FADD": Fraction(1)}, None, {})
    assert why and "SASS changed" in why


def test_guard_check_counts_predicated_instances(sass):
    own = {"FFMA": Fraction(1)}
    assert check_guarded(_fam(sass, lambda n: ["@P1 FFMA R4, R0, R4, R5"] * n), own) == (
        None, {"guard_form": "predicated"})


def test_guard_check_follows_a_commit_through_selects_and_predicated_moves(sass):
    own = {"FFMA": Fraction(1)}
    conv = _fam(sass, lambda n: ["FFMA R6, R0, R4, R5", "SEL R4, R6, R4, P1"] * n)  # if-converted
    assert check_guarded(conv, own) == (None, {"guard_form": "commit", "guard_commit": {"SEL": 1.0},
                                               "guard_own_predicated": 0.0})
    # a predicate the instance computes (P2) is not the guard; the guard (P1) lands the result
    inner = _fam(sass, lambda n: ["FSETP.GEU.AND P2, PT, R4, R5, PT", "@!P2 FFMA R6, R0, R4, R5",
                                  "@P1 MOV R4, R6"] * n)
    why, info = check_guarded(inner, own)
    assert why is None and info["guard_commit"] == {"@MOV": 1.0}
    # nothing depends on the guard: no form of it
    lost = _fam(sass, lambda n: ["FFMA R4, R0, R4, R5"] * n)
    why, _ = check_guarded(lost, own)
    assert why and "no one guard" in why
    # the guard lands one result after the chain, not each instance's: not a guarded chain
    once = _fam(sass, lambda n: ["FFMA R4, R0, R4, R5"] * n + ["@P1 MOV R7, R4"])
    why, _ = check_guarded(once, own)
    assert why and "0 instructions per instance depend on it" in why
    # a branch around the instance is not a guarded instruction
    jump = _fam(sass, lambda n: ["@!P1 BRA 0x100", "FFMA R4, R0, R4, R5"] * n)
    why, _ = check_guarded(jump, own)
    assert why and "branches around" in why
    # selp: the variant's own SEL chooses by its operand (P1), the guard (P2) predicates it
    selp = _fam(sass, lambda n: ["@P2 SEL R19, R19, R0, P1"] * n)
    assert check_guarded(selp, {"SEL": Fraction(1)}) == (None, {"guard_form": "predicated"})
    assert "no one guard" in check_guarded(_fam(sass, lambda n: ["SEL R19, R19, R0, P1"] * n),
                                           {"SEL": Fraction(1)})[0]  # no guard at all
    # a step predicated by a loop-invariant predicate beside the guard's select: refused, not
    # taken for the commit
    inv = _fam(sass, lambda n: ["@!P3 LOP3.LUT R6, R4, R5, RZ, 0x3c, !PT", "SEL R4, R6, R4, P1"] * n)
    why, _ = check_guarded(inv, {"LOP3.LUT": Fraction(1)})
    assert why and "2 predicates" in why
    # two predicates from outside the region guard: which one is the guard cannot be told
    two = _fam(sass, lambda n: ["FFMA R6, R0, R4, R5", "SEL R4, R6, R4, P1", "@P3 MOV R7, R4"] * n)
    why, _ = check_guarded(two, own)
    assert why and "2 predicates" in why


# --- real ptxas: the chain goes through the intended SASS slot ----------------------------


def test_each_operand_kernel_carries_the_chain_through_its_slot(table, sm90):
    table()
    w = prepared(["fma.rn.f32", "prmt.b32"], sm90)
    fma, prmt = ops(w["fma.rn.f32"]), ops(w["prmt.b32"])
    assert fma["latency_operand_1"].alias == "latency"  # the variant's own chain: same kernels
    assert fma["latency_operand_2"].error is None and fma["latency_operand_2"].slots == {"FFMA": [1]}
    assert fma["latency_operand_3"].error is None and fma["latency_operand_3"].slots == {"FFMA": [2]}
    # prmt d, a, b, c is PRMT Rd, Ra, Rc, Rb in SASS: the data flow finds the selector's slot
    assert prmt["latency_operand_2"].slots == {"PRMT": [2]}
    assert prmt["latency_operand_3"].slots == {"PRMT": [1]}
    for f in (fma["latency_operand_3"], prmt["latency_operand_3"]):
        ptx = f.kernels[0].entry
        assert re.search(r"ld\.global\.b32 %r\d+, \[%in\+\d+\]", ptx)  # others loaded, no immediates


def test_a_chain_ptxas_folds_is_rejected_and_a_companion_rescues_it(table, sm90):
    table('["reg"]')
    w = prepared(["min.u32"], sm90)
    f = ops(w["min.u32"])["latency_operand_2"]
    assert f.error and "folded" in f.error  # min(min(x, b), b) = min(x, b)
    table('["reg", "companion"]')
    w = prepared(["min.u32"], sm90)
    f = ops(w["min.u32"])["latency_operand_2"]
    assert f.error is None and f.strategy == "companion" and f.slots


def test_guarded_families_keep_the_predicate_or_are_rejected(table, sm90):
    table()
    w = prepared(["fma.rn.f32", "lop3.b32"], sm90)
    g = {f.measure: f for f in w["fma.rn.f32"].families if f.measure.startswith("latency_guarded")}
    assert set(g) == {"latency_guarded_true", "latency_guarded_false"}
    assert all(f.error is None for f in g.values())
    assert "@%p" in g["latency_guarded_false"].kernels[0].entry
    lop = [f for f in w["lop3.b32"].families if f.measure.startswith("latency_guarded")]
    assert {f.info["guard_form"] for f in g.values()} == {"predicated"}
    for f in lop:  # ptxas computes a guarded LOP3 unguarded and lands it under the guard
        assert f.error is None and f.info["guard_form"] == "commit", f.error
        assert sum(f.info["guard_commit"].values()) >= 1


# --- the analysis on synthetic timings ------------------------------------------------------


def test_operand_latencies_from_synthetic_timings(table, sm90):
    table()
    w = prepared(["fma.rn.f32"], sm90)["fma.rn.f32"]
    per = {"_o2_": 5.0, "_o3_": 3.0, "_gt_": 4.0, "_gf_": 6.0}

    def model(kernel: str, chains: int, length: int, warps: int) -> float:
        lat = next((c for tag, c in per.items() if tag in kernel), 4.0)
        return 100 + lat * length

    out = measure_work(FakeDevice(model), w, PLAN, sm90)
    got = {r.measure: r for r in out.results}
    assert got["latency"].value == pytest.approx(4.0)
    assert got["latency_operand_1"].value == pytest.approx(4.0)
    assert got["latency_operand_1"].params["same_kernels_as"] == "latency"
    assert got["latency_operand_2"].value == pytest.approx(5.0)
    assert got["latency_operand_3"].value == pytest.approx(3.0)
    assert got["latency_operand_3"].params["sass_slots"] == {"FFMA": [2]}
    assert got["latency_operand_3"].params["operand"] == 3
    assert got["latency_guarded_true"].value == pytest.approx(4.0)
    assert got["latency_guarded_false"].value == pytest.approx(6.0)
    assert got["latency_guarded_false"].params["guard"] is False
    assert "cycles_per_repeat" in got["latency_operand_2"].samples


def test_companion_removed_from_an_operand_chain():
    v = load_catalog().get("min.u32")
    pair = {"variant": v.name, "measure": "latency_operand_2_with_companion", "value": 9.0,
            "strategy": "companion", "flags": ["companion: xor.b32 {o}, {o}, {k};"], "sass": ["VIMNMX.U32", "LOP3.LUT"],
            "params": {"operand": 2, "operand_name": "b", "sass_slots": {"VIMNMX.U32": [1]}}}
    lat = {"lop3.b32": {"value": 4.0, "flags": [], "measure": "latency"}}
    r = operand_companion_removed(v, pair, lat)
    assert isinstance(r, Result) and r.measure == "latency_operand_2" and r.value == pytest.approx(5.0)
    assert r.params["companion"] == {"variant": "lop3.b32", "latency": 4.0}
    assert r.sass == ["VIMNMX.U32"]  # the companion's SASS taken out
    slow = operand_companion_removed(v, {**pair, "value": 3.5}, lat)
    assert slow.value is None and "not slower" in slow.flags[-1]
    noisy = operand_companion_removed(v, pair, {"lop3.b32": {**lat["lop3.b32"], "flags": ["noisy: x"]}})
    assert noisy.value is None and "not clean" in noisy.flags[-1]


def test_a_run_stores_operand_latencies_with_the_companion_removed(table, sweep, tmp_path):
    """Through the one runner: min.u32's operand chains need the XOR companion (reg folds);
    finish() stores the pair and the operand's own latency, the companion's (lop3.b32, same
    run) subtracted."""
    from gpudissect.store.db import Store

    table('["reg", "companion"]')
    lat = {"v1_": 3.0, "_o1": 7.0, "_o2": 8.0}  # v1: lop3.b32, the second item

    def model(kernel: str, chains: int, length: int, warps: int) -> float:
        return 50 + length * next((c for tag, c in lat.items() if tag in kernel), 2.0)

    from gpudissect.suites.instructions.core import QUICK_PLAN
    from gpudissect.suites.instructions.studies import operand_latency
    from gpudissect.suites.instructions.suite import InstructionsSuite

    store = Store(tmp_path / "o.db")
    # the quick plan's small axes in a full run (a quick run leaves the operand latencies out)
    suite = InstructionsSuite(full=QUICK_PLAN, studies=(operand_latency.STUDY,))
    sweep(FakeDevice(model), store, ["min.u32", "lop3.b32"], suite=suite, quick=False)
    rows = {(r["variant"], r["measure"]): r for r in store.results(store.runs()[-1]["id"])}
    assert rows[("min.u32", "latency_operand_2_with_companion")]["value"] == pytest.approx(8.0)
    own = rows[("min.u32", "latency_operand_2")]
    lop = rows[("lop3.b32", "latency")]["value"]
    assert own["value"] == pytest.approx(8.0 - lop)
    assert own["params"]["companion"]["variant"] == "lop3.b32"
