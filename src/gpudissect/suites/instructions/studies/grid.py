"""The warps x dependence-distance throughput grid of a variant (issue 22; thesis section 7.3,
Tables 7.6-7.16): a study of the instruction suite (:data:`STUDY`).

Rows: W warps per SM (one block of W warps on every SM), columns: d independent chains per
thread (the dependence distance); a cell is the warp-instructions of the SM's region over its
span (warp-instructions per cycle per SM), from one launch per (W, d) with the repetitions
inside it (:func:`measure_grid` says why one region and not a slope over two). The kernels are
the throughput families' where their chain count is a column (``Plan.tp_chains``), and families
of their own (measure ``grid``) for the others; a column's rates are its kernel's at each warp
count (``block_rates.warp_rates``: the launches of a column in one batch).

From the grid (pure functions, :func:`analyse`): the maximum rate (MT), the fewest warps that
reach it (MNW), the warp latency (WL: cycles before the scheduler issues the same warp again,
per SASS issue: 1 / (the rate of one warp at the largest distance x SASS per instance); per PTX
instance beside it), the latency seen from the grid (at distance 1
and below saturation the rate of W warps is W / latency) and the local instabilities (adding a
warp lowers the rate by more than the noise: uneven warps over the schedulers).
"""

from __future__ import annotations

import math

import numpy as np

from gpudissect.arch.limits import check, limit_for, parse_sass
from gpudissect.arch.target import Target
from gpudissect.catalog.model import Variant
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built
from gpudissect.store.db import Result
from gpudissect.suites.instructions.block_rates import warp_rates
from gpudissect.suites.instructions.core import (
    Family,
    Plan,
    VariantStudy,
    VariantWork,
    citation,
    lengths_for,
    sass_per_instance,
    skipped,
)
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import generate
from gpudissect.suites.instructions.verify import MapRecord

GRID = "grid"
UNIT = "warp_instr/cycle/SM"
REACH_TOL = 0.02  # MNW: the fewest warps whose rate is within this share of the maximum
DROP_TOL = 0.02  # an instability: adding a warp lowers the rate by more than this share ...
# ... and by more than the two cells' 95% intervals together
CELL_NOISE = 0.02  # a cell whose 95% interval is wider than +-2% of it is uncertain
LINEAR_SHARE = 0.5  # latency from the grid: distance-1 cells below this share of the column's max


