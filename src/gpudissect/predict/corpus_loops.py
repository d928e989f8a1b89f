"""What the corpus's cubins hold (no GPU): each kernel's measured loop (its SASS and control
words, as ``predict --validate`` analyses it, and how the lanes spread its accesses: the address
forms of ``lanes.py`` from the whole kernel), its registers and static shared memory, and the
check that the harness's two clock reads bound that loop. ``scripts/build_corpus.py`` writes
them to ``corpus/index.json``; the GPU half reads the index, not the toolchain."""

from __future__ import annotations

from gpudissect.kernel.control import kernel_words
from gpudissect.kernel.sass import labels_of, parse_sass
from gpudissect.kernel.toolchain import disassemble, resource_usage, sha256
from gpudissect.predict import PredictError
from gpudissect.predict.lanes import Lanes, address_forms
from gpudissect.predict.loops import innermost_loops

CLOCK_READS = ("SR_CLOCKLO", "SR_CLOCKHI")


def loop_of(cubin: bytes, symbol: str, index: int) -> dict:
    """The record of innermost loop ``index`` of ``symbol``: SASS lines, control words, offsets,
    the loop count, registers and shared memory; a ``PredictError`` when the loop is missing or
    not between the two clock reads."""
    text = disassemble(cubin)
    funcs = parse_sass(text)
    if symbol not in funcs:
        raise PredictError(f"no kernel '{symbol}' in the cubin (kernels: {', '.join(sorted(funcs))})")
    instrs = funcs[symbol].instrs
    loops = innermost_loops(symbol, instrs, labels_of(text).get(symbol, {}))
    if not 0 <= index < len(loops):
        raise PredictError(f"{symbol}: no innermost loop {index} (it has {len(loops)})")
    lp = loops[index]
    clocks = [i.offset for i in instrs if any(c in " ".join(i.operands) for c in CLOCK_READS)]
    if not clocks or min(clocks) > lp.start or max(clocks) < lp.end:
        raise PredictError(f"{symbol} loop {index} [{lp.start:#x}..{lp.end:#x}] is not between the "
                           f"harness's clock reads (at {', '.join(f'{c:#x}' for c in clocks) or 'none'})")
    words = {o: hi for o, _lo, hi in kernel_words(cubin)[symbol]}
    lines = [i.text for i in lp.body]
    res = resource_usage(cubin).get(symbol, {})
    return {"start": lp.start, "end": lp.end, "sass": lines,
            "control_hi": [f"{words[i.offset]:#018x}" for i in lp.body],
            "sass_hash": sha256("\n".join(lines)), "loops": len(loops),
            "skippable": list(lp.skippable), "left_out": len(lp.left_out),
            "lanes": Lanes(address_forms(instrs, lp.start, list(lp.body))).to_json(),
            "regs": int(res.get("REG", 0)), "smem_static": int(res.get("SHARED", 0)),
            "cubin_sha256": sha256(cubin)}
