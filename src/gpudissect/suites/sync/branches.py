"""Branch cost (issue 22): a conditional ``bra`` in a loop, taken, not taken and divergent (half
the warp taken), under a predicate ptxas can prove warp-uniform (a kernel parameter: plain
``BRA``) and under a per-thread one (the lane id: ``BSSY``/``BRA``/``BSYNC``), one warp; cycles per
loop trip from the slope between two trip counts (the loop's entry and exit cancel).

Each trip computes the predicate (``v = (i & z) + src``, ``p = v < t``; ``z`` = 0 at run time, so
ptxas can neither hoist nor unswitch it), branches over a block of ``BLOCK`` dependent ALU pairs
when ``p`` holds, and closes the loop. Two baselines without the conditional branch: the loop
alone (``loop``) and the loop with the block always run (``block``). The branch's cost is read
against them: taken - loop (the block skipped), not taken - block, divergent - block (both
paths, one after the other). Each kernel's region must show a predicated BRA over the block
(ptxas turns a short branch into predicated instructions: then there is no branch to time).

Kernels ``branch_<kind>(u64 out, u32 t, u32 n, u32 z, u64 times)``: ``t`` picks the mode
(all lanes below it take the branch), ``n`` the trips.
"""

from __future__ import annotations

import numpy as np

from gpudissect.kernel.build import Built
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.sass import SassInstr
from gpudissect.kernel.timing import repeated
from gpudissect.store.db import Result
from gpudissect.suites.sync import analyse as an
from gpudissect.suites.sync.kernels import REPEAT, REPS, ROW, _entry

BLOCK = 8  # (xor, add) pairs in the block the branch skips: long enough that ptxas keeps a branch
TRIPS = (64, 256)  # loop trips at the two points of the slope
KINDS = {"uniform": "%z", "thread": "%lane"}  # predicate source: a parameter, or the lane id
BASELINES = ("loop", "block")
# mode -> t (lanes with v < t take the branch); divergent: half the warp (per-thread only)
MODES = {"taken": 0xFFFFFFFF, "not-taken": 0, "divergent": 16}
CLS = "sync"


def name(kind: str) -> str:
    return f"branch_{kind}"


def kernel_names() -> list[str]:
    return [name(k) for k in (*KINDS, *BASELINES)]


def branch_kernel(header: str, kind: str) -> Kernel:
    block = ["  xor.b32 %x, %x, %t;", "  add.u32 %x, %x, %z;"] * BLOCK
    if kind in KINDS:
        cond = ["  and.b32 %v, %i, %z;", f"  add.u32 %v, %v, {KINDS[kind]};", "  setp.lt.u32 %p, %v, %t;",
                "  @%p bra $Lbr_skip;", *block, "$Lbr_skip:"]
    else:
        cond = block if kind == "block" else []
    body = ["  mov.u32 %i, 0;", "$Lbr_loop:", "  .pragma \"nounroll\";", *cond, "  add.u32 %i, %i, 1;",
            "  setp.lt.u32 %q, %i, %n;", "  @%q bra $Lbr_loop;", "  add.u32 %x, %x, %i;"]  # the trips kept live
    lines = [
        "  .reg .b64 %tp, %bp, %t0, %t1, %toff;",
        "  .reg .b32 %ti, %lane, %rep, %sm, %x, %t, %n, %z, %i, %v;",
        "  .reg .pred %loop, %p, %q, %pm;",
        "  ld.param.u64 %bp, [p_out];",
        "  ld.param.u32 %t, [p_t];",
        "  ld.param.u32 %n, [p_n];",
        "  ld.param.u32 %z, [p_z];",
        "  ld.param.u64 %tp, [p_times];",
        "  cvta.to.global.u64 %bp, %bp;",
        "  cvta.to.global.u64 %tp, %tp;",
        "  mov.u32 %ti, %tid.x;",
        "  mov.u32 %lane, %laneid;",
        "  shr.u32 %ti, %ti, 5;",
        f"  mul.wide.u32 %toff, %ti, {8 * ROW};",
        "  add.u64 %tp, %tp, %toff;",
        "  mov.u32 %x, %lane;",
        *repeated(body, str(REPS), REPEAT, REPS),
        "  setp.eq.u32 %pm, %x, 0x9E3779B9;",  # the result kept live, stored only if impossible
        "  @%pm st.global.u32 [%bp], %x;",
        "  ret;",
    ]
    e = _entry(name(kind), ".param .u64 p_out, .param .u32 p_t, .param .u32 p_n, .param .u32 p_z, "
                           ".param .u64 p_times", lines, False)
    return Kernel(name(kind), header, e, variant=f"branch:{kind}", measure="branch", length=TRIPS[0], warps=0,
                  reps=REPS, meta={"kind": kind})


