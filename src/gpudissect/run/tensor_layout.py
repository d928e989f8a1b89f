"""Fragment-layout experiment of one mma.sync variant on the GPU (analyse/layout.py designs
the probes and checks the result against the PTX reference layout)."""

from __future__ import annotations

import numpy as np

from ..analyse.layout import Shape, check, decode, design, pack, reference_layout
from ..generate.tensor import MmaVariant, probe_kernel
from ..store.db import Result
from ..toolchain.tools import sha256
from ..verify.tensor import build_entries
from .device import Buf


def shape_of(v: MmaVariant) -> Shape:
    m, n, k = v.shape
    return Shape(m, n, k, v.atype, v.btype, v.ctype)


def layout_supported(v: MmaVariant) -> str | None:
    """Why the experiment does not apply (None: it does)."""
    if v.groups != 1:
        return "m8n8k4 quad-pair layout not modelled"
    if v.atype == "b1":
        return "b1 probe design not implemented"
    return None


def probe_inputs(v: MmaVariant, s: Shape, d) -> np.ndarray:
    """u32 words per thread: A words, B words, C words (the probe kernel's ABI)."""
    P = d.a.shape[0]
    a = pack(v.atype, d.a.reshape(P * 32, -1))
    b = pack(v.btype, d.b.reshape(P * 32, -1))
    c = pack(v.ctype, d.c.reshape(P * 32, -1))
    return np.ascontiguousarray(np.concatenate([a, b, c], axis=1).astype(np.uint32))


def _run_probe(dev, v: MmaVariant, s, d, isa: str, arch: str, tag: str):
    """One mma per warp on designed inputs (one warp per probe): the probe kernel and the
    decoded D fragments, (probes, lanes, elements)."""
    k = probe_kernel(v, "probe", isa)
    b = build_entries(k.head, [(k.name, k.entry, 1)], arch, need_region=False).get(k.name)
    if isinstance(b, Exception) or b is None:
        raise RuntimeError(f"probe kernel not built: {b}")
    words = probe_inputs(v, s, d)
    P = d.a.shape[0]
    d_words = k.meta["d_words"]
    run = dev.launch(b.cubin, k.name, P, 32, [
        Buf(f"{tag}_in", data=words.ravel()),
        Buf(f"{tag}_out", nbytes=P * 32 * d_words * 4, read=True, dtype="u4", zero=True),
        Buf("lay_unused", nbytes=8),
    ])
    out_words = run.outputs[f"{tag}_out"][: P * 32 * d_words].reshape(P, 32, d_words)
    return k, decode(v.dtype, out_words)


def run_layout(dev, v: MmaVariant, isa: str, arch: str, texts: dict) -> Result:
    why = layout_supported(v)
    if why:
        return Result(v.name, "layout", None, "", "none", flags=[f"not-measured: {why}"])
    s = shape_of(v)
    d = design(s)
    k, out = _run_probe(dev, v, s, d, isa, arch, "lay")
    P = d.a.shape[0]
    res = check(s, d, out)
    ref = reference_layout(s)
    texts[sha256(k.ptx)] = ("ptx", k.ptx)
    layout = {op: ref[op].tolist() for op in ("a", "b", "c")}
    params = {**res.to_json(), "shape": list(v.shape), "probes": P, "base": d.base, "digits": d.digits,
              "reference_layout": layout}
    return Result(v.name, "layout", 1.0 if res.matches else 0.0, "matches_reference",
                  "all (A,B,D) product triples agree with the PTX reference layout", params=params,
                  flags=[] if res.matches else [f"layout-differs: {len(res.differences)} differences"],
                  ptx_hash=sha256(k.ptx))


def run_numerics(dev, v: MmaVariant, isa: str, arch: str, texts: dict) -> Result:
    """Designed small inputs (analyse/numerics.py) through one mma per warp."""
    from ..analyse.numerics import cases_for, interpret, numerics_design

    s = shape_of(v)
    cases = cases_for(v.atype)
    d = numerics_design(s, cases)
    k, out = _run_probe(dev, v, s, d, isa, arch, "num")
    res = interpret(s, cases, out)
    texts[sha256(k.ptx)] = ("ptx", k.ptx)
    return Result(v.name, "numerics", None, "", "D[0][0] of designed inputs vs exactly rounded alternatives",
                  params={"cases": res}, ptx_hash=sha256(k.ptx))
