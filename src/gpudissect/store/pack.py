"""A results database packed for shipping (``data/<gpu>/<suite>.db.xz``).

The store keeps each kernel text zlib-compressed on its own (fast random access), which
hides from an outer compressor that the texts of one variant's kernels are nearly the same:
gzip of a store barely shrinks it. Packing rewrites every text as zlib *stored* blocks (level 0:
still read by the same ``zlib.decompress``, nothing else changes), vacuums the copy into pages
of 64 KiB (:data:`PAGE_SIZE`) and compresses it whole with xz, whose window spans many kernels:
the instruction suite's H100 store falls from 12.8 MB (gzip) to a few MB. :func:`unpack` (and
``open_store``) read it back; SQLite reads a database of any page size.

    python -m gpudissect.store.pack RESULTS.db OUT.db.xz
"""

from __future__ import annotations

import lzma
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

PRESET = 9 | lzma.PRESET_EXTREME
MIN_DICT, MAX_DICT = 64 << 20, 1 << 30  # xz's dictionary: at least preset 9's, at most 1 GiB
# SQLite's largest page: a kernel text spans 16 times fewer overflow pages, each of whose 4-byte
# links breaks a match of xz's (the tensor store's pack: 1.10 MB with 4 KiB pages, 0.95 MB)
PAGE_SIZE = 65536
BLOCK = 32 << 20  # xz's block when threaded: the instruction store of ~290 MB in 9 blocks


def _filters(size: int) -> list[dict]:
    """xz -9e with a dictionary as large as the store (within MIN_DICT..MAX_DICT): one window
    spans the whole store, so kernels of similar variants far apart in it share it (the
    instruction suite's store of about 290 MB: 6.8 MB against 7.6 MB with a 64 MiB window);
    literals coded with 4 bits of context and no position bits (lc=4, pb=0: text, not words)."""
    return [{"id": lzma.FILTER_LZMA2, "preset": PRESET, "dict_size": min(max(size, MIN_DICT), MAX_DICT),
             "lc": 4, "pb": 0}]


def pack(db: Path | str, out: Path | str, threads: int = 1) -> int:
    """Pack the store ``db`` into ``out`` (xz); returns the bytes written. ``threads`` > 1: a
    store larger than two blocks (:data:`BLOCK`) is compressed by the ``xz`` tool on that many
    threads, where it is installed (the device machine's instruction store: minutes alone)."""
    db, out = Path(db), Path(out)
    if not db.is_file():
        raise FileNotFoundError(f"{db}: no such results database")
    with tempfile.TemporaryDirectory(prefix="gpudissect-pack-") as td:
        copy = Path(td) / "s.db"
        src = sqlite3.connect(db)
        dst = sqlite3.connect(copy)
        src.backup(dst)  # a consistent copy, WAL included
        src.close()
        rows = dst.execute("SELECT hash, text FROM kernels").fetchall()
        dst.executemany("UPDATE kernels SET text=? WHERE hash=?",
                        [(zlib.compress(zlib.decompress(t), 0), h) for h, t in rows])
        dst.commit()
        dst.execute("PRAGMA journal_mode=DELETE")
        dst.execute(f"PRAGMA page_size={PAGE_SIZE}")  # takes effect in the VACUUM
        dst.execute("VACUUM")
        dst.close()
        tmp = out.with_name(out.name + ".part")
        size = copy.stat().st_size
        xz = shutil.which("xz")
        if threads > 1 and xz and size > 2 * BLOCK:
            # xz's own threads: blocks of BLOCK bytes compressed side by side (each its own
            # window: a little larger than one window over all, many times faster on many cores)
            with copy.open("rb") as f, tmp.open("wb") as z:
                subprocess.run([xz, "-9e", f"-T{threads}", f"--block-size={BLOCK}", "-c"], stdin=f, stdout=z,
                               check=True)
        else:
            with copy.open("rb") as f, lzma.open(tmp, "wb", format=lzma.FORMAT_XZ, filters=_filters(size)) as z:
                shutil.copyfileobj(f, z, 1 << 20)
        tmp.replace(out)
    return out.stat().st_size


def unpack(packed: Path | str, out: Path | str) -> None:
    """The database of a packed (``.xz``) or gzipped (``.gz``) store, written to ``out``."""
    import gzip

    packed = Path(packed)
    opener = lzma.open if packed.name.endswith(".xz") else gzip.open
    with opener(packed, "rb") as src, Path(out).open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m gpudissect.store.pack RESULTS.db OUT.db.xz", file=sys.stderr)
        return 2
    n = pack(argv[0], argv[1], threads=os.cpu_count() or 1)
    print(f"{argv[0]} -> {argv[1]} ({n / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
