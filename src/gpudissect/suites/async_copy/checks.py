"""The SASS each kernel must hold, from the table ``sass.toml`` beside this module (what ptxas
emits for the operations under test, discovered by compiling the generators), and the harness
opcodes no timed region may hold. One function applies the table; no per-kernel branches."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from gpudissect.kernel.build import Built
from gpudissect.suites.async_copy.kernels import Spec

TABLE = Path(__file__).with_name("sass.toml")


@cache
def sass_table() -> dict:
    return tomllib.loads(TABLE.read_text())


def expected(spec: Spec, table: dict | None = None) -> list[str]:
    """Full-opcode prefixes the kernel of ``spec`` must hold in its timed region: those of its
    kind, then those its parameters name (``[param.<name>]`` keyed by the value)."""
    t = table or sass_table()
    out = list(t.get("kind", {}).get(spec.kind, []))
    for name, by_value in t.get("param", {}).items():
        if name in spec.params:
            out += by_value.get(str(spec.params[name]), [])
    return list(dict.fromkeys(out))


def check(b: Built, spec: Spec, table: dict | None = None) -> list[str]:
    """``sass:`` flags: expected opcodes missing from the timed region, harness opcodes in it."""
    t = table or sass_table()
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
    return {e: sum(1 for f in fulls if f == e or f.startswith(e + ".")) for e in expected(spec, table)}
