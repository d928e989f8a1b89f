"""Architectures as folders of data (issue 34): every folder's feature list agrees with the
installed ptxas (each feature's probe of data/features.toml is accepted exactly for the
architectures that list the feature), and every folder's limits, occupancy rules and tensor
peaks load through their readers, state their own values and cite their sources."""

from __future__ import annotations

import math
import re
import tomllib

import pytest

from gpudissect.arch import target as arch_target
from gpudissect.arch.limits import load_limits
from gpudissect.arch.occupancy import occupancy_rules, one_block_smem, predict_blocks
from gpudissect.arch.tensor_peaks import peak_for
from gpudissect.kernel import toolchain
from gpudissect.kernel.ptx import ptx_header

ARCHS = arch_target.supported_archs()
FEATURES = arch_target.known_features()
# the files of a folder that must state every key themselves (what they inherit is only what
# names nothing of the architecture: the suites' expectations of ptxas)
OWN = ("target", "limits", "occupancy")


def have_ptxas() -> bool:
    try:
        toolchain.find_tool("ptxas")
        return True
    except toolchain.ToolchainMissing:
        return False


needs_ptxas = pytest.mark.skipif(not have_ptxas(), reason="needs NVIDIA's ptxas")


def _own(arch: str, name: str) -> dict:
    path = arch_target.ARCH_DIR / arch / f"{name}.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


def probe_ptx(name: str, ptx_isa: str, target: str) -> str:
    """A module with one kernel: the feature's probe."""
    return (ptx_header(ptx_isa, target) + f".visible .entry probe_{name}()\n{{\n"
            + FEATURES[name]["ptx"].strip() + "\nret;\n}\n")


# --- the vocabulary -------------------------------------------------------------------------------
def test_every_feature_has_a_probe_and_a_source():
    for name, f in FEATURES.items():
        assert f.get("what"), name
        assert f.get("ptx", "").strip(), f"{name}: no PTX probe"
        assert f.get("source", "").strip(), f"{name}: no source"
        assert isinstance(f.get("specific", False), bool), name


@pytest.mark.parametrize("arch", ARCHS)
def test_feature_lists_name_known_features_and_their_specific_target(arch):
    t = arch_target.make_target(arch, "13.0")
    facts = t.facts["target"]
    assert t.features <= set(FEATURES), sorted(t.features - set(FEATURES))
    specific = set(facts.get("features_specific", ()))
    assert specific <= t.features, f"{arch}: features_specific not among its features"
    # an architecture-specific feature it has is compiled for its sm_XXa form
    need = {f for f in t.features if FEATURES[f].get("specific")}
    assert specific == need, f"{arch}: features_specific {sorted(specific)} != {sorted(need)}"
    if need:
        assert t.specific == f"{arch}a", f"{arch}: specific features need the sm_XXa target"
    else:
        assert t.specific in (arch, f"{arch}a")


# --- the probes against ptxas ---------------------------------------------------------------------
@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
def test_ptxas_accepts_a_probe_exactly_where_the_folder_lists_the_feature(arch):
    t = arch_target.make_target(arch)
    wrong, unknown = [], []
    for name, f in FEATURES.items():
        target = t.for_features(bool(f.get("specific")))
        try:
            toolchain.compile_ptx(probe_ptx(name, t.ptx_isa, target), target)
            accepted, why = True, ""
        except toolchain.PtxasError as e:
            if "is not defined for option 'gpu-name'" in e.message:
                unknown.append(target)  # a ptxas older (or newer) than the architecture
                continue
            accepted = False
            why = next((ln.split("error", 1)[-1].strip(" :") for ln in e.message.splitlines()
                        if "error" in ln), e.message[:200])
        listed = name in t.features
        if accepted != listed:
            wrong.append(f"{name} for {target}: ptxas {'accepts' if accepted else 'rejects'} "
                         f"the probe{(' (' + why + ')') if why else ''}, but {arch}/target.toml "
                         f"{'lists' if listed else 'does not list'} it")
    if unknown and not wrong and len(unknown) == len(FEATURES):
        pytest.skip(f"ptxas {toolchain.tool_version('ptxas')} does not know {sorted(set(unknown))}")
    assert wrong == [], "\n".join(wrong)


