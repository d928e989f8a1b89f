"""Efficiency losses, padding, compiler efficacy and `gpudissect advise`, on synthetic data with
known answers (no GPU)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from test_predict import PTX
from typer.testing import CliRunner

from gpudissect.advise import efficiency as ef
from gpudissect.advise.report import efficiency_section
from gpudissect.arch.occupancy import occupancy_rules, predict_blocks
from gpudissect.arch.target import make_target
from gpudissect.cli import app
from gpudissect.report.read.results import ResultSet
from gpudissect.suites.behaviour import efficacy as eff
from gpudissect.suites.behaviour.view import efficacy_report_table

LAT, PEAK = 5.0, 3.0  # synthetic: deliberately not the H100's numbers
NSM = 10


def synthetic_rate(w: int, d: int) -> float:
    """A latency-bound then saturated pipe: W x d warp-instructions in flight per LAT cycles."""
    return min(w * d / LAT, PEAK)


def grid_record(name: str = "syn.op", ws=range(1, 9), ds=range(1, 5), hole: tuple[int, int] | None = None) -> dict:
    ws, ds = list(ws), list(ds)
    rows = [[None if hole == (w, d) else synthetic_rate(w, d) for d in ds] for w in ws]
    return {"variant": name, "measure": "grid", "value": PEAK, "unit": "warp_instr/cycle/SM", "flags": [],
            "params": {"warps": ws, "distances": ds}, "samples": {"rates": rows}}


def tp(name: str, chains: int, warps: int, value: float, flags=(), blocks: int = 1) -> dict:
    return {"variant": name, "measure": "throughput", "value": value, "unit": "warp_instr/cycle/SM",
            "flags": list(flags), "params": {"chains": chains, "warps": warps, "blocks_per_sm": blocks}}


@pytest.fixture(scope="module")
def rules() -> dict:
    return occupancy_rules(make_target("sm_90"))


# ----------------------------------------------------------------- efficiency of a variant
def test_grid_cells_and_distribution():
    cells = ef.cells_from_grid(grid_record(hole=(2, 2)))
    assert len(cells) == 8 * 4 - 1  # the missing cell is no cell
    d = ef.distribution(cells)
    assert d["max_rate"] == PEAK
    # within 5%: rate >= 0.95 * 3 = 2.85 -> W*d >= 14.25 -> W*d >= 15 (saturated cells)
    expect5 = sum(1 for c in cells if c.warps * c.chains >= 15)
    assert d["within"]["5%"] == round(expect5 / len(cells), 4)
    # within 50%: W*d >= 7.5
    assert d["within"]["50%"] == round(sum(1 for c in cells if c.warps * c.chains >= 7.5) / len(cells), 4)
    assert d["worst"][0]["warps"] == 1 and d["worst"][0]["chains"] == 1
    assert math.isclose(d["worst"][0]["efficiency"], round(1 / LAT / PEAK, 4))
    # the fewest warps reaching it: 4 warps x 4 chains (16 >= 15); 3 x 4 = 12 does not
    assert (d["fewest_warps"]["warps"], d["fewest_warps"]["chains"]) == (4, 4)
    assert sum(h["cells"] for h in d["loss_histogram"]) == len(cells)


def test_throughput_cells_skip_untrusted_records():
    recs = [tp("x", 1, 4, 1.0), tp("x", 4, 4, 4.2, flags=["exceeds-limit: 4.2 > 4"]), tp("x", 8, 4, 3.9),
            tp("x", 2, 64, 3.0, blocks=2), {**tp("x", 2, 8, 0), "value": None}]
    cells = ef.cells_from_throughput(recs)
    assert {(c.warps, c.chains) for c in cells} == {(4, 1), (4, 8), (64, 2)}
    assert next(c for c in cells if c.warps == 64).blocks == 2  # warps are per SM, in 2 blocks
    assert ef.best(cells).rate == 3.9


def test_rate_at_takes_the_nearest_measured_warps_below():
    cells = ef.cells_from_grid(grid_record())
    assert ef.rate_at(cells, 6, 2).warps == 6
    assert ef.rate_at(cells, 50, 2).warps == 8
    assert ef.rate_at(cells, 3, 7) is None


# ----------------------------------------------------------------- launches and padding
def test_launch_efficiency_fair_waves_and_tail(rules):
    # 128 threads, no registers/shared memory limit: threads/warps limit 16 blocks per SM
    one = ef.launch_efficiency(NSM, 128, 0, 0, rules, NSM)
    assert one["max_load"] == 1 and one["efficiency"] == 1.0 and one["waves"] == 1
    plus = ef.launch_efficiency(NSM + 1, 128, 0, 0, rules, NSM)
    assert plus["max_load"] == 2 and plus["idle_sms"] == 0
    assert math.isclose(plus["efficiency"], round((NSM + 1) / NSM / 2, 4))  # constant rate: placement only
    # an SM rate that saturates at 8 warps: one block of 4 warps per SM reaches half of it
    starved = ef.launch_efficiency(NSM, 128, 0, 0, rules, NSM, rate=lambda w: min(w, 8) / 8)
    assert starved["efficiency"] == 0.5
    # ... and the SM given two blocks runs them at the full rate: as long as the others
    both = ef.launch_efficiency(NSM + 1, 128, 0, 0, rules, NSM, rate=lambda w: min(w, 8) / 8)
    assert both["efficiency"] == round((NSM + 1) * 4 / NSM / 8, 4)
    # more blocks than slots: waves of 16 per SM
    many = ef.launch_efficiency(NSM * 16 + 1, 128, 0, 0, rules, NSM)
    assert many["fair_waves"] == 2 and many["last_wave_blocks"] == 1


def test_stacked_loads_keep_the_block_count():
    ls = ef.stacked_loads(NSM, 4, NSM)
    assert sum(ls) == NSM and max(ls) == 4 and ls.count(0) == NSM - 3
    assert ef.stacked_loads(NSM * 5, 4, NSM) == ef.fair_loads(NSM * 5, NSM)  # more than one wave


def test_padding_prediction(rules):
    # 16 warps per block: 64 registers allow 2 blocks per SM, 65 (over half the register file per
    # block, thesis procedure 8.18) allow 1
    assert predict_blocks(512, 64, 0, rules)["blocks"] == 2
    p = ef.padding(NSM, 512, 32, 0, rules, NSM)
    assert p["needed"] and p["padded_regs"] == 65 and p["padded_blocks_per_sm"] == 1
    assert p["worst_case_efficiency"] == round(1 / min(p["blocks_per_sm"], NSM), 4)
    # blocks of 4 warps: no register count brings them to one per SM; from 5 warps it can
    q = ef.padding(NSM, 128, 0, 0, rules, NSM)
    assert q["needed"] and q["padded_regs"] is None and q["padded_smem"] is not None
    assert predict_blocks(128, 0, q["padded_smem"], rules)["blocks"] == 1
    assert ef.min_paddable_warps(NSM, 4, 0, 0, rules, NSM) == 5
    # already at the fair share: nothing to pad
    assert not ef.padding(NSM, 1024, 64, 0, rules, NSM)["needed"]


def fairness_record(name: str, grid: int, threads: int, regs: int, maxes: list[int]) -> dict:
    return {"variant": name, "measure": "fairness", "value": None, "flags": [],
            "params": {"grid": grid, "threads": threads, "regs": regs, "smem": 0},
            "fit": {"per_launch": [{"max": m, "fair_max": -(-grid // NSM),
                                    "loss": round(1 - -(-grid // NSM) / m, 4)} for m in maxes]}}


def test_padding_check_against_placements(rules):
    rows = ef.padding_check([fairness_record("fairness:1x:live180", NSM, 512, 70, [1, 1, 1]),
                             fairness_record("fairness:1x:free", NSM, 512, 16, [1, 2, 1]),
                             fairness_record("fairness:bad", NSM, 512, 70, [2, 1, 1])], rules, NSM)
    g, free, bad = rows
    assert g["guaranteed"] and g["agrees"] is True
    assert not free["guaranteed"] and free["agrees"] is None and free["max_load"] == 2
    assert bad["guaranteed"] and bad["agrees"] is False  # the rules broken: the check says so


# ----------------------------------------------------------------- compiler efficacy
def test_efficacy_value_and_names():
    assert eff.efficacy_value(1.0, 2.0) == 0.5
    assert eff.efficacy_value(None, 2.0) is None and eff.efficacy_value(1.0, 0.0) is None
    (name, params, kernels), *_ = eff.probe_specs()
    assert name == f"efficacy:{params['variant']}"
    assert len(kernels) == 2 * 2 * len(eff.chain_counts())  # two builds x two lengths per chain count
    src = eff.cuda_kernel("fma.rn.f32", 4, 16)
    assert src.count("%%clock64") == 2 and '"+f"(x3)' in src  # the chains pinned inside the region


def test_efficacy_cuda_kernel_times_with_kernel_timing():
    """The nvcc kernel's timed region and row are kernel/timing.py's (cuda_repeated: the same
    layout as the verified kernel's repeated), each warp's row at its global warp index."""
    from gpudissect.kernel.timing import cuda_clock_read, cuda_repeated, row_words

    src = eff.cuda_kernel("mad.lo.u32", 2, 8)
    region = cuda_repeated(["for (int i = 0; i < 8; ++i) {", "  { unsigned& x = x0; x = x * a + b; }",
                            "  { unsigned& x = x1; x = x * a + b; }", "}"], eff.REPS, eff.REPS,
                           f"times + (size_t)(tid / 32) * {row_words(eff.REPS)}", pinned=('"+r"(x0)', '"+r"(x1)'))
    assert "\n".join(region) in src and eff.ROW == row_words(eff.REPS)
    assert cuda_clock_read("t0_", ('"+r"(x0)', '"+r"(x1)')) in src


SYNTH_SASS = """
.text.k:
        /*0000*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0010*/                   CS2R R4, SR_CLOCKLO ;
        /*0020*/                   MOV R2, RZ ;
        /*0030*/                   CS2R R8, SRZ ;
        /*0040*/                   IADD3 R21, R21, 0x1, RZ ;
.L_x_1:
        /*0050*/                   FFMA R3, R19, R3, R26 ;
        /*0060*/                   IADD3 R2, R2, 0x20, RZ ;
        /*0070*/                   ISETP.NE.AND P0, PT, R2, 0x80, PT ;
        /*0080*/               @P0 BRA `(.L_x_1) ;
        /*0090*/                   FFMA R3, R19, R3, R26 ;
        /*00a0*/                   STG.E.64 desc[UR4][R24.64], R14 ;
        /*00b0*/                   S2R R5, SR_TID.X ;
        /*00c0*/               @P1 BRA `(.L_x_2) ;
        /*00d0*/                   CS2R R6, SR_CLOCKLO ;
.L_x_2:
        /*00e0*/                   EXIT ;
"""


def test_efficacy_region_intrusions():
    """What kernel/timing.py keeps out of a timed region, found in an nvcc region: the
    harness's counter outside the work loop, a store, a special register read, a forward
    branch; the work loop (its counter, test and back edge), moves and zeroing pass."""
    from gpudissect.kernel.region import find_region
    from gpudissect.kernel.sass import labels_of, parse_sass

    labels = labels_of(SYNTH_SASS)  # predict/source.py's, which the efficacy probe reads
    assert labels == {"k": {".L_x_1": 0x50, ".L_x_2": 0xe0}}
    region = find_region(parse_sass(SYNTH_SASS)["k"].instrs)
    assert eff.region_intrusions(region, labels["k"], "FFMA") == [
        "IADD3 R21, R21, 0x1, RZ ;", "STG.E.64 desc[UR4][R24.64], R14 ;", "S2R R5, SR_TID.X ;", "@P1 BRA `(.L_x_2) ;"]
    assert eff.region_intrusions(region[:8], labels["k"], "FFMA") == ["IADD3 R21, R21, 0x1, RZ ;"]


def test_efficacy_kernels_compile_with_the_work_in_the_region():
    from gpudissect.catalog.model import load_catalog
    from gpudissect.kernel.build import build_module
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.kernel.region import kind_of
    from gpudissect.kernel.toolchain import ToolchainMissing, find_tool

    try:
        find_tool("nvcc")
        find_tool("ptxas")
    except ToolchainMissing:
        pytest.skip("no nvcc/ptxas")
    v = "mad.lo.u32"
    built = build_module(eff.ptx_kernels(load_catalog().get(v), ptx_header("8.0", "sm_90")), "sm_90")
    nv = eff.build_nvcc([v], built, "sm_90")
    for k in eff.chain_counts():
        a, b = (nv[eff.nvcc_name(v, k, n)] for n in eff.lengths(k, eff.NV_UNITS))
        main = eff.main_opcode(built[eff.pipe_name(eff.tag(v), k, eff.lengths(k)[1])])
        assert main == "IMAD"
        assert eff.region_flags(built[eff.pipe_name(eff.tag(v), k, eff.lengths(k)[1])], (a, b), main) == []
        for nvb in (a, b):  # kernel/timing.py's region: no store, barrier, special register or
            # branch of the harness between the two clock reads; the work loop's back edge alone
            assert nvb.kernel.meta["region_intrusions"] == []
            assert not any(kind_of(i.opcode) & {"barrier", "memory", "clock"} for i in nvb.region)
            branches = [i for i in nvb.region if "branch" in kind_of(i.opcode)]
            assert len(branches) <= 1 and all(i.opcode == "BRA" and i.predicate for i in branches)
        assert a.kernel.inputs == built[eff.pipe_name(eff.tag(v), k, eff.lengths(k)[0])].kernel.inputs


# ----------------------------------------------------------------- advise and the report
def _docs(instructions: list[dict], behaviour: list[dict]) -> dict[str, dict]:
    prov = {"arch": "sm_90", "gpu_name": "Synthetic GPU", "sm_count": NSM}
    return {s: {"schema": "gpudissect.suite/1", "suite": s, "summary": {}, "provenance": prov, "records": r}
            for s, r in (("instructions", instructions), ("behaviour", behaviour))}


def _efficacy_record() -> dict:
    return {"variant": "efficacy:syn.op", "measure": "efficacy", "value": 0.5, "unit": "ratio", "flags": [],
            "params": {"variant": "syn.op", "warps": 4, "chains": 2},
            "fit": {"verified": {"rate": 2.0, "regs": 30}, "nvcc": {"rate": 1.0, "regs": 20,
                                                                     "region_ops": {"IMAD": 8, "BRA": 1}}}}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    inst = [grid_record("syn.op"), grid_record("fma.rn.f64"), tp("tp.op", 1, 4, 1.0), tp("tp.op", 2, 4, 2.0), tp("tp.op", 4, 4, 3.9),
            tp("tp.op", 4, 8, 4.0), {"variant": "tp.op", "measure": "throughput_peak", "value": 4.0, "flags": [],
                                     "params": {"bound": "syn (100% of 4)"}}]
    beh = [_efficacy_record(), fairness_record("fairness:1x:free", NSM, 512, 16, [1, 2, 1])]
    for s, doc in _docs(inst, beh).items():
        (d / f"{s}.json").write_text(json.dumps(doc))
    return d


def _advise(*args: str):
    return CliRunner().invoke(app, ["advise", *args])


def test_advise_variant_from_throughput(data_dir: Path):
    r = _advise("tp.op", "--data", str(data_dir))
    assert r.exit_code == 0, r.output
    out = r.output
    assert "maximum: 4 warp-instr/clk/SM at 8 warps x 4 chains" in out
    assert "the fewest warps that reach it: 4 per SM with 4 independent chains" in out  # 3.9 >= 0.95 x 4
    assert "4 warps x 1 chain: 1 (25% of max) [throughput chains=1 warps=4]" in out
    assert "4 x 1, 2 x 2, 1 x 4" in out  # the splits of 4 warps into blocks
    assert "record throughput_peak: 4" in out
    assert "measured placements (behaviour `fairness`, 1 configurations): 1 put more" in out


def test_advise_variant_from_grid_with_efficacy(data_dir: Path):
    r = _advise("syn.op", "--data", str(data_dir))
    assert r.exit_code == 0, r.output
    assert "from the warps x distance grid" in r.output
    assert "the fewest warps that reach it: 4 per SM with 4 independent chains" in r.output
    assert "1 warp x 1 chain: 0.2 (6.7% of max) [grid W=1 d=1]" in r.output
    assert "compiler efficacy" in r.output and "4 warps x 2 chains: 0.500 (1 / 2)" in r.output


def test_advise_bad_inputs(data_dir: Path, tmp_path: Path):
    r = _advise("no.such.op", "--data", str(data_dir))
    assert r.exit_code == 2
    assert "'no.such.op' is neither a file nor a variant measured in" in r.output
    assert "Traceback" not in r.output
    r = _advise("tp.op", "--data", str(tmp_path / "missing"))
    assert r.exit_code == 2 and "error:" in r.output
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    r = _advise(str(junk), "--data", str(data_dir))
    assert r.exit_code == 2 and "not a cubin, PTX file or SASS listing" in r.output


def test_advise_kernel(tmp_path: Path):
    from gpudissect.kernel.toolchain import ToolchainMissing, find_tool

    try:
        find_tool("ptxas")
        find_tool("cuobjdump")
    except ToolchainMissing:
        pytest.skip("no ptxas/cuobjdump")
    d = tmp_path / "tables"
    d.mkdir()
    recs = [{"variant": "fma.rn.f32", "measure": "latency", "value": LAT, "unit": "", "flags": [], "sass": ["FFMA"]},
            {"variant": "fma.rn.f32", "measure": "throughput_peak", "value": PEAK, "unit": "", "flags": [],
             "sass": ["FFMA"]}]
    for s, doc in _docs(recs, []).items():
        (d / f"{s}.json").write_text(json.dumps(doc))
    src = tmp_path / "k.ptx"
    src.write_text(PTX.format(body="  fma.rn.f32 %f1, %f1, %f2, %f2;"))  # one chain
    r = _advise(str(src), "--data", str(d))
    assert r.exit_code == 0, r.output
    assert "registers per thread" in r.output and "cuobjdump -res-usage" in r.output
    assert "k loop 0" in r.output and "binding: recurrence" in r.output  # one chain at one warp
    # one block per SM of 512 threads: the rules allow 4, 65 registers per thread allow 1
    assert "512 threads: up to 4 per SM, pad registers to 65" in r.output


def test_efficiency_section(data_dir: Path):
    docs = {p.stem: json.loads(p.read_text()) for p in data_dir.glob("*.json")}
    rs = ResultSet("syn", "synthetic", docs)
    text = "\n".join(efficiency_section(rs))
    assert "## Efficiency losses and compiler efficacy" in text
    assert "| `syn.op` | 4 x 2 | 2 | 1 | 0.5 | 30 / 20 | IMAD 8, BRA 1 |" in text
    assert "| fairness:1x:free | 10 |" in text
    # the reference variant (data/advise.toml) in the per-variant table: max 3 at 4 x 4 (fewest warps),
    # 1 x 1 the worst (1/5 / 3)
    assert "| `fma.rn.f64` | grid | 32 | 3 (4 x 4) | 4 x 4 |" in text and "| 1 x 1: 7% |" in text
    assert "| `syn.op` |" not in text.split("Over the")[0]  # not a reference variant
    # its efficiency matrix: W=1 d=1 is 1/5 of 3 (7%), W=3 d=4 is 12/5 of 3 (80%), W=8 saturated
    assert "| 1 | 7% | 13% | 20% | 27% |" in text and "| 3 | 20% | 40% | 60% | 80% |" in text
    assert "| 8 | 53% | 100% | 100% | 100% |" in text
    assert efficiency_section(ResultSet("none", "none", {})) == []
    t = efficacy_report_table(rs)
    assert t is not None and t.key == "behaviour-efficacy" and [c.text for c in t.rows[0]][:5] == [
        "syn.op", "4 x 2", "2", "1", "0.5"]
    assert efficacy_report_table(None) is None


def test_cells_from_the_grid_modules_record_shape():
    """The record as suites/instructions/studies/grid.py writes it (params from its analyse, samples of
    rounded rates with None for a missing cell) gives the same maximum and fewest warps."""
    import numpy as np

    from gpudissect.suites.instructions.studies import grid

    ws, ds = list(range(1, 9)), list(range(1, 5))
    rates = np.array([[synthetic_rate(w, d) for d in ds] for w in ws])
    rates[1, 1] = np.nan
    params = {"warps": ws, "distances": ds, **grid.analyse(rates, np.zeros_like(rates), ws, ds)}
    rec = {"variant": "g", "measure": grid.GRID, "value": params["max_rate"], "flags": [], "params": params,
           "samples": {"rates": [[grid.sig(x) for x in row] for row in rates]}}
    cells = ef.cells_from_grid(rec)
    assert len(cells) == 31 and ef.best(cells).rate == params["max_rate"] == PEAK
    assert (ef.reaching(cells, 0.98)[0].warps, ef.reaching(cells, 0.98)[0].chains) == (
        params["min_warps"]["warps"], params["min_warps"]["distance"])


# ----------------------------------------------------------------- a kernel's memory (issue 32)
SAXPY_SASS = """
.text.saxpy:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   LDG.E.CONSTANT R2, desc[UR6][R2.64] ;
        /*0020*/                   LDG.E R11, desc[UR6][R4.64] ;
        /*0030*/                   IADD3 R0, R0, UR4, RZ ;
        /*0040*/                   FFMA R11, R2, UR5, R11 ;
        /*0050*/                   STG.E desc[UR6][R4.64], R11 ;
        /*0060*/                   ISETP.GE.AND P0, PT, R0, UR8, PT ;
        /*0070*/               @!P0 BRA `(.L_x_0) ;
        /*0080*/                   EXIT ;
"""

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "h200"


def _best_rate(output: str) -> float:
    return float(re.search(r"best predicted ([0-9.e+-]+) iterations/clk/SM", output).group(1))


@pytest.mark.slow
def test_advise_kernel_never_above_the_measured_dram_bandwidth(tmp_path: Path):
    """A saxpy whose data is in DRAM: the best rate advised moves at most the measured DRAM
    bandwidth (3 x 128 B per warp-iteration, over the GPU's SMs at the measurement's clock), and
    the output names DRAM as the binding level."""
    from gpudissect.predict.memory import load_hierarchy

    src = tmp_path / "saxpy.sass"
    src.write_text(SAXPY_SASS)
    r = _advise(str(src), "--data", str(SHIPPED), "--level", "dram")
    assert r.exit_code == 0, r.output
    assert "binding: bandwidth DRAM" in r.output and "from the measured DRAM bandwidth" in r.output
    h = load_hierarchy(SHIPPED)
    dram = h.levels["DRAM"]
    bytes_s = _best_rate(r.output) * 3 * 128 * h.sms * dram.read.sm_mhz * 1e6
    assert bytes_s <= dram.read.gb_s * 1e9 * 1.001  # the printed rate has 4 digits
    # the footprint beyond the measured L2 says the same; one within the L2 allows more
    big = _advise(str(src), "--data", str(SHIPPED), "--footprint", str(2 * h.levels["L2"].capacity))
    assert _best_rate(big.output) == _best_rate(r.output)
    mid = _advise(str(src), "--data", str(SHIPPED), "--footprint", str(h.levels["L2"].capacity / 2))
    assert "binding: bandwidth L2" in mid.output and _best_rate(mid.output) > _best_rate(r.output)


@pytest.mark.slow
def test_advise_kernel_without_a_hint_lists_every_level(tmp_path: Path):
    src = tmp_path / "saxpy.sass"
    src.write_text(SAXPY_SASS)
    r = _advise(str(src), "--data", str(SHIPPED))
    assert r.exit_code == 0, r.output
    assert "where the data is was not given" in r.output
    assert all(f"{k}: " in r.output for k in ("l1", "l2", "dram"))
    assert "a global store or atomic reaches the L2" in r.output
    bad = _advise(str(src), "--data", str(SHIPPED), "--level", "l3")
    assert bad.exit_code == 2 and "--level l3" in bad.output
