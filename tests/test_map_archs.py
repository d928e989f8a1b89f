"""The map across architectures (issue 34): the summary line (what is skipped and why, the
verified share of what applies), the rules that hold on every generation (ptxas's convergence
guard before a warp-collective instruction, padding that never executes), the tensor catalog's
static map (what applies where), the stall counts in the records, and ``gpudissect compare`` of
maps, with the shipped cross-architecture comparison kept up to date. No GPU."""

from __future__ import annotations

import gzip
import json
from fractions import Fraction
from pathlib import Path

import pytest
from test_cli_errors import needs_ptxas
from typer.testing import CliRunner

from gpudissect.arch.target import Target, make_target
from gpudissect.catalog.model import UnknownVariant
from gpudissect.cli import app
from gpudissect.kernel.region import is_move, kind_of
from gpudissect.report.assemble.map_compare import (
    comparison_markdown,
    counts,
    is_map_file,
    load_map,
    map_rows,
)
from gpudissect.suites.instructions.checks import Sample, check_family
from gpudissect.suites.instructions.commands import select_everywhere
from gpudissect.suites.instructions.mapper import summary, summary_line
from gpudissect.suites.tensor import mapping as tensor_map

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]


# --- the summary line ---------------------------------------------------------------------------


def test_summary_line_says_what_is_skipped_and_the_verified_share():
    s = {"total": 858, "verified": 696, "unsupported": 140, "unverified": 22}
    line = summary_line(s, "sm_75")
    assert line.startswith("858 variants on sm_75: verified 696 of 718 applicable (96.9%), unverified 22")
    assert line.endswith("; 140 not applicable on sm_75 (need a later architecture or a feature it lacks)")
    assert summary_line({"total": 2, "verified": 2}, "sm_90") == "2 variants on sm_90: verified 2 of 2 applicable (100.0%)"
    assert "tensor variants" in summary_line({"total": 1, "unsupported": 1}, "sm_80", "tensor variants")
    assert summary([{"status": "verified"}, {"status": "emulated"}]) == {"total": 2, "verified": 1, "emulated": 1}


# --- rules that hold on every generation ----------------------------------------------------------


def _family(sass, with_guard_per_instance: bool = False):
    """Samples of a shfl chain: one BRA.DIV before the work (or one per instance)."""
    out = []
    for units in (4, 8, 12):
        lines = [] if with_guard_per_instance else ["BRA.DIV ~URZ, `(.L_x_1)"]
        for _ in range(units):
            lines += (["BRA.DIV ~URZ, `(.L_x_1)"] if with_guard_per_instance else []) + ["SHFL.IDX PT, R3, R3, R0, 0x1f"]
        out.append(Sample(units=units, length=units, region=sass(*lines)))
    return out


def test_the_convergence_guard_is_allowed_before_a_warp_collective_only(sass):
    assert kind_of("BRA", "BRA.DIV") == {"convergence"} and kind_of("BRA") == {"branch"}
    assert kind_of("BRA", "BRA.U") == {"branch"}
    fam = _family(sass)
    res = check_family(fam, check_depth=False)
    assert not res.ok and "convergence instruction BRA.DIV" in res.reason  # not allowed: refused
    res = check_family(fam, allow=("convergence",), check_depth=False)
    assert res.ok, res.reason
    assert res.per_unit["SHFL.IDX"] == Fraction(1)
    res = check_family(_family(sass, True), allow=("convergence",), check_depth=False)
    assert not res.ok and "per instance" in res.reason  # a guard per instance is not the instruction's


def test_padding_that_never_executes_is_no_work(sass):
    pad, real, maybe = sass("@!UPT UIADD3 URZ, URZ, URZ, URZ", "UIADD3 UR4, UR4, 0x1, URZ",
                            "@!P0 IADD3 R0, R0, 0x1, RZ")
    assert is_move(pad.full, pad)
    assert not is_move(real.full, real) and not is_move(maybe.full, maybe)


def test_the_clock_read_into_uniform_registers_bounds_the_region(sass):
    from gpudissect.kernel.region import find_region, is_clock_read
    from gpudissect.suites.tensor.checks import TENSOR_OP

    a, b, c, d = sass("CS2R R22, SR_CLOCKLO", "HMMA.16816.F32 R8, R4, R2, R8", "CS2UR UR8, SR_CLOCKLO",
                      "CS2R.32 R3, SR_CLOCKLO")
    assert is_clock_read(a) and is_clock_read(c) and not is_clock_read(d)
    assert find_region([a, b, c]) == [b]
    assert all(TENSOR_OP.match(op) for op in ("HMMA", "QMMA", "OMMA", "HGMMA"))


