"""The memory suite (``suite.py``): load-path latencies, cache and TLB sizes, line sizes,
bandwidth and shared-memory bank conflicts.

Its modules, from the ground up: ``plan.py`` (what a run measures), ``kernels.py`` and
``stream_kernels.py`` (the PTX), ``checks.py`` (the SASS each timed region must hold),
``launcher.py`` (the kernels compiled and launched on the device), ``bandwidth.py`` and
``texture.py`` (their benchmarks, summaries and conclusions), ``analyse.py`` (the suite's
summary and conclusions), ``suite.py`` (the items and the other benchmarks); ``view.py`` and
``figures.py`` present the summary."""

from gpudissect.suites.memory.suite import SUITE

__all__ = ["SUITE"]
