"""kernel/parallel.py: CPU-bound build work in processes, results in order."""

from __future__ import annotations

import os

from gpudissect.arch.target import make_target
from gpudissect.catalog.model import load_catalog
from gpudissect.kernel.parallel import pmap
from gpudissect.suites.instructions.core import Plan, VariantWork, compile_work
from gpudissect.suites.instructions.suite import timing_families
from gpudissect.suites.instructions.verify import autoverify_many


def _square_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_pmap_keeps_order_and_uses_processes_only_when_asked():
    inline = pmap(_square_pid, range(5), jobs=1)
    assert [v for v, _ in inline] == [0, 1, 4, 9, 16] and {p for _, p in inline} == {os.getpid()}
    par = pmap(_square_pid, range(6), jobs=2)
    assert [v for v, _ in par] == [0, 1, 4, 9, 16, 25] and os.getpid() not in {p for _, p in par}


def test_compile_work_in_processes_returns_built_and_checked_families():
    target = make_target("sm_90")
    vs = load_catalog().select(["add.f32", "mul.hi.u32", "fma.rn.f32"])
    recs = autoverify_many(vs, target, jobs=2)
    plan = Plan(tp_min_length=0, latency_units=(8, 16), tp_chains=(2,), tp_units=(16, 32), tp_warps=(4,), distances=(2,),
                distance_units=(16, 32), reps=3)
    works = [VariantWork(v, r, timing_families(v, r, target, plan, i))
             for i, (v, r) in enumerate(zip(vs, recs, strict=True))]
    compile_work(works, target, jobs=2, per_module=1)
    for w in works:
        ms = [f.measure for f in w.families]
        assert ms[:3] == ["latency", "throughput", "distance"]
        # the variants of the operand/guard/dependence-type tables (strategies.toml) add their own
        # latency families
        assert all(m.startswith(("latency_operand_", "latency_guarded_", "latency_read_read",
                                 "latency_write_write", "control_read_read", "control_write_write")) for m in ms[3:])
        for f in w.families:
            if getattr(f, "alias", None):  # an operand whose chain is the plain latency's kernels
                assert f.measure.startswith("latency_operand_") and not f.built
                continue
            # the configurations (guarded, read-read, write-write, controls) time the plan's config_units
            n = len(plan.config_units) if f.measure.startswith(("latency_guarded_", "latency_read_read",
                                                                 "latency_write_write", "control_")) else 2
            assert f.error is None and len(f.built) == n and f.regs > 0, (w.variant.name, f.measure, f.error)
            assert f.built[0].cubin is f.built[1].cubin  # one module: loaded once on the device
            assert f.built[0].instrs == [] and "CS2R" in f.built[0].sass  # sent light
        # ptxas's own latency model of the single-SASS chain, read in the worker
        assert w.families[0].stall is not None