def branch_sass(region: list[SassInstr]) -> list[str]:
    """The branch-related SASS of a region (BRA, BSSY, BSYNC, ... with their modifiers), in order;
    a predicated BRA is written with its guard (``@!P0 BRA``)."""
    out = []
    for ins in region:
        if ins.opcode in ("BRA", "BSSY", "BSYNC", "WARPSYNC", "BREAK", "BMOV"):
            out.append(f"{ins.predicate + ' ' if ins.predicate else ''}{ins.full}")
    return out


def sass_problems(kind: str, region: list[SassInstr]) -> list[str]:
    """Why a kernel's region does not time what it should: the kinds need a predicated BRA
    besides the loop's back edge (two predicated BRAs); the baselines one (the back edge)."""
    guarded = [i for i in region if i.opcode == "BRA" and i.predicate]
    want = 2 if kind in KINDS else 1
    if len(guarded) < want:
        return [f"sass: {name(kind)}: {len(guarded)} predicated BRA in the region, {want} expected "
                "(ptxas predicated the block instead of branching over it)"]
    return []


def run(dev, bs: dict[str, Built], times, launches: int) -> tuple[list[Result], dict]:
    """Every (kind, mode) and the baselines: cycles per trip (one warp), median of ``launches``.
    ``times(b, args)``: the launch of one warp returning its rows of timestamps."""
    out: list[Result] = []
    per_trip: dict[str, float | None] = {}
    points = [(k, m) for k in KINDS for m in MODES if not (k == "uniform" and m == "divergent")]
    points += [(b, None) for b in BASELINES]
    for kind, mode in points:
        b = bs[name(kind)]
        t = MODES.get(mode or "taken", 0)
        per = []
        for _ in range(launches):
            ds = [an.row_durations(times(b, [np.uint32(t), np.uint32(n), np.uint32(0)]), slice(0, 1), REPS)
                  for n in TRIPS]
            per.append(an.chain_slope(ds[0], ds[1], TRIPS))
        c = an.combine(per)
        key = f"{kind}:{mode}" if mode else kind
        per_trip[key] = c["value"]
        flags = sass_problems(kind, b.region) + ([c["flag"]] if c["flag"] else [])
        out.append(Result(f"branch:{key}", "branch", c["value"], "cycles/trip",
                          f"cycles per loop trip (the loop's own work, the predicate's three integer instructions, "
                          f"the branch and whatever of the block runs), slope between {TRIPS[0]} and {TRIPS[1]} trips, "
                          f"one warp, median of {launches} launches",
                          params={"kind": kind, "mode": mode, "t": t, "trips": list(TRIPS), "block_pairs": BLOCK,
                                  "branch_sass": branch_sass(b.region)},
                          samples={"per_launch": c["per_launch"]}, flags=flags, cls=CLS,
                          ptx_hash=b.ptx_hash, sass_hash=b.sass_hash))
    return out, per_trip


def costs(per_trip: dict[str, float | None]) -> dict[str, float | None]:
    """The branch's cycles per trip against its baseline: taken - loop (the block skipped), not
    taken and divergent - block (the block run); None where a term is missing."""
    base = {"taken": "loop", "not-taken": "block", "divergent": "block"}
    out: dict[str, float | None] = {}
    for key, v in per_trip.items():
        if ":" not in key:
            continue
        ref = per_trip.get(base[key.split(":")[1]])
        out[key] = None if v is None or ref is None else round(v - ref, 3)
    return out


def conclusions(rows: list[dict]) -> list[str]:
    """The sync summary's line on branches (``rows``: stored results of measure ``branch``)."""
    per = {r["variant"].removeprefix("branch:"): r["value"] for r in rows if r["measure"] == "branch"}
    if not per:
        return []
    sass = {r["variant"].removeprefix("branch:"): (r["params"] or {}).get("branch_sass") or [] for r in rows
            if r["measure"] == "branch"}
    bad = sorted({f.split(":")[0] for r in rows if r["measure"] == "branch" for f in r["flags"] or []})
    cs = costs(per)

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3g}"

    parts = [f"{k} {num(per[k])} ({'+' if (cs.get(k) or 0) >= 0 else ''}{num(cs.get(k))})" for k in per if ":" in k]
    kinds = "; ".join(f"{k}: {' '.join(dict.fromkeys(sass.get(f'{k}:taken') or []))}" for k in KINDS)
    return [f"branch in a loop, cycles per trip (against the loop alone {num(per.get('loop'))}, the loop with the "
            f"block {num(per.get('block'))}): " + ", ".join(parts) + f"; SASS: {kinds}"
            + (f" [flags: {', '.join(bad)}]" if bad else "")]
