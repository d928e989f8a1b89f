"""Add how the lanes spread each access (``predict/lanes.py``: the address forms, from the whole
kernel's SASS) to the corpus loops of a stored validation measured before the index kept them.
GPU-free: reads the corpus cubins (``scripts/build_corpus.py`` builds them; git ignores them) and
takes a kernel only where its loop's SASS hash is the one that was measured.

    python scripts/corpus_lanes.py data/h200/predict-validation.json.xz
"""

from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudissect.predict import PredictError  # noqa: E402
from gpudissect.predict.corpus_loops import loop_of  # noqa: E402

MAX_LOOPS = 64


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    doc = json.loads(lzma.open(path).read())
    arch = doc.get("arch") or "sm_90"
    done, skipped = 0, []
    for rec in doc.get("corpus", []):
        if "loop" not in rec:
            continue
        cubin = ROOT / "corpus" / rec["project"] / f"{rec['name']}.{arch}.cubin"
        if not cubin.exists():
            skipped.append(f"{rec['name']}: no {cubin.relative_to(ROOT)}")
            continue
        spec = _matching(cubin.read_bytes(), rec)
        if spec is None:
            skipped.append(f"{rec['name']}: no loop of the cubin has the measured SASS")
            continue
        rec["loop"]["lanes"] = spec["lanes"]
        done += 1
    with lzma.open(path, "wt") as fh:
        json.dump(doc, fh)
    print(f"{path}: lanes added to {done} corpus loops" + "".join(f"\n  skipped {s}" for s in skipped))
    return 0


def _matching(cubin: bytes, rec: dict) -> dict | None:
    """The loop record of the cubin whose SASS hash is the measured one (its innermost loops in
    order; one not between the harness's clock reads is passed over)."""
    for k in range(MAX_LOOPS):
        try:
            lp = loop_of(cubin, rec["symbol"], k)
        except PredictError as e:
            if "no innermost loop" in str(e):
                return None
            continue
        if lp["sass_hash"] == rec["loop"]["sass_hash"]:
            return lp
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
