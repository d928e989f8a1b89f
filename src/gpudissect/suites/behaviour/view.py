"""The behaviour suite's part of the HTML report, from its summary: one verdict per probe
(dispatch, block -> SM fairness, occupancy, schedulers, warp issue order, pipes) with the
numbers behind it, then the tables of each probe and the compiler efficacy; and its sections
of the timing reference (the occupancy table, the issue rules with the block -> SM fairness of
:func:`markdown_section`, the compiler efficacy in the efficiency section). Values as the
suite stored them; '-' where it stored none."""

from __future__ import annotations

import statistics

from gpudissect.arch.target import arch_table
from gpudissect.report.present.fmt import fmt_bytes, fmt_num
from gpudissect.report.present.markdown import (
    NOT_MEASURED,
    TimingContext,
    TimingSection,
    conclusions,
    find_key,
    structured,
    summary_of,
)
from gpudissect.report.present.tabular import Cell, ReportTable
from gpudissect.report.read.results import ResultSet


def _yes(v) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _pct(v) -> str:
    return "-" if v is None else f"{fmt_num(100 * v, 3)}%"


def _occupancy_counts(occ: dict) -> tuple[int, int, list[str], list[str]]:
    """(configurations compared, matching, names of those that differ, names undetermined: their
    launches disagree)."""
    known = {k: v for k, v in occ.items() if v.get("predicted_warps") is not None}
    open_ = [k for k, v in known.items() if v.get("measured_warps") is None]
    off = [k for k, v in known.items() if k not in open_ and v.get("measured_warps") != v.get("predicted_warps")]
    return len(known) - len(open_), len(known) - len(off) - len(open_), off, open_


def verdicts_table(summary: dict) -> ReportTable:
    t = ReportTable("behaviour-verdicts", "Behaviour verdicts", ["probe", "verdict", "evidence"],
                    code=(0,), wrap=(1, 2), sortable=False)
    for name, d in (summary.get("dispatch") or {}).items():
        t.add(Cell(name), d.get("policy") or "-",
              f"{fmt_num(d.get('blocks_per_sm'))} blocks/SM at once (rules: {fmt_num(d.get('predicted_blocks_per_sm'))}); "
              f"blocks start in id order: {_yes(d.get('in_order'))}; freed slot refilled after "
              f"{fmt_num(d.get('refill_gap_ns_median'))} ns median")
    occ = summary.get("occupancy") or {}
    if occ:
        n, ok, off, open_ = _occupancy_counts(occ)
        t.add(Cell("occupancy"), f"{ok} of {n} configurations match the CUDA occupancy rules",
              (("differ: " + ", ".join(off)) if off else "resident warps per SM measured = predicted in every one")
              + (f"; undetermined (launches disagree): {', '.join(open_)}" if open_ else ""))
    fv = (summary.get("verdicts") or {}).get("block -> SM fairness")
    if fv:
        groups = (summary.get("fairness") or {}).get("when_fair") or {}
        t.add(Cell("block -> SM fairness"), fv.get("verdict") or "-",
              "; ".join(f"{g}: fair {d['fair']}/{d['configurations']}" for g, d in groups.items() if ", " not in g)
              or "-")
    pairs = (summary.get("scheduler") or {}).get("pairs") or {}
    if pairs:
        n = pairs.get("schedulers")
        t.add(Cell("schedulers"), f"{fmt_num(n)} schedulers per SM: {pairs.get('rule') or '-'}" if n
              else "undetermined (launches disagree)",
              f"pair slowdown {fmt_num(pairs.get('slowdown_competing'))} (same group) vs "
              f"{fmt_num(pairs.get('slowdown_other'))} (different); groups {pairs.get('groups') or '-'}")
    order = (summary.get("scheduler") or {}).get("order") or {}
    for wl, o in order.items():
        if not isinstance(o, dict):
            continue
        per = o.get("per_launch") or []
        t.add(Cell(f"warp issue order ({wl})"), o.get("policy") or "-",
              "; ".join(f"launch {i}: {d.get('verdict')} ({_pct(d.get('share'))} of cases), late warps "
                        f"{d.get('late_warps')}" for i, d in enumerate(per)) or "-")
    pipes = summary.get("pipes") or {}
    lim = pipes.get("issue_limit") or {}
    if lim:
        per = [fmt_num(d.get("value"), 4) for d in lim.get("per_launch") or []]
        t.add(Cell("issue limit"), f"{fmt_num(lim.get('value'), 4)} warp-instr/clk/SM"
              + (f" ({fmt_num(lim.get('per_scheduler'), 3)} per scheduler)" if lim.get("per_scheduler") else "")
              if lim.get("agreed") else f"undetermined ({lim.get('why')})",
              f"per launch {', '.join(per)}; pairs it caps: {', '.join(lim.get('capped_pairs') or []) or '-'}")
    if pipes.get("groups"):
        open_ = pipes.get("undetermined_pairs") or []
        over = pipes.get("overlapping") or []
        t.add(Cell("pipes"), "groups whose members all compete: " + "; ".join(" + ".join(g) for g in pipes["groups"]),
              f"{len(pipes.get('pairs') or {})} pairs timed (table below)"
              + (f"; in more than one group (not one pipe each): {', '.join(over)}" if over else "")
              + (f"; undetermined: {', '.join(open_)}" if open_ else ""))
    return t


