"""One GPU's part of a fleet: the same per-GPU run as ``gpudissect run`` (the suite runner of
``bench/runner.py`` into a store), on the node that holds the GPU.

Its store is a file of its own on that node (``<work_dir>/<fleet id>/<node>-<index>.db``): a
retry of the task on the same GPU resumes it (a suite's finished run is kept, an unfinished one
resumed item by item). The task returns the store's bytes with what it ran, and the evidence
sampled meanwhile; the scheduler merges them into the fleet's store.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpudissect.bench.contract import Context
from gpudissect.fleet import nvml


@dataclass
class GpuTask:
    key: str  # the fleet's name of the GPU: "<node>/<index>"
    node: str
    index: int  # the GPU's index on its node (CUDA, PCI bus order; NVML's index too)
    fleet_id: str
    suites: dict[str, list[str] | None]
    quick: bool = True
    options: dict = field(default_factory=dict)
    isolate: bool = True  # the GPU in a worker process with a watchdog per call
    call_timeout: float = 60.0  # seconds one GPU call may take (isolate)
    arch: str = ""  # "" : the GPU's own
    sample_s: float = 1.0
    throttle_reasons: dict[str, int] = field(default_factory=dict)
    work_dir: str = ""  # "" : the node's temporary folder
    jobs: int = 0  # parallel compile jobs (0: the node's cores)
    env: dict[str, str] = field(default_factory=dict)  # set before the GPU is opened


def local_store_path(task: GpuTask) -> Path:
    base = Path(task.work_dir or tempfile.gettempdir()) / "gpudissect-fleet" / task.fleet_id
    return base / (re.sub(r"[^A-Za-z0-9_.-]", "_", task.node) + f"-{task.index}.db")


def open_device(index: int, isolate: bool, timeout: float):
    """GPU ``index`` of this node (a fake one under GPUDISSECT_FAKE_DEVICE), in a watchdog
    worker process where ``isolate``."""
    from gpudissect.device.device import CudaDevice
    from gpudissect.device.fakes import fake_from_env, fake_gpu_count

    if fake_gpu_count():
        if index >= fake_gpu_count():
            raise RuntimeError(f"no fake GPU {index} (GPUDISSECT_FAKE_DEVICE={fake_gpu_count()})")
        factory = functools.partial(fake_from_env, index)
    else:
        factory = functools.partial(CudaDevice, index)
    if not isolate:
        return factory()
    from gpudissect.device.worker import WorkerDevice

    return WorkerDevice(index, timeout=timeout, factory=factory)


def _finished_run(store, suite: str, uuid: str) -> int | None:
    """A finished run of ``suite`` on this GPU in the task's own store (an earlier attempt's)."""
    ids = [int(r["id"]) for r in store.runs()
           if r["suite"] == suite and r["gpu_uuid"] == uuid and r["finished"] is not None]
    return ids[-1] if ids else None


def _run_suites(task: GpuTask, dev, store, target) -> dict[str, dict]:
    """Each suite through the runner; a suite that fails is recorded and the others still run."""
    from gpudissect.bench.runner import run
    from gpudissect.suites import get_suite

    out: dict[str, dict] = {}
    for name, patterns in task.suites.items():
        done = _finished_run(store, name, dev.info.uuid)
        if done is not None:
            out[name] = {"run_id": done, "kept": True, "measured": store.measured(done)}
            continue
        ctx = Context(dev, store, target, quick=task.quick, jobs=task.jobs or os.cpu_count() or 2,
                      options=dict(task.options))
        t0 = time.perf_counter()
        try:
            res = run(get_suite(name), ctx, patterns, resume=True)
        except Exception as e:  # one suite failing never takes the GPU's other suites down
            out[name] = {"run_id": ctx.run_id or None, "error": f"{type(e).__name__}: {e}"[:400]}
            continue
        res.timing["total_s"] = time.perf_counter() - t0
        store.set_timing(res.run_id, res.timing)
        out[name] = {"run_id": res.run_id, "timing": res.timing, "measured": store.measured(res.run_id)}
    return out


def run_gpu(task: GpuTask) -> dict:
    """The task: open the GPU, run the suites into the local store with NVML sampling, return
    ``{key, node, index, host, uuid, name, suites, evidence, db}`` (``db``: the store's bytes)."""
    import platform

    from gpudissect.arch.target import make_target, target_of_device
    from gpudissect.store.db import Store

    os.environ.update(task.env)
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # Ray's: the task opens its GPU by its own index
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA index = NVML index
    t0 = time.time()
    dev = open_device(task.index, task.isolate, task.call_timeout)
    path = local_store_path(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(path)
    try:
        target = make_target(task.arch) if task.arch else target_of_device(dev.info)
        fake = dev.info.driver == "fake"
        sampler = None if fake else nvml.Sampler(task.index, task.sample_s, task.throttle_reasons).start()
        suites = _run_suites(task, dev, store, target)
        evidence = {"fake": True} if sampler is None else {
            "during_run": sampler.stop(), "health": nvml.health(task.index)}
        info = dev.info
    finally:
        dev.close()
        store.close()  # the last connection: the WAL is folded into the file
    return {"key": task.key, "node": task.node, "index": task.index, "host": platform.node(),
            "uuid": info.uuid, "name": info.name, "suites": suites, "evidence": evidence,
            "wall_s": time.time() - t0, "db": path.read_bytes()}
