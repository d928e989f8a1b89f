"""The tensor-core suite (suite.py): mma.sync, wmma, mma.sp, wgmma and the fragment loads/stores."""

from gpudissect.suites.tensor.suite import SUITE

__all__ = ["SUITE"]
