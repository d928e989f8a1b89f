"""CPU-bound build work in parallel processes.

Compiling is mostly ptxas and nvdisasm (subprocesses, which threads overlap well), but reading
what they produce (SASS parsing, control-code decoding, the family checks) is Python and holds
the GIL: with threads, a whole-catalog build runs that part on one core. :func:`pmap` runs a
picklable top-level function over items in worker processes ('spawn': nothing of the parent's
threads or GPU state is inherited) and returns the results in order; ``jobs <= 1`` runs inline.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def pmap(fn: Callable[[T], R], items: Iterable[T], jobs: int) -> list[R]:
    """``[fn(x) for x in items]``, in ``jobs`` processes when there is more than one item."""
    items = list(items)
    if jobs <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=mp.get_context("spawn")) as pool:
        try:
            return list(pool.map(fn, items))
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
