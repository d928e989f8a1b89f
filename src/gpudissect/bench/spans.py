"""Where a run's time goes: named spans of wall time (how many, how many seconds), gathered per
suite run and stored with its timing split (``runs.timing["profile"]``).

A span is ``<kind>/<label>``. Kinds: ``prepare`` (mapping, generating and compiling, by step),
``measure`` (an item's or a study's measurement and its analysis), ``device`` (the calls into the
GPU, attributed to the label being measured: what a measurement spends waiting for the GPU, its
launches and copies; the rest of its ``measure`` span is the host's analysis), ``derive`` and
``summary``. Labels nest (a study inside an item): a nested span is a part of the enclosing
one, never added to it.

The active profile and label live in context variables: a thread of its own (the compile
ahead of another suite) records into the profile it activated, not into the run it overlaps.
Recording costs two clock reads; with no active profile nothing is recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any


class Profile:
    def __init__(self) -> None:
        self.spans: dict[str, list[float]] = {}  # name -> [count, seconds]
        self._lock = threading.Lock()  # the batches' compile thread records beside the run's

    def add(self, name: str, seconds: float, count: int = 1) -> None:
        with self._lock:
            s = self.spans.setdefault(name, [0, 0.0])
            s[0] += count
            s[1] += seconds

    def to_json(self) -> dict[str, dict[str, float]]:
        """{span: {"n": count, "s": seconds}}, the longest first."""
        return {k: {"n": int(n), "s": round(s, 3)}
                for k, (n, s) in sorted(self.spans.items(), key=lambda kv: -kv[1][1])}


_active: ContextVar[Profile | None] = ContextVar("gpudissect_profile", default=None)
_label: ContextVar[str] = ContextVar("gpudissect_profile_label", default="")


@contextmanager
def activated(p: Profile) -> Iterator[Profile]:
    """Record this thread's spans into ``p`` while the block runs."""
    tok = _active.set(p)
    try:
        yield p
    finally:
        _active.reset(tok)


@contextmanager
def span(kind: str, label: str | None = None) -> Iterator[None]:
    """Time the block as ``kind/label`` (``label``: the current one when None); with ``kind``
    ``measure`` the label is also the one the device calls inside it are attributed to."""
    p = _active.get()
    if p is None:
        yield
        return
    name = label if label is not None else _label.get()
    tok = _label.set(name) if kind == "measure" else None
    t = time.perf_counter()
    try:
        yield
    finally:
        p.add(f"{kind}/{name}", time.perf_counter() - t)
        if tok is not None:
            _label.reset(tok)


class TimedDevice:
    """A device whose calls add ``device/<label>`` spans to the active profile; everything else
    is the wrapped device's."""

    TIMED = ("run", "run_many", "launch", "launch_series")

    def __init__(self, dev: Any):
        self._dev = dev

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._dev, name)
        if name not in self.TIMED or not callable(attr):
            return attr

        def timed(*a: Any, **k: Any) -> Any:
            p = _active.get()
            if p is None:
                return attr(*a, **k)
            t = time.perf_counter()
            try:
                return attr(*a, **k)
            finally:
                p.add(f"device/{_label.get()}", time.perf_counter() - t)

        return timed

