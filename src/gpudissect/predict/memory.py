"""The measured memory hierarchy in the predictor (issue 32): where a loop's memory instructions
get their data, how long a load takes from there and how many bytes per clock the level gives.

:class:`Hierarchy` (:func:`hierarchy_from`, :func:`load_hierarchy`) reads, per level named in the
architecture's ``predict.toml`` (``[memory_hierarchy.<level>]``: L1, L2, DRAM, shared memory,
constant), the memory suite's load-to-use latency (a pointer chase, or the staircase's plateau
where no chase isolates the level), the capacity the staircase found (L1 per SM, L2 for the
chip) and the bandwidths the suite measured (L1 and shared memory per SM in bytes per clock, L2
and DRAM for the chip in GB/s with the SM clock they were measured at). A figure the tables lack
is listed in ``missing``; nothing stands in for it.

:func:`memory_plan` gives, per memory instruction of a loop body, its space, the bytes one
warp-instruction moves, the level it reaches, and for the scheduler simulation
(:func:`gpudissect.predict.sched._run`) its latency at that level and the interval it takes a
level's unit. :func:`merged_plan` joins it with the tensor plan into what ``_run`` takes;
:func:`gpudissect.predict.bounds.pressures` adds a ``bandwidth <level>`` bound from it.

The model's assumptions:

* every lane of a warp-instruction moves its own element: width x 32 bytes reach the level (an
  address in uniform registers only is the same for every lane: one 32-byte sector). Where the
  caller says how the lanes spread the access (``lines``, from ``lanes.py``: lanes a row apart),
  the L1 takes its lines one at a time at its measured read rate (the warp waits at issue), and
  where every lane has a line of its own (a row each, ``misses``) its next elements are L1 hits:
  one access in fill / width waits the level's latency, ``fill`` the bytes a miss brings in
  (the memory suite's measured fill granularity, a sector of the line). Where every lane of
  a warp reads one address (a broadcast), one element of it reaches the level and its next
  ones are L1 hits the same way. Where such a load's address register moves by a constant per
  trip (``walks``), the simulation follows its sectors instead of that average: the trips that
  open a new L1 sector pay the level's latency (a DRAM load whose L2 fill, the larger one, is
  already there: the L2's), the others the L1's, and a load whose sector is still being
  filled waits for that fill. An access whose spread is not known is taken as coalesced; a
  scattered one (a gather) is then predicted too fast;
* the level is one for the whole loop: shared memory and constants by their space; global and
  texture by the caller's ``level``, else its ``footprint`` (the bytes the loop touches over
  the whole GPU) against the measured L2 capacity (within it: L2; else DRAM; an L1 hit needs
  reuse inside the SM, which a footprint does not show: only ``level`` l1 says so); without
  either, the L1 hit the tables assumed before. Local memory is taken
  as an L1 hit (spills are small). No mix of hits and misses, no reuse between levels;
* the L1 writes through: a global store, and an atomic (done at the L2), reaches the L2 at
  least; a store's bytes count against the level's write bandwidth, a load's against its
  read bandwidth (DRAM copy traffic is not modelled apart from these two);
* a chip-wide bandwidth (L2, DRAM) is shared evenly by the ``sms`` SMs running, and each SM's
  share evenly by its schedulers; the simulation (one scheduler) gives each memory
  instruction ``bytes / (share of the scheduler)`` cycles of its level's unit. The rate is
  converted to bytes per SM clock at the clock it was measured at (the prediction's cycles are
  that clock's);
* levels of the chip (L2, DRAM) are asynchronous units for an instruction with a result: the
  warp does not wait for the unit, its load's result does (released at the unit's start + the
  level's latency), so many loads in flight overlap their latency and queue for the bandwidth.
  Levels in the SM (L1, shared memory), and a store or reduction (no result: the memory
  system's back-pressure is all that holds it), make the warp wait at issue until the unit is
  free, as for a pipe. A unit's interval is the larger of the bandwidth's and the tables' pipe
  interval of the opcode. In the SM the unit is the opcode's pipe where the tables give one
  (they measured LDS and STS as separate pipes; the SM's shared bandwidth is then a bound of
  :func:`bandwidth_pressures`, not a unit of the simulation); a chip level is one unit that
  all its accesses share;
* a level's latency is its unloaded pointer chase; the extra latency of a loaded memory system
  beyond the queueing of the bandwidth unit is not modelled.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpudissect.kernel.sass import SassInstr
from gpudissect.predict import PredictError
from gpudissect.predict.lanes import (
    GLOBAL_OPS,
    Lanes,
    Walk,
    address,
    broadcasts_of,
    lines_of,
    misses_of,
    walks_of,
)
from gpudissect.predict.tables import Tables
from gpudissect.predict.tensor_model import TensorPlan

LEVELS = ("L1", "L2", "DRAM")  # where global data can be, nearest first
HINTS = {"l1": "L1", "l2": "L2", "dram": "DRAM"}  # the caller's ``level`` -> the level's name
LANES = 32
SECTOR = 32  # bytes: what a warp-instruction with one address for every lane moves

# base SASS opcode -> its space
SPACE = {
    **dict.fromkeys(GLOBAL_OPS, "global"),
    "LDS": "shared", "STS": "shared", "LDSM": "shared", "ATOMS": "shared",
    "LDL": "local", "STL": "local",
    "LDC": "constant", "ULDC": "constant",
    "TLD": "texture", "TEX": "texture", "TLD4": "texture", "TLDS": "texture",
}
STORES = {"STG", "ST", "STS", "STL"}
ATOMICS = {"ATOM", "ATOMG", "RED", "REDG", "ATOMS"}
WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}  # bytes per lane by modifier
LDSM_MATRIX = 128  # bytes of one 8x8 matrix of 16-bit elements (ldmatrix .x1)
WRITE_THROUGH = "L2"  # the nearest level a global store or atomic reaches
REG = re.compile(r"(?<![A-Z])R\d+")  # a per-lane register (not UR, not RZ)


@dataclass(frozen=True)
class Bandwidth:
    """One measured bandwidth: ``per_sm`` bytes per SM clock per SM (``scope`` "sm"), or the
    chip's ``gb_s`` at ``sm_mhz`` (``scope`` "chip")."""

    scope: str
    source: str
    per_sm: float | None = None
    gb_s: float | None = None
    sm_mhz: float | None = None

    @property
    def chip_bytes_per_clock(self) -> float | None:
        """The chip's bytes per SM clock at the clock of the measurement (chip scope only)."""
        if self.gb_s is None or not self.sm_mhz:
            return None
        return self.gb_s * 1e3 / self.sm_mhz

    def share(self, sms: int) -> float:
        """Bytes per clock one SM gets when ``sms`` SMs run (a chip rate shared evenly)."""
        if self.scope == "sm":
            return float(self.per_sm)  # type: ignore[arg-type]
        return self.chip_bytes_per_clock / max(1, sms)  # type: ignore[operator]


