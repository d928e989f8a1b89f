"""Bad input (property-based): catalog entries, PTX snippets for `gpudissect time --no-gpu`,
command-line arguments and database files always give a clear error (exit code 2 and an
'error:' message; usage errors from the argument parser say 'Error'), never a traceback,
and never change a database file that was refused."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudissect import cli
from gpudissect.catalog.model import CatalogError, load_catalog

FAST = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def invoke(*args: str) -> tuple[int, str]:
    """The real entry point (`gpudissect ...`) in this process: (exit code, stdout + stderr).
    Any exception other than SystemExit escapes and fails the test (that is a traceback)."""
    out = io.StringIO()
    old = sys.argv
    sys.argv = ["gpudissect", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                cli.main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    return code, out.getvalue()


def assert_clear(code: int, out: str, allowed=(0, 2)) -> None:
    assert "Traceback" not in out, out
    assert code in allowed, (code, out)
    if code == 2:
        assert "error:" in out or "Error" in out, out


# --- catalog entries --------------------------------------------------------------------------
def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


KEYS = ["name", "sig", "types", "class", "ptx", "values", "chain", "min_sm", "min_sm_by_type",
        "min_ptx", "allow", "warp_collective", "note", "bogus"]
PIECES = ["add.{t}", "mul.lo.{t}", "d:{t} a:{t} b:{t}", "d:u32 a:u32", "d:{t}", "a:u32 d:u32",
          "{d}", "{a}", "u32", "f32", "b64", "pred", "smem", "none", "a", "d", "", "{t}", "x:q9"]
scalar = st.one_of(st.sampled_from(PIECES), st.text(max_size=12), st.integers(-5, 200),
                   st.booleans(), st.floats(allow_nan=False, allow_infinity=False, width=32))
value = st.one_of(scalar, st.lists(scalar, max_size=4),
                  st.dictionaries(st.sampled_from(["a", "b", "d", "u32", "zz"]), scalar, max_size=3))
group = st.dictionaries(st.sampled_from(KEYS), value, max_size=8)


@FAST
@given(groups=st.lists(group, max_size=3), junk=st.sampled_from(["", "group = 3\n", "[x\n", "\xff"]))
def test_any_catalog_file_loads_or_raises_catalog_error(tmp_path_factory, groups, junk):
    path = tmp_path_factory.mktemp("cat") / "c.toml"
    text = "".join("[[group]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in g.items())
                   for g in groups)
    data = text.encode() + (junk.encode("latin-1") if junk == "\xff" else junk.encode())
    path.write_bytes(data)
    try:
        cat = load_catalog([path])
    except CatalogError as e:
        assert str(e)
        return
    for v in cat:
        assert isinstance(v.name, str) and isinstance(v.ptx, str) and v.operands


def test_catalog_errors_reach_the_command_line_as_exit_2(tmp_path):
    for text in ("[[group]]\nname = 5\nsig = 'd:u32'\n", "group = [1, 2]\n", "[[group]\n",
                 "[[group]]\nname = 'x'\nsig = 'd:u32 a:u32'\nmin_sm = 'ninety'\n"):
        p = tmp_path / "c.toml"
        p.write_text(text)
        code, out = invoke("catalog", "--catalog", str(p))
        assert_clear(code, out, allowed=(2,))
        assert "error:" in out and "catalog" in out
    p.write_bytes(b"\xff\xfe[[group]]")
    assert_clear(*invoke("catalog", "--catalog", str(p)), allowed=(2,))


# --- PTX snippets for `gpudissect time --no-gpu` -----------------------------------------------
OPS = ["add", "mul.lo", "mad.lo", "sub", "and", "xor", "shl", "popc", "mov", "ld.global", "bogus",
       "cvt.rn.f32", "fma.rn", "{d}"]
TYPES = ["u32", "s64", "f32", "f16x2", "b32", "pred", "q7", ""]
token = st.one_of(st.sampled_from(["{d}", "{a}", "{b}", "{c}", "%r1", "[{a}]", "0", ";", ",", "{",
                                   "}", "\n", ".reg", "@p", "bra L;"]), st.text(max_size=6))
snippet = st.builds(lambda op, t, toks: f"{op}.{t} " + " ".join(toks), st.sampled_from(OPS),
                    st.sampled_from(TYPES), st.lists(token, max_size=6))
sig = st.one_of(st.just("d:u32 a:u32 b:u32"), st.just("d:f32 a:f32"),
                st.builds(lambda a, b: f"d:{a} a:{b}", st.sampled_from(TYPES), st.sampled_from(TYPES)),
                st.text(max_size=10))


@SLOW
@given(ptx=snippet, s=sig)
def test_time_no_gpu_never_tracebacks(ptx, s):
    code, out = invoke("time", "--no-gpu", "--ptx", ptx, "--sig", s)
    # 0: verified; 1: assembles but the SASS check does not verify it; 2: bad input
    assert_clear(code, out, allowed=(0, 1, 2))
    if code:
        assert "error:" in out


def test_time_bad_inputs_are_exit_2(tmp_path):
    for args in (["--ptx", "@" + str(tmp_path / "missing.ptx")],
                 ["--ptx", "garbage {d}, {a}, {b};"],
                 ["--ptx", "add.u32 {d}, {a}, {zz};"],
                 ["--ptx", "add.u32 {d}, {a}, {b};", "--sig", "d:u99 a:u32 b:u32"]):
        code, out = invoke("time", "--no-gpu", *args)
        assert code == 2 and "error:" in out and "Traceback" not in out, out


# --- command-line arguments -------------------------------------------------------------------
WORDS = ["catalog", "show", "export", "compare-gpus", "map", "time", "--db", "--run", "--suite",
         "--format", "--json", "--top", "--class", "--catalog", "--no-gpu", "--ptx", "--sig", "-q",
         "--arch", "sm_90", "sm_1", "x", "7", "-1", "suite", "csv", "instructions", "add.f32", "*",
         "nope.q", "--help"]


@FAST
@given(words=st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=8)), min_size=1, max_size=5),
       cmd=st.sampled_from(["catalog", "show", "export", "compare-gpus", "time"]))
def test_random_arguments_never_traceback(tmp_path_factory, words, cmd):
    d = tmp_path_factory.mktemp("cli")
    # keep runs bounded: no mapping of the whole catalog, no compiles of random PTX
    if cmd == "time":
        words = [w for w in words if w != "--ptx"] + ["--no-gpu"]
    args = [cmd, *[w for w in words if w not in ("map", "-q")], "--db", str(d / "r.db")]
    if cmd == "export":
        args.insert(1, str(d / "out.json"))
    code, out = invoke(*args)
    assert_clear(code, out)


@pytest.mark.parametrize("args,needle", [
    (["--suite", "instructions", "--gpus", "junk"], "use 'all' or GPU indices"),
    (["--suite", "instructions", "--gpus", "5"], "no GPU 5"), (["--gpus", "all"], "give --suite NAME"),
    (["--timeout", "0"], "--timeout"),
    (["--suite", "nope"], "unknown suite"), (["nope.q"], "nope.q"), (["--gpu", "3"], "no fake GPU 3"),
])
def test_bad_run_arguments_are_exit_2(tmp_path, monkeypatch, args, needle):
    monkeypatch.setenv("GPUDISSECT_FAKE_DEVICE", "2")
    code, out = invoke("run", *args, "--db", str(tmp_path / "r.db"), "--no-selfcheck")
    assert code == 2 and "error:" in out and needle in out and "Traceback" not in out, out


# --- database files ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_db(tmp_path_factory, sweep) -> Path:
    """A real results database (fake GPU, two variants)."""
    from gpudissect.device.fakes import ScriptedDevice
    from gpudissect.store.db import Store

    p = tmp_path_factory.mktemp("good") / "r.db"
    store = Store(p)
    sweep(ScriptedDevice(), store, ["add.f32", "mul.lo.u32"])
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return p


def check_db_file(path: Path) -> None:
    before = path.read_bytes()
    for args in (["show"], ["export", str(path.with_suffix(".json"))], ["compare-gpus"]):
        code, out = invoke(*args, "--db", str(path))
        assert_clear(code, out)
        if code == 2:
            assert "error:" in out
            assert path.read_bytes() == before  # a refused file is left as it was


@FAST
@given(data=st.binary(max_size=3000))
def test_random_bytes_as_a_database(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("db") / "r.db"
    p.write_bytes(data)
    check_db_file(p)


@FAST
@given(frac=st.floats(0.0, 0.999))
def test_truncated_database(tmp_path_factory, good_db, frac):
    p = tmp_path_factory.mktemp("db") / "r.db"
    data = good_db.read_bytes()
    p.write_bytes(data[: int(len(data) * frac)])
    check_db_file(p)


@SLOW
@given(tables=st.lists(st.sampled_from(["runs", "results", "meta", "done", "kernels", "users", "t"]),
                       min_size=1, max_size=3, unique=True),
       schema=st.sampled_from(["(x)", "(key TEXT, value TEXT)", "(id INTEGER PRIMARY KEY, suite TEXT)"]),
       version=st.sampled_from([None, "0", "2", "x"]))
def test_database_of_another_schema(tmp_path_factory, tables, schema, version):
    p = tmp_path_factory.mktemp("db") / "r.db"
    con = sqlite3.connect(p)
    for t in tables:
        con.execute(f"CREATE TABLE {t} {schema}")
    if version is not None and "meta" in tables and "key" in schema:
        con.execute("INSERT INTO meta VALUES ('schema', ?)", (version,))
    con.commit()
    con.close()
    before = p.read_bytes()
    code, out = invoke("show", "--db", str(p))
    assert_clear(code, out, allowed=(2,))
    assert p.read_bytes() == before


def test_a_newer_schema_version_is_refused(tmp_path, good_db):
    p = tmp_path / "r.db"
    p.write_bytes(good_db.read_bytes())
    con = sqlite3.connect(p)
    con.execute("UPDATE meta SET value='99' WHERE key='schema'")
    con.commit()
    con.close()
    code, out = invoke("show", "--db", str(p))
    assert code == 2 and "schema version 99" in out


def test_select_named_picks_by_name_glob_prefix_and_group():
    import pytest

    from gpudissect.bench.contract import SuiteInputError, select_named

    things = [("op:mbarrier.try_wait(timeout*)", "mbarrier"), ("bw:tma:4096", "bw"), ("bw:ld:16", "bw")]

    def pick(pats):
        return [t[0] for t in select_named(things, pats, lambda t: t[0], lambda t, p: t[1] == p, "none")]

    assert pick(None) == [t[0] for t in things]
    assert pick(["op:mbarrier.try_wait(timeout*)"]) == ["op:mbarrier.try_wait(timeout*)"]  # exact, despite '('
    assert pick(["bw:tma:*"]) == ["bw:tma:4096"] and pick(["bw:ld"]) == ["bw:ld:16"]  # glob; leading part
    assert pick(["bw", "op:*"]) == [t[0] for t in things]  # a group; the things' own order
    with pytest.raises(SuiteInputError, match="^none$"):
        pick(["nothing"])
