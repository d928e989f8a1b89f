"""Every bad input a one-line error (issue 17): unwritable outputs, bad architectures, damaged
databases and data files, an unusable compile cache, ptxas's whole message, compare without
differences, runs that measured nothing, Ctrl-C in map, --version. Each case: one line
``error: ...`` naming what is wrong, a non-zero exit, checked before the long work, and no file
left that was not asked for (nor a half-written one)."""

from __future__ import annotations

import gzip
import json
import lzma
import os
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from report_synth import SCHEMA, rec, write_data_dir
from typer.testing import CliRunner

from gpudissect.arch.target import supported_archs
from gpudissect.cli import app
from gpudissect.kernel import toolchain
from gpudissect.outputs import OutputError, atomic_outputs, check_outputs
from gpudissect.store.pack import unpack

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "data" / "h100"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def one_error(res, *needles: str, code: int = 2) -> str:
    """The command failed with ``code`` and exactly one ``error:`` line holding ``needles``."""
    assert res.exit_code == code, res.output
    assert isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.output
    for n in needles:
        assert n in errors[0], (n, res.output)
    return errors[0]


@pytest.fixture
def synth(tmp_path: Path) -> Path:
    return write_data_dir(tmp_path / "synth")


def have_ptxas() -> bool:
    try:
        toolchain.find_tool("ptxas")
        toolchain.find_tool("nvdisasm")
        return True
    except toolchain.ToolchainMissing:
        return False


needs_ptxas = pytest.mark.skipif(not have_ptxas(), reason="needs NVIDIA's ptxas and nvdisasm")


