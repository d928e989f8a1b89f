"""Generation strategies the verifier tries, in order, until the SASS is what was meant.

A strategy fixes how the dependence chain is built, where the other operands come
from, and how hard ptxas optimises. The list is data (``strategies.toml``), not code.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

STRATEGY_FILE = Path(__file__).with_name("strategies.toml")


@dataclass(frozen=True)
class Strategy:
    name: str
    chain: str = "reg"  # "reg": d = op(d, b, ...); "fib": x = op(x, y); y = op(y, x);
    # "companion": as reg, each instance followed by a non-foldable XOR with a run-time value
    operands: str = "reg"  # "reg": loaded at run time; "imm": PTX immediates (folds!)
    companion: str = "xor"  # the companion's operation (catalog/glue.toml [companion.<op>])
    key: str = "loaded"  # the companion's other operand: "loaded" (one run-time value) or "instance"
    # (an immediate of its own per instance: the chain's value moves even where the operation
    # alone reaches a fixed point, e.g. shifts, min/max)
    opt: int = 3  # ptxas -O level
    description: str = ""


@cache
def all_strategies() -> dict[str, Strategy]:
    doc = tomllib.loads(STRATEGY_FILE.read_text())
    return {s["name"]: Strategy(**s) for s in doc["strategy"]}


def strategy(name: str) -> Strategy:
    try:
        return all_strategies()[name]
    except KeyError:
        raise KeyError(f"unknown strategy '{name}' (known: {', '.join(all_strategies())})") from None


def default_order() -> list[Strategy]:
    doc = tomllib.loads(STRATEGY_FILE.read_text())
    return [strategy(n) for n in doc["order"]]
