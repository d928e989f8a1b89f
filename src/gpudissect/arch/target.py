"""The target: one object made once from the GPU or ``--arch`` and passed down.

It carries the architecture (``sm_XX``), its architecture-specific form (``sm_XXa``: features
that exist only on that exact architecture), the PTX ISA version the installed ptxas accepts,
and the architecture's record: every file of its folder ``data/arch/<arch>/`` under the file's
name (``target``: features and launch limits; ``limits``: issue and pipe limits with sources;
``occupancy``: the CUDA occupancy rules; ``tensor_peaks``: datasheet peaks per product;
``predict``: the predictor's constants; ``memory_paths``, ``sync_sass``, ``async_sass``,
``cluster``: what the suites expect of ptxas and the driver there). An architecture that
names another in ``target.toml`` (``inherits = "sm_XX"``) has that one's record, file by file
and table by table, with its own files over it: adding an architecture is one new folder.
Nothing below the command line carries a default architecture.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

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


@cache
def known_features() -> dict[str, dict]:
    """The feature vocabulary (``data/features.toml``): name -> what it is, the PTX that needs
    it, its source."""
    return tomllib.loads((DATA_DIR / "features.toml").read_text())["feature"]


@cache
def _feature_patterns() -> dict[str, re.Pattern]:
    return {n: re.compile(f["pattern"]) for n, f in known_features().items() if f.get("pattern")}


def ptx_needs(ptx: str) -> tuple[str, ...]:
    """The features (``data/features.toml``, by their ``pattern``) that PTX text uses."""
    return tuple(n for n, pat in _feature_patterns().items() if pat.search(ptx))


def arch_need(min_arch: str | int) -> str:
    """A catalog's minimum architecture (``NN``, ``"sm_NNa"``) as a need (``sm_NN``:
    that architecture or a later one; an architecture-specific feature is named on its own)."""
    return f"sm_{arch_number(min_arch if isinstance(min_arch, str) and min_arch.startswith('sm_') else f'sm_{min_arch}')}"


def supported_archs() -> list[str]:
    """The architectures with a folder of facts (``data/arch/<arch>/target.toml``)."""
    return sorted(p.parent.name for p in ARCH_DIR.glob("sm_*/target.toml"))


def _example() -> str:
    """An architecture the tool has data for, for an error line's example."""
    return f"e.g. {supported_archs()[0]}" if supported_archs() else "e.g. sm_NN"


def arch_number(arch: str) -> int:
    m = ARCH_RE.fullmatch(arch)
    if not m:
        raise TargetError(f"architecture '{arch}' is not of the form sm_XX ({_example()})")
    return int(m.group(1))


@dataclass(frozen=True)
class Target:
    arch: str  # sm_XX (or sm_XXa when asked for: kernels are then compiled for it)
    specific: str  # sm_XXa: the architecture-specific target
    ptx_isa: str  # 9.0
    facts: dict  # the record of data/arch/<arch>/ (one table per file)

    @property
    def sm(self) -> int:
        return arch_number(self.arch)

    @property
    def base(self) -> str:
        """The architecture without its specific suffix (sm_XXa -> sm_XX): its folder's name."""
        return f"sm_{self.sm}"

    def for_features(self, specific: bool) -> str:
        """The ``.target`` / ``-arch`` of a kernel: ``specific`` kernels use architecture-only
        features (wgmma, setmaxnreg)."""
        return self.specific if specific else self.arch

    @property
    def features(self) -> frozenset[str]:
        """What the architecture has (``target.toml``'s ``features``, by the names of
        ``data/features.toml``); never inherited: a folder that names none has none."""
        return frozenset(self.facts.get("target", {}).get("features", ()))

    def lacks(self, needs) -> list[str]:
        """Of ``needs`` (feature names, or ``sm_NN``: that architecture or a later one), what
        this architecture does not have, in order."""
        out = []
        for need in needs:
            m = ARCH_RE.fullmatch(need)
            if m and not m.group(2):
                if self.sm < int(m.group(1)):
                    out.append(need)
            elif need not in known_features():
                raise TargetError(f"unknown feature '{need}' (known: {', '.join(sorted(known_features()))})")
            elif need not in self.features:
                out.append(need)
        return out

    def table(self, name: str) -> dict:
        """One file of the architecture's record (``occupancy``, ``tensor_peaks``, ...); one
        clear error where the architecture has none."""
        if name not in self.facts:
            raise TargetError(f"{self.arch}: no {name}.toml in {ARCH_DIR / self.base} "
                              "(nor in an architecture it inherits from)")
        return self.facts[name]


def _merge(under: dict, over: dict) -> dict:
    """``over`` on top of ``under``, table by table (a value that is not a table replaces)."""
    out = dict(under)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# what names an architecture itself: never inherited (file -> keys)
