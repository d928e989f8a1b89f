"""The instruction suite's own commands, registered on the command line through the registry
(``suites.suite_commands``): ``catalog`` (the PTX variants), ``map`` (their PTX->SASS map,
verified, without a GPU) and ``time`` (any PTX through the suite's kernels and checks); and
:func:`map_selected`, the map that ``gpudissect run`` makes on a machine without a GPU.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import typer
from rich.table import Table

from gpudissect.catalog.model import CatalogError, UnknownVariant
from gpudissect.terminal import (
    cache_ok,
    console,
    fail,
    interruptible,
    open_catalog,
    open_device,
    outputs_ok,
    progress,
    target_of,
    toolchain_ok,
    writing,
)


def catalog_cmd(
    pattern: list[str] = typer.Argument(None, help="variant names or globs (e.g. 'add.*', 'mma*')"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s) instead of the built-in one"),
    arch: str = typer.Option(None, "--arch", help="only the variants that apply to this architecture (sm_XX)"),
) -> None:
    """List catalog variants: the instruction catalog's and the tensor catalog's (mma, wgmma,
    ldmatrix / stmatrix / wmma.load / wmma.store)."""
    cat = open_catalog(catalog)
    tensor = [] if catalog else tensor_variants()
    vs, tvs = select_both(cat, tensor, pattern)
    show, show_tensor = bool(vs) or not tvs, bool(tvs)  # the catalogs the patterns select from
    left_out = tensor_out = 0
    if arch:
        target = target_of(arch)
        left_out = sum(not v.supported_on(target.sm) for v in vs)
        vs = [v for v in vs if v.supported_on(target.sm)]
        kept = [v for v in tvs if not target.lacks(tensor_needs(v))]
        tensor_out, tvs = len(tvs) - len(kept), kept
    if show:
        t = Table("variant", "class", "operands", "min sm", "PTX")
        for v in vs:
            sig = " ".join(f"{o.name}{'!' if o.written else ''}:{o.ptype}" for o in v.operands)
            t.add_row(v.name, v.cls, sig, str(v.min_sm), v.ptx)
        console.print(t)
    if show_tensor:
        t = Table("tensor variant", "kind", "form", "min arch", "PTX")
        for v in tvs:
            t.add_row(v.name, v.kind, tensor_form(v), tensor_min_arch(v), tensor_ptx(v))
        console.print(t)
    if show:
        console.print(f"{len(vs)} variants" + (f" apply to {arch}; {left_out} not applicable there (they need a later "
                                               "architecture: min sm)" if arch else ""))
    if show_tensor:
        console.print(f"{len(tvs)} tensor variants" + (
            f" apply to {arch}; {tensor_out} not applicable there (they need a later architecture: min arch, "
            "or a feature it lacks, such as wgmma)" if arch else ""))


def tensor_variants() -> list:
    """Every variant of the tensor catalog (catalog/tensor.toml): mma, wgmma, then ldst."""
    from gpudissect.catalog.tensor import load_tensor_catalog

    tc = load_tensor_catalog()
    return [*tc.mma, *tc.wgmma, *tc.ldst]


def select_both(cat, tensor: list, patterns: list[str] | None) -> tuple[list, list]:
    """The instruction variants and the tensor variants that ``patterns`` select (globs or
    exact names; all of both when none). A pattern neither catalog has is one error line with
    the nearest names of both (exit 2)."""
    import difflib
    import fnmatch

    if not patterns:
        return cat.select(None), list(tensor)
    ours: list = []
    theirs: list = []
    for p in patterns:
        try:
            hits = cat.select([p])
        except UnknownVariant:
            hits = []
        more = [v for v in tensor if fnmatch.fnmatchcase(v.name, p)]
        if not hits and not more:
            names = [v.name for v in cat.variants] + [v.name for v in tensor]
            near = difflib.get_close_matches(p, names, n=3, cutoff=0.6)
            fail(f"unknown variant '{p}' (in neither the instruction nor the tensor catalog)"
                 + (f"; did you mean {', '.join(near)}?" if near else ""))
        ours += [v for v in hits if v not in ours]
        theirs += [v for v in more if v not in theirs]
    return ours, theirs


def tensor_needs(v) -> tuple[str, ...]:
    """What a tensor variant needs of an architecture, as ``Target.lacks`` reads it: its
    minimum architecture and the features its PTX uses (wgmma, mma.sp, ldmatrix, stmatrix)."""
    from gpudissect.arch.target import arch_need, ptx_needs

    return (arch_need(v.min_arch), *ptx_needs(tensor_ptx(v)))


def tensor_form(v) -> str:
    if v.kind == "mma":
        return v.form
    if v.kind == "wgmma":
        return "wgmma.sp" if v.sparse else "wgmma"
    return v.op


def tensor_min_arch(v) -> str:
    return f"sm_{v.min_arch}" if isinstance(v.min_arch, int) else v.min_arch


def tensor_ptx(v) -> str:
    """The variant's PTX instruction; a wgmma's with N for its N (a multiple of its n_step)."""
    if v.kind == "wgmma":
        return v.instr(0, v.a_from_registers).replace("m64n0k", "m64nNk")
    return v.ptx


def map_cmd(
    arch: str = typer.Option("sm_90", help="target architecture (sm_XX)"),
    pattern: list[str] = typer.Argument(None, help="variant names or globs; all when omitted"),
    json_path: Path = typer.Option(None, "--json", help="write the map as JSON (gzipped for a .gz name)"),
    csv_path: Path = typer.Option(None, "--csv", help="write the map as CSV"),
    jobs: int = typer.Option(0, help="parallel compile jobs (0: 2 x cores)"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s) (then only they are mapped)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no table, only the summary"),
    registers: bool = typer.Option(False, "--registers",
                                   help="print each verified variant's PTX->SASS register correspondence"),
    others: bool = typer.Option(True, "--all-catalogs/--instructions-only",
                                help="also the catalogs other suites map to SASS (the tensor catalog)"),
) -> None:
    """PTX->SASS map of the catalog, verified (needs no GPU), and of the other suites' catalogs
    that map to SASS (the tensor catalog)."""
    from gpudissect.suites import suite_maps
    from gpudissect.suites.instructions.mapper import summary, summary_line, write_csv, write_json

    outputs_ok(json_path, csv_path)
    cat = open_catalog(catalog)
    hooks = suite_maps("instructions") if others and not catalog else []
    try:
        vs, theirs = select_everywhere(cat, hooks, pattern)
    except UnknownVariant as e:
        fail(str(e))
    toolchain_ok()
    target = target_of(arch)
    cache_ok()
    recs, s = map_variants(vs, target, jobs, quiet) if vs or not theirs else ([], {"total": 0})
    rows = [r.to_json() for r in recs]
    for hook, selected in theirs:
        more = map_hook(hook, selected, target, jobs, quiet)
        rows += more
        console.print(summary_line(summary(more), target.arch, f"{hook.CATALOG} variants"),
                      highlight=False, soft_wrap=True)
    if registers:
        from gpudissect.suites.instructions.registers import lines as register_lines

        for line in register_lines([r.to_json() for r in recs]):
            console.print(line, highlight=False, soft_wrap=True)
    gz = json_path is not None and json_path.suffix == ".gz"
    outs = [(p, w) for p, w in ((json_path, functools.partial(write_json, compress=gz)), (csv_path, write_csv))
            if p]
    with writing(*(p for p, _ in outs)) as tmps:
        for tmp, (_, write) in zip(tmps, outs, strict=True):
            write(rows, tmp)
    some_verified(s if vs else summary(rows), target.arch)


def select_everywhere(cat, hooks: list, patterns: list[str] | None) -> tuple[list, list]:
    """The instruction variants and, per other suite's map (``hooks``), its variants that
    ``patterns`` select (all when none): a pattern goes to the instruction catalog unless only
    another suite's catalog has it; one that no catalog has raises UnknownVariant."""
    if not patterns:
        return cat.select(None), [(h, h.select(None)) for h in hooks]
    theirs = [(h, h.select(patterns)) for h in hooks]

    def mine(p: str) -> bool:
        try:
            return bool(cat.select([p]))
        except UnknownVariant:
            return not any(h.select([p]) for h in hooks)

    ours = [p for p in patterns if mine(p)]
    return (cat.select(ours) if ours else []), [(h, vs) for h, vs in theirs if vs]


