"""Per-SASS latency and issue rate from a result set (the measured tables of one GPU).

* latency / throughput_peak of the instruction and tensor suites, from variants whose one
  instance is a single SASS instruction: that opcode's latency and per-SM rate (the median over
  the variants that give it; exact opcode with its modifiers first, else the base opcode);
* memory opcodes: the memory suite's pointer-chase latency named in the architecture's ``predict.toml``
  (before any other record of the opcode: it is the load-to-use latency itself);
* pipes: the SM's pipe rows of ``data/arch/<arch>/limits.toml`` (``arch/limits.py``) group opcodes onto
  execution units, and give the rate, marked as the limit, where nothing was measured.

Nothing is invented: what the tables lack is returned as missing, by name.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpudissect.arch.limits import BRANCHES, Limits, LimitsError, load_limits, parse_sass
from gpudissect.arch.target import arch_table
from gpudissect.kernel.sass import NO_DEST
from gpudissect.predict import PredictError
from gpudissect.predict.banks import BankRule, bank_rule
from gpudissect.predict.tensor_model import tensor_timings
from gpudissect.report.read.results import UNTRUSTED

# opcodes that only steer control flow or wait: one issue slot, no result, no pipe
CONTROL = BRANCHES | {"EXIT", "NOP", "YIELD", "WARPSYNC", "BSSY", "BSYNC", "DEPBAR"}


@dataclass(frozen=True)
class Entry:
    """What the tables say about one SASS opcode (``full``: with its modifiers)."""

    full: str
    latency: float | None
    latency_source: str
    rate: float | None  # warp-instructions per clock per SM (None: bound by the issue limit only)
    rate_source: str
    unit: str  # the execution unit it occupies ("issue" when none is known)
    missing: tuple[str, ...] = ()  # "latency", "throughput"


@dataclass
class Tables:
    arch: str
    gpu: str
    source: str
    limits: Limits
    latency: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # full SASS -> (value, variant)
    rate: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    memory: dict[str, tuple[float, str]] = field(default_factory=dict)  # base opcode -> (latency, what)
    tensor: dict = field(default_factory=dict)  # (SASS, A source) -> tensor.TensorTiming
    banks: BankRule | None = None  # the register-bank rule the behaviour suite measured (banks.py)
    barrier: dict[int, float] = field(default_factory=dict)  # warps per block -> cycles per bar.sync
    # a unit -> the unit it shares with the units the behaviour suite found competing with it
    shared_units: dict[str, str] = field(default_factory=dict)

    def barrier_cycles(self, block_warps: int) -> float | None:
        """Cycles per barrier of a back-to-back bar.sync loop of a block of ``block_warps``
        warps: the measured sweep, straight between two measured sizes, the nearest size's
        beyond them (None: not measured)."""
        if not self.barrier:
            return None
        xs = sorted(self.barrier)
        return float(np.interp(block_warps, xs, [self.barrier[x] for x in xs]))

    @property
    def schedulers(self) -> int:
        return self.limits.schedulers or 4

    @property
    def issue_per_scheduler(self) -> float:
        return self.limits.issue / self.schedulers

    def _lookup(self, table: dict[str, list[tuple[float, str]]], full: str) -> tuple[float, str] | None:
        vals = table.get(full)
        how = ""
        if not vals:
            base = full.split(".")[0]
            keys = sorted(k for k in table if k.split(".")[0] == base)
            vals = [v for k in keys for v in table[k]]
            how = f" via base opcode {base} ({', '.join(keys)})" if vals else ""
        if not vals:
            return None
        names = sorted({n for _, n in vals})
        shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
        return statistics.median(v for v, _ in vals), f"median of {len(vals)}: {shown}{how}"

    def _via_pipe(self, full: str) -> tuple[float, str] | None:
        """A latency for an opcode the tables lack, derived from its pipe row: the median over the
        base opcodes of that row that have a measured latency (each its own median), or None
        where the opcode has no pipe row or the row no measured member."""
        pipe = self.limits.pipe_of(full)
        if pipe is None:
            return None
        per_base: dict[str, list[float]] = {}
        for key, vals in self.latency.items():
            if self.limits.pipe_of(key) is pipe:
                per_base.setdefault(key.split(".")[0], []).extend(v for v, _ in vals)
        if not per_base:
            return None
        bases = sorted(per_base)
        return (statistics.median(statistics.median(v) for v in per_base.values()),
                f"derived: via pipe {pipe.name}: {', '.join(bases)} (median of their medians)")

    def entry(self, full: str, has_result: bool = True) -> Entry:
        """The opcode's latency and rate. Where the tables lack its latency, the median measured
        latency of its pipe row's opcodes stands in (``latency_source`` says "derived: via pipe
        ..."; never ptxas's stall counts); its unit is :meth:`Limits.unit_of` (one unit for every
        form of an opcode, LDS and LDS.128, and for the opcodes a limits row groups)."""
        base = full.split(".")[0]
        missing: list[str] = []
        if base in CONTROL:
            return Entry(full, None, "control: no result", None, "issue only", "issue")
        # a memory opcode's latency is the memory suite's load-to-use chase (predict.toml);
        # a fragment load of the tensor suite that compiles to one LDS times more than the LDS
        lat = self.memory.get(base) or self._lookup(self.latency, full)
        if lat is None and has_result and base not in NO_DEST:
            lat = self._via_pipe(full)
            if lat is None:
                missing.append("latency")
        pipe = self.limits.pipe_of(full)
        unit = self.limits.unit_of(full)
        unit = self.shared_units.get(unit, unit)
        rate = self._lookup(self.rate, full)
        if rate is None and pipe is not None:
            rate = (pipe.warp_instr_per_clk, f"limit: {pipe.name} pipe (data/arch/{self.arch}.toml)")
        if rate is None:
            missing.append("throughput")
            unit = "issue"
        return Entry(full, lat[0] if lat else None, lat[1] if lat else "unknown",
                     rate[0] if rate else None, rate[1] if rate else "unknown: issue limit only",
                     unit, tuple(missing))


def trusted(rec: dict) -> bool:
    """The record's value is a clean measurement of the instruction (none of UNTRUSTED's flags)."""
    return not any(str(f).startswith(UNTRUSTED) for f in rec.get("flags") or [])


def _add(table: dict[str, list[tuple[float, str]]], rec: dict, skip: tuple[str, ...] = ()) -> None:
    """Add a single-SASS record's value under its opcode (not for opcodes whose base is in
    ``skip``)."""
    if rec.get("value") is None or not trusted(rec):
        return
    ops = parse_sass(rec.get("sass") or [])
    if len(ops) != 1 or ops[0][1] != 1.0 or ops[0][0].split(".")[0] in skip:
        return
    table.setdefault(ops[0][0], []).append((float(rec["value"]), rec["variant"]))


WRAPPER = "wmma."  # the tensor suite's wmma fragment loads and stores: their own layouts and strides


def _prefer_own_instruction(table: dict[str, list[tuple[float, str]]]) -> None:
    """Where a SASS opcode has values from the PTX instruction that is that SASS (ldmatrix ->
    LDSM) and from wmma fragment operations that compile to it (whose addresses follow the
    fragment's stride and layout, e.g. bank conflicts), keep the instruction's own."""
    for op, vals in table.items():
        own = [v for v in vals if not v[1].startswith(WRAPPER)]
        if own and len(own) < len(vals):
            table[op] = own


def shared_rates(records: list[dict], variants) -> dict[str, tuple[float, str]]:
    """Per SASS opcode of the memory suite's bandwidth configurations ``variants`` (one opcode
    each: predict.toml ``[shared_rates]``): (warp-instructions per clock per SM at its best
    configuration, what it is)."""
    best: dict[str, tuple[float, str]] = {}
    for rec in records:
        p = rec.get("params") or {}
        ops = parse_sass(rec.get("sass") or [])
        if rec.get("variant") not in variants or not trusted(rec) or len(ops) != 1 or ops[0][1] != 1.0 \
                or not p.get("bits") or not p.get("bytes_per_cycle_per_sm"):
            continue
        rate = float(p["bytes_per_cycle_per_sm"]) / (int(p["bits"]) // 8 * 32)
        op = ops[0][0]
        if rate > best.get(op, (0.0, ""))[0]:
            best[op] = (rate, f"memory {rec['variant']} {p['bits']}-bit, ILP {p.get('ilp')}, {p.get('warps')} warps "
                              "(its best configuration)")
    return best


def _no_fragment_rates(table: dict[str, list[tuple[float, str]]], plain) -> None:
    """Drop the wmma fragments' values of the opcodes ``plain`` (predict.toml
    ``[fragment_rates]``): a plain load or store's rate is not a fragment's."""
    for op in [op for op in table if op.split(".")[0] in set(plain)]:
        table[op] = [v for v in table[op] if not v[1].startswith(WRAPPER)]
        if not table[op]:
            del table[op]


def tables_from(rs, memory_map: dict | None = None) -> Tables:
    """Tables from a loaded result set (``report.read.results.ResultSet``)."""
    arch = rs.provenance().get("arch")
    if not arch:
        raise PredictError(f"{rs.source}: the tables name no architecture (provenance 'arch')")
    try:
        limits = load_limits(arch)
    except LimitsError as e:
        raise PredictError(str(e)) from None
    t = Tables(arch, rs.gpu, str(rs.source), limits)
    predict_spec = arch_table(arch, "predict")
    if memory_map is None:
        memory_map = predict_spec.get("memory_latency", {})
    # the instruction suite times memory loads as pointer chases (each load waits for the one
    # before): their "throughput" is their latency, not the unit's rate; a memory opcode's rate
    # is the pipe's or the issue limit
    skip = tuple(memory_map)
    for suite in ("instructions", "tensor"):
        for rec in rs.records(suite):
            if rec.get("measure") == "latency":
                _add(t.latency, rec)
            elif rec.get("measure") == "throughput_peak":
                _add(t.rate, rec, skip if suite == "instructions" else ())
    _prefer_own_instruction(t.latency)
    _prefer_own_instruction(t.rate)
    _no_fragment_rates(t.rate, predict_spec.get("fragment_rates", {}).get("not_for", ()))
    spec = predict_spec.get("shared_rates", {})
    for op, val in shared_rates(rs.records("memory"), spec.get("variants", ())).items():
        t.rate[op] = [val]
        if "." not in op:  # the 32-bit form: the sub-word forms move no more per lane
            for form in spec.get("narrow", ()):
                t.rate.setdefault(f"{op}.{form}", [(val[0], f"{val[1]}; the {form} form as the 32-bit one")])
    t.tensor = tensor_timings(rs.records("tensor"), trusted)
    t.banks = bank_rule(rs.records("behaviour"))
    mem = {r["variant"]: r for r in rs.records("memory") if r.get("measure") == "latency"
           and r.get("value") is not None}
    for op, spec in memory_map.items():
        r = mem.get(spec["variant"])
        if r is not None:
            t.memory[op] = (float(r["value"]), f"memory {spec['variant']} ({spec.get('level', '')})")
    t.shared_units = competing_units((rs.docs.get("behaviour") or {}).get("summary") or {}, limits)
    t.barrier = barrier_sweep(rs.records("sync"), predict_spec.get("barrier", {}).get("variant"))
    return t


def competing_units(summary: dict, limits: Limits) -> dict[str, str]:
    """Units the behaviour suite found sharing one execution unit: per group of its ``pipes``
    probes that compete pairwise (``groups``: their rates split one unit's, they do not add), the
    units of the limits their SASS opcodes are in, joined into one (``bitcount+mufu``: MUFU and
    POPC compete, though the documented pipes keep them apart). A group that shares a probe with
    another group is left out (competing with two probes that only partly compete with each other
    is no one unit); units that clean groups join are joined whole. Empty without the summary."""
    pipes = (summary or {}).get("pipes") or {}
    solo = pipes.get("solo") or {}
    groups = [g for g in pipes.get("groups") or [] if len(g) > 1]
    seen: dict[str, int] = {}
    for g in groups:
        for m in g:
            seen[m] = seen.get(m, 0) + 1
    parent: dict[str, str] = {}

    def root(u: str) -> str:
        while parent.get(u, u) != u:
            u = parent[u]
        return u

    for g in groups:
        if any(seen[m] > 1 for m in g):
            continue
        units = sorted({limits.unit_of(solo[m]["sass_op"]) for m in g if (solo.get(m) or {}).get("sass_op")})
        for u in units[1:]:
            parent[root(u)] = root(units[0])
    members: dict[str, list[str]] = {}
    for u in parent:
        members.setdefault(root(u), []).append(u)
    out: dict[str, str] = {}
    for r, us in members.items():
        name = "+".join(sorted({r, *us}))
        for u in {r, *us}:
            out[u] = name
    return out


def barrier_sweep(records: list[dict], variant: str | None) -> dict[int, float]:
    """Warps per block -> cycles per barrier, from the sync suite's record ``variant`` (its
    ``fit.sweep``; empty where the tables hold none)."""
    rec = next((r for r in records if r.get("variant") == variant and trusted(r)), None)
    sweep = ((rec or {}).get("fit") or {}).get("sweep") or {}
    return {int(v["block_warps"]): float(v["cycles"]) for v in sweep.values()
            if v.get("cycles") is not None and v.get("block_warps")}


def load_tables(spec: Path | str) -> Tables:
    from gpudissect.report.read.results import LoadError, load_result_set

    try:
        rs = load_result_set(spec)
    except (LoadError, OSError) as e:
        raise PredictError(f"tables {spec}: {e}") from None
    if not rs.docs:
        raise PredictError(f"tables {spec}: no suite results in it")
    return tables_from(rs)
