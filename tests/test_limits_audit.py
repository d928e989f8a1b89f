"""Physical limits (arch/limits.py) and the data audit (audit.py); no GPU."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
from report_synth import rec, write_data_dir

from gpudissect import DATA_DIR
from gpudissect.arch.limits import check, limit_for, load_limits
from gpudissect.audit import audit, main

# --- limits -----------------------------------------------------------------------------------


def test_limits_data_complete():
    lim = load_limits("sm_90")
    assert lim.issue == 4.0 and lim.schedulers == 4 and lim.issue_source
    names = {p.name for p in lim.pipes}
    assert {"fp32", "fp16x2", "fp64", "int-fma", "alu", "mufu", "conversion", "bitcount",
            "shfl"} <= names
    assert all(p.source for p in lim.pipes)
    # the target facts sit beside the limits, in the architecture's folder
    facts = tomllib.loads((DATA_DIR / "arch" / "sm_90" / "target.toml").read_text())
    assert facts["specific"] == "sm_90a"
    assert load_limits("sm_90a") is not None


def test_limit_for_ffma():
    lim = limit_for(["FFMA"], "sm_90")
    assert lim.value == 4.0 and lim.pipe == "fp32" and lim.lanes_per_sm == 128
    assert limit_for(["FFMA", "FFMA"], "sm_90").value == 2.0
    assert limit_for(["DFMA.RZ"], "sm_90").value == 2.0 and limit_for(["DFMA"], "sm_90").pipe == "fp64"
    assert limit_for(["MUFU.EX2"], "sm_90").value == 0.5
    assert limit_for(["SHFL.BFLY"], "sm_90").value == 1.0
    assert limit_for(["POPC"], "sm_90").value == 0.5 and limit_for(["F2I.TRUNC.NTZ"], "sm_90").value == 0.5


def test_limit_for_two_sass_instance():
    # IMAD on FMAheavy (2/clk), IADD3 on the ALU (0.5 per instance -> 4/clk), issue 4/1.5
    lim = limit_for(["IMAD.WIDE.U32", "0.5*IADD3"], "sm_90")
    assert lim.pipe == "int-fma" and lim.value == 2.0
    # MUFU binds over the conversion unit and the issue limit
    lim = limit_for(["I2F.U32.RP", "MUFU.RCP"], "sm_90")
    assert lim.value == 0.5 and lim.pipe in ("mufu", "conversion")
    # rows on one unit add up: FP16x2 shares the FMA pipes with FP32
    lim = limit_for(["HFMA2", "FFMA", "FFMA"], "sm_90")
    assert lim.unit == "fma" and math.isclose(lim.value, 4 / 3) and lim.per_instance == 3
    # 0.5 IMAD.IADD + 0.5 IADD3 (add.u16): each unit 4/clk, the issue limit 4/clk
    assert limit_for(["0.5*IMAD.IADD", "0.5*IADD3"], "sm_90").value == 4.0


def test_limit_for_unknown_opcode():
    lim = limit_for(["FOO.BAR"], "sm_90")
    assert lim.pipe == "issue" and lim.value == 4.0
    assert limit_for(["FOO", "BAR"], "sm_90").value == 2.0
    assert limit_for(["HFMA2.MMA"], "sm_90").pipe == "issue"  # not the fp16x2 row
    assert limit_for([], "sm_90") is None


def test_check_at_below_above():
    lim = limit_for(["FFMA"], "sm_90")
    assert check(4.0, lim) is None
    assert check(3.2, lim) is None
    assert check(4.05, lim) is None  # within the 2% tolerance
    flag = check(4.5, lim)
    assert flag.startswith("exceeds-limit: 4.5 > 4 warp-instr/clk/SM (fp32 pipe, 128 lanes/SM")
    assert "source" in flag and "cuda-c-programming-guide" in flag
    assert check(4.02, lim, tolerance=0.0).startswith("exceeds-limit: 4.02 > 4 ")
    assert check(float("nan"), lim) is None


# --- audit ------------------------------------------------------------------------------------


def _load(d: Path, suite: str) -> dict:
    return json.loads((d / f"{suite}.json").read_text())


def _save(d: Path, suite: str, doc: dict) -> None:
    (d / f"{suite}.json").write_text(json.dumps(doc))


def _record(doc: dict, variant: str, measure: str) -> dict:
    return next(r for r in doc["records"] if r["variant"] == variant and r["measure"] == measure)


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    return write_data_dir(tmp_path / "set")


def test_clean_set_no_problem(clean: Path, capsys):
    assert audit(clean) == []
    assert main(clean) == 0
    assert "no problem" in capsys.readouterr().out
    assert main(clean / "instructions.json") == 0


def test_limit_problem(clean: Path):
    doc = _load(clean, "instructions")
    _record(doc, "fma.rn.f32", "throughput_peak")["value"] = 4.5
    # a flagged value is not checked (it is not presented as clean)
    r = _record(doc, "add.f32", "throughput_peak")
    r["value"], r["flags"] = 9.0, ["warps-not-overlapping: warps ran one after another"]
    _save(clean, "instructions", doc)
    lines = audit(clean)
    assert len(lines) == 1
    assert lines[0].startswith("[limit] instructions fma.rn.f32 throughput_peak")
    assert "exceeds-limit: 4.5 > 4" in lines[0]


def test_a_throughput_is_checked_against_its_own_sass_mix(clean: Path):
    """A family whose kernels hold another mix than the map's (ptxas chose IMAD.X for some
    IADD3.X) is checked against its own (``params.own_sass``)."""
    doc = _load(clean, "instructions")
    r = _record(doc, "fma.rn.f32", "throughput_peak")
    r["value"], r["params"] = 3.0, {**(r.get("params") or {}), "own_sass": ["FFMA", "FFMA"]}
    _save(clean, "instructions", doc)
    lines = audit(clean)
    assert len(lines) == 1 and "exceeds-limit: 3 > 2" in lines[0]


def test_low_opt_problem(clean: Path):
    doc = _load(clean, "instructions")
    _record(doc, "add.f64", "latency")["strategy"] = "reg-O0"
    r = _record(doc, "mul.f64", "latency")  # flagged as such: not a problem
    r["strategy"], r["flags"] = "fib-O1", ["low-opt: timed from a ptxas -O1 kernel"]
    _record(doc, "popc.b32", "latency")["strategy"] = "reg-O1"  # no value: not a problem
    _save(clean, "instructions", doc)
    lines = audit(clean)
    assert len(lines) == 1
    assert lines[0].startswith("[opt] instructions add.f64 latency") and "-O0" in lines[0]


def test_provenance_problem(clean: Path):
    doc = _load(clean, "memory")
    del doc["provenance"]["driver"]
    doc["provenance"]["clocks_after"] = {"mem_mhz": 2000}
    _save(clean, "memory", doc)
    lines = audit(clean)
    assert len(lines) == 1
    assert lines[0].startswith("[provenance] memory:")
    assert "driver" in lines[0] and "SM clock after" in lines[0]


def test_in_kernel_clock_checked_where_present(clean: Path):
    doc = _load(clean, "tensor")
    doc["provenance"]["sm_clock"] = {"sm_mhz_kernel": 1755.2, "sms": 8}
    _save(clean, "tensor", doc)
    assert audit(clean) == []
    doc["provenance"]["sm_clock"] = {"sm_mhz_kernel_error": "RuntimeError: no device"}
    doc["provenance"]["sm_mhz_kernel"] = None
    _save(clean, "tensor", doc)
    lines = audit(clean)
    assert len(lines) == 1 and lines[0].startswith("[provenance] tensor:")
    assert "sm_mhz_kernel=None" in lines[0] and "not measured: RuntimeError" in lines[0]


def test_gpu_mix_problem(clean: Path):
    doc = _load(clean, "tensor")
    doc["provenance"]["gpu_uuid"] = "GPU-other-2"
    for r in doc["records"]:
        r["gpu_uuid"] = "other-2"
    _save(clean, "tensor", doc)
    lines = audit(clean)
    assert len(lines) == 1
    assert lines[0].startswith("[gpu] data set mixes 2 GPUs")
    assert "other-2: tensor" in lines[0] and "uuid-synth-1: instructions, memory, behaviour" in lines[0]


def test_noisy_on_identical_samples(clean: Path):
    doc = _load(clean, "instructions")
    r = _record(doc, "add.f32", "latency")
    r["flags"] = ["noisy: repeats spread 12%"]
    r["samples"] = {"8": [30.0, 30.0, 30.0], "16": [62.0, 62.0, 62.0]}
    r2 = _record(doc, "mul.f32", "latency")  # noisy with spread samples: consistent
    r2["flags"], r2["samples"] = ["noisy: repeats spread 50%"], {"8": [30.0, 45.0, 30.0]}
    _save(clean, "instructions", doc)
    lines = audit(clean)
    assert len(lines) == 1
    assert lines[0].startswith("[flags] instructions add.f32 latency") and "noisy" in lines[0]


def test_non_finite_value(clean: Path):
    doc = _load(clean, "memory")
    doc["records"][0]["value"] = float("inf")
    _save(clean, "memory", doc)
    lines = audit(clean)
    assert len(lines) == 1 and lines[0].startswith("[flags] memory sweep/ca-random latency")
    assert "inf" in lines[0]


def test_derived_value_drops_error_flag(clean: Path):
    doc = _load(clean, "instructions")
    src = rec("fma.rn.f32", "throughput", 3.9, "warp_instr/cycle/SM", cls="fp32",
              flags=["exceeds-limit: 5 > 4 warp-instr/clk/SM"], params={"chains": 4, "warps": 16},
              sass=["FFMA"])
    doc["records"].append(src)
    _save(clean, "instructions", doc)
    lines = audit(clean)
    assert len(lines) == 1
    assert lines[0].startswith("[flags] instructions fma.rn.f32 throughput_peak")
    assert "exceeds-limit" in lines[0]
    # carrying the flag (or having no value) is consistent
    _record(doc, "fma.rn.f32", "throughput_peak")["flags"] = ["exceeds-limit: inherited"]
    _save(clean, "instructions", doc)
    assert audit(clean) == []


def test_main_exit_codes(clean: Path, tmp_path: Path, capsys):
    assert main(clean) == 0
    doc = _load(clean, "instructions")
    _record(doc, "fma.rn.f32", "throughput_peak")["value"] = 4.5
    _save(clean, "instructions", doc)
    assert main(clean) == 1
    out = capsys.readouterr().out
    assert "[limit]" in out and "1 problems (limit: 1)" in out
    assert main(tmp_path / "missing") == 2
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json")
    assert main(bad) == 2
    assert "cannot read" in capsys.readouterr().out.splitlines()[-1]


def test_limit_problem_on_a_companion_pair(clean: Path):
    """A pair's throughput (the variant with its companion) is checked against the limit of the
    pair's SASS like any other throughput."""
    doc = _load(clean, "instructions")
    r = _record(doc, "fma.rn.f32", "throughput_peak")
    r["measure"], r["value"] = "throughput_peak_with_companion", 4.5
    _save(clean, "instructions", doc)
    lines = audit(clean)
    assert len(lines) == 1 and "throughput_peak_with_companion" in lines[0]


def test_sass_with_a_branch_has_no_limit_from_its_static_count():
    # a slow path not taken (sqrt.rn.f32): the static count is not what issues
    assert limit_for(["MUFU.RSQ", "BSSY", "BRA", "CALL.REL.NOINC", "FFMA", "BSYNC"], "sm_90") is None
    assert limit_for(["MUFU.RSQ", "FFMA"], "sm_90") is not None
