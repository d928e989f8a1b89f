"""The async suite (issue 18): tensor-map validation (good and bad maps), generators that compile
with ptxas and hold the SASS the table names, the analyses on synthetic timings with known
answers, and the suite end to end on a fake GPU with planted costs."""

from __future__ import annotations

import pickle
import re
from types import SimpleNamespace

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context, SuiteInputError
from gpudissect.bench.runner import run
from gpudissect.device.args import Buf
from gpudissect.device.device import FakeDevice
from gpudissect.device.tensormap import TensorMap, TensorMapError
from gpudissect.kernel.build import build_module
from gpudissect.kernel.ptx import ptx_header
from gpudissect.kernel.sass import SassInstr
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.async_copy import analyse as an
from gpudissect.suites.async_copy import checks
from gpudissect.suites.async_copy import suite as su
from gpudissect.suites.async_copy.kernels import (
    LENGTHS,
    REPS,
    ROW,
    Spec,
    make_kernel,
    module_header,
)
from gpudissect.suites.async_copy.summary import summarize

TARGET = make_target("sm_90")


# ------------------------------------------------------------------ tensor maps
def _map(**kw) -> TensorMap:
    base = {"buf": Buf("t", nbytes=1 << 20), "dtype": "f32", "dims": (256, 64), "strides": (1024,),
            "box": (32, 32)}
    base.update(kw)
    return TensorMap(**base)


def test_good_maps_pass_and_pickle():
    for m in (_map(), _map(swizzle="128B"), _map(swizzle="32B", box=(8, 32)), _map(l2_promotion="256B"),
              _map(oob_fill="nan"), _map(dtype="u8", dims=(1024,), strides=(), box=(256,)),
              _map(dims=(4, 4, 4, 4, 4), strides=(16, 64, 256, 1024), box=(4, 2, 2, 2, 2)),
              _map(dims=(8, 8, 8), strides=(32, 256), box=(8, 8, 8), interleave="32B", offset=32)):
        m.validate()
    m = pickle.loads(pickle.dumps(_map()))
    assert m.box_bytes == 32 * 32 * 4 and m.rank == 2 and m.elem_strides == (1, 1)


@pytest.mark.parametrize("kw,why", [
    ({"dims": (2,) * 6, "strides": (16,) * 5, "box": (2,) * 6}, "rank 6"),
    ({"box": (257, 1), "dims": (512, 64), "strides": (2048,)}, "each 1 to 256"),
    ({"box": (3, 32)}, "not a multiple of 16"),
    ({"swizzle": "64B"}, "exceeds the 64B swizzle span"),
    ({"strides": (1032,)}, "positive multiple of 16"),
    ({"strides": (512,)}, "less than dimension 0"),
    ({"offset": 8}, "offset 8 is not a multiple of 16"),
    ({"dtype": "u32", "oob_fill": "nan"}, "needs a floating-point dtype"),
    ({"interleave": "16B"}, "needs rank >= 3"),
    ({"dims": (256, 4096)}, "the buffer holds"),
    ({"box": (32, 128)}, "larger than the tensor"),
    ({"elem_strides": (1, 9)}, "element strides"),
    ({"swizzle": "16B"}, "swizzle '16B'"),
    ({"box": (32,)}, "needs 2 box sizes"),
])
def test_bad_maps_are_refused_with_one_line(kw, why):
    with pytest.raises(TensorMapError) as e:
        _map(**kw).validate()
    assert why in str(e.value) and "\n" not in str(e.value)


def test_fake_device_refuses_a_bad_map_as_the_gpu_would():
    dev = FakeDevice(launch_model=lambda *a: {})
    dev.launch(b"", "k", 1, 32, [_map()])
    with pytest.raises(TensorMapError):
        dev.launch(b"", "k", 1, 32, [_map(box=(3, 32))])


def test_the_suite_maps_are_valid():
    for cfg in su.TENSOR_CONFIGS.values():
        m = su.tensor_map(cfg)
        m.validate()
        assert m.box_bytes == int(np.prod(cfg["box"])) * m.esize
    for t in su.BW_TILES:
        m, geo = su.stream_map(t, su.SRC_BYTES, "128B" if t == 8192 else "none")
        m.validate()
        assert m.box_bytes == t and geo["tiles_x"] * geo["tiles_y"] * t == su.SRC_BYTES


