"""The instruction suite (``SUITE``): every catalog variant's PTX mapped to verified SASS, then
timed for latency, throughput and dependence distance (the core), with its studies beside
(``studies/``); ``suite.py`` puts them together."""

from gpudissect.suites.instructions.suite import InstructionsSuite

SUITE = InstructionsSuite()
