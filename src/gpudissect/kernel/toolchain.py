"""Find and run NVIDIA's toolchain (ptxas, nvdisasm, cuobjdump), with a content-hash cache.

Search order for each tool: ``$GPUDISSECT_CUDA_BIN``, NVIDIA's PyPI wheels
(``nvidia-cuda-nvcc``, ``nvidia-cuda-nvdisasm``, ``nvidia-cuda-cuobjdump``),
``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``, then ``PATH``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

INSTALL_HINT = {
    "ptxas": "pip install 'nvidia-cuda-nvcc==13.0.*'",
    "nvdisasm": "pip install 'nvidia-cuda-nvdisasm>=13.2'",
    "cuobjdump": "pip install 'nvidia-cuda-cuobjdump>=13.2'",
    "nvcc": "a CUDA toolkit (nvcc)",
}


class ToolchainMissing(RuntimeError):
    def __init__(self, tool: str):
        self.tool = tool
        super().__init__(
            f"{tool} not found: install it with `{INSTALL_HINT.get(tool, tool)}`, "
            "or point GPUDISSECT_CUDA_BIN at a CUDA toolkit's bin folder"
        )


class PtxasError(RuntimeError):
    """ptxas rejected the PTX; ``message`` holds its diagnostics."""

    def __init__(self, message: str):
        self.message = message.strip()
        first = next((ln for ln in self.message.splitlines() if "error" in ln.lower()), self.message[:300])
        super().__init__(f"ptxas failed: {first.strip()}")

    @property
    def unsupported(self) -> bool:
        m = self.message.lower()
        return any(
            s in m
            for s in (
                "not supported on .target",
                "requires .target",
                "not supported on target",
                "requires ptx isa",
                "is not supported",
                "unsupported",
                "is not defined for option 'gpu-name'",  # an architecture this ptxas dropped
            )
        )


def _candidates(tool: str) -> list[Path]:
    out: list[Path] = []
    env = os.environ.get("GPUDISSECT_CUDA_BIN")
    if env:
        out.append(Path(env) / tool)
    try:
        import nvidia  # namespace package of the PyPI wheels

        for base in getattr(nvidia, "__path__", []):
            for sub in ("cu13/bin", "cuda_nvcc/bin", "cuda_nvdisasm/bin", "cuda_cuobjdump/bin", "cu12/bin"):
                out.append(Path(base) / sub / tool)
    except ImportError:
        pass
    if os.environ.get("CUDA_HOME"):
        out.append(Path(os.environ["CUDA_HOME"]) / "bin" / tool)
    out.append(Path("/usr/local/cuda/bin") / tool)
    which = shutil.which(tool)
    if which:
        out.append(Path(which))
    return out


@cache
def find_tool(tool: str) -> Path:
    for p in _candidates(tool):
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise ToolchainMissing(tool)


@cache
def _banner(tool: str) -> str:
    return subprocess.run([str(find_tool(tool)), "--version"], capture_output=True, text=True).stdout


def tool_version(tool: str) -> str:
    """'13.0' style release of a tool (from its --version banner)."""
    m = re.search(r"release (\d+\.\d+)", _banner(tool))
    return m.group(1) if m else "unknown"


def tool_version_full(tool: str) -> str:
    """'13.0.88' style version (part of the cache keys)."""
    m = re.search(r"V(\d+\.\d+\.\d+)", _banner(tool))
    return m.group(1) if m else tool_version(tool)


class CacheDirError(RuntimeError):
    """The compile cache folder cannot be made or written (the message is one line)."""


_cache_ok: dict[str, Path] = {}  # GPUDISSECT_CACHE value -> its folder, once checked


def cache_dir() -> Path:
    """The compile cache: ``$GPUDISSECT_CACHE``, or ``~/.cache/gpudissect`` when unset or empty;
    made and checked for writing once per value (:class:`CacheDirError` when unusable)."""
    env = os.environ.get("GPUDISSECT_CACHE", "")
    if env in _cache_ok:
        return _cache_ok[env]
    d = Path(env) if env else Path.home() / ".cache" / "gpudissect"
    try:
        if d.exists() and not d.is_dir():
            raise NotADirectoryError(0, "a file, not a folder")
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.W_OK | os.X_OK):
            raise PermissionError(0, "not writable")
    except OSError as e:
        where = f"GPUDISSECT_CACHE={env}" if env else str(d)
        raise CacheDirError(f"{where}: not usable as the compile cache ({e.strerror or e}); "
                            "point GPUDISSECT_CACHE at a writable folder") from None
    _cache_ok[env] = d
    return d


def _key(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


@dataclass
class CompileResult:
    cubin: bytes
    cached: bool
    key: str
    log: str = ""  # what ptxas wrote on success (its "info"/"warning" lines, e.g. wgmma serialization)


def compile_ptx(ptx: str, arch: str, opt: int = 3, use_cache: bool = True) -> CompileResult:
    """Assemble PTX into a cubin with ptxas (cached by content hash)."""
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise ValueError(f"architecture '{arch}' is not of the form sm_XX")
    ptxas = find_tool("ptxas")
    key = _key("ptxas", tool_version_full("ptxas"), arch, str(opt), ptx)
    path = cache_dir() / "cubin" / key[:2] / f"{key}.cubin"
    logp = path.with_suffix(".log")
    if use_cache and path.exists():
        return CompileResult(path.read_bytes(), True, key, logp.read_text() if logp.exists() else "")
    with tempfile.TemporaryDirectory() as td:
        src = Path(td) / "k.ptx"
        dst = Path(td) / "k.cubin"
        src.write_text(ptx)
        r = subprocess.run(
            [str(ptxas), f"-arch={arch}", f"-O{opt}", str(src), "-o", str(dst)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0 or not dst.exists():
            # the file named as 'k.ptx', not by its temporary folder: the same message every time
            raise PtxasError((r.stderr or r.stdout or f"ptxas exited with {r.returncode}").replace(f"{td}/", ""))
        data = dst.read_bytes()
        log = (r.stderr or "") + (r.stdout or "")
    if use_cache:
        if log:
            _atomic_write(logp, log.encode())
        _atomic_write(path, data)
    return CompileResult(data, False, key, log)


def disassemble(cubin: bytes, use_cache: bool = True) -> str:
    """nvdisasm text of a cubin (cached by content hash)."""
    nvdisasm = find_tool("nvdisasm")
    key = _key("nvdisasm", tool_version_full("nvdisasm"), cubin)
    path = cache_dir() / "sass" / key[:2] / f"{key}.sass"
    if use_cache and path.exists():
        return path.read_text()
    with tempfile.TemporaryDirectory() as td:
        src = Path(td) / "k.cubin"
        src.write_bytes(cubin)
        r = subprocess.run([str(nvdisasm), "-c", str(src)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nvdisasm failed: {r.stderr.strip()[:300]}")
        text = r.stdout
    if use_cache:
        _atomic_write(path, text.encode())
    return text


def sha256(data: str | bytes) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """Per kernel of a cubin, cuobjdump's resource usage (REG, SHARED, LOCAL, STACK, ...)."""
    cuobjdump = find_tool("cuobjdump")
    with tempfile.TemporaryDirectory() as td:
        src = Path(td) / "k.cubin"
        src.write_bytes(cubin)
        r = subprocess.run([str(cuobjdump), "-res-usage", str(src)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {r.stderr.strip()[:300]}")
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in r.stdout.splitlines():
        m = re.match(r"\s*Function ([\w$]+):", line)
        if m:
            name = m.group(1)
            continue
        if name and "REG:" in line:
            out[name] = {k: int(v) for k, v in re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line)}
            name = None
    return out
