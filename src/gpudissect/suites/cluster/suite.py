"""The cluster suite: thread-block clusters, GPCs and distributed shared memory, by experiment.

Items (patterns are globs on the names, or a kind: ``map``, ``launch``, ``dsm``, ``atomic``,
``mapa``, ``barrier``):

* ``map:size=<S>``: clusters of S CTAs, one CTA per SM (shared memory), more clusters than fit;
  every CTA records its SM, rank, cluster and start/end times. Launch 0 spins a fixed time
  (clusters resident at once); launches 1.. spin a random time per cluster (placements mix,
  so that co-membership joins every SM of a GPC). A size the driver refuses is stored flagged
  ``refused`` with its message;
* ``launch``: GPU time of a launch of the same block count as plain and cluster launches;
* ``dsm:latency:size=<S>``: a dependent chase of ``ld.shared::cluster`` from every rank into
  every rank (itself included) at two chain lengths; ``dsm:latency:local``: the plain
  ``ld.shared`` chase;
* ``dsm:bw:<ld|st>:<pattern>:<bits>``: remote load/store bandwidth, warps swept;
* ``atomic:latency``, ``atomic:throughput:<atom|red>:<self|remote>``;
* ``mapa``, ``barrier:<default|relaxed>`` (cluster sizes 1..max).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpudissect.arch.occupancy import occupancy_rules, one_block_smem
from gpudissect.arch.target import TargetError, arch_table
from gpudissect.bench.contract import (
    Context,
    Item,
    Outcome,
    Plan,
    Redo,
    SuiteBase,
    SuiteInputError,
    select_named,
)
from gpudissect.bench.stats import noise_flag
from gpudissect.device.args import Buf
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module, take
from gpudissect.kernel.ptx import ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.cluster import analyse as an
from gpudissect.suites.cluster import kernels as kn
from gpudissect.suites.cluster.checks import check_region

MAP_LAUNCHES = 3  # launch 0: a fixed spin; the others a random spin per cluster
SPIN = 40_000  # SM cycles a CTA of the placement kernel spins (fixed launch)
WAVES = 3  # clusters launched: this many times the SMs over the size
LAUNCH_SIZES = (0, 1, 2, 4, 8, 16)  # 0: a launch without clusters
LAUNCH_REPS = 20
LAUNCH_BLOCKS_PER_SM = 16
BW_SIZE = 4  # cluster size of the bandwidth and atomic throughput probes
PATTERNS = ("all-to-one", "pairs", "ring", "self")
WARPS = (2, 4, 8, 16, 32)  # the saturation sweep (warps per CTA)
ATOMIC_TARGETS = ("self", "remote")
CLUSTER_ERRORS = ("CUDA_ERROR", "cudaError")  # a launch the driver refused names its error ...
FAULTS = ("ILLEGAL", "MISALIGNED", "LAUNCH_FAILED", "TIMEOUT", "ASSERT", "hung", "crashed")  # ... a fault is no refusal


@dataclass
class Probe:
    name: str
    kind: str  # map | launch | latency | local | bw | atomlat | atomic | mapa | barrier
    params: dict = field(default_factory=dict)
    kernels: list[str] = field(default_factory=list)


def cluster_facts(arch: str) -> dict:
    """The architecture's cluster facts (``cluster.toml`` of its folder): the sizes to try."""
    try:
        return arch_table(arch, "cluster")
    except TargetError as e:
        raise SuiteInputError(f"no cluster facts: {e}") from None


def sizes_tried(facts: dict) -> list[int]:
    """Every size up to the non-portable limit, and one beyond it (its refusal is recorded)."""
    return [*range(1, facts["nonportable_max"] + 1), 2 * facts["nonportable_max"]]


