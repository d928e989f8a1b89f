"""Output files of the commands: checked before the work starts, written atomically.

:func:`check_outputs` says in one line why a path cannot be written (a directory, a parent that
is a file, a folder without write permission, two outputs naming one file) before a command
does its long work; :func:`atomic_outputs` hands the writers temporary files in the same
folders and moves them into place only when every one is complete, so a failure (or Ctrl-C)
never leaves a half-written file or half of a pair; :func:`writing` and :func:`write_texts` are
the writers' side, where a write that fails is an :class:`OutputError` too. Missing parent folders
are created (as the commands always did) when their nearest existing ancestor is a writable folder.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class OutputError(ValueError):
    """An output path that cannot be written (the message is one line naming it)."""


def _existing_ancestor(path: Path) -> Path:
    p = path.parent
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_outputs(*paths: Path | None) -> None:
    """Raise :class:`OutputError` unless every given path (``None``: not asked for) can be written."""
    seen: dict[Path, Path] = {}
    for path in paths:
        if path is None:
            continue
        path = Path(path)
        key = path.resolve()
        if key in seen:
            raise OutputError(f"{seen[key]} and {path} are the same file: give two different outputs")
        seen[key] = path
        if path.is_dir():
            raise OutputError(f"{path}: is a directory, not a file name")
        if path.exists() and not os.access(path, os.W_OK):
            raise OutputError(f"{path}: not writable (permission denied)")
        folder = _existing_ancestor(path)
        if not folder.is_dir():
            raise OutputError(f"{path}: {folder} is not a directory")
        _probe(folder, path)


def _probe(folder: Path, path: Path) -> None:
    """Make and remove a file in ``folder``: the one test that also holds for read-only file
    systems and special folders (``os.access`` says yes to root everywhere)."""
    probe = folder / f".tmp-{os.getpid()}-{secrets.token_hex(4)}-probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise OutputError(f"{path}: cannot write in {folder} ({e.strerror or e})") from None
    probe.unlink(missing_ok=True)


@contextmanager
def atomic_outputs(*paths: Path) -> Iterator[list[Path]]:
    """Temporary paths (same folders, names ending like the real ones, so ``.gz`` and other
    suffixes still choose the format) for the block to write; moved onto ``paths`` when the
    block succeeds, removed (with any folder made for them) when it fails."""
    made: list[Path] = []
    for path in paths:
        missing = []
        p = Path(path).parent
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
    tag = f".tmp-{os.getpid()}-{secrets.token_hex(4)}-"
    tmps = [Path(p).with_name(tag + Path(p).name) for p in paths]
    try:
        yield tmps
        for tmp, path in zip(tmps, paths, strict=True):
            os.replace(tmp, path)
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass
        raise


@contextmanager
def writing(*paths: Path) -> Iterator[list[Path]]:
    """Temporary paths beside ``paths`` to write (:func:`atomic_outputs`): all moved into place
    at the end, or none; an ``OSError`` of the block is an :class:`OutputError` naming them."""
    try:
        with atomic_outputs(*paths) as tmps:
            yield tmps
    except OSError as e:
        raise OutputError(f"cannot write {', '.join(map(str, paths))}: {e.strerror or e}") from None


def write_texts(items: list[tuple[Path, Callable[[], str]]]) -> None:
    """Every ``(path, text)`` pair, the texts made first, the files written together."""
    texts = [make() for _, make in items]
    with writing(*(p for p, _ in items)) as tmps:
        for tmp, text in zip(tmps, texts, strict=True):
            tmp.write_text(text)
