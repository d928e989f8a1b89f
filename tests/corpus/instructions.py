"""The instructions suite's kernels for the PTX corpus (tests/ptx_corpus.py)."""

from __future__ import annotations

PTXAS = "13.0"  # the ptxas release whose PTX ISA (9.0) the golden kernels were generated for


def collect(out: dict[str, str]) -> None:
    from gpudissect.arch.target import make_target
    from gpudissect.catalog.model import load_catalog
    from gpudissect.suites.instructions.strategies import default_order
    from gpudissect.suites.instructions.suite import QUICK_PLAN, Plan, timing_families
    from gpudissect.suites.instructions.template import GenerationError
    from gpudissect.suites.instructions.verify import MapRecord

    target = make_target("sm_90", PTXAS)
    for i, v in enumerate(load_catalog().variants):
        for s in ["imm", *[x.name for x in default_order()]]:
            for tag, plan in (("full", Plan()), ("quick", QUICK_PLAN)):
                try:
                    rec = MapRecord(v.name, target.arch, True, [], s)
                    fams = timing_families(v, rec, target, plan, i)
                except GenerationError:
                    continue
                for f in fams:
                    for k in f.kernels:
                        out[f"instructions/{tag}/{v.name}/{s}/{k.name}"] = k.ptx
