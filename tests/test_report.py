"""The results layer: report, timing reference, simulator export, compare, A100 reference, exports."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
from report_synth import (
    BANDWIDTH,
    TIMELINE_SMS,
    behaviour_doc,
    instructions_doc,
    memory_doc,
    write_data_dir,
)
from typer.testing import CliRunner

from gpudissect.cli import app
from gpudissect.report.assemble import html as report_html
from gpudissect.report.assemble.compare import (
    compare,
    compare_markdown,
    compare_sets,
    comparison_markdown,
    key_rows,
    reference_values,
    values,
)
from gpudissect.report.assemble.html import render_html
from gpudissect.report.assemble.simexport import accel_sim_config, simexport_data
from gpudissect.report.assemble.timing_reference import sections, timing_reference
from gpudissect.report.present.markdown import TimingContext
from gpudissect.report.present.tabular import read_parquet, write_parquet
from gpudissect.report.read.metrics import lookup
from gpudissect.report.read.results import LoadError, load_reference, load_result_set

H100 = Path(__file__).resolve().parents[1] / "data" / "h100"
runner = CliRunner()


@pytest.fixture
def full(tmp_path):
    return write_data_dir(tmp_path / "synth")


@pytest.fixture
def instr_only(tmp_path):
    return write_data_dir(tmp_path / "only", legacy_instructions=True, suites=("instructions",))


def test_load_suite_documents_and_legacy_list(full, instr_only):
    rs = load_result_set(full)
    assert rs.suites() == ["instructions", "memory", "tensor", "behaviour"]
    assert rs.gpu == "Synthetic GPU"
    legacy = load_result_set(instr_only)
    assert legacy.suites() == ["instructions"]
    assert "predates" in legacy.docs["instructions"]["provenance"]["note"]
    assert legacy.provenance()["gpu_uuid"] == "uuid-synth-1"
    with pytest.raises(LoadError):
        load_result_set(full / "nope")
    (full / "bad.json").write_text("{not json")
    with pytest.raises(LoadError, match="bad.json"):
        load_result_set(full)


def test_html_report_from_synthetic_data(full, monkeypatch):
    def draw(doc, outdir):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot([1, 2, 3], [30, 200, 500])
        p = outdir / "memory_staircase.png"
        fig.savefig(p)
        plt.close(fig)
        return [p]

    def broken(doc, outdir):
        raise RuntimeError("no data to draw")

    from gpudissect.kernel import parallel

    parallel.shutdown()  # an earlier test's compile workers: with their thread the figures would be drawn
    # in spawned processes, which do not see the stand-in modules below
    monkeypatch.setitem(sys.modules, "gpudissect.suites.memory.figures", types.SimpleNamespace(figures=draw))
    monkeypatch.setitem(sys.modules, "gpudissect.suites.behaviour.figures", types.SimpleNamespace(figures=broken))
    html = render_html(load_result_set(full), full)
    assert "<td><code>fma.rn.f32</code></td>" in html
    assert "L1 hit latency 30 cycles" in html  # memory conclusion
    assert "blocks are dispatched round-robin" in html  # behaviour finding
    assert "mma m16n8k16 f16 reaches 91% of peak" in html
    variants = _table(html, "tensor-variants")
    trow = re.search(r"<tr><td[^>]*><code>mma.sync.m16n8k16.f32.f16.f32</code>.*?</tr>", variants, re.S).group(0)
    assert ">33</td>" in trow and ">91</td>" in trow and ">500 TFLOP/s</td>" in trow  # latency, % of peak
    assert html.count("data:image/png;base64,") >= 2  # instructions scatter + memory staircase
    assert "figures_behaviour: drawing failed: RuntimeError: no data to draw" in html
    assert not re.search(r"""(src|href)=["']?https?:""", html)  # offline: nothing fetched
    # the unmeasured variant shows '-' with its flag, not a number
    row = re.search(r"<tr data-cls=\"bit\">.*?</tr>", html, re.S).group(0)
    assert "unverified" in row and ">-</td>" in row


def _table(html: str, key: str) -> str:
    m = re.search(rf'<table id="{key}".*?</table>', html, re.S)
    assert m, f"no table {key}"
    return m.group(0)


