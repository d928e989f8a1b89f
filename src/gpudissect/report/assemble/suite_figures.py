"""Figures for the report: each suite's ``figures`` module (found through the registry), if it has one.

A figure module exposes ``figures(doc, outdir) -> list[Path]`` (PNG and/or SVG drawn from
the per-suite JSON document). Where a module is missing or fails, the pictures committed
beside the data (``<data>/figures/<suite>*.png|svg``) are used, and the failure is reported.
A ``<stem>.meta.json`` beside a picture (written by ``plotting.save_figure``) travels with it:
the bands its data makes (checked by the browser test) and the group it is shown in.

The report embeds the PNG of each figure, so it draws only that format; :func:`figures_by_suite`
draws the suites' figures in parallel processes (one suite each, the largest first) where the
machine has more than one core: drawing is most of the report's time.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from gpudissect.report.present.plotting import only_formats
from gpudissect.suites import suite_module


@dataclass
class Figure:
    suite: str
    name: str
    mime: str
    data_uri: str
    meta: dict = field(default_factory=dict)

    @property
    def attrs(self) -> dict[str, str]:
        """``data-*`` attributes of the ``<img>``: the bands the picture must show."""
        b = self.meta.get("bands") or {}
        if not b:
            return {}
        return {"data-bands": str(b["count"]), "data-band-axis": str(b.get("axis", "y")),
                "data-band-box": ",".join(str(x) for x in b.get("box", (0, 0, 1, 1)))}


def _meta(path: Path) -> dict:
    p = path.parent / f"{path.stem}.meta.json"
    try:
        return json.loads(p.read_text()) if p.exists() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def _uri(path: Path) -> tuple[str, str]:
    mime = "image/svg+xml" if path.suffix == ".svg" else "image/png"
    return mime, f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _pick(paths: list[Path]) -> list[Path]:
    """One file per figure: the PNG where a PNG and an SVG of one name exist."""
    by: dict[str, Path] = {}
    for p in paths:
        if p.suffix not in (".png", ".svg") or not p.exists():
            continue
        if p.stem not in by or p.suffix == ".png":
            by[p.stem] = p
    return [by[k] for k in sorted(by)]


def suite_figures(suite: str, doc: dict, workdir: Path, data_dir: Path | None = None,
                  warnings: list[str] | None = None) -> list[Figure]:
    paths: list[Path] = []
    try:
        mod = suite_module(suite, "figures")
    except Exception as e:  # a broken module must not take the report down
        mod = None
        if warnings is not None:
            warnings.append(f"figures_{suite}: import failed: {e}")
    if mod is not None and hasattr(mod, "figures"):
        out = workdir / suite
        out.mkdir(parents=True, exist_ok=True)
        try:
            paths = [Path(p) for p in mod.figures(doc, out) or []]
        except Exception as e:
            if warnings is not None:
                warnings.append(f"figures_{suite}: drawing failed: {type(e).__name__}: {e}")
            paths = []
    if not paths and data_dir is not None and (data_dir / "figures").is_dir():
        paths = sorted((data_dir / "figures").glob(f"{suite}*"))
    figs = []
    for p in _pick(paths):
        mime, uri = _uri(p)
        figs.append(Figure(suite, p.stem, mime, uri, _meta(p)))
    return figs


def _draw(suite: str, doc: dict, workdir: Path, data_dir: Path | None) -> tuple[list[Figure], list[str]]:
    """One suite's figures as the report embeds them (PNG only), with its warnings."""
    warnings: list[str] = []
    with only_formats("png"):
        figs = suite_figures(suite, doc, workdir, data_dir, warnings)
    return figs, warnings


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _pool_context():
    """fork where nothing else runs in this process (the worker then has every module already
    imported), else spawn (forking a process with threads can deadlock the child)."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def figures_by_suite(docs: dict[str, dict], workdir: Path, data_dir: Path | None = None,
                     warnings: list[str] | None = None, jobs: int | None = None,
                     progress=None) -> dict[str, list[Figure]]:
    """Each suite's figures (:func:`suite_figures`, PNG only), drawn in up to ``jobs`` processes
    (default: the cores), in the order of ``docs``; the warnings in that order too.
    ``progress(suite)`` is called as each suite's figures are done."""
    jobs = max(1, min(jobs or _cores(), len(docs)))
    results: dict[str, tuple[list[Figure], list[str]]] = {}
    if jobs > 1:
        # the largest documents first, so that the longest drawing does not start last
        order = sorted(docs, key=lambda s: -len(docs[s].get("records") or []))
        try:
            with ProcessPoolExecutor(jobs, mp_context=_pool_context()) as pool:
                futures = {pool.submit(_draw, s, docs[s], workdir, data_dir): s for s in order}
                for f in as_completed(futures):
                    results[futures[f]] = f.result()
                    if progress:
                        progress(futures[f])
        except (OSError, BrokenProcessPool):  # no processes to be had here: the rest in this one
            pass
    for s, doc in docs.items():
        if s not in results:
            results[s] = _draw(s, doc, workdir, data_dir)
            if progress:
                progress(s)
    if warnings is not None:
        for s in docs:
            warnings.extend(results[s][1])
    return {s: results[s][0] for s in docs}
