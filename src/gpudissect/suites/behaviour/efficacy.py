"""Compiler efficacy: the same work built twice, timed by the same harness.

For a few catalog variants (``VARIANTS``) and a few launch points (``POINTS``: warps per SM x
independent chains per thread), two kernels do the same work (``chains`` chains of the
variant's operation, each ``length`` steps long, the catalog's operand values):

* the suite's verified PTX kernel (``kernels.pipe_kernel``: the work unrolled straight into the
  timed region of ``kernel/timing.py``), built by ptxas;
* a CUDA C++ kernel of the same work as a programmer writes it (a loop over the steps, the
  chains in an unrolled inner loop, plain C arithmetic: ``__fmaf_rn``, ``x * a + b``; ``lop3``,
  which C cannot spell, as non-volatile inline PTX), built by ``nvcc -O3`` from the NVIDIA
  wheels; nvcc chooses the unrolling, the scheduling and the registers.

The CUDA kernel's timed region is ``kernel/timing.py``'s, written there
(``cuda_repeated``: the CUDA C++ of ``repeated``, from the same row layout): the region
delimited by the same two ``%clock64`` reads (inline PTX that takes the chains as read-write
operands, so nvcc can move no work of the region out of it, and adds no instruction), as many
barriers before each repetition, the timestamps in registers until after the repetition loop,
lane 0 writing its warp's row (``row_words(REPS)`` u64: (start, end) per kept repetition, then
``%smid``) after it, so one analysis (``launch.pair_spans``) reads both kernels. Its SASS is
checked as the verified kernel's is (``region_intrusions``, a ``sass:`` flag): between the
two clock reads no barrier, memory access, special register read or branch but the work
loop's back edge, and, outside that loop, nothing but the work and moves.

Both are launched one block per SM (the shared memory of ``analyse.one_block_smem``) at two
lengths (the verified kernel at ``UNITS`` steps per thread, nvcc's at ``NV_UNITS``, where nvcc
compiles both lengths to one loop body: a result whose two nvcc lengths differ in code is
flagged); the rate is the work the longer length adds (warps x chains x length difference,
warp-instructions of the variant) over the difference of the SM spans, median over (SM,
repetition), per launch; the median of ``LAUNCHES`` launches. Efficacy = nvcc rate / verified
rate (1: nvcc loses nothing). Each result keeps both rates, their launches, both kernels'
registers and SASS (the region's opcodes: what nvcc left in the timed region, loop included).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from gpudissect.bench import stats
from gpudissect.catalog.model import Variant
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.region import RegionNotFound, find_region, is_move, kind_of
from gpudissect.kernel.sass import SassInstr, branch_target, labels_of, parse_sass
from gpudissect.kernel.timing import cuda_repeated
from gpudissect.kernel.toolchain import disassemble, find_tool, sha256
from gpudissect.store.db import Result
from gpudissect.suites.behaviour.kernels import REPS, ROW, pipe_kernel, pipe_name
from gpudissect.suites.behaviour.launch import pair_spans

# variant -> (C type, C statement of one step of chain x with the fixed operands a, b)
VARIANTS: dict[str, tuple[str, str]] = {
    "fma.rn.f32": ("float", "x = __fmaf_rn(x, a, b);"),
    "mad.lo.u32": ("unsigned", "x = x * a + b;"),
    "lop3.b32": ("unsigned", 'asm("lop3.b32 %0, %0, %1, %2, 0x96;" : "+r"(x) : "r"(a), "r"(b));'),
}
POINTS = ((1, 1), (4, 1), (4, 4), (8, 8), (16, 8), (32, 8))  # (warps per SM, chains per thread)
UNITS = (256, 512)  # steps per thread at the two region lengths (chains x length): verified
# nvcc's: from 512 steps on, nvcc -O3 (CUDA 13) keeps a loop of one unrolled body at both
# lengths, so the difference of the two is whole trips of that loop (below, it unrolls the
# shorter length fully and the two lengths are different code); checked per result
NV_UNITS = (512, 1024)
LAUNCHES = 3
NVCC_FLAGS = ("-O3",)
SEP = "#"  # probe name: efficacy:<variant>


def tag(variant: str) -> str:
    return f"e{list(VARIANTS).index(variant)}"


def lengths(chains: int, units: tuple[int, int] = UNITS) -> tuple[int, int]:
    return units[0] // chains, units[1] // chains


def nvcc_name(variant: str, chains: int, length: int) -> str:
    return f"nv_{tag(variant)}_k{chains}_n{length}"


def chain_counts() -> list[int]:
    return sorted({k for _w, k in POINTS})


def ptx_names(variant: str) -> list[str]:
    return [pipe_name(tag(variant), k, n) for k in chain_counts() for n in lengths(k)]


def nvcc_names(variant: str) -> list[str]:
    return [nvcc_name(variant, k, n) for k in chain_counts() for n in lengths(k, NV_UNITS)]


def probe_specs() -> list[tuple[str, dict, list[str]]]:
    """(name, params, kernels) of each efficacy probe (one per variant)."""
    return [(f"efficacy:{v}", {"variant": v, "points": [list(p) for p in POINTS], "units": list(UNITS),
                               "nvcc_units": list(NV_UNITS)},
             ptx_names(v) + nvcc_names(v)) for v in VARIANTS]


def ptx_kernels(variant: Variant, header: str) -> list[Kernel]:
    """The verified PTX kernels of one variant (every chain count, both lengths)."""
    return [pipe_kernel(header, tag(variant.name), [variant], k, n)
            for k in chain_counts() for n in lengths(k)]


# ----------------------------------------------------------------- the CUDA C++ kernels
def cuda_kernel(variant: str, chains: int, length: int) -> str:
    """One kernel: the ABI of the pipe kernels (in, out, times), the same inputs (the fixed
    operands first, then one start value per chain, plus the lane id on its bits), the timed
    region of ``kernel/timing.py`` (``cuda_repeated``: the CUDA C++ of ``repeated``, the
    chains pinned inside the region by its two clock reads), each warp's row at its global
    warp index, as the pipe kernels write it."""
    ctype, step = VARIANTS[variant]
    con = "f" if ctype == "float" else "r"
    load = ("__uint_as_float((unsigned)in[{i}])" if ctype == "float" else "(unsigned)in[{i}]")
    vary = ("__uint_as_float((unsigned)in[{i}] + lane)" if ctype == "float" else "(unsigned)in[{i}] + lane")
    bits = "__float_as_uint" if ctype == "float" else ""
    decl = "\n".join(f"  {ctype} x{j} = {vary.format(i=2 + j)};" for j in range(chains))
    work = [f"for (int i = 0; i < {length}; ++i) {{",
            *[f"  {{ {ctype}& x = x{j}; {step} }}" for j in range(chains)],
            "}"]
    region = "\n".join(cuda_repeated(work, REPS, REPS, f"times + (size_t)(tid / 32) * {ROW}",
                                     pinned=tuple(f'"+{con}"(x{j})' for j in range(chains))))
    sinks = "\n".join(f"  out[(size_t)tid * {chains} + {j}] = {bits}(x{j});" for j in range(chains))
    return f'''
extern "C" __global__ void {nvcc_name(variant, chains, length)}(const unsigned long long* in,
    unsigned long long* out, unsigned long long* times) {{
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  {ctype} a = {load.format(i=0)};
  {ctype} b = {load.format(i=1)};
{decl}
{region}
{sinks}
}}'''


def cuda_source(variants: list[str]) -> str:
    return "\n".join(["// CUDA C++ kernels of the efficacy probes (gpudissect), built by nvcc "
                      + " ".join(NVCC_FLAGS)]
                     + [cuda_kernel(v, k, n) for v in variants for k in chain_counts()
                        for n in lengths(k, NV_UNITS)]) + "\n"


def nvcc_cubin(source: str, arch: str) -> bytes:
    """``source`` built by nvcc for ``arch`` (raises with nvcc's first lines when it fails)."""
    nvcc = find_tool("nvcc")
    with tempfile.TemporaryDirectory() as td:
        src, out = Path(td) / "efficacy.cu", Path(td) / "efficacy.cubin"
        src.write_text(source)
        r = subprocess.run([str(nvcc), "-cubin", f"-arch={arch}", *NVCC_FLAGS, str(src), "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc failed: {' '.join(r.stderr.strip().splitlines()[:3])[:400]}")
        return out.read_bytes()


def region_intrusions(region: list[SassInstr], labels: dict[str, int], work: str) -> list[str]:
    """What nvcc left between the two clock reads that ``kernel/timing.py`` keeps out of a
    timed region: barriers, memory accesses, special register reads (``CS2R Rx, SRZ``, a
    zeroing, excepted) and branches (kinds of ``kernel/region.py``), but for the back edges of
    the work's own loop (a branch to an instruction of the region at or before it); and,
    outside that loop, anything but the work's opcode ``work`` and moves (the loop counter's
    start): the harness's own arithmetic (its repetition counter) moved into the region."""
    loops = []
    for i in region:
        target = branch_target(i, labels)
        if target is not None and region[0].offset <= target <= i.offset:
            loops.append((target, i.offset))
    out = []
    for i in region:
        if i.opcode == "CS2R" and "SRZ" in i.operands:  # a zeroing: a move
            continue
        kinds = kind_of(i.opcode)
        in_loop = any(a <= i.offset <= z for a, z in loops)
        back_edge = any(i.offset == z for _a, z in loops)
        if (kinds and not back_edge) or not (kinds or in_loop or i.opcode == work or is_move(i.full, i)):
            out.append(i.text.split("*/", 1)[-1].strip())
    return out


def build_nvcc(variants: list[str], ptx_built: dict[str, Built | Exception], arch: str) -> dict[str, Built | Exception]:
    """The CUDA kernels of ``variants``, one nvcc run: each a Built whose Kernel carries the
    inputs of its verified twin (the same operand values) and its CUDA text."""
    names = [(v, k, n) for v in variants for k in chain_counts() for n in lengths(k, NV_UNITS)]
    try:
        cubin = nvcc_cubin(cuda_source(variants), arch)
        disasm = disassemble(cubin)
        funcs, labels = parse_sass(disasm), labels_of(disasm)
    except Exception as e:  # every kernel of the module fails with the reason
        return {nvcc_name(v, k, n): e for v, k, n in names}
    out: dict[str, Built | Exception] = {}
    for v, k, n in names:
        name = nvcc_name(v, k, n)
        twin = ptx_built.get(pipe_name(tag(v), k, lengths(k)[0]))  # its inputs depend on k alone
        f = funcs.get(name)
        if f is None or isinstance(twin, Exception) or twin is None:
            out[name] = RegionNotFound(f"{name}: missing from the cubin or its verified twin failed")
            continue
        try:
            region = find_region(f.instrs)
        except RegionNotFound as e:
            out[name] = e
            continue
        src = cuda_kernel(v, k, n)
        kern = Kernel(name, "// CUDA C++ (nvcc " + " ".join(NVCC_FLAGS) + ")\n", src, variant=v, measure="efficacy",
                      chains=k, length=n, warps=0, reps=REPS, inputs=list(twin.kernel.inputs),
                      n_sink=k, meta={"nvcc": True,
                                      "region_intrusions": region_intrusions(region, labels.get(name, {}),
                                                                            main_opcode(twin))})
        out[name] = Built(kern, cubin, "\n".join(i.text for i in f.instrs), f.instrs, region, 3, arch)
    return out


def texts(b: Built) -> dict[str, tuple[str, str]]:
    """What a result citing ``b`` stores: the CUDA source of an nvcc kernel as 'cuda'."""
    if b.kernel.meta.get("nvcc"):
        return {sha256(b.kernel.entry): ("cuda", b.kernel.entry), b.sass_hash: ("sass", b.sass)}
    return b.texts()


# ----------------------------------------------------------------- measuring
def region_ops(b: Built) -> dict[str, int]:
    return dict(Counter(i.full for i in b.region))


def work_rate(dev: Device, pair: tuple[Built, Built], nsm: int, warps: int, smem: int) -> dict:
    """One launch of each length: warp-instructions of the work per clock per SM, from the
    difference of the two lengths (the region's constant costs cancel)."""
    spans = pair_spans(dev, pair, nsm, warps, smem)
    units = warps * pair[0].kernel.chains * (pair[1].kernel.length - pair[0].kernel.length)
    return {**stats.rate_stats(stats.slope_rates(spans[0], spans[1], units)), "sms": len({sm for _r, sm in spans[1]})}


def efficacy_value(nvcc_rate: float | None, verified_rate: float | None) -> float | None:
    """nvcc's rate over the verified kernel's (None when either is missing)."""
    if not nvcc_rate or not verified_rate:
        return None
    return nvcc_rate / verified_rate


def _median(per: list[dict]) -> float | None:
    vals = [d["rate"] for d in per if d.get("rate")]
    return float(np.median(vals)) if vals else None


def region_flags(ptx: Built, nv: tuple[Built, Built], main: str) -> list[str]:
    """``sass:`` flags: a verified region that holds anything but the work; an nvcc region
    that holds what ``kernel/timing.py`` keeps out of a region (``region_intrusions``, read
    when it was built: a barrier, memory access, special register read or branch besides its
    work loop's; outside that loop, anything but the work and moves); an nvcc region
    with none of the work's opcode (nvcc moved it out: the rate would not be the work's); nvcc's
    two lengths compiled to different code (their difference would not be trips of one loop)."""
    out = []
    extra = {o: c for o, c in Counter(i.opcode for i in ptx.region).items() if o != main}
    if extra or not ptx.region:
        out.append(f"sass: {ptx.name}: the timed region holds {extra or 'nothing'} besides {main}")
    for b in nv:
        if b.kernel.meta.get("region_intrusions"):
            out.append(f"sass: {b.name}: the timed region holds harness instructions "
                       f"({'; '.join(b.kernel.meta['region_intrusions'])})")
    if not any(i.opcode == main for i in nv[1].region):
        out.append(f"sass: {nv[1].name}: no {main} in the timed region")
    if region_ops(nv[0]) != region_ops(nv[1]):
        out.append(f"sass: {nv[0].name} and {nv[1].name}: nvcc compiled the two lengths to different code "
                   f"({region_ops(nv[0])} vs {region_ops(nv[1])})")
    return out


def main_opcode(b: Built) -> str:
    """The SASS opcode of the work: the commonest of the verified kernel's timed region."""
    ops = Counter(i.opcode for i in b.region)
    return ops.most_common(1)[0][0] if ops else "?"


def run_efficacy(dev: Device, name: str, built: dict[str, Built], nsm: int, smem: int) -> list[Result]:
    """One result per point of ``POINTS`` for the variant of probe ``name``: efficacy =
    nvcc rate / verified rate."""
    v = name.split(":", 1)[1]
    main = main_opcode(built[ptx_names(v)[-1]])
    results = []
    for warps, k in POINTS:
        n1, n2 = lengths(k)
        m1, m2 = lengths(k, NV_UNITS)
        ptx = (built[pipe_name(tag(v), k, n1)], built[pipe_name(tag(v), k, n2)])
        nv = (built[nvcc_name(v, k, m1)], built[nvcc_name(v, k, m2)])
        per = [{"verified": work_rate(dev, ptx, nsm, warps, smem), "nvcc": work_rate(dev, nv, nsm, warps, smem)}
               for _ in range(LAUNCHES)]
        rv = _median([d["verified"] for d in per])
        rn = _median([d["nvcc"] for d in per])
        flags = region_flags(ptx[1], nv, main)
        value = None if flags else efficacy_value(rn, rv)
        loop = any(i.opcode == "BRA" for i in nv[1].region)
        fit = {"verified": {"rate": rv, "regs": ptx[1].regs, "region_ops": region_ops(ptx[1]),
                            "sass_hash": ptx[1].sass_hash, "ptx_hash": ptx[1].ptx_hash},
               "nvcc": {"rate": rn, "regs": nv[1].regs, "region_ops": region_ops(nv[1]), "loop": loop,
                        "sass_hash": nv[1].sass_hash, "source_hash": sha256(nv[1].kernel.entry),
                        "flags": " ".join(NVCC_FLAGS)}}
        results.append(Result(
            name, "efficacy", value, "ratio",
            f"nvcc rate / verified rate of the same work ({k} chains x {warps} warps, one block per SM): each "
            f"the work the longer region adds ({n1} -> {n2} steps per chain verified, {m1} -> {m2} nvcc) over "
            f"the SM span difference, median over (SM, repetition), median of {LAUNCHES} launches",
            params={"variant": v, "warps": warps, "chains": k, "lengths": [n1, n2], "nvcc_lengths": [m1, m2],
                    "launches": LAUNCHES,
                    "repetitions_kept": REPS - 1, "blocks_per_sm": 1},
            fit=fit, samples={"launches": per}, flags=flags, cls="behaviour",
            ptx_hash=ptx[1].ptx_hash, sass_hash=ptx[1].sass_hash))
    return results


def efficacy_texts(built: dict[str, Built], names: list[str]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for n in names:
        out.update(texts(built[n]))
    return out