def grid_families(v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
    """The grid's own kernels: a family per distance that no throughput family has (those
    columns reuse the throughput kernels), of ``plan.grid_units`` instances per thread."""
    strat = get_strategy(rec.strategy or "reg")
    spi = sass_per_instance(rec)
    out = []
    for d in plan.grid_distances:
        if d in plan.tp_chains:
            continue
        lens = lengths_for(plan.grid_units, d, spi, plan, plan.tp_min_length)
        ks = [generate(v, strat, target, chains=d, length=n, reps=plan.reps, measure=GRID,
                       name=f"v{idx}_w{d}_n{n}") for n in lens]
        out.append(Family(GRID, d, ks, study=STUDY))
    return out


# --- analysis (pure) -----------------------------------------------------------------------


def _finite(a: np.ndarray) -> np.ndarray:
    return np.isfinite(a) & (a > 0)


def max_rate(rates: np.ndarray) -> tuple[float, int, int] | None:
    """(MT, row, column) of the largest cell; None for an empty grid."""
    ok = _finite(rates)
    if not ok.any():
        return None
    i, j = np.unravel_index(int(np.argmax(np.where(ok, rates, -np.inf))), rates.shape)
    return float(rates[i, j]), int(i), int(j)


def min_warps(rates: np.ndarray, warps: list[int], distances: list[int],
              tol: float = REACH_TOL) -> tuple[int, int] | None:
    """(MNW, the smallest distance at which it reaches): the fewest warps with a cell within
    ``tol`` of the maximum."""
    top = max_rate(rates)
    if top is None:
        return None
    reach = _finite(rates) & (np.nan_to_num(rates) >= (1 - tol) * top[0])
    for i in np.argsort(warps):
        js = np.flatnonzero(reach[i])
        if js.size:
            return warps[i], min(distances[j] for j in js)
    return None


def warp_latency(rates: np.ndarray, warps: list[int], distances: list[int]) -> float | None:
    """WL: cycles between two issues of one warp = 1 / the rate of one warp with the most
    independent chains (the largest distance); None without a one-warp row."""
    if 1 not in warps:
        return None
    r = rates[warps.index(1), int(np.argmax(distances))]
    return float(1 / r) if np.isfinite(r) and r > 0 else None


def latency_from_grid(rates: np.ndarray, warps: list[int], distances: list[int],
                      share: float = LINEAR_SHARE) -> float | None:
    """The latency the distance-1 column implies: below saturation W warps of one chain each
    give W / latency; a line through the origin over the cells below ``share`` of the column's
    maximum (the one-warp cell at least). None without a distance-1 column."""
    if 1 not in distances:
        return None
    col = rates[:, distances.index(1)]
    ok = _finite(col)
    if not ok.any():
        return None
    w = np.asarray(warps, dtype=float)
    low = ok & (np.nan_to_num(col) <= share * float(col[ok].max()))
    if not low.any():
        low = ok & (w == w[ok].min())
    x, y = w[low], col[low]
    return float((x @ x) / (x @ y))


def instabilities(rates: np.ndarray, halfwidth: np.ndarray, warps: list[int], distances: list[int],
                  tol: float = DROP_TOL) -> list[tuple[int, int, float]]:
    """(warps, distance, relative drop) wherever adding warps (the next row) lowers the rate by
    more than ``tol`` of it and by more than the two cells' intervals together."""
    order = np.argsort(warps)
    r, h = rates.tolist(), np.nan_to_num(halfwidth).tolist()
    out = []
    for a, b in zip(order[:-1], order[1:], strict=True):
        for j, d in enumerate(distances):
            ra, rb = r[a][j], r[b][j]
            if not (math.isfinite(ra) and math.isfinite(rb)) or ra <= 0:
                continue
            hw = h[a][j] + h[b][j]
            drop = ra - rb
            if drop > tol * ra and drop > hw:
                out.append((int(warps[b]), int(d), round(float(drop / ra), 4)))
    return out


def analyse(rates: np.ndarray, halfwidth: np.ndarray, warps: list[int], distances: list[int],
            sass_per_instance: float = 1.0) -> dict:
    """Everything derived from one grid (rows ``warps``, columns ``distances``; NaN: no cell).
    ``sass_per_instance``: the SASS instructions one PTX instance issues (0.5 where ptxas pairs
    two instances in one SASS): the warp latency is per SASS issue (the scheduler issues SASS),
    and per PTX instance beside it."""
    top = max_rate(rates)
    mnw = min_warps(rates, warps, distances)
    wl = warp_latency(rates, warps, distances)
    return {
        "max_rate": top and top[0],
        "max_at": top and {"warps": warps[top[1]], "distance": distances[top[2]]},
        "min_warps": mnw and {"warps": mnw[0], "distance": mnw[1]},
        "warp_latency_cycles": wl and wl / max(sass_per_instance, 1e-9),
        "warp_latency_per_instance": wl,
        "sass_per_instance": sass_per_instance,
        "latency_from_grid": latency_from_grid(rates, warps, distances),
        "instabilities": [list(x) for x in instabilities(rates, halfwidth, warps, distances)],
    }


def sig(x: float, digits: int = 4) -> float | None:
    """``x`` rounded to ``digits`` significant digits (None for no value)."""
    if x is None or not np.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


# --- measuring -----------------------------------------------------------------------------


def columns(w: VariantWork, plan: Plan) -> dict[int, Family]:
    """The family of each distance of the grid: a throughput family of that many chains, else
    the grid's own."""
    out: dict[int, Family] = {}
    for f in w.families:
        if f.measure in ("throughput", GRID) and f.operand is None and f.chains in plan.grid_distances:
            out.setdefault(f.chains, f)
    return out


def region_kernel(f: Family, plan: Plan) -> Built:
    """The one kernel of a column's family that the grid launches: the longest region of at most
    ``max(plan.grid_units)`` instances per thread (else the shortest), so that every column
    times regions of about one size (the family's other kernels verify its SASS)."""
    fit = [b for b in f.built if b.kernel.units <= max(plan.grid_units)]
    return max(fit, key=lambda b: b.kernel.units) if fit else min(f.built, key=lambda b: b.kernel.units)


def column_spi(region_sass: dict[str, list[str]], distances: list[int]) -> float | None:
    """The SASS per instance that the warp latency's column (the largest distance) issues: its
    timed region's (params ``region_sass``); None where it is not known."""
    last = region_sass.get(str(max(distances))) if distances else None
    return sum(c for _, c in parse_sass(last)) if last else None


def measure_grid(dev: Device, w: VariantWork, plan: Plan, target: Target, texts: dict) -> list[Result]:
    """The variant's grid (one result, measure ``grid``): every cell, what it yields, and the
    cells' spread. A cell is the plain rate of one region, the warps' instances over the block's
    span, not a slope over two kernels: the kernels of two lengths may differ in more than their
    length (register banks, code placement), which a slope turns into rates above the pipe's
    limit, while a span holds all the region's issues and so never exceeds it. The kernel
    cited is the first timed column's."""
    v = w.variant
    facts = target.facts["target"]
    ws, ds = list(plan.grid_warps), list(plan.grid_distances)
    rates = np.full((len(ws), len(ds)), np.nan)
    hw = np.full_like(rates, np.nan)
    notes: list[str] = []
    over: list[str] = []
    lengths: dict[str, int] = {}
    cell_sass_by_d: dict[str, list[str]] = {}
    hashes: dict[str, str] = {}
    cols = columns(w, plan)
    flags: list[str] = []
    cite: dict | None = None
    repeats = 0
    for j, d in enumerate(ds):
        f = cols.get(d)
        c = citation(w, f) if f is not None else None
        if not isinstance(c, tuple):
            notes.append(f"d={d}: " + (c.flags[0] if c is not None else "no kernels"))
            continue
        b = region_kernel(f, plan)
        if cite is None:
            flags, cite = c[0], {**c[1], "ptx_hash": b.ptx_hash, "sass_hash": b.sass_hash}
            texts.update(b.texts())
        hashes[str(d)] = b.ptx_hash
        # a cell is one span of this kernel: the limit of everything its region issues (the
        # family's slope mix may count moves this length does not have)
        cell_sass = f.region_sass.get(b.kernel.name) or f.sass or c[1]["sass"]
        cell_sass_by_d[str(d)] = cell_sass
        limit = limit_for(cell_sass, target.base)
        cap = min(facts["max_warps_per_block"], facts["registers_per_sm"] // max(32 * f.regs, 1))
        run_ws = [W for W in ws if W <= cap]
        if len(run_ws) < len(ws):
            notes.append(f"d={d}: W>{cap} refused ({f.regs} registers per thread)")
        try:
            got = warp_rates(dev, b, run_ws, plan, dev.info.sm_count, notes)
        except Exception as e:  # the worker failed: the remaining columns would fail alike
            notes.append(f"d={d}: error: {type(e).__name__}: {e}"[:200])
            break
        lengths[str(d)] = b.kernel.length
        for i, W in enumerate(ws):
            if W not in got:
                continue
            rate, hw[i, j], n = got[W]
            repeats = max(repeats, n)
            rates[i, j] = rate
            bad = check(rate, limit) if limit is not None else None
            if bad:
                over.append(f"W={W} d={d}: {bad.removeprefix('exceeds-limit: ')}")
    if cite is None:
        return [Result(v.name, GRID, None, UNIT, "none", params={"grid_warps": ws, "grid_distances": ds},
                       flags=["not timed: " + "; ".join(notes)], sass=w.record.sass, cls=v.cls,
                       strategy=w.record.strategy)]
    derived = analyse(rates, hw, ws, ds, column_spi(cell_sass_by_d, ds) or sass_per_instance(w.record))
    rel = hw / np.where(_finite(rates), rates, np.nan)
    noisy = int(np.sum(np.nan_to_num(rel) > CELL_NOISE))
    timed = int(np.sum(_finite(rates)))
    flags = list(flags)
    if over:
        flags.append(f"exceeds-limit: {len(over)} cells, e.g. {over[0]}")
    if noisy:
        flags.append(f"grid-noisy: {noisy} of {timed} cells uncertain by more than "
                     f"+-{CELL_NOISE:.0%} (95% interval of the median of {repeats} repeats)")
    if timed < rates.size:
        flags.append(f"grid-incomplete: {rates.size - timed} of {rates.size} cells not timed")
    params = {"grid_warps": ws, "grid_distances": ds, "lengths": lengths, "region_sass": cell_sass_by_d,
              "blocks": "one block of W warps per SM",
              "launches": plan.grid_launches, "repeats_per_launch": plan.reps - 1, **derived,
              **({"notes": notes} if notes else {})}
    samples = {"rates": [[sig(x) for x in row] for row in rates],
               "spread": [[sig(x, 3) for x in row] for row in rel],
               "ptx_hashes": hashes}  # each column's kernel (names, so hashes, follow the run's order)
    return [Result(v.name, GRID, derived["max_rate"], UNIT,
                   "max over the warps x distance grid; a cell: W x instances per thread / the "
                   "median over SMs and repeats of the block span (first start to last end) of "
                   "one region", params=params, samples=samples, flags=flags, **cite)]


class Grid(VariantStudy):
    """The grid as a study of the instruction suite: its own families (the distances no
    throughput family has), timed after the throughput sweep as one result."""

    many_warps = True

    def families(self, v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
        return grid_families(v, rec, target, plan, idx)

    def measure_families(self, dev: Device, w: VariantWork, idx: list[int], plan: Plan, target: Target,
                         texts: dict, failed: Exception | None) -> None:
        # one result of all the grid's columns, kept with its first family of its own
        w.results[idx[0]] = [skipped(w, w.families[idx[0]], failed)] if failed else \
            measure_grid(dev, w, plan, target, texts)


# its columns are the throughput families' kernels where their chain count is a column
STUDY = Grid("grid", needs=("throughput",), adds=(GRID,))