def map_hook(hook, selected: list, target, jobs: int, quiet: bool) -> list[dict]:
    """Another suite's catalog mapped on ``target`` (its ``mapping`` module), under a progress
    bar; the table unless ``quiet``. Its records (dicts)."""
    from gpudissect.kernel.toolchain import cache_dir
    from gpudissect.suites.instructions.mapper import default_jobs

    with progress() as prog:
        task = prog.add_task(f"mapping {hook.CATALOG} on {target.arch}", total=len(selected))
        rows = interruptible(
            lambda: hook.static_map(target, [v.name for v in selected], jobs or default_jobs(),
                                    progress=lambda r: prog.advance(task)),
            f"no map written; what was compiled stays in the cache {cache_dir()} (a rerun reuses it)")
    if not quiet:
        print_table(rows)
    return rows


def print_table(rows: list[dict]) -> None:
    t = Table("variant", "status", "SASS (one instance)", "strategy", "reason", show_lines=False)
    for r in rows:
        style = {"verified": "green", "unsupported": "yellow"}.get(r["status"], "red")
        t.add_row(r["variant"], f"[{style}]{r['status']}[/]", " + ".join(r["sass"]), r.get("strategy") or "",
                  (r.get("reason") or "")[:90])
    console.print(t)


def map_variants(vs, target, jobs: int, quiet: bool) -> tuple[list, dict]:
    """``vs`` mapped to SASS on ``target`` and verified, under a progress bar (Ctrl-C stops at
    once); the table unless ``quiet``, then the summary line. The records and their summary."""
    from gpudissect.kernel.toolchain import cache_dir
    from gpudissect.suites.instructions.mapper import map_catalog, summary, summary_line

    t0 = time.perf_counter()
    with progress() as prog:
        task = prog.add_task(f"mapping {target.arch}", total=len(vs))
        recs = interruptible(
            lambda: map_catalog(vs, target, jobs=jobs or None, progress=lambda r: prog.advance(task)),
            f"no map written; what was compiled stays in the cache {cache_dir()} (a rerun reuses it)")
    dt = time.perf_counter() - t0
    if not quiet:
        print_table([r.to_json() for r in recs])
    s = summary(recs)
    console.print(f"{summary_line(s, target.arch)}  ({dt:.1f} s)", highlight=False, soft_wrap=True)
    return recs, s


