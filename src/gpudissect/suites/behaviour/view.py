"""The behaviour suite's part of the HTML report, from its summary: one verdict per probe
(dispatch, occupancy, schedulers, warp issue order, pipes) with the numbers behind it, then
the tables of each probe. Values as the suite stored them; '-' where it stored none."""

from __future__ import annotations

from gpudissect.report.fmt import fmt_bytes, fmt_num
from gpudissect.report.tabular import Cell, ReportTable


def _yes(v) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _pct(v) -> str:
    return "-" if v is None else f"{fmt_num(100 * v, 3)}%"


def _occupancy_counts(occ: dict) -> tuple[int, int, list[str]]:
    """(configurations compared, matching, names of those that differ)."""
    known = {k: v for k, v in occ.items() if v.get("predicted_warps") is not None}
    off = [k for k, v in known.items() if v.get("measured_warps") != v.get("predicted_warps")]
    return len(known), len(known) - len(off), off


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
        n, ok, off = _occupancy_counts(occ)
        t.add(Cell("occupancy"), f"{ok} of {n} configurations match the CUDA occupancy rules",
              ("differ: " + ", ".join(off)) if off else "resident warps per SM measured = predicted in every one")
    pairs = (summary.get("scheduler") or {}).get("pairs") or {}
    if pairs:
        t.add(Cell("schedulers"), f"{fmt_num(pairs.get('schedulers'))} schedulers per SM: {pairs.get('rule') or '-'}",
              f"pair slowdown {fmt_num(pairs.get('slowdown_competing'))} (same group) vs "
              f"{fmt_num(pairs.get('slowdown_other'))} (different); groups {pairs.get('groups') or '-'}")
    order = (summary.get("scheduler") or {}).get("order") or {}
    if order:
        t.add(Cell("warp issue order"), order.get("policy") or "-",
              f"span overlap {fmt_num(order.get('span_overlap_median'))}, mean run "
              f"{fmt_num(order.get('mean_run_median'))}, finish order tau {fmt_num(order.get('finish_order_tau'))}")
    pipes = summary.get("pipes") or {}
    if pipes.get("groups"):
        t.add(Cell("pipes"), "groups that compete: " + "; ".join(" + ".join(g) for g in pipes["groups"]),
              f"{len(pipes.get('pairs') or {})} pairs timed (table below)")
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
                    ["pair", "verdict", "added time / shorter solo time", "issue per scheduler (warp-instr/clk)",
                     "cycles together", "cycles of each alone"],
                    note="0: the pair overlaps fully (separate pipes); 1: it serialises (one shared pipe).",
                    code=(0,), numeric=(2, 3, 4), scroll=True)
    for name, v in pairs.items():
        solo = v.get("solo_cycles") or []
        t.add(Cell(name), v.get("verdict") or "-", Cell(fmt_num(v.get("share"), 3), v.get("share")),
              Cell(fmt_num(v.get("issue_per_scheduler"), 3), v.get("issue_per_scheduler")),
              Cell(fmt_num(v.get("cycles")), v.get("cycles")), ", ".join(fmt_num(x) for x in solo) or "-")
    return t


def report_section(doc: dict, rs) -> dict:
    summary = doc.get("summary") or {}
    tables = [t for t in (dispatch_table(summary), occupancy_table(summary), pipes_table(summary)) if t]
    return {"key_tables": [verdicts_table(summary)], "tables": tables}
