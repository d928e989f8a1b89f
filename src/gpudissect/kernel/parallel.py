"""CPU-bound build work in parallel processes.

Compiling is mostly ptxas and nvdisasm (subprocesses, which threads overlap well), but reading
what they produce (SASS parsing, control-code decoding, the family checks) is Python and holds
the GIL: with threads, a whole-catalog build runs that part on one core. :func:`pimap` runs a
picklable top-level function over items in worker processes ('spawn': nothing of the parent's
threads or GPU state is inherited) and yields the results in order as they come; ``jobs <= 1``
runs inline. The workers ignore Ctrl-C (the parent stops, cancels what is queued and says so)
and die with the parent.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

PR_SET_PDEATHSIG = 1  # prctl(2)
# the resource tracker still unlinks the pool's semaphores when the parent exits at once (Ctrl-C),
# without a warning on the user's terminal about it
QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"
T = TypeVar("T")
R = TypeVar("R")


def _worker_init() -> None:
    """A worker ignores Ctrl-C (the parent handles it) and, on Linux, dies with its parent (a
    parent that exits at once must not leave workers holding its terminal or pipes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


def pimap(fn: Callable[[T], R], items: Iterable[T], jobs: int) -> Iterator[R]:
    """``fn(x)`` for each of ``items``, in order, in ``jobs`` processes when there is more than
    one item."""
    items = list(items)
    if jobs <= 1 or len(items) <= 1:
        yield from (fn(x) for x in items)
        return
    if QUIET_TRACKER not in sys.warnoptions:  # read when multiprocessing starts its tracker
        sys.warnoptions.append(QUIET_TRACKER)
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=mp.get_context("spawn"),
                               initializer=_worker_init)
    try:
        yield from pool.map(fn, items)
    finally:  # also on Ctrl-C or when the caller stops early: drop what is queued
        pool.shutdown(wait=True, cancel_futures=True)


def pmap(fn: Callable[[T], R], items: Iterable[T], jobs: int) -> list[R]:
    """``[fn(x) for x in items]``, in ``jobs`` processes when there is more than one item."""
    return list(pimap(fn, items, jobs))