def map_selected(catalog: list[Path] | None, patterns: list[str] | None, target, jobs: int) -> dict:
    """The variants of ``catalog`` (the built-in one when empty) that ``patterns`` select, mapped
    and verified on ``target`` (the summary line only); the summary."""
    vs = open_catalog(catalog).select(patterns)
    _, s = map_variants(vs, target, jobs, quiet=True)
    return s


def some_verified(s: dict, arch: str) -> None:
    """Exit 1 (one line) when a map verified nothing."""
    if not s.get("verified"):
        fail(f"no variant verified on {arch} (every one failed or is unsupported: see the reasons)", code=1)


def time_cmd(
    ptx: str = typer.Option(..., "--ptx", help="PTX instruction(s) with {d} (result) and {a},{b},{c} (operands), "
                            "or @FILE"),
    sig: str = typer.Option("d:u32 a:u32 b:u32", "--sig", help="operands as name:type, destination first"),
    arch: str = typer.Option("sm_90"),
    db: Path = typer.Option(None, "--db"),
    gpu: int = typer.Option(0),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="verify and show the SASS only"),
) -> None:
    """Time any PTX instruction or short sequence with the same generators, checks and statistics."""
    from gpudissect.arch.target import TargetError, make_target
    from gpudissect.bench.contract import Context, Item
    from gpudissect.bench.runner import measure_guarded
    from gpudissect.catalog.model import Variant, parse_signature
    from gpudissect.suites.instructions.suite import InstructionsSuite, Plan
    from gpudissect.suites.instructions.verify import autoverify

    try:
        text = Path(ptx[1:]).read_text() if ptx.startswith("@") else ptx
    except (OSError, UnicodeDecodeError) as e:
        fail(f"--ptx {ptx}: cannot read: {getattr(e, 'strerror', None) or e}")
    try:
        ops = parse_signature(sig, "--sig")
    except CatalogError as e:
        fail(str(e))
    import re as _re

    used = set(_re.findall(r"\{([a-z][a-z0-9]*)\}", text))
    missing = {o.name for o in ops} - used
    if missing:
        fail(f"--ptx does not use operand(s) {sorted(missing)} of --sig '{sig}'")
    unknown = used - {o.name for o in ops}
    if unknown:
        fail(f"--ptx uses operand(s) {sorted(unknown)} that --sig '{sig}' does not declare")
    name = "custom:" + text.strip().split()[0] if text.strip() else "custom"
    v = Variant(name=name, opcode="custom", type=ops[0].ptype, modifiers=(), ptx=text.strip(),
                operands=ops, cls="custom")
    try:
        target = make_target(arch)
    except TargetError as e:
        fail(str(e))
    cache_ok()
    rec = autoverify(v, target)
    console.print(f"{'verified' if rec.verified else '[red]' + rec.status + '[/]'} "
                  f"strategy={rec.strategy} SASS/instance: {' + '.join(rec.sass) or '-'}")
    if not rec.verified:
        if rec.status == "error":  # no strategy assembled: the PTX itself is bad input
            fail(f"the PTX does not assemble: {_ptxas_says(v, rec, target)}")
        fail(rec.reason or "not verified", code=1)
    if no_gpu:
        return
    dev = open_device(gpu)
    # the suite's own kernels, checks and clock/noise guard; nothing is stored
    suite = InstructionsSuite(full=Plan(tp_warps=(16, 32)))
    ctx = Context(dev, None, target, jobs=4)
    suite.prepare_mapped(ctx, [v], [rec])
    results = measure_guarded(suite, ctx, Item(v.name, v)).results
    t = Table("measure", "params", "value", "unit", "flags")
    for r in results:
        t.add_row(r.measure, str({k: v for k, v in r.params.items() if k != "lengths"}),
                  "-" if r.value is None else f"{r.value:.3f}", r.unit, "; ".join(r.flags))
    console.print(t)


