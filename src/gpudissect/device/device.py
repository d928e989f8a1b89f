"""The GPU side: load cubins and launch kernels through cuda-core / cuda-bindings.

Everything here needs a GPU; nothing else in gpudissect does. :class:`FakeDevice`
stands in for it in tests (it produces synthetic clocks from a model you give it). The
arguments a launch takes are records of their own: buffers and textures (``args.py``), tensor
maps (``tensormap.py``).
"""

from __future__ import annotations

import platform
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from gpudissect.device.args import TEX1D_LINEAR_MAX_WIDTH, TEX_FORMATS, Buf, Tex
from gpudissect.device.tensormap import (
    TMAP_ALIGN,
    TMAP_BYTES,
    TMAP_DTYPES,
    TMAP_INTERLEAVE,
    TMAP_L2,
    TMAP_OOB,
    TMAP_SWIZZLE,
    TensorMap,
    TensorMapError,
)

FAKE_COMPUTE_CAPABILITY = "9.0"  # what a fake device reports unless told otherwise


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
    l2_bytes: int = 0  # the L2 size the driver reports (0: not known, e.g. a fake)
    max_sm_mhz: int = 0  # the SM clock's maximum the driver reports (0: not known)
    # the GPU's platform as NVML reports it (nvml_platform): ECC, power limits, persistence, MIG,
    # confidential computing, PCIe link, NVLink, host, maximum clocks; what NVML cannot give is
    # absent
    platform: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


SM_COUNTER_WORDS = 512  # u64 words of per-SM u32 counters after run()'s inputs (1024 SM ids)


@dataclass
class LaunchResult:
    times: np.ndarray  # (warps, 2*reps+1) uint64: (t0, t1) per rep, then smid (kernel/timing.py)
    out: np.ndarray  # sink values
    wall_s: float


@dataclass(frozen=True)
class RunSpec:
    """One entry of :meth:`Device.run_many`: the arguments of one :meth:`Device.run` call
    (picklable, so a batch can be forwarded to a worker process)."""

    kernel: str
    inputs: tuple[int, ...]
    n_sink: int
    reps: int
    grid: int
    block: int
    launches: int = 1
    out_bytes: int = 0  # the output buffer at least so large (a target placed past the sinks)


# A scalar kernel argument: a numpy scalar of the PTX parameter's width (np.uint32(5), ...).
Arg = Buf | Tex | TensorMap | np.generic


@dataclass
class KernelRun:
    """What a generic launch returns: read-back buffers (after the last launch) and, per
    launch, the GPU time between two events around it and the host wall time."""

    outputs: dict[str, np.ndarray]
    gpu_ms: list[float]
    wall_s: list[float]


class Device(Protocol):
    info: DeviceInfo

    def run(self, cubin: bytes, kernel: str, inputs: list[int], n_sink: int, reps: int,
            grid: int, block: int, launches: int = 1) -> list[LaunchResult]: ...

    def run_many(self, cubin: bytes, specs: list[RunSpec]) -> list[list[LaunchResult]]: ...

    def launch(self, cubin: bytes, kernel: str, grid: int | tuple[int, ...], block: int | tuple[int, ...],
               args: list[Arg], smem: int = 0, launches: int = 1,
               cluster: int | tuple[int, ...] | None = None) -> KernelRun: ...

    def free_memory(self) -> int: ...

    def clocks(self) -> dict: ...

    def forget(self, cubin: bytes) -> None:
        """Drop the module loaded from ``cubin`` (this bytes object): a one-off cubin (a patched
        copy, :mod:`gpudissect.kernel.patch`) must not stay loaded for the device's lifetime. A
        later run of the same object loads it again; an unknown cubin is nothing to do."""
        ...

    def close(self) -> None: ...


