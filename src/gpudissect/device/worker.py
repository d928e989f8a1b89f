"""Isolation: a :class:`~gpudissect.device.device.Device` that runs in a child process with a watchdog.

:class:`WorkerDevice` forwards every call (``run``, ``launch``, ``clocks``, ``free_memory``,
``close``) to a real device living in a worker process (``multiprocessing`` 'spawn' context, one
Pipe; arguments and results are picklable by design). Each call has a timeout. A kernel that
faults (a CUDA error: illegal address, misaligned access, ... which leaves the CUDA context
unusable) or hangs (a chase that never ends) kills the worker and raises
:class:`WorkerFailed` with the reason; the next call starts a fresh worker, so a sticky CUDA
error never poisons later results. Other exceptions (a bad argument) are raised as they are
and the worker lives on.

Cubins travel once per worker: a call sends the content hash, and the bytes only the first time.
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing as mp
import pickle
import time
import traceback
from collections.abc import Callable
from typing import Any

from gpudissect.device.device import CudaDevice, DeviceInfo, KernelRun, LaunchResult, NoGPU, RunSpec

DEFAULT_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0  # process start, imports and CUDA context creation


class WorkerFailed(RuntimeError):
    """The worker process had to be killed (fault, hang) or died; ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# CUDA errors of a launch that did not happen (resources, a bad image): the context is intact
NON_STICKY = ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "CUDA_ERROR_INVALID_VALUE",
              "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_NOT_FOUND", "CUDA_ERROR_INVALID_IMAGE",
              "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_PTX",
              "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_INVALID_CLUSTER_SIZE",
              "CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES")
SHM_MIN = 1 << 20  # results with fewer array bytes than this travel through the pipe
SHM_MAX = 256 << 20


def is_cuda_error(e: BaseException) -> bool:
    """A CUDA error that may have poisoned the context (restart the worker rather than reuse
    it); launch-time refusals (NON_STICKY) leave the context usable."""
    text = f"{type(e).__module__}.{type(e).__name__}: {e}"
    if any(n in text for n in NON_STICKY):
        return False
    return "CUDA_ERROR" in text or "CUDA error" in text or type(e).__module__.startswith("cuda")


def _attach(name: str):
    """The parent's segment (it unlinks it; a spawned worker shares its resource tracker, so
    attaching registers nothing new)."""
    from multiprocessing import shared_memory

    return shared_memory.SharedMemory(name=name)


