"""Per-SASS steps of multi-SASS instructions (suites/instructions/steps.py): proxy matching on
the shipped map, the critical path on hand-made SASS, the issue cost and the verdicts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpudissect.bench.limits import load_limits, parse_sass
from gpudissect.kernel.region import MOVE_RE
from gpudissect.kernel.sass import parse_sass as parse_text
from gpudissect.suites.instructions import steps as st

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
    # 8 along the path against a whole of 10 (one clock tick over 16 instances of resolution)
    assert check.params["latency_verdict"] == "steps-below"
    assert check.params["latency_difference"] == pytest.approx(-2.0)
    assert check.params["throughput_verdict"] == "not checked"  # the whole has no peak rate here


def test_wide_multiplies_32_bit_sources():
    wide, = sass("IMAD.WIDE.U32 R2, R2, R8, R6")
    assert st.wide_reads(wide) == {"R2", "R8", "R6", "R7"}  # R3, R9: no reads; the addend is a pair
    # mul.lo.u64's chain: IMAD.WIDE.U32 does not wait for the IMAD that writes R3 before it
    ins = sass("IMAD R3, R3, R8, RZ", "IMAD.WIDE.U32 R2, R2, R8, RZ")
    lat = lat_of({"IMAD": 4, "IMAD.WIDE.U32": 9})
    assert st.critical_path(ins, lat, narrow_wide=True).length == 9
    assert st.critical_path(ins, lat).length == 13  # graph.py: R3 read as R2's pair
