"""Whether a throughput slope over short regions overshoots its pipe's limit (a diagnostic, not
part of a data set): the throughput families of the named variants at one chain count, timed at
region sizes of (u, 2u) instances per thread for growing u, on GPU 0. Prints each point's rate,
its two SM spans (cycles at the two lengths) and any flag: a rate that falls as the regions grow
is an overhead of short regions, not the hardware's.

    PYTHONPATH=src python3 scripts/diag_tp_lengths.py mad.lo.s16 sub.u16 --chains 8 4
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from gpudissect.arch.target import target_of_device
from gpudissect.catalog.model import load_catalog
from gpudissect.device.device import CudaDevice
from gpudissect.suites.instructions.core import compile_work, measure_work
from gpudissect.suites.instructions.suite import FULL_PLAN, prepare_works
from gpudissect.suites.instructions.verify import autoverify_many


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--chains", type=int, nargs="+", default=[8])
    ap.add_argument("--units", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--warps", type=int, nargs="+", default=[4, 8, 32])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dev = CudaDevice(0)
    target = target_of_device(dev.info)
    cat = load_catalog()
    vs = [cat.get(n) for n in a.variants]
    recs = autoverify_many(vs, target, jobs=8)
    out = []
    for u in a.units:
        plan = replace(FULL_PLAN, tp_chains=tuple(a.chains), tp_units=(u, 2 * u), tp_warps=tuple(a.warps),
                       sass_budget=4096, grid_warps=(), grid_distances=(), config_warps=(1,))
        works = prepare_works(vs, recs, target, plan, jobs=8)
        for w in works:
            w.families = [f for f in w.families if f.measure == "throughput"]
        compile_work(works, target, jobs=8)
        for w in works:
            res = measure_work(dev, w, plan, target)
            for r in res.results:
                if r.measure != "throughput" or r.value is None:
                    continue
                p = r.params or {}
                row = {"variant": r.variant, "units": [u, 2 * u], "chains": p.get("chains"),
                       "warps": p.get("warps"), "lengths": p.get("lengths"), "rate": round(r.value, 4),
                       "spans": (r.fit or {}).get("ys"), "own_sass": p.get("own_sass") or r.sass,
                       "flags": [f[:60] for f in r.flags]}
                out.append(row)
                print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
