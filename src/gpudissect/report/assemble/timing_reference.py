"""The timing reference (``gpudissect report --markdown``), shaped like the GCN instruction
timing reference (seed 002): preliminary explanations, the occupancy table, issue rules,
memory and bank conflicts, then cycles and throughput per instruction, class by class.
Every section is built from the data; what no suite measured says "not measured".
"""

from __future__ import annotations

import statistics

from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.read.metrics import lookup
from gpudissect.report.read.results import ResultSet
from gpudissect.suites.behaviour.view import markdown_section as behaviour_markdown
from gpudissect.suites.instructions.view import (
    by_class,
    grid_section,
    instruction_rows,
    stall_comparison,
    steps_section,
)
from gpudissect.suites.tensor.view import tensor_rows

NOT_MEASURED = "_not measured_"


def _cell(v) -> str:
    if isinstance(v, (dict, list)):
        s = ", ".join(f"{k}={_cell(x)}" for k, x in v.items()) if isinstance(v, dict) else \
            ", ".join(_cell(x) for x in v)
        return s if len(s) < 120 else s[:117] + "..."
    return fmt_num(v).replace("|", "\\|")


def md_table(rows: list[dict], cols: list[str] | None = None) -> list[str]:
    if not rows:
        return []
    if cols is None:
        cols = []
        for r in rows:
            cols += [k for k in r if k not in cols]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return out + [""]


def _summary(rs: ResultSet, suite: str) -> dict:
    return (rs.docs.get(suite) or {}).get("summary") or {}


def _find_key(d: dict, *names: str):
    low = {str(k).lower(): v for k, v in d.items()}
    for n in names:
        if n in low:
            return low[n]
    return None


def _structured(value, title: str) -> list[str]:
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return md_table(value)
    if isinstance(value, dict) and value:
        if all(isinstance(x, dict) for x in value.values()) and all(
                any(isinstance(y, list) and y and all(isinstance(z, dict) for z in y) for y in x.values())
                for x in value.values()):
            out: list[str] = []
            for k, x in value.items():  # e.g. one table per access width, with its fit
                out += [f"#### {title} {k}", ""]
                for kk, y in x.items():
                    if isinstance(y, list) and y and all(isinstance(z, dict) for z in y):
                        out += md_table(y)
                    else:
                        out += [f"{kk}: {_cell(y)}", ""]
            return out
        if all(isinstance(x, dict) for x in value.values()):
            return md_table([{title: k, **x} for k, x in value.items()])
        return md_table([{"key": k, "value": x} for k, x in value.items()])
    if value is not None:
        return [_cell(value), ""]
    return []


def _conclusions(rs: ResultSet, suite: str, words: tuple[str, ...] = ()) -> list[str]:
    cs = _summary(rs, suite).get("conclusions") or []
    if words:
        cs = [c for c in cs if any(w in c.lower() for w in words)]
    return [f"- {c}" for c in cs]


def _operand_section(rows) -> list[str]:
    """The instruction configurations: write-read, read-read, write-write, under a guard, and
    per source operand (the suite's view builds the table)."""
    from gpudissect.suites.instructions.view import configuration_lines

    return configuration_lines(rows)


def _validation_section(rs: ResultSet) -> list[str]:
    """How well these tables predict real code: the error table of ``gpudissect predict
    --validate`` whose measurements lie beside the data (``predict-validation.json.gz``)."""
    v = rs.validation or {}
    stats = (v.get("analysis") or {}).get("stats")
    if not stats:
        return []
    from gpudissect.arch.target import arch_table
    from gpudissect.predict.validate import table_lines, target_lines, tensor_lines

    gpu = v.get("gpu") or {}
    spec = arch_table(rs.provenance().get("arch") or "", "predict")
    return ["## How well the tables predict real code", "",
            f"`gpudissect predict` (cycles per loop iteration from these tables and ptxas's control "
            f"codes) against {len(v.get('loops') or [])} loops measured on {gpu.get('name', '?')} "
            f"`{gpu.get('uuid', '?')}` (`gpudissect predict --validate`): mean absolute percentage "
            "error, the share within 5% and 10%, Kendall's tau, per group, beside the v0 bounds, the "
            "sum-of-latencies and the max-pipe-pressure baselines; tensor SASS from the per-SASS tensor "
            "timings (the tensor-core model, validated on its own mma.sync and wgmma loops).", "", "```",
            *table_lines(stats), *target_lines(stats, spec), *tensor_lines((v.get("analysis") or {}).get("rows") or []),
            "```", ""]


