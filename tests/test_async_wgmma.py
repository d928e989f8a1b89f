"""The async suite's wgmma items (issue 18, last part): descriptors per swizzle mode (bit fields,
known answers from the PTX ISA's formula), the TMA box placement, the generators compiled with
ptxas holding the expected SASS, ptxas's serialization messages as flags, the analyses on
synthetic data with known answers, and the items end to end on a fake GPU."""

from __future__ import annotations

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.device.device import FakeDevice
from gpudissect.device.tensormap import TensorMap
from gpudissect.kernel import wgmma as wd
from gpudissect.kernel.build import Built
from gpudissect.kernel.mma import TIMED_REPS
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.sass import SassInstr
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.async_copy import suite as su
from gpudissect.suites.async_copy import wgmma_feed as wf
from gpudissect.suites.async_copy import wgmma_kernels as wk
from gpudissect.suites.async_copy.kernels import REPS, ROW

TARGET = make_target("sm_90")


def enc(x: int) -> int:  # PTX ISA: matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4
    return (x & 0x3FFFF) >> 4


# ------------------------------------------------------------------ descriptors and layouts
@pytest.mark.parametrize("sw,code,lbo,sbo", [("none", 0, 64 * 16, 128), ("32B", 3, 16, 256), ("64B", 2, 16, 512),
                                             ("128B", 1, 16, 1024)])
def test_descriptor_fields_per_swizzle(sw, code, lbo, sbo):
    d = wf.wd.feed_descriptor(sw, 64, addr=0x1400, kk=0)
    assert d & 0x3FFF == enc(0x1400)
    assert (d >> 16) & 0x3FFF == enc(lbo)
    assert (d >> 32) & 0x3FFF == enc(sbo)
    assert (d >> 49) & 0x7 == 0  # base offset: tiles 1024-byte aligned
    assert d >> 62 == code


def test_descriptor_known_answers():
    # 128B swizzle, K-major: LBO unused (1), SBO = 8 rows x 128 B = 1024 (64 encoded), type 1
    assert wd.feed_descriptor("128B", 64) == 0x4000004000010000
    assert wd.feed_descriptor("64B", 256) == 0x8000002000010000
    assert wd.feed_descriptor("32B", 64) == 0xC000001000010000
    # none: core matrices along K 64 x 16 B apart (A) / 256 x 16 B (B), 8-row groups 128 B apart
    assert wd.feed_descriptor("none", 64) == (8 << 32) | (64 << 16)
    assert wd.feed_descriptor("none", 256) == (8 << 32) | (256 << 16)


