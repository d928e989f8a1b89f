"""What the measured tables say about a kernel, without a GPU: ``predict`` (cycles per iteration
of its innermost SASS loops; ``--validate``: the predictor against measured loops) and
``advise`` (the launch configurations that reach the maximum rate)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpudissect.cli.option_groups import DEFAULT_ARCH, grouped
from gpudissect.terminal import console, err, fail, open_device


@dataclass
class PredictInput:
    """What is predicted, from which tables."""

    input: Annotated[Path, typer.Argument(
        help="a cubin, a PTX file (compiled here) or a SASS listing")] = None
    data: Annotated[Path, typer.Option(
        "--data", help="tables: a data directory, suite JSON or results database (default: the "
                       "shipped data/h100)")] = None


@dataclass
class Validation:
    """``--validate``: the predictor measured against >= 300 loops."""

    validate: Annotated[bool, typer.Option(
        "--validate", help="validate the predictor: measure >= 300 generated and real loops on the GPU "
                           "(or read --measured) and print the error table beside the baselines")] = False
    measured: Annotated[Path, typer.Option(
        "--measured", help="with --validate: saved measurements (no GPU)")] = None
    output: Annotated[Path, typer.Option("-o", "--output", help="with --validate: JSON to write")] = None
    figure: Annotated[Path, typer.Option(
        "--figure", help="with --validate: predicted-vs-measured PNG")] = None
    count: Annotated[int, typer.Option("--count", help="with --validate: generated loops")] = 320
    seed: Annotated[int, typer.Option("--seed", help="with --validate: the generator's seed")] = 20
    only: Annotated[str, typer.Option(
        "--only", help="with --validate: only these loop sets or categories, comma-separated "
                       "(generated, handwritten, tensor-model, real (the corpus of public kernels), a "
                       "category: tensor_mma, wgmma_gemm, sgemm ..., or a corpus kernel or project); "
                       "the branch calibration always runs")] = None


@dataclass
class LoopChoice:
    """Which loop, with how many warps, and what is printed beside the prediction."""

    kernel: Annotated[str, typer.Option("--kernel", help="only this kernel")] = None
    loop: Annotated[int, typer.Option("--loop", help="only innermost loop N of the kernel (from 0)")] = None
    warps: Annotated[int, typer.Option("--warps", help="resident warps per SM")] = 4
    timeline: Annotated[bool, typer.Option("--timeline", help="print one warp's simulated timeline")] = False
    tables: Annotated[bool, typer.Option("--tables", help="print the table entries each opcode used")] = False
    footprint: Annotated[float, typer.Option(
        "--footprint", help="bytes the loop's global data spans over the whole GPU: its loads take the latency "
                            "and bandwidth of the level the measured capacities put it in")] = None
    level: Annotated[str, typer.Option("--level", help="the level the loop's global data is in (l1, l2, dram), "
                                                        "instead of --footprint")] = None
    rare_every: Annotated[int, typer.Option(
        "--rare-every", help="the instructions a forward branch in the loop skips run once every N trips "
                             "(from the source: e.g. a hash's block transform every 64th byte); without it "
                             "they count on every trip")] = None
    block: Annotated[str, typer.Option(
        "--block", help="the block's shape, X[,Y[,Z]] threads (which threads share a warp: how the lanes "
                        "spread each access, with --footprint or --level)")] = "1024"


def block_shape(text: str) -> tuple[int, int, int]:
    """``--block`` as (x, y, z): one clear line for anything but 1 to 3 positive whole numbers
    of at most 1024 threads in all."""
    parts = [p.strip() for p in text.split(",")]
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims) or math.prod(dims) > 1024:
        fail(f"--block {text}: expected X[,Y[,Z]] positive threads, at most 1024 in all (e.g. 256 or 32,8)")
    return (dims + [1, 1])[:3]  # type: ignore[return-value]


@grouped
def predict_cmd(src: PredictInput, validation: Validation, choice: LoopChoice) -> None:
    """Predict cycles per iteration of the innermost SASS loops from the measured tables
    (needs no GPU)."""
    from gpudissect.predict.answer import predict_lines, validate_lines

    v = validation
    if v.validate:
        dev = None if v.measured is not None else open_device(0)
        sel = tuple(x.strip() for x in (v.only or "").split(",") if x.strip())
        code, lines, errors = validate_lines(dev, src.data, v.output, v.figure, v.measured, v.count, v.seed, sel)
    elif src.input is None:
        fail("give an input (a cubin, PTX file or SASS listing), or --validate")
    else:
        code, lines, errors = predict_lines(src.input, src.data, choice.kernel, choice.loop, choice.warps,
                                            choice.timeline, choice.tables, choice.footprint, choice.level,
                                            choice.rare_every, tuple(block_shape(choice.block)))
    for ln in lines:
        console.print(ln, markup=False, highlight=False, soft_wrap=True)
    if errors:
        for e in errors[:-1]:
            err.print(f"[bold red]error:[/] {escape(e)}", highlight=False, soft_wrap=True)
        fail(errors[-1], code)


def advise_cmd(
    target: str = typer.Argument(..., help="a variant measured in the data (e.g. fma.rn.f32), or a kernel: "
                                 "a cubin, PTX file or SASS listing"),
    data: Path = typer.Option(None, "--data", help="a data directory, suite JSON or results database "
                              "(default: the shipped data/h100)"),
    footprint: float = typer.Option(None, "--footprint", help="for a kernel: the bytes its loops touch over "
                                    "the whole GPU; with the measured capacities it says which level "
                                    "(L1, L2, DRAM) its global loads reach"),
    level: str = typer.Option(None, "--level", help="for a kernel: the level its global data is in "
                              "(l1, l2, dram), instead of --footprint"),
) -> None:
    """The launch configurations (warps per block, blocks per SM, independent work per thread)
    that reach the maximum rate, and what is lost outside them, with the numbers behind each
    statement (needs no GPU)."""
    from gpudissect.advise import AdviseError
    from gpudissect.advise.advise import advise_lines

    try:
        lines = advise_lines(target, data, DEFAULT_ARCH, footprint, level)
    except AdviseError as e:
        fail(str(e))
    for ln in lines:
        console.print(ln, markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("predict")(predict_cmd)
    app.command("advise")(advise_cmd)