# ------------------------------------------------------------------ generators and SASS
@pytest.fixture(scope="module")
def built():
    probes = su.all_probes()
    header = module_header(ptx_header(TARGET.ptx_isa, TARGET.arch))
    ks = [make_kernel(s, header) for p in probes for s in p.specs]
    return probes, build_module(ks, TARGET.arch, opt=3)


def test_every_generator_compiles_and_holds_its_sass(built):
    probes, out = built
    kinds = set()
    for p in probes:
        for s in p.specs:
            b = out[s.name]
            assert not isinstance(b, Exception), (s.name, b)
            assert checks.check(b, s) == [], (s.name, checks.check(b, s))
            assert all(n > 0 for n in checks.sass_counts(b, s).values())
            kinds.add(s.kind)
    assert kinds == {"op", "phase", "handshake", "cpasync", "sync", "tma_load", "ld", "tma_store", "tensor",
                     "tma_stream", "tma_store_stream", "ld_stream", "cpasync_stream"}


def test_chains_hold_one_instance_per_step(built):
    """The long chain holds (long - short) more instances of the operation than the short one:
    what the slope divides by."""
    probes, out = built
    for name, op in (("tma:load:l2:1024", "UBLKCP"), ("tensor:rank3", "UTMALDG"), ("cpasync:cg16", "LDGSTS"),
                     ("op:mbarrier.arrive", "SYNCS"), ("tma:reduce:256", "UBLKRED")):
        p = next(p for p in probes if p.name == name)
        n = [sum(1 for i in out[s.name].region if i.opcode == op) for s in p.specs]
        assert n == list(LENGTHS), (name, n)


def test_check_flags_missing_and_harness_opcodes():
    spec = Spec("k", "tma_load", {"tile": 16, "where": "l2"})
    ins = [SassInstr(0, "UBLKCP", ("S", "G"), ()), SassInstr(16, "STG", ("E",), ())]
    flags = checks.check(SimpleNamespace(name="k", region=ins, arch="sm_90"), spec)
    assert any("lacks SYNCS.ARRIVE.TRANS64" in f for f in flags)
    assert any("harness in the timed region: STG.E" in f for f in flags)
    assert checks.check(SimpleNamespace(name="k", region=[], arch="sm_90"), spec)[0].endswith("empty timed region")


def test_table_refines_by_parameter():
    assert "UTMALDG.4D" in checks.expected(Spec("k", "tensor", {"rank": 4}), checks.sass_table("sm_90"))
    assert "LDGSTS.E.BYPASS.128" in checks.expected(Spec("k", "cpasync", {"variant": "cg16"}), checks.sass_table("sm_90"))
    assert "UBLKRED.G.S.ADD" in checks.expected(Spec("k", "tma_store", {"op": "reduce.add.u32"}), checks.sass_table("sm_90"))


# ------------------------------------------------------------------ analyses
def _rows(cycles: list[float], g_spans: list[float] | None = None, warps: int = 1) -> np.ndarray:
    rows = np.zeros((warps, ROW), dtype=np.uint64)
    for w in range(warps):
        for r, c in enumerate(cycles):
            rows[w, 4 * r: 4 * r + 4] = [1000 * (r + 1), 1000 * (r + 1) + c, 10**6 * (r + 1) + 3 * w,
                                         10**6 * (r + 1) + 3 * w + (g_spans[r] if g_spans else 1)]
    return rows


def test_chain_slope_recovers_the_planted_cost():
    per = []
    for k in range(3):
        short = an.chain_cycles(_rows([999] + [40 + 7 * LENGTHS[0] + k] * (REPS - 1)), REPS)
        long_ = an.chain_cycles(_rows([999] + [40 + 7 * LENGTHS[1] + k] * (REPS - 1)), REPS)
        per.append((short, long_))
    fit = an.chain_slope(LENGTHS, per)
    assert fit["value"] == pytest.approx(7.0) and fit["flags"] == []
    assert fit["intercepts"][0] == pytest.approx(40.0)
    flat = an.chain_slope(LENGTHS, [([50.0], [50.0])])
    assert flat["value"] == 0 and flat["flags"][0].startswith("unphysical")


