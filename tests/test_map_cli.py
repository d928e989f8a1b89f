"""The `map` and `catalog` commands, end to end through the toolchain (no GPU)."""

from __future__ import annotations

import csv
import json

import pytest
from test_cli_errors import needs_ptxas
from typer.testing import CliRunner

from gpudissect.arch.target import make_target, supported_archs
from gpudissect.cli import app
from gpudissect.kernel import toolchain as tools
from gpudissect.suites.instructions.mapper import map_catalog, summary, write_csv, write_json
from gpudissect.suites.instructions.verify import MapRecord

KEYS = {"variant", "arch", "verified", "sass", "strategy"}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def _check_records(data, arch="sm_90"):
    assert isinstance(data, list)
    for r in data:
        assert isinstance(r, dict)
        assert KEYS <= set(r), set(r)
        assert r["arch"] == arch
        assert isinstance(r["verified"], bool) and isinstance(r["sass"], list)
        if r["verified"]:
            assert r["sass"] and r["strategy"] and r["status"] == "verified"
            assert "reason" not in r
        else:
            assert isinstance(r.get("reason"), str) and r["reason"].strip(), r


def test_map_writes_json_and_csv(runner, tmp_path):
    jp, cp = tmp_path / "out" / "map.json", tmp_path / "map.csv"
    res = runner.invoke(app, ["map", "add.u32", "add.f32", "--json", str(jp), "--csv", str(cp)])
    assert res.exit_code == 0, res.output
    assert "2 variants on sm_90" in res.output
    data = json.loads(jp.read_text())
    _check_records(data)
    assert [r["variant"] for r in data] == ["add.u32", "add.f32"]
    assert all(r["verified"] for r in data)
    f32 = data[1]
    assert f32["sass"] == ["FADD"] and f32["strategy"] == "reg"
    assert f32["attempts"] == [{"strategy": "reg", "ok": True, "reason": ""}]
    gz = tmp_path / "map.json.gz"  # gzipped for a .gz name, the same records
    assert runner.invoke(app, ["map", "add.u32", "add.f32", "--json", str(gz)]).exit_code == 0
    import gzip

    assert json.loads(gzip.decompress(gz.read_bytes())) == data
    assert "add.f32" in f32["ptx_example"] and ".entry" in f32["ptx_example"]
    rows = list(csv.DictReader(cp.open()))
    assert [r["variant"] for r in rows] == ["add.u32", "add.f32"]
    assert rows[1]["sass"] == "FADD" and rows[1]["status"] == "verified"


# add.u16x2 as an instruction of a newer architecture than sm_90 (a variant above the
# architecture is made so by its min_sm)
NEWER = """
[[group]]
name = "add.{t}"
sig = "d:{t} a:{t} b:{t}"
types = ["u32"]
class = "int"

[[group]]
name = "add.{t}"
sig = "d:{t} a:{t} b:{t}"
types = ["u16x2"]
class = "int"
min_sm = 100

[[group]]
name = "neg.{t}"
sig = "d:{t} a:{t}"
types = ["s32"]
class = "int"
"""


def test_map_unverified_and_unsupported_have_reasons(runner, tmp_path):
    jp = tmp_path / "m.json"
    cat = tmp_path / "newer.toml"
    cat.write_text(NEWER)
    # add.u16x2 needs sm_100 here; neg.s32 folds under the current ptxas (it rewrites -(-x))
    res = runner.invoke(app, ["map", "--catalog", str(cat), "add.u16x2", "add.u32", "neg.s32", "-q",
                              "--json", str(jp)])
    assert res.exit_code == 0, res.output
    data = {r["variant"]: r for r in json.loads(jp.read_text())}
    _check_records(list(data.values()))
    assert data["add.u16x2"]["status"] == "unsupported"
    assert "sm_100" in data["add.u16x2"]["reason"]
    assert data["add.u32"]["verified"]
    neg = data["neg.s32"]
    if not neg["verified"]:
        # the reason names what each strategy tried ("reg: folded ...; fib: not applicable ...")
        tried = [a["strategy"] for a in neg["attempts"]]
        assert tried and all(f"{t}: " in neg["reason"] for t in tried)


@pytest.mark.parametrize("arch", ["sm_42", "hopper"])
def test_map_architecture_without_facts_is_one_clear_line(runner, arch):
    res = runner.invoke(app, ["map", "--arch", arch, "add.u32"])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)
    assert "Traceback" not in res.output
    flat = " ".join(res.output.split())
    assert flat.startswith(f"error: architecture {arch}" if arch == "sm_42" else f"error: architecture '{arch}'")


