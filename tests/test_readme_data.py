"""The README's table of the shipped sets is generated from the sets (issue 33: figures in the
README are generated, not typed): a test fails when it drifts, and the table follows the data."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from gpudissect.report.assemble.shipped_sets import BEGIN, END, markdown_table, set_row

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_table_of_the_shipped_sets_is_the_data():
    text = (ROOT / "README.md").read_text()
    block = BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END
    assert block == markdown_table(ROOT), "README.md's table of the shipped sets drifted: python scripts/readme_data.py"


def test_the_table_follows_the_data(tmp_path):
    """Another GPU, clock and log in a set change its row (the table is read, not typed)."""
    src = ROOT / "data" / "h200"
    from gpudissect.compressed import decompress

    doc = json.loads(decompress((src / "sync.json.xz").read_bytes(), src / "sync.json.xz"))
    doc["provenance"]["gpu_uuid"] = "00000000-test-uuid"
    doc["provenance"]["clocks_before"]["sm_mhz_kernel"] = 1234.0
    doc["provenance"]["platform"] = {"ecc": "off", "power_limit_w": 500.0, "host": "bare metal"}
    folder = tmp_path / "h200"
    folder.mkdir()
    (folder / "sync.json").write_text(json.dumps(doc))
    # a suite cut at one call's limit and resumed in the next: its two walls add up
    (folder / "run.log.gz").write_bytes(gzip.compress(b"sync: wall 12.34 s\nmemory: wall 3.5 s\nsync: wall 1 s\n"))
    row = set_row(folder)
    assert row["uuid"] == "`00000000-test-uuid`"
    assert row["kernel"].startswith("1234")
    assert row["platform"] == "ECC off, 500 W, bare metal"
    assert row["walls"] == {"sync": 13.34, "memory": 3.5}
    assert row["tests"] == "not run with this set"
    shutil.copy(ROOT / "data" / "h100" / "gpu-pytest.log", folder / "gpu-pytest.log")
    assert "passed" in set_row(folder)["tests"]
    # a set from one run of every suite: each suite's summary line (wrapped by the console) gives
    # its total
    (folder / "run.log.gz").write_bytes(gzip.compress(
        b"run 1 (sync): compile_s 1.0 s, gpu_s 9.5 s, store_s 0.3 s, \nanalysis_s 0.1 s, total_s 11.3 s\n"
        b"- a conclusion\nrun 2 (memory): compile_wait_s 0.0 s, gpu_s 5.5 s, total_s 5.9 s\n"))
    assert set_row(folder)["walls"] == {"sync": 11.3, "memory": 5.9}