def _send_result(conn, res, shm) -> None:
    """Large arrays (launch timings: ~10 MB a launch) go through shared memory, the rest
    through the pipe (pickle protocol 5 with out-of-band buffers)."""
    bufs: list[pickle.PickleBuffer] = []
    data = pickle.dumps(res, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    total = sum(r.nbytes for r in raws)
    if total < SHM_MIN or shm is None or total > shm.size:
        conn.send(("ok", res, False, total))
        return
    spans, off = [], 0
    for r in raws:
        shm.buf[off : off + r.nbytes] = r
        spans.append((off, r.nbytes))
        off += r.nbytes
    conn.send(("okshm", data, spans))


def _child(conn, factory: Callable[[], Any]) -> None:
    """The worker's main loop: build the device, then answer calls until 'close' or EOF."""
    try:
        dev = factory()
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("nodev" if isinstance(e, NoGPU) else "err", f"{type(e).__name__}: {e}", False))
        return
    conn.send(("ok", dev.info, False))
    cubins: dict[str, bytes] = {}
    shm = None
    while True:
        try:
            method, args, kwargs = conn.recv()
        except (EOFError, OSError):
            break
        try:
            if method == "_shm":
                if shm is not None:
                    shm.close()
                shm = _attach(args[0])
                res = None
            elif method == "forget":  # the cubin's bytes and the device's module of them
                data = cubins.pop(args[0], None)
                res = None
                if data is not None and callable(getattr(dev, "forget", None)):
                    dev.forget(data)
            else:
                if method in ("run", "run_many", "launch", "launch_series"):
                    key, data = args[0]
                    if data is not None:
                        cubins[key] = data
                    args = (cubins[key], *args[1:])  # the same bytes object: the device caches by id
                res = getattr(dev, method)(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            try:
                pickle.dumps(e)
                exc: Any = e
            except Exception:
                exc = f"{type(e).__name__}: {e}"
            conn.send(("exc", exc, is_cuda_error(e), traceback.format_exc(limit=4)))
            continue
        _send_result(conn, res, shm)
        if method == "close":
            break


class WorkerDevice:
    """A device in a child process, with a watchdog timeout per call (see the module doc)."""

    def __init__(self, index: int = 0, timeout: float = DEFAULT_TIMEOUT_S,
                 factory: Callable[[], Any] | None = None, start_timeout: float = START_TIMEOUT_S):
        """``factory()`` builds the device in the child (picklable: a top-level class or a
        ``functools.partial``); the default is ``CudaDevice(index)``."""
        self.index = index
        self.timeout = float(timeout)
        self.start_timeout = max(float(start_timeout), self.timeout)
        self.factory = factory or functools.partial(CudaDevice, index)
        self._ctx = mp.get_context("spawn")
        self._proc = None
        self._conn = None
        self._sent: set[str] = set()
        self._keys: dict[int, tuple[bytes, str]] = {}  # id(cubin) -> (cubin, hash)
        self._shm = None  # shared memory for large results (owned here, attached by the worker)
        self._shm_ready = False
        self.restarts = 0  # workers started after a failure
        self.failures: list[str] = []
        self.info: DeviceInfo = self._start()

    # --- process management
    def _start(self) -> DeviceInfo:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_child, args=(child, self.factory), daemon=True,
                                 name=f"gpudissect-worker-{self.index}")
        proc.start()
        child.close()
        self._proc, self._conn, self._sent, self._shm_ready = proc, parent, set(), False
        msg = self._wait(self.start_timeout, "starting the device")
        if msg[0] != "ok":
            self._kill()
            if msg[0] == "nodev":
                raise NoGPU(msg[1])
            raise WorkerFailed(f"worker could not open the device: {msg[1]}")
        return msg[1]

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(10)

    def _wait(self, timeout: float, what: str):
        """The child's answer, or WorkerFailed when it hangs or dies."""
        assert self._conn is not None and self._proc is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                raise WorkerFailed(f"hung: no answer after {timeout:g} s ({what}); worker killed")
            if self._conn.poll(min(left, 0.5)):
                try:
                    return self._conn.recv()
                except (EOFError, OSError):
                    self._proc.join(5)  # the child closed its end: it is exiting
            if not self._proc.is_alive() or self._proc.exitcode is not None:
                self._proc.join(5)
                code = self._proc.exitcode
                self._kill()
                raise WorkerFailed(f"crashed: worker exited with code {code} ({what})")

    def _call(self, method: str, *args, **kwargs):
        if self._proc is None:
            self.restarts += 1
            self._start()
        if self._shm is not None and not self._shm_ready:
            self._shm_ready = True
            self._call("_shm", self._shm.name)
        what = method
        if method in ("run", "run_many", "launch", "launch_series"):
            cubin, kernel = args[0], args[1]
            if method == "run_many":  # its specs (launch_series: a list of kernel names)
                kernel = f"{kernel[0].kernel} and {len(kernel) - 1} more" if kernel else "nothing"
            elif not isinstance(kernel, str):
                kernel = ", ".join(kernel)
            key = self._key(cubin)
            args = ((key, None if key in self._sent else bytes(cubin)), *args[1:])
            self._sent.add(key)
            what = f"{method} {kernel}"
        try:
            self._conn.send((method, args, kwargs))
        except (BrokenPipeError, OSError):
            code = self._proc.exitcode
            self._kill()
            raise self._failed(f"crashed: worker exited with code {code} ({what})") from None
        try:
            msg = self._wait(self.timeout, what)
        except WorkerFailed as e:
            raise self._failed(e.reason) from None
        if msg[0] == "okshm":
            _, data, spans = msg
            buffers = [bytearray(self._shm.buf[o : o + n]) for o, n in spans]
            return pickle.loads(data, buffers=buffers)
        if msg[0] == "ok":
            if len(msg) > 3 and msg[3] >= SHM_MIN:
                self._grow_shm(msg[3])
            return msg[1]
        _, exc, cuda, _tb = msg
        if cuda:  # the context may be poisoned: a fresh worker for the next call
            self._kill()
            text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
            raise self._failed(f"faulted: {text} ({what}); worker killed")
        if isinstance(exc, BaseException):
            raise exc
        raise RuntimeError(exc)

    def _key(self, cubin: bytes) -> str:
        """The content hash of ``cubin``, computed once per bytes object (a module's cubin of
        a few MB is sent with every launch of its kernels; hashing it each time costs more
        than the launch)."""
        k = self._keys.get(id(cubin))
        if k is None or k[0] is not cubin:
            if len(self._keys) > 4096:
                self._keys.clear()
            k = self._keys[id(cubin)] = (cubin, hashlib.sha256(cubin).hexdigest())
        return k[1]

    def _grow_shm(self, need: int) -> None:
        """Shared memory for results of ``need`` array bytes, when /dev/shm has room to spare."""
        import os
        from multiprocessing import shared_memory

        size = 1 << max(need - 1, 1).bit_length()  # next power of two
        if size > SHM_MAX or (self._shm is not None and self._shm.size >= size):
            return
        try:
            st = os.statvfs("/dev/shm")
            if size > st.f_bavail * st.f_frsize // 4:
                return
            new = shared_memory.SharedMemory(create=True, size=size)
        except (OSError, ValueError):
            return  # the pipe it stays
        self._free_shm()
        self._shm, self._shm_ready = new, False

    def _free_shm(self) -> None:
        if self._shm is not None:
            try:
                self._shm.close()
                self._shm.unlink()
            except Exception:
                pass
            self._shm = None

    def _failed(self, reason: str) -> WorkerFailed:
        self.failures.append(reason)
        return WorkerFailed(reason)

    # --- the Device protocol
    def run(self, cubin: bytes, kernel: str, inputs: list[int], n_sink: int, reps: int,
            grid: int, block: int, launches: int = 1) -> list[LaunchResult]:
        return self._call("run", cubin, kernel, inputs, n_sink, reps, grid, block, launches)

    def run_many(self, cubin: bytes, specs: list[RunSpec]) -> list[list[LaunchResult]]:
        return self._call("run_many", cubin, specs)

    def launch(self, cubin: bytes, kernel: str, grid, block, args: list, smem: int = 0,
               launches: int = 1, cluster: int | tuple[int, ...] | None = None) -> KernelRun:
        return self._call("launch", cubin, kernel, grid, block, args, smem, launches, cluster)

    def launch_series(self, cubin: bytes, kernels: list[str], grid: int, block: int, count: int,
                      mode: str = "stream", repeats: int = 3) -> KernelRun:
        return self._call("launch_series", cubin, kernels, grid, block, count, mode, repeats)

    def clocks(self) -> dict:
        return self._call("clocks")

    def free_memory(self) -> int:
        return self._call("free_memory")

    def forget(self, cubin: bytes) -> None:
        """Drop ``cubin`` here (its hash) and in the worker (its bytes and module) unless another
        live object of the same content uses them; a cubin this device never ran, or one a
        restarted worker never received, is nothing to do."""
        k = self._keys.get(id(cubin))
        if k is None or k[0] is not cubin:
            return
        del self._keys[id(cubin)]
        if any(h == k[1] for _c, h in self._keys.values()):
            return  # another bytes object of the same content still runs from the worker's copy
        if k[1] in self._sent:
            self._sent.discard(k[1])
            if self._proc is not None:
                self._call("forget", k[1])

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            self._conn.send(("close", (), {}))
            self._wait(min(self.timeout, 30.0), "close")
        except (WorkerFailed, BrokenPipeError, OSError):
            pass
        finally:
            if self._proc is not None:
                self._proc.join(5)
            self._kill()
            self._free_shm()

    def __del__(self) -> None:  # a forgotten worker must not outlive its device
        try:
            self._kill()
            self._free_shm()
        except Exception:
            pass