def dispatch_table(summary: dict) -> ReportTable | None:
    disp = summary.get("dispatch") or {}
    if not disp:
        return None
    t = ReportTable("behaviour-dispatch", "Dispatch: block -> SM assignment per launch shape",
                    ["probe", "grid", "threads", "shared memory", "blocks/SM (measured / rules)",
                     "start in id order", "inversions", "refill median / p90 (ns)", "refill in freed order"],
                    code=(0,), numeric=(2, 3, 6, 8), sortable=False)
    for name, d in disp.items():
        p = d.get("params") or {}
        t.add(Cell(name), str(p.get("grid") or "-"), fmt_num(p.get("threads")),
              fmt_bytes(p.get("smem")) if p.get("smem") is not None else "-",
              f"{fmt_num(d.get('blocks_per_sm'))} / {fmt_num(d.get('predicted_blocks_per_sm'))}",
              _yes(d.get("in_order")), _pct(d.get("start_inversions")),
              f"{fmt_num(d.get('refill_gap_ns_median'))} / {fmt_num(d.get('refill_gap_ns_p90'))}",
              _pct(d.get("refill_fifo_agreement")))
    return t


def occupancy_table(summary: dict) -> ReportTable | None:
    occ = summary.get("occupancy") or {}
    if not occ:
        return None
    t = ReportTable("behaviour-occupancy", "Occupancy: resident blocks and warps per SM, measured vs the CUDA rules",
                    ["configuration", "threads", "registers", "shared memory", "blocks (measured / rules)",
                     "warps (measured / rules)", "limited by", "match"],
                    code=(0,), numeric=(1, 2, 3), scroll=True)
    for name, v in occ.items():
        smem = v.get("smem")
        match = v.get("predicted_warps") is not None and v.get("measured_warps") == v.get("predicted_warps")
        t.add(Cell(name), Cell(fmt_num(v.get("threads")), v.get("threads")),
              Cell(fmt_num(v.get("regs")), v.get("regs")),
              Cell(fmt_bytes(smem) if smem is not None else "-", smem),
              f"{fmt_num(v.get('measured_blocks'))} / {fmt_num(v.get('predicted_blocks'))}",
              f"{fmt_num(v.get('measured_warps'))} / {fmt_num(v.get('predicted_warps'))}",
              ", ".join(v.get("limiters") or []) or "-", Cell("yes" if match else "NO", cls="" if match else "flags"))
    return t


def pipes_table(summary: dict) -> ReportTable | None:
    pairs = (summary.get("pipes") or {}).get("pairs") or {}
    if not pairs:
        return None
    t = ReportTable("behaviour-pipes", "Pipes: pairs of instruction streams run together",
                    ["pair", "verdict", "position (0 compete, 1 add), per launch", "rate together per launch",
                     "add / compete prediction", "issue limit"],
                    note="Rates in warp-instructions per clock per SM. The pair's rate lies between what two "
                         "streams on one pipe (compete) and on separate pipes (add, within the issue limit) "
                         "would reach; each launch decides on its own, the verdict is stated when all agree.",
                    code=(0,), scroll=True)
    for name, v in pairs.items():
        per = v.get("per_launch") or []
        p0 = per[0] if per else {}
        verdict = v.get("verdict") if v.get("agreed", True) else f"undetermined ({v.get('why')})"
        t.add(Cell(name), verdict or "-", ", ".join(fmt_num(d.get("position"), 3) for d in per) or "-",
              ", ".join(fmt_num(d.get("rate"), 4) for d in per) or "-",
              f"{fmt_num(p0.get('add'), 4)} / {fmt_num(p0.get('compete'), 4)}", fmt_num(p0.get("issue_limit"), 4))
    return t


