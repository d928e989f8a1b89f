"""The instruction suite's timing method ("Instruction timings an expert can rely on"): the
timed region holds nothing of the harness, the peak comes from clean configurations only,
region sizes scale with the SASS per instance, companions are removed from the numbers, the
runner measures again what exceeds a physical limit, and unoptimised schedules are refused."""

from __future__ import annotations

import re

import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context, Item, Outcome, SuiteBase
from gpudissect.bench.runner import measure_guarded
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.build import build_module, build_one
from gpudissect.kernel.region import KINDS, is_clock_read
from gpudissect.kernel.toolchain import disassemble
from gpudissect.store.db import Result, Store
from gpudissect.suites.instructions.companion import companion_removed
from gpudissect.suites.instructions.core import (
    BAD,
    PEAK_TOL,
    VariantWork,
    lengths_for,
    peak_results,
)
from gpudissect.suites.instructions.strategies import strategy
from gpudissect.suites.instructions.suite import InstructionsSuite, Plan, timing_families
from gpudissect.suites.instructions.template import generate
from gpudissect.suites.instructions.verify import (
    VERIFY_LENGTHS,
    MapRecord,
    check_built,
    compiler_stalls,
)

TARGET = make_target("sm_90")
UNIT = "warp_instr/cycle/SM"


# --- (a) the timed region holds only the instruction under test -----------------------------
LABEL = re.compile(r"^(\.L_x_\d+):\s*$")
OFFSET = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/")