def test_stream_rate_is_bytes_over_the_grid_span():
    rows = _rows([100] * REPS, [500] * REPS, warps=4)  # warps start 3 ns apart: span 500 + 9
    rates = an.stream_rate(rows, REPS, 509 * 1000)
    assert rates == pytest.approx([1000.0] * (REPS - 1))
    rows[2] = 0  # a row never written is ignored
    assert an.stream_rate(rows, REPS, 509 * 1000)[0] == pytest.approx(1000.0)


def _drift_rows(warps: int, fast: float, slow: float, nbytes_per_warp: float) -> np.ndarray:
    """Warps streaming back to back without a grid-wide sync: half move their bytes at ``fast``
    bytes/ns, half at ``slow``; every repetition starts where the warp's last ended."""
    rows = np.zeros((warps, ROW), dtype=np.uint64)
    for w in range(warps):
        t, d = 1000.0, nbytes_per_warp / (fast if w % 2 else slow)
        for r in range(REPS):
            rows[w, 4 * r: 4 * r + 4] = [0, 1, int(t), int(t + d)]
            t += d
    return rows


def test_stream_window_is_one_region_over_the_kept_repetitions():
    """Per-repetition spans grow with the lag that fast warps build up (the DRAM never idles);
    the window over the kept repetitions holds that lag once, and says how large it is."""
    warps, per_warp = 8, 10**6
    rows = _drift_rows(warps, 1.25, 1.0, per_warp)
    nbytes = warps * per_warp
    per_rep = an.stream_rate(rows, REPS, nbytes)
    assert per_rep[0] > per_rep[1] > per_rep[2]  # the lag grows repetition after repetition
    w = an.stream_window(rows, REPS, nbytes)
    # the window: the slow warps' end of the last repetition, the fast warps' start of the first kept
    span = REPS * per_warp / 1.0 - per_warp / 1.25
    assert w["gbps"] == pytest.approx((REPS - 1) * nbytes / span, rel=1e-6)
    assert w["gbps"] > max(per_rep[1:])
    assert w["start_lag"] == pytest.approx((per_warp / 1.0 - per_warp / 1.25) / span, abs=1e-3)
    even = _drift_rows(warps, 1.0, 1.0, per_warp)  # no drift: the window is every repetition's rate
    assert an.stream_window(even, REPS, nbytes)["gbps"] == pytest.approx(an.stream_rate(even, REPS, nbytes)[0])
    assert an.stream_window(even, REPS, nbytes)["start_lag"] == 0
    assert an.stream_window(np.zeros_like(even), REPS, nbytes)["gbps"] is None  # nothing written


def test_streams_store_no_timestamp_between_repetitions():
    """A stream kernel keeps each repetition's timestamps in registers and stores them after the
    last one: between a repetition's end and the next start no store of the harness runs (the
    kept repetitions are timed as one window); the chains store after each repetition."""
    header = module_header(ptx_header(TARGET.ptx_isa, TARGET.arch))
    seen = set()
    for p in su.all_probes():
        text = make_kernel(p.specs[0], header).entry
        loop = text.split("$Lrep:")[1].split("@%p bra $Lrep;")[0]
        after = text.split("@%p bra $Lrep;")[1]
        between = loop.split("mov.u64 %g1, %globaltimer;")[1]
        stamps = [ln for ln in between.splitlines() if "st.global" in ln and "%lead" in ln]
        if p.stream:
            seen.add(p.specs[0].kind)
            assert not stamps, p.name
            assert sum("st.global.v2.u64" in ln for ln in after.splitlines()) == 2 * REPS, p.name
        else:
            assert len(stamps) == 2, p.name
    assert seen == {"tma_stream", "tma_store_stream", "ld_stream", "cpasync_stream"}


def test_saturation_and_reach():
    assert an.saturation({1: 10, 2: 20, 4: 30, 8: 30.5}) == {"best": 30.5, "at": 8, "saturated": True,
                                                            "rise": 1.0167}
    s = an.saturation({1: 10, 2: 20, 4: 40})
    assert not s["saturated"] and s["rise"] == 2.0
    assert an.saturation({1: 10, 2: 30, 4: 20})["at"] == 2
    assert an.first_reaching({1024: 50, 4096: 91, 8192: 99}, 100) == 4096
    assert an.first_reaching({1024: 50}, 100) is None


