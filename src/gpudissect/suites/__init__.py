"""The suites: one folder each (kernels, checks, measurement, analysis, figures), each package
exposing ``SUITE`` (the contract of ``bench/contract.py``). Adding a suite is a new folder and
one line here; the command line and the report find suites only through this registry. A suite
may own commands: a ``commands`` module in its folder with ``register(app)`` (see
:func:`suite_commands`), and a static PTX->SASS map of a catalog of its own: a ``mapping``
module (see :func:`suite_maps`)."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from gpudissect.bench.contract import SuiteBase, SuiteInputError

SUITES: dict[str, str] = {
    "instructions": "gpudissect.suites.instructions",
    "memory": "gpudissect.suites.memory",
    "tensor": "gpudissect.suites.tensor",
    "behaviour": "gpudissect.suites.behaviour",
    "async": "gpudissect.suites.async_copy",
    "sync": "gpudissect.suites.sync",
    "cluster": "gpudissect.suites.cluster",
}


# the order results are read and reported in: these first, then any other suite by name
REPORTED_FIRST = ("instructions", "memory", "tensor", "behaviour")


class UnknownSuite(SuiteInputError):
    def __init__(self, name: str):
        super().__init__(f"unknown suite '{name}' (available: {', '.join(SUITES)})")


def get_suite(name: str) -> SuiteBase:
    if name not in SUITES:
        raise UnknownSuite(name)
    return importlib.import_module(SUITES[name]).SUITE


def suite_module(name: str, part: str):
    """A suite's own module ``part`` (``figures``, ``view``), or None when it has none."""
    if name not in SUITES:
        return None
    try:
        return importlib.import_module(f"{SUITES[name]}.{part}")
    except ModuleNotFoundError as e:
        if e.name == f"{SUITES[name]}.{part}":
            return None
        raise


def suite_commands() -> list:
    """The ``commands`` modules of the suites that own commands, in registry order, each with
    ``register(app)`` (the typer app of ``gpudissect.cli``). A suite without one is not
    imported: the command line starts fast."""
    return [suite_module(name, "commands") for name in SUITES if _has_part(name, "commands")]


def suite_maps(but: str | None = None) -> list:
    """The ``mapping`` modules of the suites that map a catalog of their own to SASS without a
    GPU (``gpudissect map``), in registry order, but for suite ``but``; each with ``CATALOG``
    (its name in a map record), ``names()``, ``select(patterns)`` and
    ``static_map(target, patterns, jobs, progress)`` (map records as dicts)."""
    return [suite_module(name, "mapping") for name in SUITES if name != but and _has_part(name, "mapping")]


def _has_part(name: str, part: str) -> bool:
    """Whether suite ``name``'s folder holds a module ``part``, found without importing it."""
    spec = importlib.util.find_spec(SUITES[name])
    return any(m.name == part for m in pkgutil.iter_modules(spec.submodule_search_locations or []))
