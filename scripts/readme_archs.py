"""Write the README's table of supported architectures from the data (the architecture
folders, the suites' gated plans, the shipped maps): ``python scripts/readme_archs.py``
rewrites the block between its markers; ``--check`` exits 1 when the README differs."""

from __future__ import annotations

import sys
from pathlib import Path

from gpudissect.report.assemble.arch_support import BEGIN, END, markdown_table
from gpudissect.report.assemble.readme import rewrite

README = Path(__file__).resolve().parents[1] / "README.md"

if __name__ == "__main__":
    sys.exit(rewrite(README, BEGIN, END, markdown_table, "--check" in sys.argv[1:],
                     "the architectures table (python scripts/readme_archs.py)"))