def test_map_unknown_variant_is_one_clear_line(runner):
    res = runner.invoke(app, ["map", "no.such.op"])
    assert res.exit_code != 0
    assert isinstance(res.exception, SystemExit)
    out = res.output.strip()
    assert "Traceback" not in res.output
    assert out.splitlines() == ["error: unknown instruction variant 'no.such.op'"]


def test_map_unknown_variant_suggests(runner):
    res = runner.invoke(app, ["map", "add.u33"])
    assert res.exit_code != 0 and isinstance(res.exception, SystemExit)
    assert "Traceback" not in res.output
    flat = " ".join(res.output.split())  # the console may wrap long lines
    assert flat.startswith("error: unknown instruction variant 'add.u33'; did you mean add.u32")


def test_map_without_toolchain(runner, monkeypatch, tmp_path):
    monkeypatch.setattr(tools, "_candidates", lambda tool: [tmp_path / "none" / tool])
    tools.find_tool.cache_clear()
    try:
        res = runner.invoke(app, ["map", "add.u32"])
    finally:
        tools.find_tool.cache_clear()
    assert res.exit_code != 0 and isinstance(res.exception, SystemExit)
    flat = " ".join(res.output.split())
    assert "ptxas not found" in flat and "nvidia-cuda-nvcc" in flat
    assert "Traceback" not in res.output


def test_map_bad_catalog_file(runner, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[group]]\nname = "x.u32"\nsig = "d:u99 a:u32"\n')
    res = runner.invoke(app, ["map", "--catalog", str(bad)])
    assert res.exit_code != 0 and isinstance(res.exception, SystemExit)
    flat = " ".join(res.output.split())
    assert flat.startswith("error: catalog:") and "u99" in flat


def test_catalog_lists_variants(runner, catalog):
    res = runner.invoke(app, ["catalog", "add.*"])
    assert res.exit_code == 0, res.output
    expected = [v.name for v in catalog.select(["add.*"])]
    listed = [ln.split("│")[1].strip() for ln in res.output.splitlines()
              if ln.startswith("│") and ln.split("│")[1].strip()]
    assert listed == expected
    assert res.output.rstrip().endswith(f"{len(expected)} variants")
    assert "addc.u32" not in res.output


def test_catalog_unknown_pattern(runner):
    res = runner.invoke(app, ["catalog", "add.u33"])
    assert res.exit_code != 0
    assert "add.u32" in res.output and "Traceback" not in res.output


def _listed(output: str) -> list[str]:
    return [ln.split("│")[1].strip() for ln in output.splitlines() if ln.startswith("│") and ln.split("│")[1].strip()]


