"""Several GPUs without a GPU: fake GPUs, one process each, one store; the per-GPU comparison."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudissect.bench.gpu_spread import compare_gpus, conclusions
from gpudissect.device.fakes import ScriptedDevice
from gpudissect.device.multi import gpu_indices
from gpudissect.store.db import Store

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_gpu_indices():
    assert gpu_indices("all", lambda: 3) == [0, 1, 2]
    assert gpu_indices("1,0,1", lambda: 2) == [0, 1]
    for bad, msg in (("x", "use 'all'"), (",", "use 'all'"), ("2", "no GPU 2"), ("-1", "no GPU -1")):
        with pytest.raises(ValueError, match=msg):
            gpu_indices(bad, lambda: 2)
    with pytest.raises(ValueError, match="no GPU found"):
        gpu_indices("all", lambda: 0)


@pytest.mark.slow
def test_comparison_median_min_max_spread(tmp_path, sweep):
    store = Store(tmp_path / "r.db")
    vs = ["add.f32", "mul.lo.u32"]
    # GPU 1 is 2% slower; GPU 2 faults on mul.lo.u32's latency kernel (its value is left out)
    for i, (scale, faults) in enumerate([(1.0, {}), (1.02, {}), (1.0, {"v1_l": "error"})]):
        sweep(ScriptedDevice(index=i, scale=scale, faults=faults), store, vs)
    doc = compare_gpus(store)
    assert doc["schema"] == "gpudissect.compare-gpus/1"
    assert [g["gpu_uuid"] for g in doc["gpus"]] == ["GPU-fake-0", "GPU-fake-1", "GPU-fake-2"]
    rec = {(r["variant"], r["measure"]): r for r in doc["records"] if r["measure"] == "latency"}
    add = rec[("add.f32", "latency")]
    assert add["n_gpus"] == 3
    assert add["min"] == pytest.approx(4.0) and add["max"] == pytest.approx(4.08, rel=1e-3)
    assert add["median"] == pytest.approx(4.0)
    assert add["rel_spread"] == pytest.approx(0.02, rel=0.05)
    mul = rec[("mul.lo.u32", "latency")]
    assert mul["n_gpus"] == 2 and "GPU-fake-2" in mul["left_out"]
    assert mul["left_out"]["GPU-fake-2"].startswith("error")
    s = doc["summary"]
    assert s["gpus"] == 3 and s["identical_models"] and s["compared"] > 0
    assert 0.019 < s["max_rel_spread"] < 0.05  # 2%, plus the fake's rounding to whole cycles
    assert "3 GPUs (one model)" in conclusions(doc)[0]
    # only finished runs count, the latest per GPU
    sweep(ScriptedDevice(index=0, scale=1.5), store, vs)
    doc2 = compare_gpus(store)
    assert [g["run_id"] for g in doc2["gpus"]] == [2, 3, 4]


def test_one_gpu_is_nothing_to_compare(tmp_path, sweep):
    store = Store(tmp_path / "r.db")
    sweep(ScriptedDevice(), store, ["add.f32"])
    doc = compare_gpus(store)
    assert doc["summary"]["compared"] == 0
    assert "nothing to compare" in conclusions(doc)[0]


@pytest.mark.slow
def test_run_gpus_all_runs_one_process_per_gpu_and_compares(tmp_path):
    db = tmp_path / "r.db"
    env = dict(os.environ, GPUDISSECT_FAKE_DEVICE="2", GPUDISSECT_FAKE_SPREAD="0.03",
               PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def cli(*args: str) -> str:
        p = subprocess.run([sys.executable, "-m", "gpudissect", *args], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    out = cli("run", "add.f32", "sub.f32", "--gpus", "all", "--db", str(db), "--quick", "--no-selfcheck",
              "--jobs", "1", "--no-isolate")
    assert "[gpu 0]" in out and "[gpu 1]" in out
    assert "2 GPUs (one model)" in out
    store = Store(db)
    runs = store.runs()
    assert sorted(r["gpu_uuid"] for r in runs) == ["GPU-fake-0", "GPU-fake-1"]
    assert all(r["finished"] is not None for r in runs)
    out = cli("compare-gpus", "--db", str(db), "--json", str(tmp_path / "c.json"))
    doc = json.loads((tmp_path / "c.json").read_text())
    lat = next(r for r in doc["records"] if r["variant"] == "add.f32" and r["measure"] == "latency")
    assert lat["max"] > lat["min"] and 0.01 < lat["rel_spread"] < 0.05  # GPU 1: 3% slower, rounded
    assert "largest spreads" in out
