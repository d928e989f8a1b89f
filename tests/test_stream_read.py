"""The shared plain-load stream machinery (bench/stream_read.py) and the async suite's
plain-load baseline built on it: the saturation rule over ILP x warps on synthetic sweeps with
known answers, the SASS count of loads in flight (synthetic, and real ptxas for sm_90: with and
without ``.maxnreg``), the residency check of a launch's rows, and the TMA-vs-plain comparison
that only sets a saturated best against a saturated best."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.stream_read import MAXNREG, grid_saturation, load_trip, loads_in_flight
from gpudissect.kernel.build import build_module
from gpudissect.kernel.ptx import ptx_header
from gpudissect.suites.async_copy import analyse as an
from gpudissect.suites.async_copy import suite as su
from gpudissect.suites.async_copy.kernels import REPS, ROW, Spec, make_kernel, module_header
from gpudissect.suites.async_copy.summary import compare_best, summarize

TARGET = make_target("sm_90")


# ------------------------------------------------------------------ saturation over a grid
def test_saturated_when_more_parallelism_brings_nothing():
    # (ILP, warps/SM): rises with bytes in flight, then flat
    r = {(1, 8): 1000, (2, 8): 1900, (4, 8): 3300, (8, 8): 4200, (4, 16): 4400, (8, 16): 4500, (8, 32): 4480}
    s = grid_saturation(r, names=("ILP", "warps/SM"))
    assert s["best"] == 4500 and s["at"] == [8, 16] and s["saturated"]
    assert "ILP=8, warps/SM=32" in s["evidence"] and "99.6%" in s["evidence"]


def test_saturated_when_it_stopped_before_the_best():
    r = {(1, 8): 1000, (4, 16): 4450, (8, 16): 4500, (8, 32): 3000}  # more falls (a second wave, say)
    s = grid_saturation(r)
    assert s["saturated"] and "stopped rising before the best" in s["evidence"]


def test_not_saturated_when_still_rising_and_a_lone_peak_is_a_single_peak():
    rising = grid_saturation({(1, 8): 1000, (2, 8): 2000, (2, 16): 3000}, names=("ILP", "warps/SM"))
    assert not rising["saturated"] and "still rises" in rising["why"]
    # every larger configuration slower: the rate stopped rising at the best, which rests on one point
    peak = grid_saturation({(1, 8): 1000, (2, 16): 3000, (4, 32): 2000})
    assert peak["saturated"] and peak["single_peak"] and "every larger configuration is slower" in peak["evidence"]
    none = grid_saturation({(1, 8): None, (2, 8): float("nan")})
    assert none["best"] is None and not none["saturated"]


def test_another_configuration_at_the_peak_shows_the_rate_had_stopped_rising():
    # the H200's plain-load sweep: ILP 4 x 24 warps (96 loads in flight per lane slot) reaches the
    # best of ILP 8 x 16 warps (128): fewer in flight, the same rate
    r = {(4, 8): 3352, (4, 16): 4224, (4, 24): 4444, (8, 8): 4161, (8, 16): 4444, (8, 24): 4229}
    s = grid_saturation(r, names=("ILP", "warps/SM"))
    assert s["saturated"] and "reaches 100.0% of it" in s["evidence"] and not s.get("single_peak")


def test_incomparable_configurations_prove_nothing():
    # (8, 8) and (1, 64) do not order: neither shows that the other's rate stopped rising
    s = grid_saturation({(8, 8): 4000, (1, 64): 3990})
    assert not s["saturated"]


# ------------------------------------------------------------------ loads in flight
def test_loads_in_flight_counts_loads_before_the_first_use(sass):
    good = sass("LDG.E.128 R4, desc[UR6][R2.64]", "LDG.E.128 R8, desc[UR6][R2.64+0x200]",
                "LDG.E.128 R12, desc[UR6][R2.64+0x400]", "LOP3.LUT R0, R4, R5, R0, 0x96, !PT",
                "LOP3.LUT R0, R8, R9, R0, 0x96, !PT")
    assert loads_in_flight(good) == 3
    interleaved = sass("LDG.E.128 R4, desc[UR6][R2.64]", "LDG.E.128 R8, desc[UR6][R2.64+0x200]",
                       "LOP3.LUT R0, R4, R5, R0, 0x96, !PT", "LDG.E.128 R4, desc[UR6][R2.64+0x400]",
                       "LOP3.LUT R0, R8, R9, R0, 0x96, !PT")
    assert loads_in_flight(interleaved) == 2
    assert loads_in_flight(sass("IADD3 R1, R1, 0x1, RZ")) == 0


def _ld(ilp: int, name: str) -> object:
    spec = Spec(name, "ld_stream", {"mask": (1 << 30) - 1, "ilp": ilp}, 1, 256, 1024)
    return spec, make_kernel(spec, module_header(ptx_header(TARGET.ptx_isa, TARGET.arch)))


def test_every_ilp_of_the_baseline_keeps_all_its_loads_in_flight():
    """Real ptxas: each ld_stream kernel of the sweep holds ILP loads in flight before the first
    use; the same kernel without .maxnreg does not (the check can fail, and did on the old
    baseline)."""
    ks = [_ld(i, f"ld_x{i}") for i in su.LD_ILPS]
    _, k8 = _ld(8, "ld_free")
    free = dataclasses.replace(k8, entry=k8.entry.replace(MAXNREG + "\n", ""))
    assert MAXNREG in k8.entry and MAXNREG not in free.entry
    built = build_module([k for _, k in ks] + [free], TARGET.arch, opt=3)
    for (_spec, k), i in zip(ks, su.LD_ILPS, strict=True):
        assert loads_in_flight(built[k.name].region) == i, k.name
    assert loads_in_flight(built["ld_free"].region) < 8


def test_load_trip_issues_every_load_before_any_fold():
    lines = load_trip("ld.global.cg.v4.u32", 2, [["%a", "%b", "%c", "%d"], ["%e", "%f", "%g", "%h"]], "%x", 512, "%m")
    assert [ln.split()[0] for ln in lines[:2]] == ["ld.global.cg.v4.u32"] * 2
    assert "[%x+512]" in lines[1] and len(lines) == 2 + 8 and all(ln.strip().startswith("xor") for ln in lines[2:])


# ------------------------------------------------------------------ residency of a launch
def _rows(starts: list[list[int]], ends: list[list[int]], sms: list[int]) -> np.ndarray:
    rows = np.zeros((len(sms), ROW), dtype=np.uint64)
    for w, sm in enumerate(sms):
        for r in range(REPS):
            rows[w, 4 * r: 4 * r + 4] = [starts[w][r], ends[w][r], 10**6 * (r + 1) + w, 10**6 * (r + 1) + w + 500]
        rows[w, 4 * REPS] = sm
    return rows


def test_all_at_once_sees_a_second_wave():
    together = _rows([[100 * r for r in range(REPS)]] * 4, [[100 * r + 90 for r in range(REPS)]] * 4, [0, 0, 1, 1])
    assert an.all_at_once(together, REPS)
    # on SM 1 the second warp starts after the first ended: not all at once
    late = _rows([[100 * r for r in range(REPS)]] * 3 + [[100 * r + 95 for r in range(REPS)]],
                 [[100 * r + 90 for r in range(REPS)]] * 3 + [[100 * r + 99 for r in range(REPS)]], [0, 0, 1, 1])
    assert not an.all_at_once(late, REPS)


# ------------------------------------------------------------------ TMA against the baseline
def test_tma_is_set_against_the_plain_load_only_best_to_best():
    tma = {"gbps": 4200.0, "saturated": True}
    assert compare_best(tma, {"gbps": 4500.0, "saturated": True})[0] == pytest.approx(4200 / 4500)
    share, why = compare_best(tma, {"gbps": 3200.0, "saturated": False})
    assert share is None and "baseline is not proven saturated" in why
    assert compare_best({"gbps": 4200.0, "saturated": False}, {"gbps": 4500.0, "saturated": True})[0] is None


def test_summary_names_the_baseline_configuration_and_its_evidence():
    recs = [{"variant": f"bw:tma.bulk:dram:{t}", "value": v, "params": {"tile": t, "where": "dram"},
             "fit": {"saturation": {"at": 1, "saturated": True}}, "flags": []}
            for t, v in ((4096, 3900.0), (16384, 4200.0))]
    base = {"best": 4500.0, "at": 2, "ilp": 8, "warps_per_sm": 16, "saturated": True,
            "evidence": "ILP=8, warps/SM=32 (more in flight than the best, ILP=8, warps/SM=16) reaches 99.6% of it"}
    recs.append({"variant": "bw:ld.v4:dram", "value": 4500.0, "params": {"where": "dram"}, "fit": {"saturation": base},
                 "flags": []})
    line = next(c for c in summarize(recs)["conclusions"] if c.startswith("tma.bulk DRAM read"))
    assert "ld.global.cg.v4 best 4500 GB/s at ILP 8 x 16 warps/SM (saturated: ILP=8, warps/SM=32" in line
    assert "TMA reaches 93% of the plain load's best" in line
    recs[-1]["fit"]["saturation"] = {**base, "saturated": False, "evidence": None, "why": "still rises"}
    line = next(c for c in summarize(recs)["conclusions"] if c.startswith("tma.bulk DRAM read"))
    assert "NOT saturated" in line and "TMA reaches - (the plain-load baseline is not proven saturated)" in line


def test_the_baseline_probe_sweeps_ilp_and_ctas():
    p = next(p for p in su.all_probes() if p.name == "bw:ld.v4:dram")
    assert [s.params["ilp"] for s in p.specs] == list(su.LD_ILPS) and p.params["ctas"] == su.LD_CTAS
    assert len({s.name for s in p.specs}) == len(p.specs)
