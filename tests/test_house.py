"""The structure of the house (issue 31), checked on the source: no suite imports another, the
core imports no suite (it finds them through the registry), no import circle, no module below
the command line names an architecture, module names say one job each, and an architecture is
one folder of data. No GPU, no compile."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

import gpudissect
from gpudissect.arch import target as arch_target

SRC = Path(gpudissect.__file__).resolve().parent
PKG = "gpudissect"
REGISTRY = "gpudissect.suites"  # names every suite's package (as data: import_module by name)
# the parts a suite's folder may have under the same names as another suite's (the registry
# finds them by these names: suites/__init__.py)
SUITE_PARTS = {"__init__", "suite", "view", "figures", "kernels", "analyse", "checks", "summary", "commands",
               "mapping"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module(p): p for p in sorted(SRC.rglob("*.py"))}


def _imports(mod: str, path: Path) -> set[str]:
    """Every module ``mod`` imports, at any depth of its code (function bodies and
    TYPE_CHECKING blocks too), and every ``gpudissect.*`` module named in a string literal
    (an ``import_module`` by name), but for the registry's names of the suites."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                pkg = ".".join(base + ([node.module] if node.module else []))
            else:
                pkg = node.module or ""
            subs = {f"{pkg}.{a.name}" for a in node.names if f"{pkg}.{a.name}" in MODULES}
            out.update(subs)
            if len(subs) < len(node.names):  # names of the package itself (its __init__)
                out.add(pkg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and mod != REGISTRY:
            if re.fullmatch(r"gpudissect(\.\w+)+", node.value):
                out.add(node.value)
    return {m for m in out if m == PKG or m.startswith(PKG + ".")}


IMPORTS = {m: _imports(m, p) for m, p in MODULES.items()}


def _suite_of(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "suites" else None


def test_no_suite_imports_another_and_the_core_imports_no_suite():
    bad = []
    for mod, deps in IMPORTS.items():
        own = _suite_of(mod)
        for d in deps:
            other = _suite_of(d)
            if other is not None and other != own:
                bad.append(f"{mod} -> {d}")
            # a suite reaches no other through the registry either (its own commands may use it)
            if own is not None and d == REGISTRY and not mod.endswith(".commands"):
                bad.append(f"{mod} -> {d} (the registry)")
    assert bad == [], "suite->suite or core->suite imports (find suites through gpudissect.suites):\n" + \
        "\n".join(sorted(bad))


def test_the_import_graph_has_no_circle():
    graph = {m: {d for d in deps if d in MODULES and d != m} for m, deps in IMPORTS.items()}
    # a package's __init__ that only hands names on is not a room of its own: keep its edges
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == [], "import circles:\n" + "\n".join(", ".join(c) for c in circles)


def test_no_module_below_the_command_line_names_an_architecture():
    """The architectures the tool has data for are named in their folders only (the command line's
    defaults aside: the cli package and the commands a suite registers on it)."""
    below = {m: p for m, p in MODULES.items() if not (m == f"{PKG}.cli" or m.startswith(f"{PKG}.cli.")
                                                      or (_suite_of(m) and m.endswith(".commands")))}
    numbers = sorted({arch_target.arch_number(a) for a in arch_target.supported_archs()})
    archs = "|".join(str(n) for n in numbers)
    pattern = re.compile(rf"(?<![A-Za-z0-9])sm_?({archs})[a-z]?(?!\d)", re.I)
    named = [f"{_module(p)}:{i}" for p in below.values() for i, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert named == [], "architectures are data (data/arch/<arch>/), not code:\n" + "\n".join(named)


def test_module_names_say_one_job_each():
    seen: dict[str, list[str]] = {}
    for mod in MODULES:
        name = mod.rsplit(".", 1)[-1]
        if MODULES[mod].name == "__init__.py":
            continue
        if _suite_of(mod) and name in SUITE_PARTS and mod.count(".") == 3:
            continue  # a suite's contract parts, found by these names
        seen.setdefault(name, []).append(mod)
    assert {n: ms for n, ms in seen.items() if len(ms) > 1} == {}


def _clear() -> None:
    from gpudissect.arch.limits import load_limits

    for f in (arch_target._facts, arch_target.paired_sass, load_limits):
        f.cache_clear()


@pytest.fixture
def arch_dir(tmp_path, monkeypatch):
    """A copy of the architecture folders the tool reads, to add one to."""
    d = tmp_path / "arch"
    shutil.copytree(arch_target.ARCH_DIR, d)
    monkeypatch.setattr(arch_target, "ARCH_DIR", d)
    _clear()
    yield d
    _clear()


def test_an_architecture_is_one_folder_that_may_inherit(arch_dir):
    from gpudissect.arch.limits import limit_for, load_limits
    from gpudissect.arch.occupancy import occupancy_rules

    base = arch_target.supported_archs()[0]
    new = f"sm_{arch_target.arch_number(base) + 1}"
    (arch_dir / new).mkdir()
    (arch_dir / new / "target.toml").write_text(f'inherits = "{base}"\n')
    (arch_dir / new / "occupancy.toml").write_text("max_blocks_per_sm = 7\n")
    assert new in arch_target.supported_archs()
    t = arch_target.make_target(new, "13.0")
    # what names an architecture is its own: kernels are built for it, not for the parent's form
    assert (t.arch, t.specific, t.facts["target"].get("features_specific")) == (new, new, None)
    assert load_limits(new).arch == new and "gpu" not in t.facts["limits"]
    rules = occupancy_rules(t)
    inherited = occupancy_rules(arch_target.make_target(base, "13.0"))
    assert rules["max_blocks_per_sm"] == 7  # its own
    assert rules["regs_per_sm"] == inherited["regs_per_sm"]  # the one it inherits from
    assert limit_for(["FFMA"], new).value == limit_for(["FFMA"], base).value
    for name in ("sync_sass", "memory_paths", "predict"):
        assert arch_target.arch_table(new, name) == arch_target.arch_table(base, name)
    # a product is of one architecture: its datasheet peaks are not inherited
    assert not arch_target.arch_table(new, "tensor_peaks").get("gpu")


def test_an_architecture_without_a_folder_is_one_clear_error(arch_dir):
    with pytest.raises(arch_target.TargetError, match="not supported"):
        arch_target.make_target("sm_42", "13.0")
    (arch_dir / "sm_43").mkdir()
    (arch_dir / "sm_43" / "target.toml").write_text('inherits = "sm_41"\narch = "sm_43"\n')
    with pytest.raises(arch_target.TargetError, match="inherits from sm_41"):
        arch_target.make_target("sm_43", "13.0")
    for a, b in (("sm_44", "sm_45"), ("sm_45", "sm_44")):  # a circle of inheritance
        (arch_dir / a).mkdir()
        (arch_dir / a / "target.toml").write_text(f'inherits = "{b}"\n')
    with pytest.raises(arch_target.TargetError, match="which inherits from it"):
        arch_target.make_target("sm_44", "13.0")


def test_no_command_line_function_takes_more_than_eight_parameters():
    wide = []
    for mod, path in MODULES.items():
        if not (mod == f"{PKG}.cli" or mod.startswith(f"{PKG}.cli.")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if n > 8:
                    wide.append(f"{mod}.{node.name}: {n}")
    assert wide == []


def test_the_instruction_studies_declare_what_they_add_and_no_two_add_the_same():
    from fnmatch import fnmatchcase

    from gpudissect.suites import get_suite

    studies = get_suite("instructions").studies
    assert studies and all(s.adds for s in studies)
    for i, a in enumerate(studies):
        for b in studies[i + 1:]:
            clash = [x for x in a.adds for y in b.adds if fnmatchcase(x, y) or fnmatchcase(y, x)]
            assert clash == [], (a.name, b.name, clash)
