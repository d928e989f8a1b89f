"""Fleet mode (issue 21) without a GPU: a real local Ray instance offering fake GPUs
(GPUDISSECT_FAKE_DEVICE) on two fake nodes (custom resources ``gpudissect-node:a`` and ``:b``);
one fake GPU slower on purpose, one whose task crashes, one whose task hangs."""

from __future__ import annotations

import json
import os

import pytest

ray = pytest.importorskip("ray")

from typer.testing import CliRunner  # noqa: E402

from gpudissect.cli import app  # noqa: E402
from gpudissect.fleet.merge import merge_runs  # noqa: E402
from gpudissect.fleet.outliers import MIN_GPUS, analyse, conclusions  # noqa: E402
from gpudissect.fleet.page import OUTLIERS_META, fleet_html  # noqa: E402
from gpudissect.fleet.profile import load_profile  # noqa: E402
from gpudissect.fleet.run import run_fleet  # noqa: E402
from gpudissect.fleet.task import GpuTask, run_gpu  # noqa: E402
from gpudissect.store.db import Result, Store  # noqa: E402

GPUS = 6
ITEMS = {"instructions": ["add.f32"]}
SLOW, CRASH, HANG = 1, 4, 5  # fake GPU indices (a/0-2, b/3-5)
TIMEOUT_S = 30.0  # a healthy fake GPU finishes in a few seconds, also on a loaded machine
ENV = {"GPUDISSECT_FAKE_DEVICE": str(GPUS), "GPUDISSECT_FAKE_SPREAD": "0"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local Ray instance for the module: 6 fake GPUs on fake nodes a and b; the compile
    cache warmed first (in this process) so that the tasks measure rather than compile."""
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)  # the workers inherit the environment of the instance
    work = tmp_path_factory.mktemp("warm")
    run_gpu(GpuTask("warm/0", "warm", 0, "warm", ITEMS, options={"catalog": [], "selfcheck": False},
                    isolate=False, jobs=1, work_dir=str(work)))
    ray.init(num_cpus=2 * GPUS, num_gpus=GPUS, resources={"gpudissect-node:a": 3, "gpudissect-node:b": 3},
             include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _profile():
    prof = load_profile(ITEMS)
    prof.validate()
    return prof


@pytest.mark.slow
def test_slow_gpu_found_crash_and_hang_recorded_then_resumed(cluster, tmp_path):
    store = Store(tmp_path / "fleet.db")
    faults = {SLOW: {"GPUDISSECT_FAKE_SPREAD": "0.08"},  # fake GPU 1: 1 + 1 * 0.08 times slower
              CRASH: {"GPUDISSECT_FAKE_FAULTS": "exit:"},  # its process dies at the first kernel
              HANG: {"GPUDISSECT_FAKE_FAULTS": "hang:"}}  # sleeps at the first kernel
    lines: list[str] = []
    state = run_fleet(cluster, store, _profile(), isolate=False, jobs=1, timeout_s=TIMEOUT_S,
                      work_dir=str(tmp_path / "nodes"), env_for=lambda s: faults.get(s.index, {}),
                      echo=lines.append)
    gpus = state["gpus"]
    assert sorted(gpus) == ["a/0", "a/1", "a/2", "b/3", "b/4", "b/5"]
    assert {g["node"] for g in gpus.values()} == {"a", "b"}
    done = {k for k, g in gpus.items() if g["status"] == "done"}
    assert done == {"a/0", "a/1", "a/2", "b/3"}, lines
    assert {gpus[k]["uuid"] for k in done} == {f"GPU-fake-{i}" for i in range(4)}
    crash, hang = gpus["b/4"], gpus["b/5"]
    assert crash["status"] == hang["status"] == "failed"
    assert len(crash["attempts"]) == len(hang["attempts"]) == 2  # retried once, on the same GPU
    assert "process died" in crash["reason"] and "WorkerCrashedError" in crash["reason"]
    assert hang["reason"].startswith(f"timed out after {TIMEOUT_S:g} s")
    assert all(len(gpus[k]["attempts"]) == 1 for k in done)
    # every finished GPU's run is in the one store, under its UUID
    runs = {r["gpu_uuid"]: r for r in store.runs()}
    assert set(runs) == {f"GPU-fake-{i}" for i in range(4)}
    assert all(r["finished"] is not None for r in runs.values())
    assert {gpus[k]["runs"]["instructions"] for k in done} == {int(r["id"]) for r in runs.values()}

    doc = analyse(store, state, 0.05)
    assert [o["key"] for o in doc["outliers"]] == ["a/1"]
    lat = [m for m in doc["outliers"][0]["measures"] if " latency" in m["measure"]]
    assert lat and all(0.05 < m["deviation"] < 0.15 for m in lat)  # 8% slower, cycles rounded
    assert {g["key"] for g in doc["failed"]} == {"b/4", "b/5"}
    assert any("failed b/5: timed out" in c for c in conclusions(doc))

    # resumed, without the faults: only the two failed GPUs run again
    state = run_fleet(cluster, store, _profile(), isolate=False, jobs=1, timeout_s=TIMEOUT_S,
                      work_dir=str(tmp_path / "nodes"), echo=lines.append)
    gpus = state["gpus"]
    assert all(g["status"] == "done" for g in gpus.values()), lines
    assert [len(gpus[k]["attempts"]) for k in sorted(gpus)] == [1, 1, 1, 1, 3, 3]
    assert any("4 already done" in line for line in lines)
    doc = analyse(store, state, 0.05)
    assert [o["key"] for o in doc["outliers"]] == ["a/1"] and not doc["failed"]
    store.close()


@pytest.mark.slow
def test_fleet_command_end_to_end(cluster, tmp_path):
    db, out, html = tmp_path / "f.db", tmp_path / "f.json", tmp_path / "f.html"
    res = CliRunner().invoke(app, ["fleet", "add.f32", "--db", str(db), "--no-isolate", "--jobs", "1",
                                   "--json", str(out), "--report", str(html), "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert f"{GPUS} of {GPUS} GPU(s) done" in res.output
    doc = json.loads(out.read_text())
    assert doc["outliers"] == [] and len(doc["gpus"]) == GPUS and doc["measures"]
    page = html.read_text()
    assert 'id="fleet"' in page and "GPU &times; measure" in page
    store = Store(db)
    assert store.get_meta(OUTLIERS_META)["fleet"] == store.get_meta("fleet")["id"]
    store.close()
    # the same command again: every GPU done, nothing runs again
    res = CliRunner().invoke(app, ["fleet", "add.f32", "--db", str(db), "--no-isolate", "--jobs", "1"])
    assert res.exit_code == 0 and f"{GPUS} already done" in res.output, res.output
    # another item set cannot resume that fleet
    res = CliRunner().invoke(app, ["fleet", "sub.f32", "--db", str(db), "--no-isolate"])
    assert res.exit_code == 2 and "--new" in res.output, res.output


@pytest.mark.parametrize("args, says", [(["no.such.variant"], "no.such"),
                                        (["add.f32", "--threshold", "0"], "must be positive"),
                                        (["add.f32", "--address", "nohost"], "use auto or HOST:PORT"),
                                        (["add.f32", "--address", "127.0.0.1:1"], "no Ray cluster answers")])
def test_fleet_bad_input_is_one_line_before_ray(tmp_path, args, says):
    res = CliRunner().invoke(app, ["fleet", *args, "--db", str(tmp_path / "x.db")])
    assert res.exit_code == 2 and "error:" in res.output and says in res.output, res.output
    assert "Traceback" not in res.output


def test_fleet_unwritable_json_is_one_line_before_ray(tmp_path):
    (tmp_path / "out.json").mkdir()
    res = CliRunner().invoke(app, ["fleet", "add.f32", "--db", str(tmp_path / "x.db"), "--json",
                                   str(tmp_path / "out.json")])
    assert res.exit_code == 2 and "out.json" in res.output and "directory" in res.output, res.output
    assert not (tmp_path / "x.db").exists()


def _synthetic(tmp_path, values: dict[str, float], flags: dict[str, list[str]] | None = None):
    """A store and fleet state: one run per GPU with one latency of the given value."""
    from gpudissect.device.device import DeviceInfo

    store = Store(tmp_path / "s.db")
    gpus = {}
    for i, (key, v) in enumerate(values.items()):
        info = DeviceInfo(name="G", uuid=f"GPU-{key}", index=i, sm_count=1, compute_capability="9.0",
                          driver="x")
        rid = store.start_run("instructions", info, "t", "sm_90", {}, {}, "0")
        store.save(rid, "add.f32", [Result("add.f32", "latency", v, "cycles", "median",
                                           flags=list((flags or {}).get(key, [])))])
        store.finish_run(rid, {"sm_mhz": 1980 - i, "temp_c": 50}, {})
        gpus[key] = {"node": "n", "index": i, "uuid": f"GPU-{key}", "status": "done", "attempts": [{}],
                     "runs": {"instructions": rid}, "evidence": {"during_run": {"temp_c_max": 80 + i}}}
    gpus["n/x"] = {"node": "n", "index": 9, "status": "failed", "reason": "timed out", "attempts": [{}, {}]}
    return store, {"id": "f", "plan": {"suites": {"instructions": None}}, "gpus": gpus}


def test_outliers_known_answer(tmp_path):
    store, state = _synthetic(tmp_path, {"a": 4.0, "b": 4.0, "c": 4.4, "d": 4.0, "e": 3.0},
                              flags={"e": ["noisy: cv 0.2"]})
    doc = analyse(store, state, 0.05)
    (m,) = doc["measures"]
    assert m["median"] == 4.0 and m["n_gpus"] == 4  # e's noisy value left out
    assert m["deviations"]["c"] == pytest.approx(0.1) and m["deviations"]["a"] == 0.0
    assert "e" in m["left_out"] and m["rel_spread"] == pytest.approx(0.1)
    (o,) = doc["outliers"]
    assert o["key"] == "c" and o["measures"][0]["deviation"] == pytest.approx(0.1)
    assert o["evidence"]["temp_c_max"] == 82
    assert o["evidence"]["clocks:instructions"] == {"sm_mhz_after": 1978, "temp_c_after": 50}
    assert [g["key"] for g in doc["failed"]] == ["n/x"]
    assert analyse(store, state, 0.2)["outliers"] == []
    html = fleet_html(doc)
    assert html.count('class="fc out"') == 1 and "GPU-c" in html and "timed out" in html
    store.close()


def test_two_gpus_are_compared_with_each_other(tmp_path):
    """Two GPUs have no median to deviate from (no outliers) but are compared with each other:
    the differences beyond the threshold, the largest first (issue 33)."""
    store, state = _synthetic(tmp_path, {"a": 4.0, "b": 5.0})
    doc = analyse(store, state, 0.05)
    assert MIN_GPUS == 3 and doc["outliers"] == []
    pair = doc["pair"]
    assert (pair["a"], pair["b"], pair["compared"]) == ("a", "b", 1)
    (d,) = pair["differences"]
    assert d["measure"] == "instructions:add.f32 latency" and (d["a"], d["b"]) == (4.0, 5.0)
    assert d["rel_diff"] == pytest.approx(0.25) and len(doc["measures"]) == 1
    lines = conclusions(doc)
    assert not any("fewer than 3 GPUs" in c for c in lines)
    assert any("1 of 1 measures differ by more than 5%" in c for c in lines)
    assert "differs +25.0% on instructions:add.f32 latency: 4 vs 5 cycles" in lines
    assert analyse(store, state, 0.3)["pair"]["differences"] == []
    html = fleet_html(doc)
    assert "Differences" in html and "+25.0%" in html and "GPU &times; measure" not in html
    store.close()
    # one GPU: nothing to compare
    (tmp_path / "one").mkdir()
    store, state = _synthetic(tmp_path / "one", {"a": 4.0})
    doc = analyse(store, state, 0.05)
    assert "pair" not in doc and any("fewer than 3 GPUs" in c for c in conclusions(doc))
    store.close()


@pytest.mark.slow  # seconds of runs on a fake device: the fast tier stays under 5 minutes on 2 cores
def test_merge_copies_runs_under_new_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDISSECT_FAKE_DEVICE", "1")
    r = run_gpu(GpuTask("n/0", "n", 0, "m", ITEMS, options={"catalog": [], "selfcheck": False},
                        isolate=False, jobs=1, work_dir=str(tmp_path / "node")))
    rid = r["suites"]["instructions"]["run_id"]
    src = Store(tmp_path / "node" / "gpudissect-fleet" / "m" / "n-0.db")
    fleet = Store(tmp_path / "fleet.db")
    first = merge_runs(fleet, r["db"], [rid])
    second = merge_runs(fleet, r["db"], [rid])
    assert first == {rid: 1} and second == {rid: 2}
    for new in (1, 2):
        assert len(fleet.results(new)) == len(src.results(rid)) > 0
        assert fleet.done_items(new) == src.done_items(rid)
        assert fleet.run(new)["gpu_uuid"] == "GPU-fake-0" and fleet.run(new)["finished"]
        assert fleet.get_meta(f"summary:{new}") == src.get_meta(f"summary:{rid}")
    h = next(x["ptx_hash"] for x in fleet.results(1) if x["ptx_hash"])
    assert fleet.kernel_text(h) == src.kernel_text(h)
    src.close()
    fleet.close()


def test_profile_items_exist():
    """Every pattern of the quick fleet profile selects items of its suite."""
    from gpudissect.suites.memory.plan import QUICK_PLAN
    from gpudissect.suites.memory.suite import _select, item_names
    from gpudissect.suites.tensor.suite import load_tensor_catalog, select

    prof = load_profile()
    prof.validate()  # the instruction variants exist
    assert set(prof.suites) <= {"instructions", "memory", "tensor", "behaviour"}
    for p in prof.suites["memory"]:
        assert _select(item_names(QUICK_PLAN), [p]), p
    for p in prof.suites["tensor"]:
        assert select(load_tensor_catalog(), [p]), p
    assert 0 < prof.threshold < 1 and prof.timeout_s > 0 and prof.throttle_reasons["hw_slowdown"] == 8


def test_nvml_evidence_summary_known_answer():
    from gpudissect.fleet.nvml import decode_reasons, health, summarize

    names = load_profile().throttle_reasons
    assert decode_reasons(0x4 | 0x40, names) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_reasons(0x10000, names) == ["0x10000"]
    samples = [{"t": 0.0, "sm_mhz": 1980, "temp_c": 60, "power_w": 500.0, "reasons": 0},
               {"t": 1.0, "sm_mhz": 1755, "temp_c": 71, "power_w": 690.0, "reasons": 0x4},
               {"t": 2.0, "sm_mhz": 1700, "temp_c": 74, "power_w": 700.0, "reasons": 0x4 | 0x20}]
    s = summarize(samples, names)
    assert s["sm_mhz"] == {"min": 1700, "median": 1755, "max": 1980} and s["span_s"] == 2.0
    assert s["temp_c_max"] == 74 and s["power_w_max"] == 700.0
    assert s["throttle_reasons"] == {"sw_power_cap": pytest.approx(2 / 3), "sw_thermal_slowdown": pytest.approx(1 / 3)}
    assert summarize([], names) == {"samples": 0}
    h = health(99)  # no such GPU (or no NVML here): every counter named unavailable, nothing made up
    assert h["unavailable"] and not any(k.startswith(("ecc", "retired")) for k in h)