IDENTITY = {"target": ("arch", "specific", "features_specific", "features", "compute_capability"),
            "limits": ("arch", "gpu"), "tensor_peaks": ("gpu",)}  # a product is of one architecture


def arch_facts(base: str) -> dict:
    """The record of ``data/arch/<base>/`` (``base`` without a specific suffix): each file
    under its name, over the record of the architecture ``target.toml`` inherits from (but for
    what names that one: IDENTITY); ``target.arch`` is the folder's name unless it says
    otherwise. Read once per process."""
    return _facts(ARCH_DIR, base)


@cache
def _facts(root: Path, base: str, seen: tuple[str, ...] = ()) -> dict:
    folder = root / base
    own = {p.stem: tomllib.loads(p.read_text()) for p in sorted(folder.glob("*.toml"))}
    parent = own.get("target", {}).get("inherits")
    out = own
    if parent:
        if parent in (*seen, base):
            raise TargetError(f"{folder / 'target.toml'}: inherits from {parent}, which inherits from it")
        if not (root / parent / "target.toml").exists():
            raise TargetError(f"{folder / 'target.toml'}: inherits from {parent}, which has no folder")
        under = {name: {k: v for k, v in table.items() if k not in IDENTITY.get(name, ())}
                 for name, table in _facts(root, parent, (*seen, base)).items()}
        out = _merge(under, own)
    out.setdefault("target", {}).setdefault("arch", base)
    return out


def arch_table(arch: str, name: str) -> dict:
    """One file of the record of ``arch`` (``sm_XX`` or ``sm_XXa``, which reads ``sm_XX``):
    ``name`` (``sync_sass``, ``cluster``, ...); one clear error where there is none."""
    base = f"sm_{arch_number(arch)}"
    if not (ARCH_DIR / base / "target.toml").exists():
        raise TargetError(f"architecture {arch} is not supported (data for: "
                          f"{', '.join(supported_archs()) or 'none'})")
    table = arch_facts(base).get(name)
    if table is None:
        raise TargetError(f"{arch}: no {name}.toml in {ARCH_DIR / base} (nor in an architecture it inherits from)")
    return table


@cache
def paired_sass(arch: str) -> re.Pattern | None:
    """The two-lane SASS of ``arch``'s facts (``paired_sass``: one instruction, two 16-bit
    lanes), or None where the facts name none."""
    m = ARCH_RE.fullmatch(arch or "")
    if not m or not (ARCH_DIR / f"sm_{m.group(1)}" / "target.toml").exists():
        return None
    pattern = arch_facts(f"sm_{m.group(1)}")["target"].get("paired_sass")
    return re.compile(pattern) if pattern else None


def facts_line(arch: str | None) -> str:
    """Where the tool's knowledge of ``arch`` comes from, in one line for the views:
    ``data/arch/<arch>/ (target, limits, ...) over <parent>'s (...)``; the sources are cited in
    each file. An architecture without a folder says so."""
    m = ARCH_RE.fullmatch(arch or "")
    if not m or not (ARCH_DIR / f"sm_{m.group(1)}" / "target.toml").exists():
        return f"{arch or '?'}: no architecture folder in this installation"
    chain, base = [], f"sm_{m.group(1)}"
    while base:
        chain.append((base, sorted(p.stem for p in (ARCH_DIR / base).glob("*.toml"))))
        base = tomllib.loads((ARCH_DIR / base / "target.toml").read_text()).get("inherits")
        if base in (b for b, _ in chain):
            break
    own, *under = chain
    line = f"`src/gpudissect/data/arch/{own[0]}/` ({', '.join(own[1])})"
    for name, files in under:
        line += f" over {name}'s ({', '.join(f for f in files if f not in own[1]) or 'nothing more'})"
    return line + "; each file cites its sources"


def make_target(arch: str, ptxas_version: str | None = None) -> Target:
    """The target for ``arch`` (``sm_XX`` or ``sm_XXa``); one clear error for anything else.
    ``ptxas_version`` defaults to the installed ptxas's release."""
    m = ARCH_RE.fullmatch(arch or "")
    if not m:
        raise TargetError(f"architecture '{arch}' is not of the form sm_XX ({_example()})")
    base = f"sm_{m.group(1)}"
    path = ARCH_DIR / base / "target.toml"
    if not path.exists():
        raise TargetError(f"architecture {arch} is not supported (data for: "
                          f"{', '.join(supported_archs()) or 'none'})")
    facts = arch_facts(base)
    if ptxas_version is None:
        from gpudissect.kernel.toolchain import tool_version

        ptxas_version = tool_version("ptxas")
    return Target(arch, facts["target"].get("specific", base), ptx_isa_for(ptxas_version), facts)


def target_of_device(info, ptxas_version: str | None = None) -> Target:
    """The target of a GPU (``DeviceInfo.compute_capability`` "X.Y" -> sm_XY)."""
    return make_target("sm_" + info.compute_capability.replace(".", ""), ptxas_version)
