"""What the SASS of each cluster kernel's timed region must hold: the rules of the
architecture the kernel was built for (``cluster_sass.toml`` of its folder: per kernel-name
prefix, the SASS that counts one per PTX instance and the SASS the region may hold besides,
found by compiling the PTX with ptxas and reading it). A region that holds anything else, or
not one instance per PTX instruction, is flagged."""

from __future__ import annotations

import re
from collections import Counter

from gpudissect.arch.target import arch_table
from gpudissect.kernel.build import Built


def rules(arch: str) -> dict[str, tuple[str, str]]:
    """Kernel-name prefix -> (SASS that counts one per PTX instance, SASS the region may hold
    besides) on ``arch``."""
    return {k: (v["want"], v["allowed"]) for k, v in arch_table(arch, "cluster_sass")["rule"].items()}


def rule_for(name: str, arch: str) -> tuple[str, str] | None:
    table = rules(arch)
    for prefix in sorted(table, key=len, reverse=True):
        if name.startswith(prefix):
            return table[prefix]
    return None


def check_region(b: Built) -> list[str]:
    """``sass:`` flags for the timed region of ``b`` (none for a kernel without one)."""
    rule = rule_for(b.name, b.arch)
    if rule is None:
        return []
    want, allowed = (re.compile(x) for x in rule)
    ops = Counter(i.full for i in b.region)
    n = sum(c for op, c in ops.items() if want.match(op))
    extra = {op: c for op, c in ops.items() if not want.match(op) and not allowed.match(op)}
    out = []
    if n != b.kernel.meta["ptx_ops"]:
        out.append(f"sass: {b.name}: {n} instances of {rule[0]} in the timed region for "
                   f"{b.kernel.meta['ptx_ops']} PTX instructions")
    if b.name.startswith("cbar") and ops.get("UCGABAR_WAIT", 0) != b.kernel.meta["ptx_ops"]:
        out.append(f"sass: {b.name}: {ops.get('UCGABAR_WAIT', 0)} UCGABAR_WAIT for {b.kernel.meta['ptx_ops']} waits")
    if extra:
        out.append(f"sass: {b.name}: the timed region holds {extra} besides the work")
    if b.spills:
        out.append(f"sass: {b.name}: spills (LDL/STL)")
    return out
