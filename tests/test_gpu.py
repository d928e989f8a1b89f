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