@pytest.mark.parametrize("sw", list(wd.SWIZZLES))
def test_k_steps_and_boxes_cover_the_tile(sw):
    rows, w = 256, wd.atom(sw)
    boxes = wk.box_placements(sw, rows)
    # every box is (w bytes x 64 rows); together they fill rows x 128 bytes exactly once
    offs = sorted(off for _x, _r, off in boxes)
    assert offs == list(range(0, rows * wd.ROW_BYTES, wk.BOX_ROWS * w))
    assert {x for x, _r, _o in boxes} == set(range(0, wd.K_TILE, w // 2))
    # K step kk starts where the box holding K bytes 32 kk .. lies, at 32 kk within its row
    lbo, _ = wd.lbo_sbo(sw, rows)
    for kk in range(wd.K_STEPS):
        off = wd.kstep_offset(sw, rows, kk)
        kbyte = kk * wd.K_STEP_BYTES
        box = next(o for x, r, o in boxes if r == 0 and x * 2 <= kbyte < x * 2 + w)
        assert off == box + kbyte % w
        if sw == "none":  # the second core matrix along K: the next box, LBO further
            assert off + lbo == next(o for x, r, o in boxes if r == 0 and x * 2 == kbyte + 16)
    # descriptors of the K steps differ by the encoded offsets only
    d0 = wd.feed_descriptor(sw, rows)
    assert [wd.feed_descriptor(sw, rows, kk=k) - d0 for k in range(4)] == \
        [wd.kstep_offset(sw, rows, k) >> 4 for k in range(4)]


def test_d_fragment_positions_are_a_bijection():
    seen = {wk.d_position(t, i) for t in range(128) for i in range(128)}
    assert len(seen) == 64 * 256 and min(seen) == (0, 0) and max(seen) == (63, 255)
    assert wk.d_position(0, 0) == (0, 0) and wk.d_position(5, 2) == (9, 2) and wk.d_position(32, 5) == (16, 9)


# ------------------------------------------------------------------ generators and SASS
@pytest.fixture(scope="module")
def built():
    ctx = Context(FakeDevice(), None, TARGET)
    specs = [s for _n, ss, _p in wf.probe_specs() for s in ss]
    return specs, wf.build(ctx, specs)


@pytest.mark.slow
def test_every_wgmma_generator_compiles_with_its_sass(built):
    specs, out = built
    for s in specs:
        b = out[s.name]
        assert not isinstance(b, Exception), (s.name, b)
        assert wf.kernel_flags(b, s) == [], (s.name, wf.kernel_flags(b, s))


@pytest.mark.slow
def test_throughput_region_is_back_to_back_hgmma(built):
    specs, out = built
    for s in specs:
        if s.kind != "wgmma_thr":
            continue
        fulls = [i.full for i in out[s.name].region]
        assert fulls.count("HGMMA.64x256x16.F32") == s.length
        assert fulls.count("WARPGROUP.DEPBAR.LE") == 1 and fulls.count("WARPGROUP.ARRIVE") == 1
        assert all("gdesc[" in i.text for i in out[s.name].region if i.opcode == "HGMMA")


@pytest.mark.slow
def test_pipeline_loop_holds_tma_mbarrier_and_hgmma(built):
    specs, out = built
    for s in specs:
        if s.kind != "wgmma_pipe":
            continue
        fulls = [i.full for i in out[s.name].region]
        assert fulls.count("UTMALDG.2D") == 2 * 1 + 4  # A: 2 x 64 rows, B: 4 x 64 rows (one K box each)
        assert fulls.count("HGMMA.64x256x16.F32") == wd.K_STEPS
        assert "SYNCS.ARRIVE.TRANS64" in fulls and "SYNCS.PHASECHK.TRANS64.TRYWAIT" in fulls
        assert fulls.count("WARPGROUP.DEPBAR.LE") == 2  # wait_group 1 in the loop, 0 after it
        assert out[s.name].kernel.smem == wk.pipe_smem(s.params["stages"]) <= 227 * 1024


@pytest.mark.slow
def test_layout_kernels_load_every_box(built):
    specs, out = built
    for s in specs:
        if s.kind == "wgmma_layout":
            fulls = [i.full for i in out[s.name].instrs]
            n = len(wk.box_placements(s.params["swizzle"], 64)) + len(wk.box_placements(s.params["swizzle"], 256))
            assert fulls.count("UTMALDG.2D") == n and fulls.count("HGMMA.64x256x16.F32") == 4


def _fake_built(name: str, log: str, instrs: list[SassInstr] | None = None) -> Built:
    return Built(Kernel(name, "", ""), b"", "", instrs or [], instrs or [], 3, "sm_90a", ptxas_log=log)


def test_ptxas_serialization_messages_become_flags():
    log = ("ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized "
           "due to insufficient register resources for the wgmma pipeline in the function 'k1'\n"
           "ptxas info    : (C7517) warpgroup.wait is injected in around line 9 by compiler in function 'k2'\n")
    f1 = wf.ptxas_flags(_fake_built("k1", log))
    assert len(f1) == 1 and f1[0].startswith("wgmma-serialized: ptxas C7510")
    f2 = wf.ptxas_flags(_fake_built("k2", log))
    assert len(f2) == 1 and f2[0].startswith("ptxas-wgmma: ptxas C7517")
    assert wf.ptxas_flags(_fake_built("k3", log)) == []


def test_serialized_sass_is_detected():
    def ins(op: str) -> SassInstr:
        parts = op.split(".")
        return SassInstr(0, parts[0], tuple(parts[1:]), ())
    fine = [ins("WARPGROUP.ARRIVE")] + [ins("HGMMA.64x256x16.F32")] * 8 + [ins("WARPGROUP.DEPBAR.LE")]
    serial = [ins("WARPGROUP.ARRIVE")] + [ins("HGMMA.64x256x16.F32"), ins("WARPGROUP.DEPBAR.LE")] * 8
    assert wf.serialized_sass(fine) is None
    assert "8 WARPGROUP.DEPBAR for 8 HGMMA" in wf.serialized_sass(serial)


# ------------------------------------------------------------------ analyses on synthetic data
def _fragments(d: np.ndarray) -> np.ndarray:
    raw = np.zeros((128, 128), dtype=np.float32)
    for t in range(128):
        for i in range(128):
            raw[t, i] = d[wk.d_position(t, i)]
    return raw.ravel()


def test_layout_compare_exact_and_perturbed():
    g = wf.layout_operands()
    want = (g[:64].astype(np.float32) @ g[64:].astype(np.float32).T)
    d = wf.decode_d(_fragments(want))
    c = wf.compare_layout(g, d)
    assert c["exact"] and c["mismatches"] == 0 and c["max_abs_error"] == 0
    d[3, 7] += 1
    c = wf.compare_layout(g, d)
    assert not c["exact"] and c["mismatches"] == 1 and c["max_abs_error"] == 1
    # a layout error (rows of B read in the wrong order) shows as many mismatches
    bad = wf.decode_d(_fragments(g[:64].astype(np.float32) @ g[64:][::-1].astype(np.float32).T))
    assert wf.compare_layout(g, bad)["mismatches"] > 1000


def _pipe_rows(ctas: int, cycles: float, skew: float = 0.0) -> np.ndarray:
    per = wk.PIPE_THREADS // 32
    rows = np.zeros((ctas * per, ROW), dtype=np.uint64)
    for c in range(ctas):
        for w in range(per):
            for r in range(REPS):
                t0 = 1000 * r + (skew * w if w < 8 else 0)
                t1 = t0 + cycles - (skew * w if w < 8 else 0) + (999999 if w >= 8 else 0)
                g0 = 10**9 + r * 10**6 + 100 * c
                rows[c * per + w, 4 * r: 4 * r + 4] = [t0, t1 + skew * w, g0, g0 + cycles]
    return rows


def test_pipe_rates_use_the_consumer_span_only():
    flop = 2.0 * 128 * 256 * 64 * 128
    r = wf.pipe_rates(_pipe_rows(4, 200000.0), 4, REPS, flop)
    assert r["flop_per_cycle_sm"] == pytest.approx(flop / 200000.0)  # the producer's long window ignored
    assert r["ctas_timed"] == 4 and len(r["cycles"]) == 4 and len(r["cycles"][0]) == REPS - 1
    assert r["sm_mhz_during"] == pytest.approx(1000.0)  # planted: one cycle per ns
    # the grid span: first consumer start to last consumer end over the CTAs (globaltimer)
    assert r["grid_ns"][0] == pytest.approx(200000.0 + 300)


def test_thr_best_and_saturation():
    assert wf.thr_best({1: 1 / 128, 2: 1 / 128})["saturated"]
    s = wf.thr_best({1: 1 / 256, 2: 1 / 128})
    assert s["best"] == 1 / 128 and s["at"] == 2 and not s["saturated"]


# ------------------------------------------------------------------ end to end on a fake GPU
CYC_PER_WGMMA = 128.0  # planted: one m64n256k16 per 128 cycles per SM, whatever the warpgroups


def _model(nsm: int, pipe_cycles: float):
    def launch(kernel, grid, block, args, smem):
        if kernel.startswith("wf_thr_"):
            length = int(kernel.rsplit("_n", 1)[1])
            warps = grid * block // 32
            per_sm = warps // nsm
            groups = per_sm // 4
            span = 60 + CYC_PER_WGMMA * length * groups
            t = np.zeros((warps, 2 * TIMED_REPS + 1), dtype=np.uint64)
            for rep in range(TIMED_REPS):
                t[:, 2 * rep], t[:, 2 * rep + 1] = 10_000 * rep, 10_000 * rep + span
            t[:, -1] = np.arange(warps) // per_sm
            return {"tc_times": t.ravel()}
        if kernel.startswith("wf_layout_"):
            tmap = next(a for a in args if isinstance(a, TensorMap))
            g = tmap.buf.data.view(np.float16).reshape(wk.LAYOUT_ROWS, wd.K_TILE).astype(np.float32)
            return {args[0].name: _fragments(g[:64] @ g[64:].T)}
        if kernel.startswith("wf_pipe_"):
            return {"wf_out": _pipe_rows(grid, pipe_cycles).ravel()}
        raise KeyError(kernel)
    return launch


@pytest.mark.slow
def test_wgmma_items_end_to_end_on_a_fake_gpu(tmp_path):
    nsm = 4
    flop_cta = 2.0 * wk.CONSUMERS * wd.M_WG * wk.N * wd.K_TILE * wk.PIPE_KBLOCKS
    # planted: the pipeline at 80% of the wgmma-only rate (flop per cycle per SM)
    pipe_cycles = flop_cta / (0.8 * 2 * 64 * 256 * 16 / CYC_PER_WGMMA)
    dev = FakeDevice(sm_count=nsm, launch_model=_model(nsm, pipe_cycles))
    store = Store(tmp_path / "w.db")
    out = run(get_suite("async"), Context(dev, store, TARGET),
              ["wgmma:swizzle=64B", "wgmma:layout=128B", "wgmma:pipeline:stages=3"])
    recs = {r["variant"]: r for r in store.results(out.run_id)}
    thr = recs["wgmma:swizzle=64B"]
    assert thr["fit"]["instr_per_cycle_sm"] == pytest.approx(1 / CYC_PER_WGMMA)
    assert thr["fit"]["saturation"]["saturated"]
    lay = recs["wgmma:layout=128B"]
    assert lay["value"] == 0 and lay["fit"]["exact"]
    pipe = recs["wgmma:pipeline:stages=3"]
    assert pipe["fit"]["pct_of_wgmma_only"] == pytest.approx(80.0)
    assert pipe["fit"]["sm_mhz_during"] == pytest.approx(1000.0)
    assert recs["wgmma:swizzle=128B"]["fit"]["instr_per_cycle_sm"] == pytest.approx(1 / CYC_PER_WGMMA)
    assert not [f for r in recs.values() for f in r["flags"] if f.startswith(("sass", "error", "wgmma-serialized"))]


def test_wgmma_group_selects_every_item():
    names = [p.name for p in su.select(su.all_probes() + su.wgmma_probes(), ["wgmma"])]
    assert len(names) == 11 and "wgmma:pipeline:stages=4" in names and "wgmma:layout=32B" in names


def test_summary_and_view_show_the_wgmma_items():
    from gpudissect.suites.async_copy.summary import summarize
    from gpudissect.suites.async_copy.view import report_section

    recs = [{"variant": "wgmma:swizzle=128B", "value": 650.0, "unit": "TFLOP/s", "params": {},
             "fit": {"pct_of_peak": 98.5, "instr_per_cycle_sm": 1 / 128}, "flags": []},
            {"variant": "wgmma:swizzle=none", "value": 640.0, "unit": "TFLOP/s", "params": {},
             "fit": {"pct_of_peak": 97.0}, "flags": ["wgmma-serialized: ptxas C7510: x"]},
            {"variant": "wgmma:layout=64B", "value": 0.0, "unit": "mismatches", "params": {}, "fit": {"exact": True},
             "flags": []},
            {"variant": "wgmma:pipeline:stages=3", "value": 500.0, "unit": "TFLOP/s", "params": {},
             "fit": {"pct_of_peak": 75.0, "pct_of_wgmma_only": 76.1, "sm_mhz_during": 1520.0}, "flags": []}]
    s = summarize(recs)
    text = " | ".join(s["conclusions"])
    assert "128B 98.5% of the datasheet peak (650 TFLOP/s)" in text and "(serialized: none)" in text
    assert "64B exact" in text and "3 stages 75.0% of the datasheet peak, 76.1% of the wgmma-only rate per cycle, 500 TFLOP/s at the 1520 MHz" in text
    assert not any(k.startswith("wgmma:") for k in s["latency"])
    sec = report_section({"summary": s}, None)
    assert any(t.rows and len(t.rows) == 4 for t in sec["tables"])
