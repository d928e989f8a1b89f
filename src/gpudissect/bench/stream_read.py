"""Shared machinery of a saturated streaming read (plain loads), for any suite that compares
something against the best a plain load reaches: the PTX of one trip of independent loads, the
SASS proof that they are all in flight at once, and the saturation rule over a sweep of
configurations (independent loads per thread x warps per SM).

* **all loads before any use.** ``ilp`` loads of a trip are issued before the first use of any
  loaded value (the use: an XOR fold into a sink). ptxas keeps that order only when it may use
  the registers: without ``.maxnreg 255`` (:data:`MAXNREG`) on the entry it reuses registers
  and interleaves the folds, so that fewer loads are in flight than the kernel asks for (seen
  with ptxas 13.0: 8 ``ld.global.cg.v4`` per trip became 3 in flight, then one more
  per fold). :func:`loads_in_flight` counts, in the SASS, the loads issued before the first
  instruction that reads a loaded register: the kernel's real parallelism, checked on every
  kernel.
* **saturation over a grid.** A plain load's rate depends on bytes in flight per SM (loads per
  thread x warps); the best configuration is the chip's rate only when the rate had stopped
  rising: :func:`grid_saturation` (a configuration with more in flight, or one with less,
  reaches within ``tol`` of the best; or every one with more in flight is slower: a single peak).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpudissect.kernel.sass import SassInstr

MAXNREG = ".maxnreg 255"  # the entry directive that lets ptxas keep every load of a trip in flight
PEAK_TOL = 0.02  # a configuration within 2% of the best is "at the peak"


def load_trip(op: str, ilp: int, regs: Sequence[Sequence[str]], addr: str, step: int, acc: str) -> list[str]:
    """One trip: ``ilp`` loads ``op`` (e.g. ``ld.global.cg.v4.u32``) into ``regs[q]`` at
    ``[addr + q * step]``, all issued before the first use, then every loaded word XOR-folded
    into ``acc`` (ptxas narrows a load whose words are not all used)."""
    out = []
    for q in range(ilp):
        r = regs[q]
        dst = r[0] if len(r) == 1 else "{" + ", ".join(r) + "}"
        out.append(f"  {op} {dst}, [{addr}+{q * step}];")
    for q in range(ilp):
        out += [f"  xor.b32 {acc}, {acc}, {x};" for x in regs[q]]
    return out


def loads_in_flight(region: Sequence[SassInstr], prefix: str = "LDG") -> int:
    """The most loads (opcode ``prefix``) issued one after another before an instruction reads
    a register one of them wrote: how many are in flight at once in the region (a loop body's
    trip). 0 when the region holds none."""
    best = run = 0
    pending: set[str] = set()
    for ins in region:
        if pending & set(ins.sources()):
            best, run, pending = max(best, run), 0, set()
        if ins.opcode == prefix:
            run += 1
            pending |= set(ins.dests())
    return max(best, run)


def grid_saturation(rates: dict[tuple[int, ...], float | None], tol: float = PEAK_TOL,
                    names: Sequence[str] = ()) -> dict:
    """The best of a sweep over configurations (tuples of parallelism, e.g. (loads per thread,
    warps per SM), whose product is what is in flight) and whether its rate had stopped rising.
    Saturated when a larger configuration (no dimension smaller and one larger, or any of a
    larger product) reaches within ``tol`` of the best (more parallelism brought nothing more),
    or a smaller one does (it had stopped rising before the best), or every larger one measured
    is slower (it stopped rising at the best: ``single_peak``, the figure
    resting on one configuration); not saturated where no larger configuration was measured and
    none with less in flight is within ``tol`` (the rate still rises at the largest), with the
    reason. ``names``: the dimensions' names in the evidence."""
    ok = {k: float(v) for k, v in rates.items() if v is not None and v == v and v > 0}
    if not ok:
        return {"best": None, "at": None, "saturated": False, "why": "no configuration gave a rate"}
    at = max(ok, key=lambda k: ok[k])
    best = ok[at]
    label = (lambda k: ", ".join(f"{n}={x}" for n, x in zip(names, k, strict=True))) if names else str

    def dominates(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
        return a != b and all(x >= y for x, y in zip(a, b, strict=True))

    larger = [k for k in ok if dominates(k, at) or math.prod(k) > math.prod(at)]
    smaller = [k for k in ok if dominates(at, k) or math.prod(k) < math.prod(at)]
    up = [k for k in larger if ok[k] >= (1 - tol) * best]
    down = [k for k in smaller if ok[k] >= (1 - tol) * best]
    out = {"best": best, "at": list(at), "saturated": bool(up or down or larger), "configurations": len(rates),
           "rated": len(ok)}
    if up:
        k = max(up, key=lambda k: math.prod(k))
        out["evidence"] = f"{label(k)} (more in flight than the best, {label(at)}) reaches {ok[k] / best:.1%} of it"
    elif down:
        k = min(down, key=lambda k: math.prod(k))
        out["evidence"] = (f"the rate had stopped rising before the best: {label(k)} (less in flight) reaches "
                           f"{ok[k] / best:.1%} of it")
    elif larger:
        k = max(larger, key=lambda k: ok[k])
        out["single_peak"] = True
        out["evidence"] = (f"every larger configuration is slower than the best, {label(at)} (at most {ok[k] / best:.1%}"
                           f" of it, {label(k)}): the rate stopped rising there; no other configuration is within "
                           f"{tol:.0%}, so the figure rests on one configuration")
    else:
        out["why"] = f"the rate still rises at the largest configuration measured ({label(at)})"
    return out
