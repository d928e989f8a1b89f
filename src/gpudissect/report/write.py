"""The report files of a result set for ``gpudissect run``: the HTML report and the timing
reference (``gpudissect report`` and ``gpudissect report --markdown`` write the same), one line
each saying where it went; and the shipped data directory (``data/h100``) that stands in for
this machine's results where there is no GPU.

Output paths are checked by the caller before its work (``report.cli.outputs_ok``); the files
are written whole (``report.cli.writing``).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

import gpudissect
from gpudissect.report.cli import write_texts, writing
from gpudissect.report.load import ResultSet, load_result_set

console = Console()
SHIPPED = "h100"  # the GPU whose results the repository carries (data/h100)


def shipped_results() -> Path | None:
    """The committed data directory ``data/h100``: in the source tree the package was installed
    from (``pip install -e``), else under the current directory; None where neither holds one."""
    tree = Path(gpudissect.__file__).resolve().parents[2]  # <tree>/src/gpudissect/__init__.py
    for root in (tree, Path.cwd()):
        d = root / "data" / SHIPPED
        if d.is_dir() and any(d.glob("*.json*")):
            return d
    return None


def load(spec: Path) -> tuple[ResultSet, Path | None]:
    """The result set of a results database or data directory, and the directory (None for a
    database); ``LoadError`` when it cannot be read."""
    return load_result_set(spec), (spec if spec.is_dir() else None)


def _what(rs: ResultSet) -> str:
    return f"{rs.gpu} ({', '.join(rs.suites())})"


def html(rs: ResultSet, out: Path, data_dir: Path | None, others: list[ResultSet] | None = None,
         threshold: float = 0.1) -> None:
    """The HTML report (``others``: result sets set beside it, differences from ``threshold``)."""
    from gpudissect.report.html import write_html

    with writing(out) as (tmp,):
        write_html(rs, tmp, data_dir, others or [], threshold)
    beside = f", beside {', '.join(o.gpu for o in others)}" if others else ""
    console.print(f"report of {_what(rs)}{beside} -> {out} ({out.stat().st_size // 1024} KiB)",
                  highlight=False, soft_wrap=True)


def markdown(rs: ResultSet, out: Path) -> None:
    from gpudissect.report.markdown import timing_reference

    write_texts([(out, lambda: timing_reference(rs))])
    console.print(f"timing reference of {_what(rs)} -> {out}", highlight=False, soft_wrap=True)
