"""Value-dependent latency (issue 22; seed 000: "for the testp instruction, the latency depends
on the state"), a study of the instruction suite (:data:`STUDY`): a variant's latency chain timed
with its register sources from one class of values at a time (zero, denormal, inf, nan,
negative, ...; ``catalog/value_classes.toml``).

The chain keeps its value in the class: each instance's result (after its glue, if the result is
of another register class) is re-derived into the class value by ``(result & m) | k`` with
``m = 0`` and ``k`` the class's bits, both loaded at run time (ptxas cannot fold it, and the
dependence through the result stays). The derived kernels pass the family checks of every timing
kernel (linear, one instance deep) and must hold the variant's own SASS (its verified map record)
plus the re-derivation. The re-derivation costs the same in every class, so the spread across
classes is the variant's own; each class's number says it includes the re-derivation.

Per (variant, class): measure ``latency_values`` (params: the class and the operand values).
Per variant, after the run (:func:`derive`): ``latency_values_range``: min and max over the clean
classes, which classes are the same as the fastest (the difference within its 95% interval,
``records.same_within``, the suite's one rule), which are slower, which are undetermined (no repeats to give a spread), and
the SASS branches of the instance (a data-dependent path in the SASS: a class slower than the
fastest took it). Each class's number is chain cycles per instance including the re-derivation:
only the differences between classes are the instruction's.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cache

from gpudissect.arch.limits import BRANCHES, parse_sass
from gpudissect.arch.target import Target
from gpudissect.catalog.model import CATALOG_DIR, REG_CLASS, Operand, Variant
from gpudissect.catalog.operand_values import bits_for
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.parallel import pmap
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.region import is_move
from gpudissect.kernel.toolchain import PtxasError
from gpudissect.store.db import Result
from gpudissect.suites.instructions.core import (
    Family,
    Plan,
    VariantStudy,
    VariantWork,
    chain,
    lengths_for,
    sass_per_instance,
)
from gpudissect.suites.instructions.own_sass import equivalent, own_counts
from gpudissect.suites.instructions.records import CONFIDENCE, RESOLUTION, same_within, uncertainty
from gpudissect.suites.instructions.records import index as index  # the same rule's, re-exported
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.template import GenerationError, generate, glue_ptx
from gpudissect.suites.instructions.verify import check_built

VALUE_FILE = CATALOG_DIR / "value_classes.toml"
MEASURE = "latency_values"
RANGE = "latency_values_range"
STRATEGY = "reg"
BITS_TYPE = {"h": "b16", "r": "b32", "rd": "b64"}  # the type of the re-derivation's registers
# names of the derived variant's extra operands (catalog placeholders are lower-case words)
RESULT, GLUED, SCRATCH, MASK, KEY = "vr", "vg", "vt", "vm", "vk"


@cache
def _table(text: str) -> dict:
    return tomllib.loads(text)


def table(doc: str | None = None) -> dict:
    return _table(doc if doc is not None else VALUE_FILE.read_text())


def selected(v: Variant, doc: str | None = None) -> bool:
    return any(fnmatch.fnmatchcase(v.name, p) for s in table(doc).get("set", []) for p in s["variants"])


def classes(v: Variant, doc: str | None = None) -> dict[str, dict[str, str]]:
    """Class name -> value spec per register source of ``v`` (each source takes the class of its
    own type; a class missing for a source's type leaves that source at its default). Only the
    classes of the chain operand's type: the chain's class is the one being measured."""
    c = v.chain_operand
    cls = table(doc).get("classes", {})
    if c is None or c.ptype not in cls:
        return {}
    out: dict[str, dict[str, str]] = {}
    for name in cls[c.ptype]:
        vals = {o.name: cls[o.ptype][name] for o in v.sources
                if not o.is_address and name in cls.get(o.ptype, {})}
        out[name] = vals
    return out


def rederived(v: Variant, values: dict[str, str], doc: str | None = None) -> Variant:
    """``v`` with its result re-derived into the chain operand's class value each instance:
    the destination becomes a scratch register, the glue (if any) and the re-derivation
    ``(result & m) | k`` write the chain register."""
    c, d = v.chain_operand, v.dest
    if c is None or d is None or c.is_address:
        raise GenerationError(f"{v.name}: no register chain to keep in a value class")
    if d.read:
        raise GenerationError(f"{v.name}: a destination that is also read cannot be re-derived")
    if c.name not in values:
        raise GenerationError(f"{v.name}: no value class for the chain operand ({c.ptype})")
    names = {o.name for o in v.operands}
    if names & {RESULT, GLUED, SCRATCH, MASK, KEY}:
        raise GenerationError(f"{v.name}: operand names clash with the re-derivation's")
    rd = table(doc)["rederive"]
    if c.reg_class not in rd:
        raise GenerationError(f"{v.name}: no re-derivation for a .{BITS_TYPE.get(c.reg_class, c.reg_class)} chain")
    bt = BITS_TYPE[c.reg_class]
    ptx = v.ptx.replace("{" + d.name + "}", "{" + RESULT + "}")
    src = RESULT
    extra = [Operand(RESULT, d.ptype, written=False, read=False)]
    glue = glue_ptx(d.reg_class, c.reg_class)
    if glue:
        ptx += " " + glue.replace("{o}", "{" + GLUED + "}").replace("{i}", "{" + RESULT + "}")
        extra.append(Operand(GLUED, bt, written=False, read=False))
        src = GLUED
    tmpl = rd[c.reg_class]
    if "{t}" in tmpl:
        extra.append(Operand(SCRATCH, bt, written=False, read=False))
    ptx += " " + (tmpl.replace("{o}", "{" + d.name + "}").replace("{i}", "{" + src + "}")
                  .replace("{m}", "{" + MASK + "}").replace("{k}", "{" + KEY + "}")
                  .replace("{t}", "{" + SCRATCH + "}"))
    ops = (Operand(d.name, c.ptype, written=True, read=False),
           *[o for o in v.operands if o is not d], *extra,
           Operand(MASK, bt, written=False, read=True), Operand(KEY, bt, written=False, read=True))
    key = f"raw:{bits_for(c.ptype, values[c.name]):#x}"
    return replace(v, ptx=ptx, operands=ops, chain=c.name, expect=(),
                   values={**values, MASK: "raw:0", KEY: key})


def rederive_sass(doc: str | None = None) -> dict[str, int]:
    """The SASS a re-derivation adds to an instance at the least: one (of a 64-bit chain whose
    high word the variant's result leaves known, as selp's 0 or 1, ptxas keeps the low half's
    alone: the dependence runs through it)."""
    return {op: 1 for op in table(doc)["rederive"]["sass"]}


def holds_own(derived: dict[str, Fraction], own: dict[str, Fraction], extra: dict[str, int]) -> str | None:
    """Why a derived instance's SASS (opcode -> count) is not the variant's own SASS (its map
    record, moves aside) plus the re-derivation, or None."""
    same = equivalent()
    have: dict[str, Fraction] = {}
    for op, c in derived.items():
        key = same.get(op.removeprefix("MOV:"), op.removeprefix("MOV:"))
        have[key] = have.get(key, Fraction(0)) + Fraction(c)
    need: dict[str, Fraction] = {}
    for op, c in [*own.items(), *extra.items()]:
        name = op.removeprefix("MOV:")
        if not is_move(name):
            key = same.get(name, name)
            need[key] = need.get(key, Fraction(0)) + Fraction(c)
    # a fractional count (ptxas spreads an add over the unrolled chain) is needed in its whole part
    short = {op: (have.get(op, Fraction(0)), c) for op, c in need.items() if have.get(op, Fraction(0)) < int(c)}
    if short:
        return "the instance lacks the variant's own SASS: " + ", ".join(
            f"{op} {float(h):g} of {float(c):g}" for op, (h, c) in sorted(short.items()))
    return None


@dataclass
class ValueFamily:
    """One class of one variant: its kernels (lengths), built and checked."""

    cls: str
    values: dict[str, str]
    kernels: list[Kernel] = field(default_factory=list)
    built: list[Built] = field(default_factory=list)
    sass: list[str] = field(default_factory=list)
    error: str | None = None


def families(v: Variant, lengths: tuple[int, ...], target: Target, reps: int, idx: int,
             doc: str | None = None) -> list[ValueFamily]:
    """The value-class families of variant number ``idx`` (none when the table does not list it)."""
    if not selected(v, doc):
        return []
    out = []
    strat = get_strategy(STRATEGY)
    for j, (name, vals) in enumerate(classes(v, doc).items()):
        f = ValueFamily(name, vals)
        try:
            dv = rederived(v, vals, doc)
            f.kernels = [generate(dv, strat, target, chains=1, length=n, reps=reps, measure=MEASURE,
                                  name=f"v{idx}_k{j}_v1_n{n}") for n in lengths]
        except GenerationError as e:
            f.error = str(e)
        out.append(f)
    return out


def _build(job: tuple[Variant, dict[str, Fraction], list[ValueFamily], str]) -> list[ValueFamily]:
    """Build one variant's value families (one module) and check each (in a worker process)."""
    v, own, fams, arch = job
    todo = [f for f in fams if not f.error]
    if not todo:
        return fams
    try:
        built = build_module([k for f in todo for k in f.kernels], arch, get_strategy(STRATEGY).opt)
    except PtxasError as e:
        for f in todo:
            f.error = f"ptxas failed: {str(e)[:200]}"
        return fams
    extra = rederive_sass()
    for f in todo:
        bs = [built[k.name] for k in f.kernels]
        bad = next((b for b in bs if isinstance(b, Exception)), None)
        if bad is not None:
            f.error = str(bad)[:300]
            continue
        dv = rederived(v, f.values)
        res = check_built(dv, get_strategy(STRATEGY), bs)  # type: ignore[arg-type]
        why = res.reason if not res.ok else holds_own(res.per_unit, own, extra)
        if why:
            f.error = why
            continue
        f.sass = res.sass
        f.built = [b.light() for b in bs]  # type: ignore[union-attr]
    return fams


def compile_all(items: list[tuple[Variant, dict[str, Fraction], list[ValueFamily]]], arch: str,
                jobs: int) -> list[list[ValueFamily]]:
    return list(pmap(_build, [(v, own, fams, arch) for v, own, fams in items], jobs))


def prepare(works: list, target: Target, plan, jobs: int) -> dict[str, list[ValueFamily]]:
    """The value-class families of every verified variant the table lists (the suite's ``works``),
    built and checked: variant name -> its families."""
    items = []
    for w in works:
        if not (w.record.verified and selected(w.variant)):
            continue
        lens = lengths_for(plan.latency_units, 1, sass_per_instance(w.record) + 1, plan)
        items.append((w.variant, own_counts(w.variant, w.record), families(w.variant, lens, target, plan.reps, w.index)))
    done = compile_all(items, target.arch, jobs) if items else []
    return {v.name: fams for (v, _, _), fams in zip(items, done, strict=True)}


def measure(dev, v: Variant, fams: list[ValueFamily], plan) -> tuple[list[Result], dict]:
    """Time each class's chain (the suite's latency chain: one warp, slope over lengths)."""
    out: list[Result] = []
    texts: dict = {}
    for f in fams:
        if f.error or not f.built:
            out.append(family_result(v, f, None))
            continue
        fam = Family("latency", 1, f.kernels, built=f.built)
        cited = f.built[-1]
        cite = dict(sass=f.sass, strategy=STRATEGY, cls=v.cls, ptx_hash=cited.ptx_hash, sass_hash=cited.sass_hash)
        flags = ["branch: data-dependent path in the instance's SASS"] if branches(f.sass) else []
        try:
            r = chain(dev, VariantWork(v, None), fam, plan, flags, cite)  # type: ignore[arg-type]
        except Exception as e:  # one class fails, not the variant
            f.error = f"error: {type(e).__name__}: {e}"[:300]
            out.append(family_result(v, f, None))
            continue
        texts.update(cited.texts())
        out.append(family_result(v, f, r))
    return out, texts


def branches(sass: list[str]) -> list[str]:
    """The branch opcodes of an instance's SASS (a data-dependent path where present)."""
    return sorted({op for op, _ in parse_sass(sass) if op.split(".")[0] in BRANCHES})


def family_result(v: Variant, f: ValueFamily, r: Result | None) -> Result:
    """One class's stored result: the chain's latency (``r``, from the suite's chain timing) or
    why there is none."""
    params = {"class": f.cls, "values": f.values}
    if r is None:
        return Result(v.name, MEASURE, None, "cycles", "none", params=params,
                      flags=[f"not timed: {f.error or 'not measured'}"], cls=v.cls, strategy=STRATEGY)
    r.measure = MEASURE
    r.statistic = ("slope of median cycles vs chain length, every source from one value class; "
                   "includes the re-derivation (result & 0) | class bits")
    r.params = {**r.params, **params, "branches": branches(f.sass)}
    r.flags = [*r.flags, "includes re-derivation: (result & m) | k, the same in every class"]
    return r


def range_result(variant: str, rows: list[dict]) -> Result | None:
    """The spread of a variant's ``latency_values`` rows (stored records): min and max over the
    clean classes; the classes the same as the fastest (the difference within its 95% interval,
    :func:`same_within`: the same path), those slower, and those undetermined (no repeats)."""
    clean = [r for r in rows if r["value"] is not None
             and not any(f.startswith(("noisy", "poor-fit", "not timed", "error")) for f in r["flags"])]
    if not rows:
        return None
    if not clean:
        return Result(variant, RANGE, None, "cycles", "none",
                      flags=["no clean class: " + ", ".join(sorted({(r["params"] or {}).get("class", "?") for r in rows}))])

    def cls(r: dict) -> str:
        return r["params"]["class"]

    u = {cls(r): uncertainty(r) for r in clean}
    lo = min(clean, key=lambda r: r["value"])
    hi = max(clean, key=lambda r: r["value"])
    verdict = {cls(r): (True if r is lo else same_within(r["value"], u[cls(r)], lo["value"], u[cls(lo)]))
               for r in clean}
    same = sorted(c for c, v in verdict.items() if v is True)
    undetermined = sorted(c for c, v in verdict.items() if v is None)
    slower = {cls(r): round(r["value"], 3) for r in sorted(clean, key=lambda r: r["value"]) if verdict[cls(r)] is False}
    br = sorted({b for r in clean for b in (r["params"] or {}).get("branches") or []})
    if slower and br:
        path = (f"data-dependent path: the SASS branches ({', '.join(br)}); the classes above the fastest "
                "took the longer path")
    elif slower:
        path = "value-dependent latency without a branch in the SASS (the unit's own)"
    elif undetermined:
        path = "no class shown slower than the fastest; the others undetermined"
    else:
        path = "one latency for every class"
    return Result(variant, RANGE, hi["value"] - lo["value"], "cycles",
                  "max - min of the clean classes' latencies (each includes the same re-derivation: "
                  "only differences between classes are the instruction's)",
                  params={"min": lo["value"], "min_class": cls(lo), "max": hi["value"],
                          "max_class": cls(hi), "fastest": same, "slower": slower, "undetermined": undetermined,
                          "per_class": {cls(r): round(r["value"], 3) for r in clean},
                          "halfwidth_95": {c: (None if h is None else round(h, 4)) for c, h in u.items()},
                          "same_rule": f"difference within its {CONFIDENCE} (half-widths in quadrature), "
                                       f"each at least {RESOLUTION}",
                          "branches": br, "path": path,
                          "unclean": sorted(cls(r) for r in rows if r not in clean)},
                  flags=[], sass=list(lo["sass"] or []), strategy=STRATEGY, cls=lo["cls"])


def derive(store, run_id: int) -> None:
    """Each variant's ``latency_values_range`` from the run's stored classes (item
    ``values/<variant>``)."""
    by: dict[str, list[dict]] = {}
    for r in store.results(run_id, measure=MEASURE):
        by.setdefault(r["variant"], []).append(r)
    for name, rows in sorted(by.items()):
        res = range_result(name, rows)
        if res is not None:
            store.save(run_id, f"values/{name}", [res])


def conclusions(records: list[dict]) -> list[str]:
    """One sentence per variant with a range (records: stored or exported rows). Each class's
    number is the chain's cycles per instance including the re-derivation, the same in every
    class: the sentence says so, and that only the differences between classes are the
    instruction's."""
    out = []
    for r in records:
        if r.get("measure") != RANGE:
            continue
        p = r.get("params") or {}
        if r.get("value") is None:
            out.append(f"{r['variant']}: value classes not timed cleanly ({'; '.join(r.get('flags') or [])})")
            continue
        lo = p["min"]
        slower = ", ".join(f"{k} {v:.3g} (+{v - lo:.3g})" for k, v in (p.get("slower") or {}).items())
        und = ", ".join(p.get("undetermined") or [])
        out.append(f"{r['variant']}: chain cycles per instance over value classes, including the "
                   f"re-derivation (the same in every class): {lo:.3g} ({p['min_class']}) to "
                   f"{p['max']:.3g} ({p['max_class']}); only the differences between classes are the "
                   f"instruction's: {r['value']:.3g} cycles at most"
                   + (f"; same as the fastest (difference within its {CONFIDENCE}): {', '.join(p['fastest'])}; "
                      f"slower: {slower}" if slower else "")
                   + (f"; undetermined (no repeats to give a spread): {und}" if und else "")
                   + f"; {p['path']}")
    return out


def own_type_classes(ptype: str, doc: str | None = None) -> list[str]:
    """The class names of PTX type ``ptype`` (for tests and views)."""
    return list(table(doc).get("classes", {}).get(ptype, {}))


assert set(BITS_TYPE) <= set(REG_CLASS.values())


class ValueClasses(VariantStudy):
    """The value classes as a study of the instruction suite: kernels of their own, timed once per
    variant after the core's families."""

    def prepare(self, works: list[VariantWork], target: Target, plan: Plan, jobs: int) -> dict[str, list[ValueFamily]]:
        return prepare(works, target, plan, jobs)

    def measure_variant(self, dev, w: VariantWork, state: dict[str, list[ValueFamily]] | None, plan: Plan,
                        previous: list[Result] | None) -> tuple[list[Result], dict]:
        if previous is not None:  # measured again: the classes are kept (timed once)
            return [r for r in previous if r.measure == MEASURE], {}
        fams = (state or {}).get(w.variant.name)
        return measure(dev, w.variant, fams, plan) if fams else ([], {})

    def derive(self, ctx) -> None:
        derive(ctx.store, ctx.run_id)

    def conclusions(self, records: list[dict]) -> list[str]:
        return conclusions(records)

    def tables(self, records: list[dict]) -> dict:
        return {"value_latency": {r["variant"]: r.get("params") or {} for r in records if r.get("measure") == RANGE}}


STUDY = ValueClasses("value_classes", adds=(MEASURE, RANGE))
