"""Every kernel every suite generates, as {name: PTX} (no GPU, no compiler): the corpus whose
hashes tests/data/ptx_golden.json.gz pins (one per folder of kernel names, :func:`groups`), so that a restructuring provably leaves the generated
PTX byte-identical (tests/test_ptx_identity.py). Regenerate the golden deliberately, with the
commit that changes a kernel: ``python tests/ptx_corpus.py --write``."""

from __future__ import annotations

import gzip
import hashlib
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

GOLDEN = Path(__file__).parent / "data" / "ptx_golden.json.gz"


def corpus() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in ("instructions", "memory", "tensor", "behaviour", "cluster", "async", "sync"):
        importlib.import_module(f"corpus.{name}").collect(out)
    return out


def hashes(c: dict[str, str]) -> dict[str, str]:
    """Kernel name -> hash of its PTX, every kernel of a corpus on its own."""
    return {k: hashlib.sha256(v.encode()).hexdigest()[:10] for k, v in sorted(c.items())}


def groups(c: dict[str, str]) -> dict[str, str]:
    """Folder of kernel names (a variant's or a probe family's, the name up to its last '/') ->
    one hash of its kernels' names and PTX: what the golden pins (a kernel changed, added or
    removed changes its folder's hash; 7,000 entries instead of 170,000 keep the golden small)."""
    h = hashes(c)
    by: dict[str, list[str]] = {}
    for k in h:
        by.setdefault(k.rsplit("/", 1)[0], []).append(f"{k.rsplit('/', 1)[-1]}:{h[k]}")
    return {g: hashlib.sha256("\n".join(sorted(v)).encode()).hexdigest()[:12] for g, v in sorted(by.items())}


def golden() -> dict[str, str]:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


if __name__ == "__main__":
    c = corpus()
    h = groups(c)
    if "--write" in sys.argv:
        GOLDEN.write_bytes(gzip.compress(json.dumps(h, indent=0).encode(), mtime=0))
        print(f"{len(c)} kernels in {len(h)} folders -> {GOLDEN}")
    else:
        g = golden()
        diff = sorted(k for k in set(g) | set(h) if g.get(k) != h.get(k))
        print(f"{len(c)} kernels in {len(h)} folders, {len(diff)} folders differ from the golden")
        for k in diff[:20]:
            print("  ", k)
        sys.exit(1 if diff else 0)
