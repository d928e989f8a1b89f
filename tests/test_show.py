"""``gpudissect show`` says what the store holds (issue 33): each measure in its own place with
its unit and flags, from a database or a shipped data directory; an unknown variant is one
error line with the nearest names. Checked on the shipped data sets, no GPU."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudissect.cli import app, results_commands
from gpudissect.report.read import results as results_module
from gpudissect.report.read.results import load_result_set

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "h200"
runner = CliRunner()
WIDE = {"COLUMNS": "400"}


@pytest.fixture(autouse=True)
def _read_once(monkeypatch):
    """Each data set and database read once for the whole module (show reads them afresh)."""
    monkeypatch.setattr(results_module, "load_result_set", _cached_set)
    monkeypatch.setattr(results_commands, "open_store", _cached_store)


@functools.cache
def _cached_set(path, label=None):
    return load_result_set(path, label)


@functools.cache
def _cached_store(db):
    from gpudissect.terminal import open_store

    return open_store(db)


def show(*args: str):
    return runner.invoke(app, ["show", *args], env=WIDE)


def _rows(output: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]


def _close(text: str, v: float) -> bool:
    return float(text) == pytest.approx(v, rel=1e-3, abs=0.5 if abs(v) >= 1e4 else 1e-9)


def _agrees(answer: str, unit: str, flags: str, recs: list[dict]) -> str | None:
    """What is wrong with show's line for one measure against the store's records, or None."""
    vals = [r["value"] for r in recs if r.get("value") is not None]
    m = re.fullmatch(r"(\S+)(?: \.\. (\S+))?(?: \((\d+) records\))?", answer)
    if m is None:
        return f"unreadable answer {answer!r}"
    lo, hi, n = m.group(1), m.group(2) or m.group(1), m.group(3)
    if lo == "-":
        if vals:
            return f"'-' but values {vals}"
    elif not vals or not (_close(lo, min(vals)) and _close(hi, max(vals))):
        return f"{answer!r} but values {min(vals, default=None)} .. {max(vals, default=None)}"
    if len(recs) > 1 and vals and int(n or 0) != len(recs):
        return f"{answer!r} but {len(recs)} records"
    units = {r.get("unit") for r in recs if r.get("unit")}
    if set(filter(None, (u.strip() for u in unit.split("|")))) != units:
        return f"unit {unit!r} but {units}"
    if set(filter(None, (f.strip() for f in flags.split(",")))) != {f.split(":")[0] for r in recs
                                                                     for f in r.get("flags") or []}:
        return f"flags {flags!r} disagree"
    return None


def _sample(rs) -> list[str]:
    """A variant of each measure of each suite: every suite and every measure kind."""
    picked: dict[tuple[str, str], str] = {}
    for r in rs.records():
        picked.setdefault((r["suite"], r["measure"]), r["variant"])
    return list(dict.fromkeys(picked.values()))


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_show_agrees_with_the_store_for_every_measure(gpu):
    rs = _cached_set(DATA / gpu)
    sample = _sample(rs)
    assert {r["suite"] for r in rs.records() if r["variant"] in sample} == set(rs.suites())
    by: dict[str, list[dict]] = {}
    for r in rs.records():
        by.setdefault(r["variant"], []).append(r)
    wrong, measures = [], 0
    for variant in sample:
        res = show(re.sub(r"([*?\[])", r"[\1]", variant), "--data", str(DATA / gpu))
        assert res.exit_code == 0, res.output
        rows = {row[0]: row[1:] for row in _rows(res.output)}
        recs = by[variant]
        if len({r["suite"] for r in recs}) == 1:
            assert f"({recs[0]['suite']} suite)" in res.output
        for measure in dict.fromkeys(r["measure"] for r in recs):
            if measure not in rows:
                wrong.append(f"{variant} {measure}: no line")
                continue
            problem = _agrees(*rows[measure], [r for r in recs if r["measure"] == measure])
            if problem:
                wrong.append(f"{variant} {measure}: {problem}")
            measures += 1
    assert wrong == []
    assert measures >= len({(r["suite"], r["measure"]) for r in rs.records()})


@pytest.mark.slow
def test_show_reads_each_suites_database_as_its_data_set():
    rs = _cached_set(H200)
    for suite in rs.suites():
        variant = next(r["variant"] for r in rs.records(suite) if r["measure"] != "sass_map")
        a = show(re.sub(r"([*?\[])", r"[\1]", variant), "--db", str(H200 / f"{suite}.db.xz"))
        b = show(re.sub(r"([*?\[])", r"[\1]", variant), "--data", str(H200))
        assert a.exit_code == b.exit_code == 0, a.output + b.output
        assert _rows(a.output) == _rows(b.output) and _rows(a.output)


def test_latency_and_issue_interval_in_their_own_columns():
    """The tensor issue interval (6 cycles) is no latency: mma.sync m16n8k16's is 24 cycles."""
    res = show("mma.sync.m16n8k16.f32.*", "--data", str(H200))
    assert res.exit_code == 0, res.output
    head = next(line for line in res.output.splitlines() if line.startswith("┃"))
    cols = [c.strip() for c in head.split("┃")[1:-1]]
    assert cols[2:5] == ["latency (cycles)", "issue interval (cycles)", "peak throughput (instr/cycle/SM)"]
    row = next(r for r in _rows(res.output) if r[0] == "mma.sync.m16n8k16.f32.f16.f32")
    one = show("mma.sync.m16n8k16.f32.f16.f32", "--db", str(H200 / "tensor.db.xz"))
    rows = {r[0]: r[1:] for r in _rows(one.output)}
    assert rows["latency"][1] == rows["issue_interval"][1] == "cycles"
    # each column holds its own record's value (the store's view of the one variant)
    assert row[2:5] == [rows["latency"][0], rows["issue_interval"][0], rows["throughput_peak"][0]]
    assert float(row[2]) > 2 * float(row[3])  # the issue interval is far below the latency


def test_an_unknown_variant_is_one_error_with_the_nearest_names():
    res = show("fma.rn.f3", "--data", str(H200))
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: no variant 'fma.rn.f3'")
    assert "nearest: fma.rn.f32" in lines[0]
    other = show("mma.sync.m16n8k16.f32.f16.f32", "--db", str(H200 / "memory.db.xz"))
    assert other.exit_code == 2 and "variants of suite memory" in other.output, other.output
    assert show("add.u32", "--data", str(H200), "--type", "f32").exit_code == 2
    assert "not both" in show("x", "--data", str(H200), "--db", str(H200 / "memory.db.xz")).output
