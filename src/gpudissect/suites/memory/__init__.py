"""The memory suite (``suite.py``): load-path latencies, cache and TLB sizes, line sizes,
bandwidth and shared-memory bank conflicts."""

from gpudissect.suites.memory.suite import SUITE

__all__ = ["SUITE"]
