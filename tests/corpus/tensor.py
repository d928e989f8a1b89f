"""The tensor suite's kernels for the PTX corpus (tests/ptx_corpus.py)."""

from __future__ import annotations

PTXAS = "13.0"  # the ptxas release whose PTX ISA (9.0) the golden was generated for


def collect(out: dict[str, str]) -> None:
    from gpudissect.arch.target import make_target
    from gpudissect.catalog.tensor import load_tensor_catalog
    from gpudissect.suites.tensor.kernels import probe_kernel, wmma_frag_probe
    from gpudissect.suites.tensor.step_kernels import ONE_STEP, Steps, stepped_kernel
    from gpudissect.suites.tensor.suite import QUICK, Sweep, variant_kernels

    target = make_target("sm_90", PTXAS)
    cat = load_tensor_catalog()
    for tag, sweep in (("full", Sweep()), ("quick", QUICK)):
        for i, v in enumerate([*cat.mma, *cat.wgmma, *cat.ldst]):
            try:
                ks = variant_kernels(v, sweep, target, i)
            except ValueError as e:
                out[f"tensor/{tag}/{v.name}/error"] = str(e)
                continue
            for k in ks:
                out[f"tensor/{tag}/{v.name}/{k.name}"] = k.ptx
    for v in cat.mma:
        try:
            k = probe_kernel(v, "probe", target)
            out[f"tensor/probe/{v.name}"] = k.ptx
        except (ValueError, KeyError) as e:
            out[f"tensor/probe/{v.name}/error"] = str(e)
        for sname, st in (("one", ONE_STEP), ("two", Steps((0, 0), (0, 0), (0, 1))),
                          ("four", Steps((0, 0, 1, 1), (0, 1, 0, 1), (0, 0, 1, 1)))):
            try:
                k = stepped_kernel(v, st, f"ps_{sname}", target)
                out[f"tensor/steps/{v.name}/{sname}"] = k.ptx
            except (ValueError, KeyError, IndexError) as e:
                out[f"tensor/steps/{v.name}/{sname}/error"] = str(e)
    for v in cat.ldst:
        if v.wmma:
            try:
                k = wmma_frag_probe(v, "fprobe", target)
                out[f"tensor/frag/{v.name}"] = k.ptx
            except (ValueError, KeyError) as e:
                out[f"tensor/frag/{v.name}/error"] = str(e)
