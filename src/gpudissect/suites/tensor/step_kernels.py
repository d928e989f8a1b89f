"""Per-SASS timing kernels for tensor instructions that ptxas splits into several tensor SASS
(seed 001, Tables 2-3: clock reads between the SASS of one wmma).

A PTX instruction cannot be cut between its SASS instructions, so the *split* kernel issues
the same SASS as separate single-SASS mma.sync (the ``partner``, chosen from the static
SASS map by per_sass.py) in the order and with the operand sharing of the original
expansion (``Steps``, read from its SASS by checks.py ``sass_steps``), with a
``%clock64`` read before the first, after each one, and after a dependent use of all the
accumulators. The *whole* kernel times the original instruction the same way: a clock before
it, one after it and one after the dependent use.

ABI (as the other tensor kernels): ``in`` u32 words: word 0 = rounds, word 1 unused, then the
A fragments, the B fragments and the accumulators (``stepped_in_words``); ``out`` one u32
per thread (xor of the accumulators); ``times``: per thread ``rounds`` x ``clocks`` u64 raw
``%clock64`` values. Round r+1 continues the accumulators of round r, and its first clock is
read after round r's closing clock (which waits for the results), so rounds do not overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudissect.arch.target import Target
from gpudissect.catalog.tensor import MmaVariant, element
from gpudissect.kernel.mma import (
    entry_finish,
    entry_prologue,
    mma_instr,
    sink_accumulators,
    sparse_meta_decl,
    tensor_header,
)
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.timing import clock_read
from gpudissect.suites.tensor.kernels import _ab_decl, _regdecl, _text, as_words, operand_words


@dataclass(frozen=True)
class Steps:
    """The tensor SASS of one instruction in issue order: per step the accumulator, the A
    fragment and the B fragment it uses (equal index = the same registers)."""

    acc: tuple[int, ...]
    a: tuple[int, ...]
    b: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.acc)

    def count(self, what: str) -> int:
        return max(getattr(self, what)) + 1

    def to_json(self) -> dict:
        return {"acc": list(self.acc), "a": list(self.a), "b": list(self.b)}


ONE_STEP = Steps((0,), (0,), (0,))


def _frags(v: MmaVariant, steps: Steps) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """Register names of the A, B and accumulator fragments."""
    _, ap = _ab_decl(v)
    _, cp = _regdecl(v)
    ra, rb, rc = v.regs["a"], v.regs["b"], v.regs["c"]
    na = steps.count("a")
    a = [[f"{ap}{j * ra + i}" for i in range(ra)] for j in range(na)]
    b = [[f"{ap}{na * ra + j * rb + i}" for i in range(rb)] for j in range(steps.count("b"))]
    c = [[f"{cp}{j * rc + i}" for i in range(rc)] for j in range(steps.count("acc"))]
    return a, b, c


def stepped_in_words(v: MmaVariant, steps: Steps, rounds: int) -> list[int]:
    """The ``in`` words of ``stepped_kernel``: every fragment has its own words (no two loads
    of one address for ptxas to merge)."""
    words = [rounds, 0]
    words += operand_words(v.atype, v.regs["a"]) * steps.count("a")
    words += operand_words(v.btype, v.regs["b"]) * steps.count("b")
    words += operand_words(v.ctype, v.regs["c"], "zero") * steps.count("acc")
    return words


def _pair_use(regs: list[str], cls: str) -> tuple[str, list[str], list[str]]:
    """The dependent use of the accumulators: independent xors of register pairs (no chain
    between them, so the closing clock waits for the results, not for a chain of ALU
    latencies); returns the declaration, the lines and the b32 temporaries (xor-ed into %acc
    at the end)."""
    lines, words = as_words(regs, cls, "%uw", "%sk64")
    temps = []
    for j in range(0, len(words), 2):
        other = words[j + 1] if j + 1 < len(words) else "1"
        lines.append(f"  xor.b32 %ux{j // 2}, {words[j]}, {other};")
        temps.append(f"%ux{j // 2}")
    return f"  .reg .b32 %uw<{len(words)}>, %ux<{len(temps)}>;", lines, temps


def _clocked_rounds(lines: list[str], segments: list[list[str]]) -> list[str]:
    """A loop of ``%reps`` rounds: ``%clock64`` before, between and after ``segments``; the
    round's clocks are stored after its closing read."""
    k = len(segments) + 1
    out = list(lines) + [
        "  mul.wide.u32 %off, %gtid, %reps;",
        f"  mul.lo.u64 %off, %off, {8 * k};",
        "  add.u64 %tptr, %times, %off;",
        "  mov.u32 %rep, 0;",
        "ROUND:",
        clock_read("%ck0"),
    ]
    for i, seg in enumerate(segments, 1):
        out += [*seg, clock_read(f"%ck{i}")]
    out += [f"  st.global.u64 [%tptr+{8 * i}], %ck{i};" for i in range(k)]
    out += [f"  add.u64 %tptr, %tptr, {8 * k};", "  add.u32 %rep, %rep, 1;",
            "  setp.lt.u32 %lp, %rep, %reps;", "  @%lp bra ROUND;"]
    return out


def stepped_kernel(v: MmaVariant, steps: Steps, name: str, target: Target) -> Kernel:
    """One warp, ``%reps`` rounds of: clock, (instruction ``v`` of step i, clock) for each
    step, xor of every accumulator register, clock (``steps.n + 2`` clocks per round).

    With a single-SASS ``v`` and the steps of a multi-SASS instruction this is the split
    kernel; with the multi-SASS instruction itself and ``ONE_STEP`` it is the whole kernel."""
    if v.regs["d"] != v.regs["c"]:
        raise ValueError(f"{v.name}: D and C fragments differ in size; cannot chain")
    cc, _ = _regdecl(v)
    ac, _ = _ab_decl(v)
    a, b, c = _frags(v, steps)
    k = steps.n + 2
    use_decl, use, temps = _pair_use([r for f in c for r in f], cc)
    decl = [use_decl, f"  .reg {ac} {a[0][0].rstrip('0123456789')}<{len(a) * len(a[0]) + len(b) * len(b[0])}>;",
            f"  .reg {cc} {c[0][0].rstrip('0123456789')}<{len(c) * len(c[0])}>;",
            f"  .reg .b64 %ck<{k}>;"]
    lines = entry_prologue(name, decl) + sparse_meta_decl(v)
    wide = ac == ".f64"
    off = 8
    for r in [x for f in a + b for x in f]:
        lines.append(f"  ld.global.{'f64' if wide else 'u32'} {r}, [%in+{off}];")
        off += element(v.atype).reg_bytes
    cty = {".f64": "f64", ".f32": "f32"}.get(cc, "u32")
    for r in [x for f in c for x in f]:
        lines.append(f"  ld.global.{cty} {r}, [%in+{off}];")
        off += element(v.ctype).reg_bytes
    segments = [[mma_instr(v, c[steps.acc[i]], a[steps.a[i]], b[steps.b[i]], c[steps.acc[i]])]
                for i in range(steps.n)]
    segments.append(use)
    out = _clocked_rounds(lines, segments)
    sink: list[str] = []
    sink_accumulators(sink, temps, ".b32")
    sink_accumulators(sink, [r for f in c for r in f], cc)
    return Kernel(name, tensor_header(target), _text(entry_finish(out, sink)), v.name, "per_sass",
                  steps.count("acc"), steps.n, 1,
                  meta={"clocks": k, "steps": steps.to_json(), "in_words": (off + 3) // 4})
