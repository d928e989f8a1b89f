"""What a fleet runs on every GPU: the quick fleet profile of ``data/fleet.toml``, or the
``SUITE:PATTERN`` items given on the command line (the syntax of ``gpudissect run``)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources

from gpudissect.suites import get_suite

PROFILE = "fleet.toml"


@dataclass
class Profile:
    suites: dict[str, list[str] | None]  # suite -> its patterns (None: every item)
    quick: bool = True
    timeout_s: float = 900.0
    threshold: float = 0.05
    sample_s: float = 1.0
    throttle_reasons: dict[str, int] = field(default_factory=dict)
    options: dict = field(default_factory=lambda: {"catalog": [], "selfcheck": False})

    def validate(self) -> None:
        """Each suite's patterns checked by the suite itself (SuiteInputError: one line)."""
        for name, patterns in self.suites.items():
            get_suite(name).validate(patterns, self.options)

    def plan_json(self) -> dict:
        """What identifies the work of a fleet (a resumed fleet must ask for the same)."""
        return {"suites": self.suites, "quick": self.quick}


def load_profile(suites: dict[str, list[str] | None] | None = None) -> Profile:
    """The shipped profile; ``suites`` (from the command line's patterns) replaces its items."""
    doc = tomllib.loads(resources.files("gpudissect.data").joinpath(PROFILE).read_text())
    prof = Profile(suites={k: list(v) for k, v in doc["suites"].items()}, quick=bool(doc["quick"]),
                   timeout_s=float(doc["timeout_s"]), threshold=float(doc["threshold"]),
                   sample_s=float(doc["sample_s"]),
                   throttle_reasons={k: int(v) for k, v in doc["throttle_reasons"].items()})
    if suites:
        prof.suites = dict(suites)
    return prof
