"""The README's table of supported architectures is generated from the data (issue 34): the
architecture folders, the suites' gated plans and the shipped maps. A test fails when they drift."""

from __future__ import annotations

from pathlib import Path

from gpudissect.arch.target import supported_archs
from gpudissect.report.assemble.arch_support import BEGIN, END, markdown_table, support
from gpudissect.suites import SUITES

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_table_is_the_data():
    text = README.read_text()
    block = BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END
    assert block == markdown_table(), "README.md's architectures table drifted: python scripts/readme_archs.py"


def test_every_architecture_folder_has_a_row_and_runs_something():
    table = markdown_table()
    for arch in supported_archs():
        assert f"| {arch} |" in table
        s = support(arch)
        assert s.runs.get("instructions", (0, 0))[0] > 0, arch
        assert sorted([*s.runs, *s.not_run]) == sorted(SUITES), arch  # each suite runs or says why not
