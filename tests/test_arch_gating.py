"""Every suite on every architecture (issue 34): a suite's items say what they need of the
architecture (``Item.needs``, ``SuiteBase.needs``: features of ``data/features.toml`` or a
minimum ``sm_NN``); the runner plans through ``bench.contract.gated``, which leaves out what the
architecture lacks, records it and says so in one line. Planning and gating run on fake devices
of each architecture, without a GPU; the kernels left in compile for that architecture."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from test_cli_errors import needs_ptxas
from typer.testing import CliRunner

from gpudissect.arch.target import make_target, supported_archs
from gpudissect.bench.contract import Context, Skipped, gated
from gpudissect.cli import app
from gpudissect.device.device import FakeDevice
from gpudissect.suites import SUITES, get_suite

ARCHS = supported_archs()


def _context(arch: str) -> Context:
    target = make_target(arch, "13.0")
    return Context(FakeDevice(sm_count=4, compute_capability=target.facts["target"].get(
        "compute_capability", f"{target.sm // 10}.{target.sm % 10}")), None, target, quick=True, jobs=2)


def _gated(name: str, arch: str):
    """(kept items, skipped {item: lacks}) of suite ``name`` on ``arch``; None when the whole suite is skipped."""
    try:
        plan = gated(get_suite(name), _context(arch), None)
    except Skipped:
        return None
    return plan.items, plan.params.get("skipped", {})


def test_the_h200s_architecture_runs_every_item_its_catalogs_allow():
    """Gating changes nothing on sm_90 but what the catalogs give a later architecture."""
    ctx = _context("sm_90")
    for name in SUITES:
        suite = get_suite(name)
        every = [i.name for i in suite.plan(_context("sm_90"), None).items]
        plan = gated(suite, ctx, None)
        skipped = plan.params.get("skipped", {})
        assert [i.name for i in plan.items] == [n for n in every if n not in skipped], name
        for item, lacks in skipped.items():  # only what a later architecture has
            assert lacks and all(n.startswith("sm_") and int(n[3:]) > 90 for n in lacks), (name, item, lacks)


@pytest.mark.parametrize("arch", ARCHS)
def test_each_architecture_runs_only_what_it_has(arch: str):
    target = make_target(arch, "13.0")
    for name in SUITES:
        got = _gated(name, arch)
        if got is None:
            assert target.lacks(get_suite(name).needs), f"{name} skipped on {arch} with all it needs"
            continue
        kept, skipped = got
        assert kept, f"{name}: nothing kept on {arch}"
        for item in kept:
            assert not target.lacks(item.needs), (name, item.name)
        for item, lacks in skipped.items():
            assert lacks == target.lacks(lacks), (name, item)
    # what the data says the architecture lacks is never planned
    tensor = _gated("tensor", arch)
    kept_names = [i.name for i in tensor[0]]
    if "wgmma" not in target.features:
        assert not any(n.startswith("wgmma") for n in kept_names)
    else:
        assert any(n.startswith("wgmma") for n in kept_names)
    assert ("cluster" in SUITES) and ((_gated("cluster", arch) is None) == ("clusters" not in target.features))


@pytest.mark.slow
@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_120"])
@pytest.mark.parametrize("suite", ["async", "memory", "cluster", "sync"])
def test_what_is_left_compiles_for_the_architecture(arch: str, suite: str):
    """The gating is right where ptxas agrees: every kernel of what is kept compiles for ``arch``."""
    s, ctx = get_suite(suite), _context(arch)
    try:
        plan = gated(s, ctx, None)
    except Skipped:
        pytest.skip(f"{suite} does not run on {arch}")
    s.prepare(ctx, plan.items)


def _run(tmp_path: Path, monkeypatch, arch: str, *patterns: str):
    monkeypatch.setenv("GPUDISSECT_FAKE_DEVICE", "1")
    monkeypatch.setenv("GPUDISSECT_FAKE_ARCH", arch)
    db = tmp_path / f"{arch}.db"
    res = CliRunner().invoke(app, ["run", *patterns, "--quick", "--no-selfcheck", "--no-isolate", "--db", str(db),
                                   "--report", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "t.md")])
    return res, db


@pytest.mark.slow
@needs_ptxas
def test_a_run_on_an_older_gpu_says_what_it_skips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    res, db = _run(tmp_path, monkeypatch, "sm_80", "instructions:add.u32", "tensor:ldmatrix.m8n8.x1.b16",
                   "tensor:wgmma.f32.f16", "cluster:map:size=1")
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "1 of 2 items not run on sm_80 (needs sm_90: 1, wgmma: 1)" in out
    assert "cluster: not run on sm_80, which lacks clusters" in out
    with closing(sqlite3.connect(db)) as con:
        suites = [r[0] for r in con.execute("SELECT suite FROM runs ORDER BY id")]
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert suites == ["instructions", "tensor"]  # the cluster suite never started a run
    assert json.loads(meta["skipped:cluster"])["arch"] == "sm_80"


@pytest.mark.slow
@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
def test_a_quick_run_on_a_fake_gpu_of_each_architecture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str):
    """The target comes from the device: a fake GPU of compute capability X.Y runs as sm_XY."""
    res, db = _run(tmp_path, monkeypatch, arch, "instructions:add.u32", "tensor:ldmatrix.m8n8.x1.b16")
    assert res.exit_code == 0, res.output
    with closing(sqlite3.connect(db)) as con:
        archs = {r[0] for r in con.execute("SELECT arch FROM runs")}
    assert archs == {arch}


def test_catalog_lists_what_applies_to_an_architecture():
    res = CliRunner().invoke(app, ["catalog", "fence.*", "--arch", "sm_75"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "fence.sc.cta" in res.output and "fence.sc.cluster" not in res.output  # cluster scope: sm_90 on
    assert "not applicable there" in res.output.splitlines()[-1]
    every = CliRunner().invoke(app, ["catalog", "fence.*"], env={"COLUMNS": "250"})
    assert "fence.sc.cluster" in every.output
