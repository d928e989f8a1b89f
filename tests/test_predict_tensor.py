"""The tensor-core model of ``gpudissect predict`` (seed 001's model from per-SASS tensor timings),
its validation loops, and the validation section of the HTML report. GPU-free: hand-made loops
with known answers, the loops compiled here with ptxas and their SASS checked."""

from __future__ import annotations

import pytest

from gpudissect.kernel.control import Control
from gpudissect.kernel.dataflow import dependence_graph
from gpudissect.predict.bounds import predict
from gpudissect.predict.sched import region_cycles
from gpudissect.predict.tables import trusted
from gpudissect.predict.tensor_model import plan_of, tensor_timings
from tests.test_predict import _loop, _rs, _sass

MMA_LAT, MMA_INT, MMA_RATE = 24.0, 6.0, 2 / 3  # HMMA.16816.F32: latency, one warp's interval, per SM
WG_LAT, WG_INT = 76.0, 32.0  # HGMMA.64x64x16.F32 from shared memory: with a wait, chained
WG_RATE = 1 / WG_INT


def _rec(variant: str, measure: str, value: float, sass: list[str], **params) -> dict:
    return {"variant": variant, "measure": measure, "value": value, "unit": "", "flags": [], "sass": sass,
            "params": params}


def _tensor_records() -> list[dict]:
    h, g = ["HMMA.16816.F32"], ["HGMMA.64x64x16.F32"]
    return [
        _rec("mma.sync.m16n8k16.f32.f16.f32", "latency", MMA_LAT, h),
        _rec("mma.sync.m16n8k16.f32.f16.f32", "issue_interval", MMA_INT, h),
        _rec("mma.sync.m16n8k16.f32.f16.f32", "throughput_peak", MMA_RATE, h),
        _rec("wgmma.f32.f16", "latency", WG_LAT, g, a_from="shared"),
        _rec("wgmma.f32.f16", "latency", WG_LAT - 10, g, a_from="registers"),
        _rec("wgmma.f32.f16", "throughput", 1 / WG_INT, g, a_from="shared", issuers=1, accs=1),
        _rec("wgmma.f32.f16", "throughput", 1 / 99, g, a_from="shared", issuers=2, accs=4),  # not a chain
        _rec("wgmma.f32.f16", "throughput_peak", WG_RATE, g, a_from="shared"),
        # an instruction ptxas splits into two HMMA.1688.F32: the interval between them
        _rec("wmma.mma.m16n16k8.f32.tf32", "per_sass", 5.0, ["2*HMMA.1688.F32"],
             tensor_sass={"HMMA.1688.F32": 2}),
        {**_rec("mma.sync.m16n8k8.f32.f16.f32", "latency", 99.0, ["HMMA.1688.F32"]), "flags": ["noisy: x"]},
    ]


@pytest.fixture(scope="module")
def tables():
    from gpudissect.predict.tables import tables_from

    t = tables_from(_rs())
    t.tensor = tensor_timings(_tensor_records(), trusted)
    return t


def _ctl(stall: int = 1) -> Control:
    return Control(stall=stall, yield_=False, write_barrier=None, read_barrier=None, wait_mask=0, reuse=0)


def _cycles(tables, text: str, warps: int, trips: int = 256, stalls: list[int] | None = None) -> float:
    lp = _loop(_sass(text))
    body = list(lp.body)
    p = predict(lp.name, body, tables, warps)
    ctl = [_ctl(s) for s in (stalls or [1] * len(body))]
    plan = plan_of(body, tables.tensor, tables.schedulers)
    return region_cycles(p.entries, dependence_graph(body), ctl, tables.schedulers, p.warps_per_scheduler,
                         trips, 0.0, plan)


# --- the per-SASS timings ------------------------------------------------------------------------

def test_timings_from_the_tensor_records():
    t = tensor_timings(_tensor_records(), trusted)
    mma = t[("HMMA.16816.F32", None)]
    assert (mma.latency, mma.interval, mma.rate) == (MMA_LAT, MMA_INT, MMA_RATE)
    ss, rs = t[("HGMMA.64x64x16.F32", "shared")], t[("HGMMA.64x64x16.F32", "registers")]
    assert ss.latency == WG_LAT and rs.latency == WG_LAT - 10
    assert ss.interval == pytest.approx(WG_INT)  # one warpgroup, one accumulator: not the 2-issuer record
    assert rs.interval is None and rs.missing == ("interval", "rate")
    split = t[("HMMA.1688.F32", None)]  # the per-SASS interval; the noisy latency left out
    assert split.interval == 5.0 and split.latency is None


# --- mma.sync loops with known answers -----------------------------------------------------------

