"""``gpudissect advise VARIANT|KERNEL``: the launch configurations that reach a maximum rate and
what is lost outside them, every statement with the numbers (and records) behind it.

* VARIANT (a variant measured in the data): its cells (``efficiency.Cell``: the warps x
  distance grid where the data has one, else the throughput records per (chains, warps)), the
  maximum, the configurations within ``reach`` of it and the fewest warps that do, per chain
  count; the split of those warps into warps per block x blocks per SM the occupancy rules
  allow; the loss of every other configuration and their distribution; what a launch of one
  block per SM loses to an unfair placement and the register padding that prevents it (checked
  against measured placements where the data has them); the compiler's efficacy where measured.
* KERNEL (a cubin, PTX file or SASS listing, read as ``predict`` reads it): its registers and
  shared memory, the occupancy the rules give per block size, and per innermost loop the
  predicted rate (``predict.model``) against warps per SM: the fewest warps within ``reach``
  of the best, and what binds there and at one warp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpudissect.advise import AdviseError
from gpudissect.advise import efficiency as ef
from gpudissect.predict.memory import L1_LINES, Where
from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.read.results import LoadError, ResultSet, load_result_set

SPLIT_MAX = 6  # warps-per-block x blocks-per-SM splits listed per statement


@dataclass
class Data:
    rs: ResultSet
    source: str
    gpu: str
    arch: str
    nsm: int
    rules: dict


def load(spec: Path, default_arch: str | None = None) -> Data:
    """The data directory (or suite JSON / database) and the occupancy rules of its GPU
    (``default_arch``: the architecture of data whose provenance names none)."""
    from gpudissect.arch.occupancy import occupancy_rules
    from gpudissect.arch.target import TargetError, make_target

    try:
        rs = load_result_set(spec)
    except (LoadError, OSError) as e:
        raise AdviseError(f"--data {spec}: {e}") from None
    prov = rs.provenance()
    arch = prov.get("arch") or default_arch
    nsm = int(prov.get("sm_count") or 0)
    if nsm < 1:
        raise AdviseError(f"--data {spec}: the data names no SM count (provenance sm_count)")
    if not arch:
        raise AdviseError(f"--data {spec}: the data names no architecture (provenance arch)")
    try:
        rules = occupancy_rules(make_target(arch))
    except TargetError as e:
        raise AdviseError(f"--data {spec}: {e}") from None
    return Data(rs, str(spec), rs.gpu, arch, nsm, rules)


def variant_records(d: Data, name: str) -> list[dict]:
    return [r for r in d.rs.records() if r.get("variant") == name]


def variant_cells(recs: list[dict]) -> tuple[list[ef.Cell], str]:
    """The cells of a variant: its grid when the data has a clean one, else its throughput
    records; and which."""
    grid = next((r for r in recs if r.get("measure") == "grid" and r.get("value") is not None), None)
    if grid is not None:
        cells = ef.cells_from_grid(grid)
        if cells:
            return cells, "the warps x distance grid (record `grid`, instructions suite)"
    return ef.cells_from_throughput(recs), "the throughput records per (chains, warps) (instructions suite)"


def _pct(x: float) -> str:
    whole = abs(x * 100 - round(x * 100)) < 1e-9
    return f"{x:.0%}" if x >= 0.1 or whole else f"{x:.1%}"


def _cell(c: ef.Cell, top: float) -> str:
    return f"{c.label}: {fmt_num(c.rate)} ({_pct(c.rate / top)} of max) [{c.source}]"


def splits(warps: int, rules: dict) -> list[tuple[int, int]]:
    """(warps per block, blocks per SM) with their product ``warps`` that the rules allow
    (threads and blocks per SM; registers and shared memory are the kernel's)."""
    out = []
    for wpb in range(warps, 0, -1):
        if warps % wpb:
            continue
        bps = warps // wpb
        if wpb * 32 <= rules["max_threads_per_block"] and bps <= rules["max_blocks_per_sm"]:
            out.append((wpb, bps))
    return out


def _split_text(warps: int, rules: dict) -> str:
    ss = splits(warps, rules)
    shown = ", ".join(f"{w} x {b}" for w, b in ss[:SPLIT_MAX]) + (", ..." if len(ss) > SPLIT_MAX else "")
    return f"{warps} warps per SM = warps per block x blocks per SM: {shown}"


def reach_lines(cells: list[ef.Cell], rules: dict) -> list[str]:
    """The configurations within reach of the maximum, the fewest warps overall and per chain
    count, and the splits of the fewest warps into blocks."""
    st = ef.settings()
    top = ef.best(cells)
    ok = ef.reaching(cells)
    L = [f"- maximum: {fmt_num(top.rate)} warp-instr/clk/SM at {top.label} per thread [{top.source}]",
         f"- within {_pct(1 - st['reach'])} of it (>= {fmt_num(st['reach'] * top.rate)}): {len(ok)} of "
         f"{len(cells)} configurations: " + "; ".join(_cell(c, top.rate) for c in ok)]
    if ok:
        f = ok[0]
        L.append(f"- the fewest warps that reach it: {f.warps} per SM with {f.chains} independent chains per "
                 f"thread ({_cell(f, top.rate)}); {_split_text(f.warps, rules)} (measured as {f.blocks} block"
                 f"{'s' if f.blocks != 1 else ''} of {f.warps // f.blocks} warps per SM; that other splits "
                 "share the SM's schedulers alike is assumed, not measured here)")
    for k in sorted({c.chains for c in cells}):
        mine = [c for c in cells if c.chains == k]
        r = [c for c in ok if c.chains == k]
        if r:
            L.append(f"  - {k} chain{'s' if k != 1 else ''} per thread: from {r[0].warps} warps per SM "
                     f"({_cell(r[0], top.rate)})")
        else:
            b = ef.best(mine)
            L.append(f"  - {k} chain{'s' if k != 1 else ''} per thread: never within the measured warps "
                     f"({', '.join(str(c.warps) for c in sorted(mine, key=lambda c: c.warps))}); best "
                     f"{_cell(b, top.rate)}")
    return L


def loss_lines(cells: list[ef.Cell]) -> list[str]:
    top = ef.best(cells)
    dist = ef.distribution(cells)
    below = sorted((c for c in cells if c.rate < ef.settings()["reach"] * top.rate),
                   key=lambda c: (c.rate, c.warps, c.chains))
    L = [f"- lost outside ({len(below)} configurations): " + ("; ".join(_cell(c, top.rate) for c in below)
                                                            or "none")]
    w = dist["within"]
    L.append(f"- distribution over the {dist['cells']} configurations: "
             + ", ".join(f"{v:.0%} within {k}" for k, v in w.items())
             + f" of the maximum; mean efficiency {dist['mean_efficiency']:.0%}; losses: "
             + ", ".join(f"{h['loss']}: {h['cells']}" for h in dist["loss_histogram"]))
    return L


def launch_lines(d: Data, cells: list[ef.Cell], recs: list[dict]) -> list[str]:
    """One block per SM of the fewest warps that reach the maximum: fair, the worst an unfair
    placement can do under the rules, the padding that prevents it, the measured placements."""
    ok = ef.reaching(cells)
    if not ok:
        return []
    f = ok[0]
    threads = f.warps * 32
    if threads > d.rules["max_threads_per_block"]:
        return []
    nsm = d.nsm

    def rate(w: int) -> float:
        c = ef.rate_at(cells, w, f.chains)
        return c.rate if c is not None else min(x.rate for x in cells if x.chains == f.chains)

    L = []
    for blocks in (nsm, nsm + 1):
        fair = ef.launch_efficiency(blocks, threads, 0, 0, d.rules, nsm, rate=rate)
        L.append(f"- {blocks} blocks of {f.warps} warps ({f.chains} chains per thread) on {nsm} SMs, placed "
                 f"fairly: the busiest SM holds {fair['max_load']}, {fair['waves']} wave(s); efficiency "
                 f"{_pct(fair['efficiency'])} of the ideal (blocks of equal work; SM rate by warps from the "
                 f"cells at {f.chains} chains)")
    pad = ef.padding(nsm, threads, 0, 0, d.rules, nsm)
    if pad.get("needed"):
        per = pad["blocks_per_sm"]
        worst = ef.launch_efficiency(nsm, threads, 0, 0, d.rules, nsm, loads=ef.stacked_loads(nsm, per, nsm),
                                     rate=rate)
        cure = (f"pad registers to {pad['padded_regs']} per thread (rules: {pad.get('padded_blocks_per_sm')} "
                "block per SM)" if pad.get("padded_regs") else
                f"no register count up to {d.rules['max_regs_per_thread']} per thread brings blocks of "
                f"{f.warps} warps to {pad['fair_max']} per SM")
        if not pad.get("padded_regs"):
            mw = ef.min_paddable_warps(nsm, f.warps, 0, 0, d.rules, nsm)
            cure += f" (register padding needs blocks of at least {mw} warps)" if mw else ""
        if pad.get("padded_smem"):
            cure += f"; or dynamic shared memory of {pad['padded_smem']} B per block"
        L.append(f"- {nsm} blocks: the rules allow {per} such blocks per SM (limit: {'/'.join(pad['limiters'])}), "
                 f"so nothing in them forbids stacking: {per} per SM on {-(-nsm // per)} SMs, the rest idle, "
                 f"gives {_pct(worst['efficiency'])} (the placement alone: "
                 f"{_pct(pad['worst_case_efficiency'])}); the cure: {cure}")
    L += fairness_lines(d)
    return L


def fairness_lines(d: Data) -> list[str]:
    recs = [r for r in d.rs.records("behaviour") if r.get("measure") == "fairness"]
    rows = ef.padding_check(recs, d.rules, d.nsm)
    if not rows:
        return ["- block placement: not measured in this data (behaviour `fairness` probes)"]
    g = [r for r in rows if r["guaranteed"]]
    agree = sum(1 for r in g if r["agrees"])
    unfair = [r for r in rows if r["max_load"] > r["fair_max"]]
    L = [f"- measured placements (behaviour `fairness`, {len(rows)} configurations): {len(unfair)} put more than "
         f"ceil(grid / SMs) blocks on some SM in some launch"
         + (f" (e.g. {unfair[0]['config']}: {unfair[0]['max_load']} vs {unfair[0]['fair_max']}, losses per launch "
            f"{unfair[0]['losses']})" if unfair else "")
         + f"; where the rules leave no room above the fair share ({len(g)} configurations) the measurement "
         f"agrees in {agree}"]
    return L


def efficacy_lines(d: Data, name: str) -> list[str]:
    recs = [r for r in d.rs.records("behaviour") if r.get("measure") == "efficacy"
            and (r.get("params") or {}).get("variant") == name]
    if not recs:
        return []
    parts = []
    for r in sorted(recs, key=lambda r: (r["params"]["warps"], r["params"]["chains"])):
        p, fit = r["params"], r.get("fit") or {}
        v = "-" if r.get("value") is None else f"{r['value']:.3f}"
        parts.append(f"{p['warps']} warps x {p['chains']} chains: {v} ({fmt_num((fit.get('nvcc') or {}).get('rate'))}"
                     f" / {fmt_num((fit.get('verified') or {}).get('rate'))})")
    return [f"- compiler efficacy (behaviour `{recs[0]['variant']}`: nvcc-built CUDA C of the same work / the "
            "verified PTX kernel, rate over rate): " + "; ".join(parts)]


def variant_lines(d: Data, name: str) -> list[str]:
    recs = variant_records(d, name)
    cells, what = variant_cells(recs)
    if not cells:
        raise AdviseError(f"'{name}': no clean throughput or grid record in {d.source} (flagged or not timed)")
    L = [f"{name} on {d.gpu} ({d.nsm} SMs, {d.arch}), from {what} of {d.source}: {len(cells)} configurations "
         "(warps per SM x independent chains per thread)"]
    peak = next((r for r in recs if r.get("measure") == "throughput_peak" and r.get("value") is not None), None)
    grid = next((r for r in recs if r.get("measure") == "grid" and r.get("value") is not None), None)
    L += reach_lines(cells, d.rules)
    if peak is not None:
        L.append(f"  (record throughput_peak: {fmt_num(peak['value'])}, bound "
                 f"{(peak.get('params') or {}).get('bound', '?')})")
    if grid is not None:
        g = grid.get("params") or {}
        mnw = g.get("min_warps") or {}
        L.append(f"  (record grid: max_rate {fmt_num(g.get('max_rate'))}, fewest warps within its own tolerance "
                 f"{mnw.get('warps', '-')} at d={mnw.get('distance', '-')}, warp latency "
                 f"{fmt_num(g.get('warp_latency_cycles'))} cycles, {len(g.get('instabilities') or [])} local "
                 f"instabilities; flags: {', '.join(grid.get('flags') or []) or 'none'})")
    L += loss_lines(cells)
    L += launch_lines(d, cells, recs)
    L += efficacy_lines(d, name)
    return L


# ----------------------------------------------------------------- a kernel
REG_RE = re.compile(r"\bR(\d+)\b")


def kernel_resources(path: Path, kind: str, arch: str) -> dict[str, dict]:
    """Registers per thread and static shared memory per kernel: cuobjdump's resource usage of
    the cubin (a PTX file compiled as ``predict`` compiles it); for a SASS listing, registers
    estimated from the highest register named (+1) and shared memory unknown."""
    from gpudissect.kernel.toolchain import compile_ptx, resource_usage

    if kind == "sass":
        return {}
    raw = path.read_bytes()
    cubin = raw if kind == "cubin" else compile_ptx(raw.decode(), arch=arch).cubin
    return {k: {"regs": u.get("REG", 0), "smem": u.get("SHARED", 0), "source": "cuobjdump -res-usage"}
            for k, u in resource_usage(cubin).items()}


def estimated_regs(body) -> int:
    return max((int(m) for i in body for op in i.operands for m in REG_RE.findall(op)), default=-1) + 1


def occupancy_text(regs: int, smem: int, rules: dict) -> str:
    from gpudissect.arch.occupancy import predict_blocks

    parts = []
    for t in (64, 128, 256, 512, 1024):
        p = predict_blocks(t, regs, smem, rules)
        parts.append(f"{t} threads: {p['blocks']} blocks = {p['warps']} warps ({'/'.join(p['limiters'])})")
    return "; ".join(parts)


def max_warps(regs: int, smem: int, rules: dict) -> int:
    from gpudissect.arch.occupancy import predict_blocks

    return max(predict_blocks(t, regs, smem, rules)["warps"] for t in (32, 64, 128, 256, 512, 1024))


def padding_text(regs: int, smem: int, rules: dict, nsm: int) -> str:
    """For a grid of one block per SM: per block size, how many blocks the rules let one SM
    take (an unfair placement may stack that many) and the padding that allows only one."""
    parts = []
    for t in (128, 256, 512, 1024):
        p = ef.padding(nsm, t, regs, smem, rules, nsm)
        if not p["needed"]:
            parts.append(f"{t} threads: {p['blocks_per_sm']} per SM at most, nothing to pad")
            continue
        cure = [*([f"registers to {p['padded_regs']}"] if p.get("padded_regs") else []),
                *([f"shared memory to {p['padded_smem']} B"] if p.get("padded_smem") else [])]
        none = "" if p.get("padded_regs") else "no register count suffices; "
        parts.append(f"{t} threads: up to {p['blocks_per_sm']} per SM, {none}"
                     + (f"pad {' or '.join(cure)}" if cure else "nothing pads it to one"))
    return (f"- a grid of one block per SM ({nsm} SMs): an unfair placement may stack blocks where the rules "
            "allow; padding makes it impossible (thesis procedure 8.18): " + "; ".join(parts))


def _bandwidth_text(plan, where: Where, level: str) -> str:
    """The measured bandwidths of ``level`` the plan's instructions use: as measured, and the
    share of one SM."""
    if level == L1_LINES:
        l1 = where.hierarchy.levels["L1"]
        n = sorted(set(plan.lines.values()))
        return (f"{'/'.join(map(str, n))} lines of {where.hierarchy.line} B per warp-instruction at the L1's "
                f"read rate, {fmt_num(l1.read.per_sm)} B/clk/SM [{l1.read.source}]")
    lv = where.hierarchy.levels[level]
    parts = []
    for (name, d), share in sorted(plan.share.items()):
        bw = getattr(lv, d)
        if name != level or bw is None:
            continue
        chip = (f"{fmt_num(bw.gb_s)} GB/s at {fmt_num(bw.sm_mhz)} MHz over {where.sms} SMs = " if bw.gb_s else "")
        parts.append(f"{d} {chip}{fmt_num(share)} B/clk/SM [{bw.source}]")
    return "; ".join(parts)


def memory_lines(lp, tables, where: Where, best: float, w_best: int) -> list[str]:
    """The loop's memory traffic, the level it reaches and the rate the measured bandwidths
    allow there (every level when the caller said nothing about where the data is)."""
    from gpudissect.predict.memory import rate_cap

    plan = where.plan(lp.body, tables, w_best)
    if not plan.accesses:
        return []
    nbytes = sum(a.bytes for a in plan.accesses.values())
    lvls = sorted({a.level or "unknown" for a in plan.accesses.values()})
    by_why: dict[str, list[str]] = {}
    for a in plan.accesses.values():
        by_why.setdefault(a.why, []).append(a.full)
    whys = "; ".join(f"{', '.join(dict.fromkeys(ops))}: {w}" for w, ops in by_why.items())
    spread = (f"{len(plan.l1_interval)} of them with their lanes a row apart" if plan.l1_interval else "coalesced")
    L = [f"  memory: {len(plan.accesses)} instructions, {nbytes} B per iteration per warp ({spread}), "
         f"level {', '.join(lvls)} ({whys})"]
    cap = rate_cap(plan, tables.schedulers)
    if cap is not None:
        L.append(f"  at most {fmt_num(cap[0])} iterations/clk/SM from the measured {cap[1]} bandwidth "
                 f"({_bandwidth_text(plan, where, cap[1])}); the best predicted "
                 f"{fmt_num(best)} is {_pct(best / cap[0])} of it")
    if where.footprint is None and where.level is None:
        caps = []
        for hint in ("l1", "l2", "dram"):
            c = rate_cap(Where(where.hierarchy, where.sms, level=hint).plan(lp.body, tables, w_best),
                         tables.schedulers)
            caps.append(f"{hint}: {fmt_num(c[0])} ({c[1]})" if c else f"{hint}: no measured bandwidth")
        L.append("  where the data is was not given (--footprint or --level): the measured bandwidths "
                 "allow at most, in iterations/clk/SM, " + "; ".join(caps))
    used = {f"{a.level} {'write' if a.store else 'read'} bandwidth" for a in plan.accesses.values()}
    used |= {f"{a.level} bandwidth" for a in plan.accesses.values()}
    L += [f"  missing: {m}" for m in plan.missing if m.split(":")[0] in used or not m.split(":")[0].endswith("bandwidth")]
    return L


def loop_lines(lp, tables, top_warps: int, where: Where | None = None) -> list[str]:
    """One innermost loop: iterations per clock per SM predicted at 1..top_warps warps (with
    ``where``: its memory instructions at their level, bound by the measured bandwidths)."""
    from gpudissect.predict.bounds import predict

    pts = [(w, predict(lp.name, lp.body, tables, w,
                       memory=where.plan(lp.body, tables, w) if where else None))
           for w in range(1, top_warps + 1)]
    rates = [(w, w / p.cycles_per_iter, p) for w, p in pts if p.cycles_per_iter > 0]
    if not rates:
        return [f"- {lp.name}: no prediction (no cycles)"]
    best = max(r for _w, r, _p in rates)
    reach = ef.settings()["reach"]
    w0, r0, p0 = next(x for x in rates if x[1] >= reach * best)
    w1, r1, p1 = rates[0]

    def why(p) -> str:
        if p.bound == "recurrence" and p.recurrence:
            ops = " -> ".join(p.entries[i].full for i in p.recurrence)
            return f"recurrence {ops} ({fmt_num(p.bounds['recurrence'])} cycles/iteration)"
        if p.bound.startswith("pipe "):
            unit = p.bound[5:]
            ops = sorted({e.full for e in p.entries if e.unit == unit})
            return f"{p.bound} ({', '.join(ops)}: {fmt_num(p.bounds[p.bound])} cycles/iteration per warp)"
        if p.bound.startswith("bandwidth "):
            return f"{p.bound}, the measured level's rate ({fmt_num(p.bounds[p.bound])} cycles/iteration per warp)"
        return f"{p.bound} ({fmt_num(p.bounds[p.bound])} cycles/iteration per warp)"

    return [f"- {lp.name} ({len(lp.body)} instructions): best predicted {fmt_num(best)} iterations/clk/SM "
            f"within {top_warps} warps per SM; {_pct(reach)} of it from {w0} warps per SM ({fmt_num(r0)}; "
            f"binding: {why(p0)}); at 1 warp {fmt_num(r1)} = {_pct(r1 / best)} of it (binding: {why(p1)})"
            + (" (a lower bound: unknown latencies counted as one cycle)" if p0.lower_bound else ""),
            *(memory_lines(lp, tables, where, best, w0) if where else [])]


def rules_arch(arch: str) -> str:
    return re.sub(r"(sm_\d+)[a-z]?$", r"\1", arch)


def kernel_lines(path: Path, data_spec: Path, nsm: int, footprint: float | None = None,
                 level: str | None = None) -> list[str]:
    from gpudissect.arch.occupancy import occupancy_rules
    from gpudissect.arch.target import make_target
    from gpudissect.predict import PredictError
    from gpudissect.predict.answer import check_arch, lanes_at
    from gpudissect.predict.loops import select_loops
    from gpudissect.predict.memory import HINTS, load_hierarchy
    from gpudissect.predict.source import read_input
    from gpudissect.predict.tables import load_tables

    if level is not None and level.lower() not in HINTS:
        raise AdviseError(f"--level {level}: expected one of {', '.join(HINTS)}")
    try:
        tables = load_tables(data_spec)
        hier = load_hierarchy(data_spec)
        prog = read_input(path, tables.arch)
        notes = check_arch(prog, tables)
        loops = select_loops(prog.kernels, prog.labels)
    except PredictError as e:
        raise AdviseError(str(e)) from None
    where = Where(hier, nsm or hier.sms or 1, footprint, level)
    rules = occupancy_rules(make_target(rules_arch(tables.arch)))
    res = kernel_resources(path, prog.kind, tables.arch)
    L = [*notes, f"{path} ({prog.kind}, {len(prog.kernels)} kernel(s)); tables: {tables.gpu} ({tables.arch}) "
         f"from {tables.source}"]
    for k, body in sorted(prog.kernels.items()):
        r = res.get(k)
        regs, smem = (r["regs"], r["smem"]) if r else (estimated_regs(body), 0)
        src = r["source"] if r else "estimated from the highest register in the listing; shared memory unknown"
        L.append(f"kernel {k}: {regs} registers per thread, {smem} B static shared memory ({src})")
        L.append(f"- occupancy by the CUDA occupancy rules of {rules_arch(tables.arch)}: blocks per SM "
                 f"and warps per SM by block size (limiters): {occupancy_text(regs, smem, rules)}")
        if nsm > 0:
            L.append(padding_text(regs, smem, rules, nsm))
        top = max_warps(regs, smem, rules)
        mine = [lp for lp in loops if lp.kernel == k]
        if not mine:
            L.append("- no innermost loop: nothing to predict")
        for lp in mine:
            if lp.refused:
                L.append(f"- {lp.name}: not predicted: {lp.refused}")
                continue
            # how the lanes spread each access, as predict gives it (a block of at least a warp in x)
            L += loop_lines(lp, tables, max(top, 1), lanes_at(where, body, lp, (1024, 1, 1)))
    return L


# ----------------------------------------------------------------- entry
def default_data() -> Path:
    from gpudissect.predict import PredictError
    from gpudissect.predict.answer import default_data as shipped

    try:
        return shipped()
    except PredictError as e:
        raise AdviseError(str(e)) from None


def sm_count(spec: Path) -> int:
    """The SM count of the data's GPU (0 when the data names none)."""
    try:
        return int(load_result_set(spec).provenance().get("sm_count") or 0)
    except (LoadError, OSError):
        return 0


def advise_lines(target: str, data: Path | None, default_arch: str | None = None,
                 footprint: float | None = None, level: str | None = None) -> list[str]:
    """The advice for ``target``: a file (a kernel) or a variant name of the data
    (``default_arch``: the architecture of data whose provenance names none); for a kernel,
    ``footprint`` (bytes its loops touch over the GPU) or ``level`` (l1, l2, dram) says where its
    global data is."""
    spec = data or default_data()
    p = Path(target)
    if p.is_file():
        return kernel_lines(p, spec, sm_count(spec), footprint, level)
    d = load(spec, default_arch)
    if not variant_records(d, target):
        known = sorted({r["variant"] for r in d.rs.records("instructions") if r.get("measure") == "throughput"})
        near = [n for n in known if n.split(".")[0] == target.split(".")[0]][:6]
        raise AdviseError(f"'{target}' is neither a file nor a variant measured in {spec}"
                          + (f" (e.g. {', '.join(near)})" if near else f" ({len(known)} variants measured)"))
    return variant_lines(d, target)
