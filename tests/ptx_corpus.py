"""Every kernel every suite generates, as {name: PTX} (no GPU, no compiler): the corpus whose
hashes tests/data/ptx_golden.json.gz pins, so that a restructuring provably leaves the generated
PTX byte-identical (tests/test_ptx_identity.py). Regenerate the golden deliberately, with the
commit that changes a kernel: ``python tests/ptx_corpus.py --write``."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "data" / "ptx_golden.json.gz"
ISA = "9.0"
SM_COUNT = 132


def _instructions(out: dict[str, str]) -> None:
    from gpudissect.catalog.model import load_catalog
    from gpudissect.suites.instructions.strategies import default_order, strategy
    from gpudissect.suites.instructions.suite import QUICK_PLAN, Plan, _families
    from gpudissect.suites.instructions.template import GenerationError

    for i, v in enumerate(load_catalog().variants):
        for s in ["imm", *[x.name for x in default_order()]]:
            for tag, plan in (("full", Plan()), ("quick", QUICK_PLAN)):
                try:
                    fams = _families(v, s, "sm_90", ISA, plan, i)
                except GenerationError:
                    continue
                for f in fams:
                    for k in f.kernels:
                        out[f"instructions/{tag}/{v.name}/{s}/{k.name}"] = k.ptx
        _ = strategy


def _memory(out: dict[str, str]) -> None:
    from gpudissect.suites.memory import kernels as gm
    from gpudissect.suites.memory.suite import QUICK_PLAN, Plan

    for tag, plan in (("full", Plan()), ("quick", QUICK_PLAN)):
        ks = [gm.scatter_kernel(ISA, "sm_90"), gm.copy_kernel(ISA, "sm_90")]
        ks += [gm.chase_global_kernel(op, ISA, "sm_90") for op in gm.GLOBAL_OPS]
        ks += [gm.chase_shared_kernel(ISA, "sm_90"), gm.chase_shared_kernel(ISA, "sm_90", store=True),
               gm.chase_local_kernel(ISA, "sm_90"), gm.chase_tex_kernel(ISA, "sm_90")]
        for f in plan.const_footprints:
            ch = gm.build_chain(f, plan.hot_spacing if f > 2 * plan.hot_spacing else 8, "random",
                                seed=plan.seed)
            ks.append(gm.chase_const_kernel(ch, ISA, "sm_90", f"{f}"))
        ks += [gm.bandwidth_kernel(k, ISA, "sm_90") for k in gm.BW_KINDS]
        ks += [gm.bank_kernel(b, ISA, "sm_90") for b in gm.BANK_WIDTHS]
        for k in ks:
            out[f"memory/{tag}/{k.name}"] = k.ptx


def _tensor(out: dict[str, str]) -> None:
    from gpudissect.suites.tensor.kernels import (
        LdstVariant,
        MmaVariant,
        load_tensor_catalog,
        probe_kernel,
        wmma_frag_probe,
    )
    from gpudissect.suites.tensor.step_kernels import ONE_STEP, Steps, stepped_kernel
    from gpudissect.suites.tensor.suite import QUICK, Plan, ldst_kernels, mma_kernels, wgmma_kernels

    cat = load_tensor_catalog()
    for tag, plan in (("full", Plan()), ("quick", QUICK)):
        for i, v in enumerate([*cat.mma, *cat.wgmma, *cat.ldst]):
            try:
                if isinstance(v, MmaVariant):
                    ks = mma_kernels(v, plan, ISA, i)
                elif isinstance(v, LdstVariant):
                    ks = ldst_kernels(v, plan, ISA, i)
                else:
                    ks = wgmma_kernels(v, plan, ISA, i)
            except ValueError as e:
                out[f"tensor/{tag}/{v.name}/error"] = str(e)
                continue
            for k in ks:
                out[f"tensor/{tag}/{v.name}/{k.name}"] = k.head + "\n" + k.entry
    for v in cat.mma:
        try:
            k = probe_kernel(v, "probe", ISA)
            out[f"tensor/probe/{v.name}"] = k.head + "\n" + k.entry
        except (ValueError, KeyError) as e:
            out[f"tensor/probe/{v.name}/error"] = str(e)
        for sname, st in (("one", ONE_STEP), ("two", Steps((0, 0), (0, 0), (0, 1))),
                          ("four", Steps((0, 0, 1, 1), (0, 1, 0, 1), (0, 0, 1, 1)))):
            try:
                k = stepped_kernel(v, st, f"ps_{sname}", ISA)
                out[f"tensor/steps/{v.name}/{sname}"] = k.head + "\n" + k.entry
            except (ValueError, KeyError, IndexError) as e:
                out[f"tensor/steps/{v.name}/{sname}/error"] = str(e)
    for v in cat.ldst:
        if v.wmma:
            try:
                k = wmma_frag_probe(v, "fprobe", ISA)
                out[f"tensor/frag/{v.name}"] = k.head + "\n" + k.entry
            except (ValueError, KeyError) as e:
                out[f"tensor/frag/{v.name}/error"] = str(e)


def _behaviour(out: dict[str, str]) -> None:
    from gpudissect.catalog.model import load_catalog
    from gpudissect.suites.behaviour.kernels import (
        pipe_kernel,
        probe_module,
        resid_kernel,
        sched_order_kernel,
        sched_pair_kernel,
    )
    from gpudissect.suites.behaviour.suite import LIVE, PIPE_CHAINS, PIPE_VARIANTS

    cat = load_catalog()
    ks = [resid_kernel(n) for n in LIVE] + [sched_pair_kernel(), sched_order_kernel()]
    for i, v in enumerate(PIPE_VARIANTS):
        ks.append(pipe_kernel(f"s{i}", [(cat.get(v), PIPE_CHAINS)]))
    for i, (a, b) in enumerate(zip(PIPE_VARIANTS, PIPE_VARIANTS[1:], strict=False)):
        ks.append(pipe_kernel(f"p{i}", [(cat.get(a), PIPE_CHAINS), (cat.get(b), PIPE_CHAINS)]))
    for k in ks:
        out[f"behaviour/{k.name}"] = probe_module([k], "sm_90", ISA)


def corpus() -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (_instructions, _memory, _tensor, _behaviour):
        part(out)
    return out


def hashes(c: dict[str, str]) -> dict[str, str]:
    return {k: hashlib.sha256(v.encode()).hexdigest()[:20] for k, v in sorted(c.items())}


def golden() -> dict[str, str]:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


if __name__ == "__main__":
    h = hashes(corpus())
    if "--write" in sys.argv:
        GOLDEN.write_bytes(gzip.compress(json.dumps(h, indent=0).encode(), mtime=0))
        print(f"{len(h)} kernels -> {GOLDEN}")
    else:
        g = golden()
        diff = sorted(k for k in set(g) | set(h) if g.get(k) != h.get(k))
        print(f"{len(h)} kernels, {len(diff)} differ from the golden")
        for k in diff[:20]:
            print("  ", k)
        sys.exit(1 if diff else 0)
