"""The instruction suite (``SUITE``): every catalog variant's PTX mapped to verified SASS, then
timed for latency, throughput and dependence distance."""

from gpudissect.suites.instructions.suite import InstructionsSuite

SUITE = InstructionsSuite()
