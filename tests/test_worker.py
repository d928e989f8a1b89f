"""Isolation without a GPU: a worker process running a scripted fake device that faults, hangs,
crashes or raises on chosen kernels; the watchdog kills it, reports why, and the next call gets
a fresh worker."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest

from gpudissect.device.device import FakeDevice
from gpudissect.device.fakes import ScriptedDevice
from gpudissect.device.worker import WorkerDevice, WorkerFailed
from gpudissect.store.db import Store

FAULTS = {"hangs": "hang", "faults": "fault", "exits": "exit", "raises": "error",
          "refused": "resources"}


def run_kernel(dev, name: str):
    return dev.run(b"cubin", f"{name}_l1_n8", [], 1, 2, grid=1, block=32)


@pytest.fixture(scope="module")
def worker():
    w = WorkerDevice(timeout=2.0, factory=functools.partial(ScriptedDevice, faults=FAULTS))
    yield w
    w.close()


def test_calls_are_forwarded(worker):
    res = run_kernel(worker, "fine")
    assert len(res) == 1 and res[0].times.shape == (1, 5)  # one row per warp
    assert worker.info.name == "FakeGPU" and worker.info.uuid == "GPU-fake-0"
    assert worker.clocks()["sm_mhz"] == 1000
    assert worker.free_memory() == 8 << 30


def test_a_fault_kills_the_worker_and_the_next_call_is_clean(worker):
    pid = worker._proc.pid
    with pytest.raises(WorkerFailed, match="faulted: .*CUDA_ERROR_ILLEGAL_ADDRESS"):
        run_kernel(worker, "faults")
    # the fake stays poisoned (as a CUDA context would): only a fresh worker runs again
    assert run_kernel(worker, "fine")[0].times.shape == (1, 5)
    assert worker._proc.pid != pid


def test_a_hang_is_killed_after_the_timeout(worker):
    t = time.monotonic()
    with pytest.raises(WorkerFailed, match=r"hung: no answer after 2 s \(run hangs_l1_n8\)"):
        run_kernel(worker, "hangs")
    assert time.monotonic() - t < 6
    assert run_kernel(worker, "fine")


def test_a_crash_reports_the_exit_code(worker):
    with pytest.raises(WorkerFailed, match="crashed: worker exited with code 13"):
        run_kernel(worker, "exits")
    assert run_kernel(worker, "fine")


def test_a_plain_error_is_raised_as_is_and_the_worker_lives_on(worker):
    pid = worker._proc.pid
    with pytest.raises(ValueError, match="scripted error"):
        run_kernel(worker, "raises")
    assert worker._proc.pid == pid
    assert any(r.startswith("hung") for r in worker.failures)


def test_a_launch_refused_for_resources_does_not_restart_the_worker(worker):
    pid = worker._proc.pid
    with pytest.raises(RuntimeError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") as e:
        run_kernel(worker, "refused")
    assert not isinstance(e.value, WorkerFailed)
    assert worker._proc.pid == pid and run_kernel(worker, "fine")


def test_large_results_travel_through_shared_memory_unchanged(worker):
    """The timings of a 64-warp throughput point (132 SMs x 2 blocks of 32 warps, one row per
    warp, 3 launches: ~1.8 MB) arrive exactly as the device produced them, after the first one
    through shared memory."""
    direct = ScriptedDevice()
    args = (b"cubin", "big_t4_n8", [], 1, 4)
    kw = dict(grid=264, block=1024, launches=3)
    want = [r.times for r in direct.run(*args, **kw)]
    assert want[0].shape == (264 * 32, 9)
    for _ in range(3):
        got = [r.times for r in worker.run(*args, **kw)]
        assert len(got) == 3
        assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert worker._shm is not None and worker._shm.size >= sum(w.nbytes for w in want)
    got[0][0, 0] = 1  # a private, writable copy
    with pytest.raises(WorkerFailed):  # a fresh worker attaches to the same shared memory
        run_kernel(worker, "faults")
    assert np.array_equal(worker.run(*args, **kw)[0].times, want[0])
    t = time.monotonic()
    for _ in range(5):
        worker.run(*args, **kw)
    assert (time.monotonic() - t) / 5 < 0.5


def test_a_device_that_cannot_open_is_a_clear_error():
    with pytest.raises(WorkerFailed, match="could not open the device: ValueError"):
        WorkerDevice(timeout=2.0, factory=functools.partial(FakeDevice, seed=-1))


@pytest.mark.slow
def test_the_suite_records_the_reason_and_continues(tmp_path, sweep):
    """The second variant's kernels hang / fault: its results say why, the others are measured."""
    dev = WorkerDevice(timeout=1.5, factory=functools.partial(
        ScriptedDevice, faults={"v1_l": "hang", "v2_t": "fault"}))
    store = Store(tmp_path / "r.db")
    try:
        run_id = sweep(dev, store, ["add.f32", "mul.lo.u32", "sub.f32"]).run_id
    finally:
        dev.close()
    res = {(r["variant"], r["measure"]): r for r in store.results(run_id)}
    assert res[("add.f32", "latency")]["value"] == pytest.approx(4.0, rel=1e-3)
    hung = res[("mul.lo.u32", "latency")]
    assert hung["value"] is None
    assert any(f.startswith("error: WorkerFailed: hung: no answer after 1.5 s") for f in hung["flags"])
    # after the hang, that variant's other kernels are not run again (each would hang too)
    later = [r for (v, m), r in res.items() if v == "mul.lo.u32" and m != "latency"]
    assert later and all(r["value"] is None for r in later)
    peak = res[("mul.lo.u32", "throughput_peak")]
    assert peak["flags"] == ["no clean configuration: error"]
    assert all(any("skipped" in f for f in r["flags"]) for r in later if r is not peak)
    # sub.f32: latency measured before its throughput kernels faulted
    assert res[("sub.f32", "latency")]["value"] == pytest.approx(4.0, rel=1e-3)
    tp = [r for (v, m), r in res.items() if v == "sub.f32" and m == "throughput"]
    assert tp and any("faulted" in f for r in tp for f in r["flags"])
    # and the variants that measure a companion alone, which the plan adds
    assert store.done_items(run_id) == {"add.f32", "mul.lo.u32", "sub.f32", "add.u16", "add.u32",
                                        "add.u64", "lop3.b32"}
    assert store.runs()[0]["finished"] is not None


