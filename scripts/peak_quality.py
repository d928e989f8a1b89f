"""How many verified instruction variants have a throughput peak with no quality flag (issue
15's figure), and which do not, by flag: ``python scripts/peak_quality.py data/h100/instructions.json.xz``
(a plain, ``.xz`` or ``.gz`` suite document).

Informational flags (what the record is, not a doubt about it) do not count: glue and paired
lanes (what the kernel holds), a data-dependent path (no static limit), a remeasurement, a value
that stands in from the same SASS or with its companion removed."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from gpudissect.compressed import decompress

INFO = ("glue", "paired", "branch", "remeasured", "same SASS as", "companion removed")


def quality(flags: list[str]) -> list[str]:
    return sorted({f.split(":")[0] for f in flags if not f.startswith(INFO)})


def main(path: str) -> None:
    records = json.loads(decompress(Path(path).read_bytes(), path))["records"]
    peaks = {r["variant"]: r for r in records if r["measure"] == "throughput_peak"}
    verified = {v: r for v, r in peaks.items()
                if not any(f.startswith(("unverified", "unsupported", "error:")) for f in r["flags"])}
    bad = {v: quality(r["flags"]) for v, r in verified.items() if quality(r["flags"]) or r["value"] is None}
    clean = len(verified) - len(bad)
    print(f"{clean} of {len(verified)} verified variants ({clean / max(len(verified), 1):.1%}) "
          f"have an unflagged throughput peak ({len(peaks) - len(verified)} not verified)")
    for flags, n in Counter(tuple(f) for f in bad.values()).most_common():
        names = sorted(v for v, f in bad.items() if tuple(f) == flags)
        print(f"  {n:3d}  {', '.join(flags) or 'no value'}: {' '.join(names)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data/h100/instructions.json.xz")
