"""Fleet mode on two GPUs (issue 33) without a GPU: a local Ray instance offering two fake GPUs
(GPUDISSECT_FAKE_DEVICE=2), the second 8% slower (GPUDISSECT_FAKE_SPREAD): no fleet median, but
the two compared with each other, their differences listed."""

from __future__ import annotations

import json
import os

import pytest

ray = pytest.importorskip("ray")

from typer.testing import CliRunner  # noqa: E402

from gpudissect.cli import app  # noqa: E402
from gpudissect.fleet.page import OUTLIERS_META  # noqa: E402
from gpudissect.fleet.task import GpuTask, run_gpu  # noqa: E402
from gpudissect.store.db import Store  # noqa: E402

ITEMS = {"instructions": ["add.f32"]}
ENV = {"GPUDISSECT_FAKE_DEVICE": "2", "GPUDISSECT_FAKE_SPREAD": "0.08"}  # GPU 1: 1.08 times slower


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory):
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)  # the workers inherit the environment of the instance
    run_gpu(GpuTask("warm/0", "warm", 0, "warm", ITEMS, options={"catalog": [], "selfcheck": False},
                    isolate=False, jobs=1, work_dir=str(tmp_path_factory.mktemp("warm"))))
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.mark.slow
def test_fleet_of_two_gpus_reports_their_differences(two_gpus, tmp_path):
    db, out, html = tmp_path / "f.db", tmp_path / "f.json", tmp_path / "f.html"
    res = CliRunner().invoke(app, ["fleet", "add.f32", "--db", str(db), "--no-isolate", "--jobs", "1",
                                   "--json", str(out), "--report", str(html), "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert "2 of 2 GPU(s) done" in res.output and "fewer than 3 GPUs" not in res.output
    doc = json.loads(out.read_text())
    assert doc["outliers"] == []  # no median to deviate from
    pair = doc["pair"]
    a, b = pair["a"], pair["b"]
    assert pair["compared"] > 0 and pair["differences"]
    rels = [d["rel_diff"] for d in pair["differences"]]
    assert rels == sorted(rels, key=lambda r: -abs(r)) and all(abs(r) > 0.05 for r in rels)
    lat = [d for d in pair["differences"] if d["measure"] == "instructions:add.f32 latency [chains=1]"]
    assert lat and 0.05 < lat[0]["rel_diff"] < 0.15  # 8% slower, cycles rounded
    flat = " ".join(res.output.split())
    assert f"compared with each other instead, {b} against {a}" in flat and "differs +" in flat
    page = html.read_text()
    assert 'id="fleet"' in page and "Differences" in page
    store = Store(db)
    assert store.get_meta(OUTLIERS_META)["pair"] == pair
    store.close()