def test_launch_series_and_run_many_are_forwarded_by_name():
    """launch_series passes a list of kernel names, run_many a list of specs: each reaches the
    device through the worker (a list of names once went down run_many's path and failed)."""
    from gpudissect.device.device import RunSpec
    from gpudissect.device.fakes import demo_model

    dev = WorkerDevice(timeout=5.0, factory=functools.partial(FakeDevice, demo_model, sm_count=2))
    try:
        run = dev.launch_series(b"cubin", ["k_a", "k_b"], 1, 32, 4, mode="graph", repeats=2)
        assert len(run.gpu_ms) == 2
        many = dev.run_many(b"cubin", [RunSpec("v0_t1_n8", (), 1, 2, 2, 32),
                                       RunSpec("v0_t1_n16", (), 1, 2, 2, 32, launches=2)])
        assert [len(r) for r in many] == [1, 2]
    finally:
        dev.close()


def test_forget_drops_a_cubin_in_the_parent_and_in_the_worker(worker):
    """A one-off (patched) cubin is dropped after use; the next run of it sends it again. A copy of
    the same content dropped while the original lives keeps the worker's bytes."""
    one = b"patched-cubin"
    assert run_kernel_with(worker, one)
    key = worker._key(one)
    assert key in worker._sent
    twin = bytes(bytearray(one))  # same content, another object
    worker._key(twin)
    worker.forget(twin)
    assert key in worker._sent and id(twin) not in worker._keys  # the original still uses it
    worker.forget(one)
    assert key not in worker._sent and id(one) not in worker._keys
    worker._sent.add(key)  # pretend it was still there: the worker has no bytes for it any more
    worker._keys[id(one)] = (one, key)
    with pytest.raises(KeyError):
        run_kernel_with(worker, one)
    worker._sent.discard(key)
    assert run_kernel_with(worker, one)  # sent again
    worker.forget(b"never run")  # nothing to do


def run_kernel_with(dev, cubin: bytes):
    return dev.run(cubin, "fine_l1_n8", [], 1, 2, grid=1, block=32)


def test_the_fake_device_counts_forgotten_cubins():
    from gpudissect.device.device import forget

    dev = FakeDevice(model=lambda *a: 1.0)
    forget(dev, b"x")
    forget(object(), b"x")  # a stand-in without forget: nothing happens
    assert dev.forgotten == 1
