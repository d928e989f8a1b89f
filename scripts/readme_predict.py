"""Write the README's example of ``gpudissect predict`` on real code from the shipped validation:
``python scripts/readme_predict.py`` rewrites the block between its markers; ``--check`` exits 1
when the README differs."""

from __future__ import annotations

import sys
from pathlib import Path

from gpudissect.report.assemble.predict_example import BEGIN, END, shipped_block
from gpudissect.report.assemble.readme import rewrite

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    sys.exit(rewrite(ROOT / "README.md", BEGIN, END, lambda: shipped_block(ROOT), "--check" in sys.argv[1:],
                     "the predict example (python scripts/readme_predict.py)"))
