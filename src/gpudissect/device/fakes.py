"""Scripted fake devices for GPU-free tests of the runner: faults, hangs, crashes, clock changes.

``GPUDISSECT_FAKE_DEVICE=N`` makes the command line use N fake GPUs instead of CUDA (for tests
and demonstrations only: the numbers are synthetic, and every run is recorded with the GPU
name ``FakeGPU`` and a ``GPU-fake-<i>`` UUID). More variables shape the fake:

* ``GPUDISSECT_FAKE_DELAY``: seconds each ``run`` call sleeps (a slow sweep to interrupt);
* ``GPUDISSECT_FAKE_FAULTS``: ``kind:substring,...`` with kind ``hang`` (sleeps forever),
  ``fault`` (a sticky CUDA error: every later call fails too), ``exit`` (the process dies),
  ``resources`` (a launch refused for resources) or ``error`` (a plain exception), for kernels
  whose name contains the substring;
* ``GPUDISSECT_FAKE_SPREAD``: GPU i is ``1 + i * spread`` times slower (default 0.01);
* ``GPUDISSECT_FAKE_ARCH``: the architecture the fake reports (``sm_XY``: compute capability
  X.Y; unset: the fakes' default), so that a run plans and gates as on such a GPU.
"""

from __future__ import annotations

import os
import re
import time

import numpy as np

from gpudissect.device.device import (
    FAKE_COMPUTE_CAPABILITY,
    DeviceInfo,
    FakeDevice,
    KernelRun,
    LaunchResult,
    fake_platform,
)

FAKE_ENV = "GPUDISSECT_FAKE_DEVICE"


def demo_model(kernel: str, chains: int, length: int, warps: int) -> float:
    """4 cycles per dependent instruction; an SM issues 2 warp-instructions per cycle."""
    if warps == 1:
        return 20 + 4 * length * (1 if "_l" in kernel else chains / min(chains, 4))
    return 20 + chains * length * warps / 2


def _zero_outputs(kernel, grid, block, args, smem) -> dict:
    from gpudissect.device.args import Buf, Tex

    bufs = [a.buf if isinstance(a, Tex) else a for a in args]
    return {a.name: np.zeros(a.nbytes // np.dtype(a.dtype).itemsize, dtype=a.dtype)
            for a in bufs if isinstance(a, Buf) and a.read}


class ScriptedDevice(FakeDevice):
    """A :class:`FakeDevice` that misbehaves on purpose, by kernel name: ``faults`` maps a
    substring of the kernel name to ``hang`` | ``fault`` | ``exit`` | ``resources`` | ``error``. ``clock_seq``
    gives the SM clock (MHz) of successive ``clocks()`` calls (the last one repeats);
    ``noisy_calls`` makes the first N ``run`` calls noisy (``noise`` relative)."""

    def __init__(self, model=demo_model, *, index: int = 0, uuid: str | None = None,
                 faults: dict[str, str] | None = None, delay_s: float = 0.0,
                 clock_seq: list[int] | None = None, scale: float = 1.0, noisy_calls: int = 0,
                 noise: float = 0.0, sm_count: int = 4, seed: int = 0,
                 compute_capability: str = FAKE_COMPUTE_CAPABILITY):
        super().__init__(self._scaled(model, scale), sm_count=sm_count, noise=0.0, seed=seed,
                         launch_model=_zero_outputs)
        self.info = DeviceInfo(name="FakeGPU", uuid=uuid or f"GPU-fake-{index}", index=index,
                               sm_count=sm_count, compute_capability=compute_capability, driver="fake",
                               platform=fake_platform())
        self.faults = dict(faults or {})
        self.delay_s = delay_s
        self.clock_seq = list(clock_seq or [1000])
        self.clock_calls = 0
        self.noisy_calls = noisy_calls
        self.noisy_level = noise
        self.poisoned: str | None = None

    @staticmethod
    def _scaled(model, scale: float):
        if scale == 1.0:
            return model
        return _Scaled(model, scale)

    def _misbehave(self, kernel: str) -> None:
        if self.poisoned:
            raise RuntimeError(f"CUDA error {self.poisoned}")
        for sub, kind in self.faults.items():
            if sub in kernel:
                if kind == "hang":
                    time.sleep(1e6)
                elif kind == "fault":
                    self.poisoned = "CUDA_ERROR_ILLEGAL_ADDRESS"
                    raise RuntimeError(f"CUDA error {self.poisoned}")
                elif kind == "exit":
                    os._exit(13)
                elif kind == "error":
                    raise ValueError(f"scripted error in kernel '{kernel}'")
                elif kind == "resources":  # refused at launch; the context stays usable
                    raise RuntimeError("CUDA error CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")

    def run(self, cubin: bytes, kernel: str, inputs, n_sink, reps, grid, block,
            launches: int = 1) -> list[LaunchResult]:
        self._misbehave(kernel)
        if self.delay_s:
            time.sleep(self.delay_s)
        self.noise = self.noisy_level if self.calls < self.noisy_calls else 0.0
        return super().run(cubin, kernel, inputs, n_sink, reps, grid, block, launches)

    def launch(self, cubin: bytes, kernel: str, grid, block, args, smem: int = 0,
               launches: int = 1, cluster=None) -> KernelRun:
        self._misbehave(kernel)
        return super().launch(cubin, kernel, grid, block, args, smem, launches, cluster)

    def clocks(self) -> dict:
        mhz = self.clock_seq[min(self.clock_calls, len(self.clock_seq) - 1)]
        self.clock_calls += 1
        return {"sm_mhz": mhz, "fake": True}


class _Scaled:
    """A picklable model times a constant."""

    def __init__(self, model, scale: float):
        self.model, self.scale = model, scale

    def __call__(self, *a) -> float:
        return self.model(*a) * self.scale


def fake_gpu_count() -> int:
    try:
        return max(0, int(os.environ.get(FAKE_ENV, "0")))
    except ValueError:
        return 0


def fake_from_env(index: int = 0) -> ScriptedDevice:
    """The fake GPU ``index`` described by the GPUDISSECT_FAKE_* variables (see the module doc)."""
    faults = {}
    for item in filter(None, os.environ.get("GPUDISSECT_FAKE_FAULTS", "").split(",")):
        kind, _, sub = item.partition(":")
        faults[sub] = kind
    spread = float(os.environ.get("GPUDISSECT_FAKE_SPREAD", "0.01"))
    return ScriptedDevice(index=index, faults=faults,
                          delay_s=float(os.environ.get("GPUDISSECT_FAKE_DELAY", "0")),
                          scale=1.0 + spread * index, seed=index,
                          compute_capability=fake_compute_capability())


def fake_compute_capability() -> str:
    """The compute capability of ``GPUDISSECT_FAKE_ARCH`` (``sm_XY`` -> "X.Y", the last digit
    the minor one); the fakes' default where it is unset. A malformed value is one clear error."""
    arch = os.environ.get("GPUDISSECT_FAKE_ARCH")
    if not arch:
        return FAKE_COMPUTE_CAPABILITY
    m = re.fullmatch(r"sm_(\d+)(\d)", arch)
    if not m:
        raise ValueError(f"GPUDISSECT_FAKE_ARCH={arch!r} is not of the form sm_XX")
    return f"{m.group(1)}.{m.group(2)}"
