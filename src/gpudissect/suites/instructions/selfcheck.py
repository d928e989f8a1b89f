"""A second, independent route to a few latencies: CUDA C++ with inline PTX, built by nvcc.

The kernels keep the suite's ABI (in, out, times), so the same runner launches them, but the
code path is different: nvcc's front end and register allocation, C++ ``clock64()``, and
no gpudissect generator. Agreement with the suite's latency is reported per instruction.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from gpudissect.bench.stats import fit_line, rep_cycles, summarize
from gpudissect.device.device import Device
from gpudissect.kernel.toolchain import find_tool

# (variant, C type, asm constraint, PTX instruction with %0 as chain and %1 as the other operand)
CASES = [
    ("add.f32", "float", "f", "add.f32 %0, %0, %1;"),
    ("fma.rn.f32", "float", "f", "fma.rn.f32 %0, %0, %1, %1;"),
    ("mul.rn.f64", "double", "d", "mul.rn.f64 %0, %0, %1;"),
    ("mad.lo.u32", "unsigned", "r", "mad.lo.u32 %0, %0, %1, %1;"),
    ("sqrt.approx.f32", "float", "f", "sqrt.approx.f32 %0, %0;"),
    ("popc.b32", "unsigned", "r", "popc.b32 %0, %0;"),
]
LENGTHS = (16, 32, 64)
REPS = 3


def cuda_source() -> str:
    """One kernel per case and length; a shift register keeps the timestamps of the repetitions
    (no store between repetitions), lane 0 writes its warp's row after the loop."""
    parts = ['#include <cstdint>']
    n = 2 * REPS
    shift = "\n".join([f"    ts[{j}] = ts[{j + 2}];" for j in range(n - 2)]
                      + [f"    ts[{n - 2}] = t0; ts[{n - 1}] = t1;"])
    stores = "\n".join(f"    tp[{j}] = ts[{j}];" for j in range(n))
    for i, (_, ctype, con, asm) in enumerate(CASES):
        for n in LENGTHS:
            body = "\n".join(f'    asm volatile("{asm}" : "+{con}"(x) : "{con}"(y));' for _ in range(n))
            parts.append(f'''
extern "C" __global__ void sc{i}_n{n}(const uint64_t* in, uint64_t* out, uint64_t* times) {{
  {ctype} x, y;
  x = *reinterpret_cast<const {ctype}*>(&in[0]);
  y = *reinterpret_cast<const {ctype}*>(&in[1]);
  unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  uint64_t* tp = times + (tid / 32) * {2 * REPS + 1};
  uint64_t ts[{2 * REPS}] = {{0}};  // the timestamps stay in registers until after the loop
#pragma unroll 1
  for (int rep = 0; rep < {REPS}; ++rep) {{
    __syncthreads();
    uint64_t t0 = clock64();
{body}
    uint64_t t1 = clock64();
{shift}
  }}
  unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  if (tid % 32 == 0) {{
{stores}
    tp[{2 * REPS}] = sm;
  }}
  *reinterpret_cast<{ctype}*>(&out[tid]) = x;
}}''')
    return "\n".join(parts) + "\n"


def build(arch: str) -> bytes:
    nvcc = find_tool("nvcc")
    with tempfile.TemporaryDirectory() as td:
        src = Path(td) / "sc.cu"
        src.write_text(cuda_source())
        out = Path(td) / "sc.cubin"
        r = subprocess.run([str(nvcc), "-cubin", f"-arch={arch}", "-O3", str(src), "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc failed: {r.stderr.strip()[:500]}")
        return out.read_bytes()


def _bits(ctype: str, val: float) -> int:
    import struct

    if ctype == "float":
        return struct.unpack("<I", struct.pack("<f", val))[0]
    if ctype == "double":
        return struct.unpack("<Q", struct.pack("<d", val))[0]
    return int(val)


def run_selfcheck(dev: Device, suite_latency: dict[str, float], arch: str) -> list[dict]:
    """Time the CASES through nvcc-built kernels; compare with the suite's latencies."""
    cubin = build(arch)
    out = []
    for i, (variant, ctype, _, _) in enumerate(CASES):
        inputs = [_bits(ctype, 1.5), _bits(ctype, 1.0 if ctype != "unsigned" else 7)]
        xs, ys = [], []
        for n in LENGTHS:
            res = dev.run(cubin, f"sc{i}_n{n}", inputs, 1, REPS, grid=1, block=32, launches=2)
            cyc = [float(rep_cycles(r.times, rep)[0]) for r in res for rep in range(1, REPS)]
            xs.append(n)
            ys.append(summarize(cyc).median)
        fit = fit_line(xs, ys)
        ours = suite_latency.get(variant)
        rel = abs(fit.slope - ours) / ours if ours else None
        out.append({"variant": variant, "nvcc_latency": fit.slope, "nvcc_r2": fit.r2,
                    "suite_latency": ours, "rel_diff": rel,
                    "agree": rel is not None and rel <= 0.1})
    return out


def selfcheck_lines(rows: list[dict]) -> list[str]:
    """The comparison as a table of printable lines (rich markup marks a disagreement)."""
    head = f"{'variant':<18} {'suite latency':>13} {'nvcc latency':>12} {'rel diff':>8}  agree"
    out = ["self-check (nvcc-built kernels):", head]
    for r in rows:
        ours, rel = r["suite_latency"], r["rel_diff"]
        agree = "-" if rel is None else ("yes" if r["agree"] else "[red]NO[/]")
        out.append(f"{r['variant']:<18} {'-' if ours is None else f'{ours:.2f}':>13} "
                   f"{r['nvcc_latency']:>12.2f} {'-' if rel is None else f'{rel:.1%}':>8}  {agree}")
    return out
