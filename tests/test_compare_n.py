"""N-way comparison (issue 17: H100 beside H200 beside the A100 reference): `gpudissect compare
A B C`, its key view (`--key`), its markdown/HTML/JSON, and the report's GPU comparison
(`report --compare`). GPU-free: the second GPU is a copy of the committed H100 data with some
values scaled and another name."""

from __future__ import annotations

import gzip
import json
import lzma
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudissect.cli import app
from gpudissect.report.assemble import compare as cmp
from gpudissect.report.assemble import html as report_html
from gpudissect.report.read.results import load_result_set

H100 = Path(__file__).resolve().parents[1] / "data" / "h100"
SUITES = ("instructions", "memory", "tensor", "behaviour")
MEM_SCALE = 1.2  # every memory latency of the copy
DRAM_BW_SCALE = 1.43  # its DRAM read bandwidth
TENSOR_SCALE = 1.05  # its tensor peaks: under the 10% threshold
runner = CliRunner()

pytestmark = pytest.mark.skipif(not all((H100 / f"{s}.json.xz").exists() for s in SUITES),
                                reason="no committed H100 data")


def _read(path: Path) -> dict:
    return json.loads(lzma.decompress(path.read_bytes()))


def _write(path: Path, doc: dict) -> None:  # gzipped, as older sets are: they stay readable
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))


def _scale_memory(doc: dict) -> None:
    summ = doc["summary"]
    summ["latency"] = {k: (v * MEM_SCALE if isinstance(v, (int, float)) else v) for k, v in summ["latency"].items()}
    summ["sizes"]["L2"]["levels_cycles"] = [v * MEM_SCALE for v in summ["sizes"]["L2"]["levels_cycles"]]
    summ["bandwidth"]["DRAM/read"]["GB/s"] *= DRAM_BW_SCALE


def _scale_tensor(doc: dict) -> None:
    for r in doc["records"]:
        p = r.get("params") or {}
        if r.get("measure") == "throughput_peak" and isinstance(p.get("tflops"), (int, float)):
            p["tflops"] *= TENSOR_SCALE


@pytest.fixture(scope="module")
def h200_dir(tmp_path_factory) -> Path:
    """data/h100's suite documents, renamed 'NVIDIA H200', memory latencies x1.2, DRAM
    bandwidth x1.43, tensor peaks x1.05."""
    out = tmp_path_factory.mktemp("data") / "h200"
    out.mkdir()
    for s in SUITES:
        doc = _read(H100 / f"{s}.json.xz")
        doc["provenance"]["gpu_name"] = "NVIDIA H200"
        {"memory": _scale_memory, "tensor": _scale_tensor}.get(s, lambda d: None)(doc)
        _write(out / f"{s}.json.gz", doc)
    return out


@pytest.fixture(scope="module")
def sets(h200_dir):
    return [load_result_set(H100), load_result_set(h200_dir), load_result_set("a100")]


@pytest.fixture(scope="module")
def vmaps(sets):
    return [cmp.values(s) for s in sets]


def _by_key(rows: list[cmp.Row]) -> dict[str, cmp.Row]:
    return {r.key: r for r in rows}


def test_columns_are_named_by_gpu(sets):
    assert cmp.set_names(sets) == ["H100 80GB HBM3", "H200", "A100 (reference)"]
    heads, rel_heads = cmp.headings(sets)
    assert heads == ["A: H100 80GB HBM3", "B: H200", "C: A100 (reference)"]
    assert rel_heads == ["B vs A", "C vs A"]
    assert cmp.headings(sets[:2]) == (["A", "B"], ["B vs A"])  # two sets: the two-way headings
    assert cmp.headings(sets[:2], terminal=True)[0] == ["A: h100", "B: h200"]
    assert cmp.set_names([sets[0], sets[0]]) == ["H100 80GB HBM3 [h100]"] * 2


