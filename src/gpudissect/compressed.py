"""Files compressed as their names say: ``.xz`` (xz -9e, the shipped suite documents,
``data/<gpu>/<suite>.json.xz``), ``.gz`` (gzip: maps, logs and older data sets), else plain.
Both compressors write no time stamp, so one document always gives the same bytes."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

XZ_PRESET = 9 | lzma.PRESET_EXTREME  # xz -9e: a suite document of 20 MB packs a third smaller than gzip -9


def kind(path: Path | str) -> str | None:
    """``"xz"``, ``"gzip"`` or None (plain) for the file name ``path``."""
    name = Path(path).name
    return "xz" if name.endswith(".xz") else "gzip" if name.endswith(".gz") else None


def compress(data: bytes, path: Path | str) -> bytes:
    """``data`` as the file ``path`` holds it (compressed for a ``.xz`` or ``.gz`` name)."""
    k = kind(path)
    if k == "xz":
        return lzma.compress(data, format=lzma.FORMAT_XZ, preset=XZ_PRESET)
    if k == "gzip":
        return gzip.compress(data, mtime=0)
    return data


def decompress(raw: bytes, path: Path | str) -> bytes:
    """The content of the file ``path`` whose bytes are ``raw`` (an empty file stays empty).
    A truncated file raises EOFError; a damaged one ``gzip.BadGzipFile``, ``zlib.error`` or
    ``lzma.LZMAError`` (:data:`ERRORS`)."""
    k = kind(path)
    if not raw or k is None:
        return raw
    return _unxz(raw) if k == "xz" else gzip.decompress(raw)


def _unxz(raw: bytes) -> bytes:
    """xz streams one after another (as ``xz -dc`` reads them); data that ends inside a stream
    is EOFError, as gzip's (``lzma.decompress`` would call it an LZMAError)."""
    out = []
    while raw:
        d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        out.append(d.decompress(raw))
        if not d.eof:
            raise EOFError("xz data ends before its end-of-stream marker")
        raw = d.unused_data.lstrip(b"\0")  # stream padding
    return b"".join(out)


def _errors() -> tuple[type[Exception], ...]:
    import zlib

    return (gzip.BadGzipFile, zlib.error, lzma.LZMAError)


ERRORS = _errors()  # a damaged .gz or .xz file
