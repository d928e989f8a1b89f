"""Clock and noise guard (the runner's, with the instruction suite's redo): an item whose SM
clock moved or whose repeats disagree is measured again (bounded); what stays so is flagged, and
a clean re-measurement replaces the first one. After noisy repeats only the noisy families are
measured again; after a clock change, all of them."""

from __future__ import annotations

import re

import pytest

from gpudissect.bench.runner import RETRIES
from gpudissect.device.fakes import ScriptedDevice
from gpudissect.store.db import Store
from gpudissect.suites.instructions.suite import STUDIES, InstructionsSuite, Plan


class Alternating(ScriptedDevice):
    """The SM clock reads a different value at every call (it never settles)."""

    def clocks(self) -> dict:
        self.clock_calls += 1
        return {"sm_mhz": 1980 if self.clock_calls % 2 else 1500}


class Counting(ScriptedDevice):
    """Records the kernels it runs; the first ``noisy_runs`` runs of add.f32's kernels (variant
    0 of the run: ``v0_...``) are noisy. The plan also measures the companion reference
    variants (lop3.b32, add.u16/u32/u64), so runs are counted per variant."""

    def __init__(self, *a, noisy_runs: int = 0, **k):
        super().__init__(*a, **k)
        self.runs: list[str] = []
        self.noisy_runs = noisy_runs

    def run(self, cubin, kernel, *a, **k):
        self.runs.append(kernel)
        own = [r for r in self.runs if F32.match(r)]
        noisy = bool(F32.match(kernel)) and len(own) <= self.noisy_runs
        self.noisy_calls = self.calls + 1 if noisy else 0  # ScriptedDevice: noisy while calls < it
        return super().run(cubin, kernel, *a, **k)

    def f32_runs(self) -> int:
        """Runs of add.f32's latency, throughput and distance kernels (its configurations'
        kernels, guarded, read-read and write-write, run beside them)."""
        return sum(bool(F32.match(r)) for r in self.runs)


F32 = re.compile(r"v0_[ltd]\d+_n")  # add.f32's (the run's first variant) chain and throughput kernels

# three kept repeats per launch (the first of four is dropped), two launches per point, so
# that repeats can disagree; chain lengths: latency 8, 16, 32; throughput 4, 8 (4 chains);
# distance 8, 16 (2 chains)
PLAN = Plan(tp_min_length=0, latency_units=(8, 16, 32), tp_chains=(4,), tp_units=(16, 32), tp_warps=(16,),
            distances=(2,), distance_units=(16, 32), reps=4, launches=2)


# kernel runs of one measurement of add.f32: latency 3, throughput 1 x 2 lengths x 1 warps
# count, distance 2
RUNS = 3 + 2 + 2


def measured(dev, tmp_path, sweep) -> dict:
    store = Store(tmp_path / "r.db")
    # the stall sweep below ptxas compares the chain's values, which these stand-in GPUs do not
    # compute (tests/test_stall_patch.py): the guard is the core's and the other studies'
    studies = tuple(s for s in STUDIES if s.name != "stall_patch")
    # one item at a time: the scripted clock is one sequence of readings for the whole device,
    # which items measured beside each other would take turns in
    run_id = sweep(dev, store, ["add.f32"], suite=InstructionsSuite(full=PLAN, studies=studies, overlap=False),
                   quick=False).run_id
    return {(r["measure"], r["params"].get("warps"), r["params"].get("distance")): r
            for r in store.results(run_id) if r["variant"] == "add.f32"}


def flags(res: dict) -> set[str]:
    """The flags of the results, less the read-read study's own SASS verdict on register banks
    (a property of ptxas's output, not of the clock or the repeats these tests plant)."""
    return {f for r in res.values() for f in r["flags"] if not f.startswith("sass: register banks")}


def test_a_steady_clock_and_quiet_repeats_are_measured_once(tmp_path, sweep):
    dev = Counting()
    res = measured(dev, tmp_path, sweep)
    # one throughput configuration in this plan: no saturation shown, no other flag
    assert flags(res) == {"not-saturated: one configuration timed: saturation not shown"}
    assert dev.f32_runs() == RUNS
    assert res[("latency", None, None)]["value"] == pytest.approx(4.0)


def test_a_clock_change_during_an_item_is_remeasured(tmp_path, sweep):
    # start_run reads the clock once; then the item: 1980 before, 1500 after -> again at 1500
    dev = Counting(clock_seq=[1980, 1980, 1500])
    res = measured(dev, tmp_path, sweep)
    assert dev.f32_runs() == 2 * RUNS  # every family measured again
    f = flags(res)
    assert "remeasured: 1" in f
    assert not any(x.startswith("clock-changed") for x in f)
    assert res[("latency", None, None)]["value"] == pytest.approx(4.0)


def test_a_clock_that_never_settles_is_flagged(tmp_path, sweep):
    res = measured(Alternating(), tmp_path, sweep)
    lat = res[("latency", None, None)]
    assert lat["value"] is not None  # a number with its warning, not a silent one
    assert f"remeasured: {RETRIES}" in lat["flags"]
    assert any(x.startswith("clock-changed: ") and x.endswith(" MHz") and "->" in x for x in lat["flags"])


def test_noisy_repeats_are_remeasured_and_a_clean_repeat_wins(tmp_path, sweep):
    # the first 3 kernel runs (the latency family of the first attempt) are noisy
    dev = Counting(noisy_runs=3, noise=0.5)
    res = measured(dev, tmp_path, sweep)
    f = flags(res)
    assert not any(x.startswith("noisy") for x in f)
    assert "remeasured: 1" in f
    assert res[("latency", None, None)]["value"] == pytest.approx(4.0)
    # only the noisy family (latency: 3 kernels) was measured again; the others were kept
    assert dev.f32_runs() == RUNS + 3
    own = [r for r in dev.runs if F32.match(r)]
    assert own[RUNS : RUNS + 3] == own[:3]  # the same latency kernels


def test_repeats_that_stay_noisy_are_flagged_after_the_retries(tmp_path, sweep):
    dev = ScriptedDevice(noisy_calls=10**6, noise=0.5)
    res = measured(dev, tmp_path, sweep)
    noisy = [r for r in res.values() if any(x.startswith("noisy") for x in r["flags"])]
    assert noisy
    assert all(f"remeasured: {RETRIES}" in r["flags"] for r in noisy)