def _row(table: str, first: str) -> str:
    m = re.search(rf"<tr><td[^>]*>(<code>)?{re.escape(first)}(</code>)?</td>.*?</tr>", table, re.S)
    assert m, f"no row {first}"
    return m.group(0)


def test_html_report_reads_first_and_folds_the_raw_dumps(full):
    """Key tables before findings, figures and raw dumps; findings as a table; every raw dump
    closed; units and dates for people (formatting only: the stored values are unchanged)."""
    html = render_html(load_result_set(full), full)
    assert "<details open" not in html and "<ul" not in html  # dumps folded, no bullet lists
    mem = html[html.index('<section id="memory">'):html.index('<section id="tensor">')]
    order = [mem.index(x) for x in ('id="memory-levels"', 'id="memory-findings"', "<figure>", "Summary data as stored",
                                    "Records (")]
    assert order == sorted(order), order
    for suite, key in (("tensor", "tensor-peaks"), ("behaviour", "behaviour-verdicts")):
        sec = html[html.index(f'<section id="{suite}">'):]
        assert sec.index(f'id="{key}"') < sec.index("Summary data as stored")
    assert "L1 hit latency 30 cycles" in _table(html, "memory-findings")
    levels = _table(html, "memory-levels")
    assert ">256 KiB – 384 KiB</td>" in levels and ">50 MiB – 64 MiB</td>" in levels  # capacities
    assert "3 TB/s (12 B/clk/SM)" in levels and ">128 B</td>" in levels
    quantities = html[html.index('<section id="quantities">'):html.index('<section id="instructions">')]
    assert ">256</td><td>KiB</td>" in quantities and ">3</td><td>TB/s</td>" in quantities
    prov = html[html.index('<section id="provenance">'):]
    assert "2023-11-14 22:13:20 UTC" in prov and "2023-11-14 22:14:20 UTC" in prov  # started, finished
    assert not re.search(r"\d\.\d+e\+0?9", html)  # no Unix time printed as a float anywhere
    verdicts = _table(html, "behaviour-verdicts")
    assert "2 of 2 configurations match the CUDA occupancy rules" in verdicts
    assert "breadth-first (synthetic)" in verdicts


def test_tensor_units_follow_the_type(full):
    """TFLOP/s for floating point, TOP/s for integer and binary types, TB/s for fragment loads;
    the suite's numbers unchanged."""
    from gpudissect.suites.tensor.view import BYTES, FLOAT, INTEGER, op_kind

    assert op_kind("mma.sync.m16n8k16.f32.f16.f32") is FLOAT and op_kind("wgmma.f32.e4m3") is FLOAT
    assert op_kind("mma.sync.m16n8k32.s32.s8.s32") is INTEGER and op_kind("wgmma.s32.b1.and.popc") is INTEGER
    assert op_kind("mma.sp.m16n8k64.s32.u4.s32") is INTEGER and op_kind("ldmatrix.m8n8.x4.b16") is BYTES
    assert op_kind("wmma.load.a.m16n16k16.row.s8") is BYTES
    t = _table(render_html(load_result_set(full), full), "tensor-variants")
    assert "1422 TOP/s" in _row(t, "mma.sync.m16n8k32.s32.s8.s32")
    b1 = _row(t, "mma.sync.m16n8k256.s32.b1.s32.and.popc")
    assert "11377 TOP/s" in b1 and "43529 OP/cycle/SM" in b1 and "TFLOP" not in b1
    assert "33.5 TB/s" in _row(t, "ldmatrix.m8n8.x4.b16") and "128 B/cycle/SM" in _row(t, "ldmatrix.m8n8.x4.b16")


def test_units_and_dates_are_formatting_only():
    from gpudissect.report.present.fmt import (
        fmt_bandwidth,
        fmt_bytes,
        fmt_keyed,
        fmt_quantity,
        fmt_sig,
        fmt_timestamp,
    )

    assert fmt_bytes(262144) == "256 KiB" and fmt_bytes(23726592.0) == "22.63 MiB"
    assert fmt_bytes(34359738368) == "32 GiB" and fmt_bytes(32) == "32 B" and fmt_bytes(None) == "-"
    assert fmt_bandwidth(3079.06) == "3.079 TB/s" and fmt_bandwidth(718.2) == "718.2 GB/s"
    assert fmt_timestamp(1795474314.2298043) == "2026-11-23 22:51:54 UTC" and fmt_timestamp("x") == "-"
    assert fmt_quantity(220416.0, "bytes") == ("215.2", "KiB") and fmt_quantity(32.5, "cycles") == ("32.5", "cycles")
    assert fmt_keyed("time", 1.7e9) == "2023-11-14 22:13:20 UTC" and fmt_keyed("time", 5.0) == "5"
    assert fmt_keyed("footprint", 98304) == "96 KiB" and fmt_keyed("compile_s", 66.17) == "66.2 s"
    assert fmt_sig(43529.1) == "43529" and fmt_sig(0.015625) == "0.01562"