# --- the tensor catalog's map ---------------------------------------------------------------------


def _target(arch: str, features: list[str]) -> Target:
    return Target(arch, arch, "9.0", {"target": {"arch": arch, "features": features}})


def test_tensor_variants_apply_by_min_arch_and_wgmma_by_the_feature():
    vs = {v.name: v for v in tensor_map.variants()}
    mma = next(v for v in vs.values() if v.kind == "mma" and v.min_arch == 80)
    wg = next(v for v in vs.values() if v.kind == "wgmma")
    old, new_wg, new_no_wg = _target("sm_75", []), _target("sm_90", ["wgmma"]), _target("sm_100", [])
    assert tensor_map.not_applicable(mma, old) == "needs sm_80 or newer"
    assert tensor_map.not_applicable(mma, new_wg) is None
    assert tensor_map.not_applicable(wg, new_wg) is None
    assert "wgmma feature, which sm_100 lacks" in tensor_map.not_applicable(wg, new_no_wg)
    assert tensor_map.needs(wg)[-1] == "wgmma"
    assert tensor_map.select(["ldmatrix.m8n8.x1*"]) and all(
        v.name.startswith("ldmatrix.m8n8.x1") for v in tensor_map.select(["ldmatrix.m8n8.x1*"]))


def test_patterns_go_to_the_catalog_that_has_them(catalog):
    vs, theirs = select_everywhere(catalog, [tensor_map], ["add.u32", "ldmatrix.m8n8.x1.b16"])
    assert [v.name for v in vs] == ["add.u32"]
    assert [(h.CATALOG, [v.name for v in sel]) for h, sel in theirs] == [("tensor", ["ldmatrix.m8n8.x1.b16"])]
    vs, theirs = select_everywhere(catalog, [tensor_map], ["ldmatrix.m8n8.x1.b16"])
    assert vs == [] and len(theirs) == 1
    with pytest.raises(UnknownVariant):
        select_everywhere(catalog, [tensor_map], ["no.such.op"])
    vs, theirs = select_everywhere(catalog, [tensor_map], None)
    assert len(vs) == len(catalog.select(None)) and len(theirs[0][1]) == len(tensor_map.variants())


