"""Several GPUs: one process per GPU, each its own run in the store (keyed by GPU UUID).

``gpudissect run --gpus all|0,1`` starts ``gpudissect run ... --gpu i`` once per GPU, at the
same time; every child writes to the same SQLite store (WAL, busy timeout) and resumes its own
GPU's unfinished run. Their output is prefixed with ``[gpu i]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable

from gpudissect.device.device import NoGPU
from gpudissect.device.fakes import fake_gpu_count


def gpu_count() -> int:
    """Number of GPUs (fake GPUs when GPUDISSECT_FAKE_DEVICE is set), without a CUDA context."""
    if fake_gpu_count():
        return fake_gpu_count()
    try:
        import pynvml as nv

        nv.nvmlInit()
        return int(nv.nvmlDeviceGetCount())
    except Exception:
        pass
    try:
        from cuda.bindings import driver as cu

        (err,) = cu.cuInit(0)
        err, n = cu.cuDeviceGetCount()
        if int(err) == 0:
            return int(n)
    except Exception:
        pass
    raise NoGPU("cannot count the GPUs (no NVML, no CUDA driver)")


def gpu_indices(spec: str, count: Callable[[], int] = gpu_count) -> list[int]:
    """``all`` or a comma list of indices (``0,1``) -> sorted distinct indices; ValueError with
    a clear message for anything else."""
    spec = spec.strip()
    n = count()
    if spec == "all":
        if n == 0:
            raise ValueError("--gpus all: no GPU found")
        return list(range(n))
    try:
        idx = sorted({int(p) for p in spec.split(",") if p.strip()})
    except ValueError:
        raise ValueError(f"--gpus '{spec}': use 'all' or GPU indices like 0,1") from None
    if not idx:
        raise ValueError(f"--gpus '{spec}': use 'all' or GPU indices like 0,1")
    bad = [i for i in idx if i < 0 or i >= n]
    if bad:
        raise ValueError(f"--gpus: no GPU {bad[0]} (this host has {n})")
    return idx


def run_per_gpu(indices: list[int], child_args: Callable[[int], list[str]],
                echo: Callable[[str], None] = print) -> dict[int, int]:
    """Run ``python -m gpudissect <child_args(i)>`` for every GPU index at once; echo their
    output line by line with a ``[gpu i]`` prefix; return the exit code per index."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA index i = NVML index i (clocks)
    procs: dict[int, subprocess.Popen] = {}
    threads = []
    lock = threading.Lock()
    for i in indices:
        p = subprocess.Popen([sys.executable, "-m", "gpudissect", *child_args(i)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             errors="replace")
        procs[i] = p

        def pump(i: int = i, p: subprocess.Popen = p) -> None:
            assert p.stdout is not None
            for line in p.stdout:
                with lock:
                    echo(f"[gpu {i}] {line.rstrip()}")

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        threads.append(t)
    try:
        codes = {i: p.wait() for i, p in procs.items()}
    except KeyboardInterrupt:
        for p in procs.values():
            p.terminate()
        raise
    for t in threads:
        t.join(5)
    return codes
