"""Fragment-layout experiment of one mma.sync variant on the GPU (layout_reference.py designs
the probes and checks the result against the PTX reference layout)."""

from __future__ import annotations

import dataclasses

import numpy as np

from gpudissect.arch.target import Target
from gpudissect.catalog.tensor import LdstVariant, MmaVariant, element
from gpudissect.device.args import Buf
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.mma import tensor_arch
from gpudissect.kernel.ptx import Kernel
from gpudissect.store.db import Result
from gpudissect.suites.tensor.fragments import (
    FragSpec,
    coverage,
    describe_tiling,
    output_bytes,
    tiling,
)
from gpudissect.suites.tensor.fragments import decode as decode_frag
from gpudissect.suites.tensor.fragments import design as design_frag
from gpudissect.suites.tensor.kernels import probe_kernel, wmma_frag_probe
from gpudissect.suites.tensor.layout_reference import (
    Shape,
    check,
    decode,
    design,
    pack,
    reference_layout,
    valid_layout,
)
from gpudissect.suites.tensor.numerics import cases_for, interpret, numerics_design


def shape_of(v: MmaVariant) -> Shape:
    """The layout model of a variant: shape, types, and from the PTX name the .row/.col
    operand layouts (m8n8k4) and the b1 operation (.and/.xor.popc); mma.sp: the metadata."""
    m, n, k = v.shape
    parts = v.ptx.split(".")
    ab = [p for p in parts if p in ("row", "col")] or ["row", "col"]
    bop = next((p for p in parts if p in ("and", "xor")), "")
    return Shape(m, n, k, v.atype, v.btype, v.ctype, groups=v.groups, alayout=ab[0], blayout=ab[1],
                 bop=bop, sp_meta=v.sp_meta if v.sparse else None)


def layout_supported(v: MmaVariant) -> str | None:
    """Why the experiment does not apply (None: it does)."""
    if v.form not in ("mma", "mma.sp"):
        return f"{v.form}: no mma.sync fragment layout"
    if element(v.atype).max_code is None or element(v.btype).max_code is None:
        return f"no exact code values for {v.atype}/{v.btype}"
    s = shape_of(v)
    try:
        ref = reference_layout(s)
    except (KeyError, ValueError) as e:
        return f"reference layout not modelled: {e}"
    r = v.regs  # f64 operands count in 64-bit registers (element("f64").per_reg = 1)
    sizes = (r["a"] * element(v.atype).per_reg, r["b"] * element(v.btype).per_reg,
             r["c"] * element(v.ctype).per_reg)
    if sizes != (s.na, s.nb, s.nc) or not valid_layout(s, ref):
        return f"fragment sizes {sizes} do not fit the model {(s.na, s.nb, s.nc)}"
    return None


def probe_inputs(v: MmaVariant, s: Shape, d, chunk: int = 4096) -> np.ndarray:
    """u32 words per thread: A words, B words, C words (the probe kernel's ABI); packed in
    chunks of probes (b1 designs are large)."""
    P = d.a.shape[0]
    parts = []
    for p in range(0, P, chunk):
        sl = slice(p, min(P, p + chunk))
        a = pack(v.atype, d.a[sl].reshape(-1, s.na))
        b = pack(v.btype, d.b[sl].reshape(-1, s.nb))
        c = pack(v.ctype, d.c[sl].reshape(-1, s.nc))
        parts.append(np.concatenate([a, b, c], axis=1))
    return np.ascontiguousarray(np.concatenate(parts).astype(np.uint32))


def _build_probe(k: Kernel, target: Target) -> Built:
    b = build_module([k], tensor_arch(target), region=False).get(k.name)
    if not isinstance(b, Built):
        raise RuntimeError(f"probe kernel not built: {b}")
    return b


def build_probe(v: MmaVariant, target: Target) -> Built:
    """The probe kernel of ``v`` (one mma per warp), built."""
    return _build_probe(probe_kernel(v, "probe", target), target)


def _run_probe(dev: Device, v: MmaVariant, s, d, target: Target, tag: str,
               probe: Built | None = None) -> tuple[Built, np.ndarray]:
    """One mma per warp on designed inputs (one warp per probe): the probe kernel (``probe``:
    built beforehand) and the decoded D fragments, (probes, lanes, elements)."""
    b = probe or build_probe(v, target)
    k = b.kernel
    words = probe_inputs(v, s, d)
    P = d.a.shape[0]
    d_words = k.meta["d_words"]
    run = dev.launch(b.cubin, k.name, P, 32, [
        Buf(f"{tag}_in", data=words.ravel()),
        Buf(f"{tag}_out", nbytes=P * 32 * d_words * 4, read=True, dtype="u4", zero=True),
        Buf("lay_unused", nbytes=8),
    ])
    out_words = run.outputs[f"{tag}_out"][: P * 32 * d_words].reshape(P, 32, d_words)
    return b, decode(v.dtype, out_words)


