"""GPU check of issue 33's sustained headlines (task hS): see scripts/check_hS.sh."""

import dataclasses
import json
import os
import sys
import time

from gpudissect.bench import runner
from gpudissect.bench.contract import Context
from gpudissect.report.read.metrics import key_quantities, lookup
from gpudissect.report.read.results import load_result_set
from gpudissect.suites.memory.plan import Plan
from gpudissect.suites.memory.suite import SUITE as MEMORY
from gpudissect.suites.tensor.suite import Sweep, TensorSuite
from gpudissect.terminal import open_device, open_store, target_of


def main(db: str) -> None:
    dev = open_device(0, isolate=True, timeout=60.0)
    store = open_store(db, create=True)
    target = target_of("", dev)
    print(dev.info.name, dev.info.uuid, dev.info.sm_count, "SMs; NVML clocks now:", dev.clocks())
    WG, MMA = "wgmma.f32.bf16", "mma.sync.m16n8k16.f32.f16.f32"
    sweep = Sweep(mma_chains=(4, 8), mma_warps=(8, 16, 32), wg_n_full=(128, 256), wg_n_other=(256,),
                  wg_accs=(1, 2), wg_groups=(1, 2, 3), data_variants=(WG, MMA), layouts=False)
    plan = dataclasses.replace(Plan(), bw_widths=(128,), bw_ilps=(4, 8), bw_warps=(16, 32, 64))
    jobs = os.cpu_count() or 4
    for suite, pats, opts in ((TensorSuite(sweep), [WG, MMA], {}),
                              (MEMORY, ["bandwidth/L2/rea[d]", "bandwidth/DRAM/rea[d]"], {"plan": plan})):
        t0 = time.perf_counter()
        try:
            ctx = Context(dev, store, target, jobs=jobs, options=opts)
            out = runner.run(suite, ctx, pats, resume=False)
            print(f"== {suite.name}: {time.perf_counter() - t0:.1f} s, {out}")
        except Exception as e:  # noqa: BLE001 - the other suite still runs
            print(f"== {suite.name} FAILED after {time.perf_counter() - t0:.1f} s: {type(e).__name__}: {e}")
    dev.close()

    rs = load_result_set(db)
    print("\n== key quantities (tensor, bandwidth): sustained first, burst beside it")
    for name, spec in key_quantities().items():
        if spec["group"] in ("tensor", "bandwidth"):
            f = lookup(rs, name)
            print(f"{spec['label']:34s} " + ("not measured" if f is None else
                                             f"{f.value:9.1f} {f.unit}  {f.source}  flags={list(f.flags)}"))
    print("\n== sustained records: the clock measured in the kernel against the implied one, NVML")
    keep = ("data", "gpu_ms", "reps", "implied_sm_mhz", "sm_mhz_in_kernel", "loop_instr_per_cycle_sm",
            "last_reps_instr_per_cycle_sm", "sm_mhz_kernel_after", "sm_mhz_kernel", "region_us", "passes",
            "burst_gbs", "bits", "ilp", "warps", "nvml", "clock")
    for s in rs.suites():
        for r in rs.records(s):
            if r.get("measure") in ("throughput_sustained", "bandwidth_sustained"):
                p = r.get("params") or {}
                print(f"- {r['variant']} {r['measure']}: {r['value']} {r['unit']} flags={r.get('flags')}")
                print("  " + json.dumps({k: p[k] for k in keep if k in p}, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
