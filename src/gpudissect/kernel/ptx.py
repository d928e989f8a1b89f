"""One kernel record and one PTX module header for every suite.

A suite's generator returns :class:`Kernel` objects: the ``.entry`` text plus what running
it needs (the ``in`` slots, sink slots, shared memory) and what it measures (variant, measure,
chains x length instances, warps, repetitions). Kernels that share a header are compiled as
one module (``kernel/build.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def ptx_header(ptx_isa: str, target: str) -> str:
    """The module header every generated kernel is compiled under."""
    return f".version {ptx_isa}\n.target {target}\n.address_size 64\n"


@dataclass
class Kernel:
    name: str
    header: str  # ptx_header(...)
    entry: str  # the .visible .entry text
    variant: str = ""
    measure: str = ""  # latency | throughput | distance | probe | chase | ...
    chains: int = 1  # independent chains per thread
    length: int = 1  # instances per chain in the timed region
    warps: int = 1  # warps per block the kernel is written for (0: any)
    reps: int = 1  # repetitions of the timed region in one launch
    inputs: list[int] = field(default_factory=list)  # u64 bit patterns of the 'in' buffer
    n_sink: int = 0  # u64 slots per thread in 'out'
    per_instance: int = 1  # PTX instructions under test per (chain, step)
    smem: int = 0  # dynamic shared memory bytes
    meta: dict = field(default_factory=dict)  # suite-specific facts (strategy, glue, path, ...)

    @property
    def ptx(self) -> str:
        """The kernel alone as a complete module (what a result cites)."""
        return self.header + "\n" + self.entry

    @property
    def units(self) -> int:
        """Instances of the instruction under test per thread per repetition."""
        return self.chains * self.length


# The opening of a kernel of ``Device.run``'s ABI ``(.param .u64 p_in, .param .u64 p_out,
# .param .u64 p_times)``: the three buffers as global addresses (%in, %outp, %tp) and the thread's
# ids (%ti thread in block, %nt block size, %ct block, %gt global thread); the kernel declares them.
RUN_PROLOGUE = (
    "  ld.param.u64 %in, [p_in];",
    "  ld.param.u64 %outp, [p_out];",
    "  ld.param.u64 %tp, [p_times];",
    "  cvta.to.global.u64 %in, %in;",
    "  cvta.to.global.u64 %outp, %outp;",
    "  cvta.to.global.u64 %tp, %tp;",
    "  mov.u32 %ti, %tid.x;",
    "  mov.u32 %nt, %ntid.x;",
    "  mov.u32 %ct, %ctaid.x;",
    "  mad.lo.u32 %gt, %ct, %nt, %ti;",
)


def module_ptx(kernels: list[Kernel]) -> str:
    """Kernels of one header as one module."""
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise ValueError("kernel names in one module must be unique")
    headers = {k.header for k in kernels}
    if len(headers) != 1:
        raise ValueError("kernels of one module must share their header")
    return kernels[0].header + "\n" + "\n".join(k.entry for k in kernels)
