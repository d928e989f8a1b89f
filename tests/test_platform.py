"""The GPU's platform in a run's provenance (issue 33): read through NVML with every call guarded
(a monkeypatched pynvml: a full one, a partial one that raises, none), a fixed fake platform for
the fake GPUs, stored with the run and exported, named by `compare` where two sets differ, and
shown in the HTML report's provenance. No GPU."""

from __future__ import annotations

import json
import sqlite3
import sys
import types

import pytest
from report_synth import instructions_doc, write_data_dir
from typer.testing import CliRunner

from gpudissect.cli import app
from gpudissect.device import device as devmod
from gpudissect.device.fakes import ScriptedDevice
from gpudissect.store.db import Store
from gpudissect.store.export import suite_document


class NVMLError(Exception):
    pass


def _nvml(**over) -> types.ModuleType:
    """A stand-in for nvidia-ml-py's pynvml: an H100-like platform; ``over`` replaces functions
    (None: the binding lacks it)."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = NVMLError
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_NVLINK_MAX_LINKS = 1, 2, 18

    def nvlink(h, link):
        if link >= 18:
            raise NVMLError("Invalid Argument")
        return 1 if link < 12 else 0

    fns = {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetHandleByIndex": lambda i: f"handle{i}",
        "nvmlDeviceGetEccMode": lambda h: [1, 1],
        "nvmlDeviceGetPowerManagementLimit": lambda h: 600000,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700000,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 600000,
        "nvmlDeviceGetPersistenceMode": lambda h: 1,
        "nvmlDeviceGetMigMode": lambda h: [0, 0],
        "nvmlSystemGetConfComputeState": lambda: types.SimpleNamespace(ccFeature=0, devToolsMode=0),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxClockInfo": lambda h, which: {1: 1980, 2: 2619}[which],
        "nvmlDeviceGetNvLinkState": nvlink,
    }
    fns.update(over)
    for name, fn in fns.items():
        if fn is not None:
            setattr(nv, name, fn)
    return nv


def _raise(*a):
    raise NVMLError("Not Supported")


def test_nvml_platform_reads_every_field(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _nvml())
    p = devmod.nvml_platform(0)
    assert p == {"host": p["host"], "ecc": "on", "power_limit_w": 600.0, "power_limit_default_w": 700.0,
                 "power_limit_enforced_w": 600.0, "persistence": "on", "mig": "off", "cc": "off", "pcie_gen": 5,
                 "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16, "sm_max_mhz": 1980,
                 "mem_max_mhz": 2619, "nvlink_active_links": 12}
    assert p["host"]


def test_nvml_platform_leaves_out_what_nvml_cannot_give(monkeypatch):
    # an older binding (no confidential computing, no MIG), a GPU without ECC or NVLink
    monkeypatch.setitem(sys.modules, "pynvml", _nvml(
        nvmlSystemGetConfComputeState=None, nvmlDeviceGetMigMode=None, nvmlDeviceGetEccMode=_raise,
        nvmlDeviceGetNvLinkState=_raise, nvmlDeviceGetPowerManagementDefaultLimit=_raise))
    p = devmod.nvml_platform(0)
    assert not {"cc", "mig", "ecc", "nvlink_active_links", "power_limit_default_w"} & set(p)
    assert p["power_limit_w"] == 600.0 and p["pcie_gen"] == 5
    # NVML that does not start, and no binding at all: the host alone, never an exception
    monkeypatch.setitem(sys.modules, "pynvml", _nvml(nvmlInit=_raise))
    assert set(devmod.nvml_platform(0)) == {"host"}
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert set(devmod.nvml_platform(0)) == {"host"}


def test_a_run_records_the_fake_platform(tmp_path, sweep):
    dev = ScriptedDevice()
    assert dev.info.platform["fake"] and dev.info.platform["power_limit_w"] == 700.0
    store = Store(tmp_path / "r.db")
    sweep(dev, store, ["add.f32"])
    (run,) = store.runs()
    rec = store.run(run["id"])
    assert rec["platform"] == dev.info.platform
    assert suite_document(store, run["id"])["provenance"]["platform"] == dev.info.platform
    store.close()


def test_a_store_made_before_platforms_gains_the_column(tmp_path):
    db = tmp_path / "old.db"
    Store(db).close()
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE runs DROP COLUMN platform")
    con.close()
    store = Store(db)
    dev = ScriptedDevice()
    rid = store.start_run("instructions", dev.info, "t", "sm_90", {}, {}, "0")
    assert store.run(rid)["platform"] == dev.info.platform
    store.close()


def _set(tmp_path, name: str, **platform):
    d = write_data_dir(tmp_path / name, suites=("instructions",))
    doc = instructions_doc()
    doc["provenance"]["platform"] = {"host": "node1", "ecc": "on", "power_limit_w": 700.0, "mig": "off",
                                     "pcie_gen": 5, **platform}
    (d / "instructions.json").write_text(json.dumps(doc))
    return d


def test_compare_names_what_differs_in_the_platforms(tmp_path):
    a = _set(tmp_path, "a")
    b = _set(tmp_path, "b", power_limit_w=600.0, ecc="off")
    c = _set(tmp_path, "c")
    md, js = tmp_path / "c.md", tmp_path / "c.json"
    res = CliRunner().invoke(app, ["compare", str(a), str(b), str(c), "--full", "--markdown", str(md),
                                   "--json", str(js)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    line = "platform differs, A vs B: ECC on vs off; power limit 700 W vs 600 W"
    assert line in res.output and "A vs C" not in res.output
    assert f"* {line}" in md.read_text()
    assert json.loads(js.read_text())["platform_differs"] == [line]
    # the same platforms, or a set that records none (a reference): no line
    res = CliRunner().invoke(app, ["compare", str(a), str(c), "a100"], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "platform differs" not in res.output, res.output


def test_the_report_shows_the_platform(tmp_path, monkeypatch):
    from gpudissect.report.assemble import html as report_html
    from gpudissect.report.read.results import load_result_set

    monkeypatch.setattr(report_html, "figures_by_suite", lambda docs, *a, **k: {s: [] for s in docs})
    d = _set(tmp_path, "a", nvlink_active_links=18)
    page = report_html.render_html(load_result_set(d), d)
    assert "<th>platform</th><td>host node1; ECC on; power limit 700 W; MIG off; PCIe generation Gen 5; " \
           "NVLink links active 18</td>" in page


@pytest.mark.parametrize("p, text", [(None, "-"), ({"fake": True, "ecc": "on"}, "fake GPU: ECC on")])
def test_platform_text(p, text):
    from gpudissect.report.present.platform_fields import platform_text

    assert platform_text(p) == text
