"""The generated PTX of every kernel of every suite is pinned by hash (tests/ptx_corpus.py):
a restructuring must leave it byte-identical; a deliberate kernel change regenerates the golden
in the same commit (``python tests/ptx_corpus.py --write``)."""

from __future__ import annotations

import importlib

import pytest
from ptx_corpus import golden, groups, hashes

SUITES = ("instructions", "memory", "tensor", "behaviour", "cluster", "async", "sync")


# the instruction catalog's kernels are generated in about half a minute: the slow tier
@pytest.mark.parametrize("suite", [pytest.param(s, marks=pytest.mark.slow) if s == "instructions" else s
                                   for s in SUITES])
def test_suite_ptx_is_byte_identical(suite: str) -> None:
    out: dict[str, str] = {}
    importlib.import_module(f"corpus.{suite}").collect(out)
    want = {k: v for k, v in golden().items() if k == suite or k.startswith(suite + "/")}
    got = groups(out)
    assert want, f"no golden kernels for {suite}"
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    assert not missing and not extra and not changed, (
        f"{suite}: {len(missing)} folders of kernels missing (e.g. {missing[:3]}), {len(extra)} new "
        f"(e.g. {extra[:3]}), {len(changed)} changed (e.g. {changed[:3]}; `python tests/ptx_corpus.py` "
        f"lists them)")


def test_corpus_detects_a_change() -> None:
    """The comparison can fail: one changed character changes the kernel's hash."""
    out: dict[str, str] = {}
    importlib.import_module("corpus.memory").collect(out)
    k = next(iter(out))
    assert hashes({k: out[k]}) != hashes({k: out[k] + " "})
    assert groups(out) != groups({**out, k: out[k] + " "})  # a folder's hash follows each kernel
    assert groups(out) != groups({kk: v for kk, v in out.items() if kk != k})  # and each kernel's presence
