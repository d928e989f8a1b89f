"""Simulator export: a GPGPU-Sim / Accel-Sim configuration fragment from the measurements.

Every option line carries a comment naming the measurement it came from; an option whose
measurement is missing is written commented out, with the reason. The same data is also
given as JSON (``simexport_data``) for other performance models.

Conventions (those of Accel-Sim's microbenchmark tuner):

* latency: the dependent-chain latency, rounded to whole cycles;
* initiation interval: cycles between two warp-instructions on one unit, with one unit per
  scheduler: ``schedulers_per_sm / throughput`` (warp-instr/cycle/SM), at least 1;
* ``-gpgpu_l2_rop_latency`` = L2 hit latency - L1 hit latency, ``-dram_latency`` = device
  memory latency - L2 hit latency (GPGPU-Sim adds the stages up);
* cache geometry: the memory suite's stride sweeps measure the fill (sector) granularity (what
  one miss brings in), not the line; the line (allocation unit) comes from its capacity
  against node spacing. Only a measured line is offered as a line size.
"""

from __future__ import annotations

import fnmatch
import tomllib
from functools import cache
from importlib import resources

from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.read.metrics import BAD_FLAGS, Found, lookup
from gpudissect.report.read.results import ResultSet
from gpudissect.suites import suite_module

SCHEMA = "gpudissect.simexport/1"
META_KEYS = ("option", "trace", "latency_option", "suite")


@cache
def _spec_file() -> dict:
    return tomllib.loads(resources.files("gpudissect").joinpath("data", "simexport.toml").read_text())


def slot_specs() -> dict:
    return _spec_file()["class"]


def _memory_summary(rs: ResultSet, key: str) -> dict:
    """The memory summary's part named by simexport.toml's [memory] table."""
    spec = _spec_file().get("memory") or {}
    path = spec.get(key) or []
    d = (rs.docs.get(spec.get("suite", "")) or {}).get("summary") or {}
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d if isinstance(d, dict) else {}


def _usable(flags: list[str]) -> bool:
    return not any(f.startswith(BAD_FLAGS) for f in flags)


def _slot(rs: ResultSet, spec: dict, candidates: list[str], nsched: int) -> dict | None:
    """The first candidate with a measured latency: its latency, throughput and initiation."""
    rows_of = getattr(suite_module(spec["suite"], "view"), "simulator_rows", None)
    if rows_of is not None:  # the suite's own rows: latency and throughput with their flags
        rows = {r.variant: r for r in rows_of(rs)}
        for name in candidates:
            r = rows.get(name)
            if r is None or r.latency is None or not _usable(r.latency_flags):
                continue
            tp = r.throughput if r.throughput and _usable(r.throughput_flags) else None
            return {"variant": name, "sass": r.sass, "latency": r.latency, "latency_flags": r.latency_flags,
                    "throughput": tp, "throughput_flags": r.throughput_flags if tp else [],
                    "initiation": max(1.0, nsched / tp) if tp else None,
                    "from": f"{spec['suite']} suite: {name} latency"
                            + (f", throughput_peak {fmt_num(tp)} warp-instr/clk/SM" if tp else "")}
        return None
    recs = rs.records(spec["suite"])
    for pat in candidates:
        lat = next((r for r in recs if r.get("measure") == "latency" and r.get("value") is not None
                    and fnmatch.fnmatchcase(r.get("variant") or "", pat) and _usable(r.get("flags") or [])), None)
        if lat is None:
            continue
        tps = [r for r in recs if r.get("variant") == lat["variant"] and r.get("value")
               and r.get("measure") in ("throughput_peak", "throughput")
               and "instr/cycle/SM" in (r.get("unit") or "") and _usable(r.get("flags") or [])]
        tps.sort(key=lambda r: r["measure"] != "throughput_peak")
        tp_rec = tps[0] if tps else None
        tp = float(tp_rec["value"]) if tp_rec else None
        return {"variant": lat["variant"], "sass": lat.get("sass") or [], "latency": float(lat["value"]),
                "latency_flags": lat.get("flags") or [], "throughput": tp,
                "throughput_flags": (tp_rec.get("flags") or []) if tp_rec else [],
                "initiation": max(1.0, nsched / tp) if tp else None,
                "from": f"{spec['suite']} suite: {lat['variant']} latency"
                        + (f", {tp_rec['measure']} {fmt_num(tp)} {tp_rec['unit']}" if tp_rec else "")}
    return None


