"""The sync suite: atomic contention, barriers, fences and launch costs."""

from gpudissect.suites.sync.suite import SUITE

__all__ = ["SUITE"]
