"""Block -> SM fairness and determinism (issue 22): the analysis on synthetic placements with
known answers (fair, unfair, deterministic, random), and the fairness probes end to end on a
simulated GPU with planted dispatchers."""

from __future__ import annotations

import numpy as np
import pytest
from test_behaviour import simulate

from gpudissect.arch import occupancy
from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.device.args import Buf
from gpudissect.device.device import FakeDevice
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.behaviour import fairness as fa
from gpudissect.suites.behaviour import suite as bh

TARGET = make_target("sm_90")
RULES = occupancy.occupancy_rules(TARGET)
EQUAL = 20_000  # every block the same work, as the probes launch them


def _launch(n: int, nsm: int, cap: int, policy: str = "breadth", order=None, refill: str = "fifo",
            spins=None) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    spins = np.full(n, EQUAL) if spins is None else spins
    g0, g1, c0, c1, sm = simulate(n, nsm, cap, spins, policy, order, refill)
    d, load, w = fa.launch_stats(sm, g0, g1, c0, c1, nsm)
    return d, load, w, sm


# ----------------------------------------------------------------- one launch
def test_loads_and_histogram_count_idle_sms():
    load = fa.loads(np.array([0, 0, 1, 3, 3, 3]), 6)
    assert load.tolist() == [2, 1, 0, 3, 0, 0]
    assert fa.histogram(load) == {0: 3, 1: 1, 2: 1, 3: 1}
    assert fa.loads(np.array([0, 9]), 4).tolist() == [1] + [0] * 8 + [1]  # an id beyond widens the range


@pytest.mark.parametrize("n,nsm,lo,hi", [(132, 132, 1, 1), (133, 132, 1, 2), (198, 132, 1, 2), (264, 132, 2, 2),
                                         (7, 8, 0, 1)])
def test_fair_range(n, nsm, lo, hi):
    assert fa.fair_range(n, nsm) == (lo, hi)


