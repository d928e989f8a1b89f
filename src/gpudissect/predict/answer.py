"""``gpudissect predict``: from an input file to the lines it prints (the CLI only prints them)."""

from __future__ import annotations

from pathlib import Path

from gpudissect.predict import PredictError
from gpudissect.predict.bounds import predict
from gpudissect.predict.loops import select_loops
from gpudissect.predict.render import summary, table_lines, timeline_lines
from gpudissect.predict.source import Program, base_arch, read_input
from gpudissect.predict.tables import Tables, load_tables
from gpudissect.predict.timeline import simulate, steady_cycles

ITERATIONS = 16


def default_data() -> Path:
    from gpudissect.report.read.shipped import SHIPPED, shipped_results

    d = shipped_results()
    if d is None:
        raise PredictError(f"no shipped data/{SHIPPED} (of a source checkout): give the tables with --data")
    return d


def check_arch(prog: Program, tables: Tables) -> list[str]:
    """Refuse an input for another architecture than the tables'; a note when it names none."""
    if prog.arch is None:
        return [f"note: the input names no architecture; assuming the tables' {tables.arch}"]
    if base_arch(prog.arch) != base_arch(tables.arch):
        raise PredictError(f"the {prog.kind} is for {prog.arch}, the tables ({tables.gpu}) are for "
                           f"{tables.arch}: give tables of a {prog.arch} GPU with --data")
    return []


def predict_lines(path: Path, data: Path | None, kernel: str | None, loop: int | None, warps: int,
                  timeline: bool, show_tables: bool) -> tuple[int, list[str], list[str]]:
    """(exit code, lines to print, error lines); the exit code is 0 only without errors."""
    try:
        if warps < 1:
            raise PredictError(f"--warps must be at least 1 (got {warps})")
        tables = load_tables(data or default_data())
        prog = read_input(path, tables.arch)
        lines = check_arch(prog, tables)
        loops = select_loops(prog.kernels, prog.labels, kernel, loop)
    except PredictError as e:
        return 2, [], [str(e)]
    lines.append(f"tables: {tables.gpu} ({tables.arch}) from {tables.source}")
    errors = []
    for lp in loops:
        if lp.refused:
            errors.append(lp.refused)
            continue
        p = predict(lp.name, lp.body, tables, warps)
        controls = prog.controls.get(lp.kernel)
        lines += summary(p, lp.body, controls)
        slots = simulate(p, tables, ITERATIONS)
        lines.append(f"  simulated scheduler: {steady_cycles(slots, ITERATIONS):.4g} cycles/iteration "
                     f"per warp ({ITERATIONS} iterations, {p.warps_per_scheduler} warps)")
        if show_tables:
            lines += table_lines(p)
        if timeline:
            lines += timeline_lines(p, lp.body, slots, controls, ITERATIONS - 1)
    return (1 if errors else 0), lines, errors


def validate_lines(dev, data: Path | None, output: Path | None, fig: Path | None, measured: Path | None,
                   count: int, seed: int, only: tuple[str, ...] = ()) -> tuple[int, list[str], list[str]]:
    """``predict --validate``: (exit code, lines, errors) as :func:`predict_lines`."""
    from gpudissect.predict.validate import run_validation

    try:
        if count < 0:
            raise PredictError(f"--count must be at least 0 (got {count})")
        spec = data or default_data()
        tables = load_tables(spec)
        _doc, lines = run_validation(dev, Path(spec), tables, output, fig, measured, count, seed, only=only)
    except PredictError as e:
        return 2, [], [str(e)]
    return 0, lines, []
