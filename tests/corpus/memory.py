"""The memory suite's kernels for the PTX corpus (tests/ptx_corpus.py)."""

from __future__ import annotations

ISA = "9.0"


def collect(out: dict[str, str]) -> None:
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.memory.launcher import module_kernels
    from gpudissect.suites.memory.plan import QUICK_PLAN, Plan

    for tag, plan in (("full", Plan()), ("quick", QUICK_PLAN)):
        for k in module_kernels(ptx_header(ISA, "sm_90"), plan):
            out[f"memory/{tag}/{k.name}"] = k.ptx
