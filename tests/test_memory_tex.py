"""The texture path of the memory suite: the ``chase_tex`` kernel (SASS check), the chain as
u32 element indices, the :class:`Tex` kernel argument on the fake device, the worker and the
suite, and (GPU only) a real texture chase that must end on the predicted node."""

from __future__ import annotations

import functools
import pickle

import numpy as np
import pytest

from gpudissect.device.args import TEX1D_LINEAR_MAX_WIDTH, Buf, Tex
from gpudissect.device.device import FakeDevice
from gpudissect.suites.memory import kernels as gm

KiB, MiB = 1 << 10, 1 << 20


def _build_tex():
    from gpudissect.arch.target import make_target
    from gpudissect.kernel.build import build_one
    from gpudissect.kernel.ptx import ptx_header

    t = make_target("sm_90")
    return build_one(gm.chase_tex_kernel(ptx_header(t.ptx_isa, t.arch)), t.arch)


def _visit(chain: gm.Chain) -> np.ndarray:
    """The walk from node 0 (the certificate validate_chain takes)."""
    out, cur = [], 0
    for _ in range(chain.nodes):
        out.append(cur)
        cur = int(chain.next[cur])
    return np.array(out, dtype=np.uint32)


def _tex_walk(elems: np.ndarray, steps: int) -> int:
    """What chase_tex does: start at element 0, idx = texture[idx] ``steps`` times
    (an index outside the texture reads 0)."""
    idx = 0
    for _ in range(steps):
        idx = int(elems[idx]) if idx < elems.size else 0
    return idx


# --- kernel and SASS check

def test_tex_chase_compiles_to_dependent_texture_fetches_only():
    from gpudissect.suites.memory.checks import check_region

    b = _build_tex()
    chk = check_region(b.kernel.meta["path"], b.region, b.arch)
    assert chk.ok, chk.problems
    assert set(chk.counts) == {"TLD.LZ"} and chk.counts["TLD.LZ"] == gm.UNROLL
    tld = [i for i in b.region if i.opcode == "TLD"]
    # bindless 1D fetch: (RZ, dst, coordinate, handle, ...), each coordinate the previous result
    assert all("1D" in i.operands and i.operands[3].startswith("UR") for i in tld)
    for prev, cur in zip(tld, tld[1:], strict=False):
        assert cur.operands[2] == prev.operands[1], (prev.full, cur.operands)
    assert tld[0].operands[2] == tld[-1].operands[1]  # the loop carries the chain round


def test_tex_check_rejects_other_loads(sass):
    from gpudissect.suites.memory.checks import check_region

    tld = sass("TLD.LZ RZ, R10, R10, UR4, 0x0, 1D, 0x1")[0]
    ldg = sass("LDG.E.64.CONSTANT R2, desc[UR4][R2.64]")[0]
    assert check_region("tex.1d", [tld] * gm.UNROLL, "sm_90").ok
    assert not check_region("tex.1d", [tld] * gm.UNROLL + [ldg], "sm_90").ok  # a global load too
    assert not check_region("tex.1d", [tld] * 3, "sm_90").ok  # too few fetches
    assert not check_region("tex.1d", [ldg] * gm.UNROLL, "sm_90").ok  # the .nc path is not texture


def test_the_suite_module_holds_a_verified_tex_chase():
    from gpudissect.arch.target import make_target
    from gpudissect.suites.memory.launcher import TEX_KERNEL, Kernels
    from gpudissect.suites.memory.plan import QUICK_PLAN

    k = Kernels(make_target("sm_90"), QUICK_PLAN)
    assert TEX_KERNEL in k.built and k.checks[TEX_KERNEL].ok
    res = k.result(TEX_KERNEL, variant="latency/tex", measure="latency", value=1.0,
                   unit="cycles", statistic="x")
    assert res.value == 1.0 and res.sass == ["TLD.LZ"] and res.sass_hash


# --- the chain as element indices