@dataclass(frozen=True)
class Level:
    name: str
    latency: float | None = None
    latency_source: str = ""
    capacity: float | None = None  # bytes, per ``capacity_per``
    capacity_per: str = ""
    capacity_source: str = ""
    read: Bandwidth | None = None
    write: Bandwidth | None = None
    spaces: tuple[str, ...] = ()

    @property
    def in_sm(self) -> bool:
        """The level is in the SM (its bandwidth is per SM): the warp waits for it at issue."""
        bw = self.read or self.write
        return bw is not None and bw.scope == "sm"


@dataclass
class Hierarchy:
    source: str
    sms: int  # the SMs of the GPU the tables were measured on (0: not named)
    levels: dict[str, Level] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # "<level> <figure>: why"
    line: int | None = None  # the L1's line (tag) bytes, from the memory suite's capacity steps
    # per level (L1, L2): the bytes one miss brings in (its sector), from the suite's cold strides
    fills: dict[str, int] = field(default_factory=dict)

    def level_of_space(self, space: str) -> str | None:
        return next((n for n, lv in self.levels.items() if space in lv.spaces), None)


# ------------------------------------------------------------------ reading the tables
def _dig(summary: dict, path: str):
    v = summary
    for k in path.split("."):
        if not isinstance(v, dict) or k not in v:
            return None
        v = v[k]
    return v


