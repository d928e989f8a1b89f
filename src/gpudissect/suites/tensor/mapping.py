"""The tensor catalog's static PTX->SASS map (no GPU), the part of ``gpudissect map`` this suite
owns (found through the registry: ``suites.suite_maps``).

Each variant that applies to the architecture (its ``min_arch``; wgmma: the architecture's
``wgmma`` feature) has its timing kernels written as the suite writes them (the latency family,
and the throughput family of a store, which has no latency one), compiled for the architecture
and checked as the suite checks them (checks.py): a fixed whole number of tensor SASS per PTX
instruction and nothing else per instance is ``verified`` (the check's ``native``); one ptxas
lowers to a subroutine call or to other work per instance is ``emulated`` (no tensor-core path
for it on the architecture: a finding, not verified); folded or serialized lowerings are
``unverified``, with the check's reason; a variant ptxas rejects is ``unsupported``, as one
whose ``min_arch`` the architecture does not meet.

A record has the keys of the instruction map's (variant, arch, verified, sass, strategy,
status, cls, reason, sass_counts, stalls) and ``catalog = "tensor"``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from fractions import Fraction

from gpudissect.arch.target import ARCH_RE, Target
from gpudissect.catalog.tensor import LdstVariant, MmaVariant, WgmmaVariant, load_tensor_catalog
from gpudissect.kernel.build import Built
from gpudissect.kernel.control import instance_stalls
from gpudissect.kernel.parallel import pimap
from gpudissect.suites.tensor.checks import TensorCheck, Work, family_key, parts, settle_status
from gpudissect.suites.tensor.suite import PART_KERNELS, Sweep, _compiled, variant_kernels

CATALOG = "tensor"
# the kernels of the map: the suite's latency families (three lengths), the stores' throughput
# family, one wgmma N; no sweep of accumulators, warps or operand data
MAP_SWEEP = Sweep(lat_lengths=(4, 8, 12), thr_units=(), mma_chains=(1,), mma_warps=(), thr_lengths=(8, 16, 24),
                  ldst_warps=(8,), wg_lat_lengths=(2, 4, 6), wg_thr_units=(), wg_sp_thr_units=(),
                  wg_n_full=(64,), wg_n_other=(64,), wg_accs=(), wg_groups=(), sustained_ms=0.0,
                  data_variants=(), layouts=False)

Variant = MmaVariant | WgmmaVariant | LdstVariant


def variants() -> list[Variant]:
    cat = load_tensor_catalog()
    return [*cat.mma, *cat.wgmma, *cat.ldst]


def names() -> list[str]:
    """Every variant name of the tensor catalog (for the map's patterns)."""
    return [v.name for v in variants()]


def select(patterns: list[str] | None) -> list[Variant]:
    """The variants whose names match a glob of ``patterns`` (all when none)."""
    vs = variants()
    return vs if not patterns else [v for v in vs if any(fnmatch.fnmatchcase(v.name, p) for p in patterns)]


def needs(v: Variant) -> list[str]:
    """What ``v`` needs of an architecture, as ``Target.lacks`` reads it: ``sm_NN`` (its
    ``min_arch``), and the ``wgmma`` feature for a wgmma (an architecture-specific one)."""
    if isinstance(v.min_arch, int):
        out = [f"sm_{v.min_arch}"]
    else:
        m = ARCH_RE.fullmatch(v.min_arch)
        if not m:
            raise ValueError(f"{v.name}: min_arch '{v.min_arch}' is not of the form sm_XX")
        out = [f"sm_{m.group(1)}"]
    if isinstance(v, WgmmaVariant):
        out.append("wgmma")
    return out


def not_applicable(v: Variant, target: Target) -> str | None:
    """Why ``v`` does not apply to ``target`` (None when it does)."""
    lacks = target.lacks(needs(v))
    if not lacks:
        return None
    return "needs " + " and ".join(f"{n} or newer" if n.startswith("sm_") else f"the {n} feature, which "
                                   f"{target.arch} lacks" for n in lacks)


def _cls(v: Variant) -> str:
    if isinstance(v, MmaVariant):
        return f"tensor.{v.form}"
    if isinstance(v, LdstVariant):
        return f"tensor.{v.op}"
    return "tensor.wgmma"


def _record(v: Variant, arch: str, status: str, reason: str = "", **more) -> dict:
    r = {"variant": v.name, "arch": arch, "catalog": CATALOG, "verified": status == "verified", "sass": [],
         "strategy": None, "status": status, "cls": _cls(v), "sass_counts": {}, "stalls": {}}
    r.update(more)
    if reason:
        r["reason"] = reason
    return r


def _sass(counts: dict[str, str]) -> list[str]:
    out = []
    for op, c in counts.items():
        f = Fraction(c)
        out += [op] * f.numerator if f.denominator == 1 else [f"{float(f):g}*{op}"]
    return out


def _stalls(w: Work, key: str, ops: dict[str, str]) -> dict[str, int]:
    """ptxas's stall count of each SASS of ``ops`` in the longest kernel of family ``key``."""
    bs = sorted((b for b in w.built.values() if isinstance(b, Built) and family_key(b.kernel) == key),
                key=lambda b: b.kernel.units)
    if not bs:
        return {}
    return instance_stalls(bs[-1].region, bs[-1].cubin, bs[-1].kernel.name, ops)


def _map_record(w: Work, arch: str) -> dict:
    chk = w.check or TensorCheck("error", reason="nothing compiled")
    key = next((k for k, c in w.checks.items() if c is chk), None)
    status = {"native": "verified", "unsupported": "unsupported", "error": "error",
              "emulated": "emulated"}.get(chk.status, "unverified")
    reason = "" if chk.ok else (chk.reason if chk.status in ("unsupported", "error") else
                                f"{chk.status}: {chk.reason}")
    more = {"sass": _sass(chk.sass), "sass_counts": dict(chk.sass), "strategy": key and key.split("_", 1)[-1],
            "tensor_status": chk.status}
    if chk.other_per_instr:
        more["other_per_instr"] = dict(chk.other_per_instr)
    if chk.ok and key:
        more["stalls"] = _stalls(w, key, chk.sass)
    return _record(w.variant, arch, status, reason, **more)


def static_map(target: Target, patterns: list[str] | None = None, jobs: int = 2,
               progress: Callable[[dict], None] | None = None) -> list[dict]:
    """The map records of the selected variants on ``target``, in catalog order."""
    vs = select(patterns)
    out: dict[str, dict] = {}
    works: dict[str, Work] = {}
    for i, v in enumerate(vs):
        why = not_applicable(v, target)
        if why:
            out[v.name] = _record(v, target.arch, "unsupported", why)
            if progress:
                progress(out[v.name])
            continue
        w = Work(v)
        try:
            w.kernels = variant_kernels(v, MAP_SWEEP, target, i)
        except Exception as e:  # a generator that cannot write the variant: its record says why
            out[v.name] = _record(v, target.arch, "error", f"generator: {type(e).__name__}: {e}")
            if progress:
                progress(out[v.name])
            continue
        if not w.kernels:
            out[v.name] = _record(v, target.arch, "error", "no kernel of the map's sweep applies")
            if progress:
                progress(out[v.name])
            continue
        works[v.name] = w
    pending = {name: len(parts(w.kernels, PART_KERNELS)) for name, w in works.items()}
    jobs_in = [(Work(w.variant), part, target, False) for w in works.values()
               for part in parts(w.kernels, PART_KERNELS)]
    for done in pimap(_compiled, jobs_in, jobs):
        w = works[done.variant.name]
        w.built.update(done.built)
        w.checks.update(done.checks)
        w.check = w.check or done.check
        pending[w.variant.name] -= 1
        if pending[w.variant.name] == 0:
            if w.check is None:
                order = dict.fromkeys(family_key(k) for k in w.kernels)
                w.checks = {k: w.checks[k] for k in order if k in w.checks}
                settle_status(w)
            out[w.variant.name] = _map_record(w, target.arch)
            if progress:
                progress(out[w.variant.name])
    return [out[v.name] for v in vs]
