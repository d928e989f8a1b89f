"""The GPU side: load cubins and launch kernels through cuda-core / cuda-bindings.

Everything here needs a GPU; nothing else in gpudissect does. :class:`FakeDevice`
stands in for it in tests (it produces synthetic clocks from a model you give it).
"""

from __future__ import annotations

import platform
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np


class NoGPU(RuntimeError):
    pass


@dataclass
class DeviceInfo:
    name: str
    uuid: str
    index: int
    sm_count: int
    compute_capability: str
    driver: str
    host: str = field(default_factory=platform.node)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class LaunchResult:
    times: np.ndarray  # (threads, 2*reps+1) uint64: (t0, t1) per rep, then smid
    out: np.ndarray  # sink values
    wall_s: float


class Device(Protocol):
    info: DeviceInfo

    def run(self, cubin: bytes, kernel: str, inputs: list[int], n_sink: int, reps: int,
            grid: int, block: int, launches: int = 1) -> list[LaunchResult]: ...

    def clocks(self) -> dict: ...

    def close(self) -> None: ...


def nvml_clocks(index: int = 0) -> dict:
    """SM and memory clocks (current and max, MHz), temperature and power, through NVML."""
    try:
        import pynvml as nv
    except ImportError:
        return {"error": "nvidia-ml-py not installed"}
    try:
        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(index)
        out = {
            "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "sm_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
            "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "time": time.time(),
        }
        try:
            out["driver"] = nv.nvmlSystemGetDriverVersion()
            if isinstance(out["driver"], bytes):
                out["driver"] = out["driver"].decode()
        except Exception:
            pass
        return out
    except Exception as e:  # NVML missing or refused: say so, measure anyway
        return {"error": f"NVML: {e}"}


class CudaDevice:
    """A GPU through cuda-core (modules, launches, buffers) and cuda-bindings (copies)."""

    def __init__(self, index: int = 0):
        try:
            from cuda.bindings import driver as cu
            from cuda.core import Device as CoreDevice
        except ImportError as e:
            raise NoGPU(f"cuda-core / cuda-bindings not importable: {e}") from None
        self._cu = cu
        try:
            self.dev = CoreDevice(index)
            self.dev.set_current()
        except Exception as e:
            raise NoGPU(f"no usable GPU {index}: {e}") from None
        self.stream = self.dev.create_stream()
        self._modules: dict[int, tuple] = {}
        self._bufs: dict[str, tuple] = {}
        err, ver = cu.cuDriverGetVersion()
        props = self.dev.properties
        cc = self.dev.compute_capability
        clocks = nvml_clocks(index)
        self.info = DeviceInfo(
            name=self.dev.name,
            uuid=str(self.dev.uuid),
            index=index,
            sm_count=int(props.multiprocessor_count),
            compute_capability=f"{cc[0]}.{cc[1]}",
            driver=str(clocks.get("driver") or f"cuda {ver // 1000}.{(ver % 1000) // 10}"),
        )
        self.cuda_driver_api = f"{ver // 1000}.{(ver % 1000) // 10}"

    def _check(self, res) -> tuple:
        err = res[0]
        if int(err) != 0:
            _, name = self._cu.cuGetErrorName(err)
            raise RuntimeError(f"CUDA error {name.decode() if isinstance(name, bytes) else name}")
        return res[1:]

    def _kernel(self, cubin: bytes, name: str):
        from cuda.core import ObjectCode

        key = id(cubin)
        if key not in self._modules:
            self._modules[key] = (cubin, ObjectCode.from_cubin(cubin), {})  # keep cubin alive
        _, mod, kernels = self._modules[key]
        if name not in kernels:
            kernels[name] = mod.get_kernel(name)
        return kernels[name]

    def _buf(self, slot: str, nbytes: int):
        """Reusable device buffers (grown on demand): allocation per launch costs more than
        the launch."""
        b = self._bufs.get(slot)
        if b is None or b[1] < nbytes:
            if b is not None:
                b[0].close(self.stream)
            size = max(nbytes, 1 << 16)
            self._bufs[slot] = (self.dev.allocate(size, stream=self.stream), size)
        return self._bufs[slot][0]

    def run(self, cubin: bytes, kernel: str, inputs: list[int], n_sink: int, reps: int,
            grid: int, block: int, launches: int = 1) -> list[LaunchResult]:
        from cuda.core import LaunchConfig, launch

        k = self._kernel(cubin, kernel)
        threads = grid * block
        tpt = 2 * reps + 1
        host_in = np.array(inputs or [0], dtype=np.uint64)
        b_in = self._buf("in", host_in.nbytes)
        b_out = self._buf("out", threads * max(n_sink, 1) * 8)
        b_t = self._buf("times", threads * tpt * 8)
        self.stream.sync()
        self._check(self._cu.cuMemcpyHtoD(int(b_in.handle), host_in.ctypes.data, host_in.nbytes))
        cfg = LaunchConfig(grid=(grid, 1, 1), block=(block, 1, 1))
        results = []
        for _ in range(launches):
            t = time.perf_counter()
            launch(self.stream, cfg, k, b_in, b_out, b_t)
            self.stream.sync()
            wall = time.perf_counter() - t
            times = np.empty(threads * tpt, dtype=np.uint64)
            self._check(self._cu.cuMemcpyDtoH(times.ctypes.data, int(b_t.handle), times.nbytes))
            out = np.empty(min(threads, 32) * max(n_sink, 1), dtype=np.uint64)
            self._check(self._cu.cuMemcpyDtoH(out.ctypes.data, int(b_out.handle), out.nbytes))
            results.append(LaunchResult(times.reshape(threads, tpt), out, wall))
        return results

    def clocks(self) -> dict:
        return nvml_clocks(self.info.index)

    def close(self) -> None:
        self.stream.sync()