COVERED = ("instructions", "memory", "tensor", "behaviour")  # the sections above


def _other_suites(rs: ResultSet) -> list[str]:
    """A section per other suite in the results (in registry order): its description and its
    conclusions, with a suite's own markdown (``view.markdown_section(summary)``) where it
    has one."""
    from gpudissect.suites import SUITES, get_suite, suite_module

    out: list[str] = []
    for name in SUITES:
        if name in COVERED or name not in rs.suites():
            continue
        desc = getattr(get_suite(name), "description", "") or name
        out += [f"## {desc[:1].upper() + desc[1:]} (suite `{name}`)", ""]
        own = getattr(suite_module(name, "view"), "markdown_section", None)
        body = own(_summary(rs, name)) if own else []
        out += (body or []) + _conclusions(rs, name) + [""]
    return out


def _quantity_rows(rs: ResultSet, names: list[tuple[str, str]]) -> list[str]:
    lines = ["| quantity | value | unit | measured by |", "|---|---:|---|---|"]
    for name, label in names:
        f = lookup(rs, name)
        if f is None:
            lines.append(f"| {label} | {NOT_MEASURED} | | |")
        else:
            lines.append(f"| {label} | {fmt_num(f.value)} | {f.unit} | {f.source} |")
    return lines + [""]


