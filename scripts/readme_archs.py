"""Write the README's table of supported architectures from the data (the architecture
folders, the suites' gated plans, the shipped maps): ``python scripts/readme_archs.py``
rewrites the block between its markers; ``--check`` exits 1 when the README differs."""

from __future__ import annotations

import sys
from pathlib import Path

from gpudissect.report.assemble.arch_support import BEGIN, END, markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> int:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        print(f"{README}: no block between '{BEGIN}' and '{END}'")
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + markdown_table() + tail
    if "--check" in sys.argv[1:]:
        if new != text:
            print("README.md: the architectures table differs from the data (python scripts/readme_archs.py)")
            return 1
        return 0
    README.write_text(new)
    print(f"-> {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