def _drawn(monkeypatch, module, draw, doc, tmp_path):
    """Call a figure function, keeping the figure it saves (and its bands) for inspection."""
    kept = {}

    def keep(fig, outdir, stem, dpi=120, bands=None, group=None):
        kept.update(fig=fig, stem=stem, bands=bands)
        return []

    monkeypatch.setattr(module, "_save", keep)
    draw(doc, tmp_path)
    return kept


def test_bandwidth_bars_are_linear_from_zero(monkeypatch, tmp_path):
    from gpudissect.suites.memory import figures as mf

    kept = _drawn(monkeypatch, mf, mf.bandwidth, memory_doc(), tmp_path)
    ax = kept["fig"].axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == sorted(g / 1000 for _, g, _ in BANDWIDTH)  # the same rates, in TB/s
    assert kept["bands"].count == len(BANDWIDTH) and kept["bands"].axis == "x"


def test_dispatch_timeline_has_a_row_per_sm(tmp_path):
    from gpudissect.suites.behaviour.figures import lanes, timeline

    doc = behaviour_doc()
    paths = timeline(doc, tmp_path, "dispatch:1d-free")
    assert [p.suffix for p in paths] == [".png", ".svg"]
    meta = json.loads((tmp_path / "behaviour_timeline_1d-free.meta.json").read_text())
    assert meta["bands"]["count"] == TIMELINE_SMS and meta["bands"]["axis"] == "y"
    import numpy as np

    lane, need = lanes(np.array([0, 0, 0, 1]), np.array([0.0, 1.0, 5.0, 0.0]), np.array([4.0, 3.0, 6.0, 1.0]))
    assert list(lane) == [0, 1, 0, 0] and need == {0: 2, 1: 1}  # blocks resident at once side by side


def test_timing_reference_sections(full, instr_only):
    md = timing_reference(load_result_set(full))
    for heading in ("## Preliminary explanations", "## Occupancy table", "## Instruction scheduling",
                    "## Memory", "## Bank conflicts", "## Tensor cores", "### fp32"):
        assert heading in md
    assert "| occ:r128 | 128 | 16 | 16 |" in md  # occupancy row from the behaviour summary
    assert "| 8 | 2 | 4 |" in md and "#### access w32" in md  # bank-conflict table
    assert "4 schedulers per SM, measured" in md
    assert "| `mma.sync.m16n8k16.f32.f16.f32` | mma | HMMA.16816.F32 | 33 | 1 | - | 500 | 91 |" in md
    assert re.search(r"\| `fma.rn.f32` \| FFMA \| 4 \| 4 \| 1 \| 2 \| 1 \|", md)
    bare = timing_reference(load_result_set(instr_only))
    assert "_not measured_ (no occupancy table" in bare
    assert "bank-conflict rule: _not measured_" in bare
    assert "| L1 hit latency | _not measured_ |" in bare
    assert "4 schedulers per SM assumed" in bare


