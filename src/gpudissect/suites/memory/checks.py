"""SASS check of the memory-suite kernels: the timed region holds exactly the intended load
(or store) kind, with the cache operator ptxas encodes, and no other memory access.

Expectations are data (the architecture's ``memory_paths.toml``). Kernel-parameter loads (constant bank 0,
``LDC``/``ULDC c[0x0][...]``) that ptxas schedules into the region are not memory traffic
of the measured path and are allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpudissect.arch.target import arch_table
from gpudissect.kernel.region import kind_of
from gpudissect.kernel.sass import SassInstr
from gpudissect.suites.memory.kernels import UNROLL

BANK_RE = re.compile(r"c\[(0x[0-9a-fA-F]+)\]")


def expectations(arch: str) -> dict[str, dict]:
    """Per path, the SASS its timed region must hold on ``arch`` (``memory_paths.toml``)."""
    return arch_table(arch, "memory_paths")["path"]


@dataclass
class MemCheck:
    ok: bool
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # full SASS opcode -> count

    def flags(self) -> list[str]:
        return [f"unverified: {p}" for p in self.problems]


def _bank(ins: SassInstr) -> str | None:
    for o in ins.operands:
        m = BANK_RE.search(o)
        if m:
            return m.group(1)
    return None


def _is_param_load(ins: SassInstr) -> bool:
    return ins.opcode in ("LDC", "ULDC") and _bank(ins) == "0x0"


def _matches(ins: SassInstr, rule: dict) -> bool:
    if ins.opcode != rule["op"]:
        return False
    if not set(rule.get("require", [])) <= set(ins.modifiers):
        return False
    return "bank" not in rule or _bank(ins) == rule["bank"]


def check_region(path: str, region: list[SassInstr], arch: str) -> MemCheck:
    """Check one kernel's timed region against the expectation of ``path`` on ``arch``."""
    spec = expectations(arch).get(path)
    if spec is None:
        return MemCheck(False, [f"no SASS expectation for path '{path}'"])
    rules = spec["allow"]
    hits = [0] * len(rules)
    problems: list[str] = []
    counts: dict[str, int] = {}
    for ins in region:
        if "memory" not in kind_of(ins.opcode) or _is_param_load(ins):
            if kind_of(ins.opcode) & {"barrier"}:
                problems.append(f"barrier in the timed region: {ins.full}")
            continue
        counts[ins.full] = counts.get(ins.full, 0) + 1
        for i, r in enumerate(rules):
            if _matches(ins, r):
                hits[i] += 1
                break
        else:
            problems.append(f"unexpected memory instruction {ins.full} in the timed region")
    for r, n in zip(rules, hits, strict=True):
        need = int(r.get("min_count", UNROLL))
        if n < need:
            req = ".".join([r["op"], *r.get("require", [])])
            problems.append(f"expected >= {need} x {req}, found {n}")
    return MemCheck(not problems, sorted(set(problems)), counts)