def all_probes(facts: dict, quick: bool) -> list[Probe]:
    top = facts["nonportable_max"]
    ps = [Probe(f"map:size={s}", "map", {"size": s}, ["cl_map"]) for s in sizes_tried(facts)]
    ps.append(Probe("launch", "launch", {"sizes": list(LAUNCH_SIZES)}, ["cl_map"]))
    ps.append(Probe("dsm:latency:local", "local", {"size": 1}, [f"sm_chase_n{n}" for n in kn.LAT_LENGTHS]))
    lat_sizes = [2, 4, 8, top] if quick else list(range(2, top + 1))
    for s in lat_sizes:
        ps.append(Probe(f"dsm:latency:size={s}", "latency", {"size": s}, [f"dsm_chase_n{n}" for n in kn.LAT_LENGTHS]))
    bits = (32, 128) if quick else kn.BW_BITS
    for op in ("ld", "st"):
        for pat in PATTERNS:
            for b in bits:
                ps.append(Probe(f"dsm:bw:{op}:{pat}:{b}", "bw", {"op": op, "pattern": pat, "bits": b, "size": BW_SIZE,
                                                                 "limit": facts.get("smem_bytes_per_clk")},
                                [f"dsm_{op}{b}_u{u}" for u in kn.BW_UNITS]))
    ps.append(Probe("atomic:latency", "atomlat", {"size": 2}, [f"dsm_atomlat_n{n}" for n in kn.LAT_LENGTHS]))
    for op in ("atom", "red"):
        for t in ATOMIC_TARGETS:
            ps.append(Probe(f"atomic:throughput:{op}:{t}", "atomic", {"op": op, "target": t, "size": BW_SIZE},
                            [f"dsm_{op}_u{u}" for u in kn.BW_UNITS]))
    ps.append(Probe("mapa", "mapa", {"size": 2}, [f"mapa_n{n}" for n in kn.LAT_LENGTHS]))
    for form in kn.BARRIER_FORMS:
        ps.append(Probe(f"barrier:{form}", "barrier", {"form": form, "sizes": list(range(1, top + 1))},
                        [f"cbar_{form}_n{n}" for n in kn.BAR_LENGTHS]))
    return ps


KINDS = {"map": ("map",), "launch": ("launch",), "dsm": ("latency", "local", "bw"), "atomic": ("atomlat", "atomic"),
         "mapa": ("mapa",), "barrier": ("barrier",)}


def select(probes: list[Probe], patterns: list[str] | None) -> list[Probe]:
    return select_named(probes, patterns, lambda p: p.name, lambda p, pat: p.kind in KINDS.get(pat, ()),
                        f"no cluster probe matches {patterns} (kinds: {', '.join(KINDS)}; "
                        "or names like 'dsm:bw:ld:*')")


def refused(e: BaseException) -> str | None:
    """The driver's refusal of a launch (its message), or None for any other failure."""
    text = f"{type(e).__name__}: {e}"
    if any(f in text for f in FAULTS):
        return None
    return text[:400] if any(c in text for c in CLUSTER_ERRORS) else None


def refusal(e: BaseException, name: str, measure: str, unit: str, params: dict) -> Result:
    """The result of a launch the driver refused (a finding); any other failure is raised again."""
    why = refused(e)
    if why is None:
        raise e
    return Result(name, measure, None, unit, "refused by the driver", params=params,
                  flags=[f"refused: {why}"], cls="cluster")


# ----------------------------------------------------------------- launches
GRID_UNIT: dict[int, str] = {}  # id(device) -> "clusters" | "blocks": what a cluster launch's grid counts
# (emptied by every plan: a device object lives through one run)


def grid_unit(dev: Device, b: Built) -> str:
    """What ``dev.launch``'s ``grid`` counts in a cluster launch (cuda-core counts clusters;
    the CUDA runtime counts blocks): one launch of ``cl_map`` (``b``) with clusters of 2 and a
    grid of 2 reads ``%nclusterid.x`` back (2: clusters, 1: blocks). Asked once per device."""
    if id(dev) not in GRID_UNIT:
        r = dev.launch(b.cubin, b.name, 2, 32, [Buf("rec", nbytes=4 * kn.MAP_WORDS * 8, read=True, dtype="u8", zero=True),
                                                Buf("spin", nbytes=64, zero=True)], cluster=(2, 1, 1))
        n = int(r.outputs["rec"].reshape(-1, kn.MAP_WORDS)[0, 6])
        if n not in (1, 2):
            raise RuntimeError(f"a grid of 2 in clusters of 2 gave %nclusterid.x = {n}: neither 1 nor 2")
        GRID_UNIT[id(dev)] = "clusters" if n == 2 else "blocks"
    return GRID_UNIT[id(dev)]


