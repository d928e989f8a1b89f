"""Where a global atomic's time goes: one thread per block (one block per SM) runs a dependent
chain of ``atom.global.add.u32`` (and, to compare, ``atom.acq_rel.cta`` and a dependent
``ld.global.cg`` chase) on each of 48 lines of its own, and the cycles per instance of each line
are written with the block's SM. On an H200 the atomics fall into a near level (lines homed in
the SM's own L2 partition) and a far one about 200 cycles above; the load that bypasses the L1
does not (a far line is served from a copy in the near partition). The instruction suite's
chains with a global target are therefore timed at several placements (its placement.py).

    python scripts/atom_home.py OUT.json
"""

from __future__ import annotations

import json
import sys

import numpy as np

from gpudissect.arch.target import make_target
from gpudissect.device.args import Buf
from gpudissect.device.device import CudaDevice, nvml_clocks, nvml_platform
from gpudissect.kernel.build import build_one
from gpudissect.kernel.ptx import Kernel, ptx_header

LINES = 48
STRIDE = 2176  # 17 lines of 128 B from one target to the next
OPS = {"atom.global.add.u32": "atom.global.add.u32 %v, [%a], %v;",
       "atom.acq_rel.cta.global.add.u32": "atom.acq_rel.cta.global.add.u32 %v, [%a], %v;",
       "ld.global.cg.u32 (chase)": "ld.global.cg.u32 %w, [%a]; cvt.u64.u32 %d, %w; add.u64 %a, %a, %d;"}
WARM, TIMED = 8, 32  # instances before the first clock read, then between the two


def kernel(name: str, op: str, target) -> Kernel:
    """Per line: WARM instances, a clock read, TIMED instances, a clock read; the difference over
    TIMED is TIMED latencies (each instance waits for the one before), the tail of the first
    read's issue cancelling out. The stores come after the second read."""
    warm = "\n".join("  " + op for _ in range(WARM))
    timed = "\n".join("  " + op for _ in range(TIMED))
    entry = f""".visible .entry {name}(.param .u64 buf, .param .u64 out)
{{
 .reg .u64 %b, %o, %a, %x, %t1, %t2, %d; .reg .u32 %k, %v, %w, %sm, %t, %c, %row; .reg .pred %p;
 mov.u32 %t, %tid.x; setp.ne.u32 %p, %t, 0; @%p bra DONE;
 ld.param.u64 %b, [buf]; ld.param.u64 %o, [out]; cvta.to.global.u64 %b, %b; cvta.to.global.u64 %o, %o;
 mov.u32 %c, %ctaid.x; mul.lo.u32 %row, %c, {LINES + 1};
 mul.wide.u32 %x, %c, {LINES * STRIDE}; add.u64 %b, %b, %x;
 mov.u32 %k, 0; mov.u32 %v, 0;
LK:
 mul.wide.u32 %x, %k, {STRIDE}; add.u64 %a, %b, %x;
 and.b32 %v, %v, 0;
{warm}
 mov.u64 %t1, %clock64;
{timed}
 mov.u64 %t2, %clock64;
 sub.u64 %d, %t2, %t1; add.u32 %w, %row, %k; mul.wide.u32 %x, %w, 8; add.u64 %x, %o, %x; st.global.u64 [%x], %d;
 st.global.u32 [%a+4], %v;
 add.u32 %k, %k, 1; setp.lt.u32 %p, %k, {LINES}; @%p bra LK;
 mov.u32 %sm, %smid; add.u32 %w, %row, {LINES}; mul.wide.u32 %x, %w, 8; add.u64 %x, %o, %x;
 cvt.u64.u32 %d, %sm; st.global.u64 [%x], %d;
DONE:
 ret;
}}"""
    return Kernel(name, ptx_header(target.ptx_isa, target.arch), entry, measure="probe")


def main(argv: list[str]) -> int:
    out = argv[0] if argv else "atom-home.json"
    dev = CudaDevice()
    target = make_target("sm_" + dev.info.compute_capability.replace(".", ""))
    n = dev.info.sm_count
    res: dict = {"gpu": dev.info.to_json(), "platform": nvml_platform(), "clocks_before": nvml_clocks(),
                 "lines": LINES, "stride_bytes": STRIDE, "timed": TIMED, "ops": {}}
    for i, (name, op) in enumerate(OPS.items()):
        k = kernel(f"probe{i}", op, target)
        cubin = build_one(k, target.arch, region=False).cubin
        rows = []
        for rep in range(2):  # the buffer allocated anew: other lines
            r = dev.launch(cubin, k.name, n, 32, [Buf(f"buf{rep}", nbytes=n * LINES * STRIDE + 64, read=False, zero=True),
                                                  Buf("out", nbytes=n * (LINES + 1) * 8, read=True, dtype="u8", zero=True)])
            m = r.outputs["out"].reshape(n, LINES + 1).astype(np.int64)
            lat = m[:, :LINES] / TIMED
            rows.append({"sm": m[:, LINES].tolist(), "cycles_per_line": lat.round(2).tolist()})
            q = np.percentile(lat, [0, 10, 25, 50, 75, 90, 100])
            print(f"{name:34s} launch {rep}: cycles per instance, quantiles 0/10/25/50/75/90/100 "
                  + " ".join(f"{x:.0f}" for x in q), flush=True)
        res["ops"][name] = {"ptx": op, "launches": rows, "ptx_kernel": k.entry}
    res["clocks_after"] = nvml_clocks()
    with open(out, "w") as fh:
        json.dump(res, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
