"""Synthetic result sets for the report tests: every suite, with known values."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "gpudissect.suite/1"


def prov(gpu: str = "Synthetic GPU", uuid: str = "uuid-synth-1") -> dict:
    return {"gpu_name": gpu, "gpu_uuid": uuid, "driver": "999.1", "toolkit": "ptxas 13.0", "arch": "sm_90",
            "sm_count": 8, "clocks_before": {"sm_mhz": 1500, "mem_mhz": 2000},
            "clocks_after": {"sm_mhz": 1500, "mem_mhz": 2000}, "host": "test", "started": 1.7e9,
            "finished": 1.7e9 + 60, "tool_version": "0.1.0", "params": {}, "timing": {}}


def rec(variant, measure, value, unit="cycles", cls="", flags=(), params=None, sass=("IADD3",), gpu="Synthetic GPU"):
    return {"variant": variant, "measure": measure, "value": value, "unit": unit, "flags": list(flags),
            "sass": list(sass), "gpu": gpu, "gpu_uuid": "uuid-synth-1", "cls": cls, "params": params or {},
            "statistic": "slope", "fit": {"slope": value} if value is not None else None,
            "samples": {"8": [1.0, 2.0]}, "strategy": "reg", "ptx_hash": "p" * 64, "sass_hash": "s" * 64,
            "run_id": 1}


# variant: (class, SASS, latency, throughput warp-instr/clk/SM)
INSTR = {
    "add.u32": ("int", ["IADD3"], 4.0, 2.0),
    "max.u32": ("int", ["VIMNMX"], 4.0, 2.0),
    "mul.lo.u32": ("int", ["IMAD"], 4.0, 2.0),
    "mad.lo.u32": ("int", ["IMAD"], 4.0, 2.0),
    "div.u32": ("int.div", ["I2F.U32.RP", "MUFU.RCP"], 60.0, 0.25),
    "add.f32": ("fp32", ["FADD"], 4.0, 4.0),
    "max.f32": ("fp32", ["FMNMX"], 4.0, 2.0),
    "mul.f32": ("fp32", ["FMUL"], 4.0, 4.0),
    "fma.rn.f32": ("fp32", ["FFMA"], 4.0, 4.0),
    "div.rn.f32": ("fp32.div", ["MUFU.RCP", "FFMA"], 57.0, 0.25),
    "add.f64": ("fp64", ["DADD"], 8.0, 2.0),
    "max.f64": ("fp64", ["DSETP.MAX.AND"], 25.0, 0.5),
    "mul.f64": ("fp64", ["DMUL"], 8.0, 2.0),
    "fma.rn.f64": ("fp64", ["DFMA"], 8.0, 2.0),
    "div.rn.f64": ("fp64.div", ["MUFU.RCP64H"], 124.0, 0.15),
    "rsqrt.approx.ftz.f32": ("mufu", ["MUFU.RSQ"], 17.0, 0.5),
    "popc.b32": ("bit", ["POPC"], None, None),  # not measured (unverified)
}


def instructions_doc(scale: float = 1.0, gpu: str = "Synthetic GPU") -> dict:
    recs = []
    for name, (cls, sass, lat, tp) in INSTR.items():
        flags = ["unverified: folded"] if lat is None else []
        recs.append(rec(name, "latency", None if lat is None else lat * scale, cls=cls, sass=sass, flags=flags, gpu=gpu))
        recs.append(rec(name, "throughput_peak", tp, "warp_instr/cycle/SM", cls=cls, sass=sass, flags=flags,
                        params={"best": {"chains": 4, "warps": 16}, "smallest_within_5pct": {"chains": 4, "warps": 16}},
                        gpu=gpu))
        if lat is not None:
            for d in (2, 4):
                recs.append(rec(name, "distance", lat / d, "cycles/instr", cls=cls, sass=sass,
                                params={"distance": d}, gpu=gpu))
    return {"schema": SCHEMA, "suite": "instructions", "provenance": prov(gpu),
            "summary": {"conclusions": ["fp32 add has a 4-cycle dependent latency (synthetic)"]}, "records": recs}


# bandwidth records of the memory suite: (level/direction, GB/s, bytes per cycle per SM);
# ratios that a log axis with a cut-off baseline would distort (2754 vs 3079)
BANDWIDTH = (("shared/read", 30000.0, 117.0), ("L2/read", 7000.0, 27.0), ("DRAM/read", 3079.0, 12.0),
             ("DRAM/copy", 2754.0, None))


def memory_doc() -> dict:
    """Shaped like analyse.memory.summarize's output."""
    return {"schema": SCHEMA, "suite": "memory", "provenance": prov(),
            "summary": {"conclusions": ["L1 hit latency 30 cycles, L2 200 cycles (synthetic staircase)"],
                        "latency": {"ld.global.ca": 30.0, "ld.global.cg": 200.0, "ld.shared": 25.0,
                                    "ld.global.cv": None},
                        "l2map": {"split": True, "near_cycles": 200.0, "far_cycles": 230.0},
                        "sizes": {"L1": {"bytes": 262144, "bracket": [262144, 393216], "levels_cycles": [30.0, 200.0]},
                                  "L2": {"bytes": 52428800, "bracket": [52428800, 67108864],
                                         "levels_cycles": [200.0, 500.0]}},
                        "line_sizes": {"L1": {"bytes": 128, "low_cycles": 30.0, "plateau_cycles": 200.0}},
                        "bandwidth": {"DRAM/read": {"GB/s": 3000.0, "bytes_per_cycle_per_sm": 12.0}},
                        "bank_conflicts": {"w32": {"table": [{"stride_bytes": 4, "degree_warp": 1, "cycles": 2.0},
                                                             {"stride_bytes": 8, "degree_warp": 2, "cycles": 4.0}],
                                                   "fit": {"rule": "degree_warp"}}}},
            "records": [rec("sweep/ca-random", "latency", 30.0 + i, params={"footprint": 1024 * 2 ** i},
                            sass=["LDG.E"]) for i in range(6)]
            + [rec(f"bandwidth/{name}", "bandwidth", gbs, "GB/s", sass=[],
                   params={"bytes_per_cycle_per_sm": bpc, "footprint": 1 << 28})
               for name, gbs, bpc in BANDWIDTH]}


