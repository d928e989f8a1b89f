"""The async suite's kernels for the PTX corpus (tests/ptx_corpus.py): its copy and mbarrier
kernels (sm_90) and its wgmma kernels (sm_90a)."""

from __future__ import annotations

ISA = "9.0"


def collect(out: dict[str, str]) -> None:
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.async_copy import wgmma_feed
    from gpudissect.suites.async_copy.kernels import SHARED_DECL, make_kernel, module_header
    from gpudissect.suites.async_copy.suite import all_probes, wgmma_probes

    h = module_header(ptx_header(ISA, "sm_90"))
    for p in all_probes():
        for s in p.specs:
            out[f"async/{s.name}"] = make_kernel(s, h).ptx
    v, wh = wgmma_feed.variant(), ptx_header(ISA, "sm_90a") + SHARED_DECL
    for p in wgmma_probes():
        for s in p.specs:
            out[f"async/{s.name}"] = wgmma_feed.make(s, v, wh).ptx
