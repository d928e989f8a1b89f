"""``predict --validate``: the predictor against measured loops (issue 20), and the error table.

:func:`analyse` needs no GPU: it re-reads each loop's SASS and control words from the raw
measurements (``measure.py`` writes them) and predicts every occupancy point from the tables.
Methods compared, all from the same tables: ``model`` (v1: the control codes' schedule with
scoreboards and shared pipes under the greedy scheduler, the whole timed region of
``iters`` trips, :mod:`sched`; tensor SASS from the per-SASS tensor timings, :mod:`tensor`:
seed 001's tensor-core model, with a set of loops of its own, ``tensor_*``), ``bounds`` (v0:
the largest of the recurrence, issue and pipe bounds), ``sum_latency`` and ``max_pipe`` (the
two baselines). Nothing is fitted to the measurements.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpudissect.arch.target import arch_table
from gpudissect.compressed import ERRORS, compress, decompress
from gpudissect.kernel.control import decode_word
from gpudissect.kernel.sass import parse_sass
from gpudissect.predict import PredictError
from gpudissect.predict.harness import ITERS
from gpudissect.predict.lanes import Lanes
from gpudissect.predict.loop_model import block_warps, common_model, loop_model, rare_weighted
from gpudissect.predict.memory import Hierarchy, Where
from gpudissect.predict.sched import branch_cost
from gpudissect.predict.source import base_arch
from gpudissect.predict.tables import Tables

METHODS = ("model", "bounds", "sum_latency", "max_pipe")
SCHEMA_OUT = "gpudissect.predict-validation-analysis/1"


# ------------------------------------------------------------------ error statistics
def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-b of two equally long series (nan with fewer than two pairs or a constant
    series)."""
    n = len(xs)
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx = (xs[i] > xs[j]) - (xs[i] < xs[j])
            dy = (ys[i] > ys[j]) - (ys[i] < ys[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif dx == dy:
                conc += 1
            else:
                disc += 1
    den = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return (conc - disc) / den if den else float("nan")


def error_stats(pred: list[float], meas: list[float]) -> dict:
    """MAPE, share within 5 % and 10 %, Kendall's tau of ``pred`` against ``meas``."""
    if not meas:
        return {"n": 0, "mape": None, "within5": None, "within10": None, "tau": None}
    e = [ape(p, m) for p, m in zip(pred, meas, strict=True)]
    tau = kendall_tau(pred, meas)
    return {"n": len(e), "mape": sum(e) / len(e), "within5": sum(x <= 0.05 for x in e) / len(e),
            "within10": sum(x <= 0.10 for x in e) / len(e), "tau": None if math.isnan(tau) else tau}


# ------------------------------------------------------------------ predictions
def loop_body(rec: dict):
    """The loop's SASS instructions and control codes, as measured."""
    lp = rec["loop"]
    funcs = parse_sass(f".text.{rec['name']}:\n" + "\n".join(lp["sass"]))
    body = funcs[rec["name"]].instrs if rec["name"] in funcs else []
    if len(body) != len(lp["sass"]) or len(lp.get("control_hi", [])) != len(body):
        raise PredictError(f"{rec['name']}: its SASS lines and control words do not match")
    return body, [decode_word(0, int(h, 16)) for h in lp["control_hi"]]


def predict_point(name: str, body, controls, tables: Tables, warps: int, trips: int,
                  branch: float = 0.0, where: Where | None = None, skippable=(),
                  rare_every: int | None = None, warps_per_block: int | None = None) -> dict:
    """Model v1 (a region of ``trips`` trips), v0's bounds and the baselines at one point;
    ``rare_every``: the instructions a forward branch skips (``skippable`` offsets) run once
    every so many trips (:func:`loop_model.rare_weighted`; the whole body's model is kept as
    ``model_full_path``); ``warps_per_block``: the warps of one block (its barriers)."""
    lm = loop_model(name, body, tables, warps, where, warps_per_block)
    p = lm.prediction
    model = lm.cycles(controls, tables, trips, branch)
    extra = {}
    if rare_every and skippable:
        cm, _, cc = common_model(name, body, controls, skippable, tables, warps, where, warps_per_block)
        common = cm.cycles(cc, tables, trips, branch)
        extra = {"model_full_path": model, "rare_every": rare_every}
        model = rare_weighted(common, model, rare_every)
    out = {"model": model, **extra, "bounds": p.cycles_per_iter,
           "sum_latency": p.sum_latency, "max_pipe": p.max_pipe_pressure, "bound": p.bound,
           "lower_bound": p.lower_bound, "unknown": sorted(p.unknown)}
    if lm.tensor is not None:  # the tensor-core model took the tensor SASS from the per-SASS timings
        out["tensor_missing"] = {k: list(v) for k, v in lm.tensor.missing.items()}
    if lm.memory is not None and lm.memory.accesses:
        out["memory_levels"] = sorted({a.level for a in lm.memory.accesses.values() if a.level})
    return out


def calibrate(loops: list[dict], tables: Tables, trips: int) -> dict:
    """The taken-branch cost from the calibration loops (one warp): per loop, measured minus
    the model without it; their median."""
    per = {}
    for rec in loops:
        if rec.get("category") != "calibration" or "error" in rec:
            continue
        pt = next((p for p in rec.get("points", []) if p.get("warps") == 1 and p.get("cycles_per_iter")), None)
        if pt is None:
            continue
        body, controls = loop_body(rec)
        extra = pt["cycles_per_iter"] - predict_point(rec["name"], body, controls, tables, 1, trips)["model"]
        # the redirect: the branch's own stall count plus what the warp lost beyond it
        per[rec["name"]] = extra + max(1, controls[-1].stall)
    cost = branch_cost(list(per.values()))
    return {"branch_cycles": cost, "per_loop": per,
            "what": "taken backward branch: cycles from its issue to the loop's first instruction "
                    "(its stall count + what one warp loses beyond the stall counts), median over "
                    "the calibration loops"}


SLOPE_TRIPS = 1 << 20  # a region this long: the model's cycles per trip is its slope over trips


NONLINEAR = 0.05  # a point whose values stray more than this from their line over T is no slope


def level_category(category: str, footprint: float | None, hierarchy: Hierarchy | None) -> str:
    """An ``l2`` or ``dram`` case's category by where its footprint lies: beyond the L2 the
    staircase measured, ``dram``; within it, ``l2`` (the spec's label where either is unknown)."""
    l2 = hierarchy.levels.get("L2") if hierarchy is not None else None
    if category not in ("l2", "dram") or footprint is None or l2 is None or not l2.capacity:
        return category
    return "dram" if footprint > l2.capacity else "l2"


def corpus_specs() -> dict:
    """Each corpus kernel's spec (``kernels.toml``) as it is now, by name (empty where the
    checkout has no corpus)."""
    from gpudissect.predict.corpus import load_corpus

    try:
        return {k.name: k for k in load_corpus()}
    except PredictError:
        return {}


def per_trip(rec: dict, pt: dict, unrolls: dict[str, int]) -> tuple[float, int]:
    """(cycles per SASS trip, the unroll it is of): the measured slope per source iteration
    times the kernel's unroll as its spec says now (a spec corrected after the measurement
    re-scales the stored slope, which is per source iteration and stays right); the stored
    per-trip value where the record has no per-source slope."""
    u = int(unrolls.get(rec["name"], rec.get("unroll") or 1))
    src = pt.get("cycles_per_source_iter")
    return (src * u, u) if src is not None else (pt["cycles_per_iter"], int(rec.get("unroll") or 1))


def analyse_corpus(recs: list[dict], tables: Tables, branch: float, hierarchy: Hierarchy | None = None,
                   sms: int = 0) -> tuple[list[dict], list[str]]:
    """Rows of the corpus of public kernels: per kernel, case and occupancy point, the measured
    slope (cycles per trip of the SASS loop: :func:`per_trip`) beside the model's slope and the
    baselines; the model places the loop's data by the point's footprint in the measured
    hierarchy (none given: the tables' nearest level). The corpus specs (:func:`corpus_specs`)
    give each kernel's unroll and ``rare_every`` (its skippable instructions weighted:
    :func:`predict_point`)."""
    specs = corpus_specs()
    unrolls = {n: k.unroll for n, k in specs.items()}
    rows, errors = [], []
    for rec in recs:
        if "error" in rec:
            errors.append(f"{rec['name']}: {rec['error']}")
            continue
        try:
            body, controls = loop_body({"name": rec["symbol"], "loop": rec["loop"]})
        except PredictError as e:
            errors.append(f"{rec['name']}: {e}")
            continue
        lanes = Lanes.from_json(rec["loop"].get("lanes"))  # how each access's lanes spread
        for case in rec.get("cases", []):
            for pt in case.get("points", []):
                why = pt.get("error") or ("no positive slope" if not pt.get("cycles_per_iter", 0) > 0 else
                                          f"not linear in T (a value {pt['fit_residual']:.0%} off its line)"
                                          if pt.get("fit_residual", 0) > NONLINEAR else None)
                if why:
                    errors.append(f"{rec['name']} {case['category']} @ {pt.get('point')}: {why}")
                    continue
                where = Where(hierarchy, sms or hierarchy.sms or 1, pt.get("footprint")).with_lanes(
                    lanes, body, tuple(pt.get("block") or (1024,))) \
                    if hierarchy is not None and pt.get("footprint") else None
                spec = specs.get(rec["name"])
                pr = predict_point(rec["name"], body, controls, tables, pt["warps"], SLOPE_TRIPS, branch, where,
                                   rec["loop"].get("skippable") or (), spec.rare_every if spec else None,
                                   block_warps(tuple(pt["block"])) if pt.get("block") else None)
                cat = level_category(case["category"], pt.get("footprint"), hierarchy)
                measured, unroll = per_trip(rec, pt, unrolls)
                rows.append({"loop": rec["name"], "set": "real", "category": cat,
                             "split": rec["split"], "source": rec["source"], "point": pt["point"],
                             "warps": pt["warps"], "measured": measured, "unroll": unroll,
                             "footprint": pt.get("footprint"), "sass_hash": rec["loop"]["sass_hash"],
                             "n_instr": len(body), **pr})
    return rows, errors


def analyse(measured: dict, tables: Tables, hierarchy: Hierarchy | None = None) -> dict:
    """Rows (one per loop and occupancy point) and the error table per category."""
    rows, errors = [], []
    loops = measured.get("loops", [])
    trips = int(measured.get("iters") or ITERS)
    cal = calibrate(loops, tables, trips)
    branch = cal["branch_cycles"] or 0.0
    for rec in loops:
        if rec.get("category") == "calibration":
            continue
        if "error" in rec:
            errors.append(f"{rec['name']}: {rec['error']}")
            continue
        try:
            body, controls = loop_body(rec)
        except PredictError as e:
            errors.append(str(e))
            continue
        for pt in rec.get("points", []):
            if "error" in pt or not pt.get("cycles_per_iter"):
                errors.append(f"{rec['name']} @ {pt.get('point')}: {pt.get('error', 'no value')}")
                continue
            pr = predict_point(rec["name"], body, controls, tables, pt["warps"], trips, branch,
                               warps_per_block=pt.get("block_warps"))
            rows.append({"loop": rec["name"], "set": set_of(rec["category"]), "category": rec["category"],
                         "split": "generated" if rec["category"] == "generated" else "handwritten",
                         "point": pt["point"],
                         "warps": pt["warps"], "measured": pt["cycles_per_iter"],
                         "sass_hash": rec["loop"]["sass_hash"], "n_instr": len(body), **pr})
    crow, cerr = analyse_corpus(measured.get("corpus", []), tables, branch, hierarchy,
                                int((measured.get("gpu") or {}).get("sm_count") or 0))
    rows += crow
    errors += cerr
    return {"schema": SCHEMA_OUT, "tables": tables.source, "calibration": cal, "rows": rows,
            "stats": table_of(rows), "errors": errors}


def set_of(category: str) -> str:
    """The set of a loop the project wrote by category: generated, tensor-model (the tensor
    model's loops) or handwritten (the project's own imitations of real loops). The corpus of
    public kernels is the set ``real`` (its rows say so)."""
    return "generated" if category == "generated" else "tensor-model" if category.startswith("tensor_") \
        else "handwritten"


def groups(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows by group. The corpus (set ``real``): ``real``, its splits (``train``, ``held-out``),
    each split's categories, each with ``@ <point>``. The project's own loops: their set, each
    set's points, each category."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        st = r.get("set") or set_of(r["category"])
        if st == "real":
            sp, cat = r.get("split", "train"), r["category"]
            keys = ["real", f"real @ {r['point']}", sp, f"{sp} @ {r['point']}", f"{sp} {cat}",
                    f"{sp} {cat} @ {r['point']}"]
        else:
            keys = [st, f"{st} @ {r['point']}"] + ([r["category"]] if st != "generated" else [])
        for k in keys:
            out.setdefault(k, []).append(r)
    return out


def table_of(rows: list[dict]) -> dict[str, dict[str, dict]]:
    return {g: {m: error_stats([r[m] for r in rs], [r["measured"] for r in rs]) for m in METHODS}
            for g, rs in groups(rows).items()}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def group_order(stats: dict) -> list[str]:
    """Groups in the order every view prints them: the corpus's held-out split first, then its
    training split, the whole corpus, the generated loops, the project's own loops."""
    first = ("held-out", "train", "real", "generated")
    return sorted(stats, key=lambda g: (next((i for i, f in enumerate(first) if g.startswith(f)), len(first)),
                                        " @ " in g, g))


def table_lines(stats: dict[str, dict[str, dict]]) -> list[str]:
    head = f"{'group':<20}{'n':>5}  {'model MAPE':>10} {'<=5%':>6} {'<=10%':>6} {'tau':>5}  " \
           f"{'bounds':>7} {'sum-lat':>8} {'max-pipe':>8}  (MAPE; tau of the baselines: bounds/sum/pipe)"
    lines = [head]
    order = group_order(stats)
    for g in order:
        s = stats[g]
        m = s["model"]
        tau = "-" if m["tau"] is None else f"{m['tau']:.2f}"
        btau = "/".join("-" if s[k]["tau"] is None else f"{s[k]['tau']:.2f}" for k in METHODS[1:])
        lines.append(f"{g:<20}{m['n']:>5}  {_pct(m['mape']):>10} {_pct(m['within5']):>6} "
                     f"{_pct(m['within10']):>6} {tau:>5}  {_pct(s['bounds']['mape']):>7} "
                     f"{_pct(s['sum_latency']['mape']):>8} {_pct(s['max_pipe']['mape']):>8}  ({btau})")
    return lines


def target_lines(stats: dict[str, dict[str, dict]], spec: dict) -> list[str]:
    """Per group with a target (``spec``: the architecture's predict.toml, [targets]): its model
    MAPE against the target, and for a group that misses, the points of it that miss with what
    the model lacks there ([lacks]); nothing for a group without points."""
    lacks = spec.get("lacks", {})
    out = []
    for g, target in spec.get("targets", {}).items():
        m = (stats.get(g) or {}).get("model") or {}
        if m.get("mape") is None:
            continue
        if m["mape"] <= target:
            out.append(f"{g}: {_pct(m['mape'])} against a target of {_pct(target)}: met")
            continue
        out.append(f"{g}: {_pct(m['mape'])} against a target of {_pct(target)}: missed")
        for sub in sorted(k for k in stats if k.startswith(f"{g} @ ")):
            sm = stats[sub]["model"]
            if sm.get("mape") is not None and sm["mape"] > target:
                why = lacks.get(sub) or lacks.get(g) or "not stated"
                out.append(f"  {sub}: {_pct(sm['mape'])}; the model lacks: {why}")
    return out


def tensor_lines(rows: list[dict]) -> list[str]:
    """The tensor-core model per loop and point: predicted beside measured (the tensor model's
    loops and the real loops with tensor SASS)."""
    rs = [r for r in rows if "tensor_missing" in r]
    if not rs:
        return []
    out = ["tensor-core model (per-SASS tensor timings), cycles per trip:",
           f"  {'loop':<34}{'point':>6}{'warps':>6}{'measured':>10}{'model':>9}{'error':>8}"]
    for r in rs:
        miss = f"  (tables lack: {', '.join(sorted(r['tensor_missing']))})" if r["tensor_missing"] else ""
        out.append(f"  {r['loop']:<34}{r['point']:>6}{r['warps']:>6}{r['measured']:>10.1f}{r['model']:>9.1f}"
                   f"{100 * (r['model'] - r['measured']) / r['measured']:>+7.1f}%{miss}")
    return out


def figure(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, which, label in ((axes[0], "model", "model (control codes + tables)"),
                             (axes[1], "max_pipe", "baseline: max pipe pressure")):
        cats = sorted({r["category"] for r in rows})
        for c in cats:
            rs = [r for r in rows if r["category"] == c]
            ax.scatter([r["measured"] for r in rs], [r[which] for r in rs], s=10 if c == "generated" else 28,
                       alpha=0.5 if c == "generated" else 0.9, label=c)
        vals = [r["measured"] for r in rows] + [r[which] for r in rows if r[which] > 0]
        lo, hi = min(vals), max(vals)
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured cycles per trip (SM span / trips)")
        ax.set_ylabel("predicted")
        ax.set_title(label, fontsize=10)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def read_measured(path: Path) -> dict:
    try:
        raw = path.read_bytes()
        doc = json.loads(decompress(raw, path))  # plain, .xz or .gz
    except (EOFError, *ERRORS) as e:
        raise PredictError(f"{path}: not a readable compressed file ({e or 'truncated'})") from None
    except OSError as e:
        raise PredictError(f"{path}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise PredictError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("gpudissect.predict-validation/"):
        raise PredictError(f"{path}: not a predict --validate measurement file (schema "
                           "gpudissect.predict-validation/1)")
    return doc


def pool_records(tables_spec: Path) -> list[dict]:
    """The instructions suite's records of the tables (the generator's verified variants)."""
    from gpudissect.report.read.results import LoadError, load_result_set

    try:
        return list(load_result_set(tables_spec).records("instructions"))
    except (LoadError, OSError) as e:
        raise PredictError(f"tables {tables_spec}: {e}") from None


def validation_specs(tables_spec: Path, count: int, seed: int, only: tuple[str, ...] = (),
                     corpus: list | None = None):
    """Every loop of the validation the project writes (``only``: those of these sets or
    categories; the branch calibration always) and the corpus kernels ``only`` selects (``real``
    or none: all; else by kernel or project name): (loop specs, corpus kernels)."""
    from gpudissect.predict.generate import generate, verified_pool
    from gpudissect.predict.kernels import branch_calibration, real_loops
    from gpudissect.predict.tensor_loops import tensor_loops

    corpus = corpus or []

    def wanted(cat: str) -> bool:
        return not only or cat in only or (set_of(cat) in only and cat != "calibration")

    fixed = real_loops() + tensor_loops()
    known = {"generated", "handwritten", "tensor-model", "real", *(s.category for s in fixed),
             *(k.name for k in corpus), *(k.project for k in corpus)}
    if set(only) - known:
        raise PredictError(f"--only: unknown {', '.join(sorted(set(only) - known))} "
                           f"(known: {', '.join(sorted(known))})")
    gen = generate(verified_pool(pool_records(tables_spec)), count, seed) if wanted("generated") else []
    picked = [k for k in corpus if not only or "real" in only or k.name in only or k.project in only]
    return gen + [s for s in fixed if wanted(s.category)] + branch_calibration(), picked


def corpus_of(root: Path | None) -> tuple[list, dict]:
    """The corpus's kernels and index (none where the checkout has no corpus)."""
    from gpudissect.predict.corpus import default_root, load_corpus

    root = root or default_root()
    if not root.is_dir():
        return [], {}
    try:
        index = json.loads((root / "index.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PredictError(f"{root}/index.json: {e} (run scripts/build_corpus.py)") from None
    return load_corpus(root), index


def run_validation(dev, tables_spec: Path, tables: Tables, output: Path | None, fig: Path | None,
                   measured: Path | None, count: int, seed: int, log=print,
                   only: tuple[str, ...] = (), corpus_dir: Path | None = None) -> tuple[dict, list[str]]:
    """Measure on ``dev`` (or read ``measured``), analyse, write ``output`` (the raw
    measurements with the analysis) and ``fig``; the document and the lines to print."""
    if measured is not None:
        doc = read_measured(measured)
    else:
        from gpudissect.arch.occupancy import occupancy_rules
        from gpudissect.arch.target import target_of_device
        from gpudissect.kernel.toolchain import tool_version
        from gpudissect.predict.measure import measure

        target = target_of_device(dev.info, tool_version("ptxas"))
        if target.base != base_arch(tables.arch):
            raise PredictError(f"the GPU is {target.arch}, the tables ({tables.gpu}) are for {tables.arch}")
        ckernels, cindex = corpus_of(corpus_dir)
        specs, picked = validation_specs(tables_spec, count, seed, only, ckernels)
        rules = occupancy_rules(target)
        doc = measure(dev, specs, target.arch, target.ptx_isa, rules, log=log,
                      specific=target.for_features(specific=True))
        if picked:
            from gpudissect.predict.corpus_measure import measure_corpus

            doc["corpus"] = measure_corpus(dev, picked, cindex, rules, target.base, log=log)
            doc["corpus_build"] = {k: cindex.get(k) for k in ("nvcc", "flags")}
        doc["generator"] = {"count": count, "seed": seed}
        if only:
            doc["only"] = list(only)
    doc = {k: v for k, v in doc.items() if k != "analysis"}
    from gpudissect.predict.memory import load_hierarchy

    res = analyse(doc, tables, load_hierarchy(tables_spec))
    doc["analysis"] = res
    gpu = doc.get("gpu", {})
    bc = res["calibration"]["branch_cycles"]
    lines = [f"validation: {len(doc.get('loops', []))} loops, {len(res['rows'])} points on "
             f"{gpu.get('name', '?')} ({gpu.get('uuid', '?')}); tables {tables.gpu} from {tables.source}",
             "taken branch (calibration loops, not in the set): "
             + ("none measured" if bc is None else f"{bc:.2f} cycles from its issue to the loop's head "
                "(a longer stall count hides it)"),
             *table_lines(res["stats"]), *target_lines(res["stats"], arch_table(tables.arch, "predict")),
             *tensor_lines(res["rows"])]
    if res["errors"]:
        lines.append(f"{len(res['errors'])} loops/points without a value (first: {res['errors'][0]})")
    if output is not None:
        text = json.dumps(doc, indent=1).encode()
        output.write_bytes(compress(text, output))  # compressed for a .xz or .gz name
        lines.append(f"wrote {output}")
    if fig is not None and res["rows"]:
        figure(res["rows"], fig, f"gpudissect predict --validate: {gpu.get('name', '?')}")
        lines.append(f"wrote {fig}")
    return doc, lines
