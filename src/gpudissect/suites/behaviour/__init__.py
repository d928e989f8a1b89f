"""The behaviour suite: block dispatch and residency, occupancy, warp scheduling, pipes."""

from gpudissect.suites.behaviour.suite import SUITE

__all__ = ["SUITE"]
