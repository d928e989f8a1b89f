"""The predictor's corpus of public kernels (corpus/README.md): specs, launches, buffers, the GPU
half on a fake GPU, and the shipped corpus itself (its cubins, index and sources)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gpudissect.arch.target import arch_table
from gpudissect.predict import PredictError
from gpudissect.predict.corpus import (
    Case,
    array_of,
    count_of,
    default_root,
    env_of,
    evaluate,
    launches,
    load_corpus,
    load_project,
    split_of,
)

RULES = arch_table("sm_90", "occupancy")

TOML = '''
[project]
repo = "someone/project"
commit = "0123456789abcdef0123456789abcdef01234567"
licence = "MIT"

[[kernel]]
name = "proj_axpy"
file = "axpy.cu"
symbol = "axpy"
path = "src/axpy.cu"
block = BLOCK
unroll = 2
args = [
  { buf = "x", type = "f32", count = "T * threads", init = "uniform" },
  { buf = "idx", type = "i32", count = "T * threads", init = "randint:T * threads" },
  { scalar = "i32", value = "T" },
]
cases = [ { category = "dram", trips = [64, 128, 256] },
          { category = "l2", trips = [8, 16, 32], warps = [1, 4] } ]
'''


def _project(tmp_path: Path, block: str = '"any"', text: str = TOML) -> Path:
    d = tmp_path / "proj"
    d.mkdir(exist_ok=True)
    (d / "kernels.toml").write_text(text.replace("BLOCK", block))
    return d


def test_expressions():
    env = {"T": 8, "threads": 1024}
    assert evaluate("T * threads", env) == 8192
    assert evaluate("4K + 2M", env) == 4096 + 2 * 1048576
    assert evaluate("max(T, 3) // 3 % 5", env) == 2
    for bad, why in (("T ** threads ; 1", "not arithmetic"), ("open('x')", "not allowed"), ("U * 2", "unknown name 'U'")):
        with pytest.raises(ValueError, match=why):
            evaluate(bad, env)
    with pytest.raises(ValueError, match="whole"):
        count_of("T / 3", env)


def test_project_loads_and_refuses_what_is_wrong(tmp_path):
    (k,) = load_project(_project(tmp_path))
    assert k.source == "someone/project@0123456789abcdef0123456789abcdef01234567:src/axpy.cu"
    assert k.block is None and k.unroll == 2 and k.cases[1] == Case("l2", (8, 16, 32), ("1", "4"))
    for old, new, why in (('category = "dram"', 'category = "disk"', "category 'disk'"),
                          ("trips = [64, 128, 256]", "trips = [64, 64, 256]", "three different"),
                          ('init = "uniform"', 'init = "gauss"', "init 'gauss'"),
                          ('licence = "MIT"\n', "", "no licence"),
                          ("block = BLOCK", "block = 48", "whole number of warps")):
        with pytest.raises(PredictError, match=why):
            load_project(_project(tmp_path, text=TOML.replace(old, new)))


def test_names_are_unique_and_only_selects(tmp_path):
    _project(tmp_path)
    d2 = tmp_path / "other"
    d2.mkdir()
    (d2 / "kernels.toml").write_text(TOML.replace("BLOCK", '"any"'))
    with pytest.raises(PredictError, match="named twice"):
        load_corpus(tmp_path)
    (d2 / "kernels.toml").write_text(TOML.replace("BLOCK", '"any"').replace("proj_axpy", "other_axpy"))
    assert [k.name for k in load_corpus(tmp_path, ("other",))] == ["other_axpy"]


def test_split_is_a_stable_hash_of_the_name():
    names = [f"k{i}" for i in range(300)]
    held = [n for n in names if split_of(n) == "held-out"]
    assert 0.25 < len(held) / len(names) < 0.42  # about one in three
    assert all(split_of(n) == split_of(n) for n in names)


def test_launches_follow_the_block_and_the_occupancy_rules(tmp_path):
    (k,) = load_project(_project(tmp_path))
    pts = {ln.point: ln for ln in launches(k, k.cases[0], regs=32, smem=0, rules=RULES)}
    assert [pts[p].warps for p in ("1", "4", "8", "16")] == [1, 4, 8, 16]
    assert pts["full"].warps == RULES["max_warps_per_sm"]  # 32 registers: every warp slot
    (k,) = load_project(_project(tmp_path, "[16, 16]"))  # 8 warps a block: 1 and 4 cannot be run
    pts = {ln.point: ln for ln in launches(k, k.cases[0], regs=128, smem=40 << 10, rules=RULES)}
    assert set(pts) == {"8", "16", "full"} and pts["16"].blocks_per_sm == 2
    assert pts["full"].warps < RULES["max_warps_per_sm"] and pts["full"].warps % 8 == 0


def test_buffers_are_valid_for_the_launch(tmp_path):
    from gpudissect.predict.corpus import Pool

    (k,) = load_project(_project(tmp_path))
    env = env_of(launches(k, k.cases[0], 32, 0, RULES)[1], sms=2, trips=64)
    assert env["threads"] == 2 * 128
    x, idx = (array_of(a, env, Pool()) for a in k.args[:2])
    assert x.dtype == np.float32 and len(x) == 64 * 256 and 0 <= x.min() and x.max() < 1
    assert idx.dtype == np.int32 and idx.max() < 64 * 256 and idx.min() >= 0
    rowptr = array_of({"buf": "r", "type": "i32", "count": "5", "init": "step:T"}, env, Pool())
    assert rowptr.tolist() == [0, 64, 128, 192, 256]


def _fake(cycles_per_trip: float):
    """A fake GPU whose every warp runs ``cycles_per_trip`` x T + 300 cycles, its SM's warps
    starting 0..(warps-1) x 7 cycles apart; blocks go to SMs round robin."""
    from gpudissect.device.device import FakeDevice

    def model(kernel, grid, block, args, smem):
        trips = next(int(a) for a in args if isinstance(a, np.generic))
        bw = math.prod(block if isinstance(block, tuple) else (block,)) // 32
        rows = []
        for b in range(grid):
            for w in range(bw):
                t0 = 1000 + 7 * w
                rows.append((t0, t0 + cycles_per_trip * trips + 300, b % 4))
        return {"gd_times": np.asarray(rows, dtype="i8").reshape(-1)}

    return FakeDevice(sm_count=4, launch_model=model)


def test_measure_corpus_on_a_fake_gpu(tmp_path):
    from gpudissect.predict.corpus_measure import measure_corpus

    d = _project(tmp_path)
    (d / "proj_axpy.sm_90.cubin").write_bytes(b"\x7fELF fake")
    (k,) = load_project(d)
    loop = {"start": 0, "end": 16, "sass": ["x"], "control_hi": ["0x0"], "sass_hash": "h"}
    index = {"kernels": {"proj_axpy": {**loop, "regs": 32, "smem_static": 0, "cubin_sha256": "s"}}}
    (rec,) = measure_corpus(_fake(10.0), [k], index, RULES, "sm_90", log=lambda *_: None)
    dram, l2 = rec["cases"]
    assert [p["point"] for p in dram["points"]] == ["1", "4", "8", "16", "full"]
    assert [p["point"] for p in l2["points"]] == ["1", "4"]
    for p in dram["points"] + l2["points"]:
        assert "error" not in p, p
        # the SM's span grows 10 cycles a source iteration: 20 a trip of the loop unrolled twice
        assert p["cycles_per_source_iter"] == pytest.approx(10.0) and p["cycles_per_iter"] == pytest.approx(20.0)
        assert p["fit_residual"] < 1e-9 and len(p["raw"]) == 3
    assert dram["points"][0]["footprint"] == 2 * 4 * 256 * 4 * 32  # x and idx at the largest T, 4 SMs x 1 warp
    (gone,) = measure_corpus(_fake(1.0), [k], {"kernels": {}}, RULES, "sm_90", log=lambda *_: None)
    assert "index.json" in gone["error"]


def test_a_failing_point_does_not_take_the_sweep_down(tmp_path):
    from gpudissect.device.device import FakeDevice
    from gpudissect.predict.corpus_measure import measure_corpus

    d = _project(tmp_path)
    (d / "proj_axpy.sm_90.cubin").write_bytes(b"\x7fELF fake")
    (k,) = load_project(d)

    def model(kernel, grid, block, args, smem):
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")

    index = {"kernels": {"proj_axpy": {"start": 0, "end": 0, "sass": [], "control_hi": [], "sass_hash": "",
                                       "regs": 32, "smem_static": 0, "cubin_sha256": ""}}}
    (rec,) = measure_corpus(FakeDevice(sm_count=4, launch_model=model), [k], index, RULES, "sm_90", log=lambda *_: None)
    assert all("ILLEGAL_ADDRESS" in p["error"] for c in rec["cases"] for p in c["points"])


# --- the shipped corpus ---------------------------------------------------------------------------

CORPUS = default_root()
DESCRIBED = load_corpus(CORPUS)  # the tracked descriptions (kernels.toml)
BUILT = (CORPUS / "index.json").is_file()  # the code and cubins: on a developer's machine only


def test_the_corpus_is_wide_and_every_kernel_names_its_source():
    projects = {k.project for k in DESCRIBED}
    assert len(DESCRIBED) >= 30 and len(projects) >= 10, (len(DESCRIBED), sorted(projects))
    for k in DESCRIBED:
        assert len(k.commit) == 40 and "/" in k.repo and k.licence and k.path and k.symbol, k.name
        for case in k.cases:
            assert launches(k, case, regs=32, smem=0, rules=RULES), (k.name, case)  # something runs
    assert {k.split for k in DESCRIBED} == {"train", "held-out"}


@pytest.mark.skipif(not BUILT, reason="the corpus is built on a developer's machine (corpus/README.md)")
@pytest.mark.parametrize("k", DESCRIBED, ids=lambda k: k.name)
def test_built_cubin_matches_its_index(k):
    """The index (what the GPU half reads) is the cubin's: its hash, and the loop the
    kernels.toml names found again between the clock reads; the code names its source."""
    from gpudissect.predict.corpus_loops import loop_of

    index = json.loads((CORPUS / "index.json").read_text())["kernels"]
    text = (k.folder / k.file).read_text()
    assert k.repo in text and "GD_START" in text and "GD_STOP" in text, k.name
    got = loop_of(k.cubin_path("sm_90").read_bytes(), k.symbol, k.loop)
    assert index[k.name] == {"arch": "sm_90", "project": k.project, **got}
