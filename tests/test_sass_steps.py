"""Per-SASS steps of multi-SASS instructions (suites/instructions/studies/sass_steps.py): proxy matching on
the shipped map, the critical path and the in-order issue schedule on hand-made SASS and control
codes, the issue cost and the verdicts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpudissect.arch.limits import load_limits, parse_sass
from gpudissect.kernel.control import Control
from gpudissect.kernel.dataflow import dependence_graph
from gpudissect.kernel.region import MOVE_RE
from gpudissect.kernel.sass import parse_sass as parse_text
from gpudissect.suites.instructions.studies import sass_steps as st

MAP = Path(__file__).resolve().parents[1] / "data" / "sm_90" / "map.json.gz"


def sass(*lines: str) -> list:
    text = "\n".join(f"/*{16 * i:04x}*/ {ln} ;" for i, ln in enumerate(lines))
    return next(iter(parse_text(text).values())).instrs


def lat_of(table: dict[str, float]):
    return lambda op: (table[op], 0.0) if op in table else None


# --- proxies on the real map ---------------------------------------------------------------


@pytest.fixture(scope="module")
def records() -> list[dict]:
    if not MAP.is_file():
        pytest.skip("no shipped map")
    return json.loads(gzip.decompress(MAP.read_bytes()))


def _row(r: dict) -> dict:
    return {"variant": r["variant"], "measure": "latency", "value": 1.0, "sass": r["sass"], "cls": r["cls"],
            "flags": [f"glue: {r['glue']}"] if r.get("glue") else []}


def test_every_proxy_of_the_map_is_what_its_match_says(records):
    by = {r["variant"]: r for r in records}
    idx = st.ProxyIndex([_row(r) for r in records if r["verified"]])
    seen = {"exact": 0, "exact-with-moves": 0, "opcode-only": 0, "none": 0}
    for r in records:
        if not r["verified"] or r.get("companion") or st.is_candidate(_row(r)) is not None:
            continue
        for op, _ in parse_sass(r["sass"]):
            p = idx.find(op)
            seen[p.match] += 1
            if p.latency is None:
                continue
            ops = parse_sass(by[p.latency.variant]["sass"])
            core = [(o, c) for o, c in ops if not MOVE_RE.match(o)]
            if p.match == "exact":
                assert ops == [(op, 1.0)], (op, p)
            elif p.match == "exact-with-moves":
                assert core == [(op, 1.0)] and len(ops) > 1, (op, p)
            else:
                assert len(core) == 1 and st.base(core[0][0]) == st.base(op) and core[0][0] != op, (op, p)
    assert seen["exact"] > 0 and seen["none"] > 0  # the map has both kinds


def test_known_proxies_of_mul_lo_u64(records):
    idx = st.ProxyIndex([_row(r) for r in records if r["verified"]])
    hi = idx.find("IMAD.HI.U32")
    assert hi.match == "exact" and hi.latency.sass == "IMAD.HI.U32"
    wide = idx.find("IMAD.WIDE.U32")  # mul.wide.u32: IMAD.WIDE.U32 and a move of its glue
    assert wide.match in ("exact", "exact-with-moves") and wide.latency.sass == "IMAD.WIDE.U32"
    names = st.proxy_names(["mul.lo.u64"], records)
    assert wide.latency.variant in names and idx.find("IMAD").latency.variant in names
    assert "mul.lo.u64" not in names


def test_opcode_only_prefers_no_foreign_modifiers():
    rows = [{"variant": v, "measure": "latency", "value": 4.0, "sass": [s], "flags": []}
            for v, s in (("hi", "IMAD.HI.U32"), ("plain", "IMAD"), ("ne", "ISETP.NE.U32.AND"),
                         ("lt", "ISETP.LT.AND"))]
    idx = st.ProxyIndex(rows)
    assert idx.find("IMAD.MOV.U32").latency.variant == "plain"
    assert idx.find("ISETP.GE.U32.AND").latency.variant == "ne"
    assert idx.find("IMAD").match == "exact"
    assert idx.find("PLOP3.LUT").match == "none"


def test_unclean_results_are_no_proxies():
    rows = [{"variant": "a", "measure": "latency", "value": 4.0, "sass": ["IMAD"], "flags": ["noisy: +-9%"]},
            {"variant": "b", "measure": "latency", "value": None, "sass": ["IMAD"], "flags": []}]
    assert st.ProxyIndex(rows).find("IMAD").match == "none"


# --- critical path -------------------------------------------------------------------------


def test_critical_path_known_answer():
    ins = sass("IMAD.WIDE.U32 R2, R4, R5, RZ", "IMAD R3, R4, R7, R3", "IADD3 R8, R2, 0x1, RZ")
    p = st.critical_path(ins, lat_of({"IMAD.WIDE.U32": 9, "IMAD": 4, "IADD3": 2}))
    # IMAD reads R3, the high half of IMAD.WIDE's pair: 9 + 4; IADD3 reads R2: 9 + 2
    assert p.length == 13 and p.nodes == [0, 1] and p.finish == [9, 13, 11] and not p.missing


def test_critical_path_counts_unknown_as_zero_and_names_it():
    p = st.critical_path(sass("PLOP3.LUT P0, PT, P1, P2, PT, 0x80, 0x0", "SEL R0, R1, R2, P0"),
                         lat_of({"SEL": 4}))
    assert p.length == 4 and p.missing == {"PLOP3.LUT"}


def test_per_instance_slope_ignores_setup_and_off_chain_instructions():
    body = ["MUFU.RCP R9, R9"]  # hoisted setup at the start of the region, no step
    for _ in range(20):
        body += ["LOP3.LUT R0, R0, 0xffff, RZ, 0xc0, !PT", "PRMT R5, RZ, 0x4, R8", "IMAD R0, R0, R1, RZ"]
    ins = sass(*body)
    p = st.critical_path(ins, lat_of({"MUFU.RCP": 19, "LOP3.LUT": 4, "IMAD": 5, "PRMT": 4}))
    steps = {"LOP3.LUT": 1.0, "IMAD": 1.0}
    per, hw = p.per_instance(st.positions(ins, steps, 20))
    assert per == pytest.approx(9.0) and hw == 0.0
    # the same without an anchor (a step once per instance): the steps' count per instance
    pos = st.positions(ins, steps, 21)
    assert pos[-1] == pytest.approx(21.0)


def test_positions_anchor_on_a_step_once_per_instance():
    ins = sass("IMAD.HI.U32 R9, R9, R1, RZ",  # setup: a step's opcode outside the instances
               *["IMAD.HI.U32 R0, R0, R9, RZ", "SEL R0, R0, R2, P0"] * 3)
    assert st.positions(ins, {"IMAD.HI.U32": 1.0, "SEL": 1.0}, 3) == [0, 0, 1, 1, 2, 2, 3]


# --- issue cost and verdicts ---------------------------------------------------------------


def test_issue_cost_per_unit():
    limits = load_limits("sm_90")
    prox = {"IMAD": st.Proxy("IMAD", rate=st.Pick("m", "exact", "IMAD", 2.0, 0.0, 1)),
            "IADD3": st.Proxy("IADD3", rate=st.Pick("a", "exact", "IADD3", 2.0, 0.0, 2)),
            "MOV": st.Proxy("MOV")}
    cost, _, missing = st.issue_cost([("IMAD", 2.0), ("IADD3", 1.0), ("MOV", 1.0)], prox, limits)
    assert cost["fmaheavy"] == 1.0 and cost["alu"] == 0.5 and cost["issue"] == 4.0 / limits.issue
    assert missing == ["MOV"]


@pytest.mark.parametrize("steps,whole,incomplete,word", [
    (18.0, 18.0, [], "match"),
    (18.4, 18.0, [], "match"),  # within 0.25 + 0.25 + 0
    (21.0, 18.0, [], "steps-exceed"),
    (12.0, 18.0, [], "steps-below"),
    (12.0, 18.0, ["PLOP3.LUT"], "lower-bound"),
    (21.0, 18.0, ["PLOP3.LUT"], "steps-exceed"),  # a lower bound above the whole still exceeds it
    (None, 18.0, [], "not checked"),
    (18.0, None, [], "not checked"),
])
def test_verdict(steps, whole, incomplete, word):
    got, flags = st.verdict(steps, 0.25, whole, 0.25, 0.0, incomplete, [], "latency")
    assert got == word
    assert bool(flags) == (word != "match")
    if word in ("steps-exceed", "steps-below"):
        assert f"by {abs(steps - whole):.3g}" in flags[0]


def test_verdict_inexact_match_says_so():
    word, flags = st.verdict(8.0, 0.0, 8.0, 0.0, 0.0, [], ["IMAD.WIDE.U32"], "latency")
    assert word == "match" and flags[0].startswith("inexact:")


# --- a whole run's rows, end to end ----------------------------------------------------------


def _lat(v: str, s: list[str], value: float, i: int, **kw) -> dict:
    return {"id": i, "variant": v, "measure": "latency", "value": value, "sass": s, "flags": [], "cls": "int",
            "samples": {"slope_per_repeat": [value] * 4}, **kw}


def test_step_results_end_to_end():
    body = ["CS2R R10, SR_CLOCKLO"]
    for _ in range(40):
        body += ["LOP3.LUT R13, R2, 0xffff, RZ, 0xc0, !PT", "IMAD R2, R0, R13, RZ"]
    body += ["CS2R R12, SR_CLOCKLO"]
    text = "\n".join(f"/*{16 * i:04x}*/ {ln} ;" for i, ln in enumerate(body))
    rows = [_lat("mul.lo.u16", ["LOP3.LUT", "IMAD"], 10.0, 1, params={"lengths": [16, 40]}, sass_hash="h"),
            _lat("lop", ["LOP3.LUT"], 4.0, 2), _lat("mad", ["IMAD"], 4.0, 3),
            {"id": 4, "variant": "mad", "measure": "throughput_peak", "value": 2.0, "sass": ["IMAD"], "flags": [],
             "params": {"best": {"chains": 1, "warps": 32}}}]
    res = st.step_results(rows, {"h": text}.get, load_limits("sm_90"))
    by = {(r.measure, r.params.get("step")): r for r in res}
    assert by[(st.MEASURE, "IMAD")].params["proxy"] == "mad" and by[(st.MEASURE, "IMAD")].value == 4.0
    assert by[(st.MEASURE, "LOP3.LUT")].params["rate"] is None  # no rate for LOP3.LUT in these rows
    check = by[(st.CHECK, None)]
    assert check.value == pytest.approx(8.0)
    # no control codes: 8 along the dataflow path against a whole of 10, flagged as such
    assert check.params["latency_method"] == "dataflow" and check.statistic == st.DATAFLOW_STAT
    assert check.params["latency_verdict"] == "steps-below"
    assert check.params["latency_difference"] == pytest.approx(-2.0)
    assert any(f.startswith("no-schedule:") for f in check.flags)
    assert check.params["throughput_verdict"] == "not checked"  # the whole has no peak rate here


def test_wide_multiplies_32_bit_sources():
    wide, = sass("IMAD.WIDE.U32 R2, R2, R8, R6")
    assert st.wide_reads(wide) == {"R2", "R8", "R6", "R7"}  # R3, R9: no reads; the addend is a pair
    # mul.lo.u64's chain: IMAD.WIDE.U32 does not wait for the IMAD that writes R3 before it
    ins = sass("IMAD R3, R3, R8, RZ", "IMAD.WIDE.U32 R2, R2, R8, RZ")
    lat = lat_of({"IMAD": 4, "IMAD.WIDE.U32": 9})
    assert st.critical_path(ins, lat, narrow_wide=True).length == 9
    # the graph itself (kernel/dataflow.py, SassInstr.sources) reads the factors as 32-bit too
    assert st.critical_path(ins, lat).length == 9


# --- the in-order issue schedule -------------------------------------------------------------


def ctl(stall: int, wb: int | None = None, rb: int | None = None, waits: tuple[int, ...] = ()) -> Control:
    return Control(stall, False, wb, rb, sum(1 << b for b in waits), 0)


def test_issue_schedule_in_order_stalls():
    pairs = list(zip(sass("IADD3 R0, R1, R2, RZ", "IADD3 R3, R4, R5, RZ", "IMAD R0, R0, R3, RZ", "MOV R6, R0"),
                     [ctl(1), ctl(4), ctl(5), ctl(1)], strict=True))
    s = st.issue_schedule(pairs, lambda op: 100.0)  # no scoreboard: latencies do not enter
    assert s.issue == [0, 1, 5, 10] and s.bound == ["stall"] * 4 and not s.waits and not s.unknown


def test_issue_schedule_waits_on_a_scoreboard_for_the_measured_latency():
    pairs = list(zip(sass("MUFU.RCP R1, R0", "FADD R2, R3, R4", "FMUL R5, R1, R2", "FADD R6, R5, R5"),
                     [ctl(1, wb=0), ctl(4, rb=1), ctl(4, waits=(0, 1)), ctl(1)], strict=True))
    s = st.issue_schedule(pairs, {"MUFU.RCP": 19.0}.get)
    # FMUL: its stall says 5, MUFU.RCP's scoreboard releases at 0 + 19; the read barrier never delays
    assert s.issue == [0, 1, 19, 23] and s.bound[2] == "scoreboard" and s.waits == [(0, 2)]
    s = st.issue_schedule(pairs, lambda op: None)  # no latency: the wait counts 0, the SASS is named
    assert s.issue == [0, 1, 5, 9] and s.unknown == {"MUFU.RCP"}


def test_issue_schedule_scoreboard_counts_every_setter():
    pairs = list(zip(sass("MUFU.RCP R1, R0", "MUFU.EX2 R2, R0", "FMUL R5, R1, R2"),
                     [ctl(1, wb=0), ctl(1, wb=0), ctl(1, waits=(0,))], strict=True))
    s = st.issue_schedule(pairs, {"MUFU.RCP": 19.0, "MUFU.EX2": 30.0}.get)
    assert s.issue == [0, 1, 31] and s.waits == [(0, 2), (1, 2)]


def test_issue_schedule_follows_the_predictors_issue_rules():
    from gpudissect.predict import sched

    # one definition of the rules (issue 32): the predictor's model v1 and this schedule
    assert st.issue_gap is sched.issue_gap and st.read_release is sched.read_release
    # a stall count of 0 still waits a cycle (one issue per cycle); a read barrier released one
    # cycle after its setter's issue never holds the next instruction
    pairs = list(zip(sass("STS [R0], R1", "IADD3 R1, R2, R3, RZ", "MOV R4, R1"),
                     [ctl(0, rb=1), ctl(0, waits=(1,)), ctl(1)], strict=True))
    s = st.issue_schedule(pairs, lambda op: 30.0)
    assert s.issue == [0, 1, 2] and s.bound == ["stall"] * 3


def test_issue_schedule_holds_for_measured_latencies():
    pairs = list(zip(sass("IMAD.HI.U32 R1, R0, R2, RZ", "IADD3 R3, R1, 0x1, RZ"), [ctl(6), ctl(1)], strict=True))
    lat = {"IMAD.HI.U32": 9.0, "IADD3": 4.0}.get
    assert st.issue_schedule(pairs, lat).issue == [0, 6]
    held = st.issue_schedule(pairs, lat, st.producers([i for i, _ in pairs]))
    assert held.issue == [0, 9] and held.bound[1] == "data"


def test_producers_match_the_dependence_graph():
    ins = sass("IMAD.WIDE.U32 R2, R4, R5, RZ", "@P0 IADD3 R2, R2, 0x1, RZ", "IMAD R3, R2, R3, RZ",
               "IMAD.WIDE.U32 R6, R2, R8, R6")
    # R2 from both writers (the second is predicated); IMAD.WIDE reads R2 alone, not R3 (IMAD's)
    assert st.producers(ins) == [[], [0], [0, 1], [0, 1]]
    graph = [sorted({e.src for e in dependence_graph(ins) if e.dst == j and e.distance == 0
                     and e.reg in st.wide_reads(i)}) for j, i in enumerate(ins)]
    assert st.producers(ins) == graph


# --- the latency check on hand-made whole kernels ---------------------------------------------

def _chain_kernel(body: list[tuple[str, Control]], instances: int):
    lines = ["CS2R R10, SR_CLOCKLO"] + [ln for ln, _ in body] * instances + ["CS2R R12, SR_CLOCKLO"]
    text = "\n".join(f"/*{16 * i:04x}*/ {ln} ;" for i, ln in enumerate(lines))
    region = st.region_of(text)
    return text, list(zip(region, [c for _, c in body] * instances, strict=True))


def _check(rows: list[dict], text: str, pairs) -> object:
    res = st.step_results(rows, {"h": text}.get, load_limits("sm_90"), controls=lambda r: (pairs, ""))
    return next(r for r in res if r.measure == st.CHECK)


def test_schedule_matches_a_whole_the_dataflow_path_calls_steps_below():
    # ptxas holds IMAD 6 cycles after LOP3.LUT (its stall), where LOP3.LUT's measured latency is 4:
    # the dataflow path says 8 per instance, the whole (and ptxas's schedule) 10
    text, pairs = _chain_kernel([("LOP3.LUT R13, R2, 0xffff, RZ, 0xc0, !PT", ctl(6)), ("IMAD R2, R0, R13, RZ", ctl(4))],
                                40)
    rows = [_lat("mul.lo.u16", ["LOP3.LUT", "IMAD"], 10.0, 1, params={"lengths": [16, 40]}, sass_hash="h"),
            _lat("lop", ["LOP3.LUT"], 4.0, 2), _lat("mad", ["IMAD"], 4.0, 3)]
    check = _check(rows, text, pairs)
    p = check.params
    assert p["latency_method"] == "issue schedule" and check.statistic == st.SUM_STAT
    assert p["dataflow_latency"] == pytest.approx(8.0)  # what the old comparison used: steps-below
    assert check.value == p["path_latency"] == pytest.approx(10.0)
    assert p["latency_verdict"] == "match" and not [f for f in check.flags if f.startswith("steps-")]
    assert p["schedule_minus_dataflow"] == pytest.approx(2.0)
    assert [(e["producer"], e["consumer"], e["ptxas_cycles"], e["measured_latency"])
            for e in p["ptxas_stall_exceeds_latency"]] == [("LOP3.LUT", "IMAD", 6.0, 4.0)]
    assert not p["latency_exceeds_ptxas_stall"]
    tol = p["latency_tolerance"]  # the whole's clock tick over its shortest chain + one cycle over the fit
    assert tol["whole_resolution"] == pytest.approx(1 / 16) and 0 < tol["steps_resolution"] <= 1 / 10
    # the old method on the same row: the dataflow path, steps-below
    old = st.step_results(rows, {"h": text}.get, load_limits("sm_90"))
    assert next(r for r in old if r.measure == st.CHECK).params["latency_verdict"] == "steps-below"


def test_hardware_stall_ptxas_does_not_encode_stays_steps_below():
    # ptxas gives IMAD.HI.U32's consumer 6 cycles; its proxy measures 9, and so does the whole
    text, pairs = _chain_kernel([("IMAD.HI.U32 R2, R2, R5, RZ", ctl(6)), ("IADD3 R2, R2, 0x1, RZ", ctl(4))], 40)
    rows = [_lat("mul.hi.x", ["IMAD.HI.U32", "IADD3"], 13.0, 1, params={"lengths": [16, 40]}, sass_hash="h"),
            _lat("hi", ["IMAD.HI.U32"], 9.0, 2), _lat("add", ["IADD3"], 4.0, 3)]
    check = _check(rows, text, pairs)
    p = check.params
    assert p["path_latency"] == pytest.approx(10.0) and p["measured_holds_latency"] == pytest.approx(13.0)
    assert p["latency_verdict"] == "steps-below"
    assert [(e["producer"], e["consumer"]) for e in p["latency_exceeds_ptxas_stall"]] == [("IMAD.HI.U32", "IADD3")]
    flag = next(f for f in check.flags if f.startswith("steps-below"))
    assert "hardware stall ptxas does not encode" in flag and "IMAD.HI.U32 -> IADD3 (ptxas 6, measured 9)" in flag


def test_schedule_uses_the_measured_latency_of_a_scoreboarded_step():
    body = [("MUFU.RCP R2, R2", ctl(1, wb=0)), ("FMUL R2, R2, R4", ctl(4, waits=(0,)))]
    text, pairs = _chain_kernel(body, 40)
    rows = [_lat("rcp.x", ["MUFU.RCP", "FMUL"], 23.0, 1, params={"lengths": [16, 40]}, sass_hash="h"),
            _lat("rcp", ["MUFU.RCP"], 19.0, 2), _lat("mul", ["FMUL"], 4.0, 3)]
    p = _check(rows, text, pairs).params
    assert p["path_latency"] == pytest.approx(23.0) and p["latency_verdict"] == "match"
    assert p["scoreboarded"] == ["MUFU.RCP"] and p["scoreboarded_proxies"] == {"MUFU.RCP": "rcp"}
    # without MUFU.RCP's latency the wait counts 0: a lower bound
    p = _check([r for r in rows if r["variant"] != "rcp"], text, pairs).params
    assert p["latency_verdict"] == "lower-bound" and p["missing"] == ["MUFU.RCP"]


def test_control_codes_of_another_region_fall_back_to_the_dataflow_path():
    text, pairs = _chain_kernel([("LOP3.LUT R13, R2, 0xffff, RZ, 0xc0, !PT", ctl(6)), ("IMAD R2, R0, R13, RZ", ctl(4))],
                                40)
    rows = [_lat("mul.lo.u16", ["LOP3.LUT", "IMAD"], 10.0, 1, params={"lengths": [16, 40]}, sass_hash="h"),
            _lat("lop", ["LOP3.LUT"], 4.0, 2), _lat("mad", ["IMAD"], 4.0, 3)]
    check = _check(rows, text, pairs[:-1])
    assert check.params["latency_method"] == "dataflow"
    assert any("not of the stored region" in f for f in check.flags)


def test_whole_controls_without_the_kernel_texts_says_why():
    pairs, why = st.whole_controls({"ptx_hash": "p", "sass_hash": "s"}, {}.get, "sm_90")
    assert pairs is None and "not in the store" in why


def test_same_sass_ignores_module_wide_label_numbers():
    a = "/*0470*/ @P0 BRA `(.L_x_1612) ;\n/*0480*/ EXIT ;"
    assert st.same_sass(a, a.replace("1612", "0")) and not st.same_sass(a, a.replace("EXIT", "NOP"))


def test_conclusion_names_the_schedule_and_the_causes():
    recs = [{"measure": st.CHECK, "params": {"steps": [1], "latency_verdict": "match",
                                             "latency_method": "issue schedule"}},
            {"measure": st.CHECK, "params": {"steps": [1], "latency_verdict": "steps-below",
                                             "latency_method": "issue schedule",
                                             "latency_exceeds_ptxas_stall": [{"producer": "IMAD.HI.U32"}]}}]
    line = st.conclusion(recs)
    assert "issue schedule" in line and "match 1" in line
    assert "steps-below 1 (1 a hardware stall ptxas does not encode)" in line
    assert st.conclusion([]) is None
