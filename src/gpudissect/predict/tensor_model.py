"""The tensor-core model (seed 001, section 5, for Hopper): the cycles of an mma.sync loop and of
a wgmma tile loop from the tensor suite's per-SASS timings.

Per tensor SASS opcode (with its modifiers; wgmma also by where A comes from: shared memory
through a descriptor, or registers) the tensor suite measured

* ``latency``: one warp (warpgroup), one accumulator: the cycles from one instruction to the
  next that uses its result (mma.sync: a dependent chain; wgmma: each one committed and waited
  for, ``wait_group 0``);
* ``interval``: one issuer, back to back, the cycles between consecutive tensor SASS (mma.sync:
  the ``issue_interval`` of one warp over independent accumulators, else the per-SASS interval of
  an instruction that ptxas splits into several of them, ``per_sass``; wgmma: one warpgroup,
  one accumulator, no waits: ``1 / throughput``, what a chained K loop sees);
* ``rate``: the SM's peak (``throughput_peak``, instructions per cycle per SM), the unit every
  issuer of the SM shares: per SM sub-partition for mma.sync (``schedulers / rate`` cycles per
  instruction), per SM for wgmma (``1 / rate``: a warpgroup's four warps issue one wgmma).

The model is the scheduler simulation of :mod:`sched` with the tensor SASS taken from these
timings: an mma.sync waits for its accumulator's previous writer (issue + latency) beside the
stall counts, and takes its unit for its interval; a wgmma is asynchronous: it enters the SM's
tensor unit when the unit is free (its interval after the previous one), the warp goes on, and
the commit group it closes (``gsb0``) is done ``latency`` cycles after it entered;
``WARPGROUP.DEPBAR.LE gsb0, N`` holds the warp until at most N of its groups are outstanding.
A wgmma loop is simulated per warpgroup: one of its warps on each scheduler, so the warps of one
scheduler are the SM's warpgroups.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from gpudissect.kernel.sass import SassInstr

TENSOR_OP = re.compile(r"^(HMMA|IMMA|DMMA|BMMA|QMMA|OMMA|HGMMA|IGMMA|QGMMA|BGMMA)$")
WGMMA_OP = re.compile(r"^(HGMMA|IGMMA|QGMMA|BGMMA)$")
DEPBAR = "WARPGROUP.DEPBAR"
GROUP_END = "gsb0"  # the operand that closes a commit group


@dataclass(frozen=True)
class TensorTiming:
    """What the tensor tables say about one tensor SASS (``a_from``: wgmma's A operand)."""

    full: str
    a_from: str | None
    latency: float | None
    interval: float | None
    rate: float | None  # instructions per cycle per SM
    sources: tuple[str, ...] = ()

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(k for k in ("latency", "interval", "rate") if getattr(self, k) is None)


def is_tensor(i: SassInstr) -> bool:
    return bool(TENSOR_OP.match(i.opcode))


def a_from(i: SassInstr) -> str | None:
    """Where a wgmma's A comes from: its first source a descriptor (shared) or registers."""
    if not WGMMA_OP.match(i.opcode) or len(i.operands) < 2:
        return None
    return "shared" if i.operands[1].startswith("gdesc") else "registers"


def _single_sass(rec: dict) -> str | None:
    sass = rec.get("sass") or []
    return sass[0] if len(sass) == 1 and "*" not in sass[0] else None


def tensor_timings(records, trusted) -> dict[tuple[str, str | None], TensorTiming]:
    """Per (SASS opcode, A source) timings from the tensor suite's records; ``trusted``: the
    tables' check that a record's value is a clean measurement."""
    lat: dict[tuple, list] = {}
    ival: dict[tuple, list] = {}
    rate: dict[tuple, list] = {}
    for r in records:
        if r.get("value") is None or not trusted(r):
            continue
        p = r.get("params") or {}
        m = r.get("measure")
        if m == "per_sass":  # an instruction ptxas splits: the interval between its SASS
            counts = p.get("tensor_sass") or {}
            if len(counts) == 1:
                ival.setdefault((next(iter(counts)), None), []).append((float(r["value"]), f"per_sass {r['variant']}"))
            continue
        op = _single_sass(r)
        if op is None:
            continue
        key = (op, p.get("a_from") if WGMMA_OP.match(op.split(".")[0]) else None)
        what = f"{m} {r['variant']}" + (f" ({p['a_from']})" if key[1] else "")
        if m == "latency":
            lat.setdefault(key, []).append((float(r["value"]), what))
        elif m == "issue_interval":
            ival.setdefault(key, []).append((float(r["value"]), what))
        elif m == "throughput" and key[1] and p.get("issuers") == 1 and p.get("accs") == 1:
            ival.setdefault(key, []).append((1.0 / float(r["value"]), f"1/throughput {r['variant']} "
                                             f"({p['a_from']}, one warpgroup, one accumulator)"))
        elif m == "throughput_peak":
            rate.setdefault(key, []).append((float(r["value"]), what))
    out = {}
    for key in set(lat) | set(ival) | set(rate):
        vals = {k: t.get(key) for k, t in (("latency", lat), ("interval", ival), ("rate", rate))}
        # mma.sync's per-SASS interval is recorded without an A source: it serves every source
        vals["interval"] = vals["interval"] or ival.get((key[0], None))
        med = {k: statistics.median(v for v, _ in vs) if vs else None for k, vs in vals.items()}
        src = tuple(f"{k}: {', '.join(sorted({w for _, w in vs}))}" for k, vs in vals.items() if vs)
        out[key] = TensorTiming(key[0], key[1], med["latency"], med["interval"], med["rate"], src)
    return out


def lookup(table: dict, i: SassInstr) -> TensorTiming | None:
    """The timing of tensor SASS ``i``: its opcode and A source, else its opcode with any."""
    t = table.get((i.full, a_from(i)))
    if t is not None:
        return t
    same = [v for (op, _), v in sorted(table.items(), key=lambda kv: str(kv[0])) if op == i.full]
    return same[0] if same else None


@dataclass
class TensorPlan:
    """What the simulator needs of a loop's tensor SASS (body indices)."""

    latency: dict[int, float] = field(default_factory=dict)
    unit_interval: dict[int, float] = field(default_factory=dict)  # cycles the shared unit is taken
    asynchronous: set[int] = field(default_factory=set)  # wgmma
    closes_group: set[int] = field(default_factory=set)
    depbar: dict[int, int] = field(default_factory=dict)  # index -> groups allowed outstanding
    missing: dict[str, tuple[str, ...]] = field(default_factory=dict)  # opcode -> what the tables lack
    unit_name: dict[int, str] = field(default_factory=dict)  # a unit other than the tensor core's (memory)
    # cycles an instruction holds its scheduler beyond its issue slot (register-bank conflicts: banks.py)
    operand_cycles: dict[int, float] = field(default_factory=dict)
    # a load that walks its data with the loop (memory.py's ``walks``): (its address register, its
    # offset, the register's step per trip, the nearer levels' (fill bytes, hit latency), nearest
    # first); its ``latency`` is then its level's, paid only where no nearer level holds the data
    walks: dict[int, tuple[str, int, int, tuple[tuple[int, float], ...]]] = field(default_factory=dict)
    walk_shared: set[int] = field(default_factory=set)  # walking broadcasts: their block shares the sectors
    # block barriers (BAR.SYNC): their indices and the measured cycles per barrier of a
    # back-to-back loop at the block's size (``Tables.barrier_cycles``)
    barriers: set[int] = field(default_factory=set)
    barrier_cycles: float = 0.0
    block_group: int = 0  # the simulated warps of one block (consecutive; 0: all of them)
    # forward branches the common path takes (the guard over a left-out slow path): their redirect
    # costs what the loop's taken backward branch does
    taken: set[int] = field(default_factory=set)

    @property
    def wgmma(self) -> bool:
        return bool(self.asynchronous)


def plan_of(body: list[SassInstr], table: dict, schedulers: int) -> TensorPlan | None:
    """The tensor plan of a loop body, or None when it holds no tensor SASS."""
    if not any(is_tensor(i) for i in body):
        return None
    plan = TensorPlan()
    for j, i in enumerate(body):
        if i.full.startswith(DEPBAR):
            n = i.operands[-1] if i.operands else "0x0"
            plan.depbar[j] = int(n, 16) if n.startswith("0x") else int(n)
            continue
        if not is_tensor(i):
            continue
        t = lookup(table, i)
        if t is None or t.missing:
            plan.missing[i.full] = t.missing if t else ("latency", "interval", "rate")
        wg = bool(WGMMA_OP.match(i.opcode))
        if wg:
            plan.asynchronous.add(j)
            if GROUP_END in i.operands:
                plan.closes_group.add(j)
        if t is None:
            continue
        if t.latency is not None:
            plan.latency[j] = t.latency
        # the unit: per SM for wgmma (one per warpgroup), per sub-partition for mma.sync
        per = 1.0 if wg else float(schedulers)
        unit = per / t.rate if t.rate else None
        plan.unit_interval[j] = max(unit or 0.0, t.interval or 0.0) if wg else (unit or t.interval or 0.0)
    return plan
