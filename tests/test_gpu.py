"""Tests that need a GPU (marked; skipped without one)."""

from __future__ import annotations

import pytest

from gpudissect.catalog import load_catalog
from gpudissect.run.instructions import QUICK_PLAN, run_suite
from gpudissect.store.db import Store

pytestmark = pytest.mark.gpu


def test_suite_on_the_gpu(tmp_path):
    from gpudissect.run.device import CudaDevice

    dev = CudaDevice(0)
    store = Store(tmp_path / "r.db")
    variants = load_catalog().select(["add.f32", "mul.rn.f64"])
    run_id, _ = run_suite(dev, store, variants, plan=QUICK_PLAN, jobs=2)
    lat = {r["variant"]: r for r in store.results(run_id, measure="latency")}
    for v in ("add.f32", "mul.rn.f64"):
        assert lat[v]["value"] is not None and lat[v]["value"] > 0
        assert lat[v]["fit"]["r2"] > 0.9
    run = store.runs()[0]
    assert run["gpu_uuid"] == dev.info.uuid and run["finished"] is not None
