"""The target: one object made once from the GPU or ``--arch`` and passed down.

It carries the architecture (``sm_90``), its architecture-specific form (``sm_90a``: wgmma,
setmaxnreg), the PTX ISA version the installed ptxas accepts, and the architecture's facts
from ``data/arch/<arch>.toml`` (reference data: features, occupancy rules, issue and pipe
limits). Nothing below the command line carries a default architecture.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache

from gpudissect import DATA_DIR

ARCH_DIR = DATA_DIR / "arch"
ARCH_RE = re.compile(r"sm_(\d+)([a-z]?)")


class TargetError(ValueError):
    """An architecture that is malformed or that the tool has no data for."""


@cache
def _ptx_isa_table() -> dict[str, str]:
    return tomllib.loads((DATA_DIR / "ptx_isa.toml").read_text())["ptx_isa"]


def ptx_isa_for(cuda_version: str | None) -> str:
    """The PTX ISA version to emit for a given ptxas release ("13.0" -> "9.0")."""
    table = _ptx_isa_table()
    if cuda_version and cuda_version in table:
        return table[cuda_version]
    if cuda_version:
        # newer than the table: the newest we know is accepted by newer ptxas
        major_minor = tuple(int(x) for x in cuda_version.split(".")[:2])
        known = sorted(table, key=lambda s: tuple(int(x) for x in s.split(".")))
        older = [k for k in known if tuple(int(x) for x in k.split(".")) <= major_minor]
        if older:
            return table[older[-1]]
    return "8.0"


def supported_archs() -> list[str]:
    return sorted(p.stem for p in ARCH_DIR.glob("sm_*.toml"))


def arch_number(arch: str) -> int:
    m = ARCH_RE.fullmatch(arch)
    if not m:
        raise TargetError(f"architecture '{arch}' is not of the form sm_XX (e.g. sm_90)")
    return int(m.group(1))


@dataclass(frozen=True)
class Target:
    arch: str  # sm_90 (or sm_90a when asked for: kernels are then compiled for it)
    specific: str  # sm_90a: the architecture-specific target
    ptx_isa: str  # 9.0
    facts: dict  # data/arch/<arch>.toml

    @property
    def sm(self) -> int:
        return arch_number(self.arch)

    @property
    def base(self) -> str:
        """The architecture without its specific suffix (sm_90a -> sm_90): the data files' name."""
        return f"sm_{self.sm}"

    def for_features(self, specific: bool) -> str:
        """The ``.target`` / ``-arch`` of a kernel: ``specific`` kernels use architecture-only
        features (wgmma, setmaxnreg)."""
        return self.specific if specific else self.arch

    def data_file(self, key: str):
        """A reference data file the architecture's facts name (``occupancy = "..."``)."""
        name = self.facts["target"].get(key)
        if not name:
            raise TargetError(f"{self.arch}: no '{key}' in {ARCH_DIR / (self.arch + '.toml')}")
        return DATA_DIR / name


@cache
def arch_facts(base: str) -> dict:
    """``data/arch/<base>.toml`` (``base``: sm_90, no specific suffix), read once per process."""
    return tomllib.loads((ARCH_DIR / f"{base}.toml").read_text())


@cache
def paired_sass(arch: str) -> re.Pattern | None:
    """The two-lane SASS of ``arch``'s facts (``paired_sass``: one instruction, two 16-bit
    lanes), or None where the facts name none."""
    m = ARCH_RE.fullmatch(arch or "")
    if not m or not (ARCH_DIR / f"sm_{m.group(1)}.toml").exists():
        return None
    pattern = arch_facts(f"sm_{m.group(1)}")["target"].get("paired_sass")
    return re.compile(pattern) if pattern else None


def make_target(arch: str, ptxas_version: str | None = None) -> Target:
    """The target for ``arch`` (``sm_90`` or ``sm_90a``); one clear error for anything else.
    ``ptxas_version`` defaults to the installed ptxas's release."""
    m = ARCH_RE.fullmatch(arch or "")
    if not m:
        raise TargetError(f"architecture '{arch}' is not of the form sm_XX (e.g. sm_90)")
    base = f"sm_{m.group(1)}"
    path = ARCH_DIR / f"{base}.toml"
    if not path.exists():
        raise TargetError(f"architecture {arch} is not supported (data for: "
                          f"{', '.join(supported_archs()) or 'none'})")
    facts = arch_facts(base)
    if ptxas_version is None:
        from gpudissect.kernel.toolchain import tool_version

        ptxas_version = tool_version("ptxas")
    return Target(arch, facts["target"].get("specific", base), ptx_isa_for(ptxas_version), facts)


def target_of_device(info, ptxas_version: str | None = None) -> Target:
    """The target of a GPU (``DeviceInfo.compute_capability`` "9.0" -> sm_90)."""
    return make_target("sm_" + info.compute_capability.replace(".", ""), ptxas_version)