def launch_grid(unit: str, clusters: int, size: int) -> int:
    """The ``grid`` of a launch of ``clusters`` clusters of ``size`` CTAs (see :func:`grid_unit`)."""
    return clusters if unit == "clusters" else clusters * size


def timed_launch(dev: Device, b: Built, clusters: int, size: int, warps: int, smem: int,
                 targets: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """One launch of a timed kernel: (times, one row per warp; ids, one row per block)."""
    grid = clusters * size
    r = dev.launch(b.cubin, b.name, launch_grid(GRID_UNIT[id(dev)], clusters, size), warps * 32,
                   [Buf("times", nbytes=grid * warps * kn.ROW * 8, read=True, dtype="u8", zero=True),
                    Buf("ids", nbytes=grid * kn.IDS * 8, read=True, dtype="u8", zero=True),
                    Buf("tgt", data=np.array(targets, dtype=np.uint32))],
                   smem=smem, cluster=(size, 1, 1))
    times = r.outputs["times"].reshape(-1, kn.ROW)[: grid * warps].astype(np.int64)
    ids = r.outputs["ids"].reshape(-1, kn.IDS)[:grid].astype(np.int64)
    return times, ids


def _cycles(times: np.ndarray, rep: int) -> np.ndarray:
    return times[:, 2 * rep + 1] - times[:, 2 * rep]


def _clusters(nsm: int, size: int) -> int:
    """Clusters a timed probe launches: about half the SMs' worth (every cluster fits at once
    on GPCs holding a cluster of the size)."""
    return max(1, nsm // (2 * size))


def run_map(dev: Device, p: Probe, b: Built, nsm: int, smem: int) -> Result:
    s = p.params["size"]
    ncl = -(-WAVES * nsm // s)
    rng = np.random.default_rng(s)
    per, samples = [], []
    for i in range(MAP_LAUNCHES):
        spin = np.full(ncl, SPIN, np.uint32) if i == 0 else rng.integers(SPIN // 2, 2 * SPIN, ncl).astype(np.uint32)
        try:
            r = dev.launch(b.cubin, b.name, launch_grid(GRID_UNIT[id(dev)], ncl, s), 32,
                           [Buf("rec", nbytes=ncl * s * kn.MAP_WORDS * 8, read=True, dtype="u8", zero=True),
                            Buf("spin", data=spin)], smem=smem, cluster=(s, 1, 1))
        except Exception as e:  # noqa: BLE001 - a refusal is a finding, anything else is raised
            return refusal(e, p.name, "map", "clusters", {**p.params, "smem": smem})
        rec = r.outputs["rec"].reshape(-1, kn.MAP_WORDS)[: ncl * s].astype(np.int64)
        g0, g1, sm, rank, cid = rec[:, 0], rec[:, 1], rec[:, 3], rec[:, 4], rec[:, 5]
        d = an.map_launch(sm, rank, cid, g0, g1)
        per.append({k: v for k, v in d.items() if k != "sms_used"} | {"sms": len(d["sms_used"])})
        samples.append({"smid": sm.tolist(), "rank": rank.tolist(), "cid": cid.tolist(),
                        "g0_ns": (g0 - g0.min()).tolist(), "g1_ns": (g1 - g0.min()).tolist(),
                        "nclusterid": int(rec[0, 6])})
    flags = []
    if not all(d["distinct_sms"] for d in per):
        flags.append("shared-sm: CTAs of one cluster shared an SM (one CTA per SM was asked for)")
    if not all(d["ranks_ok"] for d in per):
        flags.append("ranks: a cluster's %cluster_ctarank values are not 0..size-1")
    return Result(p.name, "map", float(per[0]["resident"]), "clusters",
                  f"clusters running at once (most cluster intervals open together, %globaltimer), launch 0 of "
                  f"{MAP_LAUNCHES}: every CTA spins {SPIN} cycles, one CTA per SM",
                  params={**p.params, "clusters": ncl, "smem": smem, "spin": SPIN, "launches": MAP_LAUNCHES},
                  fit={"per_launch": per}, samples={"launches": samples}, flags=flags, cls="cluster")


def run_launch(dev: Device, p: Probe, b: Built, nsm: int) -> list[Result]:
    blocks = LAUNCH_BLOCKS_PER_SM * nsm
    out = []
    for s in p.params["sizes"]:
        params = {"size": s, "blocks": blocks, "threads": 32, "launches": LAUNCH_REPS}
        name = f"launch:size={s}"
        try:
            grid = launch_grid(GRID_UNIT[id(dev)], blocks // s, s) if s else blocks
            r = dev.launch(b.cubin, b.name, grid, 32,
                           [Buf("rec", nbytes=blocks * kn.MAP_WORDS * 8, read=True, dtype="u8", zero=True),
                            Buf("spin", nbytes=blocks * 4, zero=True)],
                           launches=LAUNCH_REPS, cluster=(s, 1, 1) if s else None)
        except Exception as e:  # noqa: BLE001
            out.append(refusal(e, name, "launch", "us", params))
            continue
        us = [1000 * x for x in r.gpu_ms[1:]]  # the first launch loads the module
        rec = r.outputs["rec"].reshape(-1, kn.MAP_WORDS)[:blocks].astype(np.int64)
        spread = int(rec[:, 0].max() - rec[:, 0].min())
        out.append(Result(name, "launch", float(np.median(us)), "us",
                          f"GPU time between events around one launch of {blocks} blocks of 32 threads "
                          f"({'no cluster' if not s else f'clusters of {s}'}), median of {len(us)} launches",
                          params=params, fit={"start_spread_ns_last_launch": spread,
                                              "sms": len(np.unique(rec[:, 3]))},
                          samples={"us": [round(x, 3) for x in us]},
                          flags=[f for f in [noise_flag(us, 0.05)] if f], cls="cluster"))
    return out


def _latency_rows(dev: Device, bs: list[Built], size: int, nsm: int, smem: int, shifts: list[int]) -> list[dict]:
    """Per (shift, length, block, kept repetition): the chase's cycles with its ranks and SMs."""
    rows = []
    ncl = _clusters(nsm, size)
    for shift in shifts:
        for b in bs:
            times, ids = timed_launch(dev, b, ncl, size, 1, smem, an.shift_targets(shift, size))
            sm = ids[:, 2]
            for rep in range(1, kn.REPS):
                cyc = _cycles(times, rep)
                for blk in range(len(ids)):
                    tgt = int(ids[blk, 1])
                    rows.append({"src": int(ids[blk, 0]), "tgt": tgt, "length": b.kernel.meta["length"],
                                 "cycles": int(cyc[blk]), "src_sm": int(sm[blk]),
                                 "tgt_sm": int(sm[(blk // size) * size + tgt])})
    return rows


def run_latency(dev: Device, p: Probe, bs: list[Built], nsm: int, smem: int, flags: list[str]) -> Result:
    s = p.params["size"]
    l1, l2 = (b.kernel.meta["length"] for b in bs)
    rows = _latency_rows(dev, bs, s, nsm, smem, list(range(s)))
    pairs = an.pair_latencies(rows, l1, l2)
    remote = [d["latency"] for (a, t), d in pairs.items() if a != t]
    local = [d["latency"] for (a, t), d in pairs.items() if a == t]
    dist = an.distance(pairs)
    matrix = [[pairs.get((a, t), {}).get("latency") for t in range(s)] for a in range(s)]
    val = float(np.median(remote)) if remote else None
    return Result(p.name, "latency", val, "cycles",
                  f"dependent ld.shared::cluster chase: (median region at {l2} steps - at {l1}) / {l2 - l1} per "
                  "(source rank, target rank); value: the median over the remote pairs",
                  params={**p.params, "lengths": [l1, l2], "clusters": _clusters(nsm, s), "smem": smem,
                          "repetitions_kept": kn.REPS - 1},
                  fit={"matrix": matrix, "self_window": round(float(np.median(local)), 3) if local else None,
                       "remote_min": min(remote, default=None), "remote_max": max(remote, default=None),
                       "distance": dist},
                  samples={"pairs": {f"{a}->{t}": [b["lat"] for b in d["blocks"]] for (a, t), d in pairs.items()}},
                  flags=flags, cls="cluster")


def run_local(dev: Device, p: Probe, bs: list[Built], nsm: int, smem: int, flags: list[str]) -> Result:
    l1, l2 = (b.kernel.meta["length"] for b in bs)
    lat, ev = _chain(dev, bs, 1, nsm, smem, [0])
    return Result(p.name, "latency", lat, "cycles",
                  f"dependent plain ld.shared chase: (median region at {l2} steps - at {l1}) / {l2 - l1}",
                  params={**p.params, "lengths": [l1, l2], "smem": smem, "repetitions_kept": kn.REPS - 1},
                  fit=ev["fit"], samples=ev["samples"], flags=flags + ev["flags"], cls="cluster")


def _sweep(dev: Device, bs: list[Built], size: int, nsm: int, smem: int, targets: list[int],
           per_thread: int) -> list[dict]:
    """Per warp count: rates per (kept repetition, block) of the work the longer kernel adds
    (``per_thread`` x its extra accesses x threads), and the blocks' ranks."""
    short, long_ = bs
    du = long_.kernel.meta["units"] - short.kernel.meta["units"]
    ncl = _clusters(nsm, size)
    out = []
    for w in WARPS:
        t1, ids = timed_launch(dev, short, ncl, size, w, smem, targets)
        t2, _ = timed_launch(dev, long_, ncl, size, w, smem, targets)
        rates = an.block_rates(t1, t2, w, range(1, kn.REPS), w * 32 * du * per_thread)
        out.append({"warps": w, "rates": rates, "rank": ids[:, 0], "tgt": ids[:, 1]})
    return out


def _sweep_result(p: Probe, sweep: list[dict], unit: str, what: str, flags: list[str], smem: int,
                  limit: float | None) -> Result:
    size = p.params["size"]
    per = []
    for d in sweep:
        remote = d["rank"] != d["tgt"]
        rate = an.median_rate(d["rates"], remote if remote.any() else None)
        readers = an.readers_per_target(d["rank"][:size], d["tgt"][:size])
        per.append({"warps": d["warps"], "rate": rate, "readers_per_target": readers,
                    "per_target": None if rate is None else round(rate * readers, 4)})
    v = an.sweep_value([d["rate"] for d in per], limit)
    return Result(p.name, p.kind, v["value"], unit,
                  f"{what}: per CTA (one per SM) the work the longer region adds over its extra cycles, median over "
                  f"the remote CTAs (all when none is remote) and kept repetitions, at the most warps of "
                  f"{list(WARPS)} (saturated when that last doubling raised it by < 2%)",
                  params={**p.params, "warps": list(WARPS), "units": list(kn.BW_UNITS), "smem": smem,
                          "repetitions_kept": kn.REPS - 1, "limit": limit},
                  fit={"sweep": per, **{k: x for k, x in v.items() if k not in ("value", "flags")}},
                  samples={str(d["warps"]): [round(x, 4) for x in d["rates"][np.isfinite(d["rates"])].tolist()]
                           for d in sweep},
                  flags=flags + v["flags"], cls="cluster")


def run_bw(dev: Device, p: Probe, bs: list[Built], nsm: int, smem: int, flags: list[str]) -> Result:
    q = p.params
    sweep = _sweep(dev, bs, q["size"], nsm, smem, an.pattern_targets(q["pattern"], q["size"]), q["bits"] // 8)
    what = f"{q['op']}.shared::cluster {q['bits']}-bit, {q['pattern']}, clusters of {q['size']}" + (
        "; stores are posted: the rate at which the SM issues them, the region does not wait for them to land"
        if q["op"] == "st" else "")
    return _sweep_result(p, sweep, "B/clk/SM", what, flags, smem, p.params["limit"])


def run_atomic(dev: Device, p: Probe, bs: list[Built], nsm: int, smem: int, flags: list[str]) -> Result:
    q = p.params
    pat = "self" if q["target"] == "self" else "ring"
    sweep = _sweep(dev, bs, q["size"], nsm, smem, an.pattern_targets(pat, q["size"]), 1)
    return _sweep_result(p, sweep, "ops/clk/SM", f"{q['op']}.shared::cluster.add.u32 ({q['target']}), one lane op "
                         "per thread per instruction", flags, smem, None)


def _chain(dev: Device, bs: list[Built], size: int, nsm: int, smem: int, targets: list[int]) -> tuple[float | None, dict]:
    cyc = {}
    for b in bs:
        times, _ = timed_launch(dev, b, _clusters(nsm, size), size, 1, smem, targets)
        cyc[b.kernel.meta["length"]] = np.concatenate([_cycles(times, r) for r in range(1, kn.REPS)])
    return _chain_of(cyc)


def _chain_of(cyc: dict[int, np.ndarray]) -> tuple[float | None, dict]:
    """The latency of a chain timed at two lengths, and its evidence (samples, the medians)."""
    (l1, c1), (l2, c2) = sorted(cyc.items())
    lat = an.chain_latency(c1, c2, l1, l2)
    return lat, {"samples": {str(k): v.tolist() for k, v in cyc.items()},
                 "fit": {"median_cycles": {str(k): float(np.median(v)) if len(v) else None for k, v in cyc.items()}},
                 "flags": [] if lat is not None else [f"no-slope: the chain of {l2} was not slower than the chain of "
                                                      f"{l1} (medians above): no latency"]}


def run_atomlat(dev: Device, p: Probe, bs: list[Built], nsm: int, smem: int, flags: list[str]) -> list[Result]:
    out = []
    for t, pat in (("self", "self"), ("remote", "ring")):
        lat, ev = _chain(dev, bs, 2, nsm, smem, an.pattern_targets(pat, 2))
        out.append(Result(f"atomic:latency:{t}", "latency", lat, "cycles",
                          "dependent atom.shared::cluster.add.u32 chain (each lane its own word): (median region at "
                          "the longer length - at the shorter) / the extra steps",
                          params={**p.params, "target": t, "lengths": list(kn.LAT_LENGTHS), "smem": smem},
                          fit=ev["fit"], samples=ev["samples"], flags=flags + ev["flags"], cls="cluster"))
    return out


def run_mapa(dev: Device, p: Probe, bs: list[Built], nsm: int, smem: int, flags: list[str]) -> Result:
    lat, ev = _chain(dev, bs, 2, nsm, smem, an.pattern_targets("ring", 2))
    return Result(p.name, "latency", lat, "cycles",
                  "dependent mapa.shared::cluster.u32 chain: (median region at the longer length - at the shorter) / "
                  "the extra steps", params={**p.params, "lengths": list(kn.LAT_LENGTHS), "smem": smem},
                  fit=ev["fit"], samples=ev["samples"], flags=flags + ev["flags"], cls="cluster")


def run_barrier(dev: Device, p: Probe, bs: list[Built], nsm: int, smem: int, flags: list[str]) -> list[Result]:
    out = []
    for s in p.params["sizes"]:
        name = f"barrier:{p.params['form']}:size={s}"
        params = {"form": p.params["form"], "size": s, "lengths": list(kn.BAR_LENGTHS), "smem": smem}
        try:
            lat, ev = _chain(dev, bs, s, nsm, smem, list(range(s)))
        except Exception as e:  # noqa: BLE001
            out.append(refusal(e, name, "barrier", "cycles", params))
            continue
        out.append(Result(name, "barrier", lat, "cycles",
                          f"{kn.BARRIER_FORMS[p.params['form']]} + barrier.cluster.wait, one warp per CTA: (median "
                          "region at the longer length - at the shorter) / the extra barriers",
                          params=params, fit=ev["fit"], samples=ev["samples"], flags=flags + ev["flags"],
                          cls="cluster"))
    return out


# ----------------------------------------------------------------- the suite
class ClusterSuite(SuiteBase):
    name = "cluster"
    description = "thread-block clusters: GPCs, residency, launch cost, distributed shared memory, cluster barriers"
    retry_flags = ("above-limit",)
    needs = ("clusters", "dsm")

    def validate(self, patterns: list[str] | None, options: dict) -> None:
        select(all_probes({"nonportable_max": 16}, quick=False), patterns)

    def plan(self, ctx: Context, patterns: list[str] | None) -> Plan:
        facts = cluster_facts(ctx.target.base)
        GRID_UNIT.clear()
        probes = select(all_probes(facts, ctx.quick), patterns)
        ctx.state["smem"] = one_block_smem(occupancy_rules(ctx.target))
        return Plan([Item(p.name, p) for p in probes],
                    {"probes": [p.name for p in probes], "quick": ctx.quick, "facts": facts})

    def prepare(self, ctx: Context, items: list[Item]) -> None:
        header = ptx_header(ctx.target.ptx_isa, ctx.target.arch)
        ks = kn.all_kernels(header)
        built = build_module(ks[1:], ctx.target.arch)
        built.update(build_module(ks[:1], ctx.target.arch, region=False))
        ctx.state["built"] = built

    def measure(self, ctx: Context, item: Item, redo: Redo | None = None) -> Outcome:
        p: Probe = item.data
        bs, texts = take(ctx.state["built"], p.kernels)
        flags = [f for b in bs for f in check_region(b)]
        dev, nsm, smem = ctx.dev, ctx.sm_count, ctx.state["smem"]
        unit = grid_unit(dev, ctx.state["built"]["cl_map"])
        try:
            rs = self._run(p, bs, dev, nsm, smem, flags)
        except Exception as e:  # noqa: BLE001 - a size the driver refuses is a finding
            rs = [refusal(e, p.name, p.kind, "-", dict(p.params))]
        last = bs[-1]
        for r in rs:
            r.ptx_hash, r.sass_hash = last.ptx_hash, last.sass_hash
            r.params = {**r.params, "grid_counts": unit, "kernels": [b.name for b in bs],
                        "ptx_hashes": [b.ptx_hash for b in bs],
                        "sass_hashes": [b.sass_hash for b in bs]}
            if p.kind not in ("map", "launch"):
                r.sass = [i.text for i in last.region][:64]
        return Outcome(rs, texts)

    def _run(self, p: Probe, bs: list[Built], dev: Device, nsm: int, smem: int, flags: list[str]) -> list[Result]:
        runs = {"latency": run_latency, "local": run_local, "bw": run_bw, "atomic": run_atomic, "mapa": run_mapa}
        if p.kind == "map":
            return [run_map(dev, p, bs[0], nsm, smem)]
        if p.kind == "launch":
            return run_launch(dev, p, bs[0], nsm)
        if p.kind in runs:
            return [runs[p.kind](dev, p, bs, nsm, smem, flags)]
        if p.kind == "atomlat":
            return run_atomlat(dev, p, bs, nsm, smem, flags)
        return run_barrier(dev, p, bs, nsm, smem, flags)

    def error_results(self, item: Item, flag: str) -> list[Result]:
        p: Probe = item.data
        return [Result(p.name, p.kind, None, "-", "-", params=p.params, flags=[flag], cls="cluster")]

    def summarize(self, ctx: Context) -> dict:
        from gpudissect.suites.cluster.summary import summarize

        return summarize(ctx.store.results(ctx.run_id)) if ctx.store is not None else {}


SUITE = ClusterSuite()
