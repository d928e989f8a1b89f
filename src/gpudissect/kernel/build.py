"""The one build path: PTX kernels -> one module -> ptxas -> nvdisasm -> each kernel's SASS
and timed region.

Kernels are compiled together (one ptxas and one nvdisasm run: nvdisasm costs ~0.5 s to start,
so batching is what makes a whole-catalog map fast). Every suite builds through
:func:`build_module`; per-kernel problems (a kernel missing from the cubin, no timed region)
come back as values, a module that does not assemble raises ``PtxasError``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from gpudissect.kernel.ptx import Kernel, module_ptx
from gpudissect.kernel.region import RegionNotFound, find_region
from gpudissect.kernel.sass import SassInstr, parse_sass
from gpudissect.kernel.toolchain import compile_ptx, disassemble, resource_usage, sha256


@dataclass
class Built:
    kernel: Kernel
    cubin: bytes  # the module's cubin (shared by the kernels compiled together)
    sass: str  # this kernel's SASS
    instrs: list[SassInstr]
    region: list[SassInstr]  # between the two clock reads ([] when no region was asked for)
    opt: int
    arch: str

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def ptx(self) -> str:
        return self.kernel.ptx

    @property
    def ptx_hash(self) -> str:
        return sha256(self.kernel.ptx)

    @property
    def sass_hash(self) -> str:
        return sha256(self.sass)

    @property
    def spills(self) -> bool:
        return any(i.opcode in ("LDL", "STL") for i in self.instrs)

    usage: dict[str, int] | None = None  # cuobjdump's resource usage, once read (travels along)
    ptxas_log: str = ""  # ptxas's messages for the module (info/warning lines; empty when silent)

    @property
    def regs(self) -> int:
        """Registers per thread (cuobjdump's resource usage)."""
        if self.usage is None:
            self.usage = _usage(self.cubin).get(self.kernel.name, {})
        return self.usage.get("REG", 0)

    def light(self) -> Built:
        """This kernel without its parsed SASS (``instrs``, ``region``): what a measurement
        needs (cubin, kernel, SASS text), cheap to send between processes."""
        return replace(self, instrs=[], region=[])

    def texts(self) -> dict[str, tuple[str, str]]:
        """The PTX and SASS a result citing this kernel stores (by hash)."""
        return {self.ptx_hash: ("ptx", self.kernel.ptx), self.sass_hash: ("sass", self.sass)}


def take(built: dict[str, Built | Exception], names: list[str]) -> tuple[list[Built], dict]:
    """The built kernels ``names`` of an item (raising the first one's build error: the item
    fails, not the sweep) and the PTX/SASS texts its results cite."""
    bs = [built[n] for n in names]
    for b in bs:
        if isinstance(b, Exception):
            raise b
    texts: dict = {}
    for b in bs:
        texts.update(b.texts())  # type: ignore[union-attr]
    return bs, texts  # type: ignore[return-value]


@lru_cache(maxsize=64)
def _usage(cubin: bytes) -> dict[str, dict[str, int]]:
    return resource_usage(cubin)


def build_module(kernels: list[Kernel], arch: str, opt: int = 3,
                 region: bool = True) -> dict[str, Built | Exception]:
    """Compile ``kernels`` as one module for ``arch``; each kernel's SASS and (``region``) the
    instructions between its two clock reads."""
    cub = compile_ptx(module_ptx(kernels), arch=arch, opt=opt)
    funcs = parse_sass(disassemble(cub.cubin))
    out: dict[str, Built | Exception] = {}
    for k in kernels:
        f = funcs.get(k.name)
        if f is None:
            out[k.name] = RegionNotFound(f"kernel {k.name} missing from the cubin")
            continue
        try:
            reg = find_region(f.instrs) if region else []
        except RegionNotFound as e:
            out[k.name] = e
            continue
        out[k.name] = Built(k, cub.cubin, "\n".join(i.text for i in f.instrs), f.instrs, reg, opt, arch,
                            ptxas_log=cub.log)
    return out


def build_one(kernel: Kernel, arch: str, opt: int = 3, region: bool = True) -> Built:
    r = build_module([kernel], arch, opt, region)[kernel.name]
    if isinstance(r, Exception):
        raise r
    return r
