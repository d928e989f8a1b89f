"""The instruction suite (``SUITE``): every catalog variant's PTX mapped to verified SASS, then
timed for latency, throughput and dependence distance (the core), with its studies beside
(``studies/``); ``suite.py`` puts them together. ``SUITE`` is made when first asked for, so the
suite's commands (``commands.py``) register on the command line without loading it."""


def __getattr__(name: str):
    if name == "SUITE":
        from gpudissect.suites.instructions.suite import InstructionsSuite

        suite = globals()["SUITE"] = InstructionsSuite()
        return suite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