# --- the other files of a folder ------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_target_names_itself_and_cites_its_sources(arch):
    own = _own(arch, "target")
    text = (arch_target.ARCH_DIR / arch / "target.toml").read_text()
    assert own.get("arch", arch) == arch
    major, minor = own["compute_capability"].split(".")
    assert f"sm_{major}{minor}" == arch, own["compute_capability"]
    for key in ("specific", "features", "compute_capability", "max_warps_per_block", "registers_per_sm"):
        assert key in own, f"{arch}/target.toml: no {key}"
    comments = " ".join(ln for ln in text.splitlines() if ln.lstrip().startswith("#"))
    assert own.get("source") or re.search(r"PTX ISA|Programming Guide|ptxas", comments), \
        f"{arch}/target.toml cites no source"
    if own.get("paired_sass"):
        re.compile(own["paired_sass"])


@pytest.mark.parametrize("arch", ARCHS)
def test_a_folder_states_its_own_target_limits_and_occupancy(arch):
    """What a folder inherits is what names nothing of its architecture: its target, limits and
    occupancy files hold every key of the record (the limits' pipe list whole)."""
    facts = arch_target.arch_facts(arch)
    for name in OWN:
        own = _own(arch, name)
        assert own, f"{arch}: no {name}.toml of its own"
        missing = [k for k in facts[name] if k not in own and k not in ("inherits", "sources")]
        assert missing == [], f"{arch}/{name}.toml inherits {missing}"
    assert "issue" in _own(arch, "limits") and "pipe" in _own(arch, "limits")
    issue = _own(arch, "limits")["issue"]
    assert set(issue) >= {"schedulers_per_sm", "warp_instr_per_clk_per_scheduler", "warp_instr_per_clk", "source"}


@pytest.mark.parametrize("arch", ARCHS)
def test_limits_load_and_cite_their_own_sources(arch):
    lim = load_limits(arch)
    assert lim.arch == arch and lim.issue > 0 and lim.pipes
    own = _own(arch, "limits")
    assert own.get("gpu"), f"{arch}/limits.toml: no gpu"
    tags = set(own.get("sources", {}))
    for row in [own["issue"], *own["pipe"]]:
        cited = set(re.findall(r"\[(\w+)\]", row["source"]))
        assert cited <= tags, f"{arch}/limits.toml: {row.get('name', 'issue')} cites {sorted(cited - tags)}"
    for p in lim.pipes:
        assert p.warp_instr_per_clk <= lim.issue, p.name
        re.compile(p.pattern.pattern)
    names = [p.name for p in lim.pipes]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("arch", ARCHS)
def test_occupancy_rules_load_and_hold_together(arch):
    rules = occupancy_rules(arch_target.make_target(arch, "13.0"))
    assert _own(arch, "occupancy").get("source")
    assert rules["max_warps_per_sm"] * 32 == rules["max_threads_per_sm"]
    assert rules["max_smem_per_block"] <= rules["smem_per_sm"]
    assert rules["smem_carveouts_kib"][-1] * 1024 == rules["smem_per_sm"]
    full = predict_blocks(rules["max_threads_per_block"], 32, 0, rules)
    assert full["blocks"] == rules["max_threads_per_sm"] // rules["max_threads_per_block"]
    assert predict_blocks(32, 0, 0, rules)["blocks"] == min(rules["max_blocks_per_sm"], rules["max_warps_per_sm"])
    assert one_block_smem(rules) <= rules["max_smem_per_block"]


@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_peaks_load_and_fit_the_tensor_limits(arch):
    """Every product of the folder's own peaks file has a source and loads through peak_for; no
    tensor limit is tighter than a product's datasheet f16 peak per SM per clock."""
    gpus = _own(arch, "tensor_peaks").get("gpu", {})
    lim = load_limits(arch)
    flop = {"tensor-f16-m16n8k16": 4096, "tensor-f16-m16n8k8": 2048}
    for gpu, g in gpus.items():
        assert g.get("source") and g.get("sm_count"), gpu
        if "peaks_as" in g:
            assert g["peaks_as"] in gpus, f"{gpu}: peaks_as {g['peaks_as']} not in {arch}"
        keys = gpus[g.get("peaks_as", gpu)]["peaks"]
        for key in keys:
            p = peak_for(gpu, key)
            assert p is not None and p.tflops > 0 and p.clock_mhz > 0, (gpu, key)
            if key.endswith(":sparse"):
                dense = peak_for(gpu, key.split(":")[0])
                assert dense is not None, f"{gpu}: {key} without a dense figure"
                assert math.isclose(p.per_sm_per_cycle(), 2 * dense.per_sm_per_cycle(), rel_tol=0.02), (gpu, key)
        f16 = peak_for(gpu, "f16")
        for pipe in lim.pipes:
            if f16 and pipe.name in flop:
                assert pipe.warp_instr_per_clk * flop[pipe.name] >= f16.per_sm_per_cycle() * 0.99, (gpu, pipe.name)