def _memory_summary(rs, records: list[dict]) -> dict:
    """The memory suite's summary as stored, else computed from its records (the same code)."""
    summary = (rs.docs.get("memory") or {}).get("summary") or {}
    if summary.get("sizes") is not None or not records:
        return summary
    from gpudissect.suites import suite_module

    return suite_module("memory", "analyse").summarize(records)


def _bandwidth(rec: dict | None, scope: str) -> Bandwidth | None:
    if rec is None:
        return None
    p = rec.get("params") or {}
    src = f"memory {rec['variant']}"
    if scope == "sm":
        v = p.get("bytes_per_cycle_per_sm")
        return Bandwidth("sm", src, per_sm=float(v)) if v else None
    if rec.get("value") and p.get("sm_mhz_kernel"):
        return Bandwidth("chip", src, gb_s=float(rec["value"]), sm_mhz=float(p["sm_mhz_kernel"]))
    return None


def _level(name: str, spec: dict, recs: dict[tuple[str, str], dict], summary: dict,
           missing: list[str]) -> Level:
    lat, lat_src = None, ""
    if spec.get("latency"):
        r = recs.get((spec["latency"], "latency"))
        lat, lat_src = (float(r["value"]), f"memory {spec['latency']}") if r else (None, "")
        if r is None:
            missing.append(f"{name} latency: no record {spec['latency']} (measure latency)")
    elif spec.get("latency_summary"):
        v = _dig(summary, spec["latency_summary"])
        lat, lat_src = (float(v), f"memory summary {spec['latency_summary']} (staircase)") if v else (None, "")
        if v is None:
            missing.append(f"{name} latency: the memory summary has no {spec['latency_summary']}")
    else:
        missing.append(f"{name} latency: predict.toml names no record for it")
    cap = _dig(summary, spec["capacity"]) if spec.get("capacity") else None
    if spec.get("capacity") and cap is None:
        missing.append(f"{name} capacity: the memory summary has no {spec['capacity']} (staircase)")
    scope = spec.get("bandwidth_per", "chip")
    bws = {}
    for d in ("read", "write"):
        if spec.get(d):
            bws[d] = _bandwidth(recs.get((spec[d], "bandwidth")), scope)
            if bws[d] is None:
                missing.append(f"{name} {d} bandwidth: no usable record {spec[d]} (measure bandwidth)")
    if not spec.get("read") and not spec.get("write"):
        missing.append(f"{name} bandwidth: not measured (predict.toml names no record)")
    elif not spec.get("write"):
        missing.append(f"{name} write bandwidth: not measured (predict.toml names no record)")
    return Level(name, lat, lat_src, float(cap) if cap is not None else None, spec.get("capacity_per", ""),
                 f"memory summary {spec['capacity']}" if cap is not None else "",
                 bws.get("read"), bws.get("write"), tuple(spec.get("spaces") or ()))


def hierarchy_from(rs, spec: dict | None = None) -> Hierarchy:
    """The hierarchy of a loaded result set; ``spec``: the ``memory_hierarchy`` table (default:
    the architecture's ``predict.toml``)."""
    prov = rs.provenance()
    h = Hierarchy(str(rs.source), int(prov.get("sm_count") or 0))
    if spec is None:
        from gpudissect.arch.target import TargetError, arch_table

        try:
            spec = arch_table(prov.get("arch") or "", "predict").get("memory_hierarchy") or {}
        except (TargetError, ValueError) as e:
            h.missing.append(f"all levels: {e}")
            return h
    records = [r for r in rs.records("memory") if r.get("value") is not None]
    if not records:
        h.missing.append("all levels: the tables hold no memory suite results")
    recs = {(r["variant"], r.get("measure")): r for r in records if not r.get("flags")}
    for r in records:  # a flagged record only where no clean one has the name
        recs.setdefault((r["variant"], r.get("measure")), r)
    summary = _memory_summary(rs, records)
    for name, lv_spec in spec.items():
        h.levels[name] = _level(name, lv_spec, recs, summary, h.missing)
    line = _dig(summary, LINE_SUMMARY)
    h.line = int(line) if line else None
    if h.line is None:
        h.missing.append(f"L1 line: the memory summary has no {LINE_SUMMARY} (an uncoalesced access is not charged)")
    for name in FILLED:
        fill = _dig(summary, FILL_SUMMARY.format(name))
        if fill:
            h.fills[name] = int(fill)
        else:
            h.missing.append(f"{name} fill: the memory summary has no {FILL_SUMMARY.format(name)} "
                             "(a miss is taken to bring in a line; no walk is followed through it)")
    return h