def test_three_way_rows_differences_and_highlighting(vmaps):
    rows = cmp.compare_maps(vmaps, threshold=0.10)
    assert rows and all(len(r.values) == 3 and r.rels[0] is None and not r.diffs[0] for r in rows)
    assert all(all(v is not None for v in r.values) for r in rows)  # in every set (no --all)
    by = _by_key(rows)
    l1 = by["quantity/l1_latency"]
    assert l1.values[1].value == pytest.approx(l1.values[0].value * MEM_SCALE)
    assert l1.values[2].value == 33  # A100 Table IV
    assert l1.rels[1] == pytest.approx(MEM_SCALE - 1)
    assert l1.rels[2] == pytest.approx((33 - l1.values[0].value) / l1.values[0].value)
    assert l1.diffs == [False, True, False] and l1.differs and l1.partial
    l2 = by["quantity/l2_latency_unplaced"]  # the A100 seed: an unplaced .cg chase, like the hot chain
    assert l2.diffs == [False, True, True] and not l2.partial  # H200 +20%, A100 200 vs 283 cycles
    add = by["instr/add.u32/latency"]  # A100: Table II's dependent CPI, 4 cycles
    assert add.rels[1] == 0 and add.diffs == [False, False, True] and "same method" in add.notes
    fma = by["instr/fma.rn.f32/independent"]  # A100: Table V, 3 independent instructions / 3
    assert fma.values[2].value == 2 and "method 'table_v'" in fma.notes
    assert "instr/fma.rn.f32/latency" not in by  # no dependent-chain figure for it in the seed
    # the two-way fields are the first two sets
    assert (l1.a, l1.b, l1.rel) == (l1.values[0], l1.values[1], l1.rels[1])
    # --all: also quantities some sets lack (the reference has no bandwidths)
    every = _by_key(cmp.compare_maps(vmaps, 0.10, include_one_sided=True))
    assert len(every) > len(by)
    bw = every["quantity/dram_bandwidth"]
    assert bw.values[2] is None and bw.rels[1] == pytest.approx(DRAM_BW_SCALE - 1) and bw.diffs == [False, True, False]


def test_two_sets_are_the_two_way_comparison(sets, vmaps):
    two = cmp.compare(sets[0], sets[1], threshold=0.1)
    assert [(r.key, r.rel, r.differs) for r in two] == [
        (r.key, r.rel, r.differs) for r in cmp.compare_maps(vmaps[:2], 0.1)]
    md = cmp.compare_markdown(sets[0], sets[1], two, 0.1)
    assert "| quantity | A | B | unit | B vs A | notes |\n|---|---:|---:|---|---:|---|" in md
    assert re.search(r"^\| `quantity/l1_latency` \| 32\.5 \| 39 \| cycles \| \*\*\+20%\*\* \| ", md, re.M)
    assert "<tr><th>quantity</th><th>A</th><th>B</th><th>unit</th><th>B vs A</th><th>notes</th></tr>" in \
        cmp.compare_html(sets[0], sets[1], two, 0.1)


def test_key_view(vmaps):
    rows = cmp.key_rows(vmaps, threshold=0.10)
    labels = [r.label for r in rows]
    # groups in order: device, latency, bandwidth, size, tensor peaks, instructions
    for a, b in (("L1 latency", "DRAM bandwidth (read, burst)"), ("DRAM bandwidth (read, burst)", "L2 size"),
                 ("L2 size", "tensor peak f16 (dense, burst)"), ("tensor peak f16 (dense, burst)", "FFMA latency (fma.rn.f32)")):
        assert labels.index(a) < labels.index(b)
    for label in ("L2 latency (near)", "L2 latency (far)", "DRAM latency", "shared memory latency (ld)", "L1 bandwidth (read)", "L1 size",
                  "tensor peak bf16 (dense, burst)", "tensor peak tf32 (dense, burst)", "tensor peak fp8 (dense, burst)",
                  "tensor peak int8 (dense, burst)", "DFMA latency (fma.rn.f64)", "IMAD latency (mad.lo.u32)",
                  "MUFU.EX2 latency (ex2.approx.f32)"):
        assert label in labels
    by = {r.label: r for r in rows}
    f16 = by["tensor peak f16 (dense, burst)"]
    assert f16.values[0].value > 900  # wgmma on the H100, TFLOP/s
    assert f16.rels[1] == pytest.approx(TENSOR_SCALE - 1) and not f16.diffs[1]  # +5%: not highlighted
    assert f16.values[2].text == "311-312" and "Table III" in f16.values[2].note and f16.diffs[2]
    assert by["tensor peak fp8 (dense, burst)"].values[2] is None  # the A100 reference has no fp8
    assert by["DRAM bandwidth (read, burst)"].diffs == [False, True, False]
    assert by["FFMA latency (fma.rn.f32)"].values[2] is None  # Table V's 2 cycles: independent issue