def test_catalog_lists_the_tensor_catalogs_variants(runner):
    from gpudissect.catalog.tensor import load_tensor_catalog

    tc = load_tensor_catalog()
    res = runner.invoke(app, ["catalog", "mma*"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    mma = [v.name for v in tc.mma if v.name.startswith("mma")]
    assert _listed(res.output) == mma and "unknown" not in res.output
    assert "tensor variant" in res.output and "min arch" in res.output
    row = next(ln for ln in res.output.splitlines() if "│ mma.sync.m16n8k16.f32.f16.f32 " in ln)
    assert "sm_80" in row and "mma.sync.aligned.m16n8k16" in row
    assert res.output.rstrip().endswith(f"{len(mma)} tensor variants")
    # a pattern of each catalog: both tables
    both = runner.invoke(app, ["catalog", "add.u32", "ldmatrix.m8n8.x1.b16"], env={"COLUMNS": "250"})
    assert both.exit_code == 0, both.output
    assert _listed(both.output) == ["add.u32", "ldmatrix.m8n8.x1.b16"]
    # a wgmma: its PTX with N for its N
    wg = runner.invoke(app, ["catalog", "wgmma.f32.f16"], env={"COLUMNS": "250"})
    assert wg.exit_code == 0 and "wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16" in wg.output, wg.output


def test_catalog_arch_filters_the_tensor_variants_too(runner):
    from gpudissect.catalog.tensor import load_tensor_catalog

    tc = load_tensor_catalog()
    res = runner.invoke(app, ["catalog", "wgmma*", "ldmatrix*", "--arch", "sm_80"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    listed = _listed(res.output)
    assert listed and all(n.startswith("ldmatrix.m8n8") for n in listed)  # wgmma: sm_90a; m16n16: sm_100a
    every = [v.name for v in [*tc.wgmma, *tc.ldst] if v.name.startswith(("wgmma", "ldmatrix"))]
    last = " ".join(res.output.splitlines()[-2:])
    assert f"{len(listed)} tensor variants apply to sm_80; {len(every) - len(listed)} not applicable there" in last
    # an architecture after sm_90 without the wgmma feature leaves the wgmma variants out
    later = [a for a in ("sm_100", "sm_120") if a in supported_archs()]
    for arch in later:
        r = runner.invoke(app, ["catalog", "wgmma*", "--arch", arch], env={"COLUMNS": "250"})
        assert r.exit_code == 0 and _listed(r.output) == [], r.output
        assert f"0 tensor variants apply to {arch}; {len(tc.wgmma)} not applicable" in r.output
    ok = runner.invoke(app, ["catalog", "wgmma*", "--arch", "sm_90"], env={"COLUMNS": "250"})
    assert len(_listed(ok.output)) == len(tc.wgmma)


def test_catalog_unknown_in_both_catalogs_is_one_line_with_the_nearest_names(runner):
    res = runner.invoke(app, ["catalog", "mma.sync.m16n8k16.f32.f16.f33"])
    assert res.exit_code == 2
    flat = " ".join(res.output.split())
    assert flat.startswith("error: unknown variant") and "mma.sync.m16n8k16.f32.f16.f32" in flat
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 3


def test_mapper_helpers(tmp_path):
    recs = [
        MapRecord(variant="a", arch="sm_90", verified=True, sass=["FADD"], strategy="reg"),
        MapRecord(variant="b", arch="sm_90", verified=False, sass=[], strategy=None,
                  reason="folded", status="unverified"),
    ]
    assert summary(recs) == {"total": 2, "verified": 1, "unverified": 1}
    write_json(recs, tmp_path / "x" / "m.json")
    data = json.loads((tmp_path / "x" / "m.json").read_text())
    assert "reason" not in data[0] and data[1]["reason"] == "folded"
    write_csv(recs, tmp_path / "m.csv")
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert rows[1]["reason"] == "folded" and rows[0]["sass"] == "FADD"


@pytest.mark.slow
def test_whole_catalog_map(runner, tmp_path, catalog):
    jp = tmp_path / "all.json"
    res = runner.invoke(app, ["map", "-q", "--instructions-only", "--json", str(jp)])
    assert res.exit_code == 0, res.output
    data = json.loads(jp.read_text())
    _check_records(data)
    assert [r["variant"] for r in data] == [v.name for v in catalog]
    verified = sum(r["verified"] for r in data)
    assert verified >= 0.9 * len(data), f"only {verified}/{len(data)} verified"
    statuses = {r["status"] for r in data}
    assert statuses <= {"verified", "unverified", "unsupported", "error"}
    # the spec's folding example: plain add.u32 verifies, through a strategy that keeps the chain
    rec = next(r for r in data if r["variant"] == "add.u32")
    assert rec["verified"] and rec["depth_per_instance"] >= 1


def test_map_catalog_api(catalog):
    vs = catalog.select(["add.u32", "mul.lo.u32", "sin.approx.f32"])
    seen: list[str] = []
    recs = map_catalog(vs, make_target("sm_90"), jobs=2, progress=lambda r: seen.append(r.variant))
    assert [r.variant for r in recs] == [v.name for v in vs]
    assert sorted(seen) == sorted(r.variant for r in recs)  # progress once per variant
    assert all(r.verified for r in recs), [(r.variant, r.reason) for r in recs]
    assert any("MUFU" in s for s in recs[2].sass)


@needs_ptxas
def test_the_map_json_is_the_same_whatever_the_hash_seed(tmp_path):
    """The map's register correspondence lists the chained source and the destination in one
    order (it once followed a set's iteration order, which Python's string hashing changes from
    one process to the next)."""
    import os
    import subprocess
    import sys

    outs = []
    for seed in ("1", "2", "3"):
        out = tmp_path / f"map{seed}.json"
        env = {**os.environ, "PYTHONHASHSEED": seed, "GPUDISSECT_CACHE": str(tmp_path / "cache")}
        subprocess.run([sys.executable, "-m", "gpudissect", "map", "add.u16", "add.s16", "--quiet", "--json",
                        str(out)], check=True, env=env, capture_output=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