# ------------------------------------------------------------------ the suite on a fake GPU
COST = {"op:mbarrier.arrive": 7.0, "tma:load:l2:1024": 400.0}
RATE_CAP = 4  # planted: the stream's rate grows with CTAs up to 4 per SM, then stays


def _model(names: dict[str, str], nsm: int):
    def launch(kernel, grid, block, args, smem):
        out = args[0]
        warps = -(-block // 32)
        m = re.search(r"_n(\d+)$", kernel)
        if m:
            c = 50 + COST[names[kernel]] * int(m.group(1))
            rows = _rows([c] * REPS, warps=warps * grid)
        else:
            ctas = grid // nsm
            rows = _rows([100] * REPS, [1e6 / min(ctas, RATE_CAP)] * REPS, warps=warps * grid)
        words = np.zeros(out.nbytes // 8, dtype=np.uint64)
        words[: rows.size] = rows.ravel()
        return {"out": words}
    return launch


def test_suite_end_to_end_on_a_fake_gpu(tmp_path):
    suite = get_suite("async")
    probes = {p.name: p for p in su.all_probes()}
    names = {s.name: p for p in probes for s in probes[p].specs}
    nsm = 4
    dev = FakeDevice(sm_count=nsm, launch_model=_model(names, nsm))
    store = Store(tmp_path / "a.db")
    ctx = Context(dev, store, TARGET)
    out = run(suite, ctx, ["op:mbarrier.arrive", "tma:load:l2:1024", "bw:ld.v4:l2"])
    recs = {r["variant"]: r for r in store.results(out.run_id)}
    assert recs["op:mbarrier.arrive"]["value"] == pytest.approx(7.0)
    assert recs["tma:load:l2:1024"]["value"] == pytest.approx(400.0)
    bw = recs["bw:ld.v4:l2"]
    assert bw["fit"]["saturation"]["at"] == RATE_CAP and bw["fit"]["saturation"]["saturated"]
    # the plain-load baseline sweeps ILP x CTAs; CTAs that cannot be resident at once are not run
    cfgs = bw["samples"]["configs"]
    assert {c["ilp"] for c in cfgs.values()} == set(su.LD_ILPS) and "refused" in cfgs["ilp8:ctas8"]
    assert all(d["loads_in_flight"] == int(i) for i, d in bw["fit"]["sass"].items())
    assert not [f for r in recs.values() for f in r["flags"] if f.startswith(("sass", "error"))]
    summ = store.get_meta(f"summary:{out.run_id}")
    assert any("arrive 7.0" in c for c in summ["conclusions"])
    assert any("L2 hit (cycles by tile bytes): 1024 B 400" in c for c in summ["conclusions"])


def test_bad_pattern_is_one_line():
    with pytest.raises(SuiteInputError, match="no async probe matches"):
        get_suite("async").validate(["nothing:*"], {})


def test_summary_and_figure_from_synthetic_records(tmp_path):
    recs = [{"variant": f"bw:tma.bulk:dram:{t}", "value": v, "params": {"tile": t, "where": "dram"},
             "fit": {"saturation": {"at": 2, "saturated": True}}, "flags": []}
            for t, v in ((1024, 1000.0), (4096, 2700.0), (16384, 3000.0))]
    recs.append({"variant": "bw:ld.v4:dram", "value": 3000.0, "params": {"where": "dram"},
                 "fit": {"saturation": {"at": 8, "saturated": True}}, "flags": []})
    s = summarize(recs)
    line = next(c for c in s["conclusions"] if c.startswith("tma.bulk DRAM read"))
    assert "best 3000 GB/s at 16384 B tiles" in line and "reaches 100% of the plain load" in line
    assert "tiles from 4096 B reach 90%" in line
    from gpudissect.suites.async_copy.figures import figures
    from gpudissect.suites.async_copy.view import report_section

    paths = figures({"records": recs, "provenance": {"gpu_name": "X"}}, tmp_path)
    assert any(p.name == "async_tma_bandwidth.png" for p in paths)
    sec = report_section({"summary": s}, None)
    assert sec["key_tables"][0].rows and sec["tables"]


def test_a_hung_mbarrier_wait_is_recorded_and_the_sweep_goes_on(tmp_path):
    """A kernel that never returns (a wait whose phase never completes) is killed by the
    worker's watchdog; its item stores the reason and the next item is measured."""
    import functools

    from gpudissect.device.fakes import ScriptedDevice
    from gpudissect.device.worker import WorkerDevice

    hang = su.all_probes()
    name = next(s.name for p in hang if p.name == "mbarrier:phase-flip" for s in p.specs)
    dev = WorkerDevice(timeout=2.0, factory=functools.partial(ScriptedDevice, faults={name: "hang"}))
    try:
        store = Store(tmp_path / "h.db")
        out = run(get_suite("async"), Context(dev, store, TARGET), ["mbarrier:phase-flip", "op:mbarrier.arrive"])
        recs = {r["variant"]: r for r in store.results(out.run_id)}
    finally:
        dev.close()
    assert any("hung: no answer after 2 s" in f for f in recs["mbarrier:phase-flip"]["flags"])
    assert recs["op:mbarrier.arrive"]["value"] is not None  # measured after the hang (fake: 0)


def test_nothing_after_a_region_writes_what_the_next_repetition_chains_on():
    """Between a repetition's end clock and the next repetition, a chain kernel writes none of
    the registers its timed body reads before writing (a sink that moved the chain's address
    made the second repetition of the L2 load chain read a wild address)."""
    header = module_header(ptx_header(TARGET.ptx_isa, TARGET.arch))
    for p in su.all_probes():
        if p.stream:
            continue
        text = make_kernel(p.specs[0], header).entry
        body = text.split("mov.u64 %t0, %clock64;")[1].split("mov.u64 %t1, %clock64;")[0]
        post = text.split("mov.u64 %t1, %clock64;")[1].split("add.u32 %rep, %rep, 1;")[0]
        carried = set()
        written: set[str] = set()
        for line in body.splitlines():
            m = re.match(r"\s*(?:@!?%\w+\s+)?[\w.:]+\s+(%\w+)\s*,(.*)", line)
            if not m:
                continue
            carried |= {r for r in re.findall(r"%\w+", m.group(2)) if r not in written}
            if not line.strip().startswith(("st.", "@")):
                written.add(m.group(1))
        post_writes = {m.group(1) for line in post.splitlines()
                       if (m := re.match(r"\s*(?:add|mov|sub|mul|cvt)[\w.]*\s+(%\w+)\s*,", line))}
        assert not (post_writes & carried), (p.name, post_writes & carried)


def test_little_law_and_fall_off_on_synthetic_sweeps():
    from gpudissect.suites.async_copy.summary import fall_off, little_law

    recs = {"bw:tma.bulk:dram:256": {"params": {"tile": 256, "sms": 100, "stages": 4},
                                     "samples": {"configs": {"1": {"gbps": 200.0}, "4": {"gbps": 800.0},
                                                             "8": {"gbps": 400.0}}}}}
    (d,) = little_law(recs)
    assert d["turnaround_ns"] == pytest.approx(100 * 4 * 256 / 200.0)
    f = fall_off(recs, "bw:tma.bulk:dram:")["bw:tma.bulk:dram:256"]
    assert (f["best_at"], f["last_at"], f["last"]) == (4, 8, 400.0)


def test_the_plain_load_sweep_runs_the_most_ctas_that_fit_where_a_listed_count_does_not():
    from gpudissect.suites.async_copy.suite import _ctas_to_run

    assert _ctas_to_run((1, 2, 4, 8), 3) == [1, 2, 3, 4, 8]  # 4 and 8 refused, 3 run
    assert _ctas_to_run((1, 2, 4, 8), 8) == [1, 2, 4, 8]
    assert _ctas_to_run((1, 2, 4, 8), 4) == [1, 2, 4, 8]
    assert _ctas_to_run((1, 2), 0) == [1, 2]  # nothing fits: every count refused, none added