def _hist(h: dict | None) -> str:
    """SMs per blocks-on-an-SM count (mean over launches), e.g. '0:2 1:130'."""
    return " ".join(f"{k}:{fmt_num(v, 4)}" for k, v in (h or {}).items()) or "-"


def fairness_rows(summary: dict) -> list[dict]:
    """One row per fairness configuration: the per-SM histogram, fairness, repeats, waves."""
    conf = (summary.get("fairness") or {}).get("configurations") or {}
    rows = []
    for name, c in conf.items():
        rows.append({
            "configuration": name, "grid": c.get("grid"), "regs": c.get("regs"),
            "smem KiB": (c.get("smem") or 0) // 1024,
            "blocks/SM (rules)": c.get("rules_blocks_per_sm"),
            "SMs with k blocks (k:SMs, mean)": _hist(c.get("mean_histogram")),
            "fair launches": _pct(c.get("fair_share")),
            "busiest / fair": f"{fmt_num(c.get('max'))} / {fmt_num(c.get('fair_max'))}",
            "loss (max)": _pct(c.get("loss_max")),
            "waves (fair)": f"{c.get('waves')} ({fmt_num(c.get('fair_waves'))})",
            "refill took first-freed": _pct(c.get("refill_first_freed_share")),
            "distinct maps": f"{fmt_num(c.get('distinct_maps'))} of {fmt_num(c.get('launches'))}",
            "same SM": _pct(c.get("same_sm_share")),
            "equal work": "-" if c.get("equal_work") is None else (
                "yes" if c["equal_work"] else f"NO ({fmt_num(c.get('outlive_max'), 3)}x)")})
    return rows


def fairness_table(summary: dict) -> ReportTable | None:
    rows = fairness_rows(summary)
    if not rows:
        return None
    t = ReportTable("behaviour-fairness", "Block -> SM fairness and determinism over repeated launches",
                    list(rows[0]),
                    note="Each configuration launched repeatedly with the same input; every block spins the same "
                         "number of SM cycles. Fair: every SM (idle ones included) gets floor or ceil of grid/SMs "
                         "blocks. Loss: 1 - fair/busiest, the makespan lost by blocks that each need the SM's "
                         "throughput. Same SM: each block's share of launches on its commonest SM. Equal work: "
                         "the premise of the verdict (every block's window alike, the launch no longer than its "
                         "waves x a block; NO: the makespan over that, the loads may follow the blocks' lengths).",
                    code=(0,), numeric=(1, 2, 3, 4), scroll=True)
    for r in rows:
        t.add(Cell(r["configuration"]), *[v for k, v in r.items() if k != "configuration"])
    return t