# --- 1. output paths: checked up front, written atomically ---------------------------------------
def bad_outputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Bad output paths (what the error names): a directory, a path under a file, a folder that
    cannot be written even by root (/proc)."""
    (tmp / "adir").mkdir()
    (tmp / "afile").write_text("x")
    out = {"directory": (tmp / "adir", "is a directory"),
           "under a file": (tmp / "afile" / "x.out", "is not a directory")}
    if Path("/proc/self").is_dir():
        out["unwritable folder"] = (Path("/proc/gpudissect-test.out"), "cannot write in /proc")
    return out


COMMANDS = {  # each writes one output OUT; SYN is the synthetic data directory
    "report": ["report", "--data", "SYN", "--out", "OUT"],
    "report --markdown": ["report", "--data", "SYN", "--markdown", "--out", "OUT"],
    "report --accel-sim": ["report", "--data", "SYN", "--accel-sim", "--out", "OUT"],
    "simexport": ["simexport", "--data", "SYN", "--out", "OUT"],
    "simexport --json": ["simexport", "--data", "SYN", "--json", "OUT"],
    "export json": ["export", "OUT", "--format", "json", "--data", "SYN"],
    "export csv": ["export", "OUT", "--format", "csv", "--data", "SYN"],
    "export parquet": ["export", "OUT", "--format", "parquet", "--data", "SYN"],
    "export suite": ["export", "OUT", "--format", "suite", "--suite", "tensor", "--db", "DB"],
    "export layouts": ["export", "OUT", "--format", "layouts", "--suite", "tensor", "--db", "DB"],
    "export markdown": ["export", "OUT", "--format", "markdown", "--db", "DB"],
    "map --json": ["map", "add.u32", "--json", "OUT"],
    "map --csv": ["map", "add.u32", "--csv", "OUT"],
    "compare --markdown": ["compare", "SYN", "SYN", "--markdown", "OUT"],
    "compare --html": ["compare", "SYN", "SYN", "--html", "OUT"],
    "compare-gpus --json": ["compare-gpus", "--db", "DB", "--json", "OUT"],
}


@pytest.mark.parametrize("cmd", COMMANDS)
def test_unwritable_output_is_one_line_before_any_work(tmp_path, synth, cmd):
    db = tmp_path / "r.db"  # never opened: the output is checked first
    for what, (out, needle) in bad_outputs(tmp_path).items():
        before = files(tmp_path)
        args = [str(synth) if a == "SYN" else str(out) if a == "OUT" else str(db) if a == "DB" else a
                for a in COMMANDS[cmd]]
        one_error(invoke(*args), str(out), needle)
        assert files(tmp_path) == before, what  # nothing made, nothing left


def test_a_pair_is_checked_whole(tmp_path, synth):
    """--accel-sim and simexport write a config and its JSON: a bad JSON path stops both."""
    (tmp_path / "a.json").mkdir()
    one_error(invoke("report", "--data", str(synth), "--accel-sim", "--out", str(tmp_path / "a.config")),
              "a.json", "is a directory")
    one_error(invoke("simexport", "--data", str(synth), "--out", str(tmp_path / "b.json")), "same file")
    assert not (tmp_path / "a.config").exists() and not (tmp_path / "b.json").exists()


def test_outputs_replace_whole_and_leave_no_temporary(tmp_path, synth):
    out = tmp_path / "new" / "t.md"
    res = invoke("report", "--data", str(synth), "--markdown", "--out", str(out))
    assert res.exit_code == 0, res.output
    first = out.read_text()
    res = invoke("report", "--data", str(synth), "--markdown", "--out", str(out))
    assert res.exit_code == 0 and out.read_text() == first
    assert files(tmp_path / "new") == {"t.md"}


def test_atomic_outputs_on_failure(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "made" / "deep" / "b.txt.gz"
    a.write_text("old")
    with pytest.raises(RuntimeError), atomic_outputs(a, b) as (ta, tb):
        assert ta.parent == a.parent and tb.name.endswith("b.txt.gz")  # suffixes kept
        ta.write_text("new, half")
        tb.write_text("half")
        raise RuntimeError("writer failed")
    assert a.read_text() == "old"  # untouched: no half-written pair
    assert files(tmp_path) == {"a.txt"}  # temporaries and the folders made for them gone
    with atomic_outputs(a, b) as (ta, tb):
        ta.write_text("new")
        tb.write_text("b")
    assert a.read_text() == "new" and b.read_text() == "b"
    assert files(tmp_path) == {"a.txt", "made", "made/deep", "made/deep/b.txt.gz"}


def test_check_outputs(tmp_path):
    check_outputs(None, tmp_path / "x" / "y" / "z.json")  # missing folders are made on writing
    assert files(tmp_path) == set()  # the check itself leaves nothing
    for bad in (tmp_path, ):
        with pytest.raises(OutputError, match="is a directory"):
            check_outputs(bad)
    with pytest.raises(OutputError, match="same file"):
        check_outputs(tmp_path / "a", tmp_path / "." / "a")


# --- 2. architectures ----------------------------------------------------------------------------
@pytest.mark.parametrize("arch,needle", [("foo", "'foo' is not of the form sm_XX"),
                                         ("", "'' is not of the form sm_XX"),
                                         ("sm_999", f"sm_999 is not supported (data for: {', '.join(supported_archs())})")])
def test_map_bad_architecture(arch, needle):
    one_error(invoke("map", "--arch", arch, "add.u32", "-q"), needle)


def test_run_bad_architecture_before_the_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDISSECT_FAKE_DEVICE", "1")
    db = tmp_path / "r.db"
    one_error(invoke("run", "add.u32", "--arch", "sm_999", "--db", str(db), "--no-isolate"),
              "sm_999 is not supported")
    assert not db.exists()


# --- 3. damaged gzipped databases ----------------------------------------------------------------
def test_garbage_and_truncated_db_gz(tmp_path):
    garbage = tmp_path / "garbage.db.gz"
    garbage.write_bytes(b"this is no gzip file" * 10)
    truncated = tmp_path / "cut.db.gz"
    truncated.write_bytes(gzip.compress(os.urandom(200_000))[:5000])
    not_sqlite = tmp_path / "text.db.gz"
    not_sqlite.write_bytes(gzip.compress(b"hello " * 1000))
    for cmd in (["report", "--markdown", "--out", str(tmp_path / "t.md")], ["show"],
                ["export", str(tmp_path / "e.json")], ["compare-gpus"]):
        one_error(invoke(*cmd, "--db", str(garbage)), str(garbage), "not a readable gzip file")
        one_error(invoke(*cmd, "--db", str(truncated)), str(truncated), "truncated gzip file")
        one_error(invoke(*cmd, "--db", str(not_sqlite)), str(not_sqlite), "not a gpudissect results database")
    assert files(tmp_path) == {"garbage.db.gz", "cut.db.gz", "text.db.gz"}


# --- 4. the compile cache -------------------------------------------------------------------------
@needs_ptxas
def test_unusable_cache_is_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for cache in (blocker, blocker / "cache"):
        monkeypatch.setenv("GPUDISSECT_CACHE", str(cache))
        one_error(invoke("time", "--ptx", "add.u32 {d}, {a}, {b};", "--no-gpu"),
                  f"GPUDISSECT_CACHE={cache}", "not usable as the compile cache")
        one_error(invoke("map", "add.u32", "-q"), f"GPUDISSECT_CACHE={cache}")


@needs_ptxas
def test_empty_cache_variable_is_the_default_location(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDISSECT_CACHE", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(toolchain, "_cache_ok", {})
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    res = invoke("map", "add.u32", "-q")
    assert res.exit_code == 0, res.output
    assert files(work) == set()  # nothing in the current directory
    assert any((tmp_path / "home" / ".cache" / "gpudissect").rglob("*.cubin"))


# --- 5. reading commands create nothing ------------------------------------------------------------
def test_reading_commands_without_a_database_create_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUDISSECT_DB", raising=False)
    for cmd in (["show"], ["compare-gpus"], ["export", "out.json"], ["export", "out.csv", "--format", "csv"],
                ["report", "--markdown"], ["simexport"]):
        res = invoke(*cmd)
        assert res.exit_code == 2 and "results.db" in res.output, (cmd, res.output)
    missing = tmp_path / "missing.db"
    one_error(invoke("show", "--db", str(missing)), "missing.db: no such results database")
    one_error(invoke("compare", str(missing), "a100"), "missing.db")
    assert files(tmp_path) == set()


@pytest.mark.slow
def test_show_reads_packed_and_gzipped_databases(tmp_path):
    packed = H100 / "instructions.db.xz"
    assert packed.exists()  # the shipped store
    gz = tmp_path / "instructions.db.gz"
    unpack(packed, tmp_path / "i.db")
    gz.write_bytes(gzip.compress((tmp_path / "i.db").read_bytes()))
    before = files(H100)
    for db in (packed, gz):
        res = invoke("show", "add.f32", "--db", str(db))
        assert res.exit_code == 0, res.output
        assert "FADD" in res.output
    assert files(H100) == before


# --- 6. ptxas's own message -------------------------------------------------------------------------
@needs_ptxas
def test_ptxas_message_is_shown_whole():
    line = one_error(invoke("time", "--ptx", "bogus.op {d}, {a}, {b};", "--no-gpu"))
    flat = " ".join(line.split())
    assert "Not a name of any known instruction: 'bogus'" in flat
    assert "Unknown modifier '.op'" in flat and "bogus.op %r" in flat  # the line ptxas names
    assert "/tmp" not in flat and "k.ptx, line" in flat


# --- 7. compare ---------------------------------------------------------------------------------------
def test_compare_without_differences_is_not_an_error(synth, tmp_path):
    md = tmp_path / "c.md"
    res = invoke("compare", str(synth), str(synth), "--only-diff", "--markdown", str(md))
    assert res.exit_code == 0, res.output
    assert "no differences" in res.output and "in common" not in res.output
    assert md.exists()


def test_compare_with_nothing_in_common_is_an_error(tmp_path):
    def doc(name: str, variant: str) -> Path:
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps({"schema": SCHEMA, "suite": "instructions", "provenance": {},
                                 "summary": {}, "records": [rec(variant, "latency", 4.0)]}))
        return p

    a, b = doc("a", "add.f32"), doc("b", "mul.f32")
    one_error(invoke("compare", str(a), str(b)), "no quantities in common")
    one_error(invoke("compare", str(a), str(a), "--filter", "zzz*"), "matches 'zzz*'")


# --- 8. damaged suite files in a data directory ----------------------------------------------------
@pytest.mark.parametrize("content,needle,suffix", [
    (b"", "empty file", ".gz"),
    (gzip.compress(b""), "empty file", ".gz"),
    (gzip.compress(b"{}"), "not a gpudissect.suite/1 document", ".gz"),
    (gzip.compress(b"[]"), "not a gpudissect.suite/1 document", ".gz"),
    (gzip.compress(b'{"schema": "gpudissect.suite/1", "suite": "memory"}'), "without its records", ".gz"),
    (gzip.compress(b'{"records": [1, 2'), "not valid JSON", ".gz"),
    (gzip.compress(json.dumps(list(range(5000))).encode())[:100], "truncated gzip file", ".gz"),
    (b"this is no gzip file" * 10, "not a readable gzip file", ".gz"),
    (b"", "empty file", ".xz"),
    (lzma.compress(b'{"schema": "gpudissect.suite/1", "suite": "memory"}'), "without its records", ".xz"),
    (lzma.compress(b'{"records": [1, 2'), "not valid JSON", ".xz"),
    (lzma.compress(json.dumps(list(range(5000))).encode())[:100], "truncated xz file", ".xz"),
    (b"this is no xz file" * 10, "not a readable xz file", ".xz"),
])
def test_damaged_suite_file_in_a_data_dir(synth, tmp_path, content, needle, suffix):
    """A damaged compressed suite document (.json.gz of older sets, .json.xz as shipped) is one
    error naming the file, never a traceback."""
    (synth / "memory.json").unlink()
    bad = synth / f"memory.json{suffix}"
    bad.write_bytes(content)
    out = tmp_path / "r.md"
    one_error(invoke("report", "--data", str(synth), "--markdown", "--out", str(out)), str(bad), needle)
    assert not out.exists()


# --- 9. nothing measured: a non-zero exit ------------------------------------------------------------
NEWER = """
[[group]]
name = "add.{t}"
sig = "d:{t} a:{t} b:{t}"
types = ["u16x2"]
class = "int"
min_sm = 100
"""


@needs_ptxas
def test_map_where_nothing_verifies_exits_1(tmp_path):
    cat = tmp_path / "newer.toml"
    cat.write_text(NEWER)
    jp = tmp_path / "m.json"
    res = invoke("map", "--catalog", str(cat), "-q", "--json", str(jp))
    one_error(res, "no variant verified on sm_90", code=1)
    assert json.loads(jp.read_text())[0]["status"] == "unsupported"  # the map is still written


@needs_ptxas
def test_run_where_nothing_applies_exits_1(tmp_path, monkeypatch):
    """A variant of a later architecture is left out before any work, said in one line."""
    monkeypatch.setenv("GPUDISSECT_FAKE_DEVICE", "1")
    cat = tmp_path / "newer.toml"
    cat.write_text(NEWER)
    res = invoke("run", "add.u16x2", "--catalog", str(cat), "--quick", "--no-selfcheck", "--no-isolate",
                 "--db", str(tmp_path / "r.db"))
    one_error(res, "none of its 1 items runs on sm_90 (needs sm_100: 1)", code=1)


@pytest.mark.slow
@needs_ptxas
def test_run_whose_selfcheck_fails_exits_1(tmp_path, monkeypatch):
    from gpudissect.suites.instructions import selfcheck

    def broken(arch: str) -> bytes:
        raise RuntimeError("nvcc failed: cicc of another release")

    monkeypatch.setattr(selfcheck, "build", broken)
    monkeypatch.setenv("GPUDISSECT_FAKE_DEVICE", "1")
    res = invoke("run", "add.u32", "--quick", "--selfcheck", "--no-isolate", "--db", str(tmp_path / "r.db"))
    one_error(res, "self-check failed", "nvcc failed", "results are stored", code=1)


# --- 10. Ctrl-C in map ---------------------------------------------------------------------------------
@needs_ptxas
def test_ctrl_c_in_map_stops_at_once(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "GPUDISSECT_CACHE": str(cache), "PYTHONPATH": str(ROOT / "src"),
           "TMPDIR": str(tmp_path)}
    p = subprocess.Popen([sys.executable, "-m", "gpudissect", "map", "-q", "--json", str(tmp_path / "m.json")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (cache / "cubin").exists():  # the mapping has begun
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        time.sleep(0.3)
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
        out, err = p.communicate(timeout=10)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, (out, err)
    assert took < 2.0, took
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: no map written"), err
    # no map, and no temporary file of the compiles under way (TMPDIR is tmp_path)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["cache"]


# --- 11. --version ----------------------------------------------------------------------------------------
def test_version():
    res = invoke("--version")
    assert res.exit_code == 0
    assert res.output.strip() == f"gpudissect {version('gpudissect')}"
