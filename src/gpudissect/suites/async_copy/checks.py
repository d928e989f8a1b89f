"""The SASS each kernel must hold, from the architecture's table ``async_sass.toml`` (what
ptxas emits for the operations under test there, discovered by compiling the generators), and
the harness opcodes no timed region may hold. One function applies the table; no per-kernel
branches. A built kernel is checked against the table of the architecture it was built for."""

from __future__ import annotations

from gpudissect.arch.target import arch_table
from gpudissect.kernel.build import Built
from gpudissect.suites.async_copy.kernels import Spec


def sass_table(arch: str) -> dict:
    """The expectations of ``arch`` (``async_sass.toml`` of its folder)."""
    return arch_table(arch, "async_sass")


def expected(spec: Spec, table: dict) -> list[str]:
    """Full-opcode prefixes the kernel of ``spec`` must hold in its timed region: those of its
    kind, then those its parameters name (``[param.<name>]`` keyed by the value)."""
    t = table
    out = list(t.get("kind", {}).get(spec.kind, []))
    for name, by_value in t.get("param", {}).items():
        if name in spec.params:
            out += by_value.get(str(spec.params[name]), [])
    return list(dict.fromkeys(out))


def check(b: Built, spec: Spec, table: dict | None = None) -> list[str]:
    """``sass:`` flags: expected opcodes missing from the timed region, harness opcodes in it."""
    t = table or sass_table(b.arch)
    fulls = [i.full for i in b.region]
    flags = []
    if not fulls:
        flags.append(f"sass: {b.name}: empty timed region")
    missing = [e for e in expected(spec, t) if not any(f == e or f.startswith(e + ".") for f in fulls)]
    if missing:
        flags.append(f"sass: {b.name}: timed region lacks {', '.join(missing)}")
    bad = sorted({f for f in fulls for x in t.get("forbidden", []) if f == x or f.startswith(x + ".")})
    if bad:
        flags.append(f"sass: {b.name}: harness in the timed region: {', '.join(bad)}")
    return flags


def sass_counts(b: Built, spec: Spec, table: dict | None = None) -> dict[str, int]:
    """How many of each expected opcode the timed region holds (evidence kept with a result)."""
    fulls = [i.full for i in b.region]
    return {e: sum(1 for f in fulls if f == e or f.startswith(e + ".")) for e in expected(spec, table or sass_table(b.arch))}