def load_hierarchy(spec: Path | str) -> Hierarchy:
    from gpudissect.report.read.results import LoadError, load_result_set

    try:
        return hierarchy_from(load_result_set(spec))
    except (LoadError, OSError) as e:
        raise PredictError(f"tables {spec}: {e}") from None


# ------------------------------------------------------------------ one instruction
L1_LINES = "L1 lines"  # the unit, and the bound, of accesses the L1 takes a line at a time
LINE_SUMMARY = "cache_lines.L1.bytes"  # where the memory suite's summary keeps the L1's line size
FILL_SUMMARY = "fill_granularity.{}.bytes"  # ... and the bytes one miss of a level brings in (a sector)
FILLED = ("L1", "L2")  # the levels whose fill granularity the suite measures


@dataclass(frozen=True)
class Access:
    """What one memory instruction of a body moves and where (``level`` None: unknown)."""

    index: int
    full: str
    space: str
    bytes: int
    store: bool
    level: str | None
    why: str


def is_memory(i: SassInstr) -> bool:
    return i.opcode in SPACE


def width(i: SassInstr) -> int:
    """Bytes per lane (LDSM: bytes per warp / 32)."""
    if i.opcode == "LDSM":
        n = next((int(m) for m in reversed(i.modifiers) if m.isdigit()), 1)
        return LDSM_MATRIX * n // LANES
    return next((WIDTH[m] for m in i.modifiers if m in WIDTH), 4)


def uniform_address(i: SassInstr) -> bool:
    """Every lane has the same address: no per-lane register in it (uniform registers or
    immediates only)."""
    addr = address(i)
    return addr is not None and not REG.search(addr)


def bytes_moved(i: SassInstr) -> int:
    """Bytes one warp-instruction moves, coalesced: width x 32 lanes, one sector if uniform."""
    return SECTOR if uniform_address(i) else width(i) * LANES


def global_level(h: Hierarchy, sms: int, footprint: float | None, level: str | None) -> tuple[str | None, str]:
    """(the level global data is in, why) from the caller's ``level`` or ``footprint``."""
    if level is not None:
        name = HINTS.get(level.lower())
        if name is None:
            raise PredictError(f"level {level!r}: expected one of {', '.join(HINTS)}")
        return name, f"level {level} given"
    if footprint is None:
        return "L1", "no footprint or level given: the L1 hit the tables assume"
    # a footprint within the SMs' L1s together is no evidence of L1 hits: the L1 holds what
    # this SM itself read before in this kernel (it starts each launch empty), which the
    # footprint cannot tell; only the L2 and the DRAM are placed by it (``level`` l1 says reuse)
    for name in LEVELS[1:-1]:
        lv = h.levels.get(name)
        if lv is None or lv.capacity is None:
            return None, f"footprint {footprint:.0f} B: {name} capacity not measured"
        cap = lv.capacity * (sms if lv.capacity_per == "sm" else 1)
        if footprint <= cap:
            return name, f"footprint {footprint:.0f} B within {name} ({cap:.0f} B: {lv.capacity_source})"
    return LEVELS[-1], f"footprint {footprint:.0f} B beyond the L2"


def access_of(j: int, i: SassInstr, h: Hierarchy, glob: tuple[str | None, str]) -> Access:
    space = SPACE[i.opcode]
    store = i.opcode in STORES or (i.opcode in ATOMICS and not i.n_dests())
    level, why = glob
    if space in ("shared", "constant"):
        level, why = h.level_of_space(space), f"{space} space"
    elif space == "local":
        level, why = "L1", "local memory: taken as an L1 hit"
    if space == "global" and (store or i.opcode in ATOMICS) and level == "L1":
        level, why = WRITE_THROUGH, f"{why}; a global store or atomic reaches the {WRITE_THROUGH}"
    return Access(j, i.full, space, bytes_moved(i), store, level, why)


