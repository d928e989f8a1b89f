"""Figures for the report: each suite's ``figures`` module (found through the registry), if it has one.

A figure module exposes ``figures(doc, outdir) -> list[Path]`` (PNG and/or SVG drawn from
the per-suite JSON document). Where a module is missing or fails, the pictures committed
beside the data (``<data>/figures/<suite>*.png|svg``) are used, and the failure is reported.
A ``<stem>.meta.json`` beside a picture (written by ``plotting.save_figure``) travels with it:
the bands its data makes (checked by the browser test) and the group it is shown in.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

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