KERNEL_NAME = re.compile(r"_[a-z](?P<chains>\d+)_n(?P<length>\d+)$")


class FakeDevice:
    """A stand-in for tests: each warp's region lasts ``model(kernel, chains, length, warps)``
    cycles (plus relative noise); chains and length come from the suite's kernel names
    (``..._<measure letter><chains>_n<length>``)."""

    def __init__(self, model, sm_count: int = 4, noise: float = 0.0, seed: int = 0):
        self.model = model
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.calls = 0
        self.info = DeviceInfo(name="FakeGPU", uuid="GPU-fake", index=0, sm_count=sm_count,
                               compute_capability="9.0", driver="fake")

    def run(self, cubin: bytes, kernel: str, inputs: list[int], n_sink: int, reps: int,
            grid: int, block: int, launches: int = 1) -> list[LaunchResult]:
        self.calls += 1
        m = KERNEL_NAME.search(kernel)
        if m is None:
            raise ValueError(f"FakeDevice cannot model kernel '{kernel}'")
        chains, length = int(m["chains"]), int(m["length"])
        threads = grid * block
        tpt = 2 * reps + 1
        res = []
        for _ in range(launches):
            times = np.zeros((threads, tpt), dtype=np.uint64)
            warps_per_block = max(1, block // 32)
            for r in range(reps):
                c = self.model(kernel, chains, length, warps_per_block)
                c = c * (1 + self.noise * self.rng.standard_normal())
                times[:, 2 * r] = 1000 * (r + 1)
                times[:, 2 * r + 1] = 1000 * (r + 1) + max(1, int(round(c)))
            times[:, -1] = np.repeat(np.arange(grid) % self.info.sm_count, block)
            res.append(LaunchResult(times, np.zeros(32 * n_sink, dtype=np.uint64), 1e-5))
        return res

    def clocks(self) -> dict:
        return {"sm_mhz": 1000, "fake": True}

    def close(self) -> None:
        pass