def test_simexport_lines_name_their_measurement(full, instr_only):
    cfg = accel_sim_config(simexport_data(load_result_set(full)))
    opts = {}
    for line in cfg.splitlines():
        if line and not line.startswith("#"):
            assert "  # " in line, line  # every option has a comment
            opt, rest = line.split(" ", 1)
            opts[opt] = rest.split("  # ")[0]
    assert opts["-ptx_opcode_latency_int"] == "4,4,4,4,60"
    assert opts["-ptx_opcode_initiation_int"] == "2,2,2,2,16"  # 4 schedulers / throughput
    assert opts["-ptx_opcode_latency_fp"] == "4,4,4,4,57"
    assert opts["-ptx_opcode_latency_tesnor"] == "33"
    assert opts["-ptx_opcode_initiation_tensor"] == "4"
    assert opts["-gpgpu_l1_latency"] == "30"
    assert opts["-gpgpu_l2_rop_latency"] == "170"  # L2 200 - L1 30
    assert opts["-dram_latency"] == "300"  # 500 - 200
    assert opts["-gpgpu_smem_latency"] == "25"
    assert opts["-gpgpu_n_clusters"] == "8"
    assert opts["-gpgpu_num_sched_per_core"] == "4"
    assert "-trace_opcode_latency_initiation_sp" in opts
    assert "# -gpgpu_cache:dl1 (not set: needs sets:line:associativity" in cfg
    bare = accel_sim_config(simexport_data(load_result_set(instr_only)))
    assert "# -gpgpu_l1_latency (not set: L1 hit latency not measured)" in bare
    assert "# -ptx_opcode_latency_tesnor (not set:" in bare
    assert "\n-ptx_opcode_latency_dp 8,25,8,8,124  # " in bare


