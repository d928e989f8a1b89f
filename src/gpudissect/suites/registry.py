"""The registry of suites that ``gpudissect run --suite NAME`` runs.

Every suite has one entry point with one signature::

    run_suite(dev, store, patterns, *, arch, quick, resume, jobs, progress) -> (run_id, timing)

``patterns`` selects what to run within the suite (variant names or globs; None: all),
``progress(name, done, total)`` reports progress. A suite stores its results through
:class:`gpudissect.store.db.Store` (one transaction per work item, resumable) and its
conclusions as ``store.set_meta(f"summary:{run_id}", {...})`` with at least
``"conclusions": [str, ...]`` (each conclusion with the measurements behind it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

SUITES: dict[str, str] = {
    "instructions": "gpudissect.suites.instructions.suite:run_catalog_suite",
    "memory": "gpudissect.suites.memory.suite:run_suite",
    "tensor": "gpudissect.suites.tensor.suite:run_suite",
    "behaviour": "gpudissect.suites.behaviour.suite:run_suite",
}


class UnknownSuite(KeyError):
    def __str__(self) -> str:
        return f"unknown suite '{self.args[0]}' (available: {', '.join(SUITES)})"


def suite_entry(name: str) -> Callable:
    if name not in SUITES:
        raise UnknownSuite(name)
    mod, fn = SUITES[name].split(":")
    return getattr(importlib.import_module(mod), fn)