# ------------------------------------------------------------------ the plan
@dataclass
class MemoryPlan:
    """Per body index of a memory instruction: what :func:`sched._run` takes (``latency``,
    ``unit_interval``, ``unit``, ``asynchronous``), and the bandwidth bound's own interval."""

    accesses: dict[int, Access] = field(default_factory=dict)
    latency: dict[int, float] = field(default_factory=dict)
    unit_interval: dict[int, float] = field(default_factory=dict)
    unit: dict[int, str] = field(default_factory=dict)
    asynchronous: set[int] = field(default_factory=set)
    bandwidth_interval: dict[int, float] = field(default_factory=dict)  # bytes / scheduler's share
    share: dict[tuple[str, str], float] = field(default_factory=dict)  # (level, read|write) -> B/clk/SM
    missing: list[str] = field(default_factory=list)
    lines: dict[int, int] = field(default_factory=dict)  # an uncoalesced access's L1 lines (its unit)
    l1_interval: dict[int, float] = field(default_factory=dict)  # its lines / the L1 rate's share
    miss: dict[int, float] = field(default_factory=dict)  # a reused load's share of accesses that miss
    walks: dict[int, tuple] = field(default_factory=dict)  # a walking load's sectors (TensorPlan.walks)
    walk_latency: dict[int, float] = field(default_factory=dict)  # its latency where it misses them all
    walk_shared: set[int] = field(default_factory=set)  # walking broadcasts (their block shares the sectors)

    def level_intervals(self) -> dict[str, float]:
        """Per level: the cycles of one scheduler's share its instructions of one warp-iteration
        take (the sum of their bandwidth intervals)."""
        out: dict[str, float] = {}
        for j, v in self.bandwidth_interval.items():
            lv = self.accesses[j].level
            out[lv] = out.get(lv, 0.0) + v  # type: ignore[index]
        for v in self.l1_interval.values():  # the L1 a line at a time: a limit of its own
            out[L1_LINES] = out.get(L1_LINES, 0.0) + v
        return out


def _pipe(tables: Tables, i: SassInstr) -> tuple[str | None, float]:
    """(the opcode's pipe in the tables, or None, its interval per scheduler, or 0)."""
    e = tables.entry(i.full, bool(i.n_dests()))
    return (e.unit, tables.schedulers / e.rate) if e.rate and e.unit != "issue" else (None, 0.0)


def memory_plan(body: list[SassInstr], tables: Tables, hierarchy: Hierarchy, warps_per_sm: int, sms: int,
                footprint: float | None = None, level: str | None = None,
                lines: dict[int, int] | None = None, misses: dict[int, float] | None = None,
                broadcasts: frozenset[int] = frozenset(), walks: dict[int, Walk] | None = None) -> MemoryPlan:
    """The memory plan of a loop body run by ``warps_per_sm`` warps on each of ``sms`` SMs;
    ``footprint`` (bytes the loop touches over the GPU) or ``level`` ("l1", "l2", "dram") says
    where its global data is (see the module's assumptions); ``lines``: per instruction offset,
    the distinct L1 lines one warp-instruction touches (``lanes.py``; none given: coalesced);
    ``misses``: per load offset, the share of its accesses whose line is not in the L1 yet;
    ``broadcasts``: offsets of loads whose lanes all read one address: one element of each
    reaches its level (the line it brings in serves the next line / width accesses);
    ``walks``: per load offset whose misses ``misses`` weights, how its address moves with the
    loop (``lanes.walks_of``): the simulation follows its sectors (:func:`_walk`)."""
    if warps_per_sm < 1 or sms < 1:
        raise PredictError(f"warps per SM and SMs must be at least 1 (got {warps_per_sm}, {sms})")
    plan = MemoryPlan(missing=list(hierarchy.missing))
    glob = global_level(hierarchy, sms, footprint, level)
    if glob[0] is None:
        plan.missing.append(glob[1])
    for j, i in enumerate(body):
        if not is_memory(i):
            continue
        a = access_of(j, i, hierarchy, glob)
        at_level = replace(a, bytes=min(a.bytes, width(i))) if i.offset in broadcasts else a
        plan.accesses[j] = at_level
        _plan_access(plan, at_level, i, tables, hierarchy, sms)
        _l1_lines(plan, a, (lines or {}).get(i.offset), tables, hierarchy, sms, warps_per_sm)
        _walk(plan, a, (walks or {}).get(i.offset) if (misses or {}).get(i.offset) is not None else None, hierarchy,
              i.offset in broadcasts)
        _l1_reuse(plan, a, (misses or {}).get(i.offset), hierarchy)
    return plan