def markdown_section(summary: dict) -> list[str]:
    """The timing reference's block -> SM fairness section (a table per configuration and the
    groups of configurations by what may explain their fairness)."""
    rows = fairness_rows(summary)
    if not rows:
        return []
    cols = list(rows[0])
    L = ["### Block -> SM fairness over repeated launches", "",
         "Per configuration (grid, registers per thread, shared memory per block, 256 threads), launched "
         "repeatedly with the same input: SMs with k blocks (mean over launches, idle SMs as k = 0), the share "
         "of launches that were fair (every SM floor or ceil of grid/SMs), the busiest SM against the fair "
         "number and the work-bound makespan lost, waves, and how often the exact placement repeated.", "",
         "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    L += ["| " + " | ".join(str(r[c]).replace("|", "\\|") for c in cols) + " |" for r in rows]
    groups = (summary.get("fairness") or {}).get("when_fair") or {}
    if groups:
        L += ["", "| group | configurations | fair in every launch | same map every launch |", "|---|---:|---:|---:|"]
        L += [f"| {g} | {d['configurations']} | {d['fair']} | {d['deterministic']} |" for g, d in groups.items()]
    return L + [""]


def report_section(doc: dict, rs) -> dict:
    summary = doc.get("summary") or {}
    tables = [t for t in (dispatch_table(summary), fairness_table(summary), occupancy_table(summary),
                          pipes_table(summary), efficacy_report_table(rs)) if t]
    return {"key_tables": [verdicts_table(summary)], "tables": tables}


# ----------------------------------------------------------------- the timing reference
def _occupancy_lines(ctx: TimingContext) -> list[str]:
    rs = ctx.rs
    L: list[str] = ["## Occupancy table", ""]
    occ = find_key(summary_of(rs, "behaviour"), "occupancy", "occupancy_table")
    if occ:
        L += ["Resident warps per SM against registers per thread and shared memory per block, "
              "measured by launching and observing residency (behaviour suite).", ""]
        L += structured(occ, "config")
        L += conclusions(rs, "behaviour", ("occupancy", "resident"))
        L.append("")
    else:
        L += [f"{NOT_MEASURED} (no occupancy table in the behaviour suite's results).", ""]

    return L


def _scheduling_lines(ctx: TimingContext) -> list[str]:
    rs = ctx.rs
    L: list[str] = ["## Instruction scheduling and issue rules", ""]
    beh = summary_of(rs, "behaviour")
    found = False
    for key in ("pipes", "scheduler", "scheduling", "issue"):
        v = find_key(beh, key)
        if v:
            L += [f"### {key.replace('_', ' ')}", ""] + structured(v, key)
            found = True
    bc = conclusions(rs, "behaviour")
    if bc:
        L += bc + [""]
        found = True
    if not found:
        L += [f"Pipe sharing, scheduler policy and dual issue: {NOT_MEASURED} (behaviour suite).", ""]
    return L


def banks_lines(beh: dict, arch: str | None = None) -> list[str]:
    """The register banks and the reuse cache (``banks:ffma``) and the instruction-fetch levels
    (``icache:<W>w``) as tables: what one warp's FFMAs cost with their sources patched in the
    cubin, and per warp count the cycles per FFMA against the code's size."""
    L: list[str] = []
    b = beh.get("banks") or {}
    if b.get("base_cycles") is not None:
        base, extra = b["base_cycles"], b.get("conflict_cycles")
        reuse = b.get("reuse_same_bank") or {}
        regs = b.get("reuse_registers") or []
        L += ["### Register banks and the reuse cache", "",
              f"Measured rule: {b.get('rule') or 'none of index mod 2, 4, 8'} ({b.get('banks')} groups of registers whose "
              f"pair conflicts: {b.get('groups')}). One warp of FFMAs, every FFMA's sources patched in the cubin "
              "(behaviour `banks:ffma`); the reuse flag set on the slot in every FFMA, so each reads it from the cache "
              "the one before filled.", "",
              "| sources of each FFMA | cycles per FFMA |", "|---|---:|",
              f"| two registers, no conflict (the cheapest pair) | {fmt_num(base, 3)} |",
              f"| two registers in one bank (the dearest pair) | {fmt_num(base + extra if extra is not None else None, 3)} |"]
        names = {"none": "no reuse flag", "a": "reuse flag on slot a", "b": "reuse flag on slot b",
                 "c": "reuse flag on slot c", "a+b": "reuse flags on slots a and b"}
        for k, v in reuse.items():
            L.append(f"| three registers in one bank ({', '.join(f'R{r}' for r in regs)}), {names.get(k, k)} | "
                     f"{fmt_num(v, 3)} |")
        if arch:
            on = (arch_table(arch, "predict").get("banks") or {}).get("apply")
            L += ["", f"Model v1 of `gpudissect predict` {'applies' if on else 'holds but does not apply'} this rule on "
                  f"{arch} (`[banks]` of its predict.toml, which says why)."]
        L.append("")
    ic = beh.get("icache") or {}
    if ic:
        L += ["### Instruction fetch levels", "",
              "Loops over straight-line FFMA regions of growing size (the code bytes of the timed region), warm "
              "passes: the levels are the runs of sizes whose cycles per FFMA stay within the rise of the "
              "smallest; a level's capacity lies between its largest size and the next.", "",
              "| probe | level | from | to | next size (slower) | cycles per FFMA |", "|---|---:|---:|---:|---:|---:|"]
        for name, d in ic.items():
            for k, lv in enumerate(d.get("levels") or [], 1):
                L.append(f"| {name} | {k} | {fmt_bytes(lv['from_bytes'])} | {fmt_bytes(lv['to_bytes'])} | "
                         f"{fmt_bytes(lv['next_bytes']) if lv.get('next_bytes') else '-'} | {fmt_num(lv['cpi'], 4)} |")
        L.append("")
    return L


def _banks_section(ctx: TimingContext) -> list[str]:
    return banks_lines(summary_of(ctx.rs, "behaviour") or {}, ctx.rs.provenance().get("arch"))


def _placement_lines(ctx: TimingContext) -> list[str]:
    """The block dispatch dumps and the block -> SM fairness table: long, with the raw dumps
    at the end of the timing reference (their verdicts are among the scheduling section's
    conclusions)."""
    beh = summary_of(ctx.rs, "behaviour")
    dispatch = find_key(beh, "dispatch")
    fair = markdown_section(beh)  # the suite's own section: block -> SM fairness
    if not dispatch and not fair:
        return []
    L: list[str] = ["## Block dispatch and block -> SM placement", "",
                    "The behaviour suite's dispatch probes as stored, then the fairness of the "
                    "placement over repeated launches (the verdicts: the conclusions of the "
                    "scheduling section).", ""]
    if dispatch:
        L += ["### dispatch", ""] + structured(dispatch, "dispatch")
    return L + fair


# where the sections stand (report/present/markdown.py TimingSection): the tables after the
# instruction table (the instruction suite's order 1), the long dumps last
TIMING_SECTIONS = (TimingSection(10, _occupancy_lines), TimingSection(20, _scheduling_lines),
                   TimingSection(21, _banks_section), TimingSection(120, _placement_lines))


EFFICACY_NOTE = ("the same work (independent chains of one instruction) as the suite's verified PTX kernel and as "
                 "CUDA C++ built by `nvcc -O3` (a loop, nvcc's unrolling and registers), timed by the same harness, "
                 "one block per SM; efficacy = nvcc rate / verified rate")


def efficacy_rows(rs: ResultSet | None) -> list[dict]:
    """One row per measured point of the behaviour suite's ``efficacy`` results."""
    recs = [r for r in rs.records("behaviour") if r.get("measure") == "efficacy"] if rs is not None else []
    rows = []
    for r in sorted(recs, key=lambda r: (r["params"]["variant"], r["params"]["warps"], r["params"]["chains"])):
        p, fit = r["params"], r.get("fit") or {}
        v, n = fit.get("verified") or {}, fit.get("nvcc") or {}
        ops = ", ".join(f"{k} {c}" for k, c in sorted((n.get("region_ops") or {}).items(), key=lambda x: -x[1]))
        rows.append({"variant": p["variant"], "warps x chains": f"{p['warps']} x {p['chains']}",
                     "verified rate": v.get("rate"), "nvcc rate": n.get("rate"), "efficacy": r.get("value"),
                     "registers (verified / nvcc)": f"{v.get('regs', '-')} / {n.get('regs', '-')}",
                     "nvcc's region": ops, "flags": ", ".join(r.get("flags") or [])})
    return rows


def efficiency_lines(rs: ResultSet) -> list[str]:
    """The suite's part of the timing reference's efficiency section (advise/report.py): the
    compiler efficacy of its ``efficacy:*`` probes."""
    return efficacy_table(rs)


def efficacy_table(rs: ResultSet) -> list[str]:
    rows = efficacy_rows(rs)
    if not rows:
        return []
    L = [f"Compiler efficacy (behaviour suite, `efficacy:*`): {EFFICACY_NOTE}.", "",
         "| " + " | ".join(rows[0]) + " |", "|---|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        region = r["nvcc's region"]
        L.append(f"| `{r['variant']}` | {r['warps x chains']} | {fmt_num(r['verified rate'])} | "
                 f"{fmt_num(r['nvcc rate'])} | {fmt_num(r['efficacy'], 3)} | {r['registers (verified / nvcc)']} | "
                 f"{region} | {r['flags']} |")
    vals = [r["efficacy"] for r in rows if r["efficacy"] is not None]
    if vals:
        L += ["", f"Efficacy over the {len(vals)} points: {min(vals):.3f} to {max(vals):.3f} "
              f"(median {statistics.median(vals):.3f})."]
    return L + [""]


def efficacy_report_table(rs: ResultSet | None) -> ReportTable | None:
    """The HTML report's table of the compiler efficacy (in the behaviour suite's section)."""
    rows = efficacy_rows(rs)
    if not rows:
        return None
    t = ReportTable("behaviour-efficacy", "Compiler efficacy: nvcc-built CUDA C++ against the verified PTX kernel",
                    list(rows[0]), note=EFFICACY_NOTE[:1].upper() + EFFICACY_NOTE[1:] + ".",
                    code=(0, 6), numeric=(2, 3, 4), wrap=(6, 7))
    for r in rows:
        t.add(Cell(r["variant"]), r["warps x chains"], Cell(fmt_num(r["verified rate"]), r["verified rate"]),
              Cell(fmt_num(r["nvcc rate"]), r["nvcc rate"]), Cell(fmt_num(r["efficacy"], 3), r["efficacy"]),
              r["registers (verified / nvcc)"], r["nvcc's region"], r["flags"])
    return t