@pytest.mark.slow
def test_cli_three_way_outputs(h200_dir, sets, tmp_path):
    md, html, js = tmp_path / "c.md", tmp_path / "c.html", tmp_path / "c.json"
    res = runner.invoke(app, ["compare", str(H100), str(h200_dir), "a100", "--full", "--markdown", str(md),
                              "--html", str(html), "--json", str(js)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    for text in ("A: H100 80GB HBM3", "B: H200", "C: A100 (reference)", "B vs A", "C vs A", "reference: H. Abdelkhalik"):
        assert text in res.output
    n_rows = len(cmp.compare_sets(sets))
    assert f"{n_rows} quantities compared" in res.output
    m = md.read_text()
    assert m.startswith("# NVIDIA H100 80GB HBM3 (h100) vs NVIDIA H200 (h200) vs NVIDIA A100 (Ampere, sm_80) (a100)")
    assert ("| quantity | A: H100 80GB HBM3 | B: H200 | C: A100 (reference) | unit | B vs A | C vs A | notes |\n"
            "|---|---:|---:|---:|---|---:|---:|---|") in m
    assert re.search(r"^\| `quantity/l1_latency` \| 32\.5 \| 39 \| 33 \| cycles \| \*\*\+20%\*\* \| \+2% \| ", m, re.M)
    l2 = re.search(r"^\| `quantity/l2_latency_unplaced` \| ([\d.]+) \| [\d.]+ \| 200 \| cycles \| \*\*\+20%\*\* \| \*\*(-\d+)%\*\* \|",
                   m, re.M)
    assert l2 and int(l2.group(2)) == round((200 - float(l2.group(1))) / float(l2.group(1)) * 100)  # the A100's 200
    h = html.read_text()
    assert "<th>A: H100 80GB HBM3</th><th>B: H200</th><th>C: A100 (reference)</th><th>unit</th><th>B vs A</th>" \
           "<th>C vs A</th>" in h
    assert re.search(r'<tr class="differs"><td><code>quantity/l1_latency</code></td><td>32\.5</td><td>39</td>'
                     r"<td>33</td><td>cycles</td><td><b>\+20%</b></td><td>\+2%</td>", h)  # only B differs: marked
    doc = json.loads(js.read_text())
    assert [s["name"] for s in doc["sets"]] == ["H100 80GB HBM3", "H200", "A100 (reference)"]
    assert [s["column"] for s in doc["sets"]] == ["A", "B", "C"] and doc["a"]["source"] == str(H100)
    row = next(r for r in doc["rows"] if r["key"] == "quantity/l1_latency")
    assert [v["value"] for v in row["values"]][2] == 33 and row["differs_each"] == [False, True, False]
    assert row["rel_diffs"][0] is None and row["rel_diffs"][1] == pytest.approx(0.2) and row["differs"]
    assert row["rel_diff"] == row["rel_diffs"][1] and row["b"] == row["values"][1]
    assert doc["caveats"] and len(doc["rows"]) == n_rows


@pytest.mark.slow
def test_cli_only_diff_all_and_key(h200_dir, sets, tmp_path):
    js = tmp_path / "d.json"
    base = ["compare", str(H100), str(h200_dir), "a100"]
    res = runner.invoke(app, [*base, "--full", "--only-diff", "--json", str(js)])
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["rows"]
    full = cmp.compare_sets(sets)
    assert len(rows) == sum(r.differs for r in full) < len(full) and all(r["differs"] for r in rows)
    assert {r["key"] for r in rows} >= {"quantity/l1_latency", "instr/add.u32/latency"}
    res = runner.invoke(app, [*base, "--all", "--only-diff", "--filter", "quantity/*", "--json", str(js)])
    assert res.exit_code == 0, res.output
    keys = {r["key"]: r for r in json.loads(js.read_text())["rows"]}
    assert keys["quantity/dram_bandwidth"]["values"][2] is None  # missing in the reference, kept by --all
    assert "quantity/l1_bandwidth" not in keys  # the same in A and B, missing in C: no difference
    res = runner.invoke(app, [*base, "--key", "--markdown", str(tmp_path / "k.md"), "--json", str(js)],
                        env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    doc = json.loads(js.read_text())
    assert doc["view"] == "key" and doc["rows"][0]["label"] == "SMs"
    assert all(r["key"].startswith("quantity/") and r["label"] for r in doc["rows"])
    assert "tensor peak f16 (dense, burst)" in res.output and "instr/fma" not in res.output
    assert re.search(r"^\| L1 latency \| 32\.5 \| 39 \| 33 \| cycles \| \*\*\+20%\*\* \| \+2% \|",
                     (tmp_path / "k.md").read_text(), re.M)
    res = runner.invoke(app, ["compare", str(H100)])
    assert res.exit_code == 2 and "at least two result sets" in res.output


@pytest.mark.slow
def test_cli_default_is_the_key_view(h200_dir, sets, tmp_path):
    """Without --full or --all the comparison is the key quantities (issue 33): named rows, a
    line saying how many quantities --full would compare; --key is still accepted (the same)."""
    js, kjs = tmp_path / "d.json", tmp_path / "k.json"
    base = ["compare", str(H100), str(h200_dir), "a100"]
    res = runner.invoke(app, [*base, "--json", str(js)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    doc = json.loads(js.read_text())
    key = cmp.key_rows([cmp.values(s) for s in sets])
    assert doc["view"] == "key" and [r["key"] for r in doc["rows"]] == [r.key for r in key]
    assert f"{len(key)} quantities compared" in res.output and "instr/fma" not in res.output
    n_all = len(cmp.compare_sets(sets))
    assert n_all > len(key) and f"--full compares all {n_all:,} quantities" in " ".join(res.output.split())
    res = runner.invoke(app, [*base, "--key", "--json", str(kjs)], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and json.loads(kjs.read_text()) == doc, res.output
    # --filter selects from every quantity unless --key
    res = runner.invoke(app, [*base, "--filter", "instr/add.u32/*", "--json", str(js)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    rows = json.loads(js.read_text())["rows"]
    assert rows and all(r["key"].startswith("instr/add.u32/") for r in rows)
    res = runner.invoke(app, [*base, "--key", "--all"])
    assert res.exit_code == 2 and "--key" in res.output and "Traceback" not in res.output


@pytest.mark.slow
def test_report_comparison_section(h200_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(report_html, "figures_by_suite", lambda docs, *a, **k: {s: [] for s in docs})  # the figures are not under test
    out, plain = tmp_path / "r.html", tmp_path / "plain.html"
    res = runner.invoke(app, ["report", "--data", str(H100), "--compare", str(h200_dir), "--compare", "a100",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "beside NVIDIA H200, NVIDIA A100" in " ".join(res.output.split())
    html = out.read_text()
    sec = html[html.index('<section id="comparison">'):]
    sec = sec[:sec.index("</section>")]
    assert html.index('<section id="quantities">') < html.index('<section id="comparison">') \
        < html.index('<section id="instructions">')  # near the top
    assert '<a href="#comparison">GPU comparison</a>' in html
    assert "A: <b>H100 80GB HBM3</b>" in sec and "C: <b>A100 (reference)</b>" in sec
    key = sec[sec.index('<table id="compare-key"'):sec.index("</table>", sec.index('<table id="compare-key"'))]
    assert ">A: H100 80GB HBM3</th>" in key and ">C vs A</th>" in key
    l1 = re.search(r"<tr><td[^>]*>L1 latency</td>.*?</tr>", key).group(0)
    assert re.search(r'class="num differs"[^>]*>39</td>', l1) and re.search(r'class="num differs"[^>]*>\+20%</td>', l1)
    assert re.search(r'class="num"[^>]*>\+2%</td>', l1)  # the A100's L1 latency: within 10%
    assert "tensor peak f16 (dense, burst)" in key and "FFMA latency (fma.rn.f32)" in key
    full = sec[sec.index('<table id="compare-all"'):]
    assert '<details class="table"><summary>Every quantity in common' in sec  # folded
    assert "<code>instr/add.u32/latency</code>" in full
    # without --compare: no comparison
    res = runner.invoke(app, ["report", "--data", str(H100), "--out", str(plain)])
    assert res.exit_code == 0, res.output
    assert "GPU comparison" not in plain.read_text()
    res = runner.invoke(app, ["report", "--data", str(H100), "--markdown", "--compare", "a100", "--out",
                              str(tmp_path / "t.md")])
    assert res.exit_code == 2 and "--compare goes with the HTML report" in res.output
