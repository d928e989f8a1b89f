"""Re-derive a shipped instruction suite's read-read / write-write comparisons and the grid's warp
latency per SASS issue from its stored records with the current analysis (no new measurement):
unpack ``<dir>/instructions.db.xz``; for every ``latency_read_read`` / ``latency_write_write``
result, its comparison with its control (studies/dependence_types.against_control) from the
stored slopes and the stored rates at each warp count (and its register-bank flag); for every ``grid`` result, its warp
latency per SASS issue from its own timed region's SASS per instance; store them, export
``instructions.json.xz`` (replacing an older set's ``.json.gz``) and pack
the store again. ``python scripts/rederive_configs.py data/h200``."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from gpudissect.store.db import Result, Store
from gpudissect.store.pack import pack, unpack
from gpudissect.suites.instructions.studies.dependence_types import (
    CONFIGS,
    CONTROL_OF,
    against_control,
)
from gpudissect.suites.instructions.studies.grid import column_spi

DERIVED = ("one_warp", "over_warps", "verdict")  # what against_control writes
BANK_FLAGS = ("sass: register banks", "sass: the register bank")  # the flags against_control adds
FIELDS = ("variant", "measure", "value", "unit", "statistic", "params", "fit", "samples", "flags", "sass",
          "strategy", "ptx_hash", "sass_hash", "cls")


def as_result(row: dict) -> Result:
    kw = {k: row.get(k) for k in FIELDS}
    return Result(**{**kw, "params": kw["params"] or {}, "flags": kw["flags"] or [], "sass": kw["sass"] or [],
                     "cls": kw["cls"] or ""})


def rates(over: dict, which: str) -> dict[int, tuple[float, float, int]]:
    """W -> (rate, half-width, repeats) of the configuration (``rate``) or its control
    (``control_rate``) as over_warps stored them."""
    hw = "rate_halfwidth" if which == "rate" else "control_halfwidth"
    return {int(W): (float(r), float(h), 0) for W, r, h in zip(over["warps"], over[which], over[hw], strict=True)}


def configs(rows: list[dict]) -> dict[int, dict]:
    """Result id -> its new params, for every compared read-read / write-write result."""
    by = {(r["variant"], r["measure"]): r for r in rows}
    out = {}
    for r in rows:
        p = r.get("params") or {}
        if r["measure"] not in CONFIGS or r.get("value") is None or "one_warp" not in p:
            continue
        c = by.get((r["variant"], CONTROL_OF[r["measure"]]))
        over = p.get("over_warps")
        base = {k: v for k, v in p.items() if k not in DERIVED and k != "notes"}
        units = (max(base.get("lengths") or [0]), max(((c or {}).get("params") or {}).get("lengths") or [0]))
        flags = [f for f in r.get("flags") or [] if not f.startswith(BANK_FLAGS)]  # against_control's own
        res = against_control(as_result({**r, "params": base, "flags": flags}), as_result(c) if c else None,
                              rates(over, "rate") if over and "warps" in over else None,
                              rates(over, "control_rate") if over and "warps" in over else None,
                              p.get("notes"), units)
        out[r["id"]] = (res.params, res.flags)
    return out


def grids(rows: list[dict]) -> dict[int, dict]:
    """Result id -> its new params, for every grid result with a warp latency."""
    out = {}
    for r in rows:
        p = r.get("params") or {}
        if r["measure"] != "grid" or p.get("warp_latency_per_instance") is None:
            continue
        spi = column_spi(p.get("region_sass") or {}, p.get("grid_distances") or []) or p.get("sass_per_instance") or 1.0
        out[r["id"]] = {**p, "sass_per_instance": spi, "warp_latency_cycles": p["warp_latency_per_instance"] / spi}
    return out


def main(folder: str) -> int:
    d = Path(folder)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "instructions.db"
        unpack(d / "instructions.db.xz", db)
        store = Store(db)
        run_id = store.latest_run("instructions")
        if run_id is None:
            print(f"error: {d / 'instructions.db.xz'} holds no instructions run", file=sys.stderr)
            return 2
        rows = [dict(r) for r in store.results(run_id)]
        cfg = configs(rows)
        new = {**{k: p for k, (p, _f) in cfg.items()}, **grids(rows)}
        with store.tx():
            for rid, params in new.items():
                store.db.execute("UPDATE results SET params=? WHERE id=?", (json.dumps(params, sort_keys=True), rid))
            for rid, (_p, flags) in cfg.items():
                store.db.execute("UPDATE results SET flags=? WHERE id=?", (json.dumps(flags), rid))
        store.close()
        print(f"{len(new)} results re-derived")
        subprocess.run([sys.executable, "-m", "gpudissect", "export", str(d / "instructions.json.xz"),
                        "--format", "suite", "--suite", "instructions", "--db", str(db)], check=True)
        (d / "instructions.json.gz").unlink(missing_ok=True)  # an older set's gzipped document, replaced
        pack(db, d / "instructions.db.xz")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[1]))
