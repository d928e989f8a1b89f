"""The async suite: Hopper's asynchronous copy machinery (mbarrier, cp.async, TMA, fences)."""

from gpudissect.suites.async_copy.suite import SUITE

__all__ = ["SUITE"]