def _walk(plan: MemoryPlan, a: Access, walk: Walk | None, h: Hierarchy, shared: bool = False) -> None:
    """A load beyond the L1 whose address walks with the loop (``walk``): the simulation keeps
    its full latency for the trips whose sector no nearer level holds yet, and the nearer
    level's latency (or the wait for the sector's fill in flight) for the others: the L1 by its
    fill granularity, and for a DRAM load the L2 by its own (a DRAM fill brings in more).
    ``shared``: a broadcast, whose sectors the warps of a block share (they read one address)."""
    lat = plan.latency.get(a.index)
    if walk is None or a.store or lat is None or a.level not in ("L2", "DRAM"):
        return
    near = ("L1",) if a.level == "L2" else ("L1", "L2")
    hits = tuple((h.fills[n], h.levels[n].latency) for n in near
                 if n in h.fills and n in h.levels and h.levels[n].latency is not None)
    if len(hits) != len(near):
        return
    plan.walks[a.index] = (walk.base, walk.offset, walk.step, hits)  # type: ignore[misc]
    plan.walk_latency[a.index] = lat
    if shared:
        plan.walk_shared.add(a.index)


def _l1_reuse(plan: MemoryPlan, a: Access, miss: float | None, h: Hierarchy) -> None:
    """A load whose lanes come back to lines the L1 holds (``miss``: the share of its accesses
    that reach the level, ``lanes.misses_of``) waits the L1's latency on the others."""
    l1 = h.levels.get("L1")
    lat = plan.latency.get(a.index)
    if miss is None or a.store or l1 is None or l1.latency is None or lat is None or lat <= l1.latency:
        return
    plan.latency[a.index] = l1.latency + (lat - l1.latency) * miss
    plan.miss[a.index] = miss


def _l1_lines(plan: MemoryPlan, a: Access, n: int | None, tables: Tables, h: Hierarchy, sms: int,
              warps_per_sm: int) -> None:
    """A global access whose lanes touch more lines than its bytes fill (lanes a row apart) goes
    through the SM's L1 one line at a time: ``n`` lines at the L1's measured read bandwidth per
    SM, shared by the schedulers that have warps (fewer warps than schedulers leave the others
    idle), and the warp waits for it at issue, as for a pipe. Where that is
    longer than its unit's interval it becomes the instruction's unit (its bytes at the level
    it reaches stay what they are: the lanes' next elements are in the lines it brought in)."""
    l1 = h.levels.get("L1")
    if a.space != "global" or not n or not h.line or l1 is None or l1.read is None or n * h.line <= a.bytes:
        return
    # the bound: the SM's rate over its schedulers, as every level's; the unit of the simulation:
    # shared only by the schedulers with warps
    plan.l1_interval[a.index] = n * h.line * tables.schedulers / l1.read.share(sms)
    ival = n * h.line * max(1, min(tables.schedulers, warps_per_sm)) / l1.read.share(sms)
    if ival > plan.unit_interval.get(a.index, 0.0):
        plan.unit[a.index] = L1_LINES
        plan.unit_interval[a.index] = ival
        plan.asynchronous.discard(a.index)
        plan.lines[a.index] = n


