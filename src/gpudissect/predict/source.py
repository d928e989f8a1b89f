"""The input of ``predict``: a cubin, a PTX file or a SASS listing, read into kernels of SASS."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpudissect.kernel.control import Control, kernel_controls
from gpudissect.kernel.sass import SassInstr, labels_of, parse_sass
from gpudissect.predict import PredictError

ARCH_RES = (re.compile(r"^\s*\.target\s+(sm_\d+[a-z]?)", re.M),  # nvdisasm, PTX
            re.compile(r"\barch\s*=\s*(sm_\d+[a-z]?)"))  # cuobjdump -sass


@dataclass
class Program:
    """Kernels of SASS read from one input."""

    kind: str  # "cubin", "ptx" or "sass"
    arch: str | None  # the architecture the input names (None: it names none)
    kernels: dict[str, list[SassInstr]]
    labels: dict[str, dict[str, int]] = field(default_factory=dict)  # kernel -> label -> offset
    controls: dict[str, dict[int, Control]] = field(default_factory=dict)  # only from a cubin


def arch_of(text: str) -> str | None:
    for rx in ARCH_RES:
        m = rx.search(text)
        if m:
            return m.group(1)
    return None


def base_arch(arch: str) -> str:
    return re.sub(r"(sm_\d+)[a-z]?$", r"\1", arch)


def from_sass_text(text: str, kind: str = "sass", arch: str | None = None) -> Program:
    funcs = parse_sass(text)
    kernels = {name: f.instrs for name, f in funcs.items() if f.instrs}
    if not kernels:
        raise PredictError("no SASS instructions in the input (expected nvdisasm or cuobjdump -sass text)")
    return Program(kind, arch or arch_of(text), kernels, labels_of(text))


def from_cubin(cubin: bytes, arch_hint: str | None = None) -> Program:
    from gpudissect.kernel.toolchain import disassemble

    try:
        controls = {k: dict(v) for k, v in kernel_controls(cubin).items()}
    except ValueError as e:
        raise PredictError(f"not a readable cubin: {e}") from None
    text = disassemble(cubin)
    prog = from_sass_text(text, "cubin", arch_of(text) or arch_hint)
    prog.controls = controls
    return prog


def from_ptx(ptx: str, arch: str) -> Program:
    """PTX compiled with the project's toolchain for ``arch`` (the tables' architecture, or the
    PTX's own ``.target`` when it is a variant of it, e.g. its architecture-specific form)."""
    from gpudissect.kernel.toolchain import PtxasError, compile_ptx

    target = arch_of(ptx)
    if target and base_arch(target) == base_arch(arch):
        arch = target
    try:
        cub = compile_ptx(ptx, arch=arch)
    except PtxasError as e:
        first = next((ln for ln in str(e).splitlines() if ln.strip()), str(e))
        raise PredictError(f"the PTX does not assemble for {arch}: {first.strip()}") from None
    prog = from_cubin(cub.cubin, arch)
    prog.kind = "ptx"
    return prog


def read_input(path: Path, tables_arch: str) -> Program:
    """The program in ``path``: a cubin (ELF), a PTX file, or a SASS listing."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise PredictError(f"{path}: cannot read: {e.strerror or e}") from None
    if raw[:4] == b"\x7fELF":
        return from_cubin(raw)
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise PredictError(f"{path}: not a cubin, PTX file or SASS listing (binary, not ELF)") from None
    if re.search(r"^\s*\.version\s+\d", text, re.M) and re.search(r"^\s*\.target\s", text, re.M):
        return from_ptx(text, tables_arch)
    try:
        return from_sass_text(text)
    except PredictError:
        raise PredictError(f"{path}: not a cubin, PTX file or SASS listing (no SASS instruction "
                           "lines, no PTX .version/.target)") from None
