"""Nothing lost: real `gpudissect run` processes (on a fake GPU) are killed with SIGKILL at random
points; the database stays consistent and `run --resume` finishes exactly the missing work."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudissect.store.db import Store
from gpudissect.suites.instructions.studies.sass_steps import same_sass

VARIANTS = ["add.f32", "sub.f32", "mul.f32", "add.u32", "mul.lo.u32", "fma.rn.f32", "min.s32", "max.u32"]
# the plan adds the variants that measure a companion alone (catalog/glue.toml)
ITEMS = VARIANTS + ["add.u16", "add.u64", "lop3.b32"]
SRC = str(Path(__file__).resolve().parents[1] / "src")


def cli(db: Path, *extra: str, isolate: bool = False) -> subprocess.Popen:
    env = dict(os.environ, GPUDISSECT_FAKE_DEVICE="1", GPUDISSECT_FAKE_DELAY="0.005",
               PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [sys.executable, "-m", "gpudissect", "run", *VARIANTS, "--db", str(db), "--quick",
            "--no-selfcheck", "--jobs", "2", "--isolate" if isolate else "--no-isolate", *extra]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(p: subprocess.Popen) -> str:
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    return out


def rows(db: Path, q: str, *a) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(q, a).fetchall()
    finally:
        con.close()


def check_consistent(db: Path) -> None:
    """Integrity, and every stored item complete: a 'done' item has results, a result belongs
    to a done item (nothing half-written)."""
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    done = set(rows(db, "SELECT run_id, item FROM done"))
    with_results = set(rows(db, "SELECT DISTINCT run_id, variant FROM results"))
    assert with_results == done
    dup = rows(db, "SELECT variant, measure, params, COUNT(*) FROM results GROUP BY run_id, variant, "
                   "measure, params HAVING COUNT(*) > 1")
    assert dup == []


def results(db: Path, run_id: int) -> dict:
    """(variant, measure, params) -> (value, created), the params without a SASS hash they cite
    (the SASS text of the whole's kernel): a resumed run compiles only the missing items, in
    other modules, and nvdisasm numbers branch labels over a module, so the same program's text
    (and hash) can differ in those numbers alone; :func:`cited_sass` holds them to that."""
    out = {}
    for v, m, p, val, created in rows(
            db, "SELECT variant, measure, params, value, created FROM results WHERE run_id=?", run_id):
        d = json.loads(p)
        d.pop("sass_hash", None)
        out[(v, m, json.dumps(d, sort_keys=True))] = (val, created)
    return out


def cited_sass(db: Path, run_id: int) -> dict:
    """(variant, measure) -> the SASS text a result's params cite by hash (``sass_hash``)."""
    store = Store(db)
    try:
        return {(v, m): store.kernel_text(json.loads(p)["sass_hash"]) for v, m, p in rows(
            db, "SELECT variant, measure, params FROM results WHERE run_id=?", run_id)
            if json.loads(p).get("sass_hash")}
    finally:
        store.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict, float]:
    """A complete run (it also fills the compile cache) and its duration."""
    db = tmp_path_factory.mktemp("ref") / "ref.db"
    t = time.monotonic()
    finish(cli(db))
    dt = time.monotonic() - t
    check_consistent(db)
    assert {i for (i,) in rows(db, "SELECT item FROM done")} == set(ITEMS)
    return db, results(db, 1), dt


def n_done(db: Path) -> int:
    try:
        return rows(db, "SELECT COUNT(*) FROM done")[0][0]
    except sqlite3.Error:  # not created yet
        return 0


@pytest.mark.parametrize("seed,when,isolate", [(1, "anytime", False), (2, "mid-sweep", False),
                                               (3, "mid-sweep", True)])
@pytest.mark.slow
def test_sigkill_at_a_random_point_then_resume_finishes_exactly_the_rest(tmp_path, reference, seed,
                                                                         when, isolate):
    """'anytime': a random instant once the store exists (setup, compile, sweep, finish);
    'mid-sweep': once a random number of items is stored, plus a random fraction of an item."""
    ref_db, ref, _ = reference
    rng = random.Random(seed)
    db = tmp_path / "r.db"
    p = cli(db, isolate=isolate)
    if when == "anytime":
        while not db.exists() and p.poll() is None:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 1.0))
    else:
        k = rng.randrange(1, len(ITEMS) - 1)
        while n_done(db) < k and p.poll() is None:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.1))
    p.send_signal(signal.SIGKILL)
    p.wait()
    if not db.exists():
        pytest.skip("killed before the store was created")
    check_consistent(db)
    runs = rows(db, "SELECT id, finished FROM runs")
    before = results(db, runs[0][0]) if runs else {}
    if when == "mid-sweep":
        assert runs and runs[0][1] is None and 0 < n_done(db) < len(ITEMS)
    finish(cli(db, "--resume", isolate=isolate))
    check_consistent(db)
    runs_after = rows(db, "SELECT id, finished FROM runs")
    if runs and runs[0][1] is None:
        # the unfinished run was resumed, not a new one started
        assert len(runs_after) == 1 and runs_after[0][0] == runs[0][0]
    rid = runs_after[-1][0]
    assert runs_after[-1][1] is not None
    after = results(db, rid)
    assert {i for (i,) in rows(db, "SELECT item FROM done WHERE run_id=?", rid)} == set(ITEMS)
    # the same measurements as an uninterrupted run: nothing skipped, nothing extra
    assert set(after) == set(ref)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in ref.items()}
    # the SASS they cite: the same programs (up to the module's branch-label numbers)
    sass, sass_ref = cited_sass(db, rid), cited_sass(ref_db, 1)
    assert sass.keys() == sass_ref.keys() and all(sass[k] and same_sass(sass[k], sass_ref[k]) for k in sass)
    # items stored before the kill were not measured again (same rows, same creation times)
    if runs and runs[0][1] is None:
        assert {k: after[k] for k in before} == before


@pytest.mark.slow
def test_new_starts_a_fresh_run_and_resume_reuses_an_unfinished_one(tmp_path, reference):
    db = tmp_path / "r.db"
    db.write_bytes(reference[0].read_bytes())  # one finished run
    finish(cli(db, "--new"))
    assert [r[0] for r in rows(db, "SELECT id FROM runs")] == [1, 2]
    # an unfinished run (as a kill leaves it) is resumed by default
    con = sqlite3.connect(db)
    con.execute("UPDATE runs SET finished=NULL WHERE id=2")
    con.execute("DELETE FROM results WHERE run_id=2 AND variant='add.f32'")
    con.execute("DELETE FROM done WHERE run_id=2 AND item='add.f32'")
    con.commit()
    con.close()
    finish(cli(db))
    assert [r[0] for r in rows(db, "SELECT id FROM runs")] == [1, 2]
    assert {i for (i,) in rows(db, "SELECT item FROM done WHERE run_id=2")} == set(ITEMS)
    check_consistent(db)
