"""Instruction configurations (issue 22, thesis section 2.5), a study of the instruction suite
(:data:`STUDY`): a variant's latency chain under a guard true or false at run time
(``guarded.py``), and runs of instances that share one register, read-read or write-write, each
beside its control, the same instructions with no register shared (``dependence_types.py``).

Each is timed as a latency chain is (one warp, the slope of cycles against the instances); a
read-read / write-write result is then set against its control's, at one warp and at each warp
count of ``Plan.config_warps`` (:func:`against`).
"""

from __future__ import annotations

from dataclasses import replace

from gpudissect.arch.target import Target
from gpudissect.bench.runner import WORKER_FAILED
from gpudissect.catalog.model import Variant
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built
from gpudissect.store.db import Result
from gpudissect.suites.instructions.block_rates import warp_rates
from gpudissect.suites.instructions.checks import CheckResult, Sample
from gpudissect.suites.instructions.core import (
    ChainTiming,
    Family,
    Plan,
    VariantStudy,
    VariantWork,
    below_issue,
    lengths_for,
    sass_per_instance,
)
from gpudissect.suites.instructions.own_sass import core_sass, own_counts
from gpudissect.suites.instructions.strategies import Strategy
from gpudissect.suites.instructions.strategies import strategy as get_strategy
from gpudissect.suites.instructions.studies.dependence_types import (
    CONFIGS,
    CONTROL_OF,
    MODES,
    against_control,
    check_config,
    config_kernels,
    ptxas_gap,
    statistic,
)
from gpudissect.suites.instructions.studies.guarded import GUARDS, check_guarded, config_measures
from gpudissect.suites.instructions.template import GenerationError, generate
from gpudissect.suites.instructions.verify import MapRecord, check_built


