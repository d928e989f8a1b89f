"""The report files of a result set for ``gpudissect run``: the HTML report and the timing
reference (``gpudissect report`` and ``gpudissect report --markdown`` write the same), one line
each saying where it went.

Output paths are checked by the caller before its work (``outputs.check_outputs``); the files
are written whole (``outputs.writing``: a write that fails is an ``OutputError``).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from rich.console import Console

from gpudissect.outputs import write_texts, writing
from gpudissect.report.read.results import ResultSet, load_result_set

console = Console()


def load(spec: Path) -> tuple[ResultSet, Path | None]:
    """The result set of a results database or data directory, and the directory (None for a
    database); ``LoadError`` when it cannot be read."""
    return load_result_set(spec), (spec if spec.is_dir() else None)


def _what(rs: ResultSet) -> str:
    quick = " (quick profile)" if rs.quick_suites() else ""
    return f"{rs.gpu} ({', '.join(rs.suites())}){quick}"


def html(rs: ResultSet, out: Path, data_dir: Path | None, others: list[ResultSet] | None = None,
         threshold: float = 0.1) -> None:
    """The HTML report (``others``: result sets set beside it, differences from ``threshold``)."""
    from gpudissect.report.assemble.html import report_steps, write_html
    from gpudissect.terminal import err, progress

    # a progress bar on stderr where it is a terminal (elsewhere it would leave a blank line)
    with writing(out) as (tmp,), (progress() if err.is_terminal else nullcontext()) as bar:
        step = None
        if bar is not None:
            task = bar.add_task("report: figures", total=report_steps(rs))

            def step(done: str) -> None:
                bar.update(task, advance=1, description=f"report: {done} done")

        write_html(rs, tmp, data_dir, others or [], threshold, step)
    beside = f", beside {', '.join(o.gpu for o in others)}" if others else ""
    console.print(f"report of {_what(rs)}{beside} -> {out} ({out.stat().st_size // 1024} KiB)",
                  highlight=False, soft_wrap=True)


def markdown(rs: ResultSet, out: Path) -> None:
    from gpudissect.report.assemble.timing_reference import timing_reference

    write_texts([(out, lambda: timing_reference(rs))])
    console.print(f"timing reference of {_what(rs)} -> {out}", highlight=False, soft_wrap=True)