def run_layout(dev: Device, v: MmaVariant, target: Target, texts: dict, probe: Built | None = None) -> Result:
    why = layout_supported(v)
    if why:
        return Result(v.name, "layout", None, "", "none", flags=[f"not-measured: {why}"])
    s = shape_of(v)
    d = design(s)
    b, out = _run_probe(dev, v, s, d, target, "lay", probe)
    P = d.a.shape[0]
    res = check(s, d, out)
    ref = reference_layout(s)
    texts[b.ptx_hash] = ("ptx", b.ptx)
    layout = {op: ref[op].tolist() for op in ("a", "b", "c")}
    params = {**res.to_json(), "shape": list(v.shape), "probes": P, "base": d.base, "digits": d.digits,
              "model": dataclasses.asdict(s), "reference_layout": layout}
    return Result(v.name, "layout", 1.0 if res.matches else 0.0, "matches_reference",
                  "all (A,B,D) product triples agree with the PTX reference layout", params=params,
                  flags=[] if res.matches else [f"layout-differs: {len(res.differences)} differences"],
                  ptx_hash=b.ptx_hash)


def run_numerics(dev: Device, v: MmaVariant, target: Target, texts: dict, probe: Built | None = None) -> Result:
    """Designed small inputs (numerics.py) through one mma per warp."""
    s = shape_of(v)
    cases = cases_for(v.atype)
    d = numerics_design(s, cases)
    b, out = _run_probe(dev, v, s, d, target, "num", probe)
    res = interpret(s, cases, out)
    texts[b.ptx_hash] = ("ptx", b.ptx)
    return Result(v.name, "numerics", None, "", "D[0][0] of designed inputs vs exactly rounded alternatives",
                  params={"cases": res}, ptx_hash=b.ptx_hash)


def frag_spec(v: LdstVariant) -> FragSpec:
    return FragSpec(v.op, v.frag, v.elem, v.rows, v.cols, v.layout, v.ldm, v.regs, element(v.elem).reg_bytes)


def mma_shapes_for(v: LdstVariant, mma: list[MmaVariant]) -> list[Shape]:
    """The stated mma.sync layouts a wmma fragment of ``v`` may be tiled from: the
    single-group mma.sync shapes whose operand (A, B or C) has the fragment's type."""
    key = {"a": "atype", "b": "btype", "c": "ctype", "d": "ctype"}[v.frag]
    out: dict[tuple, Shape] = {}
    for m in mma:
        if m.form == "mma" and m.groups == 1 and getattr(m, key) == v.elem:
            s = shape_of(m)
            dims = {"a": (s.m, s.k), "b": (s.k, s.n)}.get(v.frag, (s.m, s.n))
            out.setdefault(dims, s)  # the operand's layout depends on its dimensions only
    return list(out.values())


WMMA_PROBE = "wprobe"


def build_wmma_probe(v: LdstVariant, target: Target) -> Built:
    """The wmma fragment probe kernel of ``v``, built."""
    return _build_probe(wmma_frag_probe(v, WMMA_PROBE, target), target)


def run_wmma_fragment(dev: Device, v: LdstVariant, mma: list[MmaVariant], target: Target,
                      texts: dict, probe: Built | None = None) -> Result:
    """The wmma fragment layout by raw data movement (fragments.py); ``probe``: its kernel built
    beforehand (the suite's compile pool), else built here."""
    s = frag_spec(v)
    b = probe or build_wmma_probe(v, target)
    inp = np.frombuffer(design_frag(s), dtype=np.uint8)
    nout = output_bytes(s)
    run = dev.launch(b.cubin, WMMA_PROBE, s.passes, 32, [
        Buf("wf_in", data=inp), Buf("wf_out", nbytes=nout, read=True, dtype="u1", zero=True),
        Buf("lay_unused", nbytes=8)])
    slots = decode_frag(s, run.outputs["wf_out"][:nout])
    cov = coverage(s, slots)
    til = tiling(s, slots, mma_shapes_for(v, mma))
    texts.update(b.texts())
    params = {"frag": v.frag, "op": v.op, "shape": v.shape, "layout": v.layout, "elem": v.elem,
              "rows": v.rows, "cols": v.cols, "ldm": v.ldm, "passes": s.passes, "coverage": cov,
              "slots": slots.tolist(), "tiling": til, "tiling_text": describe_tiling(til),
              "matches_reference": None,
              "reference": "PTX ISA: the wmma fragment layout is unspecified; compared with the "
                           "stated mma.sync layouts, tiled (or tiled and transposed)"}
    flags = [] if cov["complete"] else [f"incomplete: {cov['missing_elements']} elements missing, "
                                        f"{cov['invalid_slots']} slots without a valid code"]
    return Result(v.name, "layout", 1.0 if til["all"] else 0.0, "matches_tiled_mma",
                  "raw wmma.load/store of index-coded data; per register: the mma.sync register and "
                  "offset it equals", params=params, flags=flags, ptx_hash=b.ptx_hash, sass_hash=b.sass_hash)