def simexport_data(rs: ResultSet) -> dict:
    sched = lookup(rs, "schedulers_per_sm")
    nsched = int(sched.value) if sched else 4
    classes: dict[str, dict] = {}
    for cname, spec in slot_specs().items():
        fields = {k: v for k, v in spec.items() if k not in META_KEYS}
        classes[cname] = {f: _slot(rs, spec, cands, nsched) for f, cands in fields.items()}
    q: dict[str, Found | None] = {n: lookup(rs, n) for n in (
        "sm_count", "schedulers_per_sm", "l1_latency", "l2_latency", "dram_latency", "smem_ld_latency",
        "l1_size", "l2_size", "l1_sector", "l2_sector", "l1_line", "l2_line", "shared_size", "smem_banks")}
    prov = rs.provenance()
    return {"schema": SCHEMA, "gpu": rs.gpu, "source": rs.source,
            "provenance": {k: prov.get(k) for k in ("gpu_name", "gpu_uuid", "driver", "toolkit", "arch",
                                                    "sm_count", "clocks_before", "clocks_after")},
            "schedulers_per_sm": {"value": nsched, "measured": sched is not None,
                                  "from": sched.source if sched else "not measured: 4 assumed"},
            "opcode_classes": classes,
            "quantities": {k: ({"value": v.value, "unit": v.unit, "from": v.source, "what": v.what}
                               if v else None) for k, v in q.items()},
            "options": _options(rs, classes, q, nsched, sched)}


def _fl(flags: list[str]) -> str:
    return f" [{', '.join(sorted({f.split(':')[0] for f in flags}))}]" if flags else ""


def _line(opt: str, value, why: str) -> dict:
    return {"option": opt, "value": None if value is None else str(value), "comment": why}


def _options(rs: ResultSet, classes: dict, q: dict, nsched: int, sched) -> list[dict]:
    out: list[dict] = []
    n = q["sm_count"]
    out.append(_line("-gpgpu_n_clusters", int(n.value) if n else None,
                     f"SM count, {n.source}; one SM per cluster" if n else "SM count not measured"))
    out.append(_line("-gpgpu_n_cores_per_cluster", 1 if n else None,
                     "modelling convention (clusters = SMs), not a measurement" if n else "SM count not measured"))
    out.append(_line("-gpgpu_num_sched_per_core", nsched if sched else None,
                     f"warp schedulers per SM, {sched.source}" if sched else
                     "schedulers per SM not measured (4 assumed for the initiation intervals below)"))
    cb = (rs.provenance().get("clocks_before") or {})
    mhz = cb.get("sm_mhz")
    out.append(_line("-gpgpu_clock_domains", None,
                     f"only the SM clock was observed (NVML: {mhz} MHz during the run); interconnect, L2 and "
                     "DRAM clock domains were not measured" if mhz else "clocks not recorded"))
    for cname, spec in slot_specs().items():
        slots = classes[cname]
        fields = list(slots)
        opt = spec.get("option", cname)
        lat_opt = spec.get("latency_option", f"-ptx_opcode_latency_{opt}")
        init_opt = f"-ptx_opcode_initiation_{opt}"
        missing = [f for f in fields if slots[f] is None]
        if missing:
            out.append(_line(lat_opt, None, f"not measured: {', '.join(missing)} ({', '.join(fields)})"))
        else:
            out.append(_line(lat_opt, ",".join(str(round(slots[f]["latency"])) for f in fields),
                             f"{','.join(fields)} latency (cycles) of " + "; ".join(
                                 f"{slots[f]['variant']} {fmt_num(slots[f]['latency'])}{_fl(slots[f]['latency_flags'])}"
                                 for f in fields)
                             + f" ({spec['suite']} suite, dependent-chain slope)"))
        miss_i = [f for f in fields if slots[f] is None or slots[f]["initiation"] is None]
        if miss_i:
            out.append(_line(init_opt, None, f"throughput not measured for {', '.join(miss_i)} ({', '.join(fields)})"))
        else:
            out.append(_line(init_opt, ",".join(str(max(1, round(slots[f]["initiation"]))) for f in fields),
                             f"{','.join(fields)} initiation = {nsched} schedulers / throughput_peak: " + "; ".join(
                                 f"{slots[f]['variant']} {fmt_num(slots[f]['throughput'])}{_fl(slots[f]['throughput_flags'])}"
                                 for f in fields) + " warp-instr/clk/SM"))
        tr = spec.get("trace") or {}
        s = slots.get(tr.get("field"))
        topt = f"-trace_opcode_latency_initiation_{tr.get('unit', opt)}"
        if s is None or s["initiation"] is None:
            out.append(_line(topt, None, f"{tr.get('field')} latency/throughput not measured"))
        else:
            out.append(_line(topt, f"{round(s['latency'])},{max(1, round(s['initiation']))}",
                             f"Accel-Sim trace mode: {s['variant']} latency {fmt_num(s['latency'])}, "
                             f"initiation {nsched}/{fmt_num(s['throughput'])}"))
    l1, l2, dram, smem = q["l1_latency"], q["l2_latency"], q["dram_latency"], q["smem_ld_latency"]
    out.append(_line("-gpgpu_l1_latency", round(l1.value) if l1 else None,
                     f"L1 hit latency {fmt_num(l1.value)} cycles, {l1.source}" if l1 else "L1 hit latency not measured"))
    out.append(_line("-gpgpu_smem_latency", round(smem.value) if smem else None,
                     f"shared load latency {fmt_num(smem.value)} cycles, {smem.source}" if smem
                     else "shared memory latency not measured"))
    if l1 and l2:
        out.append(_line("-gpgpu_l2_rop_latency", round(l2.value - l1.value),
                         f"L2 hit {fmt_num(l2.value)} - L1 hit {fmt_num(l1.value)} cycles ({l2.source}; {l1.source})"
                         + _l2_note(rs)))
    else:
        out.append(_line("-gpgpu_l2_rop_latency", None, "needs L2 and L1 hit latencies: "
                         + ", ".join(n for n, f in (("L2", l2), ("L1", l1)) if f is None) + " not measured"))
    if l2 and dram:
        out.append(_line("-dram_latency", round(dram.value - l2.value),
                         f"device memory {fmt_num(dram.value)} - L2 hit {fmt_num(l2.value)} cycles ({dram.source})"))
    else:
        out.append(_line("-dram_latency", None, "needs device-memory and L2 latencies: "
                         + ", ".join(n for n, f in (("device memory", dram), ("L2", l2)) if f is None) + " not measured"))
    sh = q["shared_size"]
    out.append(_line("-gpgpu_shmem_size", int(sh.value) if sh else None,
                     f"shared memory per SM {fmt_num(sh.value)} B, {sh.source}" if sh else "shared memory size not measured"))
    banks = q["smem_banks"]
    out.append(_line("-gpgpu_shmem_num_banks", int(banks.value) if banks else None,
                     f"bank-conflict sweep, {banks.source}" if banks else "bank count not measured"))
    lines = _memory_summary(rs, "lines")
    for lvl, opt in (("l1", "-gpgpu_cache:dl1"), ("l2", "-gpgpu_cache:dl2")):
        size, fill = q[f"{lvl}_size"], q[f"{lvl}_sector"]  # the fill (sector) granularity
        line = (lines.get(lvl.upper()) or {}).get("bytes")
        have = ", ".join([f"size {fmt_num(size.value)} B ({size.source})"] if size else [])
        have += (", " if have and line else "") + (f"line {line} B (capacity against node spacing)"
                                                   if line else "")
        have += (", " if have and fill else "") + (f"fill (sector) granularity {fmt_num(fill.value)} B, "
                                                   f"not a line size ({fill.source})" if fill else "")
        out.append(_line(opt, None, "needs sets:line:associativity; associativity not measured"
                         + (f"; measured {have}" if have else "; size and line not measured either")
                         + ("" if line else "; line size not measured")))
    return out


