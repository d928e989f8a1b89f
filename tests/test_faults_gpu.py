"""Fault isolation on a real GPU (marked; skipped without one): a kernel that reads address 0, one
that makes a misaligned 8-byte load, and one that never ends run in a worker process; each is
reported as a WorkerFailed with its reason, and a fresh worker then computes correct results."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gpudissect.device.args import Buf
from gpudissect.device.worker import WorkerDevice, WorkerFailed
from gpudissect.kernel.toolchain import compile_ptx

pytestmark = pytest.mark.gpu

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"

# out[tid] = in[tid] + k (a correct kernel, to show that the worker after a fault is healthy)
GOOD = HEAD + """
.visible .entry good(.param .u64 p_in, .param .u64 p_out, .param .u32 p_k)
{
  .reg .b32 %r<5>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [p_in];
  ld.param.u64 %rd2, [p_out];
  ld.param.u32 %r1, [p_k];
  mov.u32 %r2, %tid.x;
  mul.wide.u32 %rd3, %r2, 4;
  add.u64 %rd4, %rd1, %rd3;
  ld.global.u32 %r3, [%rd4];
  add.u32 %r4, %r3, %r1;
  add.u64 %rd5, %rd2, %rd3;
  st.global.u32 [%rd5], %r4;
  ret;
}
"""

# the same over a grid: out[i] = in[i] + k, i = ctaid*ntid + tid
GOOD_GRID = GOOD.replace("entry good(", "entry good_grid(").replace(
    "  mov.u32 %r2, %tid.x;\n",
    "  mov.u32 %r2, %tid.x;\n  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mad.lo.u32 %r2, %r3, %r4, %r2;\n")

# a load from address 0: CUDA_ERROR_ILLEGAL_ADDRESS
NULL_LOAD = HEAD + """
.visible .entry null_load(.param .u64 p_out)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [p_out];
  mov.u64 %rd2, 0;
  ld.global.u32 %r1, [%rd2];
  st.global.u32 [%rd1], %r1;
  ret;
}
"""

# an 8-byte load from an address that is 4 mod 8: CUDA_ERROR_MISALIGNED_ADDRESS
MISALIGNED = HEAD + """
.visible .entry misaligned(.param .u64 p_out)
{
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p_out];
  add.u64 %rd2, %rd1, 4;
  ld.global.u64 %rd3, [%rd2];
  st.global.u64 [%rd1], %rd3;
  ret;
}
"""

# spins while a zeroed flag stays zero (volatile: re-read every time): never ends
HANG = HEAD + """
.visible .entry hang(.param .u64 p_flag)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [p_flag];
SPIN:
  ld.volatile.global.u32 %r1, [%rd1];
  setp.eq.u32 %p1, %r1, 0;
  @%p1 bra SPIN;
  ret;
}
"""


@pytest.fixture(scope="module")
def worker():
    w = WorkerDevice(0, timeout=8.0)
    yield w
    w.close()


def good_run(dev) -> None:
    cubin = compile_ptx(GOOD, "sm_90").cubin
    x = np.arange(256, dtype=np.uint32) * 5
    r = dev.launch(cubin, "good", 1, 256, [Buf("x", data=x), Buf("y", nbytes=x.nbytes, read=True, dtype="u4"),
                                           np.uint32(11)])
    assert np.array_equal(r.outputs["y"], x + 11)


@pytest.mark.parametrize("src,kernel,error", [
    (NULL_LOAD, "null_load", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (MISALIGNED, "misaligned", "CUDA_ERROR_MISALIGNED_ADDRESS"),
])
def test_a_faulting_kernel_is_reported_and_the_next_worker_is_clean(worker, src, kernel, error):
    good_run(worker)
    cubin = compile_ptx(src, "sm_90").cubin
    with pytest.raises(WorkerFailed, match=f"faulted: .*{error}"):
        worker.launch(cubin, kernel, 1, 32, [Buf("o", nbytes=1 << 12, zero=True)])
    good_run(worker)  # a fresh worker: the sticky error is gone


def test_a_hanging_kernel_is_killed_by_the_watchdog(worker):
    cubin = compile_ptx(HANG, "sm_90").cubin
    t = time.monotonic()
    with pytest.raises(WorkerFailed, match="hung: no answer after 8 s"):
        worker.launch(cubin, "hang", 1, 32, [Buf("flag", nbytes=4, zero=True)])
    assert time.monotonic() - t < 30
    good_run(worker)


def test_the_suite_runs_through_the_worker(tmp_path, sweep):
    from gpudissect.store.db import Store

    dev = WorkerDevice(0, timeout=30.0)
    try:
        store = Store(tmp_path / "r.db")
        run_id = sweep(dev, store, ["add.f32"]).run_id
    finally:
        dev.close()
    lat = store.results(run_id, measure="latency")[0]
    assert lat["value"] is not None and 2 < lat["value"] < 10
    assert not any(f.startswith("error") for f in lat["flags"])


def test_a_refused_launch_keeps_the_worker_and_its_context(worker):
    """A launch the driver refuses before it runs (2048 threads a block: above the limit) is a
    plain error: the same worker process and CUDA context go on computing correct results."""
    good_run(worker)
    pid = worker._proc.pid
    cubin = compile_ptx(GOOD, "sm_90").cubin
    with pytest.raises(Exception, match="CUDA_ERROR_INVALID_VALUE") as e:  # cuda.core's CUDAError
        worker.launch(cubin, "good", 1, 2048, [Buf("x", nbytes=8192), Buf("y", nbytes=8192), np.uint32(1)])
    assert not isinstance(e.value, WorkerFailed)
    assert worker._proc.pid == pid
    good_run(worker)


def test_large_results_come_back_through_shared_memory_exactly(worker):
    """64 MiB read back from the GPU travel through the shared-memory transport and equal the
    in-process result bit for bit."""
    from gpudissect.device.device import CudaDevice

    cubin = compile_ptx(GOOD_GRID, "sm_90").cubin
    n = 1 << 24
    x = np.random.default_rng(3).integers(0, 1 << 31, size=n, dtype=np.uint32)
    args = [Buf("bx", data=x), Buf("by", nbytes=x.nbytes, read=True, dtype="u4"), np.uint32(7)]
    got = worker.launch(cubin, "good_grid", n // 256, 256, args).outputs["by"]
    assert worker._shm is not None and worker._shm.size >= x.nbytes
    assert np.array_equal(got, x + np.uint32(7))
    del got
    # the same launch in this process agrees (the worker adds nothing of its own)
    dev = CudaDevice(0)
    try:
        direct = dev.launch(cubin, "good_grid", n // 256, 256, args).outputs["by"]
    finally:
        dev.close()
    assert np.array_equal(direct, x + np.uint32(7))