def _ptxas_says(v, rec, target) -> str:
    """ptxas's whole message on the variant's kernel (its first strategy, one instance), on one
    line: its temporary file called k.ptx, and the kernel line it names quoted."""
    import re

    from gpudissect.kernel.ptx import module_ptx
    from gpudissect.kernel.toolchain import PtxasError, compile_ptx
    from gpudissect.suites.instructions.strategies import strategy
    from gpudissect.suites.instructions.template import generate

    first = rec.attempts[0] if rec.attempts else None
    try:
        strat = strategy(first.strategy)
        ptx = module_ptx([generate(v, strat, target, length=1, name="k")])
        compile_ptx(ptx, target.arch, strat.opt, use_cache=False)
    except PtxasError as e:
        src, quoted, lines = ptx.splitlines(), set(), []
        for line in e.message.splitlines():
            line = " ".join(re.sub(r"\S*/(k\.ptx)", r"\1", line).split())
            m = re.search(r"line (\d+);", line)
            if m and 0 < int(m.group(1)) <= len(src) and m.group(1) not in quoted:
                quoted.add(m.group(1))
                line += f" [{src[int(m.group(1)) - 1].strip()}]"
            lines.append(line)
        return " | ".join(lines)
    except Exception:  # the message as recorded, then
        pass
    return first.reason if first else (rec.reason or "")


def register(app: typer.Typer) -> None:
    app.command("catalog")(catalog_cmd)
    app.command("map")(map_cmd)
    app.command("time")(time_cmd)
