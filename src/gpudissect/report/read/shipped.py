"""The data set the repository ships (``data/h100``): where it lies, for the commands that
stand in for this machine's results where there is no GPU (``gpudissect run`` without one,
``predict``, ``advise``)."""

from __future__ import annotations

from pathlib import Path

import gpudissect

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