def _plan_access(plan: MemoryPlan, a: Access, i: SassInstr, tables: Tables, h: Hierarchy, sms: int) -> None:
    lv = h.levels.get(a.level) if a.level else None
    if lv is None:
        if a.level is not None:
            plan.missing.append(f"{a.full}: level {a.level} not in the hierarchy")
        return
    # local and texture hits keep the tables' own chase (latency/ld.local, latency/tex)
    if lv.latency is not None and not (a.space in ("local", "texture") and a.level == "L1"):
        plan.latency[a.index] = lv.latency
    d = "write" if a.store else "read"
    bw = lv.write if a.store else lv.read
    if bw is None:
        note = f"{a.level} {d} bandwidth: not measured ({a.full} has no bandwidth unit)"
        if note not in plan.missing:
            plan.missing.append(note)
        return
    share = bw.share(sms)
    plan.share[(a.level, d)] = share  # type: ignore[index]
    ival = a.bytes * tables.schedulers / share
    plan.bandwidth_interval[a.index] = ival
    pipe, pipe_ival = _pipe(tables, i)
    # in the SM the opcode's own pipe stays its unit (the tables measured LDS and STS apart),
    # now at least as long as its bytes take; a chip level is one unit for all its accesses
    plan.unit[a.index] = pipe if lv.in_sm and pipe else f"memory {a.level}"
    plan.unit_interval[a.index] = max(ival, pipe_ival)
    # the SM's data path, and an instruction without a result (nothing else would hold the warp
    # back: the memory system's back-pressure), wait at issue as for a pipe
    if not lv.in_sm and i.n_dests():
        plan.asynchronous.add(a.index)


def merged_plan(tensor: TensorPlan | None, memory: MemoryPlan | None) -> TensorPlan | None:
    """One plan for :func:`sched._run`: the tensor plan's SASS and the memory plan's (a body
    index is one or the other; the tensor plan's own entries win)."""
    if memory is None or not memory.accesses:
        return tensor
    out = TensorPlan() if tensor is None else copy.deepcopy(tensor)
    for j, v in memory.latency.items():
        out.latency.setdefault(j, memory.walk_latency.get(j, v))
    for j, v in memory.walks.items():
        out.walks.setdefault(j, v)
    out.walk_shared |= memory.walk_shared
    for j, v in memory.unit_interval.items():
        if j not in out.unit_interval:
            out.unit_interval[j] = v
            out.unit_name[j] = memory.unit[j]
            if j in memory.asynchronous:
                out.asynchronous.add(j)
    return out


def bandwidth_pressures(memory: MemoryPlan, w: int) -> dict[str, float]:
    """``bandwidth <level>``: cycles per iteration (of each warp) the level's share needs on the
    busiest scheduler (``w`` warps): bytes per iteration per SM over the level's per-SM share."""
    return {f"bandwidth {lv}": w * v for lv, v in memory.level_intervals().items() if math.isfinite(v)}


def rate_cap(memory: MemoryPlan, schedulers: int) -> tuple[float, str] | None:
    """(the most iterations per clock per SM the measured bandwidths allow, the level that sets
    it), or None when no memory instruction has a measured bandwidth."""
    per = memory.level_intervals()
    if not per:
        return None
    level = max(per, key=lambda k: per[k])
    return schedulers / per[level], level


@dataclass
class Where:
    """Where a loop's data is: the measured hierarchy, the SMs running, the caller's hint
    (``footprint`` bytes over the GPU, or ``level``: l1, l2, dram), and how the lanes spread
    each access (``lines``: from the kernel's SASS and the block's shape, ``lanes.py``)."""

    hierarchy: Hierarchy
    sms: int
    footprint: float | None = None
    level: str | None = None
    lines: dict[int, int] | None = None  # per instruction offset: L1 lines per warp-instruction
    misses: dict[int, float] | None = None  # per load offset: the share that misses the L1
    broadcasts: frozenset[int] = frozenset()  # offsets of loads whose lanes read one address
    walks: dict[int, Walk] | None = None  # per load offset: how its address moves with the loop

    def plan(self, body, tables: Tables, warps: int) -> MemoryPlan:
        return memory_plan(list(body), tables, self.hierarchy, warps, self.sms, self.footprint, self.level,
                           self.lines, self.misses, self.broadcasts, self.walks)

    def with_lanes(self, lanes: Lanes, body, block: tuple[int, ...]) -> Where:
        """This place with how the lanes of a ``block`` spread the accesses of ``body`` (their
        address forms: ``lanes.py``), as the command and the validation both take it."""
        lines = lines_of(lanes, list(body), block, self.hierarchy.line, width)
        one = broadcasts_of(lanes, list(body), block)
        fill = self.hierarchy.fills.get("L1") or self.hierarchy.line
        misses = misses_of(lines, list(body), fill, width, one)
        return replace(self, lines=lines, misses=misses, broadcasts=one, walks=walks_of(list(body), set(misses)))