MMA_CHAIN = """
.L_x_0:
HMMA.16816.F32 R4, R8, R12, R4
@P0 BRA `(.L_x_0)
"""
MMA_FOUR = """
.L_x_0:
HMMA.16816.F32 R16, R8, R12, R16
HMMA.16816.F32 R20, R8, R12, R20
HMMA.16816.F32 R24, R8, R12, R24
HMMA.16816.F32 R28, R8, R12, R28
@P0 BRA `(.L_x_0)
"""


def test_mma_chain_waits_for_the_tensor_latency(tables):
    # one warp: the accumulator's previous writer + 24, whatever the (short) stall counts say
    assert _cycles(tables, MMA_CHAIN, 1) == pytest.approx(MMA_LAT, abs=0.2)
    # stall counts longer than the latency win
    assert _cycles(tables, MMA_CHAIN, 1, stalls=[20, 10]) == pytest.approx(30, abs=0.2)


def test_mma_independent_accumulators_share_the_tensor_unit(tables):
    # one warp, four accumulators: the unit takes one HMMA every schedulers / rate = 6 cycles,
    # the first accumulator is back after 24: 24 per trip
    assert _cycles(tables, MMA_FOUR, 1) == pytest.approx(max(4 * 4 / MMA_RATE, MMA_LAT), abs=0.3)
    # eight warps per scheduler: 8 x 4 x 6 cycles of the sub-partition's unit per trip
    assert _cycles(tables, MMA_FOUR, 32) == pytest.approx(8 * 4 * 4 / MMA_RATE, rel=0.01)


# --- wgmma tile loops with known answers ---------------------------------------------------------

def _wg_loop(wait: int) -> str:
    return f"""
.L_x_0:
WARPGROUP.ARRIVE
HGMMA.64x64x16.F32 R24, gdesc[UR4], R24
HGMMA.64x64x16.F32 R24, gdesc[UR8], R24
HGMMA.64x64x16.F32 R24, gdesc[UR12], R24
HGMMA.64x64x16.F32 R24, gdesc[UR16], R24, gsb0
WARPGROUP.DEPBAR.LE gsb0, {wait:#x}
@P0 BRA `(.L_x_0)
"""


def test_wgmma_plan_reads_groups_and_waits(tables):
    body = list(_loop(_sass(_wg_loop(1))).body)
    plan = plan_of(body, tables.tensor, tables.schedulers)
    assert plan is not None and plan.asynchronous == {1, 2, 3, 4} and plan.closes_group == {4}
    assert plan.depbar == {5: 1} and plan.latency[4] == WG_LAT and plan.unit_interval[1] == pytest.approx(WG_INT)
    assert plan.missing == {}
    assert plan_of(list(_loop(_sass(MMA_CHAIN.replace("HMMA.16816.F32", "FFMA"))).body), tables.tensor, 4) is None


def test_wgmma_tile_loop_one_warpgroup(tables):
    # wait_group 0: the four wgmma enter the SM's unit 32 cycles apart, the group is done 76 after
    # the last entered; then DEPBAR and the branch: 3 x 32 + 76 + 1 (arrive) + 1 (DEPBAR) + 1 (branch)
    assert _cycles(tables, _wg_loop(0), 4) == pytest.approx(3 * WG_INT + WG_LAT + 3, abs=0.5)
    # wait_group 1: a group stays in flight, the unit binds: 4 x 32 per trip
    assert _cycles(tables, _wg_loop(1), 4) == pytest.approx(4 * WG_INT, rel=0.01)


def test_wgmma_warpgroups_share_the_sm_unit(tables):
    # two warpgroups (one warp of each per scheduler): 2 x 4 x 32 > 3 x 32 + 76 + 3
    assert _cycles(tables, _wg_loop(0), 8) == pytest.approx(2 * 4 * WG_INT, rel=0.01)


# --- the validation loops, compiled here ---------------------------------------------------------

def _build(specs):
    from gpudissect.arch.target import make_target
    from gpudissect.kernel.toolchain import ToolchainMissing
    from gpudissect.predict.measure import build_all

    t = make_target("sm_90")
    try:
        return build_all(specs, t.arch, t.ptx_isa, t.for_features(specific=True))
    except ToolchainMissing as e:
        pytest.skip(str(e))


def test_wgmma_loops_build_and_their_sass_is_the_model_s():
    from gpudissect.predict.tensor_loops import K_STEPS, wgmma_gemm, wgmma_loop
    from gpudissect.predict.validate import loop_body

    specs = [wgmma_gemm(), wgmma_loop(64)]
    built = _build(specs)
    for s, wait in zip(specs, (1, 0), strict=True):
        got = built[s.name]
        assert not isinstance(got, str), got
        b, rec = got
        assert ".target sm_90a" in b.kernel.ptx
        body, controls = loop_body({"name": s.name, "loop": rec})
        hg = [i for i in body if i.opcode == "HGMMA"]
        assert len(hg) == K_STEPS and all(i.operands[1].startswith("gdesc") for i in hg)
        plan = plan_of(body, {}, 4)
        assert plan is not None and len(plan.closes_group) == 1 and list(plan.depbar.values()) == [wait]
        assert set(plan.missing) == {hg[0].full}  # empty tables: named as missing, not invented
        assert len(controls) == len(body)