def _l2_note(rs: ResultSet) -> str:
    """The L2's near/far partitions as measured (GPGPU-Sim has no option for them)."""
    l2 = _memory_summary(rs, "l2")
    if len(l2.get("levels") or []) < 2:
        return ""
    near, far = l2["levels"][0], l2["levels"][-1]
    probe = l2.get("probe") or {}
    return (f"; the L2 is two partitions (no GPGPU-Sim option models them): near "
            f"{fmt_num(near['latency_cycles'])} cycles up to {fmt_num(near['bytes'] / 2**20)} MiB, far "
            f"{fmt_num(far['latency_cycles'])} cycles up to {fmt_num(l2['capacity_bytes'] / 2**20)} MiB"
            + (f"; per-SM hits near {fmt_num(probe['near_cycles'])}, far {fmt_num(probe['far_cycles'])} cycles"
               if probe.get("near_cycles") else ""))


def accel_sim_config(data: dict) -> str:
    prov = data["provenance"]
    lines = [f"# GPGPU-Sim / Accel-Sim configuration fragment for {data['gpu']}",
             f"# generated by gpudissect from {data['source']}: GPU {prov.get('gpu_uuid')}, driver "
             f"{prov.get('driver')}, toolkit {prov.get('toolkit')}, arch {prov.get('arch')}",
             "# Each option names the measurement it came from; options not measured are commented out",
             "# with the reason. Initiation intervals assume one unit per scheduler "
             f"({data['schedulers_per_sm']['from']}).",
             "# ptx_opcode fields are ADD,MAX,MUL,MAD,DIV as GPGPU-Sim reads them.", ""]
    for o in data["options"]:
        if o["value"] is None:
            lines.append(f"# {o['option']} (not set: {o['comment']})")
        else:
            lines.append(f"{o['option']} {o['value']}  # {o['comment']}")
    return "\n".join(lines) + "\n"
