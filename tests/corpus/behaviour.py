"""The behaviour suite's kernels for the PTX corpus (tests/ptx_corpus.py)."""

from __future__ import annotations

ISA = "9.0"


def collect(out: dict[str, str]) -> None:
    from gpudissect.catalog.model import load_catalog
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.behaviour.kernels import (
        pipe_kernel,
        resid_kernel,
        sched_order_kernel,
        sched_pair_kernel,
    )
    from gpudissect.suites.behaviour.suite import LIVE, PIPE_CHAINS, PIPE_VARIANTS

    cat = load_catalog()
    h = ptx_header(ISA, "sm_90")
    ks = [resid_kernel(h, n) for n in LIVE] + [sched_pair_kernel(h), sched_order_kernel(h)]
    for i, v in enumerate(PIPE_VARIANTS):
        ks.append(pipe_kernel(h, f"s{i}", [(cat.get(v), PIPE_CHAINS)]))
    for i, (a, b) in enumerate(zip(PIPE_VARIANTS, PIPE_VARIANTS[1:], strict=False)):
        ks.append(pipe_kernel(h, f"p{i}", [(cat.get(a), PIPE_CHAINS), (cat.get(b), PIPE_CHAINS)]))
    for k in ks:
        out[f"behaviour/{k.name}"] = k.ptx