def timing_reference(rs: ResultSet) -> str:
    prov = rs.provenance()
    sched = lookup(rs, "schedulers_per_sm")
    nsched = int(sched.value) if sched else 4
    L: list[str] = [f"# {rs.gpu}: instruction timings", ""]
    L += [f"Generated by gpudissect from `{rs.source}` (suites: {', '.join(rs.suites()) or 'none'}). "
          f"GPU {prov.get('gpu_name', '?')} `{prov.get('gpu_uuid', '?')}`, {prov.get('arch') or '?'}, "
          f"{prov.get('sm_count') or '?'} SMs, driver {prov.get('driver') or '?'}, "
          f"toolkit {prov.get('toolkit') or '?'}.", ""]
    cb, ca = prov.get("clocks_before") or {}, prov.get("clocks_after") or {}
    if cb or ca:
        L += [f"Observed clocks (NVML): SM {cb.get('sm_mhz', '?')} MHz before, {ca.get('sm_mhz', '?')} MHz "
              f"after; memory {cb.get('mem_mhz', '?')} MHz. Measured in a kernel (clock64 against "
              f"globaltimer): {cb.get('sm_mhz_kernel', '?')} MHz before, "
              f"{ca.get('sm_mhz_kernel', '?')} MHz after.", ""]

    L += ["## Preliminary explanations", "",
          "* **Cycles** are SM clock cycles (`%clock64`) between two clock reads around generated PTX; "
          "every kernel's SASS was checked to hold the intended instructions.",
          "* **Latency** is the cost of one instruction in a dependent chain: the slope of cycles "
          "against chain length (a fit, not one reading). Instructions without a dependence chain "
          "(special-register reads) show an *issue interval* instead, so labelled. Where a chain "
          "needed a companion instruction (an XOR or ADD of a run-time value, against folding), "
          "the companion's own latency, measured in the same run, is removed; SASS that stays in "
          "a number is named in the SASS column (`includes ...`).",
          "* **Throughput** is warp-instructions per cycle per SM at saturation (maximum over "
          "independent chains x warps). As in the GCN reference, throughput and issue cost are two "
          f"views of one number: **issue interval = {nsched} / throughput** cycles between two such "
          f"warp-instructions on one scheduler "
          + (f"({nsched} schedulers per SM, measured: {sched.source})." if sched else
             "(4 schedulers per SM assumed: the scheduler count was not measured)."),
          "* **d=N** columns: cycles per instruction when each instruction depends on the one N "
          "instructions before it (dependence distance); equal to the latency/N until the pipe's "
          "issue rate is reached.",
          "* `-` means not measured or not trustworthy; the flags say why (`sass`: extra "
          "instructions in the timed region, `noisy`, `poor-fit`, `branch`, ...). The JSON holds "
          "raw samples, fits, PTX and SASS hashes.", ""]

    L += ["## Occupancy table", ""]
    occ = _find_key(_summary(rs, "behaviour"), "occupancy", "occupancy_table")
    if occ:
        L += ["Resident warps per SM against registers per thread and shared memory per block, "
              "measured by launching and observing residency (behaviour suite).", ""]
        L += _structured(occ, "config")
        L += _conclusions(rs, "behaviour", ("occupancy", "resident"))
        L.append("")
    else:
        L += [f"{NOT_MEASURED} (no occupancy table in the behaviour suite's results).", ""]

    L += ["## Instruction scheduling and issue rules", ""]
    beh = _summary(rs, "behaviour")
    found = False
    for key in ("pipes", "scheduler", "scheduling", "issue", "dispatch"):
        v = _find_key(beh, key)
        if v:
            L += [f"### {key.replace('_', ' ')}", ""] + _structured(v, key)
            found = True
    fair = behaviour_markdown(beh)  # the suite's own section: block -> SM fairness
    L += fair
    found = found or bool(fair)
    bc = _conclusions(rs, "behaviour")
    if bc:
        L += bc + [""]
        found = True
    if not found:
        L += [f"Pipe sharing, scheduler policy and dual issue: {NOT_MEASURED} (behaviour suite).", ""]
    rows = instruction_rows(rs.records("instructions"))
    if rows:
        L += ["### Per class (instruction suite)", "",
              "Median over the variants of a class whose value was measured.", "",
              "| class | variants | median latency (cycles) | median throughput (warp-instr/clk/SM) "
              "| median issue interval (cycles) |", "|---|---:|---:|---:|---:|"]
        for cls, rs_ in by_class(rows).items():
            lat = [r.latency for r in rs_ if r.latency is not None]
            tp = [r.throughput for r in rs_ if r.throughput is not None]
            ii = [r.issue_interval(nsched) for r in rs_ if r.throughput]
            L.append(f"| {cls} | {len(rs_)} | {fmt_num(statistics.median(lat)) if lat else '-'} | "
                     f"{fmt_num(statistics.median(tp)) if tp else '-'} | "
                     f"{fmt_num(statistics.median(ii)) if ii else '-'} |")
        L.append("")

    L += ["## ptxas's latency model against the measurement", ""]
    both, differ = stall_comparison(rows)
    if both:
        L += ["For fixed-latency instructions ptxas writes its own latency model into the SASS: the "
              "stall cycles of each instruction's control code before a dependent one may issue "
              "(decoded from the cubin, kernel/control.py). Below, the measured dependent-chain "
              f"latency beside it: {len(both) - len(differ)} of {len(both)} single-SASS variants agree "
              f"within half a cycle; the {len(differ)} that differ:", "",
              "| PTX | SASS | measured latency (cycles) | ptxas stall (cycles) | difference |",
              "|---|---|---:|---:|---:|"]
        for r in sorted(differ, key=lambda r: -abs((r.latency or 0) - (r.ptxas_stall or 0))):
            L.append(f"| `{r.variant}` | {r.sass_text} | {fmt_num(r.latency, 3)} | "
                     f"{fmt_num(r.ptxas_stall, 3)} | {fmt_num((r.latency or 0) - (r.ptxas_stall or 0), 3)} |")
        L.append("")
    else:
        L += [f"{NOT_MEASURED} (no single-SASS latency with ptxas's stall count in the results).", ""]

    L += ["## Memory", ""]
    L += _quantity_rows(rs, [("l1_latency", "L1 hit latency"), ("l2_latency", "L2 hit latency"),
                             ("dram_latency", "device memory latency"),
                             ("smem_ld_latency", "shared memory load latency"),
                             ("smem_st_latency", "shared memory store latency (seed 000's one-store span)"),
                             ("smem_st_roundtrip", "shared store -> dependent load, beyond the load"),
                             ("gmem_st_latency", "clock span around one global store (seed 000's method; not its completion)"),
                             ("gmem_st_roundtrip", "global store -> dependent load, beyond the load"),
                             ("smem_banks", "shared memory banks"), ("smem_bank_bytes", "shared memory bank width"),
                             *((f"smem_{rw}_{b}", f"shared {rw} throughput, {b}-bit accesses")
                               for rw in ("read", "write") for b in (32, 64, 128)),
                             ("const_latency", "constant cache latency"),
                             ("tex_latency", "texture fetch latency"),
                             ("l1_size", "L1 capacity"), ("l2_size", "L2 capacity"),
                             ("local_latency", "local memory latency"),
                             ("l1_line", "L1 fill granularity"), ("l2_line", "L2 fill granularity"),
                             ("dram_bandwidth", "device memory read bandwidth"),
                             ("l2_bandwidth", "L2 read bandwidth"), ("l1_bandwidth", "L1 read bandwidth")])
    L += _conclusions(rs, "memory") + [""]

    L += ["## Bank conflicts", ""]
    mem = _summary(rs, "memory")
    banks = _find_key(mem, "bank_conflicts", "bank_conflict", "banks_table")
    if banks:
        L += ["Cycles of one warp's shared-memory access against the N-way conflict degree "
              "(memory suite).", ""]
        L += _structured(banks, "access")
        L += _conclusions(rs, "memory", ("bank",))
        L.append("")
    else:
        L += [f"Shared-memory bank-conflict rule: {NOT_MEASURED} (memory suite).", ""]

    L += ["## Tensor cores", ""]
    trows = tensor_rows(rs.records("tensor"))
    if trows or _summary(rs, "tensor"):
        L += _conclusions(rs, "tensor") + [""]
        L += md_table([{"variant": f"`{r['variant']}`", "group": r["group"], "SASS": r["sass"],
                        "latency (cycles)": r["latency"], "rate (instr/clk/SM)": r["rate"],
                        "FLOP/clk/SM": r["flop_per_cycle_sm"], "TFLOP/s": r["tflops"],
                        "% of peak": r["pct_of_peak"], "flags": r["flags"]} for r in trows])
    else:
        L += [f"Tensor-core latency and throughput: {NOT_MEASURED} (tensor suite).", ""]

    L += _operand_section(rows)
    L += grid_section(rs.records("instructions"))
    L += steps_section(rs.records("instructions"))
    ic = _conclusions(rs, "instructions")  # value classes, signed vs unsigned (conclusions.py)
    L += ["## Instruction conclusions", "", *ic, ""] if ic else []
    from gpudissect.advise.report import efficiency_section  # efficiency losses, compiler efficacy

    L += efficiency_section(rs)
    L += _validation_section(rs)
    L += _other_suites(rs)

    L += ["## Instruction timings by class", ""]
    if not rows:
        L += [f"{NOT_MEASURED} (instruction suite).", ""]
    dists = sorted({d for r in rows for d in r.distance})
    for cls, rs_ in by_class(rows).items():
        L += [f"### {cls}", "",
              "| PTX | SASS (one instance) | cycles (latency) | throughput | issue interval | "
              + "".join(f"d={d} | " for d in dists) + "flags |",
              "|---|---|---:|---:|---:|" + "---:|" * len(dists) + "---|"]
        for r in rs_:
            L.append(f"| `{r.variant}` | {r.sass_text} | {fmt_num(r.latency, 3)}{r.latency_label} | "
                     f"{fmt_num(r.throughput, 3)} | {fmt_num(r.issue_interval(nsched), 3)} | "
                     + "".join(f"{fmt_num(r.distance.get(d), 3)} | " for d in dists)
                     + f"{', '.join(r.flags)} |")
        L.append("")
    return "\n".join(L)
