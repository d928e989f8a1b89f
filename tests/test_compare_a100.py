"""The A100 comparison compares like with like (issue 22): every figure of the seed-000
reference carries its method (data in reference_a100.json), and each row sets it against the
H100 measurement of the same method, or says why the methods differ and which H100 figure is
the closest."""

from __future__ import annotations

from gpudissect.report.assemble import compare as cmp
from gpudissect.report.read.results import load_reference

REF = load_reference("a100")


def test_every_reference_figure_names_its_method():
    methods = REF["methods"]
    t = REF["tables"]
    assert set(t["II"]["methods"]) == {"dependent_cpi", "independent_cpi"}
    assert t["II"]["methods"]["dependent_cpi"] == "dependent"
    assert t["V"]["method"] == "table_v" and t["III"]["method"] in methods
    for name in (*t["II"]["methods"].values(), t["V"]["method"]):
        m = methods[name]
        assert m["seed"] and m["compare_with"]
        assert m["compare_with"][0]["same_method"]  # the same method is tried first
        assert all(c["same_method"] or c["why"] for c in m["compare_with"])  # a difference says why
    for row in t["IV"]["rows"]:
        assert row["method"] and row["compare_with"]
        assert all(c["why"] for c in row["compare_with"])
    # Table V's cycles are its independent figures: they equal Table II's independent column
    v = {var: r.get("cycles") for r in t["V"]["rows"] for var in r.get("variants") or []}
    assert all(v[r["ptx"]] == r["independent_cpi"] != r["dependent_cpi"] for r in t["II"]["rows"])


def rows_by_key(m: dict[str, cmp.Value]) -> dict[str, cmp.Row]:
    return {r.key: r for r in cmp.compare_maps([m, cmp.reference_values(REF)])}


def test_table_v_meets_independent_issue_and_table_ii_dependent_meets_the_chain():
    m = {"instr/fma.rn.f32/independent": cmp.Value(1.0, "cycles", "one warp, 8 independent chains"),
         "instr/fma.rn.f32/latency": cmp.Value(4.0, "cycles", ""),
         "instr/add.u32/latency": cmp.Value(5.0, "cycles", ""),
         "instr/add.u32/independent": cmp.Value(1.0, "cycles", "")}
    rows = rows_by_key(m)
    fma = rows["instr/fma.rn.f32/independent"]
    assert fma.b.value == 2 and "Table V row V.72" in fma.b.note and "same method" in fma.b.note
    assert "instr/fma.rn.f32/latency" not in rows  # Table V is not a dependent-chain latency
    add = rows["instr/add.u32/latency"]
    assert add.b.value == 4 and "CPI for dependent" in add.b.note and "same method" in add.b.note
    ind = rows["instr/add.u32/independent"]
    assert ind.b.value == 2 and "CPI for independent" in ind.b.note and "also Table V row V.3" in ind.b.note


def test_without_the_same_method_the_row_says_why_and_takes_the_closest():
    m = {"instr/fma.rn.f32/latency": cmp.Value(4.0, "cycles", ""),
         "instr/add.u32/latency": cmp.Value(5.0, "cycles", "")}  # no independent-issue figures
    rows = rows_by_key(m)
    fma = rows["instr/fma.rn.f32/latency"]
    assert fma.b.value == 2 and "METHODS DIFFER" in fma.b.note and "closest" in fma.b.note
    # Table II's independent figure falls back too, but never displaces the dependent one
    add = rows["instr/add.u32/latency"]
    assert add.b.value == 4 and "same method" in add.b.note


def test_memory_rows_pick_the_level_and_load_of_the_seeds_method():
    m = {"quantity/cv_latency": cmp.Value(282.0, "cycles", ""),
         "quantity/dram_latency": cmp.Value(679.0, "cycles", ""),
         "quantity/l1_latency": cmp.Value(32.5, "cycles", ""),
         "quantity/smem_st_latency": cmp.Value(8.5, "cycles", ""),
         "quantity/smem_st_roundtrip": cmp.Value(5.0, "cycles", "")}
    rows = rows_by_key(m)
    cv = rows["quantity/cv_latency"]  # seed Table IV 'Global memory': a .cv chase
    assert cv.b.value == 290 and "METHODS DIFFER" in cv.b.note
    assert "measured beside it: quantity/dram_latency 679" in cv.b.note
    assert "quantity/dram_latency" not in rows  # the random-chain DRAM level is not the seed's quantity
    assert "same method" in rows["quantity/l1_latency"].b.note
    st = rows["quantity/smem_st_latency"]
    assert st.b.value == 19 and "same method" in st.b.note and "smem_st_roundtrip 5" in st.b.note


def test_alignment_is_idempotent_and_leaves_measured_sets_alone():
    m = {"instr/fma.rn.f32/independent": cmp.Value(1.0, "cycles", "")}
    once = cmp.align_methods([m, cmp.reference_values(REF)])
    twice = cmp.align_methods(once)
    assert once[0] is m and twice[1] == once[1]
    assert all(not v.candidates for v in once[1].values())


def test_markdown_lists_the_methods():
    from gpudissect.report.read.results import load_result_set

    sets = [load_result_set("a100"), load_result_set("a100")]
    md = cmp.comparison_markdown(sets, [], 0.1)
    for name, m in REF["methods"].items():
        assert f"* `{name}`: {m['seed']}" in md
