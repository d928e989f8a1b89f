"""``gpudissect predict``: from an input file to the lines it prints (the CLI only prints them).

The answer is model v1 (:mod:`sched`), the model ``predict --validate`` scores: cycles per
iteration per warp of a region of ``ITERS`` trips of every warp (what the validation measures),
with the resource that held issue back most in its steady state; v0's bounds and the two
baselines follow as secondary lines. The taken-branch cost is the validation's: derived, as
``predict --validate`` derives it (:func:`validate.calibrate`), from the calibration loops of
the validation measurements shipped beside the tables (``VALIDATION``), else 0.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpudissect.kernel.control import Control
from gpudissect.kernel.sass import SassInstr
from gpudissect.predict import PredictError
from gpudissect.predict.harness import ITERS
from gpudissect.predict.lanes import Lanes, address_forms, unseen_addresses
from gpudissect.predict.loop_model import (
    LoopModel,
    Model,
    block_warps,
    common_model,
    loop_model,
    rare_weighted,
)
from gpudissect.predict.loops import select_loops
from gpudissect.predict.memory import Where
from gpudissect.predict.render import loop_facts, summary, table_lines, timeline_lines
from gpudissect.predict.sched import SHORT, binding, issue_trace
from gpudissect.predict.source import Program, base_arch, read_input
from gpudissect.predict.tables import Tables, load_tables

VALIDATION = ("predict-validation.json.xz", "predict-validation.json.gz")  # beside the tables, newest form first


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


def branch_of(spec: Path, tables: Tables) -> tuple[float, str]:
    """The taken-branch redirect (cycles) and where it came from: the calibration loops of the
    validation measurements in the tables' directory, against these tables, as ``predict
    --validate`` derives it; 0 (the branch's stall count only) where there are none."""
    from gpudissect.predict.validate import calibrate, read_measured

    path = next((spec / n for n in VALIDATION if (spec / n).is_file()), None) if spec.is_dir() else None
    if path is None:
        return 0.0, f"0 cycles beyond its stall count (no {' or '.join(VALIDATION)} beside the tables to derive it from)"
    try:
        doc = read_measured(path)
        if base_arch(str(doc.get("arch"))) != base_arch(tables.arch):
            return 0.0, f"0 cycles beyond its stall count ({path} is of {doc.get('arch')}, not {tables.arch})"
        cost = calibrate(doc.get("loops", []), tables, int(doc.get("iters") or ITERS))["branch_cycles"]
    except PredictError as e:
        return 0.0, f"0 cycles beyond its stall count ({e})"
    if cost is None:
        return 0.0, f"0 cycles beyond its stall count ({path} holds no measured calibration loop)"
    gpu = (doc.get("gpu") or {}).get("name", "?")
    return cost, (f"{cost:.4g} cycles from its issue to the loop's head (a longer stall count hides it): the "
                  f"calibration loops of {path} ({gpu}) against these tables, as predict --validate derives it")


def body_controls(body: tuple[SassInstr, ...], controls: dict[int, Control] | None) -> list[Control] | None:
    """The control codes of each body instruction, or None where any is missing (a SASS listing)."""
    if not controls or any(i.offset not in controls for i in body):
        return None
    return [controls[i.offset] for i in body]


def model_of(lm: LoopModel, controls: list[Control] | None, tables: Tables, branch: float,
             trips: int = ITERS) -> Model:
    """Model v1 for a loop as the validation computes it (``validate.predict_point``): cycles
    per trip of a region of ``trips`` trips, and what binds in the simulated steady state."""
    run = lm.run_args(controls, tables)
    trace = issue_trace(*run, SHORT, branch, lm.plan)
    what, shares = binding(trace)
    return Model(lm.cycles(controls, tables, trips, branch), trips, what, shares, trace)


def where_of(spec: Path, footprint: float | None, level: str | None) -> Where | None:
    """Where the data is, from the caller's hint (None without one)."""
    if footprint is None and level is None:
        return None
    from gpudissect.predict.memory import HINTS, load_hierarchy

    if level is not None and level not in HINTS:
        raise PredictError(f"--level {level}: one of {', '.join(HINTS)}")
    if footprint is not None and footprint <= 0:
        raise PredictError(f"--footprint must be positive (got {footprint:g})")
    h = load_hierarchy(spec)
    return Where(h, h.sms or 1, footprint, level)


def lanes_at(where: Where | None, kernel: list, lp, block: tuple[int, ...]) -> Where | None:
    """``where`` with how the lanes spread the loop's accesses (``lanes.py``: from the whole
    kernel's SASS and the block's shape), as the validation gives them."""
    if where is None:
        return None
    return where.with_lanes(Lanes(address_forms(kernel, lp.start, list(lp.body)),
                                  unseen_addresses(kernel, lp.start, list(lp.body))), lp.body, block)


def predict_lines(path: Path, data: Path | None, kernel: str | None, loop: int | None, warps: int,
                  timeline: bool, show_tables: bool, footprint: float | None = None,
                  level: str | None = None, rare_every: int | None = None,
                  block: tuple[int, ...] = (1024, 1, 1)) -> tuple[int, list[str], list[str]]:
    """(exit code, lines to print, error lines); the exit code is 0 only without errors.
    ``rare_every``: the instructions a forward branch skips run once every so many trips (the
    model is :func:`loop_model.rare_weighted`, as the validation scores it); ``block``: the
    block's shape (threads in x, y, z: which threads share a warp)."""
    try:
        if warps < 1:
            raise PredictError(f"--warps must be at least 1 (got {warps})")
        if rare_every is not None and rare_every < 1:
            raise PredictError(f"--rare-every must be at least 1 (got {rare_every})")
        spec = Path(data or default_data())
        tables = load_tables(spec)
        prog = read_input(path, tables.arch)
        lines = check_arch(prog, tables)
        loops = select_loops(prog.kernels, prog.labels, kernel, loop)
        data_at = where_of(spec, footprint, level)
    except PredictError as e:
        return 2, [], [str(e)]
    lines.append(f"tables: {tables.gpu} ({tables.arch}) from {tables.source}")
    branch, where = branch_of(spec, tables) if any(not lp.refused for lp in loops) else (0.0, "")
    if where:
        lines.append(f"taken branch: {where}")
    errors = []
    for lp in loops:
        if lp.refused:
            errors.append(lp.refused)
            continue
        bw = block_warps(block)
        lm = loop_model(lp.name, lp.body, tables, warps, lanes_at(data_at, prog.kernels[lp.kernel], lp, block), bw)
        p = lm.prediction
        controls = prog.controls.get(lp.kernel)
        model = model_of(lm, body_controls(lp.body, controls), tables, branch)
        rare, shown = None, lp.body
        if rare_every and lp.skippable:  # what binds, and the timeline: the common path's
            cm, shown, cc = common_model(lp.name, lp.body, body_controls(lp.body, controls), lp.skippable,
                                         tables, warps, lanes_at(data_at, prog.kernels[lp.kernel], lp, block), bw)
            common = model_of(cm, cc, tables, branch)
            rare = (rare_every, common.cycles, model.cycles)
            model = replace(common, cycles=rare_weighted(common.cycles, model.cycles, rare_every))
        lines += summary(p, lp.body, controls, model)
        lines += loop_facts(lp, lm.memory, rare, lm.plan, bw, warps)
        if show_tables:
            lines += table_lines(p)
        if timeline:
            lines += timeline_lines(shown, model.trace, controls, SHORT // 2)
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