class SerialDevice:
    """A device whose calls take one lock, so that threads measuring beside each other never
    interleave their calls (two batches are never on the GPU at once: a kernel is timed alone);
    a thread's first call binds it to the device where the device asks for it
    (``bind_thread``: the in-process device makes its CUDA context current there). Attributes
    that are not calls (``info``) are the wrapped device's."""

    def __init__(self, dev: Any):
        self._dev = dev
        self._lock = threading.Lock()
        self._bound: set[int] = {threading.get_ident()}  # the thread that opened it

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._dev, name)
        if not callable(attr):
            return attr

        def serial(*a: Any, **k: Any) -> Any:
            with self._lock:
                tid = threading.get_ident()
                if tid not in self._bound:
                    bind = getattr(self._dev, "bind_thread", None)
                    if callable(bind):
                        bind()
                    self._bound.add(tid)
                return attr(*a, **k)

        return serial


def forget(dev, cubin: bytes) -> None:
    """``dev.forget(cubin)`` where the device offers it (stand-in devices of tests may not):
    drop a one-off cubin's module once its runs are done."""
    f = getattr(dev, "forget", None)
    if callable(f):
        f(cubin)


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


def _on_off(v) -> str:
    return "on" if int(v) else "off"


def _first(v):
    """NVML's (current, pending) pairs: the current one."""
    return v[0] if isinstance(v, (tuple, list)) else v


def nvml_platform(index: int = 0) -> dict:
    """The GPU's platform as NVML and the driver report it: ECC mode, power limit (current,
    default, enforced; W), persistence mode, MIG mode, confidential-computing mode (where the
    binding has it), PCIe link generation and width (current and maximum), NVLink links active,
    the host, the maximum SM and memory clocks. Every call guarded: a field NVML cannot give (no
    NVML, an older binding, a GPU without the feature) is left out, never an error."""
    out: dict = {"host": platform.node()}
    try:
        import pynvml as nv

        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no binding, no driver or no such GPU: the host alone
        return out

    def put(key: str, call, *args, conv=lambda v: v) -> None:
        fn = getattr(nv, call, None)
        if fn is None:
            return
        try:
            v = conv(fn(*args))
        except Exception:
            return
        if v is not None:
            out[key] = v

    put("ecc", "nvmlDeviceGetEccMode", h, conv=lambda v: _on_off(_first(v)))
    put("power_limit_w", "nvmlDeviceGetPowerManagementLimit", h, conv=lambda v: v / 1000.0)
    put("power_limit_default_w", "nvmlDeviceGetPowerManagementDefaultLimit", h, conv=lambda v: v / 1000.0)
    put("power_limit_enforced_w", "nvmlDeviceGetEnforcedPowerLimit", h, conv=lambda v: v / 1000.0)
    put("persistence", "nvmlDeviceGetPersistenceMode", h, conv=_on_off)
    put("mig", "nvmlDeviceGetMigMode", h, conv=lambda v: _on_off(_first(v)))
    put("cc", "nvmlSystemGetConfComputeState", conv=lambda v: _on_off(v.ccFeature))
    put("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", h, conv=int)
    put("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", h, conv=int)
    put("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", h, conv=int)
    put("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", h, conv=int)
    put("sm_max_mhz", "nvmlDeviceGetMaxClockInfo", h, getattr(nv, "NVML_CLOCK_SM", 1), conv=int)
    put("mem_max_mhz", "nvmlDeviceGetMaxClockInfo", h, getattr(nv, "NVML_CLOCK_MEM", 2), conv=int)
    state = getattr(nv, "nvmlDeviceGetNvLinkState", None)
    if state is not None:
        active = queried = 0
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                active += bool(state(h, link))
                queried += 1
            except Exception:  # a link (or NVLink itself) the GPU does not have
                continue
        if queried:
            out["nvlink_active_links"] = active
    return out


# what a fake GPU reports as its platform (device/fakes.py, FakeDevice): fixed values
FAKE_PLATFORM = {"fake": True, "ecc": "on", "power_limit_w": 700.0, "power_limit_default_w": 700.0,
                 "power_limit_enforced_w": 700.0, "persistence": "on", "mig": "off", "pcie_gen": 5,
                 "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16, "nvlink_active_links": 18,
                 "sm_max_mhz": 1980, "mem_max_mhz": 2619}