# tensor variants of other kinds: (variant, SASS, rate, work per cycle per SM, 10^12/s, % of peak):
# integer and binary types (TOP/s), a fragment load (TB/s: its 'FLOP' are bytes moved)
TENSOR_MORE = (("mma.sync.m16n8k32.s32.s8.s32", "IMMA.16832.S8.S8", 0.66, 5441.0, 1422.0, 66.4),
               ("mma.sync.m16n8k256.s32.b1.s32.and.popc", "BMMA.168256.AND.POPC", 0.66, 43529.0, 11376.8, None),
               ("ldmatrix.m8n8.x4.b16", "LDSM.16.M88.4", 0.25, 128.0, 33.5, None))


def tensor_doc() -> dict:
    v = "mma.sync.m16n8k16.f32.f16.f32"
    return {"schema": SCHEMA, "suite": "tensor", "provenance": prov(),
            "summary": {"conclusions": ["mma m16n8k16 f16 reaches 91% of peak (synthetic)"],
                        "variants": {v: {"status": "native", "latency_cycles": {"chain": 33.0}}}},
            "records": [rec(v, "latency", 33.0, sass=["HMMA.16816.F32"], params={"family": "chain"}),
                        rec(v, "throughput_peak", 1.0, "instr/cycle/SM", sass=["HMMA.16816.F32"],
                            params={"group": "mma", "pct_of_peak": 91.0, "tflops": 500.0})]
            + [rec(name, "throughput_peak", rate, "instr/cycle/SM", sass=[sass],
                   params={"group": "mma", "pct_of_peak": pct, "tflops": tera, "flop_per_cycle_sm": per})
               for name, sass, rate, per, tera, pct in TENSOR_MORE]}


TIMELINE_SMS = 8  # SMs of the synthetic dispatch timeline: its figure must show a row for each


def dispatch_record(sms: int = TIMELINE_SMS, per_sm: int = 4, resident: int = 2) -> dict:
    """dispatch:1d-free with its per-block samples: ``per_sm`` blocks on each SM, ``resident``
    at once, each 1 us long."""
    lin, smid, g0, g1 = [], [], [], []
    for b in range(sms * per_sm):
        wave, sm = divmod(b, sms)
        start = 1000.0 * (wave // resident) + 10.0 * (wave % resident)
        lin.append(b), smid.append(sm), g0.append(start), g1.append(start + 1000.0)
    r = rec("dispatch:1d-free", "dispatch", float(resident), "blocks/SM", sass=[],
            params={"grid": [sms * per_sm, 1], "threads": 256, "smem": 0, "regs": 22, "live": 0})
    r["samples"] = {"lin": lin, "smid": smid, "g0_ns": g0, "g1_ns": g1}
    return r


def behaviour_doc() -> dict:
    """Shaped like run.behaviour.summarize's output."""
    return {"schema": SCHEMA, "suite": "behaviour", "provenance": prov(),
            "summary": {"conclusions": ["blocks are dispatched round-robin over SMs (synthetic)"],
                        "scheduler": {"pairs": {"schedulers": 4, "rule": "warp id mod 4"}},
                        "dispatch": {"dispatch:1d-free": {"policy": "breadth-first (synthetic)", "blocks_per_sm": 2.0,
                                                          "predicted_blocks_per_sm": 2, "in_order": True,
                                                          "refill_gap_ns_median": 256.0,
                                                          "params": {"grid": [32, 1], "threads": 256, "smem": 0}}},
                        "pipes": {"groups": [["fma", "alu"]]},
                        "occupancy": {"occ:r32": {"regs": 32, "measured_warps": 64, "predicted_warps": 64},
                                      "occ:r128": {"regs": 128, "measured_warps": 16, "predicted_warps": 16}}},
            "records": [rec("dispatch:1d", "dispatch", 2.0, "blocks", sass=[]), dispatch_record()]}


def write_data_dir(root: Path, legacy_instructions: bool = False, suites=("instructions", "memory", "tensor",
                                                                             "behaviour")) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    makers = {"instructions": instructions_doc, "memory": memory_doc, "tensor": tensor_doc,
              "behaviour": behaviour_doc}
    for s in suites:
        doc = makers[s]()
        obj = doc["records"] if (s == "instructions" and legacy_instructions) else doc
        (root / f"{s}.json").write_text(json.dumps(obj))
    return root
