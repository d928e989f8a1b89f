"""The sync suite's kernels for the PTX corpus (tests/ptx_corpus.py): every kernel its probes
launch."""

from __future__ import annotations

ISA = "9.0"


def collect(out: dict[str, str]) -> None:
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.sync.suite import all_probes, probe_kernels

    h = ptx_header(ISA, "sm_90")
    for p in all_probes(132, quick=False):
        for k in probe_kernels(p, h):
            out[f"sync/{k.name}"] = k.ptx