@pytest.mark.parametrize("spacing,order", [(64, "random"), (8, "random"), (128, "strided")])
def test_element_indices_walk_the_chain(spacing, order):
    ch = gm.build_chain(8 * KiB, spacing, order, seed=5)
    elems = gm.element_indices(ch)
    assert elems.dtype == np.uint32 and elems.size == ch.footprint // 4
    assert np.array_equal(elems, ch.byte_offsets() // 4)
    per = spacing // 4
    visit = _visit(ch)
    gm.validate_chain(ch, visit)
    idx, seen = 0, []
    for _ in range(ch.nodes):
        assert idx % per == 0 and idx < elems.size
        seen.append(idx // per)
        idx = int(elems[idx])
    assert idx == 0 and np.array_equal(np.array(seen), visit)
    # only node words are set: a stray index would read 0 and restart at node 0
    assert np.count_nonzero(elems) == ch.nodes - 1


# --- the Tex argument

def test_tex_argument_is_validated_and_picklable():
    t = Tex(Buf("t", data=np.arange(16, dtype=np.uint32), read=True, dtype="u4"))
    assert t.width == 16 and t.itemsize == 4
    u = pickle.loads(pickle.dumps(t))
    assert u.fmt == "u32" and u.buf.name == "t" and np.array_equal(u.buf.data, t.buf.data)
    with pytest.raises(ValueError, match="texture format"):
        Tex(Buf("t", nbytes=64), fmt="f32")
    with pytest.raises(ValueError, match="whole number"):
        Tex(Buf("t", nbytes=6))
    big = Tex(Buf("big", nbytes=(TEX1D_LINEAR_MAX_WIDTH + 1) * 4))  # no host array needed
    with pytest.raises(ValueError, match="1D linear texture width"):
        big.check_width(TEX1D_LINEAR_MAX_WIDTH)
    Tex(Buf("ok", nbytes=TEX1D_LINEAR_MAX_WIDTH * 4)).check_width(TEX1D_LINEAR_MAX_WIDTH)


def test_fake_device_takes_tex_and_refuses_too_wide():
    seen = []

    def model(kernel, grid, block, args, smem):
        seen.append(args)
        return {}

    dev = FakeDevice(launch_model=model)
    t = Tex(Buf("t", nbytes=64))
    dev.launch(b"", "k", 1, 1, [t, np.uint32(1)])
    assert seen[0][0] is t
    with pytest.raises(ValueError, match="1D linear texture width"):
        dev.launch(b"", "k", 1, 1, [Tex(Buf("big", nbytes=(TEX1D_LINEAR_MAX_WIDTH + 1) * 4))])
    assert len(seen) == 1  # refused before the model ran


def test_worker_forwards_tex_and_reads_its_buffer_back():
    from gpudissect.device.fakes import ScriptedDevice
    from gpudissect.device.worker import WorkerDevice

    w = WorkerDevice(timeout=30.0, factory=functools.partial(ScriptedDevice))
    try:
        data = np.arange(256, dtype=np.uint32)
        run = w.launch(b"cubin", "chase_tex",
                       1, 1, [Tex(Buf("texchain", data=data, read=True, dtype="u4")),
                              Buf("out", nbytes=24, read=True), np.uint32(0), np.uint32(1)])
        assert set(run.outputs) == {"texchain", "out"}
        assert run.outputs["texchain"].dtype == np.uint32 and run.outputs["texchain"].size == 256
        pid = w._proc.pid
        with pytest.raises(ValueError, match="1D linear texture width"):
            w.launch(b"cubin", "chase_tex", 1, 1,
                     [Tex(Buf("big", nbytes=(TEX1D_LINEAR_MAX_WIDTH + 1) * 4))])
        assert w._proc.pid == pid  # a refused argument does not cost the worker
    finally:
        w.close()


# --- the suite with a fake texture path

class TexModel:
    """Emulates chase_tex on the host: follows the texture's element indices and reports
    ``cycles(width)`` per fetch; other kernels get plain outputs."""

    def __init__(self, cycles=lambda width: 77.0):
        self.cycles = cycles
        self.calls: list[tuple] = []

    def __call__(self, kernel, grid, block, args, smem):
        out = np.zeros(3 * grid, dtype=np.uint64)
        if kernel == "chase_tex":
            t, warm, iters = args[0], int(args[2]), int(args[3])
            assert isinstance(t, Tex) and t.fmt == "u32"
            elems = t.buf.data
            self.calls.append((elems, warm, iters))
            out[1::3] = _tex_walk(elems, warm + iters * gm.UNROLL)
            out[0::3] = int(round(self.cycles(t.width) * iters * gm.UNROLL))
        elif kernel.startswith("chase"):
            out[0::3] = 100 * int(args[3]) * gm.UNROLL
        elif kernel == "scatter":
            return {}
        return {"out": out, "bankout": out[:3], "_gpu_ms": [1.0, 0.9, 0.9]}


def test_latency_tex_is_measured_with_a_texture_chain():
    from gpudissect.arch.target import make_target
    from gpudissect.suites.memory.launcher import Kernels, Launcher
    from gpudissect.suites.memory.plan import QUICK_PLAN
    from gpudissect.suites.memory.suite import bench_latency

    model = TexModel()
    r = Launcher(FakeDevice(launch_model=model), Kernels(make_target("sm_90"), QUICK_PLAN), QUICK_PLAN)
    (res,), texts = bench_latency(r, "tex")
    assert res.value == pytest.approx(77.0) and res.unit == "cycles"
    assert not res.flags and res.variant == "latency/tex" and res.sass == ["TLD.LZ"]
    assert res.params["path"] == "tex" and res.params["footprint"] == QUICK_PLAN.hot_footprint
    assert len(res.samples) == QUICK_PLAN.lat_launches
    assert {kind for kind, _ in texts.values()} == {"ptx", "sass"}
    elems, warm, _ = model.calls[0]
    ch = gm.build_chain(QUICK_PLAN.hot_footprint, QUICK_PLAN.hot_spacing, "random",
                        seed=QUICK_PLAN.seed)
    assert np.array_equal(elems, gm.element_indices(ch))
    assert warm >= ch.nodes  # the whole chain is walked before timing


def test_tex_sweep_and_summary_on_fake_device(tmp_path):
    from gpudissect.arch.target import make_target
    from gpudissect.bench.contract import Context
    from gpudissect.bench.runner import run
    from gpudissect.store.db import Store
    from gpudissect.suites import get_suite
    from gpudissect.suites.memory import analyse as am
    from gpudissect.suites.memory.plan import Plan

    plan = Plan(sweep_max=4 * MiB, per_octave=2, refine=1, max_nodes=1 << 12, warm_cap=1 << 10,
                const_footprints=(2048,), lat_launches=2, sweep_iters=4)
    model = TexModel(lambda width: 40.0 if width * 4 <= 256 * KiB else 300.0)
    dev = FakeDevice(launch_model=model, free_bytes=1 << 30)
    store = Store(tmp_path / "m.db")
    ctx = Context(dev, store, make_target("sm_90"), options={"plan": plan})
    run_id = run(get_suite("memory"), ctx, ["latency/tex", "sweep/tex-random"]).run_id
    recs = store.results(run_id)
    sweep = [r for r in recs if r["variant"] == "sweep/tex-random"]
    assert sweep and all(r["value"] is not None for r in sweep), [r["flags"] for r in sweep]
    assert max(r["params"]["footprint"] for r in sweep) <= 4 * MiB
    s = am.summarize(recs)
    assert s["latency"]["tex"] == pytest.approx(40.0)
    (step,) = s["staircase"]["sweep/tex-random"]["steps"]
    assert step["x_below"] <= 256 * KiB < step["x_above"]
    assert any(c.startswith("Pointer-chase latency") and "tex 40" in c for c in s["conclusions"])


def test_tex_latency_reaches_the_timing_reference():
    """The canonical quantity (data/metrics.toml) finds latency/tex in a memory document and
    the timing reference shows it with the other memory latencies."""
    from gpudissect.report.assemble.timing_reference import timing_reference
    from gpudissect.report.read.metrics import lookup
    from gpudissect.report.read.results import ResultSet

    rec = {"variant": "latency/tex", "measure": "latency", "value": 123.0, "unit": "cycles",
           "flags": [], "params": {}}
    rs = ResultSet("gpu", "test", docs={"memory": {"records": [rec], "summary": {}}})
    assert lookup(rs, "tex_latency").value == pytest.approx(123.0)
    rs.docs["memory"]["summary"] = {"latency": {"tex": 120.0}}
    assert lookup(rs, "tex_latency").value == pytest.approx(120.0)
    assert any("texture fetch latency | 120" in ln for ln in timing_reference(rs).splitlines())
    rs.docs["memory"] = {"records": [{**rec, "value": None, "flags": ["error: x"]}], "summary": {}}
    assert lookup(rs, "tex_latency") is None


# --- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("worker", [False, True])
def test_gpu_texture_chase_ends_on_the_predicted_node(worker):
    from gpudissect.device.device import CudaDevice
    from gpudissect.device.worker import WorkerDevice

    b = _build_tex()
    dev = WorkerDevice() if worker else CudaDevice(0)

    def chase(elems, warm, iters):
        run = dev.launch(b.cubin, "chase_tex", 1, 1,
                         [Tex(Buf("texchain", data=elems, read=True, dtype="u4")),
                          Buf("texout", nbytes=24, read=True, zero=True),
                          np.uint32(warm), np.uint32(iters)])
        cycles, sink, _smid = (int(x) for x in run.outputs["texout"][:3])
        assert np.array_equal(run.outputs["texchain"], elems)  # read back from the texture's buffer
        return cycles, sink

    try:
        ch = gm.build_chain(4 * KiB, 64, "random", seed=11)
        elems, per = gm.element_indices(ch), ch.spacing // 4
        # the node reached after warm + UNROLL fetches, for every warm: the visiting order
        seen = np.array([chase(elems, w, 1)[1] for w in range(ch.nodes)])
        assert (seen % per == 0).all()
        order = np.roll(seen // per, gm.UNROLL).astype(np.uint32)
        gm.validate_chain(ch, order)  # the GPU's walk is a certificate of the chain
        assert np.array_equal(order, _visit(ch))
        for warm, iters in ((ch.nodes, 3), (3 * ch.nodes + 5, 64)):
            cycles, sink = chase(elems, warm, iters)
            assert sink == _tex_walk(elems, warm + iters * gm.UNROLL), (warm, iters)
            assert cycles > 0 and cycles / (iters * gm.UNROLL) > 1  # a positive latency
        with pytest.raises(ValueError, match="1D linear texture width"):  # no GPU allows 2^33
            dev.launch(b.cubin, "chase_tex", 1, 1,
                       [Tex(Buf("texbig", nbytes=(1 << 33) * 4)),
                        Buf("texout", nbytes=24), np.uint32(0), np.uint32(1)])
    finally:
        dev.close()
