"""The gpudissect command line."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gpudissect.catalog.model import CatalogError, UnknownVariant, load_catalog
from gpudissect.report.cli import outputs_ok, writing

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Discover and quantify the undisclosed architecture of NVIDIA GPUs.")
console = Console()
err = Console(stderr=True)
T = TypeVar("T")


def fail(msg: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpudissect")
    except PackageNotFoundError:  # run from a source tree that is not installed
        from gpudissect import __version__

        return __version__


def _show_version(value: bool) -> None:
    if value:
        console.print(f"gpudissect {_version()}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main_options(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """Discover and quantify the undisclosed architecture of NVIDIA GPUs."""


def _cache_ok() -> None:
    """The compile cache, checked before any compile (one line when it cannot be used)."""
    from gpudissect.kernel.toolchain import CacheDirError, cache_dir

    try:
        cache_dir()
    except CacheDirError as e:
        fail(str(e))


def _interruptible(work: Callable[[], T], kept: str) -> T:
    """``work()`` in a helper thread, so that Ctrl-C reaches this (main) thread at once instead
    of after the worker pools inside ``work`` have finished their running and queued tasks.
    On Ctrl-C: one line (``kept``: what stays), the temporary files of the compiles under way
    removed (``work`` runs with a scratch folder of its own as the temporary folder), and the
    process ends at once (exit 130) without waiting for those workers."""
    import shutil
    import tempfile

    box: dict[str, object] = {}
    scratch = tempfile.mkdtemp(prefix="gpudissect-")
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = scratch  # this process's and its children's

    def target() -> None:
        try:
            box["result"] = work()
        except BaseException as e:  # handed to the main thread
            box["error"] = e

    t = threading.Thread(target=target, name="gpudissect-work", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.1)
    except KeyboardInterrupt:
        err.print(f"interrupted: {kept}", highlight=False, soft_wrap=True)
        gone = scratch + "-gone"  # renamed first: the workers still running can add nothing to it
        os.rename(scratch, gone)
        shutil.rmtree(gone, ignore_errors=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
    shutil.rmtree(scratch, ignore_errors=True)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=err, transient=True)


def _catalog(paths: list[Path] | None):
    try:
        return load_catalog(paths or None)
    except CatalogError as e:
        fail(f"catalog: {e}")


@app.command("catalog")
def catalog_cmd(
    pattern: list[str] = typer.Argument(None, help="variant names or globs (e.g. 'add.*')"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s) instead of the built-in one"),
) -> None:
    """List catalog variants."""
    cat = _catalog(catalog)
    try:
        vs = cat.select(pattern)
    except UnknownVariant as e:
        fail(str(e))
    t = Table("variant", "class", "operands", "min sm", "PTX")
    for v in vs:
        sig = " ".join(f"{o.name}{'!' if o.written else ''}:{o.ptype}" for o in v.operands)
        t.add_row(v.name, v.cls, sig, str(v.min_sm), v.ptx)
    console.print(t)
    console.print(f"{len(vs)} variants")


@app.command("map")
def map_cmd(
    arch: str = typer.Option("sm_90", help="target architecture (sm_XX)"),
    pattern: list[str] = typer.Argument(None, help="variant names or globs; all when omitted"),
    json_path: Path = typer.Option(None, "--json", help="write the map as JSON"),
    csv_path: Path = typer.Option(None, "--csv", help="write the map as CSV"),
    jobs: int = typer.Option(0, help="parallel compile jobs (0: 2 x cores)"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no table, only the summary"),
) -> None:
    """PTX->SASS map of the catalog, verified (needs no GPU)."""
    from gpudissect.kernel.toolchain import ToolchainMissing, cache_dir, find_tool
    from gpudissect.suites.instructions.mapper import map_catalog, summary, write_csv, write_json
    from gpudissect.target import TargetError, make_target

    outputs_ok(json_path, csv_path)
    cat = _catalog(catalog)
    try:
        vs = cat.select(pattern)
        find_tool("ptxas")
        find_tool("nvdisasm")
        target = make_target(arch)
    except (UnknownVariant, ToolchainMissing, TargetError) as e:
        fail(str(e))
    _cache_ok()
    t0 = time.perf_counter()
    with _progress() as prog:
        task = prog.add_task(f"mapping {target.arch}", total=len(vs))
        recs = _interruptible(
            lambda: map_catalog(vs, target, jobs=jobs or None, progress=lambda r: prog.advance(task)),
            f"no map written; what was compiled stays in the cache {cache_dir()} (a rerun reuses it)")
    dt = time.perf_counter() - t0
    if not quiet:
        t = Table("variant", "status", "SASS (one instance)", "strategy", "reason", show_lines=False)
        for r in recs:
            style = {"verified": "green", "unsupported": "yellow"}.get(r.status, "red")
            t.add_row(r.variant, f"[{style}]{r.status}[/]", " + ".join(r.sass), r.strategy or "",
                      (r.reason or "")[:90])
        console.print(t)
    s = summary(recs)
    console.print(f"{s['total']} variants on {target.arch}: " + ", ".join(f"{k} {v}" for k, v in s.items() if k != "total")
                  + f"  ({dt:.1f} s)")
    outs = [(p, w) for p, w in ((json_path, write_json), (csv_path, write_csv)) if p]
    with writing(*(p for p, _ in outs)) as tmps:
        for tmp, (_, write) in zip(tmps, outs, strict=True):
            write(recs, tmp)
    if not s.get("verified"):
        fail(f"no variant verified on {target.arch} (every one failed or is unsupported: see the reasons)",
             code=1)


def _device(index: int, isolate: bool = False, timeout: float = 60.0):
    """GPU ``index``: in a worker process with a watchdog (``isolate``) or in this process.
    ``GPUDISSECT_FAKE_DEVICE=N`` substitutes N synthetic GPUs (tests; see run/fakes.py)."""
    import functools

    from gpudissect.device.device import CudaDevice, NoGPU
    from gpudissect.device.fakes import fake_from_env, fake_gpu_count

    if fake_gpu_count():
        if not 0 <= index < fake_gpu_count():
            fail(f"no fake GPU {index} (GPUDISSECT_FAKE_DEVICE={fake_gpu_count()})")
        factory = functools.partial(fake_from_env, index)
    else:
        factory = functools.partial(CudaDevice, index)
    try:
        if isolate:
            from gpudissect.device.worker import WorkerDevice

            return WorkerDevice(index, timeout=timeout, factory=factory)
        return factory()
    except NoGPU as e:
        fail(f"{e}. Timing needs an NVIDIA GPU; `gpudissect map` works without one.")
    except RuntimeError as e:  # WorkerFailed: the worker could not open the device
        fail(f"GPU {index}: {e}")


def _store(db: Path | None, create: bool = False):
    """The results database; for reading (``create=False``) an existing one only (.db or .db.gz),
    never a new file."""
    from gpudissect.store.db import StoreError, open_store

    try:
        return open_store(db, create=create)
    except StoreError as e:
        fail(str(e))


def _target(arch: str, dev=None):
    """The target from ``--arch`` or, without one, from the GPU."""
    from gpudissect.target import TargetError, make_target, target_of_device

    try:
        return make_target(arch) if arch else target_of_device(dev.info)
    except TargetError as e:
        fail(str(e))


@app.command("run")
def run_cmd(
    pattern: list[str] = typer.Argument(None, help="what to run within the suite (names or globs); all when omitted"),
    suite: str = typer.Option("instructions", help="suite to run: instructions, memory, tensor, behaviour"),
    db: Path = typer.Option(None, "--db", help="results database (default $GPUDISSECT_DB or ./results.db)"),
    arch: str = typer.Option("", help="architecture (default: the GPU's)"),
    gpu: int = typer.Option(0, help="GPU index"),
    quick: bool = typer.Option(False, help="fewer lengths/configurations (a smoke run)"),
    resume: bool = typer.Option(True, "--resume/--new", help="resume an unfinished run of this suite and GPU"),
    jobs: int = typer.Option(0, help="parallel compile jobs (0: cores)"),
    selfcheck: bool = typer.Option(True, "--selfcheck/--no-selfcheck", help="instructions: time a few instructions through nvcc too"),
    catalog: list[Path] = typer.Option(None, "--catalog", help="catalog TOML file(s) (instructions suite)"),
    isolate: bool = typer.Option(True, "--isolate/--no-isolate",
                                 help="run the GPU in a worker process with a watchdog (a fault or hang "
                                      "is recorded and the sweep goes on in a fresh worker)"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds one GPU call may take (--isolate)"),
    gpus: str = typer.Option("", "--gpus", help="'all' or '0,1': one process per GPU, each its own run; "
                                                "then their comparison"),
) -> None:
    """Run a suite on the GPU (instructions: latency, throughput, dependence distance of every
    verified variant; memory; tensor; behaviour)."""
    import os

    from gpudissect.bench.contract import Context, SuiteInputError
    from gpudissect.bench.runner import run
    from gpudissect.suites import get_suite

    options = {"catalog": list(catalog or []), "selfcheck": selfcheck}
    try:
        s = get_suite(suite)
        s.validate(pattern or None, options)
    except (SuiteInputError, CatalogError) as e:
        fail(str(e))
    if not timeout > 0:
        fail(f"--timeout must be positive (got {timeout})")
    target = _target(arch) if arch else None  # a bad --arch before any GPU work
    _cache_ok()
    if gpus:
        _run_many(gpus, pattern, suite, db, arch, quick, resume, jobs, selfcheck, catalog, isolate, timeout)
        return
    dev = _device(gpu, isolate, timeout)
    store = _store(db, create=True)
    target = target or _target(arch, dev)
    console.print(f"[bold]{dev.info.name}[/] {dev.info.uuid}  {dev.info.sm_count} SMs  driver {dev.info.driver}"
                  f"  clocks {dev.clocks()}")
    ctx = Context(dev, store, target, quick=quick, jobs=jobs or (os.cpu_count() or 2), options=options)
    t0 = time.perf_counter()
    with _progress() as prog:
        task = prog.add_task(suite, total=None)

        def cb(name: str, n: int, total: int) -> None:
            prog.update(task, completed=n, total=total, description=f"{suite} {name:<24}")

        try:
            out = run(s, ctx, pattern or None, resume=resume, progress=cb)
        except (SuiteInputError, CatalogError, ValueError) as e:
            fail(str(e))
        except RuntimeError as e:  # the device is gone (a worker that cannot restart, ...)
            fail(f"{type(e).__name__}: {e} (what is stored is kept: run the same command to resume)")
    out.timing["total_s"] = time.perf_counter() - t0
    store.set_timing(out.run_id, out.timing)
    for line in out.lines:
        console.print(line, highlight=False, soft_wrap=True)
    for line in store.get_meta(f"summary:{out.run_id}", {}).get("conclusions", []):
        console.print(f"- {line}", highlight=False, soft_wrap=True)
    console.print(f"run {out.run_id} ({suite}): " + ", ".join(f"{k} {v:.1f} s" for k, v in out.timing.items()
                                                              if isinstance(v, (int, float))))
    failures = getattr(dev, "failures", [])
    if failures:
        console.print(f"{len(failures)} worker failure(s), each recorded on its item: "
                      + "; ".join(f[:120] for f in failures[:3]), highlight=False, soft_wrap=True)
    dev.close()
    if not store.measured(out.run_id):
        fail(f"run {out.run_id} ({suite}) measured nothing: every item failed or is unsupported "
             f"(`gpudissect show --db {store.path}` lists them)", code=1)
    bad_check = next((line for line in out.lines if line.startswith("self-check failed")), None)
    if bad_check:  # the results are stored; the second route to them did not work
        fail(f"{bad_check} (the run's results are stored; --no-selfcheck skips the check)", code=1)


def _run_many(gpus, pattern, suite, db, arch, quick, resume, jobs, selfcheck, catalog, isolate,
              timeout) -> None:
    """``run --gpus``: the same run command once per GPU, in parallel processes; then compare."""
    import os

    from gpudissect.device.device import NoGPU
    from gpudissect.device.multi import gpu_indices, run_per_gpu

    try:
        idx = gpu_indices(gpus)
    except (ValueError, NoGPU) as e:
        fail(str(e))
    store = _store(db, create=True)  # create the schema once, before the writers start
    path = store.path.resolve()
    store.close()
    per_jobs = jobs or max(1, (os.cpu_count() or 2) // len(idx))

    def args(i: int) -> list[str]:
        a = ["run", *(pattern or []), "--suite", suite, "--db", str(path), "--gpu", str(i),
             "--jobs", str(per_jobs), "--timeout", str(timeout),
             "--quick" if quick else "--no-quick", "--resume" if resume else "--new",
             "--selfcheck" if selfcheck else "--no-selfcheck", "--isolate" if isolate else "--no-isolate"]
        if arch:
            a += ["--arch", arch]
        for c in catalog or []:
            a += ["--catalog", str(c)]
        return a

    console.print(f"{len(idx)} GPU(s): {', '.join(map(str, idx))} -> {path}")
    codes = run_per_gpu(idx, args, echo=lambda line: console.print(line, highlight=False,
                                                                    soft_wrap=True, markup=False))
    bad = {i: c for i, c in codes.items() if c != 0}
    if len(idx) > 1:
        _print_comparison(_store(path), suite, None, top=10)
    if bad:
        fail("GPU(s) " + ", ".join(f"{i} (exit {c})" for i, c in bad.items())
             + " failed; their stored work is kept: run the same command to resume", code=1)


def _print_comparison(store, suite: str, run_ids: list[int] | None, top: int) -> dict:
    from gpudissect.bench.compare import compare_gpus, conclusions

    try:
        doc = compare_gpus(store, suite, run_ids)
    except ValueError as e:
        fail(str(e))
    t = Table("run", "GPU", "UUID", "SM clock before/after (MHz)")
    for g in doc["gpus"]:
        cb, ca = g.get("clocks_before") or {}, g.get("clocks_after") or {}
        t.add_row(str(g["run_id"]), g["gpu_name"], g["gpu_uuid"], f"{cb.get('sm_mhz', '-')}/{ca.get('sm_mhz', '-')}")
    console.print(t)
    recs = sorted((r for r in doc["records"] if r["rel_spread"] is not None),
                  key=lambda r: -r["rel_spread"])
    if recs and top:
        t = Table("variant", "measure", "params", "median", "min", "max", "spread", title="largest spreads")
        for r in recs[:top]:
            p = " ".join(f"{k}={v}" for k, v in r["params"].items() if not isinstance(v, (dict, list)))
            t.add_row(r["variant"], r["measure"], p, f"{r['median']:.3f}", f"{r['min']:.3f}",
                      f"{r['max']:.3f}", f"{r['rel_spread']:.2%}")
        console.print(t)
    for line in conclusions(doc):
        console.print(f"- {line}", highlight=False, soft_wrap=True)
    return doc


@app.command("compare-gpus")
def compare_gpus_cmd(
    db: Path = typer.Option(None, "--db"),
    suite: str = typer.Option("instructions", help="suite whose runs to compare"),
    run_ids: list[int] = typer.Option(None, "--run", help="runs to compare (default: the latest "
                                                          "finished run of the suite per GPU)"),
    json_path: Path = typer.Option(None, "--json", help="write the comparison as JSON"),
    top: int = typer.Option(15, help="rows of the largest spreads to show"),
) -> None:
    """Spread of each measurement across GPUs (median, min, max, relative spread)."""
    from gpudissect.bench.compare import write_json

    outputs_ok(json_path)
    store = _store(db)
    doc = _print_comparison(store, suite, run_ids or None, top)
    if json_path:
        with writing(json_path) as (tmp,):
            write_json(doc, tmp)
        console.print(f"{len(doc['records'])} records -> {json_path}")


@app.command("show")
def show_cmd(
    pattern: str = typer.Argument("*", help="variant glob"),
    db: Path = typer.Option(None, "--db"),
    cls: str = typer.Option(None, "--class", help="instruction class (int, fp32, mufu, ...)"),
    opcode: str = typer.Option(None, help="opcode (add, mad, ...)"),
    type_: str = typer.Option(None, "--type", help="PTX type suffix (u32, f16x2, ...)"),
) -> None:
    """Table of stored results: latency and peak throughput per variant."""
    store = _store(db)
    recs = store.results(variant_like=pattern)
    by: dict[str, dict] = {}
    for r in recs:
        name = r["variant"]
        if opcode and name.split(".")[0] != opcode:
            continue
        if type_ and name.split(".")[-1] != type_:
            continue
        if cls and not (r["cls"] or "").startswith(cls):
            continue
        e = by.setdefault(name, {"flags": set(), "sass": r["sass"], "gpu": r["gpu_name"]})
        if r["measure"] in ("latency", "issue_interval", "throughput_peak"):
            e["latency" if r["measure"] == "issue_interval" else r["measure"]] = r["value"]
            e["flags"].update(f.split(":")[0] for f in r["flags"])
    t = Table("variant", "SASS", "latency (cyc)", "throughput (warp-instr/clk/SM)", "flags")
    for name, e in by.items():
        lat, tp = e.get("latency"), e.get("throughput_peak")
        t.add_row(name, " + ".join(e["sass"] or [])[:60], "-" if lat is None else f"{lat:.2f}",
                  "-" if tp is None else f"{tp:.2f}", ", ".join(sorted(e["flags"])))
    console.print(t)


@app.command("export")
def export_cmd(
    out: Path = typer.Argument(..., help="output file"),
    fmt: str = typer.Option("json", "--format", help="json | csv | parquet | markdown | suite | layouts"),
    db: Path = typer.Option(None, "--db"),
    run_id: int = typer.Option(None, "--run", help="one run only"),
    suite: str = typer.Option(None, "--suite", help="the latest run of this suite (with --format suite)"),
    data: Path = typer.Option(None, "--data", help="read a data directory or suite JSON instead of a DB "
                              "(json, csv, parquet; --suite selects one suite)"),
) -> None:
    """Export results: JSON (stable: variant, measure, value, unit, flags, sass, gpu), CSV, Parquet,
    markdown; 'suite': one run with its provenance and conclusions (data/<gpu>/<suite>.json)."""
    from gpudissect.store.export import (
        layouts_document,
        records,
        table_v,
        write_csv,
        write_document,
        write_json,
        write_suite_json,
    )

    formats = ("json", "csv", "markdown", "suite", "layouts", "parquet")
    if fmt not in formats:
        fail(f"unknown format '{fmt}' ({', '.join(formats)})")
    if data is not None and fmt not in ("json", "csv", "parquet"):
        fail(f"--data exports json, csv or parquet (not {fmt})")
    outputs_ok(out)
    if data is not None or fmt == "parquet":
        from gpudissect.report.load import LoadError, load_result_set
        from gpudissect.report.tabular import ExportError, write_table

        try:
            recs = (load_result_set(data).records(suite) if data is not None
                    else [{**r, "suite": None} for r in records(_store(db), run_id)])
            with writing(out) as (tmp,):
                n = write_table(recs, tmp, fmt)
        except (LoadError, ExportError) as e:
            fail(str(e))
        console.print(f"{n} records -> {out}")
        return
    store = _store(db)
    if suite and run_id is None:
        run_id = store.latest_run(suite)
        if run_id is None:
            fail(f"no run of suite '{suite}' in {store.name}")
    if fmt in ("suite", "layouts") and run_id is None:
        fail(f"--format {fmt} needs --run N or --suite " + ("NAME" if fmt == "suite" else "tensor"))
    with writing(out) as (tmp,):
        if fmt == "suite":
            n = write_suite_json(store, tmp, run_id)
        elif fmt == "json":
            n = write_json(store, tmp, run_id)
        elif fmt == "csv":
            n = write_csv(store, tmp, run_id)
        elif fmt == "layouts":
            doc = layouts_document(store, run_id)
            write_document(doc, tmp)
            n = len(doc["layouts"])
        else:  # markdown
            recs = records(store, run_id)
            tmp.write_text(table_v(recs))
            n = len(recs)
    console.print(f"{n} records -> {out}")


@app.command("time")
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
    from gpudissect.bench.contract import Context, Item
    from gpudissect.bench.runner import measure_guarded
    from gpudissect.catalog.model import Variant, parse_signature
    from gpudissect.suites.instructions.suite import InstructionsSuite, Plan
    from gpudissect.suites.instructions.verify import autoverify
    from gpudissect.target import TargetError, make_target

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
    _cache_ok()
    rec = autoverify(v, target)
    console.print(f"{'verified' if rec.verified else '[red]' + rec.status + '[/]'} "
                  f"strategy={rec.strategy} SASS/instance: {' + '.join(rec.sass) or '-'}")
    if not rec.verified:
        if rec.status == "error":  # no strategy assembled: the PTX itself is bad input
            fail(f"the PTX does not assemble: {_ptxas_says(v, rec, target)}")
        fail(rec.reason or "not verified", code=1)
    if no_gpu:
        return
    dev = _device(gpu)
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


@app.command("audit")
def audit_cmd(path: Path = typer.Argument(..., help="a data directory, suite JSON file or results database")) -> None:
    """Check a data set: every clean throughput within its physical limit, nothing timed from a
    kernel below -O3, provenance complete, one GPU, flags consistent with values. One line per
    problem; exit 1 when there is any."""
    from gpudissect.audit import main as audit_main

    code = audit_main(path)
    if code:
        raise typer.Exit(code)


from gpudissect.report.cli import register as _register_report  # noqa: E402  (report, simexport, compare)

_register_report(app)


def main() -> None:
    import sqlite3

    from gpudissect.store.db import StoreError

    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except (StoreError, sqlite3.DatabaseError) as e:  # a damaged or foreign database file
        err.print(f"[bold red]error:[/] database: {e}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
