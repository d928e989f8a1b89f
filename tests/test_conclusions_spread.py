""""The same" in the instruction suite's conclusions rests on the records' own spread (the 95%
interval of each value from its repeats, floored at one clock cycle over the span of the chain
lengths), never on a fixed threshold: signed against unsigned (conclusions.py) and value classes
(values.py). Synthetic records; no GPU."""

from __future__ import annotations

import math

import pytest

from gpudissect.bench.stats import robust_halfwidth
from gpudissect.suites.instructions.conclusions import signedness, signedness_lines
from gpudissect.suites.instructions.studies import value_classes as V

XS = [32.0, 64.0, 96.0, 128.0]  # chain lengths: one cycle over their span is 1/96 cycle per instance
WIDE = (-1.0, 0.0, 1.0, -1.0, 0.0, 1.0)  # repeats +-1: a 95% half-width of about 1.49
TIGHT = (0.0,) * 6  # identical repeats: the half-width is the resolution floor alone


def lat(variant, value, spread=TIGHT, *, fit=True, measure="latency", **params):
    return dict(variant=variant, measure=measure, value=value, flags=[], sass=["IMNMX"], params=params,
                fit={"slope": value, "xs": XS} if fit else None,
                samples=None if spread is None else {"slope_per_repeat": [value + d for d in spread]})


def peak(variant, value, chains=4, warps=8, **params):
    return dict(variant=variant, measure="throughput_peak", value=value, flags=[], sass=["IMNMX"],
                params={"best": {"chains": chains, "warps": warps}, **params}, fit=None, samples=None)


def tp(variant, value, spread, chains=4, warps=8):
    """A throughput configuration: rate warps*chains/slope, its repeats spread by ``spread``."""
    return dict(variant=variant, measure="throughput", value=value, flags=[], sass=["IMNMX"],
                params={"chains": chains, "warps": warps}, fit={"slope": warps * chains / value, "xs": [128.0, 256.0]},
                samples={"rate_per_repeat": [value * (1 + d) for d in spread]})


def row(recs):
    (r,) = signedness(recs)
    return r


# --- uncertainty of one record ---------------------------------------------------------------

def test_uncertainty_is_the_repeats_interval_floored_at_the_clock_resolution():
    wide = lat("a.s32", 8.0, WIDE)
    assert V.uncertainty(wide) == pytest.approx(robust_halfwidth([8 + d for d in WIDE]))
    assert V.uncertainty(lat("a.s32", 8.0, TIGHT)) == pytest.approx(1 / 96)  # one cycle over 32..128
    assert V.uncertainty(lat("a.s32", 8.0, TIGHT, fit=False)) == 0.0  # no fit: no floor to state
    assert V.uncertainty(lat("a.s32", 8.0, None)) is None  # no repeats: no interval
    assert V.uncertainty(lat("a.s32", 8.0, (0.0,))) is None  # one repeat gives no spread


def test_same_within_the_difference_interval():
    assert V.same_within(8.0, 0.1, 8.1, 0.1) is True
    assert V.same_within(8.0, 0.1, 8.2, 0.1) is False  # 0.2 > hypot(0.1, 0.1)
    assert V.same_within(8.0, None, 8.0, 0.1) is None


def test_companion_removed_latency_takes_the_pair_and_the_companion_intervals():
    ref = lat("lop3.b32", 2.0, WIDE)
    pair = lat("min.s64", 10.0, TIGHT, measure="latency_with_companion")
    own = lat("min.s64", 8.0, None, fit=False, pair=10.0, companion={"variant": "lop3.b32", "latency": 2.0})
    idx = V.index([ref, pair, own])
    assert V.uncertainty(own) is None  # alone it has no repeats
    assert V.uncertainty(own, idx) == pytest.approx(math.hypot(V.uncertainty(ref), 1 / 96))


def test_peak_throughput_takes_its_best_configuration_interval_scaled():
    conf = tp("add.f32", 2.0, (-0.01, 0, 0.01, -0.01, 0, 0.01))
    other = tp("add.f32", 1.0, WIDE, chains=1)  # another configuration: not the peak's
    u = V.uncertainty(conf)
    idx = V.index([conf, other])
    assert V.uncertainty(peak("add.f32", 2.0), idx) == pytest.approx(u)
    halved = peak("x.f32", 1.0, same_sass_as="add.f32")  # borrows add.f32's rate, halved
    assert V.uncertainty(halved, idx) == pytest.approx(u / 2)
    assert V.uncertainty(peak("add.f32", 2.0, chains=2), idx) is None  # its configuration is not there


