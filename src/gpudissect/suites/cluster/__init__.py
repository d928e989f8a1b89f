"""The cluster suite: thread-block clusters, GPCs and distributed shared memory (suite.py)."""

from gpudissect.suites.cluster.suite import SUITE

__all__ = ["SUITE"]
