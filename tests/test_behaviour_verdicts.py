"""Behaviour verdicts that need agreeing launches and saturated solos: the analyses on synthetic
data with known answers (agreement over launches, saturation, pipe groups from add/compete
rates, warp issue-order patterns), and the timed probes end to end on a simulated GPU whose
pipes, schedulers and issue order are planted."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench import stats
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.device.args import Buf
from gpudissect.device.device import FakeDevice
from gpudissect.kernel.timing import row_words
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.behaviour import analyse as an
from gpudissect.suites.behaviour import suite as bh
from gpudissect.suites.behaviour.kernels import REPS

TARGET = make_target("sm_90")
ROW = row_words(REPS)

# planted pipes: variant -> (pipe, warp-instr/clk/SM when saturated); issue limit 4/clk/SM
PIPES = {"fma.rn.f32": ("fma", 4.0), "mad.lo.u32": ("alu", 2.0), "lop3.b32": ("alu", 2.0),
         "fma.rn.f64": ("dfma", 2.0), "ex2.approx.ftz.f32": ("xu", 0.5), "popc.b32": ("xu", 0.5)}


class SimGPU:
    """A launch model for FakeDevice: the timed probes of the behaviour suite on a planted GPU.

    * ``pipe_*``: each part's instructions take n / rate cycles on its pipe; parts on one pipe take
      turns, parts on different pipes overlap, and all of them issue at most ``issue`` per clock;
      ``slow`` variants need ``parallel`` warps x chains to reach their rate (less: proportionally
      slower), the others reach it at any configuration the suite runs;
    * ``sched_pair``: a warp alone issues one FFMA per clock; warps on one scheduler (``w mod
      sched_mod``) run one after the other (greedy, as the H100 runs warps that never stall);
    * ``order_*``: the warps of each scheduler (``w mod 4``) follow the planted ``order`` pattern,
      ``orders`` (one per launch, cycled) where it changes between launches.
    Every block gets its own SM (grids of at most the SM count, as the suite launches)."""

    def __init__(self, nsm: int, pipes: dict | None = None, issue: float = 4.0, order: str = "wait1",
                 orders: list[str] | None = None, sched_mod: int = 4, slow: dict | None = None,
                 flaky_pair: str | None = None, noise: float = 0.0, seed: int = 0):
        self.nsm, self.pipes, self.issue = nsm, pipes or PIPES, issue
        self.orders = orders or [order]
        self.sched_mod, self.slow = sched_mod, slow or {}
        self.flaky_pair = flaky_pair
        self.noise, self.rng = noise, np.random.default_rng(seed)
        self.launches: Counter = Counter()
        self.order_calls = 0

    def __call__(self, kernel: str, grid, block, args, smem) -> dict:
        threads = block if isinstance(block, int) else block[0]
        W = threads // 32
        n = grid if isinstance(grid, int) else grid[0]
        self.launches[kernel] += 1
        if kernel == "sched_pair":
            return self._pairs(n, W, next(a for a in args if isinstance(a, Buf) and a.name == "masks").data)
        if kernel.startswith("order_"):
            return self._order(n, W)
        if kernel.startswith("pipe_"):
            return self._pipe(kernel, n, W)
        raise ValueError(kernel)

    def _rows(self, n: int, W: int) -> np.ndarray:
        rows = np.zeros((n * W, ROW), np.uint64)
        rows[:, -1] = np.repeat(np.arange(n) % self.nsm, W)
        return rows

    def _pipe(self, kernel: str, n: int, W: int) -> dict:
        m = re.fullmatch(r"pipe_(?P<tag>(?:v\d+)+)_k(?P<k>\d+)_n(?P<n>\d+)", kernel)
        assert m, kernel
        parts = [bh.PIPE_VARIANTS[int(i)] for i in re.findall(r"v(\d+)", m["tag"])]
        k, length = int(m["k"]), int(m["n"])
        busy: dict[str, float] = {}
        total = 0
        for v in parts:
            pipe, rate = self.pipes[v]
            need = self.slow.get(v)
            if need:
                rate *= min(1.0, k * W / need)
            if self.flaky_pair and "+".join(parts) == self.flaky_pair and self.launches[kernel] % 2:
                pipe = "shared-this-launch"
            instr = W * k * length
            busy[pipe] = busy.get(pipe, 0.0) + instr / rate
            total += instr
        cycles = max(max(busy.values()), total / self.issue)
        rows = self._rows(n, W)
        for r in range(REPS):
            c = cycles * (1 + self.noise * self.rng.standard_normal(n))
            t0 = 10_000 + 200_000 * r
            rows[:, 2 * r] = t0 + np.tile(np.arange(W) % 3, n)  # a few cycles of start skew
            rows[:, 2 * r + 1] = t0 + 60 + np.repeat(np.round(c).astype(np.int64), W)  # 60: the region's fixed cost
        return {"times": rows.reshape(-1)}

    def _pairs(self, n: int, W: int, masks: np.ndarray) -> dict:
        rows = self._rows(n, W)
        for b in range(n):
            act = [w for w in range(W) if int(masks[b]) >> w & 1]
            for w in act:
                rank = sum(1 for o in act if o % self.sched_mod == w % self.sched_mod and o < w)
                for r in range(REPS):
                    t0 = 1000 + 100_000 * r + 542 * rank
                    rows[b * W + w, 2 * r] = t0
                    rows[b * W + w, 2 * r + 1] = t0 + 542
        return {"times": rows.reshape(-1), "wid": np.zeros(n * W, np.uint64)}

    def _order(self, n: int, W: int) -> dict:
        self.order_calls += 1
        pattern = self.orders[(self.order_calls - 1) % len(self.orders)]
        rows = self._rows(n, W)
        wid = np.array([4 * (w // 4) + (w + 3) % 4 for w in range(W)] * n, np.uint64)
        for b in range(n):
            for s in range(4):
                g = [w for w in range(W) if w % 4 == s]
                for r in range(REPS):
                    base = 5000 + 100_000 * r
                    for i, w in enumerate(g):
                        if pattern == "together":
                            t0, t1 = base + i, base + 2000 + i
                        elif pattern == "sequential":
                            t0, t1 = base + 500 * i, base + 500 * (i + 1)
                        elif pattern == "wait1":  # the lowest warp waits for the others to finish
                            t0, t1 = (base + 1400, base + 1900) if i == 0 else (base + i, base + 1400 - i)
                        else:
                            raise ValueError(pattern)
                        rows[b * W + w, 2 * r], rows[b * W + w, 2 * r + 1] = t0, t1
        return {"times": rows.reshape(-1), "wid": wid}


def sim_device(nsm: int = 8, **kw) -> tuple[FakeDevice, SimGPU]:
    sim = SimGPU(nsm, **kw)
    return FakeDevice(sm_count=nsm, launch_model=sim), sim


def _run(tmp_path, dev, patterns) -> dict:
    store = Store(tmp_path / "b.db")
    rid = run(get_suite("behaviour"), Context(dev, store, TARGET), patterns, resume=False).run_id
    return store.get_meta(f"summary:{rid}")


# ----------------------------------------------------------------- agreement over launches
def test_three_agreeing_launches_give_the_verdict():
    v = an.agree([{"verdict": "compete", "rate": 2.0}, {"verdict": "compete", "rate": 2.01},
                  {"verdict": "compete", "rate": 1.99}])
    assert v["verdict"] == "compete" and v["agreed"] and v["launches"] == 3
    assert [d["rate"] for d in v["per_launch"]] == [2.0, 2.01, 1.99]


def test_one_disagreeing_launch_gives_undetermined_with_the_evidence():
    per = [{"verdict": "greedy", "share": 0.9}, {"verdict": "mixed", "share": 0.5},
           {"verdict": "greedy", "share": 0.95}]
    v = an.agree(per)
    assert v["verdict"] == an.UNDETERMINED and not v["agreed"]
    assert "1: mixed" in v["why"] and v["per_launch"] == per  # each launch's verdict and numbers kept


def test_fewer_than_three_launches_state_nothing():
    v = an.agree([{"verdict": "add"}, {"verdict": "add"}])
    assert v["verdict"] == an.UNDETERMINED and "at least 3" in v["why"]


def test_launches_that_are_themselves_undetermined_do_not_agree_on_it():
    v = an.agree([{"verdict": "undetermined: within the spread"}] * 3)
    assert not v["agreed"]


def test_agree_values_within_tolerance():
    assert an.agree_values([4.0, 4.02, 3.99], 0.02)["agreed"]
    v = an.agree_values([4.0, 3.5, 4.0], 0.02)
    assert not v["agreed"] and v["value"] is None and [d["value"] for d in v["per_launch"]] == [4.0, 3.5, 4.0]


# ----------------------------------------------------------------- saturation
def test_saturation_rejects_a_still_rising_solo():
    s = stats.saturation([1.0, 1.8, 2.5])
    assert not s["saturated"] and s["rise"] == pytest.approx(2.5 / 1.8, abs=1e-3) and "still rising" in s["why"]
    assert not stats.saturation([3.8, 3.9, 4.0])["saturated"]  # +2.6%: still rising
    assert stats.saturation([2.0, 3.95, 4.0])["saturated"]  # +1.3%: levelled off
    assert stats.saturation([2.0, 4.0, 3.9])["saturated"]  # falling is not rising
    assert not stats.saturation([4.0])["saturated"]


# ----------------------------------------------------------------- pipes
def _model_rate(a: str, b: str, pipes: dict, issue: float) -> float:
    """The combined rate of a pair with equal instruction counts on the planted pipes."""
    (pa, ra), (pb, rb) = pipes[a], pipes[b]
    t = 0.5 / ra + 0.5 / rb if pa == pb else max(0.5 / ra, 0.5 / rb)
    return 1.0 / max(t, 1.0 / issue)


def _synthetic(pipes: dict, issue: float = 4.0, launches: int = 3, rising: str | None = None):
    solos = {v: {"launches": [{"rate": r, "hw": 0.005 * r, "issue": r, "saturated": v != rising}
                              for _ in range(launches)]} for v, (_p, r) in pipes.items()}
    pairs = {}
    names = list(pipes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            r = _model_rate(a, b, pipes, issue)
            pairs[(a, b)] = {"launches": [{"rate": r, "hw": 0.005 * r, "issue": r} for _ in range(launches)],
                             "share_a": 0.5}
    return solos, pairs


def test_pipe_groups_from_add_and_compete_rates():
    solos, pairs = _synthetic(PIPES)
    pv = an.pipes_verdicts(solos, pairs, schedulers=4)
    v = {k: d["verdict"] for k, d in pv["pairs"].items()}
    assert v["mad.lo.u32+lop3.b32"] == "compete"  # one pipe: they take turns
    assert v["ex2.approx.ftz.f32+popc.b32"] == "compete"
    assert v["fma.rn.f32+mad.lo.u32"] == "add"  # separate pipes, capped by the issue limit
    assert v["fma.rn.f32+ex2.approx.ftz.f32"] == "add"  # the slow pipe bounds it (12% from compete)
    assert v["mad.lo.u32+fma.rn.f64"] == "add"
    assert pv["groups"] == [["ex2.approx.ftz.f32", "popc.b32"], ["fma.rn.f32"], ["fma.rn.f64"],
                            ["lop3.b32", "mad.lo.u32"]]
    lim = pv["issue_limit"]
    assert lim["agreed"] and lim["value"] == 4.0 and lim["per_scheduler"] == 1.0
    assert "fma.rn.f32+mad.lo.u32" in lim["capped_pairs"]  # its pipes add up to more than issue allows
    assert not pv["undetermined_pairs"]


def test_pair_verdict_positions():
    # a pair halfway between the predictions is partial; one within the spread of a threshold is not decided
    r_add, r_comp = an.pair_predictions(2.0, 2.0, 0.5, 4.0)
    assert (r_add, r_comp) == (4.0, 2.0)
    assert an.pair_verdict(2.0, 2.0, 3.0, 0.5, 4.0)["verdict"] == "partial"
    assert an.pair_verdict(2.0, 2.0, 3.5, 0.5, 4.0, hw_ab=0.2)["verdict"].startswith(an.UNDETERMINED)
    assert an.pair_verdict(4.0, 4.0, 4.0, 0.5, 4.0)["verdict"] == "indistinct"  # the issue limit alone binds
    fast = an.pair_verdict(2.0, 2.0, 6.0, 0.5, 8.0)  # beyond the add prediction: add, with a note
    assert fast["verdict"] == "add" and fast["position"] == 2.0 and "faster" in fast["note"]
    slow = an.pair_verdict(2.0, 2.0, 1.5, 0.5, 4.0)
    assert slow["verdict"] == "compete" and "slower than the compete" in slow["note"]
    assert "note" not in an.pair_verdict(2.0, 2.0, 2.0, 0.5, 4.0)


def test_a_rising_solo_leaves_its_pairs_undetermined():
    solos, pairs = _synthetic(PIPES, rising="fma.rn.f64")
    pv = an.pipes_verdicts(solos, pairs, schedulers=4)
    d = pv["pairs"]["mad.lo.u32+fma.rn.f64"]
    assert d["verdict"] == an.UNDETERMINED and "not saturated (fma.rn.f64)" in d["per_launch"][0]["verdict"]
    assert "mad.lo.u32+fma.rn.f64" in pv["undetermined_pairs"]
    assert pv["pairs"]["mad.lo.u32+lop3.b32"]["verdict"] == "compete"


def test_a_pair_whose_launches_disagree_is_undetermined():
    solos, pairs = _synthetic(PIPES)
    key = ("mad.lo.u32", "lop3.b32")
    pairs[key]["launches"][1]["rate"] = 4.0  # one launch adds
    pv = an.pipes_verdicts(solos, pairs, schedulers=4)
    d = pv["pairs"]["mad.lo.u32+lop3.b32"]
    assert d["verdict"] == an.UNDETERMINED and [x["verdict"] for x in d["per_launch"]] == ["compete", "add", "compete"]
    assert ["lop3.b32"] in pv["groups"] and ["mad.lo.u32"] in pv["groups"]


# ----------------------------------------------------------------- warp issue order
def test_order_group_patterns():
    tight = an.order_group([0, 1, 2, 3], [2000, 2001, 2003, 2002])
    assert tight["key"] == "together" and tight["end_spread"] == pytest.approx(3 / 2003)
    apart = an.order_group([0, 1, 2, 3], [500, 900, 1500, 2000])  # how they finish is evidence, not the verdict
    assert apart["key"] == "together" and apart["end_spread"] == 0.75 and apart["order_tau"] == 1.0
    assert an.order_group([3, 2, 1, 0], [500, 900, 1500, 2000])["order_tau"] == -1.0
    seq = an.order_group([0, 500, 1000, 1500], [500, 1000, 1500, 2000])
    assert seq["key"] == "sequential" and seq["late"] == [1, 2, 3]
    wait = an.order_group([1400, 1, 2, 3], [1900, 1399, 1398, 1397])
    assert wait["key"] == "wait:1" and wait["late"] == [0]
    assert an.order_group([0, 1, 2, 700], [2000, 2001, 2002, 2100])["key"] == "staggered:1"
    assert "1 of the 4 warps" in an.order_text("wait:1", 4) and "other 3 start together" in an.order_text("wait:1", 4)


def _pair_clocks(sets, W: int, greedy: bool, reps: int = 3):
    """Planted clocks of the pair probe: warps on one scheduler (w mod 4) either run one after
    the other, each as long as alone (greedy), or interleave, each twice as long."""
    starts = np.zeros((len(sets), reps, W), np.int64)
    ends = np.zeros((len(sets), reps, W), np.int64)
    for b, s in enumerate(sets):
        for w in s:
            rank = sum(1 for o in s if o % 4 == w % 4 and o < w)
            share = sum(1 for o in s if o % 4 == w % 4)
            t0 = 100 + 542 * rank if greedy else 100
            starts[b, :, w] = t0
            ends[b, :, w] = t0 + (542 if greedy else 542 * share)
    return starts, ends


@pytest.mark.parametrize("greedy", [False, True])
def test_scheduler_groups_per_launch(greedy):
    """Warps that share a scheduler, whether it interleaves them or runs one after the other
    (each warp's own window as long as alone: only the pair's span shows the sharing)."""
    sets = an.pair_masks(8)
    d = an.sched_launch(*_pair_clocks(sets, 8, greedy), sets, 8, 512)
    assert d["groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]] and d["mod"] == 4
    assert d["slowdown_competing"] == 2.0 and d["slowdown_other"] == 1.0
    assert d["solo_ffma_per_clk"] == round(512 / 542, 3)
    assert an.extend_groups(d["groups"], d["mod"], 16)[0] == [0, 4, 8, 12]


# ----------------------------------------------------------------- end to end on the simulated GPU
def test_timed_probes_end_to_end(tmp_path):
    dev, sim = sim_device(8)
    pats = ["scheduler", "pipes:fma.rn.f32+mad.lo.u32", "pipes:mad.lo.u32+lop3.b32", "pipes:fma.rn.f32+lop3.b32",
            "pipes:fma.rn.f32+ex2.approx.ftz.f32"]
    s = _run(tmp_path, dev, pats)
    # every timed probe ran its launches (each a launch of its own)
    assert sim.launches["sched_pair"] == bh.LAUNCHES
    assert sim.launches["order_c1_n128"] == 2 * bh.LAUNCHES  # dep32 and dep16
    p = s["scheduler"]["pairs"]
    assert p["schedulers"] == 4 and p["rule"] == "warp w -> scheduler (w mod 4)" and p["agreed"]
    o = s["scheduler"]["order"]["dep32"]
    assert o["agreed"] and o["verdict"] == "wait:1" and "1 of the 8 warps" in o["policy"]
    assert o["per_launch"][0]["late_warps"] == {"0,1,2,3": 8 * (REPS - 1)}  # warps 0-3, one per scheduler
    assert len(o["windows_lowest_sm"][0]) == 4  # per scheduler: each warp's (warp, %warpid, start, end)
    pv = s["pipes"]
    solo = pv["solo"]["fma.rn.f32"]
    assert solo["rate_per_launch"] == [pytest.approx(4.0, rel=1e-3)] * 3 and all(solo["saturated_per_launch"])
    v = {k: d["verdict"] for k, d in pv["pairs"].items()}
    assert v == {"fma.rn.f32+mad.lo.u32": "add", "mad.lo.u32+lop3.b32": "compete", "fma.rn.f32+lop3.b32": "add",
                 "fma.rn.f32+ex2.approx.ftz.f32": "add"}
    assert ["lop3.b32", "mad.lo.u32"] in pv["groups"]
    assert pv["issue_limit"]["agreed"] and pv["issue_limit"]["per_scheduler"] == pytest.approx(1.0, rel=1e-3)
    assert s["verdicts"]["issue limit"]["agreed"]
    assert any(c.startswith("issue limit (3 launches agree") for c in s["conclusions"])


def test_an_unstable_order_and_a_rising_solo_are_undetermined(tmp_path):
    dev, _sim = sim_device(8, orders=["wait1", "together", "wait1"], slow={"fma.rn.f64": 400})
    s = _run(tmp_path, dev, ["scheduler:pairs", "scheduler:order:dep32", "pipes:mad.lo.u32+fma.rn.f64"])
    o = s["scheduler"]["order"]["dep32"]
    assert not o["agreed"] and o["verdict"] == an.UNDETERMINED
    assert [d["verdict"] for d in o["per_launch"]] == ["wait:1", "together", "wait:1"]
    assert "undetermined" in s["verdicts"]["warp issue order (dep32)"]["verdict"]
    d = s["pipes"]["pairs"]["mad.lo.u32+fma.rn.f64"]
    assert d["verdict"] == an.UNDETERMINED and "not saturated" in d["per_launch"][0]["verdict"]
    assert not all(s["pipes"]["solo"]["fma.rn.f64"]["saturated_per_launch"])


def test_pipe_regions_hold_the_work_alone():
    """Every pipe, pair and scheduler kernel: nothing of the harness between the two clock reads
    (ptxas may move the timestamp registers' copies there; the suite flags that)."""
    from gpudissect.catalog.model import load_catalog
    from gpudissect.kernel.build import build_module
    from gpudissect.kernel.ptx import ptx_header

    cat = load_catalog()
    h = ptx_header(TARGET.ptx_isa, TARGET.arch)
    probes = bh.all_probes(8, quick=True)
    ks = {k.name: k for p in probes if p.kind in ("pipes", "scheduler") for k in bh.probe_kernels(p, h, cat)}
    built = build_module(list(ks.values()), TARGET.arch)
    ops = {"fma.rn.f32": "FFMA", "mad.lo.u32": "IMAD", "fma.rn.f64": "DFMA", "ex2.approx.ftz.f32": "MUFU"}
    for p in (p for p in probes if p.kind in ("pipes", "scheduler")):
        allowed = {ops[v] for v in p.params["parts"]} if p.kind == "pipes" else {"FFMA"}
        for name in p.kernels:
            assert built[name].region and bh.region_extra(built[name], allowed) == {}, name
    b = built["pipe_v0_k8_n64"]
    assert bh.region_extra(b, {"IMAD"}) == {"FFMA": 512}  # the check can fail


def test_pipe_groups_are_sets_that_all_compete():
    """A relation that is not transitive (a competes with b and with c, b and c add) gives two
    overlapping groups, never one group holding a pair that adds."""
    compete = {frozenset(p) for p in (("a", "b"), ("a", "c"), ("d", "e"))}
    g = an.compete_groups(["a", "b", "c", "d", "e", "f"], compete)
    assert g == [["a", "b"], ["a", "c"], ["d", "e"], ["f"]]
    assert an.overlaps(g) == ["a"]
    tri = compete | {frozenset(("b", "c"))}
    assert an.compete_groups(["a", "b", "c"], tri) == [["a", "b", "c"]]
