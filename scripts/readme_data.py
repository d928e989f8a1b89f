"""Write the README's table of the shipped data sets from the sets (data/h100, data/h200: GPU,
UUID, driver, platform, date, clocks, each suite's wall time): ``python scripts/readme_data.py``
rewrites the block between its markers; ``--check`` exits 1 when the README differs."""

from __future__ import annotations

import sys
from pathlib import Path

from gpudissect.report.assemble.readme import rewrite
from gpudissect.report.assemble.shipped_sets import BEGIN, END, markdown_table

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    sys.exit(rewrite(ROOT / "README.md", BEGIN, END, lambda: markdown_table(ROOT), "--check" in sys.argv[1:],
                     "the table of the shipped sets (python scripts/readme_data.py)"))
