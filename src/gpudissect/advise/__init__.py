"""Efficiency losses and launch advice (thesis chapters 8 and 10): how much of a variant's
maximum rate a launch configuration reaches, what an unfair or partial wave of blocks costs
and its cure (register padding), the compiler's efficacy, and ``gpudissect advise``."""


class AdviseError(ValueError):
    """Bad input to ``advise``: one line that says why."""
