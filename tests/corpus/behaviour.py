"""The behaviour suite's kernels for the PTX corpus (tests/ptx_corpus.py): every kernel its
probes launch."""

from __future__ import annotations

ISA = "9.0"


def collect(out: dict[str, str]) -> None:
    from gpudissect.catalog.model import load_catalog
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.behaviour.suite import all_probes, probe_kernels

    cat = load_catalog()
    h = ptx_header(ISA, "sm_90")
    for p in all_probes(132, quick=False):
        for k in probe_kernels(p, h, cat):
            out[f"behaviour/{k.name}"] = k.ptx