def config_families(v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
    """The instruction-configuration families of ``v`` (strategies.toml [configurations]): its
    latency chain with every instance under a predicate true or false at run time."""
    out = []
    for m in config_measures(v):
        f = Family(m, 1, [], strategy=rec.strategy, study=STUDY)
        out.append(f)
        guard = GUARDS[m]
        try:
            f.kernels = [generate(v, get_strategy(rec.strategy or "reg"), target, chains=1, length=n,
                                  reps=plan.reps, measure=m, name=f"v{idx}_g{'t' if guard else 'f'}_l1_n{n}", guard=guard)
                         for n in lengths_for(plan.config_units, 1, sass_per_instance(rec), plan)]
        except GenerationError as e:
            f.error = f"{m}: {e}"
    # an instance of several SASS instructions is checked by data flow (dependence_types.check_config),
    # read-read and write-write alike: each family says itself why it cannot show its pattern
    for measure, ks, why in config_kernels(v, target, plan.config_units, plan.min_length, plan.reps, idx):
        out.append(Family(measure, 1, ks, error=why, strategy="reg", study=STUDY))  # read-read, write-write, controls
    return out


def against(dev: Device, w: VariantWork, i: int, plan: Plan, target: Target) -> None:
    """The read-read / write-write result of family ``i`` set against its control's (the family
    of the same lengths with no register shared): the one-warp slopes, and both kernels' rates at
    each of ``plan.config_warps`` warps per SM (as many as the registers allow; one batch each).
    A launch the driver refuses is a note; a failed worker is raised."""
    fams, f = w.families, w.families[i]
    rs = w.results[i]
    j = next((k for k, g in enumerate(fams) if g.measure == CONTROL_OF[f.measure]), None)
    if not rs or rs[0].value is None:
        return
    c = w.results[j][0] if j is not None and w.results[j] else None
    rates: list[dict | None] = [None, None]
    notes: list[str] = []
    if j is not None and f.built and fams[j].built and c is not None and c.value is not None:
        facts = target.facts["target"]
        regs = max(f.regs, fams[j].regs, 1)
        cap = min(facts["max_warps_per_block"], facts["registers_per_sm"] // (32 * regs))
        ws = [W for W in plan.config_warps if W <= cap]
        if len(ws) < len(plan.config_warps):
            notes.append(f"W>{cap} refused ({regs} registers per thread)")
        for k, g in enumerate((f, fams[j])):
            try:
                rates[k] = warp_rates(dev, g.built[-1], ws, plan, dev.info.sm_count, notes)
            except Exception as e:
                if type(e).__name__ == WORKER_FAILED:
                    raise
                notes.append(f"{g.measure}: error: {type(e).__name__}: {e}"[:200])
    units = (f.built[-1].kernel.units, fams[j].built[-1].kernel.units) if j is not None and f.built and \
        fams[j].built else (0, 0)
    w.results[i] = [against_control(rs[0], c, rates[0], rates[1], notes, units)] + rs[1:]


class Configurations(VariantStudy):
    """The configurations as a study of the instruction suite."""

    def families(self, v: Variant, rec: MapRecord, target: Target, plan: Plan, idx: int) -> list[Family]:
        return config_families(v, rec, target, plan, idx)

    def check(self, v: Variant, rec: MapRecord, f: Family, strat: Strategy, bs: list[Built],
              paired=None) -> CheckResult:
        samples = [Sample(b.kernel.units, b.kernel.length, b.region) for b in bs]
        if f.measure in MODES:  # no chain to check
            res = check_built(replace(v, chain="none"), strat, bs, paired=paired)
            if res.ok:
                why, f.info = check_config(f.measure, samples, own_counts(v, rec), core_sass(res.per_unit, None, {}))
                res.ok, res.reason = why is None, why or ""
                f.sass = res.sass
                f.info["ptxas_stall_between_instances"] = ptxas_gap(bs[-1], own_counts(v, rec))
            return res
        res = check_built(v, strat, bs, paired=paired)
        if res.ok:
            why, f.info = check_guarded(samples, own_counts(v, rec))
            if why:
                res.ok, res.reason = False, why
        return res

    def own_kernels(self, f: Family) -> bool:
        return f.measure in MODES  # no chain: not the variant's verified kernels

    def chain_result(self, w: VariantWork, f: Family, t: ChainTiming, cite: dict) -> Result:
        if f.measure in MODES:
            flags = t.flags + below_issue(t.fit.slope, f.sass or cite.get("sass") or [], t.xs, t.per_repeat)
            return Result(w.variant.name, f.measure, t.fit.slope, "cycles", statistic(f.measure),
                          params={**t.params, **f.info}, fit=t.fit.to_json(), samples=t.samples, flags=flags,
                          **cite)
        commit = f.info.get("guard_form") == "commit"
        return Result(w.variant.name, f.measure, t.fit.slope, "cycles",
                      f"slope of median cycles vs chain length, every instance under a predicate "
                      f"{'true' if GUARDS[f.measure] else 'false'} at run time"
                      + ("; ptxas computes the instance unguarded (or partly) and lands its result under "
                         "the guard (params.guard_commit: the SASS per instance that depend on it): the "
                         "guarded instruction's cost as compiled" if commit else ""),
                      params={**t.params, "guard": GUARDS[f.measure], **f.info}, fit=t.fit.to_json(), samples=t.samples,
                      flags=t.flags, **cite)

    def after_chains(self, dev: Device, w: VariantWork, todo: list[int], plan: Plan, target: Target,
                     failed: Exception | None) -> Exception | None:
        fams = w.families
        controls = {g.measure: k for k, g in enumerate(fams)}
        # a configuration whose control was measured again (a retry) is compared again too
        for i in [i for i, g in enumerate(fams) if g.measure in CONFIGS
                  and (i in todo or controls.get(CONTROL_OF[g.measure]) in todo)]:
            if failed is None:
                try:
                    against(dev, w, i, plan, target)
                except Exception as e:  # noqa: BLE001 - the comparison fails, not the variant
                    if type(e).__name__ == WORKER_FAILED:
                        failed = e  # the device is gone: the variant's remaining kernels would fail alike
                    if w.results[i]:
                        r = w.results[i][0]
                        w.results[i][0] = replace(r, flags=[*r.flags, f"error: against the control: "
                                                                     f"{type(e).__name__}: {e}"[:300]])
        return failed

    def with_companion(self, r: Result, companion: bool) -> bool:
        return companion and r.measure not in MODES  # a run of no chain has no companion


STUDY = Configurations("configurations", adds=(*GUARDS, *MODES))
