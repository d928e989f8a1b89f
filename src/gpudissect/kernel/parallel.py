"""CPU-bound build work in parallel processes.

Compiling is mostly ptxas and nvdisasm (subprocesses, which threads overlap well), but reading
what they produce (SASS parsing, control-code decoding, the family checks) is Python and holds
the GIL: with threads, a whole-catalog build runs that part on one core. :func:`pimap` runs a
picklable top-level function over items in worker processes ('spawn': nothing of the parent's
threads or GPU state is inherited) and yields the results in order as they come; ``jobs <= 1``
runs inline. The workers ignore Ctrl-C (the parent stops, cancels what is queued and says so)
and die with the parent.

One pool of workers serves every call of a process with the same ``jobs`` (started on the first,
kept until the process exits): a run makes many calls (the map, each batch's compile, the
studies' builds, every suite's), and a pool of fresh 'spawn' workers costs a second of imports
each time. Calls from several threads (a suite compiling ahead of its run) share it.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

# the resource tracker still unlinks the pool's semaphores when the parent exits at once (Ctrl-C),
# without a warning on the user's terminal about it
QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"
PARENT_POLL_S = 0.5
WORKER_NICE = 10  # the workers' (and their ptxas and nvdisasm's) scheduling priority, lowered
T = TypeVar("T")
R = TypeVar("R")


def _worker_init(parent: int) -> None:
    """A worker ignores Ctrl-C (the parent handles it), yields the CPU to its parent (which
    measures on the GPU while later batches compile: the GPU's turn must not wait on a
    compile) and dies with its parent process (a parent that exits at once must not leave
    workers holding its terminal or pipes): a thread of the worker's watches its parent's pid.
    Not prctl's PDEATHSIG: that fires when the parent *thread* that started the worker ends,
    and the shared pool's workers are started by whichever thread submits first (a run's
    compile threads come and go)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # the process that measures on the GPU comes first (a run compiles beside it)
        os.nice(WORKER_NICE)
    except (OSError, AttributeError):
        pass
    threading.Thread(target=_watch_parent, args=(parent,), name="gpudissect-parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


_pools: dict[tuple[int, int], ProcessPoolExecutor] = {}
_lock = threading.Lock()


def _pool(jobs: int) -> ProcessPoolExecutor:
    """The process's pool of ``jobs`` workers (a broken one, whose worker died, replaced). The
    workers keep the environment they were started with (the compile cache's folder, the
    toolchain's path): where it has changed since (a test's own cache), the pools of the old
    one are shut down and new workers started."""
    env = hash(frozenset(os.environ.items()))
    with _lock:
        for key in [k for k in _pools if k[1] != env]:
            _pools.pop(key).shutdown(wait=False, cancel_futures=True)
        pool = _pools.get((jobs, env))
        if pool is None or getattr(pool, "_broken", False):
            if QUIET_TRACKER not in sys.warnoptions:  # read when multiprocessing starts its tracker
                sys.warnoptions.append(QUIET_TRACKER)
            pool = _pools[(jobs, env)] = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                                                      initializer=_worker_init, initargs=(os.getpid(),))
        return pool


def shutdown(wait: bool = True) -> None:
    """End the shared workers (a later call starts new ones). A run ends them before its
    report: their pool's manager thread would make the report's figure processes start by
    'spawn' instead of 'fork' (report/assemble/suite_figures.py)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown(wait=wait, cancel_futures=True)


atexit.register(shutdown, wait=False)


def pimap(fn: Callable[[T], R], items: Iterable[T], jobs: int) -> Iterator[R]:
    """``fn(x)`` for each of ``items``, in order, in ``jobs`` processes when there is more than
    one item."""
    items = list(items)
    if jobs <= 1 or len(items) <= 1:
        yield from (fn(x) for x in items)
        return
    futures = [_pool(jobs).submit(fn, x) for x in items]
    try:
        for f in futures:
            yield f.result()
    finally:  # also on Ctrl-C or when the caller stops early: drop what is queued
        for f in futures:
            f.cancel()


def pmap(fn: Callable[[T], R], items: Iterable[T], jobs: int) -> list[R]:
    """``[fn(x) for x in items]``, in ``jobs`` processes when there is more than one item."""
    return list(pimap(fn, items, jobs))