def test_mma_loops_build_with_one_tensor_sass_per_mma():
    from gpudissect.predict.tensor_loops import MMA_LOOPS, mma_ldsm_loop, mma_loop
    from gpudissect.predict.validate import loop_body

    specs = [mma_loop(n, c) for n, c in MMA_LOOPS] + [mma_ldsm_loop()]
    assert len({n.split(".")[2] for n, _ in MMA_LOOPS}) >= 3 and len({n for n, _ in MMA_LOOPS}) >= 5
    built = _build(specs)
    for s in specs:
        got = built[s.name]
        assert not isinstance(got, str), got
        body, _ = loop_body({"name": s.name, "loop": got[1]})
        n_mma = sum(ln.lstrip().startswith("mma.sync") for ln in s.body)
        assert sum(1 for i in body if i.opcode in ("HMMA", "IMMA", "DMMA")) == n_mma
        # the operands come from memory: no constant is rematerialised into them inside the loop
        assert not any(i.opcode in ("MOV", "IMAD") and "MOV" in i.full for i in body), s.name


# --- the validation analysis and the HTML section ------------------------------------------------

def _synthetic_validation() -> dict:
    from gpudissect.predict.validate import table_of

    rows = []
    for k, (cat, meas, model) in enumerate((("generated", 10.0, 11.0), ("generated", 20.0, 20.0),
                                           ("sgemm", 40.0, 44.0), ("wgmma_gemm", 256.0, 255.8),
                                           ("tensor_mma", 29.0, 30.0), ("tensor_wgmma", 190.0, 187.0))):
        r = {"loop": f"pv_{k}", "category": cat, "point": "1", "warps": 1, "measured": meas, "model": model,
             "bounds": meas * 2, "sum_latency": meas * 3, "max_pipe": meas / 2}
        if cat in ("wgmma_gemm", "tensor_mma", "tensor_wgmma"):
            r["tensor_missing"] = {}
        rows.append(r)
    return {"schema": "gpudissect.predict-validation/1", "gpu": {"name": "Fake GPU", "uuid": "u-1"},
            "loops": [{"name": r["loop"]} for r in rows],
            "analysis": {"rows": rows, "stats": table_of(rows), "calibration": {"branch_cycles": 5.0},
                         "errors": ["pv_x: loop: none"]}}


def test_groups_keep_tensor_loops_apart():
    from gpudissect.predict.validate import tensor_lines

    stats = _synthetic_validation()["analysis"]["stats"]
    assert stats["tensor-model"]["model"]["n"] == 2 and stats["handwritten"]["model"]["n"] == 2
    assert stats["generated"]["model"]["mape"] == pytest.approx(0.05)
    assert stats["tensor_wgmma"]["model"]["mape"] == pytest.approx(3 / 190)
    lines = tensor_lines(_synthetic_validation()["analysis"]["rows"])
    assert len(lines) == 2 + 3 and "+3.4%" in lines[-2]


def test_html_section_renders_the_validation(tmp_path):
    from gpudissect.report.assemble.html import render_html

    rs = _rs()
    rs.source = str(tmp_path)  # no figure beside it: drawn from the rows
    rs.validation = _synthetic_validation()
    html = render_html(rs)
    sec = html[html.index('<section id="validation">'):]
    sec = sec[:sec.index("</section>")]
    assert "How well the tables predict real code" in sec and 'href="#validation"' in html
    assert 'id="validation-errors"' in sec and 'id="validation-tensor"' in sec
    assert sec.count("<tr>") >= 1 + len(_synthetic_validation()["analysis"]["stats"]) + 1 + 3
    assert "5.0%" in sec and "+3.4%" in sec and "data:image/png;base64," in sec
    assert "pv_x: loop: none" in sec and "5.00 cycles from its issue" in sec
    rs.validation = None
    assert 'id="validation"' not in render_html(rs)


def test_only_selects_sets_and_refuses_unknown_names(tmp_path):
    from gpudissect.predict import PredictError
    from gpudissect.predict.validate import validation_specs

    specs, picked = validation_specs(tmp_path, 0, 1, ("tensor-model", "wgmma_gemm"))
    assert picked == []
    cats = {s.category for s in specs}
    assert cats == {"tensor_mma", "tensor_wgmma", "wgmma_gemm", "calibration"}
    assert "sgemm" not in cats and all(s.arch_specific for s in specs if "wgmma" in s.category)
    with pytest.raises(PredictError, match="unknown nope"):
        validation_specs(tmp_path, 0, 1, ("nope",))
