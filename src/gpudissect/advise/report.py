"""The efficiency section of the timing reference: efficiency losses per variant, their
distribution over every measured variant, the compiler's efficacy, and the block-placement
check of register padding (all from the results; nothing here is measured or assumed)."""

from __future__ import annotations

import statistics

from gpudissect.advise import efficiency as ef
from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.read.results import ResultSet
from gpudissect.suites import SUITES, suite_module

MIN_CELLS = 3  # a variant's distribution needs at least this many clean configurations


def variant_cells(rs: ResultSet) -> dict[str, tuple[list[ef.Cell], str]]:
    """Every instruction variant's cells: its grid where there is one, else its throughput records."""
    from gpudissect.advise.advise import variant_cells as cells_of

    by: dict[str, list[dict]] = {}
    for r in rs.records("instructions"):
        if r.get("measure") in ("grid", "throughput"):
            by.setdefault(r["variant"], []).append(r)
    out = {}
    for v, recs in by.items():
        cells, what = cells_of(recs)
        if cells:
            out[v] = (cells, "grid" if what.startswith("the warps x distance grid") else "throughput")
    return out


def _label(d: dict | None) -> str:
    return "-" if not d else f"{d['warps']} x {d['chains']}"


def variant_table(cells: dict[str, tuple[list[ef.Cell], str]]) -> list[str]:
    st = ef.settings()
    levels = [f"{lv:.0%}" for lv in st["within"]]
    L = ["| variant | from | configurations | max rate (at warps x chains) | fewest warps within "
         f"{1 - st['reach']:.0%} (x chains) | " + " | ".join(f"within {lv}" for lv in levels)
         + " | worst (efficiency) |", "|---|---|---:|---|---|" + "---:|" * len(levels) + "---|"]
    shown = [v for v in st["reference_variants"] if v in cells]
    if not shown:
        return []
    for v in shown:
        cs, src = cells[v]
        d = ef.distribution(cs)
        w = d["worst"][0] if d["worst"] else None
        worst = f"{_label(w)}: {w['efficiency']:.0%}" if w else "-"
        L.append(f"| `{v}` | {src} | {d['cells']} | {fmt_num(d['max_rate'])} ({_label(d['max_at'])}) | "
                 f"{_label(d['fewest_warps'])} | " + " | ".join(f"{d['within'][lv]:.0%}" for lv in levels)
                 + f" | {worst} |")
    return L + [""]


def matrix_tables(cells: dict[str, tuple[list[ef.Cell], str]]) -> list[str]:
    """The efficiency of every cell of the reference variants' grids (rows: warps per SM,
    columns: the dependence distance), as the thesis's Table 8.4."""
    L: list[str] = []
    for v in ef.settings()["reference_variants"]:
        if v not in cells or cells[v][1] != "grid":
            continue
        ws, ks, eff = ef.efficiency_matrix(cells[v][0])
        top = ef.best(cells[v][0])
        L += [f"`{v}`: efficiency (% of {fmt_num(top.rate)} warp-instr/clk/SM) by warps per SM (rows) and "
              "dependence distance (columns), from its grid:", "",
              "| warps | " + " | ".join(f"d={k}" for k in ks) + " |", "|---:|" + "---:|" * len(ks)]
        for w in ws:
            L.append(f"| {w} | " + " | ".join(f"{eff[(w, k)]:.0%}" if (w, k) in eff else "-" for k in ks) + " |")
        L.append("")
    return L


def overall_lines(cells: dict[str, tuple[list[ef.Cell], str]]) -> list[str]:
    ds = [ef.distribution(cs) for cs, _src in cells.values() if len(cs) >= MIN_CELLS]
    if not ds:
        return []
    st = ef.settings()
    fw = [d["fewest_warps"]["warps"] for d in ds if d["fewest_warps"]]
    within = {lv: statistics.median(d["within"][lv] for d in ds) for lv in ds[0]["within"]}
    lost = sum(1 for d in ds if d["worst"] and d["worst"][0]["efficiency"] < 0.5)
    return [f"Over the {len(ds)} variants with at least {MIN_CELLS} clean configurations: the median share of "
            "configurations within " + ", ".join(f"{k}: {v:.0%}" for k, v in within.items())
            + f" of the variant's maximum; the fewest warps per SM within {1 - st['reach']:.0%} of it: median "
            f"{fmt_num(statistics.median(fw)) if fw else '-'} (range {min(fw) if fw else '-'}-"
            f"{max(fw) if fw else '-'}); {lost} variants have a configuration losing more than half their "
            "maximum.", ""]


def padding_table(rs: ResultSet) -> list[str]:
    from gpudissect.advise.advise import rules_arch
    from gpudissect.arch.occupancy import occupancy_rules
    from gpudissect.arch.target import make_target

    recs = [r for r in rs.records("behaviour") if r.get("measure") == "fairness"]
    prov = rs.provenance()
    nsm = int(prov.get("sm_count") or 0)
    if not recs or nsm < 1 or not prov.get("arch"):  # the rules are the architecture's
        return []
    rows = ef.padding_check(recs, occupancy_rules(make_target(rules_arch(prov["arch"]))), nsm)
    if not rows:
        return []
    L = ["Block placement against the occupancy rules (behaviour `fairness`): where the rules allow no more "
         "than ceil(grid / SMs) blocks on an SM in one wave (what register padding arranges), no SM can "
         "get more; elsewhere the most blocks one SM got in any launch:", "",
         "| configuration | grid | blocks/SM (rules) | fair share | guaranteed by the rules | most on one SM | "
         "losses per launch | agrees |", "|---|---:|---:|---:|---|---:|---|---|"]
    for r in rows:
        L.append(f"| {r['config']} | {r['grid']} | {r['blocks_per_sm']} | {r['fair_max']} | "
                 f"{'yes' if r['guaranteed'] else 'no'} | {r['max_load']} | "
                 f"{', '.join(fmt_num(x) for x in r['losses'][:10])} | "
                 f"{'-' if r['agrees'] is None else ('yes' if r['agrees'] else 'NO')} |")
    return L + [""]


def efficiency_section(rs: ResultSet) -> list[str]:
    """The section (empty when the results hold nothing it uses)."""
    cells = variant_cells(rs)
    body = []
    if cells:
        body += ["Efficiency of a launch configuration = its rate / the variant's maximum over its measured "
                 "configurations (warps per SM x independent chains per thread: the warps x distance grid where "
                 "measured, else the throughput records). `gpudissect advise VARIANT` states the configurations "
                 "and losses of one variant; `gpudissect advise KERNEL` the occupancy and per-loop advice of a "
                 "cubin or PTX file.", ""]
        body += variant_table(cells) + overall_lines(cells) + matrix_tables(cells)
    for name in SUITES:  # a suite's own part (the behaviour suite: the compiler efficacy)
        own = getattr(suite_module(name, "view"), "efficiency_lines", None)
        body += own(rs) if own else []
    body += padding_table(rs)
    return ["## Efficiency losses and compiler efficacy", "", *body] if body else []
