"""How far the in-kernel SM clock (``bench/clock.py``: clock64 over globaltimer) can be trusted,
at idle and right after a sustained tensor-core load: the clock kernel at several lengths,
each read three ways (cycles over the globaltimer span, over the launch's CUDA-event time and
over the host's wall time around the synchronous launch; the last two include the launch
overhead, so they can only read low), and NVML's clocks beside them. Prints a table and writes
JSON to the path given.

    python scripts/clock_check.py [OUT.json]
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from gpudissect.arch.target import make_target
from gpudissect.bench.clock import WORDS, clock_kernel
from gpudissect.device.args import Buf
from gpudissect.device.device import CudaDevice
from gpudissect.kernel.build import build_one
from gpudissect.kernel.ptx import Kernel, ptx_header

CHAINS = 8
_MMA = """
.visible .entry hmma_load(.param .u64 out, .param .u32 iters)
{{
    .reg .b32 %a<4>, %b<2>;
    .reg .f32 %d<{n}>;
    .reg .u32 %n, %t;
    .reg .u64 %o, %x;
    .reg .pred %p;
    ld.param.u32 %n, [iters];
    mov.u32 %t, %tid.x;
    mov.b32 %a0, %t; add.u32 %a1, %t, 1; add.u32 %a2, %t, 2; add.u32 %a3, %t, 3;
    add.u32 %b0, %t, 4; add.u32 %b1, %t, 5;
{init}
L:
{body}
    sub.u32 %n, %n, 1;
    setp.ne.u32 %p, %n, 0;
    @%p bra L;
    ld.param.u64 %o, [out];
    cvta.to.global.u64 %o, %o;
    mul.wide.u32 %x, %t, 4;
    add.u64 %o, %o, %x;
{sum}
    st.global.f32 [%o], %d0;
    ret;
}}
"""


def load_kernel(target) -> Kernel:
    init = "\n".join(f"    mov.f32 %d{i}, 0f00000000;" for i in range(4 * CHAINS))
    body = "\n".join(
        f"    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%d{4*c}, %d{4*c+1}, %d{4*c+2}, %d{4*c+3}}}, "
        f"{{%a0, %a1, %a2, %a3}}, {{%b0, %b1}}, {{%d{4*c}, %d{4*c+1}, %d{4*c+2}, %d{4*c+3}}};"
        for c in range(CHAINS))
    total = "\n".join(f"    add.f32 %d0, %d0, %d{i};" for i in range(1, 4 * CHAINS))
    return Kernel("hmma_load", ptx_header(target.ptx_isa, target.arch),
                  _MMA.format(n=4 * CHAINS, init=init, body=body, sum=total), measure="load")


def read_clock(dev: CudaDevice, cubin: bytes, iters: int) -> dict:
    n = dev.info.sm_count
    t = time.perf_counter()
    run = dev.launch(cubin, "sm_clock", n, 1, [Buf("clock_out", nbytes=n * WORDS * 8, read=True,
                                                   dtype="u8", zero=True), np.uint32(iters)])
    host = time.perf_counter() - t
    w = run.outputs["clock_out"].reshape(-1, WORDS).astype(np.int64)
    cycles = w[:, 1] - w[:, 0]
    ns = w[:, 3] - w[:, 2]
    c = float(np.median(cycles))
    return {"iters": iters, "cycles": c, "globaltimer_ns": float(np.median(ns)),
            "mhz_globaltimer": float(np.median(cycles * 1000.0 / ns)),
            "mhz_globaltimer_min": float(np.min(cycles * 1000.0 / ns)),
            "mhz_globaltimer_max": float(np.max(cycles * 1000.0 / ns)),
            "ns_distinct_low_digits": sorted({int(x) % 1000 for x in ns})[:8],
            "mhz_events": c / (run.gpu_ms[0] * 1e3), "mhz_host_wall": c / (host * 1e6),
            "event_ms": run.gpu_ms[0], "host_ms": host * 1e3, "nvml": dev.clocks()}


def main(argv: list[str]) -> int:
    out = argv[0] if argv else None
    target = make_target("sm_90")
    dev = CudaDevice()
    clk = build_one(clock_kernel(target), target.arch, region=False).cubin
    load = build_one(load_kernel(target), target.arch, region=False).cubin
    rows: list[dict] = []
    lengths = (1 << 18, 1 << 20, 1 << 22, 1 << 24)

    def series(phase: str, ls=lengths) -> None:
        for n in ls:
            r = read_clock(dev, clk, n)
            r["phase"] = phase
            rows.append(r)
            print(f"{phase:14s} iters 2^{int(np.log2(n)):2d}: cycles {r['cycles']:12.0f}  "
                  f"globaltimer {r['mhz_globaltimer']:7.1f} ({r['mhz_globaltimer_min']:.1f}-"
                  f"{r['mhz_globaltimer_max']:.1f})  events {r['mhz_events']:7.1f}  host {r['mhz_host_wall']:7.1f}"
                  f"  nvml {r['nvml'].get('sm_mhz')}  ns%1000 {r['ns_distinct_low_digits'][:4]}", flush=True)

    series("idle")
    sms = dev.info.sm_count
    probe = dev.launch(load, "hmma_load", 2 * sms, 256, [Buf("load_out", nbytes=2 * sms * 256 * 4, read=False),
                                                        np.uint32(1000)])
    iters = int(1000 * 1500 / max(probe.gpu_ms[0], 1e-3))  # about 1.5 s of load
    for k in range(3):
        ld = dev.launch(load, "hmma_load", 2 * sms, 256, [Buf("load_out", nbytes=2 * sms * 256 * 4, read=False),
                                                         np.uint32(iters)])
        print(f"load {k}: {ld.gpu_ms[0]:.0f} ms, nvml {dev.clocks()}", flush=True)
        series(f"after load {k}", (1 << 20, 1 << 20, 1 << 22, 1 << 24, 1 << 20))
    time.sleep(2.0)
    series("after 2 s idle")
    if out:
        with open(out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
