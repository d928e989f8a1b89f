"""store/pack.py: a store packed for shipping reads back whole, smaller than gzip."""

from __future__ import annotations

import gzip
import lzma
import random
import sqlite3

import pytest

from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Result, Store, StoreError, open_store
from gpudissect.store.pack import PAGE_SIZE, pack, unpack


def _store(path) -> int:
    st = Store(path)
    run = st.start_run("instructions", FakeDevice().info, "ptxas x", "sm_90", {}, {}, "0")
    texts = {}
    rng = random.Random(1)  # SASS-like lines a compressor cannot predict within one text ...
    base = [f"  /*{j:04x}*/ FFMA R{rng.randrange(256)}, R{rng.randrange(256)}, R{rng.randrange(256)} ;"
            for j in range(600)]
    for i in range(40):  # ... but a family of nearly identical kernels, as the suites make them
        body = "\n".join(base[: 400 + 5 * i])
        texts[f"h{i}"] = ("sass", f".entry k{i}()\n{body}\n")
        st.save(run, f"v{i}", [Result(f"v{i}", "latency", 4.0 + i, "cycles", "slope", ptx_hash=f"h{i}")],
                texts={f"h{i}": texts[f"h{i}"]})
    st.close()
    return run


def test_a_packed_store_reads_back_every_record_and_text(tmp_path):
    db = tmp_path / "r.db"
    run = _store(db)
    out = tmp_path / "r.db.xz"
    n = pack(db, out)
    gz = len(gzip.compress(db.read_bytes(), 9))
    assert 0 < n < gz / 2  # the texts compress together
    st = open_store(out)
    try:
        rows = st.results(run)
        assert sorted(r["variant"] for r in rows) == sorted(f"v{i}" for i in range(40))
        assert st.kernel_text("h7").startswith(".entry k7()")
    finally:
        st.close()
    back = tmp_path / "back.db"  # pages of 64 KiB: a text crosses few page links (xz matches)
    unpack(out, back)
    con = sqlite3.connect(back)
    assert con.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 65536
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_a_damaged_packed_store_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.db.xz"
    bad.write_bytes(b"not xz at all" * 10)
    with pytest.raises(StoreError, match="not a readable xz file"):
        open_store(bad)
    cut = tmp_path / "cut.db.xz"
    cut.write_bytes(lzma.compress(b"x" * 100000)[:50])
    with pytest.raises(StoreError, match="truncated xz file|not a readable xz file"):
        open_store(cut)
    with pytest.raises(StoreError, match="read-only"):
        open_store(tmp_path / "new.db.xz", create=True)


def test_packing_a_missing_store_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such results database"):
        pack(tmp_path / "none.db", tmp_path / "none.db.xz")
    assert list(tmp_path.iterdir()) == []


def test_a_large_store_packed_on_threads_reads_back_the_same(tmp_path, monkeypatch):
    import gpudissect.store.pack as pk

    if pk.shutil.which("xz") is None:
        pytest.skip("no xz tool here")
    db = tmp_path / "r.db"
    run = _store(db)
    monkeypatch.setattr(pk, "BLOCK", 4096)  # the small store spans many blocks
    calls = []
    real = pk.subprocess.run
    monkeypatch.setattr(pk.subprocess, "run", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    pack(db, tmp_path / "t.db.xz", threads=4)
    assert calls and "-T4" in calls[0]
    st = open_store(tmp_path / "t.db.xz")
    try:
        assert sorted(r["variant"] for r in st.results(run)) == sorted(f"v{i}" for i in range(40))
        assert st.kernel_text("h7").startswith(".entry k7()")
    finally:
        st.close()