def test_compare_highlights_differences(tmp_path, full):
    b = tmp_path / "b"
    write_data_dir(b, suites=("memory",))
    doc = instructions_doc(scale=1.0)
    for r in doc["records"]:
        if r["variant"] == "add.f32" and r["measure"] == "latency":
            r["value"] = 6.0
    (b / "instructions.json").write_text(json.dumps(doc))
    ra, rb = load_result_set(full), load_result_set(b)
    rows = {r.key: r for r in compare(ra, rb, threshold=0.1)}
    assert rows["instr/add.f32/latency"].differs and rows["instr/add.f32/latency"].rel == pytest.approx(0.5)
    assert not rows["instr/fma.rn.f32/latency"].differs
    assert not any(r.differs for k, r in rows.items() if k != "instr/add.f32/latency")
    md = compare_markdown(ra, rb, list(rows.values()), 0.1)
    assert "| `instr/add.f32/latency` | 4 | 6 | cycles | **+50%** |" in md
    res = runner.invoke(app, ["compare", str(full), str(b), "--full", "--only-diff", "--markdown", str(tmp_path / "c.md"),
                              "--html", str(tmp_path / "c.html"), "--json", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    assert "1 quantities compared" in res.output
    assert 'class="differs"' in (tmp_path / "c.html").read_text()
    assert json.loads((tmp_path / "c.json").read_text())["rows"][0]["key"] == "instr/add.f32/latency"


def test_compare_three_sets_and_key_quantities(tmp_path, full, monkeypatch):
    b = write_data_dir(tmp_path / "b")
    (b / "instructions.json").write_text(json.dumps(instructions_doc(scale=1.5, gpu="Second GPU")))
    sets = [load_result_set(full), load_result_set(b), load_result_set("a100")]
    rows = {r.key: r for r in compare_sets(sets, threshold=0.1)}
    # A100 Table V (3 independent instructions / 3) meets the measured independent issue, not
    # the dependent-chain latency; Table II's dependent CPI meets the latency
    fma = rows["instr/fma.rn.f32/independent"]
    assert [v.value for v in fma.values] == [1, 1, 2] and fma.rels[1:] == [0, 1.0] and fma.partial
    assert "method 'table_v'" in fma.notes and "same method" in fma.notes
    assert "instr/fma.rn.f32/latency" not in rows  # the A100 has no dependent figure for it
    add = rows["instr/add.u32/latency"]
    assert [v.value for v in add.values] == [4, 6, 4] and "Table II row II.2 (CPI for dependent)" in add.notes
    assert rows["quantity/l1_latency"].diffs == [False, False, True]  # 30 vs 30 vs 33 cycles: +10%
    md = comparison_markdown(sets, list(rows.values()), 0.1)
    assert "| quantity | A: Synthetic GPU | B: Second GPU | C: A100 (reference) | unit | B vs A | C vs A |" in md
    assert "| `instr/add.u32/latency` | 4 | 6 | 4 | cycles | **+50%** | +0% |" in md
    assert "* `table_v`: Table V 'cycles'" in md
    # the key view: data/metrics.toml's grouped quantities, the tensor peaks the best dense rate
    f16 = lookup(sets[0], "tensor_f16_peak")
    assert (f16.value, f16.unit) == (500.0, "TFLOP/s") and "highest of 1" in f16.source
    assert lookup(sets[0], "tensor_int8_peak").value == 1422.0  # not the b1 mma nor ldmatrix
    key = {r.label: r for r in key_rows([values(s) for s in sets], 0.1)}
    assert key["tensor peak f16 (dense, burst)"].values[2].text == "311-312"  # A100 Table III, f16 inputs
    assert key["tensor peak int8 (dense, burst)"].values[2].text == "594-624"
    assert [v and v.value for v in key["FFMA latency (fma.rn.f32)"].values] == [4, 6, None]
    assert key["DRAM bandwidth (read, burst)"].values[2] is None
    res = runner.invoke(app, ["compare", str(full), str(b), "a100", "--key", "--only-diff"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "FFMA latency" in res.output and "C: A100 (reference)" in res.output
    monkeypatch.setattr(report_html, "figures_by_suite", lambda docs, *a, **k: {s: [] for s in docs})
    html = render_html(sets[0], full, sets[1:])
    assert '<section id="comparison">' in html and ">B: Second GPU</th>" in html
    assert "GPU comparison" not in render_html(sets[0], full)


def test_a100_reference_has_source_and_tables(full):
    ref = load_reference("a100")
    assert "arXiv:2208.11174" in ref["source"]["citation"]
    t = ref["tables"]
    assert len(t["V"]["rows"]) == 110 and all(r["row"].startswith("V.") and r["cycles_text"] for r in t["V"]["rows"])
    assert {r["metric"]: r["cycles"] for r in t["IV"]["rows"]} == {
        "cv_latency": 290, "l2_latency": 200, "l1_latency": 33, "smem_ld_latency": 23, "smem_st_latency": 19}
    assert len(t["III"]["rows"]) == 7 and len(t["II"]["rows"]) == 5
    vals = reference_values(ref)
    assert vals["instr/add.u32/latency"].value == 4  # Table II dependent CPI
    assert vals["instr/add.u32/independent"].value == 2  # Table II independent; Table V cited there
    assert "Table II row II.2" in vals["instr/add.u32/latency"].note
    assert "also Table V row V.3" in vals["instr/add.u32/independent"].note
    assert vals["instr/sqrt.rn.f32/independent"].text == "190-235"
    rows = {r.key: r for r in compare(load_result_set(full), load_result_set("a100"))}
    assert rows["quantity/l1_latency"].b.value == 33 and rows["quantity/l1_latency"].a.value == 30
    assert "Table IV" in rows["quantity/l1_latency"].b.note


def test_parquet_round_trip(tmp_path, full):
    recs = load_result_set(full).records()
    n = write_parquet(recs, tmp_path / "r.parquet")
    back = read_parquet(tmp_path / "r.parquet")
    assert n == len(back) == len(recs)
    for a, b in zip(recs, back, strict=True):
        assert (b["suite"], b["variant"], b["measure"], b["value"], b["flags"], b["sass"], b["params"]) == (
            a["suite"], a["variant"], a["measure"], a["value"], a["flags"], a["sass"], a["params"])


def test_cli_report_markdown_simexport_export(tmp_path, full):
    out = tmp_path / "out"
    for args in (["report", "--data", str(full), "--out", str(out / "r.html")],
                 ["report", "--data", str(full), "--markdown", "--out", str(out / "t.md")],
                 ["report", "--data", str(full), "--accel-sim", "--out", str(out / "a.config")],
                 ["simexport", "--data", str(full), "--out", str(out / "b.config")],
                 ["export", str(out / "r.parquet"), "--format", "parquet", "--data", str(full)],
                 ["export", str(out / "r.csv"), "--format", "csv", "--data", str(full), "--suite", "memory"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, (args, res.output)
    assert (out / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((out / "a.json").read_text())["schema"] == "gpudissect.simexport/1"
    assert len((out / "r.csv").read_text().splitlines()) == 1 + len(memory_doc()["records"])
    res = runner.invoke(app, ["report", "--data", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such file" in res.output


@pytest.mark.slow
@pytest.mark.skipif(not (H100 / "instructions.json.xz").exists(), reason="no committed H100 data")
def test_committed_h100_data_renders():
    rs = load_result_set(H100)
    assert rs.provenance().get("driver")  # the suite documents (.json.xz) carry it
    md = timing_reference(rs)
    assert "## Instruction timings by class" in md and "`fma.rn.f32`" in md
    cfg = accel_sim_config(simexport_data(rs))
    assert re.search(r"^-ptx_opcode_latency_fp \d+,\d+,\d+,\d+,\d+  # ", cfg, re.M)
    rows = compare(rs, load_result_set("a100"))
    assert any(r.key == "instr/fma.rn.f32/independent" for r in rows)


def test_timing_reference_has_a_section_per_other_suite(full, monkeypatch):
    import gpudissect.suites as suites

    rs = load_result_set(full)
    rs.docs["extra"] = {"suite": "extra", "provenance": {}, "records": [],
                        "summary": {"conclusions": ["Cluster of 16: refused (the driver's reason)."]}}
    # any registered shape whose view lists no timing sections of its own
    monkeypatch.setitem(suites.SUITES, "extra", "gpudissect.suites.cluster")
    md = timing_reference(rs)
    head = f"## {suites.get_suite('cluster').description[:1].upper()}"
    assert head in md and "(suite `extra`)" in md
    assert "- Cluster of 16: refused (the driver's reason)." in md
    assert md.index("## Instruction timings by class") < md.index("(suite `extra`)")


# the suites' main tables, and their long dumps (after every main table)
MAIN_TABLES = ("## Occupancy table", "## Instruction scheduling and issue rules", "## Memory", "## Bank conflicts",
               "## Tensor cores")
LONG_DUMPS = ("## Instruction configurations", "## Throughput grid", "## Per-SASS steps",
              "## Block dispatch and block -> SM placement")


def _heading_lines(md: str, heads: tuple[str, ...]) -> dict[str, int]:
    lines = md.splitlines()
    return {h: next(i for i, line in enumerate(lines) if line.startswith(h)) for h in heads
            if any(line.startswith(h) for line in lines)}


def test_timing_reference_opens_with_the_instruction_table(full):
    """Right after the preamble the instruction table (the first lines any suite writes), then
    the other main tables, the long dumps last; the shipped references are in that order."""
    rs = load_result_set(full)
    ctx = TimingContext(rs, 4)
    first = next(lines for s in sections() if (lines := s.lines(ctx)))
    assert first[0] == "## Instruction timings by class"
    shipped = [(H100.parent / gpu / "timing-reference.md").read_text() for gpu in ("h100", "h200")]
    for md in (timing_reference(rs), *shipped):
        at = _heading_lines(md, ("## Instruction timings by class",))["## Instruction timings by class"]
        main, dumps = _heading_lines(md, MAIN_TABLES), _heading_lines(md, LONG_DUMPS)
        assert len(main) == len(MAIN_TABLES)
        assert at < min(main.values()) and max(main.values()) < min(dumps.values(), default=len(md))
    for md in shipped:
        lines = md.splitlines()
        assert len(dumps := _heading_lines(md, LONG_DUMPS)) == len(LONG_DUMPS)
        assert _heading_lines(md, ("## Instruction timings by class",))["## Instruction timings by class"] < 100
        assert all(lines[i:] and i > len(lines) / 2 for i in dumps.values())


def test_timing_reference_lists_operand_and_guarded_latencies():
    from gpudissect.suites.instructions.view import configuration_lines as _operand_section
    from gpudissect.suites.instructions.view import instruction_rows

    def rec(m, v, flags=(), params=None):
        return {"variant": "fma.rn.f32", "measure": m, "value": v, "flags": list(flags), "sass": ["FFMA"],
                "params": params or {}}

    rows = instruction_rows([rec("latency", 4.0), rec("latency_operand_1", 4.0), rec("latency_operand_3", 4.5),
                             rec("latency_operand_2", None, ["unverified: two slots"]),
                             rec("latency_guarded_true", 4.0), rec("latency_guarded_false", 2.0),
                             rec("latency_read_read", 1.0, params={"verdict": "same"}),
                             rec("control_read_read", 1.0),
                             rec("latency_write_write", None, ["not timed: select"])])
    md = "\n".join(_operand_section(rows))
    assert ("| write-read | read-read | its control | vs control | write-write | its control | vs control | "
            "guard true | guard false | op 1 | op 2 | op 3 |") in md
    assert "| `fma.rn.f32` | FFMA | 4 | 1 | 1 | same | - (not timed) |  |  | 4 | 2 | 4 | - (unverified) | 4.5 |" in md
    assert "read-read against its control: same 1; write-write against its control: none timed." in md
    assert _operand_section(instruction_rows([rec("latency", 4.0)])) == []


def test_timing_reference_shows_the_predictor_validation_beside_the_data(full):
    import gzip

    from gpudissect.predict.validate import METHODS

    one = {"n": 4, "mape": 0.05, "within5": 0.5, "within10": 1.0, "tau": 0.9}
    doc = {"schema": "gpudissect.predict-validation/1", "gpu": {"name": "FakeGPU", "uuid": "GPU-x"},
           "loops": [{}, {}], "analysis": {"stats": {"generated": dict.fromkeys(METHODS, one)}}}
    (full / "predict-validation.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    rs = load_result_set(full)
    assert rs.validation is not None and "predict-validation.json.gz" not in rs.extras
    md = timing_reference(rs)
    assert "## How well the tables predict real code" in md and "2 loops measured on FakeGPU `GPU-x`" in md
    assert re.search(r"generated\s+4\s+5\.0%\s+50\.0%\s+100\.0%\s+0\.90", md)


def test_every_suite_figures_module_is_found_through_the_registry(tmp_path):
    """A suite whose package name differs from its registry name (async: async_copy) has its
    figures drawn too (they were once looked up by the registry name and never found)."""
    from gpudissect.report.assemble.suite_figures import suite_figures

    rs = load_result_set(Path(__file__).resolve().parents[1] / "data" / "h100")
    warnings: list[str] = []
    figs = suite_figures("async", rs.docs["async"], tmp_path, None, warnings)
    assert figs and all(f.suite == "async" for f in figs), warnings


def test_figures_drawn_in_parallel_are_those_drawn_one_by_one(full, tmp_path):
    """The report draws each suite's figures in a process of its own (issue 36): the same
    pictures, byte for byte, and the warnings in the suites' order, as drawn in this process;
    only the PNG the report embeds is drawn."""
    from gpudissect.report.assemble.suite_figures import figures_by_suite

    rs = load_result_set(full)
    docs = {s: rs.docs[s] for s in rs.suites()}
    docs["broken"] = {"records": [{"bad": 1}]}  # no figures module: a warning-free empty list
    seen: list[str] = []
    w1: list[str] = []
    w2: list[str] = []
    one = figures_by_suite(docs, tmp_path / "one", full, w1, jobs=1)
    two = figures_by_suite(docs, tmp_path / "two", full, w2, jobs=2, progress=seen.append)
    assert list(two) == list(docs) and sorted(seen) == sorted(docs)
    assert sum(len(f) for f in one.values()) >= 3
    assert {s: [(f.name, f.mime, f.data_uri, f.meta) for f in v] for s, v in one.items()} == \
        {s: [(f.name, f.mime, f.data_uri, f.meta) for f in v] for s, v in two.items()}
    assert w1 == w2
    assert all(f.mime == "image/png" for v in two.values() for f in v)
    assert not list((tmp_path / "two").rglob("*.svg"))


def test_only_formats_limits_what_save_figure_writes(tmp_path):
    import matplotlib.pyplot as plt

    from gpudissect.report.present.plotting import only_formats, save_figure

    def draw(stem):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        return [p.name for p in save_figure(fig, tmp_path, stem)]

    assert draw("both") == ["both.png", "both.svg"]
    with only_formats("png"):
        assert draw("png") == ["png.png"]
    assert draw("again") == ["again.png", "again.svg"]  # the default back after the block
    with pytest.raises(ValueError):
        with only_formats("pdf"):
            pass


def test_figures_are_drawn_here_where_no_process_can_be_started(full, tmp_path, monkeypatch):
    from gpudissect.report.assemble import suite_figures as sf

    def no_pool(*a, **k):
        raise PermissionError("no semaphores here")

    rs = load_result_set(full)
    docs = {s: rs.docs[s] for s in rs.suites()}
    monkeypatch.setattr(sf, "ProcessPoolExecutor", no_pool)
    figs = sf.figures_by_suite(docs, tmp_path, full, [], jobs=2)
    assert list(figs) == list(docs) and sum(len(f) for f in figs.values()) >= 3
