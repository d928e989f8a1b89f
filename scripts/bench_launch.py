"""Speed benchmark of one timing launch: the wall time of ``Device.run`` for a typical
throughput kernel (132 blocks of 32 warps, 4 repetitions, 2 launches per call) directly on the
GPU and through the isolating worker process, and its split. Prints a table.

    python scripts/bench_launch.py [CALLS]
"""

from __future__ import annotations

import sys
import time

from gpudissect.arch.target import make_target
from gpudissect.catalog.model import load_catalog
from gpudissect.device.device import CudaDevice
from gpudissect.device.worker import WorkerDevice
from gpudissect.kernel.build import build_module
from gpudissect.suites.instructions.strategies import strategy
from gpudissect.suites.instructions.template import generate


def main(argv: list[str]) -> int:
    calls = int(argv[0]) if argv else 200
    target = make_target("sm_90")
    v = load_catalog().select(["fma.rn.f32"])[0]
    ks = [generate(v, strategy("reg"), target, chains=4, length=n, reps=4, measure="throughput", name=f"k{n}")
          for n in (32, 64)]
    built = build_module(ks, target.arch, 3)
    b = built["k64"]
    for name, dev in (("direct", CudaDevice()), ("worker", WorkerDevice())):
        sm = dev.info.sm_count
        dev.run(b.cubin, b.kernel.name, b.kernel.inputs, b.kernel.n_sink, 4, grid=sm, block=1024, launches=2)
        for warps in (4, 32):
            t = time.perf_counter()
            for _ in range(calls):
                res = dev.run(b.cubin, b.kernel.name, b.kernel.inputs, b.kernel.n_sink, 4, grid=sm,
                              block=32 * warps, launches=2)
            per = (time.perf_counter() - t) / calls
            gpu = sum(r.wall_s for r in res) / len(res)
            print(f"{name:7s} warps {warps:2d}: {per * 1e3:7.3f} ms per call (2 launches), "
                  f"{gpu * 1e3:6.3f} ms per launch inside")
        dev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
