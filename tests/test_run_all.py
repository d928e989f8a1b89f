"""One command from install to report (issue 17): ``gpudissect run`` without ``--suite`` runs
every suite into one database and writes the report and the timing reference; without a GPU it
maps the catalog and writes the report from the shipped H100 data; output paths are checked
before any work."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from test_cli_errors import H100, files, needs_ptxas, one_error
from typer.testing import CliRunner

from gpudissect.cli import app
from gpudissect.cli.run_command import suite_plan as _suite_plan
from gpudissect.device import device, multi
from gpudissect.device.device import NoGPU
from gpudissect.report.read import shipped
from gpudissect.suites import SUITES

runner = CliRunner()
SMALL = ["instructions:add.u32", "memory:latency/ld.shared", "tensor:ldmatrix.m8n8.x1.b16",
         "behaviour:occupancy"]  # the suites the generic fake GPU can feed (zeroed launch buffers), a few
# items each; the Hopper suites (cluster, async, sync) run end to end on fakes of their own
SMALL_SUITES = [p.split(":")[0] for p in SMALL]
FAKE = ["--quick", "--no-selfcheck", "--no-isolate"]
TINY = """
[[group]]
name = "add.{t}"
sig = "d:{t} a:{t} b:{t}"
types = ["u32", "f32"]
class = "int"
"""
needs_h100 = pytest.mark.skipif(not (H100 / "instructions.json.xz").exists(), reason="no committed H100 data")


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory and the default database in it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUDISSECT_DB", raising=False)
    return tmp_path


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without a GPU, whatever this one has."""
    def none() -> int:
        raise NoGPU("cannot count the GPUs (no NVML, no CUDA driver)")

    def no_device(index: int):
        raise NoGPU(f"no usable GPU {index}: CUDA_ERROR_NO_DEVICE")

    monkeypatch.delenv("GPUDISSECT_FAKE_DEVICE", raising=False)
    monkeypatch.setattr(multi, "gpu_count", none)
    monkeypatch.setattr(device, "CudaDevice", no_device)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDISSECT_FAKE_DEVICE", "1")


def runs(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as con:
        return [r[0] for r in con.execute("SELECT suite FROM runs ORDER BY id")]


def summary_lines(output: str) -> dict[str, str]:
    """The summary at the end: its line per suite, by suite."""
    lines = output.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split() == ["suite", "items", "flagged", "wall", "s"])
    return {ln.split()[0]: ln for ln in lines[head + 1:head + 1 + len(SUITES)] if ln.split()[0] in SUITES}


def test_patterns_pick_suites():
    assert _suite_plan(None, []) == (dict.fromkeys(SUITES), False)
    assert _suite_plan("memory", ["latency/*"]) == ({"memory": ["latency/*"]}, True)
    assert _suite_plan(None, ["add.u32"]) == ({"instructions": ["add.u32"]}, True)  # as before
    assert _suite_plan(None, ["behaviour:occupancy:smem=*", "add.u32", "memory:bank/*"]) == (
        {"instructions": ["add.u32"], "memory": ["bank/*"], "behaviour": ["occupancy:smem=*"]}, False)


@pytest.mark.slow
@needs_h100
@needs_ptxas
def test_without_a_gpu_maps_and_reports_the_shipped_data(here, no_gpu):
    (here / "tiny.toml").write_text(TINY)
    out = here / "out" / "r.html"
    res = invoke("run", "--catalog", "tiny.toml", "--report", str(out))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == (f"no NVIDIA GPU here: mapping the catalog for sm_90 and writing the report from the "
                        f"shipped H100 data ({shipped.shipped_results()})"), res.output
    assert "2 variants on sm_90: verified 2" in res.output
    assert (f"report of NVIDIA H100 80GB HBM3 (instructions, memory, tensor, behaviour, async, cluster, sync) "
            f"-> {out}") in res.output
    assert "error" not in res.output.lower()
    assert "NVIDIA H100" in out.read_text()
    assert files(here) == {"tiny.toml", "out", "out/r.html"}  # no results.db, no timing reference


def test_without_a_gpu_nor_shipped_data_is_one_line(here, no_gpu, monkeypatch):
    monkeypatch.setattr(shipped, "shipped_results", lambda: None)
    one_error(invoke("run"), "no NVIDIA GPU here, and no shipped data/h100")
    assert files(here) == set()


def test_one_suite_without_a_gpu_is_the_error_of_before(here, no_gpu):
    one_error(invoke("run", "--suite", "memory", "--no-isolate"), "no usable GPU 0",
              "Timing needs an NVIDIA GPU")
    assert files(here) == set()


@needs_ptxas
def test_every_suite_into_one_database_then_the_report(here, fake_gpu):
    res = invoke("run", *SMALL, *FAKE)
    assert res.exit_code == 0, res.output
    assert runs(here / "results.db") == SMALL_SUITES  # one database, registry order
    by = summary_lines(res.output)
    assert list(by) == SMALL_SUITES
    for line in by.values():
        items, flagged, wall = line.split()[1:4]
        assert int(items) > 0 and int(flagged) >= 0 and float(wall) >= 0, line
        assert "failed" not in line
    # a --quick run (FAKE) says so in each line and on top of the timing reference
    assert "timing reference of FakeGPU (instructions, memory, tensor, behaviour) (quick profile) -> " \
           "timing-reference.md" in res.output
    assert "report of FakeGPU (instructions, memory, tensor, behaviour) (quick profile) -> report.html" in res.output
    assert "quick profile (--quick)" in res.output
    assert "QUICK PROFILE (instructions, memory, tensor, behaviour)" in (here / "timing-reference.md").read_text()
    assert "Tensor" in (here / "report.html").read_text()
    assert files(here) == {"results.db", "report.html", "timing-reference.md"}


@needs_ptxas
def test_a_failing_suite_does_not_stop_the_others(here, fake_gpu):
    db = here / "r.db"
    res = invoke("run", "instructions:add.u32", "memory:no-such-item", "behaviour:occupancy", *FAKE,
                 "--db", str(db), "--report", "r.html", "--markdown", "t.md")
    one_error(res, "1 of 3 suites failed (memory:", code=1)
    assert runs(db) == ["instructions", "memory", "behaviour"]
    by = summary_lines(res.output)
    assert "failed: run 2 (memory) measured nothing" in by["memory"]
    assert "failed" not in by["instructions"] + by["behaviour"]
    assert {"r.html", "t.md"} <= files(here)


@pytest.mark.parametrize("args", [[], ["--suite", "memory"], ["--markdown", "MD"]])
def test_an_unwritable_output_fails_before_any_work(here, fake_gpu, args):
    (here / "adir").mkdir()
    bad = Path("/proc/gpudissect-test.html") if Path("/proc/self").is_dir() else here / "adir"
    args = [str(bad) if a == "MD" else a for a in args]
    report = "report.html" if "--markdown" in args else str(bad)
    one_error(invoke("run", *args, "--report", report, "--no-isolate"), str(bad))
    assert files(here) == {"adir"}  # no database: nothing ran


def test_an_unwritable_output_without_a_gpu(here, no_gpu):
    (here / "adir").mkdir()
    one_error(invoke("run", "--report", "adir"), "adir: is a directory")
    assert files(here) == {"adir"}


def test_gpus_go_with_one_suite(here, fake_gpu):
    one_error(invoke("run", "--gpus", "all"), "--gpus runs one suite at a time: give --suite NAME")
    assert files(here) == set()