@needs_ptxas
def test_map_of_both_catalogs_with_stalls(tmp_path):
    jp = tmp_path / "m.json"
    res = CliRunner().invoke(app, ["map", "-q", "fma.rn.f32", "ldmatrix.m8n8.x1.b16", "mma.sync.m16n8k16.f32.f16.f32",
                                   "--json", str(jp), "--jobs", "2"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "1 variants on sm_90: verified 1 of 1 applicable (100.0%)" in flat
    assert "2 tensor variants on sm_90: verified 2 of 2 applicable (100.0%)" in flat
    data = {r["variant"]: r for r in json.loads(jp.read_text())}
    fma = data["fma.rn.f32"]
    assert fma["sass"] == ["FFMA"] and 1 <= fma["stalls"]["FFMA"] < 15 and "catalog" not in fma
    mma = data["mma.sync.m16n8k16.f32.f16.f32"]
    assert mma["catalog"] == "tensor" and mma["verified"] and mma["sass"] == ["HMMA.16816.F32"]
    assert set(mma["stalls"]) == {"HMMA.16816.F32"}
    assert data["ldmatrix.m8n8.x1.b16"]["sass"] == ["LDSM.16.M88"]
    text = jp.read_text()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"  # keys in one order


# --- compare of maps ------------------------------------------------------------------------------


def _rec(variant, arch, sass=None, status="verified", stalls=None, catalog=None, reason=None):
    r = {"variant": variant, "arch": arch, "verified": status == "verified", "sass": sass or [], "status": status,
         "stalls": stalls or {}, "cls": "x"}
    if catalog:
        r["catalog"] = catalog
    if reason:
        r["reason"] = reason
    return r


@pytest.fixture
def two_maps(tmp_path):
    a = [_rec("add.u32", "sm_80", ["IADD3"], stalls={"IADD3": 5}),
         _rec("vote.any", "sm_80", status="unverified", reason="reg: branch instruction BRA.DIV"),
         _rec("dpx", "sm_80", status="unsupported", reason="needs sm_90 or newer"),
         _rec("mma.x", "sm_80", ["HMMA.16816.F32"], stalls={"HMMA.16816.F32": 2}, catalog="tensor")]
    b = [_rec("add.u32", "sm_90", ["IMAD.IADD"], stalls={"IMAD.IADD": 4}),
         _rec("vote.any", "sm_90", ["VOTE.ANY"], stalls={"VOTE.ANY": 6}),
         _rec("dpx", "sm_90", ["VIMNMX3"]),
         _rec("mma.x", "sm_90", ["HMMA.16816.F32"], stalls={"HMMA.16816.F32": 15}, catalog="tensor")]
    pa, pb = tmp_path / "a" / "map.json.gz", tmp_path / "b.json"
    pa.parent.mkdir()
    pa.write_bytes(gzip.compress(json.dumps(a).encode()))
    pb.write_text(json.dumps(b))
    return pa, pb


def test_compare_maps_side_by_side(two_maps, tmp_path):
    pa, pb = two_maps
    assert is_map_file(str(pa)) and is_map_file(str(pb)) and not is_map_file(str(tmp_path))
    maps = [load_map(str(pa)), load_map(str(pb))]
    assert counts(maps[0])["instructions"] == {"total": 3, "applicable": 2, "verified": 1, "emulated": 0,
                                               "unverified": 1, "not_applicable": 1}
    rows = {r.variant: r for r in map_rows(maps)}
    assert rows["add.u32"].sass_differs and not rows["add.u32"].status_differs
    assert rows["vote.any"].status_differs and not rows["vote.any"].sass_differs
    assert not rows["dpx"].sass_differs and not rows["dpx"].status_differs  # n/a on one side
    assert rows["mma.x"].stalls() == [("HMMA.16816.F32", [2, 15])]
    assert rows["add.u32"].stalls() == []  # different SASS: no instruction of both
    md = comparison_markdown(maps, list(rows.values()), "gpudissect compare A B --markdown X")
    assert "Generated by `gpudissect compare A B --markdown X`" in md
    assert "| sm_80 | instructions | 3 | 2 | 1 | 50.0% | 0 | 1 | 1 |" in md
    assert "| `add.u32` | instructions | IADD3 | **IMAD.IADD** |" in md
    assert "| `mma.x` | HMMA.16816.F32 | 2 | **15** |" in md
    assert "* `vote.any` on sm_80: reg: branch instruction BRA.DIV" in md


def test_compare_command_on_maps(two_maps, tmp_path):
    pa, pb = two_maps
    md, js = tmp_path / "c.md", tmp_path / "c.json"
    res = CliRunner().invoke(app, ["compare", str(pa), str(pb), "--markdown", str(md), "--json", str(js)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "4 variants: 1 with different SASS, 1 verified on some architectures only, 1 SASS with different stall" in flat
    assert md.read_text().startswith("# PTX->SASS across architectures")
    doc = json.loads(js.read_text())
    assert [m["arch"] for m in doc["maps"]] == ["sm_80", "sm_90"]
    assert {r["variant"] for r in doc["rows"]} == {"add.u32", "vote.any", "mma.x"}
    res = CliRunner().invoke(app, ["compare", str(pa), str(ROOT / "data" / "h100")])
    assert res.exit_code != 0 and "maps only or result sets only" in " ".join(res.output.split())


def test_the_shipped_maps_and_their_comparison_are_current():
    """data/<arch>/map.json.gz for every architecture, and data/compare-archs.md made from them
    by the command it names (regenerate both: see the file's first lines)."""
    paths = [ROOT / "data" / a / "map.json.gz" for a in ARCHS]
    shipped = ROOT / "data" / "compare-archs.md"
    if not shipped.is_file() or not all(p.is_file() for p in paths):
        pytest.skip("no shipped maps here")
    specs = [str(p.relative_to(ROOT)) for p in paths]
    maps = [load_map(str(p)) for p in paths]
    for m, spec in zip(maps, specs, strict=True):
        m.path = spec
    assert [m.arch for m in maps] == ARCHS
    command = "gpudissect compare " + " ".join(specs) + " --markdown data/compare-archs.md"
    assert comparison_markdown(maps, map_rows(maps), command) == shipped.read_text(), \
        f"data/compare-archs.md is stale: run `{command}`"
    for m in maps:  # the bar: 90% of the applicable instruction catalog verified
        c = counts(m)["instructions"]
        assert c["verified"] >= 0.9 * c["applicable"], (m.arch, c)


def test_an_architecture_without_folder_cannot_be_mapped():
    with pytest.raises(ValueError):
        make_target("sm_42")