# --- signed vs unsigned ----------------------------------------------------------------------

def test_latencies_0p3_apart_with_tight_intervals_differ():
    r = row([lat("min.s32", 8.0), lat("min.u32", 8.3)])  # a fixed 0.5-cycle threshold said "same"
    assert r["latency_same"] is False
    assert r["latency_halfwidth_95"] == pytest.approx([1 / 96, 1 / 96])
    assert "min.s32 8 vs min.u32 8.3 (+-0.0147)" in signedness_lines([r])[0]


def test_latencies_0p8_apart_with_wide_intervals_are_the_same():
    r = row([lat("min.s32", 8.0, WIDE), lat("min.u32", 8.8, WIDE)])  # a 0.5-cycle threshold said "differ"
    assert r["latency_same"] is True
    assert "latency the same (the difference within its 95% interval) in 1 of 1 pairs" in signedness_lines([r])[0]


def test_no_spread_is_undetermined():
    r = row([lat("min.s32", 8.0, None), lat("min.u32", 8.0)])  # equal values, but one has no repeats
    assert r["latency_same"] is None and r["undetermined"] == ["latency"]
    line = signedness_lines([r])[0]
    assert "in 0 of 0 pairs" in line and "undetermined (no repeats to give a spread) in 1" in line
    bad = row([lat("min.s32", 8.0), {**lat("min.u32", 8.0), "flags": ["noisy: x"]}])
    assert bad["latency_same"] is None and bad["undetermined"] == []  # not clean: not "undetermined"


def test_throughputs_judged_by_their_intervals():
    tight = (-0.001, 0.0, 0.001, -0.001, 0.0, 0.001)
    recs = [peak("min.s32", 1.0), peak("min.u32", 0.985), tp("min.s32", 1.0, tight), tp("min.u32", 0.985, tight)]
    assert row(recs)["throughput_same"] is False  # 1.5% apart: a fixed 2% tolerance said "same"
    wide = (-0.05, 0.0, 0.05, -0.05, 0.0, 0.05)
    recs = [peak("min.s32", 1.0), peak("min.u32", 0.95), tp("min.s32", 1.0, wide), tp("min.u32", 0.95, wide)]
    assert row(recs)["throughput_same"] is True  # 5% apart within +-7% intervals
    r = row([peak("min.s32", 1.0), peak("min.u32", 1.0)])  # no configuration records: no spread
    assert r["throughput_same"] is None and r["undetermined"] == ["throughput"]


# --- value classes ---------------------------------------------------------------------------

def cls_row(c, value, spread=TIGHT):
    return {**lat("rcp.rn.f32", value, spread, measure=V.MEASURE), "params": {"class": c, "branches": []},
            "cls": "fp32"}


def test_value_classes_0p3_apart_with_tight_intervals_differ():
    r = V.range_result("rcp.rn.f32", [cls_row("one", 40.0), cls_row("zero", 40.3)])
    assert r.params["slower"] == {"zero": 40.3} and r.params["fastest"] == ["one"]  # 0.5 said "same"
    assert "without a branch" in r.params["path"]


def test_value_classes_apart_within_wide_intervals_are_the_same():
    r = V.range_result("rcp.rn.f32", [cls_row("one", 40.0, WIDE), cls_row("zero", 40.8, WIDE)])
    assert r.params["slower"] == {} and r.params["fastest"] == ["one", "zero"]


def test_value_class_without_repeats_is_undetermined():
    r = V.range_result("rcp.rn.f32", [cls_row("one", 40.0), cls_row("zero", 40.0, None)])
    assert r.params["undetermined"] == ["zero"] and r.params["fastest"] == ["one"] and r.params["slower"] == {}
    assert r.params["path"] != "one latency for every class"
    line = V.conclusions([dict(variant="rcp.rn.f32", measure=V.RANGE, value=r.value, params=r.params, flags=[])])[0]
    assert "undetermined (no repeats to give a spread): zero" in line


def test_value_conclusion_says_only_differences_are_the_instructions():
    r = V.range_result("rcp.rn.f32", [cls_row("one", 40.0), cls_row("zero", 52.0)])
    line = V.conclusions([dict(variant="rcp.rn.f32", measure=V.RANGE, value=r.value, params=r.params, flags=[])])[0]
    assert "chain cycles per instance" in line and "including the re-derivation (the same in every class)" in line
    assert "only the differences between classes are the instruction's: 12 cycles at most" in line
    assert "slower: zero 52 (+12)" in line and "within its 95% interval" in line