@pytest.mark.parametrize("mult,extra,cap", [(1, 0, 4), (1, 1, 1), (2, 0, 1), (3, 0, 2), (1.5, 0, 8)])
def test_breadth_first_fifo_placement_is_fair(mult, extra, cap):
    nsm = 8
    n = int(mult * nsm) + extra
    d, load, _w, _sm = _launch(n, nsm, cap)
    assert d["fair"] and d["loss"] == 0.0 and d["excess"] == 1.0
    assert d["max"] == -(-n // nsm) and d["min"] == n // nsm
    assert sum(k * v for k, v in d["histogram"].items()) == n and sum(d["histogram"].values()) == nsm


def test_depth_first_placement_is_unfair_with_its_cost():
    nsm = 8
    d, load, _w, _sm = _launch(8, nsm, 4, "depth")  # grid = SMs, 4 blocks fit an SM: two SMs get 4
    assert not d["fair"]
    assert d["histogram"] == {0: 6, 4: 2} and d["idle"] == 6
    assert d["max"] == 4 and d["fair_max"] == 1 and d["excess"] == 4.0 and d["loss"] == 0.75
    assert d["waves"] == 1 and d["resident_max"] == 4


def test_waves_per_sm_and_the_fair_number():
    nsm, cap = 4, 2
    d, load, w, sm = _launch(3 * nsm * cap, nsm, cap)  # three full waves
    assert d["waves"] == 3 and d["fair_waves"] == 3 and d["resident_max"] == cap
    for s in range(nsm):
        assert sorted(w[sm == s].tolist()) == [0, 0, 1, 1, 2, 2]
    assert d["later_wave_blocks"] == 2 * nsm * cap
    one, *_ = _launch(nsm, nsm, cap)
    assert one["waves"] == 1 and one["later_wave_blocks"] == 0 and one["refill"]["first_freed_share"] is None


def test_refill_takes_the_first_freed_slot_or_not():
    nsm = 8
    d, *_ = _launch(3 * nsm, nsm, 1)  # fifo: the SM that freed a slot first gets the next block
    assert d["refill"]["refills"] == 2 * nsm and d["refill"]["first_freed_share"] == 1.0
    rng = np.random.default_rng(3)
    spins = rng.integers(20_000, 60_000, 3 * nsm)
    fixed, *_ = _launch(3 * nsm, nsm, 1, refill="fixed", spins=spins)  # block i waits for SM i mod 8
    assert fixed["refill"]["first_freed_share"] < 0.7
    fifo, *_ = _launch(3 * nsm, nsm, 1, spins=spins)
    assert fifo["refill"]["first_freed_share"] == 1.0
    assert not fifo["fair"]  # unequal work: the SMs whose blocks end first get more of them


def test_refill_by_hand():
    # SM 0 frees at 100, SM 1 at 50; the later block goes to SM 0: not the first freed
    smid, g0, g1, wave = [0, 1, 0], [0, 0, 120], [100, 50, 200], [0, 0, 1]
    r = fa.refill_first_freed(np.array(smid), np.array(g0), np.array(g1), np.array(wave), tol=1)
    assert r == {"refills": 1, "unmatched": 0, "first_freed_share": 0.0}
    r = fa.refill_first_freed(np.array(smid), np.array(g0), np.array(g1), np.array(wave), tol=60)
    assert r["first_freed_share"] == 1.0  # within the timer's resolution: a tie


# ----------------------------------------------------------------- over launches
def test_repeats_deterministic_and_random():
    nsm, n, L = 8, 16, 10
    m = np.arange(n) % nsm
    same = fa.repeats([m.copy() for _ in range(L)], nsm)
    assert same["identical_all"] and same["distinct_maps"] == 1 and same["modal_share"] == 1.0
    assert same["same_sm_share"] == 1.0 and same["consecutive_identical_share"] == 1.0
    rng = np.random.default_rng(0)
    rand = fa.repeats([rng.permutation(m) for _ in range(L)], nsm)
    assert not rand["identical_all"] and rand["distinct_maps"] == L and rand["modal_share"] == 1 / L
    assert rand["same_sm_share"] < 0.6
    assert rand["distinct_loads"] == 1 and rand["distinct_histograms"] == 1  # the loads stay the same
    two = [m.copy() for _ in range(L)]
    two[3] = m.copy()
    two[3][[0, 1]] = two[3][[1, 0]]  # one launch swaps two blocks
    r = fa.repeats(two, nsm)
    assert r["distinct_maps"] == 2 and r["modal_share"] == 0.9
    assert r["same_sm_share"] == pytest.approx(1 - 2 / (n * L))
    assert r["consecutive_identical_share"] == pytest.approx(7 / 9, abs=1e-4)


def test_verdicts():
    fair, unfair = {"fair": True}, {"fair": False}
    det = {"identical_all": True, "distinct_maps": 1, "same_sm_share": 1.0}
    var = {"identical_all": False, "distinct_maps": 4, "same_sm_share": 0.5}
    assert fa.verdict([fair] * 10, det)["verdict"] == "fair, deterministic"
    v = fa.verdict([unfair] * 10, var)
    assert v["verdict"].startswith("unfair, not deterministic (4 distinct maps") and v["fair_share"] == 0.0
    v = fa.verdict([fair] * 7 + [unfair] * 3, det)
    assert v["verdict"] == "fair in 7 of 10 launches, deterministic" and v["fair"] is False and v["fair_share"] == 0.7
    v = fa.verdict([fair] * 2, det)
    assert not v["agreed"] and v["fair"] is None


def test_mean_histogram_and_when_fair():
    per = [{"histogram": {1: 6, 2: 2}}, {"histogram": {0: 1, 1: 4, 2: 3}}]
    assert fa.mean_histogram(per) == {0: 0.5, 1: 5.0, 2: 2.5}
    rows = [{"name": "a", "grid": 8, "sms": 8, "waves": 1, "fair": True, "deterministic": True},
            {"name": "b", "grid": 9, "sms": 8, "waves": 2, "fair": False, "deterministic": True},
            {"name": "c", "grid": 16, "sms": 8, "waves": 2, "fair": True, "deterministic": False},
            {"name": "d", "grid": 12, "sms": 8, "waves": 1, "fair": None, "deterministic": None}]
    g = fa.when_fair(rows)
    assert g["grid a multiple of the SMs"] == {"configurations": 2, "fair": 2, "deterministic": 1, "unfair": []}
    assert g["grid not a multiple of the SMs"]["unfair"] == ["b"]
    assert g["more than one wave"] == {"configurations": 2, "fair": 1, "deterministic": 1, "unfair": ["b"]}
    assert g["one wave"]["configurations"] == 1  # d: no verdict, left out


@pytest.mark.parametrize("top,width", [(0, 1), (15, 1), (131, 2), (300, 3)])
def test_ids_round_trip(top, width):
    a = np.array([top, 0, top // 2, 1])
    s = fa.encode_ids(a)
    assert s.startswith(f"{width}:") and len(s) == 2 + width * len(a)
    assert fa.decode_ids(s).tolist() == a.tolist()


# ----------------------------------------------------------------- the probes on a simulated GPU
def planted(nsm: int, policy: str, seed: int = 0):
    """A FakeDevice launch model of resid kernels: ``breadth`` (SMs in order, fifo refill),
    ``depth`` (fill an SM first) or ``shuffle`` (breadth-first over a new random SM order
    each launch); the capacity of the occupancy rules (16 registers assumed)."""
    rng = np.random.default_rng(seed)

    def model(kernel, grid, block, args, smem):
        threads = block if isinstance(block, int) else block[0]
        gx, gy = (grid, 1) if isinstance(grid, int) else grid[:2]
        n = gx * gy
        spins = next(a for a in args if isinstance(a, Buf) and a.name == "spin").data
        cap = occupancy.predict_blocks(threads, 16, smem, RULES)["blocks"]
        order = [int(x) for x in rng.permutation(nsm)] if policy == "shuffle" else None
        g0, g1, c0, c1, sm = simulate(n, nsm, cap, spins, "depth" if policy == "depth" else "breadth", order)
        rec = np.zeros((n, 8), np.uint64)
        rec[:, 0], rec[:, 1], rec[:, 2], rec[:, 3], rec[:, 4] = g0, g1, c0, c1, sm
        rec[:, 5] = nsm
        lin = np.arange(n)
        rec[:, 6] = (lin // gx).astype(np.uint64) << np.uint64(32) | (lin % gx).astype(np.uint64)
        return {"rec": rec.reshape(-1)}

    return model


PATS = ["fairness:1x:free", "fairness:1x+1:smem200KiB", "fairness:2x:smem200KiB"]


def _run(tmp_path, policy: str) -> dict:
    nsm = 8
    dev = FakeDevice(sm_count=nsm, launch_model=planted(nsm, policy))
    store = Store(tmp_path / f"{policy}.db")
    rid = run(get_suite("behaviour"), Context(dev, store, TARGET), PATS, resume=True).run_id
    rs = {r["variant"]: r for r in store.results(rid)}
    return {"rs": rs, "summary": store.get_meta(f"summary:{rid}"), "store": store, "rid": rid}


def test_probe_names_and_selection():
    ps = bh.all_probes(132, quick=False)
    fair = bh.select(ps, ["fairness*"])
    assert len(fair) == len(bh.FAIR_GRIDS) * len(bh.FAIR_LIMITS) and {p.kind for p in fair} == {"fairness"}
    grids = {p.name.split(":")[1]: p.params["grid"] for p in fair}
    assert grids == {"1x": 132, "1x+1": 133, "1.5x": 198, "2x": 264, "3x": 396, "4x": 528, "8x": 1056}
    assert [p.name for p in bh.select(ps, ["fairness:1x:*"])][:2] == ["fairness:1x:free", "fairness:1x:live54"]
    quick = bh.select(bh.all_probes(132, quick=True), ["fairness"])
    assert len(quick) < len(fair)
    # the rules give the limits the names promise at 256 threads (smem; registers depend on the cubin)
    caps = {lim: occupancy.predict_blocks(bh.FAIR_THREADS, 16, kib * 1024, RULES)["blocks"]
            for lim, (live, kib) in bh.FAIR_LIMITS.items() if live == 0}
    assert caps == {"free": 8, "smem48KiB": 4, "smem100KiB": 2, "smem200KiB": 1}


def test_fairness_probes_breadth_first_fair_and_deterministic(tmp_path):
    out = _run(tmp_path, "breadth")
    rs, s = out["rs"], out["summary"]
    for name in PATS:
        r = rs[name]
        assert r["value"] == 1.0 and r["fit"]["verdict"]["verdict"] == "fair, deterministic", name
        assert len(r["fit"]["per_launch"]) == bh.FAIR_LAUNCHES and len(r["samples"]["maps"]) == 1
        assert r["fit"]["equal_work"] is True and not r["flags"]
        assert r["samples"]["launch_map"] == [0] * bh.FAIR_LAUNCHES
    # the stored map is the placement (blocks in order over SMs 0..7, one per SM, then SM 0)
    assert fa.decode_ids(rs["fairness:1x+1:smem200KiB"]["samples"]["maps"][0]).tolist() == list(range(8)) + [0]
    c = s["fairness"]["configurations"]["fairness:1x+1:smem200KiB"]
    assert c["mean_histogram"] == {"1": 7.0, "2": 1.0} and c["waves"] == [2] and c["refill_first_freed_share"] == 1.0
    assert s["fairness"]["configurations"]["fairness:2x:smem200KiB"]["waves"] == [2]
    assert s["verdicts"]["block -> SM fairness"]["verdict"].startswith("fair in every launch in 3 of 3")
    assert any(x == "block -> SM fairness: no unfair placement in any launch of any configuration"
               for x in s["conclusions"])
    # the figure, the HTML table and the timing-reference section draw from the summary
    from gpudissect.store.export import suite_document
    from gpudissect.suites.behaviour.figures import fairness as fig
    from gpudissect.suites.behaviour.view import markdown_section, report_section

    doc = suite_document(out["store"], out["rid"])
    assert [p.stem for p in fig(doc, tmp_path / "fig")][0] == "behaviour_fairness"
    assert any(t.key == "behaviour-fairness" for t in report_section(doc, None)["tables"])
    md = markdown_section(s)
    assert md[0].startswith("### Block -> SM fairness") and sum(1 for x in md if x.startswith("| fairness:")) == 3


def test_fairness_probes_find_planted_unfair_and_random_dispatchers(tmp_path):
    depth = _run(tmp_path, "depth")
    r = depth["rs"]["fairness:1x:free"]  # 8 blocks, 8 fit one SM: all on one SM
    assert r["value"] == 0.0 and r["fit"]["verdict"]["verdict"] == "unfair, deterministic"
    c = depth["summary"]["fairness"]["configurations"]["fairness:1x:free"]
    assert c["mean_histogram"] == {"0": 7.0, "8": 1.0} and c["loss_max"] == 0.875 and c["idle_max"] == 7
    assert any("fairness:1x:free" in x and "unfair" in x for x in depth["summary"]["conclusions"])
    shuffle = _run(tmp_path, "shuffle")
    for name in PATS:
        v = shuffle["rs"][name]["fit"]["verdict"]
        assert v["fair"] is True and v["deterministic"] is False, name
    rep = shuffle["rs"]["fairness:1x:free"]["fit"]["repeats"]
    assert rep["distinct_maps"] > 1 and rep["same_sm_share"] < 1.0
    assert any(x.startswith("block -> SM placement repeats: not the same map in every launch in 3 of 3")
               for x in shuffle["summary"]["conclusions"])


# ----------------------------------------------------------------- the premise: equal work
def test_equal_work_holds_for_equal_blocks_and_fails_otherwise():
    nsm = 8
    g0, g1, c0, c1, sm = simulate(3 * nsm, nsm, 1, np.full(3 * nsm, EQUAL))
    ok = fa.equal_work(g0, g1, c0, c1, 3)
    assert ok["equal"] and ok["window_spread"] == 1.0 and 1.0 <= ok["makespan_over_waves_x_block"] < 1.05
    # blocks that record a quarter of their life: the launch lasts ~4x waves x window
    short_g1, short_c1 = g0 + (g1 - g0) // 4, c0 + (c1 - c0) // 4
    out = fa.equal_work(g0, short_g1, c0, short_c1, 3)
    assert not out["equal"] and "lived beyond" in out["why"]
    assert out["makespan_over_waves_x_block"] == pytest.approx(2.25 / 0.75, rel=0.02)  # 2 waves + a quarter
    assert fa.equal_work(g0, g1, c0, c1, 3, spin=EQUAL)["window_over_spin"] == pytest.approx(1.0, abs=0.02)
    longer = fa.equal_work(g0, g1, c0, c1, 3, spin=EQUAL // 4)  # windows 4x the spin: other work in them
    assert not longer["equal"] and "cycles spun" in longer["why"]
    rng = np.random.default_rng(5)
    g0, g1, c0, c1, sm = simulate(3 * nsm, nsm, 1, rng.integers(20_000, 60_000, 3 * nsm))
    uneq = fa.equal_work(g0, g1, c0, c1, 3)
    assert not uneq["equal"] and "spread" in uneq["why"]
    d, *_ = _launch(3 * nsm, nsm, 1)
    assert d["work"]["equal"]


def test_unequal_work_is_flagged_and_kept_out_of_the_groups(tmp_path):
    nsm = 8
    base = planted(nsm, "breadth")

    def outlive(kernel, grid, block, args, smem):  # every block records a quarter of its life
        rec = base(kernel, grid, block, args, smem)["rec"].reshape(-1, 8).copy()
        rec[:, 1] = rec[:, 0] + (rec[:, 1] - rec[:, 0]) // np.uint64(4)
        rec[:, 3] = rec[:, 2] + (rec[:, 3] - rec[:, 2]) // np.uint64(4)
        return {"rec": rec.reshape(-1)}

    dev = FakeDevice(sm_count=nsm, launch_model=outlive)
    store = Store(tmp_path / "o.db")
    pats = ["fairness:2x:smem200KiB", "fairness:1x:free"]  # two waves: the late release shows; one: it cannot
    rid = run(get_suite("behaviour"), Context(dev, store, TARGET), pats, resume=True).run_id
    rs = {x["variant"]: x for x in store.results(rid)}
    r = rs["fairness:2x:smem200KiB"]
    assert any(f.startswith("unequal-work: in 10 of 10 launches") for f in r["flags"])
    assert r["fit"]["equal_work"] is False and rs["fairness:1x:free"]["fit"]["equal_work"] is True
    s = store.get_meta(f"summary:{rid}")
    assert s["fairness"]["configurations"]["fairness:2x:smem200KiB"]["equal_work"] is False
    assert s["fairness"]["when_fair"]["one wave"]["configurations"] == 1
    assert "more than one wave" not in s["fairness"]["when_fair"]
    assert "blocks did unequal work in 1" in s["conclusions"][0]