def labels(cubin: bytes) -> dict[str, int]:
    """Branch label -> offset of the instruction that follows it (nvdisasm's full listing)."""
    out, pending = {}, []
    for ln in disassemble(cubin).splitlines():
        m = LABEL.match(ln.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = OFFSET.match(ln)
        if m and pending:
            out.update({lab: int(m.group(1), 16) for lab in pending})
            pending = []
    return out


KERNELS = [  # (variant, strategy, measure, chains)
    ("add.f32", "reg", "latency", 1),
    ("fma.rn.f32", "reg", "throughput", 4),
    ("mad.lo.u32", "fib", "latency", 1),
    ("add.u32", "reg", "distance", 4),
    ("abs.s32", "companion", "latency", 1),
    ("popc.b32", "reg", "issue_interval", 1),
]


@pytest.mark.parametrize(("name", "strat", "measure", "chains"), KERNELS)
def test_nothing_of_the_harness_between_the_clock_reads(catalog, name, strat, measure, chains):
    reps = 4
    k = generate(catalog.get(name), strategy(strat), TARGET, chains=chains, length=16, reps=reps,
                 measure=measure, name=f"v0_{measure[0]}{chains}_n16")
    b = build_one(k, TARGET.arch)
    ins = b.instrs
    clocks = [i for i, x in enumerate(ins) if is_clock_read(x)]
    assert len(clocks) == 2
    region = ins[clocks[0] + 1 : clocks[1]]
    assert region == b.region and region
    ops = [x.opcode for x in region]
    assert not {"STG", "BAR", "BRA"} & set(ops), ops
    for kind in ("memory", "barrier", "branch"):
        assert not [x.full for x in region if KINDS[kind].match(x.opcode)], kind
    # two loops: the repetitions, a backward branch from after the end clock read back to the
    # barrier that releases the block's warps before each repetition, and inside it, before the
    # start clock read, the wait of the per-SM rendezvous (kernel/timing.py SmSync: an atomic
    # count, 32-bit clock reads for its deadline, a second barrier). The BRA to itself after
    # EXIT is ptxas's padding, not a loop.
    at = labels(b.cubin)
    target = {i: at[re.search(r"(\.L_x_\d+)", x.operands[0]).group(1)]
              for i, x in enumerate(ins) if x.opcode == "BRA"}
    back = sorted(i for i, t in target.items() if t < ins[i].offset)
    assert len(back) == 2, "expected the repetition loop and the rendezvous' wait"
    spin, end = back
    head = next(i for i, x in enumerate(ins) if x.offset == target[end])
    spin_head = next(i for i, x in enumerate(ins) if x.offset == target[spin])
    assert head < spin_head < spin < clocks[0] < clocks[1] < end
    before = ins[head : clocks[0]]
    assert sum(x.opcode == "BAR" for x in before) == 3  # the loop's, then two after the wait
    assert any(x.opcode in ("ATOMG", "ATOM", "RED", "REDG") for x in before)
    # no store in the loop: the timestamps stay in registers until lane 0 writes them after it
    stores = [i for i, x in enumerate(ins) if x.opcode == "STG"]
    assert stores and min(stores) > end
    # one row per warp: (start, end) per repetition, then %smid, 64-bit stores (the sinks of
    # these variants are 32-bit)
    assert sum(ins[i].full == "STG.E.64" for i in stores) == 2 * reps + 1
    assert k.entry.count("@%tlead st.global.u64") == 2 * reps + 1


# --- (b) the peak is taken from clean configurations only ------------------------------------
def tp(value, chains, warps, *flags) -> Result:
    return Result("add.f32", "throughput", value, UNIT, "slope", params={"chains": chains, "warps": warps},
                  flags=list(flags), sass=["FADD"], strategy="reg", cls="float")


def test_a_flagged_configuration_is_never_the_peak_even_if_fastest(catalog):
    v = catalog.get("add.f32")
    out = [tp(2.0, 4, 8), tp(3.0, 4, 16), tp(3.9, 4, 32, "noisy: +-5.0% (...)"),
           tp(5.0, 8, 32, "exceeds-limit: 5 > 4 warp-instr/clk/SM (fp32 pipe)")]
    (peak,) = peak_results(v, out, TARGET)
    assert peak.measure == "throughput_peak" and peak.value == 3.0
    assert peak.params["best"] == {"chains": 4, "warps": 16}
    assert peak.params["clean"] == 2 and peak.params["configurations"] == 4
    assert not any(f.startswith(BAD) for f in peak.flags)
    # 3.0 of the fp32 pipe's 4 warp-instructions per clock: below 90%, so not the pipe
    assert peak.params["bound"].startswith("latency or another resource (75% of the fp32 limit")


def test_the_smallest_configuration_within_2pct_is_reported(catalog):
    v = catalog.get("add.f32")
    out = [tp(3.0, 1, 32), tp(3.92, 4, 16), tp(3.95, 8, 16), tp(3.96, 4, 32), tp(3.5, 2, 8)]
    (peak,) = peak_results(v, out, TARGET)
    assert peak.value == 3.96 and peak.params["best"] == {"chains": 4, "warps": 32}
    assert 3.92 >= (1 - PEAK_TOL) * 3.96
    assert peak.params["smallest_within_2pct"] == {"chains": 4, "warps": 16}
    assert peak.params["bound"].startswith("fp32 (99% of 4)")
    # just outside 2%: not at the peak
    (p2,) = peak_results(v, [tp(3.87, 4, 16), tp(3.96, 4, 32)], TARGET)
    assert p2.params["smallest_within_2pct"] == {"chains": 4, "warps": 32}


def test_no_clean_configuration_gives_no_value(catalog):
    v = catalog.get("add.f32")
    out = [tp(5.0, 4, 16, "exceeds-limit: 5 > 4"), tp(3.0, 4, 32, "noisy: +-3%"),
           tp(None, 4, 64, "refused: 64 warps need ...")]
    (peak,) = peak_results(v, out, TARGET)
    assert peak.value is None
    assert peak.flags == ["no clean configuration: exceeds-limit, noisy, refused"]
    assert peak_results(v, [], TARGET) == []


def test_a_peak_that_still_rises_along_every_axis_is_not_saturated(catalog):
    v = catalog.get("add.f32")
    # the largest clean configuration, more than 2% above both one-step-smaller neighbours
    (p,) = peak_results(v, [tp(2.0, 4, 16), tp(2.0, 8, 8), tp(2.6, 8, 16)], TARGET)
    assert any(f.startswith("not-saturated") and "4x16: 2" in f and "8x8: 2" in f for f in p.flags)
    # one axis levelled off (8x8 -> 8x16 within 2%): saturated along warps
    (p,) = peak_results(v, [tp(2.0, 4, 16), tp(2.57, 8, 8), tp(2.6, 8, 16)], TARGET)
    assert not any(f.startswith("not-saturated") for f in p.flags)
    # a smaller configuration beats the largest: saturated
    (p,) = peak_results(v, [tp(2.0, 4, 16), tp(2.6, 8, 8), tp(2.5, 8, 16)], TARGET)
    assert p.value == 2.6 and not any(f.startswith("not-saturated") for f in p.flags)
    # still rising, but within 2% of the fp32 pipe's limit of 4: nothing can rise further
    (p,) = peak_results(v, [tp(3.0, 4, 16), tp(3.0, 8, 8), tp(3.95, 8, 16)], TARGET)
    assert not any(f.startswith("not-saturated") for f in p.flags)
    (p,) = peak_results(v, [tp(3.0, 4, 16), tp(3.0, 8, 8), tp(3.8, 8, 16)], TARGET)
    assert any(f.startswith("not-saturated") for f in p.flags)
    # more warps timed lower, if noisily: its 95% interval below the best -> the rate stopped rising
    big = tp(2.1, 8, 32, "noisy: +-8% (...)")
    big.samples = {"rate_per_repeat": [1.9, 2.0, 2.1, 2.2, 2.5]}
    (p,) = peak_results(v, [tp(2.0, 4, 16), tp(2.0, 8, 8), tp(2.6, 8, 16), big], TARGET)
    assert p.value == 2.6 and not any(f.startswith("not-saturated") for f in p.flags)
    # ... but not when its interval reaches above it, nor when its SMs idled
    big.samples = {"rate_per_repeat": [1.2, 1.6, 2.1, 2.6, 3.0]}
    (p,) = peak_results(v, [tp(2.0, 4, 16), tp(2.0, 8, 8), tp(2.6, 8, 16), big], TARGET)
    assert any(f.startswith("not-saturated") for f in p.flags)
    idle = tp(2.1, 8, 32, "sm-idle: the SMs were idle 40% of the span (median)")
    (p,) = peak_results(v, [tp(2.0, 4, 16), tp(2.0, 8, 8), tp(2.6, 8, 16), idle], TARGET)
    assert any(f.startswith("not-saturated") for f in p.flags)


class RateByConfig(FakeDevice):
    """A throughput of ``rate(chains, warps)`` warp-instructions per clock per SM (every warp of
    an SM inside its region together); records the configurations launched."""

    def __init__(self, rate):
        self.configs: list[tuple[int, int]] = []
        self.rate = rate
        super().__init__(self._cycles)

    def _cycles(self, kernel, chains, length, warps):
        if kernel.startswith("v0_t"):
            self.configs.append((chains, warps))
        return 20 + warps * chains * length / self.rate(chains, warps)


def test_the_sweep_goes_by_parallelism_and_ends_at_the_physical_limit(tmp_path, sweep):
    plan = Plan(tp_min_length=0, latency_units=(8, 16, 32), tp_chains=(1, 2, 4, 8), tp_units=(16, 32), tp_warps=(4, 8, 16, 32),
                distances=(2,), distance_units=(16, 32), reps=3, launches=2)
    # add.f32 is FADD on the fp32 pipe (4 warp-instr/clk/SM): 4 chains x 4 warps reach it
    dev = RateByConfig(lambda k, w: min(4.0, k * w / 4))
    store = Store(tmp_path / "r.db")
    run_id = sweep(dev, store, ["add.f32"], suite=InstructionsSuite(full=plan), quick=False).run_id
    seen = list(dict.fromkeys(dev.configs))
    # warps x chains 4, 8, 8, then 16 with the fewer warps first: at the limit, stop
    assert seen == [(1, 4), (2, 4), (1, 8), (4, 4)]
    peak = next(r for r in store.results(run_id) if r["variant"] == "add.f32" and r["measure"] == "throughput_peak")
    assert peak["value"] == pytest.approx(4.0) and not any(f.startswith("not-saturated") for f in peak["flags"])
    assert peak["params"]["smallest_within_2pct"] == {"chains": 4, "warps": 4}


def test_a_chain_count_stops_when_more_warps_no_longer_raise_the_rate(tmp_path, sweep):
    plan = Plan(tp_min_length=0, latency_units=(8, 16, 32), tp_chains=(1, 2), tp_units=(16, 32), tp_warps=(4, 8, 16, 32),
                distances=(2,), distance_units=(16, 32), reps=3, launches=2)
    dev = RateByConfig(lambda k, w: min(1.0 * k, w / 8))  # far below the fp32 limit
    store = Store(tmp_path / "r.db")
    sweep(dev, store, ["add.f32"], suite=InstructionsSuite(full=plan), quick=False)
    seen = set(dev.configs)
    assert (1, 16) in seen and (1, 32) not in seen  # 1 chain: 0.5, 1.0, 1.0 -> saturated
    assert (2, 32) in seen  # 2 chains: still rising to 32 warps


# --- (c) region sizes ------------------------------------------------------------------------
@pytest.mark.parametrize("spi", [1.0, 2.0, 3.5, 16.0, 64.0, 1000.0])
@pytest.mark.parametrize("chains", [1, 2, 4, 8])
def test_lengths_scale_down_and_stay_fittable(spi, chains):
    plan = Plan()
    for units in (plan.latency_units, plan.tp_units, plan.distance_units):
        ns = lengths_for(units, chains, spi, plan)
        assert list(ns) == sorted(set(ns)) and len(ns) >= 2  # a slope needs two lengths
        assert min(ns) >= plan.min_length
        base = lengths_for(units, chains, 1.0, plan)
        assert all(a <= b for a, b in zip(ns, base, strict=False))  # never longer than at 1 SASS
        if max(ns) > 2 * plan.min_length:  # the minimum does not bind: the budget holds
            assert max(ns) * chains * spi <= plan.sass_budget


def test_lengths_for_examples():
    plan = Plan(sass_budget=512)
    assert lengths_for((64, 128, 192, 256), 1, 1.0, plan) == (64, 128, 192, 256)
    assert lengths_for((64, 128, 192, 256), 1, 16.0, plan) == (8, 16, 24, 32)  # 512 SASS at most
    assert lengths_for((128, 256), 4, 1.0, plan) == (32, 64)
    assert lengths_for((128, 256), 8, 8.0, plan) == (4, 8)
    assert lengths_for((64, 128, 192, 256), 1, 1000.0, plan) == (4, 8)  # never fewer than 4


def test_variants_without_a_chain_measure_issue_interval(catalog):
    plan = Plan(tp_min_length=0, latency_units=(32, 64, 96, 128), tp_chains=(1, 2, 4, 8), tp_units=(64, 128),
                distances=(2, 4, 8), distance_units=(32, 64), sass_budget=384)
    add = catalog.get("add.f32")
    rec = MapRecord("add.f32", "sm_90", True, ["FADD"], "reg", sass_counts={"FADD": "1"})
    every = timing_families(add, rec, TARGET, plan, 7)
    configs = ["latency_guarded_true", "latency_guarded_false", "latency_read_read", "control_read_read",
               "latency_write_write", "control_write_write"]  # every variant where they apply
    assert [f.measure for f in every if f.measure in configs] == configs
    fams = [f for f in every if f.measure not in configs]
    assert [f.measure for f in fams] == (["latency"] + ["throughput"] * 4 + ["distance"] * 3)
    assert [f.chains for f in fams[1:]] == [1, 2, 4, 8, 2, 4, 8]
    assert [k.length for k in fams[0].kernels] == [32, 64, 96, 128]
    assert fams[1].kernels[0].name == "v7_t1_n64"
    clock = catalog.get("mov.u32.clock")
    assert clock.chain_operand is None
    rec = MapRecord(clock.name, "sm_90", True, ["CS2R.32"], "reg", sass_counts={"CS2R.32": "1"})
    fams = timing_families(clock, rec, TARGET, plan, 0)
    assert fams[0].measure == "issue_interval" and fams[0].kernels[0].name.startswith("v0_i1_n")
    assert "distance" not in {f.measure for f in fams} and "latency" not in {f.measure for f in fams}
    # many SASS per instance: shorter chains (16 SASS x 128 instances scaled to 384 SASS)
    rec = MapRecord("add.f32", "sm_90", True, ["FADD"], "reg", sass_counts={"FADD": "1", "MOV": "15"})
    fams = timing_families(add, rec, TARGET, plan, 0)
    assert [k.length for k in fams[0].kernels] == [6, 12, 18, 24]


# --- (d) the companion's own numbers removed --------------------------------------------------
def row(variant, measure, value, *flags, sass=None, **params) -> dict:
    return {"variant": variant, "measure": measure, "value": value, "flags": list(flags),
            "params": params, "sass": sass}


def pair_work(catalog, name="abs.s32", counts=None, companion="xor.b32 {o}, {o}, {k};") -> VariantWork:
    rec = MapRecord(name, "sm_90", True, ["IABS", "LOP3.LUT"], "companion",
                    sass_counts=counts or {"IABS": "1", "LOP3.LUT": "1"}, companion=companion)
    return VariantWork(catalog.get(name), rec)


XOR = ("LOP3.LUT", "PLOP3.LUT")  # the SASS an XOR companion becomes
LAT = {"lop3.b32": row("lop3.b32", "latency", 4.0, sass=["LOP3.LUT"])}


def by_measure(rs: list[Result]) -> dict[str, Result]:
    assert len(rs) == 2
    return {r.measure: r for r in rs}


def test_companion_removed_latency_and_the_same_single_sass_stands_for_the_throughput(catalog):
    w = pair_work(catalog)
    peak = {"lop3.b32": row("lop3.b32", "throughput_peak", 2.0, sass=["LOP3.LUT"]),
            # the clean peak of another variant that is exactly one IABS stands for abs.s32's
            "iabs.only": row("iabs.only", "throughput_peak", 1.5, sass=["IABS"],
                             best={"chains": 4, "warps": 16}, bound="alu (75% of 2)"),
            # not: one measured with a companion itself, one not clean, one of other SASS
            "a.paired": row("a.paired", "throughput_peak", 9.0, sass=["IABS"]),
            "a.noisy": row("a.noisy", "throughput_peak", 8.0, "noisy: +-5%", sass=["IABS"]),
            "b.two": row("b.two", "throughput_peak", 7.0, sass=["IABS", "MOV"]),
            # nor the variant's own earlier result (a resumed run)
            "abs.s32": row("abs.s32", "throughput_peak", 6.0, sass=["IABS"])}
    pair = {"latency": row("abs.s32", "latency", 10.0),
            "throughput_peak": row("abs.s32", "throughput_peak", 1.0, best={"chains": 4, "warps": 32})}
    out = by_measure(companion_removed(w, "lop3.b32", XOR, LAT, peak, pair, {"abs.s32", "a.paired"}))
    assert out["latency"].value == pytest.approx(6.0)  # the pair's 10 minus LOP3's 4
    assert out["latency"].sass == ["IABS"]  # the variant's own SASS
    assert out["latency"].flags[0].startswith("companion removed: xor.b32")
    assert out["latency"].params["companion"] == {"variant": "lop3.b32", "latency": 4.0}
    t = out["throughput_peak"]
    assert t.value == pytest.approx(1.5) and t.sass == ["IABS"]
    assert t.flags == ["same SASS as iabs.only"]
    assert t.params["same_sass_as"] == "iabs.only" and t.params["pair"] == 1.0
    assert t.params["best"] == {"chains": 4, "warps": 16} and t.params["bound"] == "alu (75% of 2)"
    # without such a variant: no throughput for the variant, the pair's rate kept as a parameter
    del peak["iabs.only"]
    t = by_measure(companion_removed(w, "lop3.b32", XOR, LAT, peak, pair,
                                     {"abs.s32", "a.paired"}))["throughput_peak"]
    assert t.value is None and t.params["pair"] == 1.0
    assert t.flags[0].startswith("includes companion: xor.b32 {o}, {o}, {k};: the pair's rate (1)")
    # a paired variant (two instances per IABS) stands for it at half its rate per instance
    peak["two.lanes"] = row("two.lanes", "throughput_peak", 3.2, sass=["0.5*IABS"])
    t = by_measure(companion_removed(w, "lop3.b32", XOR, LAT, peak, pair,
                                     {"abs.s32", "a.paired"}))["throughput_peak"]
    assert t.value == pytest.approx(1.6) and t.flags == ["same SASS as two.lanes"]
    assert "halved" in t.statistic
    # ... but one of exactly that SASS comes first
    peak["iabs.only"] = row("iabs.only", "throughput_peak", 1.5, sass=["IABS"])
    t = by_measure(companion_removed(w, "lop3.b32", XOR, LAT, peak, pair,
                                     {"abs.s32", "a.paired"}))["throughput_peak"]
    assert t.value == pytest.approx(1.5)


def test_a_64bit_chain_takes_out_two_companion_sass(catalog):
    w = pair_work(catalog, "abs.s64", {"IABS": "1", "LOP3.LUT": "3"}, "xor.b64 {o}, {o}, {k};")
    peak = {"lop3.b32": row("lop3.b32", "throughput_peak", 2.0, sass=["LOP3.LUT"])}
    pair = {"latency": row("abs.s64", "latency", 10.0),
            "throughput_peak": row("abs.s64", "throughput_peak", 1.0)}
    out = by_measure(companion_removed(w, "lop3.b32", XOR, LAT, peak, pair, {"abs.s64"}))
    assert out["latency"].sass == ["IABS", "LOP3.LUT"]  # one of the three LOP3s is its own
    assert out["latency"].value == pytest.approx(6.0)


def test_an_own_sass_of_several_instructions_includes_the_companion(catalog):
    w = pair_work(catalog, "ex2.approx.ftz.f32", {"MUFU.EX2": "1", "FMUL": "1", "LOP3.LUT": "1"})
    peak = {"lop3.b32": row("lop3.b32", "throughput_peak", 2.0, sass=["LOP3.LUT"]),
            "ex2.only": row("ex2.only", "throughput_peak", 0.5, sass=["MUFU.EX2"])}
    pair = {"latency": row(w.variant.name, "latency", 20.0),
            "throughput_peak": row(w.variant.name, "throughput_peak", 0.25)}
    out = by_measure(companion_removed(w, "lop3.b32", XOR, LAT, peak, pair, {w.variant.name}))
    assert out["latency"].value == pytest.approx(16.0)  # latencies add along the chain
    assert out["latency"].sass == ["MUFU.EX2", "FMUL"]
    t = out["throughput_peak"]
    # MUFU.EX2 alone is not the variant's SASS (MUFU.EX2 + FMUL): nothing stands for it
    assert t.value is None and t.params == {"pair": 0.25}
    assert t.flags == ["includes companion: xor.b32 {o}, {o}, {k};: the pair's rate (0.25); no clean "
                       "variant of the same single SASS to stand for it"]
    # two of one opcode per instance is not one instruction either
    w = pair_work(catalog, "abs.s32", {"IABS": "2", "LOP3.LUT": "1"})
    peak["iabs.only"] = row("iabs.only", "throughput_peak", 1.5, sass=["IABS"])
    t = by_measure(companion_removed(w, "lop3.b32", XOR, LAT, peak, pair, {"abs.s32"}))["throughput_peak"]
    assert t.value is None and t.sass == ["2*IABS"] and t.flags[0].startswith("includes companion")


def test_includes_companion_when_the_reference_is_missing_or_not_clean(catalog):
    w = pair_work(catalog)
    pair = {"latency": row("abs.s32", "latency", 10.0),
            "throughput_peak": row("abs.s32", "throughput_peak", 1.0)}
    # no variant measures the companion alone
    out = by_measure(companion_removed(w, None, XOR, {}, {}, pair, {"abs.s32"}))
    assert out["latency"].value is None
    assert out["latency"].flags == ["includes companion: xor.b32 {o}, {o}, {k};: no variant measures "
                                    "the companion 'xor.b32 {o}, {o}, {k};' alone"]
    assert out["latency"].params == {"pair": 10.0}
    assert out["throughput_peak"].value is None
    assert out["throughput_peak"].flags[0].startswith("includes companion: ")
    # the reference was measured, but not cleanly (or not at all) in this run
    lat = {"lop3.b32": row("lop3.b32", "latency", 4.0, "noisy: +-4%", sass=["LOP3.LUT"])}
    out = by_measure(companion_removed(w, "lop3.b32", XOR, lat, {}, pair, {"abs.s32"}))
    assert out["latency"].value is None and "lop3.b32's latency is not clean" in out["latency"].flags[0]
    out = by_measure(companion_removed(w, "lop3.b32", XOR, {}, {}, pair, {"abs.s32"}))
    assert all(r.value is None and r.flags[0].startswith("includes companion") for r in out.values())
    # the pair itself not clean
    bad = {**pair, "latency": row("abs.s32", "latency", 10.0, "poor-fit: ...")}
    out = by_measure(companion_removed(w, "lop3.b32", XOR, LAT, {}, bad, {"abs.s32"}))
    assert out["latency"].value is None and "the pair's latency is not clean" in out["latency"].flags[0]
    # a pair no slower than the companion: no number for the variant
    lat = {"lop3.b32": row("lop3.b32", "latency", 10.0, sass=["LOP3.LUT"])}
    out = by_measure(companion_removed(w, "lop3.b32", XOR, lat, {}, pair, {"abs.s32"}))
    assert out["latency"].value is None and "is not slower than lop3.b32" in out["latency"].flags[0]


def pair_model(kernel, chains, length, warps):
    """Variants 0 and 1 of the run (abs.s32 and not.b32 with their companions) cost twice the
    others."""
    k = 2 if kernel.startswith(("v0_", "v1_")) else 1
    if warps == 1:
        return 20 + 4 * k * length * (1 if "_l" in kernel else chains / min(chains, 4))
    return 20 + k * chains * length * warps / 2  # 2 warp-instr/clk/SM alone, 1 as a pair


@pytest.mark.slow  # seconds of runs on a fake device: the fast tier stays under 5 minutes on 2 cores
def test_finish_derives_the_variants_own_numbers_also_after_a_resume(tmp_path, sweep):
    store = Store(tmp_path / "r.db")
    pats = ["abs.s32", "not.b32"]  # IABS + an XOR's LOP3; LOP3 + an ADD's IMAD.IADD
    run_id = sweep(FakeDevice(pair_model), store, pats).run_id
    assert {"abs.s32", "derived/abs.s32", "not.b32", "derived/not.b32", "lop3.b32", "add.u32"} \
        <= store.done_items(run_id)

    def own(variant):
        return {r["measure"]: r for r in store.results(run_id) if r["variant"] == variant}

    res = own("abs.s32")
    assert res["latency_with_companion"]["value"] == pytest.approx(8.0)
    assert res["throughput_peak_with_companion"]["value"] == pytest.approx(1.0)
    assert res["latency"]["value"] == pytest.approx(4.0)  # 8 - lop3.b32's 4
    assert res["latency"]["sass"] == ["IABS"]
    # no variant of exactly one IABS was measured: the pair's rate includes the companion
    assert res["throughput_peak"]["value"] is None
    assert res["throughput_peak"]["flags"][0].startswith("includes companion: xor.b32")
    res = own("not.b32")
    assert res["latency"]["value"] == pytest.approx(4.0)  # 8 - add.u32's 4
    assert res["latency"]["sass"] == ["LOP3.LUT"]
    # its own SASS is one LOP3, as lop3.b32's (measured alone, at 2): that stands for it
    lop3 = own("lop3.b32")["throughput_peak"]
    assert lop3["value"] == pytest.approx(2.0) and lop3["sass"] == ["LOP3.LUT"]
    assert res["throughput_peak"]["value"] == pytest.approx(lop3["value"])
    assert res["throughput_peak"]["flags"] == ["same SASS as lop3.b32"]
    # killed after the items, before finish: the resumed run prepares nothing, derives anyway
    with store.tx():
        store.db.execute("UPDATE runs SET finished=NULL WHERE id=?", (run_id,))
        store.db.execute("DELETE FROM results WHERE run_id=? AND variant IN ('abs.s32', 'not.b32') "
                         "AND measure IN ('latency', 'throughput_peak')", (run_id,))
        store.db.execute("DELETE FROM done WHERE run_id=? AND item LIKE 'derived/%'", (run_id,))
    dev = FakeDevice(pair_model)
    assert sweep(dev, store, pats).run_id == run_id
    res2 = {(r["variant"], r["measure"]): r["value"] for r in store.results(run_id)}
    assert res2[("abs.s32", "latency")] == pytest.approx(4.0)
    assert res2[("abs.s32", "throughput_peak")] is None
    assert res2[("not.b32", "latency")] == pytest.approx(4.0)
    assert res2[("not.b32", "throughput_peak")] == pytest.approx(2.0)
    assert {"derived/abs.s32", "derived/not.b32"} <= store.done_items(run_id)


# --- (e) the runner measures again what exceeds a physical limit ------------------------------
class TooFastOnce(FakeDevice):
    """add.f32 (variant 0) runs its first ``fast`` throughput kernels at 8 warp-instructions per
    clock per SM: twice the fp32 pipe's 4 (a method failure); then at 2."""

    def __init__(self, fast: int):
        super().__init__(self.cycles, sm_count=4)
        self.fast = fast
        self.runs: list[str] = []

    def cycles(self, kernel, chains, length, warps):
        if warps == 1:
            return 20 + 4 * length
        fast = kernel.startswith("v0_t") and sum(r.startswith("v0_t") for r in self.runs) <= self.fast
        return 20 + chains * length * warps / (8 if fast else 2)

    def run(self, cubin, kernel, *a, **k):
        self.runs.append(kernel)
        return super().run(cubin, kernel, *a, **k)


PLAN = Plan(tp_min_length=0, latency_units=(8, 16, 32), tp_chains=(4,), tp_units=(16, 32), tp_warps=(16,),
            distances=(2,), distance_units=(16, 32), reps=3, launches=2)
# the chain families first (latency, distance), then the throughput sweep
# variant 0's latency, distance and throughput kernels (its configurations' kernels run beside them)
CHAINS = re.compile(r"v0_[ltd]\d+_n")
FIRST = ["v0_l1_n8", "v0_l1_n16", "v0_l1_n32", "v0_d2_n8", "v0_d2_n16", "v0_t4_n4", "v0_t4_n8"]


def measured(dev, tmp_path, sweep) -> dict:
    store = Store(tmp_path / "r.db")
    run_id = sweep(dev, store, ["add.f32"], suite=InstructionsSuite(full=PLAN), quick=False).run_id
    return {r["measure"]: r for r in store.results(run_id) if r["variant"] == "add.f32"}


def test_exceeding_a_limit_remeasures_only_the_flagged_family_once(tmp_path, sweep):
    dev = TooFastOnce(fast=2)  # the first attempt's two throughput kernels
    res = measured(dev, tmp_path, sweep)
    own = [r for r in dev.runs if CHAINS.match(r)]
    assert own == FIRST + ["v0_t4_n4", "v0_t4_n8"]  # the throughput family alone, once more
    t = res["throughput"]
    assert t["value"] == pytest.approx(2.0)
    assert "remeasured: 1" in t["flags"] and not any(f.startswith("exceeds-limit") for f in t["flags"])
    assert res["throughput_peak"]["value"] == pytest.approx(2.0)
    assert "remeasured: 1" not in res["latency"]["flags"]  # kept from the first measurement


def test_a_limit_still_exceeded_after_the_retry_is_flagged_and_no_peak(tmp_path, sweep):
    dev = TooFastOnce(fast=10**6)
    res = measured(dev, tmp_path, sweep)
    assert [r for r in dev.runs if CHAINS.match(r)] == FIRST + ["v0_t4_n4", "v0_t4_n8"]
    t = res["throughput"]
    assert t["value"] == pytest.approx(8.0)
    assert any(f.startswith("exceeds-limit: 8 > 4 warp-instr/clk/SM (fp32 pipe") for f in t["flags"])
    assert "remeasured: 1" in t["flags"]
    peak = res["throughput_peak"]
    assert peak["value"] is None and peak["flags"] == ["no clean configuration: exceeds-limit"]


class Flagging(SuiteBase):
    """Each measurement gives one result; the first ``bad`` carry ``flag``."""

    name = "toy"
    retry_flags = ("noisy", "exceeds-limit")

    def __init__(self, flag: str, bad: int):
        self.flag, self.bad, self.calls = flag, bad, 0

    def measure(self, ctx, item, redo=None):
        self.calls += 1
        flags = [self.flag] if self.calls <= self.bad else []
        return Outcome([Result(item.name, "x", 1.0, "-", "s", flags=flags)])


@pytest.mark.parametrize(("flag", "bad", "calls", "again"), [
    ("exceeds-limit: 9 > 4", 1, 2, True),
    ("exceeds-limit: 9 > 4", 5, 2, True),  # once more at most
    ("noisy: +-9%", 1, 2, True),
    ("poor-fit: a point misses", 1, 1, False),  # not a retry flag
    ("", 0, 1, False),
])
def test_the_runner_retries_only_the_suites_retry_flags(flag, bad, calls, again):
    suite = Flagging(flag, bad)
    ctx = Context(FakeDevice(), None, TARGET)
    out = measure_guarded(suite, ctx, Item("a"))
    assert suite.calls == calls
    assert ("remeasured: 1" in out.results[0].flags) is again


# --- (f) an unoptimised schedule is refused ---------------------------------------------------
def test_o0_ffma_chain_is_compiler_stalled_and_o3_is_not(catalog):
    v = catalog.get("fma.rn.f32")
    reg = strategy("reg")
    ks = [generate(v, reg, TARGET, chains=1, length=n, reps=2, name=f"ffma_n{n}") for n in VERIFY_LENGTHS]
    o0 = build_module(ks, TARGET.arch, 0)
    o3 = build_module(ks, TARGET.arch, 3)
    b0, b3 = [o0[k.name] for k in ks], [o3[k.name] for k in ks]
    assert [i.opcode for i in b0[-1].region].count("FFMA") == VERIFY_LENGTHS[-1]  # the chain is there
    why = compiler_stalls(b0[-1])
    assert why and why.startswith("compiler-imposed stalls: ")
    n, of = map(int, re.search(r"(\d+) of the region's (\d+) instructions", why).groups())
    assert n <= of and n >= VERIFY_LENGTHS[-1]  # every FFMA carries the stall of 15
    res = check_built(v, reg, b0)
    assert not res.ok and res.reason == why
    assert compiler_stalls(b3[-1]) is None
    assert check_built(v, reg, b3).ok


class RefusesBigBlocks(FakeDevice):
    """The driver refuses blocks of more than ``most`` threads (too many registers); below that,
    more warps raise the rate (latency-bound, well below the fp32 limit that would end the
    sweep), so the sweep goes on to the refused count."""

    def __init__(self, most: int):
        super().__init__(lambda kernel, chains, length, warps: 20 + 4 * chains * length)
        self.most = most

    def run(self, cubin, kernel, inputs, n_sink, reps, grid, block, launches=1):
        if block > self.most:
            raise RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources requested")
        return super().run(cubin, kernel, inputs, n_sink, reps, grid, block, launches)


def test_a_refused_warp_count_keeps_the_smaller_ones(tmp_path, sweep):
    plan = Plan(tp_min_length=0, latency_units=(8, 16, 32), tp_chains=(4,), tp_units=(16, 32), tp_warps=(4, 8, 16),
                distances=(2,), distance_units=(16, 32), reps=3, launches=2)
    store = Store(tmp_path / "r.db")
    run_id = sweep(RefusesBigBlocks(most=256), store, ["add.f32"], suite=InstructionsSuite(full=plan),
                   quick=False).run_id
    tps = {r["params"]["warps"]: r for r in store.results(run_id)
           if r["variant"] == "add.f32" and r["measure"] == "throughput"}
    assert tps[4]["value"] and tps[8]["value"]
    assert tps[16]["value"] is None and any(f.startswith("refused") for f in tps[16]["flags"])
    peak = next(r for r in store.results(run_id) if r["variant"] == "add.f32"
                and r["measure"] == "throughput_peak")
    assert peak["value"] is not None


def test_a_64bit_add_companion_takes_out_one_low_and_one_carry_half():
    from gpudissect.suites.instructions.own_sass import own_sass

    add = ("IADD3", "IMAD.IADD", "VIADD", "IADD3.X", "IMAD.X")
    # the variant's own 32-bit add stays; the companion is one IADD3 and one carry
    assert own_sass({"IADD3": "2", "IADD3.X": "1"}, add, 2) == {"IADD3": 1.0}
    assert own_sass({"POPC": "2", "IADD3": "1", "IADD3.X": "0.5", "IMAD.X": "0.5"}, add, 2) == {"POPC": 2.0}
    assert own_sass({"LOP3.LUT": "1", "IMAD.IADD": "1"}, add, 1) == {"LOP3.LUT": 1.0}


class CrashesAt(RateByConfig):
    """The worker dies (a fault) at one throughput configuration, while the rate still rises."""

    def __init__(self, at: tuple[int, int]):
        super().__init__(lambda k, w: k * w / 8)
        self.at = at

    def run(self, cubin, kernel, inputs, n_sink, reps, grid, block, launches=1):
        chains = int(kernel.split("_t")[1].split("_")[0]) if "_t" in kernel else 0
        if kernel.startswith("v0_t") and (chains, block // 32) == self.at:
            raise WorkerFailed("faulted: CUDA_ERROR_ILLEGAL_ADDRESS (test); worker killed")
        return super().run(cubin, kernel, inputs, n_sink, reps, grid, block, launches)


class WorkerFailed(RuntimeError):
    pass


def test_a_worker_failure_in_the_sweep_is_recorded_and_flags_the_peak(tmp_path, sweep):
    plan = Plan(tp_min_length=0, latency_units=(8, 16, 32), tp_chains=(1, 2), tp_units=(16, 32), tp_warps=(4, 8, 16),
                distances=(2,), distance_units=(16, 32), reps=3, launches=2)
    store = Store(tmp_path / "r.db")
    run_id = sweep(CrashesAt((1, 16)), store, ["add.f32"], suite=InstructionsSuite(full=plan), quick=False).run_id
    rows = [r for r in store.results(run_id) if r["variant"] == "add.f32"]
    crashed = [r for r in rows if r["measure"] == "throughput" and r["params"].get("warps") == 16
               and r["params"]["chains"] == 1]
    assert crashed and any(f.startswith("error: WorkerFailed: faulted") for f in crashed[0]["flags"])
    peak = next(r for r in rows if r["measure"] == "throughput_peak")
    assert any(f.startswith("sweep-aborted: WorkerFailed: faulted") for f in peak["flags"])


@pytest.mark.slow  # seconds of runs on a fake device: the fast tier stays under 5 minutes on 2 cores
def test_paired_lanes_are_timed_per_instance_against_their_own_limit(tmp_path, sweep):
    """min.f16: 2 chains share the two lanes of each HMNMX2 (a paired family). Its records
    carry that SASS and say so; its limit is per PTX instance (8 for HMNMX2's 4 per clock), so a
    rate above the one-chain family's limit of 4 is no failure."""
    plan = Plan(tp_min_length=0, latency_units=(8, 16, 32), tp_chains=(1, 2), tp_units=(128, 256), tp_warps=(4, 8),
                distances=(2,), distance_units=(16, 32), reps=4, launches=2)
    dev = RateByConfig(lambda k, w: 6.0 if k == 2 else 2.0)
    store = Store(tmp_path / "r.db")
    run_id = sweep(dev, store, ["min.f16"], suite=InstructionsSuite(full=plan), quick=False).run_id
    rows = [r for r in store.results(run_id) if r["variant"] == "min.f16"]
    two = [r for r in rows if r["measure"] == "throughput" and r["params"]["chains"] == 2]
    one = [r for r in rows if r["measure"] == "throughput" and r["params"]["chains"] == 1]
    assert two and all(r["sass"] == ["0.5*HMNMX2"] for r in two)
    assert all(any(f.startswith("paired:") for f in r["flags"]) for r in two)
    assert not any(f.startswith("exceeds-limit") for r in two for f in r["flags"])
    assert one and all(r["sass"] == ["HMNMX2"] and not any(f.startswith("paired") for f in r["flags"])
                       for r in one)
    peak = next(r for r in rows if r["measure"] == "throughput_peak")
    assert peak["value"] == pytest.approx(6.0, rel=0.01) and peak["sass"] == ["0.5*HMNMX2"]


def test_rate_regions_hold_at_least_the_minimum_per_chain_within_the_code_cap():
    """A rate's regions (throughput, the grid) are raised to ``tp_min_length`` instances per chain
    (the H200's mad.lo.s16 at 8 chains x 16 / 32 and sub.u16 at 4 x 21 / 42 were slopes above their
    pipe's limit), in proportion, while the longest region stays within ``region_cap`` SASS."""
    from gpudissect.suites.instructions.core import FULL_PLAN, lengths_for

    p = FULL_PLAN
    assert lengths_for(p.tp_units, 8, 1.0, p) == (16, 32)  # the plain rule: the budget's split
    assert lengths_for(p.tp_units, 8, 1.0, p, p.tp_min_length) == (32, 64)
    assert lengths_for(p.tp_units, 4, 3.0, p, p.tp_min_length) == (32, 64)  # 768 SASS: within the cap
    assert lengths_for(p.tp_units, 1, 1.0, p, p.tp_min_length) == (128, 256)  # long enough already
    heavy = lengths_for(p.tp_units, 8, 20.0, p, p.tp_min_length)
    assert heavy == lengths_for(p.tp_units, 8, 20.0, p)  # raising it would leave the first fetch level
    assert max(lengths_for(p.tp_units, 8, 3.0, p, p.tp_min_length)) * 8 * 3 <= p.region_cap
