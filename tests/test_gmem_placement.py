"""A one-warp chain with a global target is timed at several placements of the target, and its
record is the near level's (issue 36: one placement was near or far by the allocator's choice)."""

from types import SimpleNamespace

import pytest

from gpudissect.arch.target import make_target
from gpudissect.catalog.model import load_catalog
from gpudissect.device.device import FakeDevice
from gpudissect.suites.instructions import placement
from gpudissect.suites.instructions.core import Family, Plan, _launch_lengths, chain
from gpudissect.suites.instructions.strategies import strategy
from gpudissect.suites.instructions.template import GMEM_SLOT, generate


@pytest.fixture(scope="module")
def atom():
    return load_catalog().get("atom.global.add.u32")


def test_a_global_target_is_moved_by_its_input_slot(atom):
    k = generate(atom, strategy("reg"), make_target("sm_90"), chains=1, length=8)
    assert k.meta["uses_gmem"] and k.inputs[GMEM_SLOT] == 0  # as generated: the output slot itself
    setup = k.entry[: k.entry.index("add.u64 %sync")]
    assert "ld.global.b64 %gmem, [%in+0];" in setup and "add.u64 %gmem, %gmem, %outp;" in setup


def test_offsets_lie_past_every_sink_and_apart():
    offs = placement.offsets(n_sink=3, threads=32, n=5)
    assert offs[0] >= 3 * 32 * 8 and offs[0] % placement.ALIGN == 0
    assert all(b - a == placement.STRIDE for a, b in zip(offs, offs[1:], strict=False))
    assert placement.out_bytes(offs[-1], 3, 32) == offs[-1] + 3 * 32 * 8


def test_levels_split_at_the_largest_jump():
    lv = placement.levels([300.0, 480.0, 296.0, 500.0, 470.0, 302.0, 490.0])
    assert lv.slopes[lv.near] == 300.0  # the near level's median placement
    assert lv.far == 485.0 and lv.far_share == pytest.approx(4 / 7)
    assert lv.params()["far_home"] == 485.0
    one = placement.levels([33.0, 33.5, 32.8])
    assert one.far is None and one.slopes[one.near] == 33.0
    assert "far_home" not in one.params()
    nan = float("nan")
    assert placement.levels([nan, 300.0, 480.0, 296.0]).slopes[placement.levels([nan, 300.0, 480.0, 296.0]).near] == 296.0
    assert placement.levels([nan, nan]).near == 0


def built(name: str, n: int, gmem: bool):
    k = SimpleNamespace(name=name, inputs=[0, 7], n_sink=2, length=n, meta={"uses_gmem": gmem})
    return SimpleNamespace(cubin=b"m", kernel=k)


class Homes(FakeDevice):
    """Cycles per instance by where the target lies: every third placement near."""

    def __init__(self):
        super().__init__(model=lambda k, c, n, w: n * (300.0 if (self.last_inputs[0] // placement.STRIDE) % 3 == 0
                                                         else 500.0))
        self.specs = []

    def run_many(self, cubin, specs):
        self.specs += specs
        return super().run_many(cubin, specs)


def test_a_global_chain_is_timed_at_each_placement_and_reports_the_near_level():
    dev, plan = Homes(), Plan(reps=3, launches=2, gmem_placements=6)
    bs = [built("v0_l1_n32", 32, True), built("v0_l1_n64", 64, True)]
    w = SimpleNamespace(variant=SimpleNamespace(name="atom.global.add.u32"))
    r = chain(dev, w, Family("latency", 1, [], built=bs), plan, [], {})
    assert len(dev.specs) == 12 and {s.inputs[GMEM_SLOT] for s in dev.specs} == set(placement.offsets(2, 32, 6))
    assert all(s.out_bytes >= s.inputs[GMEM_SLOT] + 32 * 2 * 8 for s in dev.specs)
    assert r.value == pytest.approx(300.0, abs=0.5)
    assert r.params["far_home"] == pytest.approx(500.0, abs=0.5) and r.params["far_share"] == pytest.approx(2 / 3, abs=1e-3)
    assert len(r.samples["slope_per_placement"]) == 6


def test_a_chain_without_a_global_target_runs_once_as_generated():
    dev, plan = Homes(), Plan(reps=3, launches=2)
    res = _launch_lengths(dev, [built("v0_l1_n32", 32, False)], plan, 1, 32)
    assert len(res) == 1 and [s.inputs for s in dev.specs] == [(0, 7)] and dev.specs[0].out_bytes == 0


def test_every_view_says_the_value_is_the_near_homes():
    from gpudissect.cli.results_commands import show_answer
    from gpudissect.suites.instructions.view import instruction_rows

    rec = {"variant": "atom.global.add.u32", "measure": "latency", "value": 289.1, "flags": [],
           "params": {"far_home": 499.4, "far_share": 0.5}}
    assert "near L2 home; far 499.4 at 50% of placements" in instruction_rows([rec])[0].latency_label
    assert "near L2 home; far 499.4" in show_answer([rec])
    assert instruction_rows([{**rec, "params": {"l2_home": "one level over the placements"}}])[0].latency_label == ""
