"""Blocks of the README generated from the data: each between its two markers, rewritten by a
script (``scripts/readme_*.py``) and checked by a test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def rewrite(readme: Path, begin: str, end: str, block: Callable[[], str], check: bool, what: str) -> int:
    """Put ``block()`` between the markers (``check``: only say whether it differs); the exit code."""
    text = readme.read_text()
    if begin not in text or end not in text:
        print(f"{readme}: no block between '{begin}' and '{end}'")
        return 1
    head, rest = text.split(begin, 1)
    new = head + block() + rest.split(end, 1)[1]
    if check:
        if new != text:
            print(f"README.md: {what} differs from the data")
            return 1
        return 0
    readme.write_text(new)
    print(f"-> {readme}")
    return 0