def fake_platform() -> dict:
    return {**FAKE_PLATFORM, "host": platform.node()}


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
        self._texobjs: dict[tuple[int, int, str], object] = {}  # (buffer handle, nbytes, fmt)
        self._tex_limits: tuple[int, int] | None = None  # (max 1D linear width, alignment)
        self._libcuda = None  # ctypes handle of the driver (tensor-map encoding)
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
            l2_bytes=int(getattr(props, "l2_cache_size", 0) or 0),
            max_sm_mhz=int(getattr(props, "clock_rate", 0) or 0) // 1000,
            platform=nvml_platform(index),
        )
        self.cuda_driver_api = f"{ver // 1000}.{(ver % 1000) // 10}"

    def bind_thread(self) -> None:
        """Make this device's CUDA context current in the calling thread (a thread of its own
        that measures beside the run's: :class:`SerialDevice`)."""
        self.dev.set_current()

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

    def forget(self, cubin: bytes) -> None:
        """Drop the module of ``cubin`` (see :meth:`Device.forget`): the cache's references go
        (the cubin, its ObjectCode, its kernels) and the module is closed where cuda-core offers
        it (otherwise cuda-core unloads it when the ObjectCode is collected, where it does)."""
        entry = self._modules.get(id(cubin))
        if entry is None or entry[0] is not cubin:
            return
        del self._modules[id(cubin)]
        self.stream.sync()  # nothing of it may still run
        close = getattr(entry[1], "close", None)
        if callable(close):
            close()

    def _buf(self, slot: str, nbytes: int):
        """Reusable device buffers (grown on demand): allocation per launch costs more than
        the launch."""
        b = self._bufs.get(slot)
        if b is None or b[1] < nbytes:
            if b is not None:
                self._drop_textures(int(b[0].handle))
                b[0].close(self.stream)
            size = max(nbytes, 1 << 16)
            self._bufs[slot] = (self.dev.allocate(size, stream=self.stream), size)
        return self._bufs[slot][0]

    def _upload(self, slot: str, a: Buf, align: int = 1) -> tuple[object, int]:
        """The device buffer of ``slot`` for ``a`` and the address ``a`` starts at (aligned to
        ``align`` bytes inside it), with ``a``'s data copied in (or zero-filled)."""
        b = self._buf(slot, a.nbytes + align - 1)
        ptr = -(-int(b.handle) // align) * align
        if a.data is not None:
            self._check(self._cu.cuMemcpyHtoD(ptr, a.data.ctypes.data, a.data.nbytes))
        elif a.zero:
            self._check(self._cu.cuMemsetD8(ptr, 0, a.nbytes))
        return b, ptr

    def _tex_limit(self) -> tuple[int, int]:
        """(largest 1D linear texture in elements, texture base alignment in bytes)."""
        if self._tex_limits is None:
            cu, dev = self._cu, int(self.dev.device_id)
            a = cu.CUdevice_attribute
            (width,) = self._check(cu.cuDeviceGetAttribute(
                a.CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH, dev))
            (align,) = self._check(cu.cuDeviceGetAttribute(
                a.CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, dev))
            self._tex_limits = (int(width) or TEX1D_LINEAR_MAX_WIDTH, max(1, int(align)))
        return self._tex_limits

    def _texture(self, t: Tex) -> tuple[int, int]:
        """Upload ``t.buf`` and return (texture object handle, buffer address); objects are
        cached per (buffer, size, format) and destroyed when their buffer goes."""
        cu = self._cu
        width, align = self._tex_limit()
        t.check_width(width)
        b, ptr = self._upload("t:" + t.buf.name, t.buf, align)
        key = (int(b.handle), t.buf.nbytes, t.fmt)
        if key not in self._texobjs:
            res = cu.CUDA_RESOURCE_DESC()
            res.resType = cu.CUresourcetype.CU_RESOURCE_TYPE_LINEAR
            res.res.linear.devPtr = ptr
            res.res.linear.format = getattr(cu.CUarray_format, TEX_FORMATS[t.fmt][1])
            res.res.linear.numChannels = 1
            res.res.linear.sizeInBytes = t.width * t.itemsize
            tex = cu.CUDA_TEXTURE_DESC()
            tex.flags = cu.CU_TRSF_READ_AS_INTEGER
            (self._texobjs[key],) = self._check(cu.cuTexObjectCreate(res, tex, None))
        return int(self._texobjs[key]), ptr

    def encode_tensor_map(self, t: TensorMap, ptr: int) -> bytes:
        """The 128 bytes of ``t`` encoded over device address ``ptr`` (the driver's
        ``cuTensorMapEncodeTiled``, called through ctypes: plain C arrays, no binding-version
        differences); :class:`TensorMapError` when the driver refuses it."""
        import ctypes

        t.validate()
        r = t.rank
        es = t.elem_strides or (1,) * r
        if self._libcuda is None:
            self._libcuda = ctypes.CDLL("libcuda.so.1")
        raw = (ctypes.c_uint64 * (TMAP_BYTES // 8))()
        res = self._libcuda.cuTensorMapEncodeTiled(
            ctypes.byref(raw), ctypes.c_int(TMAP_DTYPES[t.dtype][1]), ctypes.c_uint32(r),
            ctypes.c_void_p(ptr + t.offset), (ctypes.c_uint64 * r)(*t.dims),
            (ctypes.c_uint64 * max(r - 1, 1))(*(t.strides or (0,))), (ctypes.c_uint32 * r)(*t.box),
            (ctypes.c_uint32 * r)(*es), ctypes.c_int(TMAP_INTERLEAVE[t.interleave][0]),
            ctypes.c_int(TMAP_SWIZZLE[t.swizzle][0]), ctypes.c_int(TMAP_L2[t.l2_promotion][0]),
            ctypes.c_int(TMAP_OOB[t.oob_fill][0]))
        if res != 0:
            raise TensorMapError(f"tensor map over '{t.buf.name}': cuTensorMapEncodeTiled refused it "
                                 f"(CUresult {res})")
        return bytes(raw)

    def _tensor_map(self, t: TensorMap) -> tuple[int, int]:
        """Upload ``t.buf``, encode ``t`` over it and copy the 128-byte map to device memory of
        its own (64-byte aligned): (the map's device address, the buffer's address)."""
        t.validate()
        _b, ptr = self._upload("m:" + t.buf.name, t.buf, 128)
        host = np.frombuffer(self.encode_tensor_map(t, ptr), dtype=np.uint8).copy()
        mb = self._buf(f"map:{t.buf.name}:{t.key()}", TMAP_BYTES + TMAP_ALIGN)
        mptr = -(-int(mb.handle) // TMAP_ALIGN) * TMAP_ALIGN
        self._check(self._cu.cuMemcpyHtoD(mptr, host.ctypes.data, TMAP_BYTES))
        return mptr, ptr

    def _drop_textures(self, handle: int | None = None) -> None:
        """Destroy the texture objects over the buffer at ``handle`` (all when None)."""
        for key in [k for k in self._texobjs if handle is None or k[0] == handle]:
            self._cu.cuTexObjectDestroy(self._texobjs.pop(key))

    def run(self, cubin: bytes, kernel: str, inputs: list[int], n_sink: int, reps: int,
            grid: int, block: int, launches: int = 1) -> list[LaunchResult]:
        from cuda.core import LaunchConfig, launch

        k = self._kernel(cubin, kernel)
        threads = grid * block
        warps = grid * -(-block // 32)
        tpt = 2 * reps + 1
        # the inputs, then zeroed per-SM counters (kernel/timing.py SmSync), zeroed again
        # before each launch
        host_in = np.concatenate([np.array(inputs or [0], dtype=np.uint64),
                                  np.zeros(SM_COUNTER_WORDS, dtype=np.uint64)])
        b_in = self._buf("in", host_in.nbytes)
        b_out = self._buf("out", threads * max(n_sink, 1) * 8)
        b_t = self._buf("times", warps * tpt * 8)
        self.stream.sync()
        cfg = LaunchConfig(grid=(grid, 1, 1), block=(block, 1, 1))
        results = []
        for _ in range(launches):
            self._check(self._cu.cuMemcpyHtoD(int(b_in.handle), host_in.ctypes.data, host_in.nbytes))
            t = time.perf_counter()
            launch(self.stream, cfg, k, b_in, b_out, b_t)
            self.stream.sync()
            wall = time.perf_counter() - t
            times = np.empty(warps * tpt, dtype=np.uint64)
            self._check(self._cu.cuMemcpyDtoH(times.ctypes.data, int(b_t.handle), times.nbytes))
            out = np.empty(min(threads, 32) * max(n_sink, 1), dtype=np.uint64)
            self._check(self._cu.cuMemcpyDtoH(out.ctypes.data, int(b_out.handle), out.nbytes))
            results.append(LaunchResult(times.reshape(warps, tpt), out, wall))
        return results

    def run_many(self, cubin: bytes, specs: list[RunSpec]) -> list[list[LaunchResult]]:
        """Several :meth:`run` calls of kernels of one module in one go: every launch gets its
        own inputs and zeroed SM counters and its own rows of timestamps, all are queued back to
        back on the stream, and one synchronisation and one copy end the batch (per launch, the
        host's synchronisation and copies cost more than a short kernel). ``wall_s`` of each
        launch: the batch's wall time over its launches; ``out``: the sinks after the batch."""
        from cuda.core import LaunchConfig, launch

        cu = self._cu
        queue = []  # per launch: (spec index, kernel, config, in offset, times offset, warps, tpt)
        host_in: list[np.ndarray] = []
        n_in = n_t = 0
        out_bytes = 8
        for i, s in enumerate(specs):
            k = self._kernel(cubin, s.kernel)
            warps, tpt = s.grid * -(-s.block // 32), 2 * s.reps + 1
            out_bytes = max(out_bytes, s.grid * s.block * max(s.n_sink, 1) * 8, s.out_bytes)
            words = np.concatenate([np.array(s.inputs or [0], dtype=np.uint64),
                                    np.zeros(SM_COUNTER_WORDS, dtype=np.uint64)])
            cfg = LaunchConfig(grid=(s.grid, 1, 1), block=(s.block, 1, 1))
            for _ in range(s.launches):
                queue.append((i, k, cfg, n_in, n_t, warps, tpt))
                host_in.append(words)
                n_in += words.size
                n_t += warps * tpt
        results: list[list[LaunchResult]] = [[] for _ in specs]
        if not queue:
            return results
        all_in = np.concatenate(host_in)
        b_in = self._buf("in_many", all_in.nbytes)
        b_out = self._buf("out", out_bytes)
        b_t = self._buf("times_many", n_t * 8)
        p_in, p_t = int(b_in.handle), int(b_t.handle)
        self.stream.sync()
        self._check(cu.cuMemcpyHtoD(p_in, all_in.ctypes.data, all_in.nbytes))
        t = time.perf_counter()
        for _, k, cfg, o_in, o_t, _, _ in queue:
            launch(self.stream, cfg, k, np.uint64(p_in + 8 * o_in), b_out, np.uint64(p_t + 8 * o_t))
        self.stream.sync()
        wall = (time.perf_counter() - t) / len(queue)
        times = np.empty(n_t, dtype=np.uint64)
        self._check(cu.cuMemcpyDtoH(times.ctypes.data, p_t, times.nbytes))
        out = np.empty(32 * max(max(s.n_sink for s in specs), 1), dtype=np.uint64)
        self._check(cu.cuMemcpyDtoH(out.ctypes.data, int(b_out.handle), min(out.nbytes, out_bytes)))
        for i, _, _, _, o_t, warps, tpt in queue:
            results[i].append(LaunchResult(times[o_t : o_t + warps * tpt].reshape(warps, tpt), out, wall))
        return results

    def _set_smem(self, k, smem: int) -> None:
        """Raise the kernel's dynamic shared-memory limit (above 48 KiB needs the opt-in)."""
        self._set_attr(k, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", smem)

    def _set_attr(self, k, name: str, value: int) -> None:
        """Set a function attribute (``CUfunction_attribute`` member ``name``) of kernel ``k``."""
        cu = self._cu
        attr = getattr(cu.CUfunction_attribute, name)
        h = k._handle
        if isinstance(h, cu.CUkernel):
            self._check(cu.cuKernelSetAttribute(attr, value, h, int(self.dev.device_id)))
        else:
            self._check(cu.cuFuncSetAttribute(h, attr, value))

    def free_memory(self) -> int:
        free, _total = self._check(self._cu.cuMemGetInfo())
        return int(free)

    def launch(self, cubin: bytes, kernel: str, grid, block, args: list, smem: int = 0,
               launches: int = 1, cluster: int | tuple[int, ...] | None = None) -> KernelRun:
        """Launch any kernel: ``args`` are :class:`Buf` (device buffers), :class:`Tex`
        (texture objects, passed as .u64 handles) and numpy scalars, in the order of the
        kernel's parameters; ``cluster``: thread-block cluster dimensions (a size above the
        portable 8 is allowed through the kernel's non-portable attribute; the driver refuses
        what the GPU cannot place, as a ``RuntimeError`` naming its error). With a cluster,
        cuda-core counts ``grid`` in clusters, not blocks (measured: a grid of n launches n x
        the cluster size blocks). Returns the
        read-back buffers and per-launch GPU times (events) and wall times."""
        from cuda.core import LaunchConfig, launch

        cu = self._cu
        k = self._kernel(cubin, kernel)
        if smem > 48 * 1024:
            self._set_smem(k, smem)
        params = []
        reads: list[tuple[Buf, int]] = []  # buffers to copy back, at their device address
        self.stream.sync()
        for a in args:
            if isinstance(a, np.generic):
                params.append(a)
                continue
            if isinstance(a, Buf):
                buf = a
                b, ptr = self._upload("g:" + a.name, a)
                params.append(b)
            elif isinstance(a, Tex):
                buf = a.buf
                handle, ptr = self._texture(a)
                params.append(np.uint64(handle))
            elif isinstance(a, TensorMap):
                buf = a.buf
                mptr, ptr = self._tensor_map(a)
                params.append(np.uint64(mptr))
            else:
                raise TypeError(f"kernel argument {a!r}: use Buf, Tex, TensorMap or a numpy scalar "
                                "(np.uint64(...))")
            if buf.read:
                reads.append((buf, ptr))
        grid = grid if isinstance(grid, tuple) else (grid, 1, 1)
        block = block if isinstance(block, tuple) else (block, 1, 1)
        if cluster is not None:
            cluster = cluster if isinstance(cluster, tuple) else (cluster, 1, 1)
            if int(np.prod(cluster)) > 8:
                self._set_attr(k, "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1)
            cfg = LaunchConfig(grid=grid, block=block, shmem_size=smem, cluster=cluster)
        else:
            cfg = LaunchConfig(grid=grid, block=block, shmem_size=smem)
        err_, e0 = cu.cuEventCreate(0)
        err_, e1 = cu.cuEventCreate(0)
        gpu_ms, walls = [], []
        s = int(self.stream.handle)
        try:
            for _ in range(launches):
                t = time.perf_counter()
                self._check(cu.cuEventRecord(e0, s))
                launch(self.stream, cfg, k, *params)
                self._check(cu.cuEventRecord(e1, s))
                self._check(cu.cuEventSynchronize(e1))
                walls.append(time.perf_counter() - t)
                (ms,) = self._check(cu.cuEventElapsedTime(e0, e1))
                gpu_ms.append(float(ms))
        finally:
            cu.cuEventDestroy(e0)
            cu.cuEventDestroy(e1)
        outs = {}
        for a, ptr in reads:
            host = np.empty(a.nbytes // np.dtype(a.dtype).itemsize, dtype=a.dtype)
            self._check(cu.cuMemcpyDtoH(host.ctypes.data, ptr, host.nbytes))
            outs[a.name] = host
        return KernelRun(outs, gpu_ms, walls)

    def launch_series(self, cubin: bytes, kernels: list[str], grid: int, block: int, count: int,
                      mode: str = "stream", repeats: int = 3) -> KernelRun:
        """Launch-cost timing: ``count`` launches of the parameterless ``kernels`` in turn, back
        to back on the stream, ``repeats`` times (after one untimed series). ``mode``:
        ``stream`` (``cuLaunchKernel`` each), ``pdl`` (``cuLaunchKernelEx``, every launch after
        the first with programmatic stream serialization allowed), ``graph`` (the series
        captured once into a CUDA graph, instantiated untimed, then each repeat one
        ``cuGraphLaunch``). Per repeat: ``gpu_ms`` between events around the series, ``wall_s``
        from the first launch call to the end of the synchronisation; ``outputs["submit_s"]``:
        the host time of the launch calls alone."""
        cu = self._cu
        if mode not in ("stream", "pdl", "graph"):
            raise ValueError(f"launch_series mode '{mode}': one of stream, pdl, graph")
        funcs = []
        for name in kernels:
            h = self._kernel(cubin, name)._handle
            funcs.append(self._check(cu.cuKernelGetFunction(h))[0] if isinstance(h, cu.CUkernel) else h)
        s = int(self.stream.handle)
        cfgs = []
        if mode == "pdl":
            for i in range(2):
                c = cu.CUlaunchConfig()
                c.gridDimX, c.gridDimY, c.gridDimZ = grid, 1, 1
                c.blockDimX, c.blockDimY, c.blockDimZ = block, 1, 1
                c.sharedMemBytes = 0
                c.hStream = cu.CUstream(s)
                if i:
                    a = cu.CUlaunchAttribute()
                    a.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                    a.value.programmaticStreamSerializationAllowed = 1
                    c.attrs = [a]
                    c.numAttrs = 1
                else:
                    c.numAttrs = 0
                cfgs.append(c)

        def series() -> None:
            for i in range(count):
                f = funcs[i % len(funcs)]
                if mode == "pdl":
                    self._check(cu.cuLaunchKernelEx(cfgs[1 if i else 0], f, 0, 0))
                else:
                    self._check(cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, 0, 0))

        self.stream.sync()
        graph = gexec = None
        err_, e0 = cu.cuEventCreate(0)
        err_, e1 = cu.cuEventCreate(0)
        gpu_ms, walls, submits = [], [], []
        try:
            if mode == "graph":
                self._check(cu.cuStreamBeginCapture(
                    s, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
                try:
                    series()
                finally:
                    (graph,) = self._check(cu.cuStreamEndCapture(s))
                (gexec,) = self._check(cu.cuGraphInstantiate(graph, 0))
            for r in range(repeats + 1):
                self._check(cu.cuEventRecord(e0, s))
                t = time.perf_counter()
                if gexec is not None:
                    self._check(cu.cuGraphLaunch(gexec, s))
                else:
                    series()
                t1 = time.perf_counter()
                self._check(cu.cuEventRecord(e1, s))
                self._check(cu.cuEventSynchronize(e1))
                t2 = time.perf_counter()
                (ms,) = self._check(cu.cuEventElapsedTime(e0, e1))
                if r:  # the first series warms up (module load, graph upload)
                    gpu_ms.append(float(ms))
                    walls.append(t2 - t)
                    submits.append(t1 - t)
        finally:
            cu.cuEventDestroy(e0)
            cu.cuEventDestroy(e1)
            if gexec is not None:
                cu.cuGraphExecDestroy(gexec)
            if graph is not None:
                cu.cuGraphDestroy(graph)
        return KernelRun({"submit_s": np.array(submits)}, gpu_ms, walls)

    def clocks(self) -> dict:
        return nvml_clocks(self.info.index)

    def close(self) -> None:
        self.stream.sync()
        self._drop_textures()


KERNEL_NAME = re.compile(r"_[a-z](?P<chains>\d+)_n(?P<length>\d+)$")


class FakeDevice:
    """A stand-in for tests: each warp's region lasts ``model(kernel, chains, length, warps)``
    cycles (plus relative noise); chains and length come from the suite's kernel names
    (``..._<measure letter><chains>_n<length>``)."""

    def __init__(self, model=None, sm_count: int = 4, noise: float = 0.0, seed: int = 0,
                 launch_model=None, free_bytes: int = 8 << 30,
                 compute_capability: str = FAKE_COMPUTE_CAPABILITY):
        """``launch_model(kernel, grid, block, args, smem) -> dict of outputs`` (optionally
        with a ``"_gpu_ms"`` list) stands in for the GPU in generic launches (:class:`Tex`
        arguments wider than CUDA's 1D linear texture limit are refused first)."""
        self.model = model
        self.launch_model = launch_model
        self.free_bytes = free_bytes
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.calls = 0
        self.forgotten = 0  # cubins dropped by forget()
        self.last_inputs: list[int] = []
        self.info = DeviceInfo(name="FakeGPU", uuid="GPU-fake", index=0, sm_count=sm_count,
                               compute_capability=compute_capability, driver="fake", platform=fake_platform())

    def run(self, cubin: bytes, kernel: str, inputs: list[int], n_sink: int, reps: int,
            grid: int, block: int, launches: int = 1) -> list[LaunchResult]:
        self.calls += 1
        self.last_inputs = list(inputs)  # what a test's model may read (a kernel's placement)
        m = KERNEL_NAME.search(kernel)
        if m is None:
            raise ValueError(f"FakeDevice cannot model kernel '{kernel}'")
        chains, length = int(m["chains"]), int(m["length"])
        warps_per_block = max(1, -(-block // 32))
        tpt = 2 * reps + 1
        res = []
        for _ in range(launches):
            times = np.zeros((grid * warps_per_block, tpt), dtype=np.uint64)
            for r in range(reps):
                c = self.model(kernel, chains, length, warps_per_block)
                c = c * (1 + self.noise * self.rng.standard_normal())
                times[:, 2 * r] = 1000 * (r + 1)
                times[:, 2 * r + 1] = 1000 * (r + 1) + max(1, int(round(c)))
            times[:, -1] = np.repeat(np.arange(grid) % self.info.sm_count, warps_per_block)
            res.append(LaunchResult(times, np.zeros(32 * n_sink, dtype=np.uint64), 1e-5))
        return res

    def run_many(self, cubin: bytes, specs: list[RunSpec]) -> list[list[LaunchResult]]:
        return [self.run(cubin, s.kernel, list(s.inputs), s.n_sink, s.reps, s.grid, s.block, s.launches)
                for s in specs]

    def launch(self, cubin: bytes, kernel: str, grid, block, args: list, smem: int = 0,
               launches: int = 1, cluster: int | tuple[int, ...] | None = None) -> KernelRun:
        self.calls += 1
        if self.launch_model is None:
            raise ValueError("FakeDevice has no launch_model")
        for a in args:  # refused as the GPU refuses it
            if isinstance(a, Tex):
                a.check_width(TEX1D_LINEAR_MAX_WIDTH)
            if isinstance(a, TensorMap):
                a.validate()
        outs = dict(self.launch_model(kernel, grid, block, args, smem))
        ms = outs.pop("_gpu_ms", [1e-3] * launches)
        return KernelRun(outs, list(ms), [1e-5] * launches)

    def launch_series(self, cubin: bytes, kernels: list[str], grid: int, block: int, count: int,
                      mode: str = "stream", repeats: int = 3) -> KernelRun:
        """Synthetic launch-cost series (``launch_model(kernel, grid, block, [], 0)`` may give
        ``_gpu_ms`` / ``_wall_s`` per launch of a series); same refusals as the GPU's."""
        self.calls += 1
        if mode not in ("stream", "pdl", "graph"):
            raise ValueError(f"launch_series mode '{mode}': one of stream, pdl, graph")
        outs = dict(self.launch_model(f"{mode}:{','.join(kernels)}", grid, block, [], 0)) if self.launch_model else {}
        ms = float(outs.get("_gpu_ms", 2e-3)) * count
        wall = float(outs.get("_wall_s", 3e-6)) * count
        return KernelRun({"submit_s": np.full(repeats, wall / 2)}, [ms] * repeats, [wall] * repeats)

    def free_memory(self) -> int:
        return self.free_bytes

    def forget(self, cubin: bytes) -> None:
        """Nothing is loaded here; counted, so tests can see a caller drop its cubins."""
        self.forgotten += 1

    def clocks(self) -> dict:
        return {"sm_mhz": 1000, "fake": True}

    def close(self) -> None:
        pass
