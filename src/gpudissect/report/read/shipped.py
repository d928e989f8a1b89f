"""What the repository ships beside the code: the data set of one GPU (``data/h100``), for the
commands that stand in for this machine's results where there is no GPU (``gpudissect run``
without one, ``predict``, ``advise``), and the PTX->SASS map of each architecture
(``data/<arch>/map.json.gz``). Found in the source tree the package was installed from
(``pip install -e``), else under the current directory."""

from __future__ import annotations

from pathlib import Path

import gpudissect

SHIPPED = "h100"  # the GPU whose results the repository carries (data/h100)


def _roots() -> tuple[Path, Path]:
    return Path(gpudissect.__file__).resolve().parents[2], Path.cwd()  # <tree>/src/gpudissect/__init__.py


def shipped_results() -> Path | None:
    """The committed data directory ``data/h100``; None where no root holds one."""
    for root in _roots():
        d = root / "data" / SHIPPED
        if d.is_dir() and any(d.glob("*.json*")):
            return d
    return None


def shipped_map(arch: str) -> Path | None:
    """The committed PTX->SASS map of ``arch`` (``data/<arch>/map.json.gz``); None where no root
    holds one (an installed package)."""
    for root in _roots():
        f = root / "data" / arch / "map.json.gz"
        if f.is_file():
            return f
    return None
