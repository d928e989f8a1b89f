"""Tests that need a GPU (marked; skipped without one)."""

from __future__ import annotations

import pytest

from gpudissect.store.db import Store

pytestmark = pytest.mark.gpu


def test_suite_on_the_gpu(tmp_path, sweep):
    from gpudissect.device.device import CudaDevice

    dev = CudaDevice(0)
    store = Store(tmp_path / "r.db")
    run_id = sweep(dev, store, ["add.f32", "mul.rn.f64"]).run_id
    lat = {r["variant"]: r for r in store.results(run_id, measure="latency")}
    for v in ("add.f32", "mul.rn.f64"):
        assert lat[v]["value"] is not None and lat[v]["value"] > 0
        assert lat[v]["fit"]["r2"] > 0.9
    run = store.runs()[0]
    assert run["gpu_uuid"] == dev.info.uuid and run["finished"] is not None


LAUNCH_PTX = """
.version 8.0
.target sm_90
.address_size 64
.extern .shared .align 16 .b8 smem[];
.visible .entry addk(.param .u64 p_in, .param .u64 p_out, .param .u32 p_k)
{
  .reg .b32 %r<6>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [p_in];
  ld.param.u64 %rd2, [p_out];
  ld.param.u32 %r1, [p_k];
  mov.u32 %r2, %tid.x;
  mul.wide.u32 %rd3, %r2, 4;
  add.u64 %rd4, %rd1, %rd3;
  ld.global.u32 %r3, [%rd4];
  add.u32 %r4, %r3, %r1;
  st.shared.u32 [smem], %r4;
  add.u64 %rd5, %rd2, %rd3;
  st.global.u32 [%rd5], %r4;
  ret;
}
"""


def test_generic_launch_buffers_scalars_and_big_shared_memory():
    import numpy as np

    from gpudissect.device.args import Buf
    from gpudissect.device.device import CudaDevice
    from gpudissect.kernel.toolchain import compile_ptx

    dev = CudaDevice(0)
    cubin = compile_ptx(LAUNCH_PTX, "sm_90").cubin
    x = np.arange(64, dtype=np.uint32) * 3
    r = dev.launch(cubin, "addk", 1, 64, [Buf("x", data=x), Buf("y", nbytes=x.nbytes, read=True, dtype="u4"),
                                          np.uint32(7)], smem=100 * 1024, launches=3)
    assert np.array_equal(r.outputs["y"], x + 7)
    assert len(r.gpu_ms) == 3 and all(t > 0 for t in r.gpu_ms)
    assert dev.free_memory() > 1 << 30


DIRTY_PTX = """
.version 8.0
.target {arch}
.address_size 64
.visible .entry dirty()
{{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  .shared .align 16 .b8 buf[49152];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, -1;
$Lfill:
  mul.wide.u32 %rd1, %r1, 4;
  mov.u64 %rd2, buf;
  add.u64 %rd2, %rd2, %rd1;
  st.shared.u32 [%rd2], %r2;
  add.u32 %r1, %r1, 1024;
  setp.lt.u32 %p1, %r1, 12288;
  @%p1 bra $Lfill;
  ret;
}}
""".replace("%r<4>;", "%r<4>;\n  .reg .pred %p1;")


def test_shared_atomics_do_not_trust_what_shared_memory_held():
    """Issue 33: the shared atomic latency chain adds each returned value to its next address;
    shared memory keeps what an earlier kernel left there, so the kernel zeroes its words
    first (a chain over 0xFFFFFFFF faulted: CUDA_ERROR_ILLEGAL_INSTRUCTION on an H200)."""
    from gpudissect.arch.target import target_of_device
    from gpudissect.bench.contract import Context, gated
    from gpudissect.device.device import CudaDevice
    from gpudissect.kernel.toolchain import compile_ptx
    from gpudissect.suites import get_suite

    dev = CudaDevice(0)
    target = target_of_device(dev.info)
    dirty = compile_ptx(DIRTY_PTX.format(arch=target.arch), target.arch, 3).cubin
    suite = get_suite("sync")
    ctx = Context(dev, None, target, quick=True)
    plan = gated(suite, ctx, ["latency:shared:*", "atomic:shared:atom.cas.b32:*"])
    assert plan.items
    suite.prepare(ctx, plan.items)
    for item in plan.items:
        dev.launch(dirty, "dirty", dev.info.sm_count * 4, 1024, [])
        out = suite.measure(ctx, item)
        for r in out.results:
            assert r.value is not None and not any(f.startswith("error") for f in r.flags), (item.name, r.flags)
