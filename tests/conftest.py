"""Shared fixtures for the GPU-free test suite.

Every test runs with ``GPUDISSECT_CACHE`` pointing into pytest's temporary directory,
so the suite never writes to ``~/.cache``. The directory is shared by the session (the
real-toolchain tests reuse each other's compiles); tests that need an empty cache use
the ``fresh_cache`` fixture.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# test the working tree even when an older gpudissect is installed in the environment
_SRC = Path(__file__).resolve().parents[1] / "src"
if _SRC.is_dir() and str(_SRC) not in sys.path:
    sys.path.insert(0, str(_SRC))

from gpudissect.catalog import load_catalog  # noqa: E402
from gpudissect.kernel.sass import SassInstr, parse_sass  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("gpudissect-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUDISSECT_CACHE", str(d))
        yield d


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty compile cache for one test."""
    d = tmp_path / "cache"
    monkeypatch.setenv("GPUDISSECT_CACHE", str(d))
    return d


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


def _sass_lines(*lines: str, start: int = 0) -> list[SassInstr]:
    """Parse instruction texts ('IADD3 R4, R4, R6, RZ ;') as an nvdisasm listing would show them."""
    text = "\n".join(
        f"        /*{start + 16 * i:04x}*/                   {ln.rstrip().rstrip(';')} ;"
        for i, ln in enumerate(lines)
    )
    funcs = parse_sass(text)
    instrs = [i for f in funcs.values() for i in f.instrs]
    assert len(instrs) == len(lines), f"helper failed to parse: {lines}"
    return instrs


@pytest.fixture(scope="session")
def sweep():
    """``sweep(dev, store, patterns, suite=None, quick=True, resume=True)``: a suite (default: the
    instructions suite, quick plan) run on ``dev`` into ``store`` by the one runner, for sm_90;
    returns the runner's ``RunOutcome``."""
    from gpudissect.arch.target import make_target
    from gpudissect.bench.contract import Context
    from gpudissect.bench.runner import run
    from gpudissect.suites import get_suite

    target = make_target("sm_90")

    def go(dev, store, patterns, *, suite=None, quick=True, resume=True):
        ctx = Context(dev, store, target, quick=quick, jobs=2)
        return run(suite or get_suite("instructions"), ctx, list(patterns), resume=resume)

    return go


@pytest.fixture(scope="session")
def h200_tables():
    """(the shipped H200 data set's result set, the predictor's tables from it)."""
    from gpudissect.predict.tables import tables_from
    from gpudissect.report.read.results import load_result_set

    rs = load_result_set(Path(__file__).resolve().parents[1] / "data" / "h200")
    return rs, tables_from(rs)


@pytest.fixture
def sass():
    """``sass('IADD3 R4, R4, R6, RZ', ...)`` -> parsed SassInstr list."""
    return _sass_lines


def _gpu_available() -> bool:
    try:
        from gpudissect.device.device import CudaDevice, NoGPU

        try:
            CudaDevice(0)
            return True
        except NoGPU:
            return False
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _gpu_available():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
