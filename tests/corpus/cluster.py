"""The cluster suite's kernels for the PTX corpus (tests/ptx_corpus.py)."""

from __future__ import annotations

ISA = "9.0"


def collect(out: dict[str, str]) -> None:
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.cluster.kernels import all_kernels

    for k in all_kernels(ptx_header(ISA, "sm_90")):
        out[f"cluster/{k.name}"] = k.ptx
