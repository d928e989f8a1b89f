"""What every command shares on the terminal: bad input said in one line (``error: ...``) with
exit code 2, the progress bar, Ctrl-C that stops at once, output paths checked before the work
and written whole, and a command's inputs (catalog, results database, target, GPU, compile
cache, toolchain) opened with that one line when they cannot be.

The command line (``gpudissect.cli``) and the suites' own commands (``suites/<name>/commands.py``)
stand on it; it knows none of them.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from gpudissect import outputs
from gpudissect.catalog.model import CatalogError, load_catalog
from gpudissect.outputs import OutputError

console = Console()
err = Console(stderr=True)
T = TypeVar("T")


def fail(msg: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def fails_on(*errors: type[Exception]) -> Iterator[None]:
    """Any of ``errors`` raised in the block said as the one error line (exit 2)."""
    try:
        yield
    except errors as e:
        fail(str(e))


def outputs_ok(*paths: Path | None) -> None:
    """A command's output paths (``None``: not asked for), checked before its work: one line
    and exit 2 when one cannot be written."""
    with fails_on(OutputError):
        outputs.check_outputs(*paths)


@contextmanager
def writing(*paths: Path) -> Iterator[list[Path]]:
    """Temporary paths beside ``paths`` to write (``gpudissect.outputs.writing``): all moved into
    place at the end, or none; a write error is one line."""
    with fails_on(OutputError), outputs.writing(*paths) as tmps:
        yield tmps


def progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=err, transient=True)


def interruptible(work: Callable[[], T], kept: str) -> T:
    """``work()`` in a helper thread, so that Ctrl-C reaches this (main) thread at once instead
    of after the worker pools inside ``work`` have finished their running and queued tasks.
    On Ctrl-C: one line (``kept``: what stays), the temporary files of the compiles under way
    removed (``work`` runs with a scratch folder of its own as the temporary folder), and the
    process ends at once (exit 130) without waiting for those workers."""
    import shutil
    import tempfile

    box: dict[str, object] = {}
    scratch = tempfile.mkdtemp(prefix="gpudissect-")
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = scratch  # this process's and its children's

    def target() -> None:
        try:
            box["result"] = work()
        except BaseException as e:  # handed to the main thread
            box["error"] = e

    t = threading.Thread(target=target, name="gpudissect-work", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.1)
    except KeyboardInterrupt:
        err.print(f"interrupted: {kept}", highlight=False, soft_wrap=True)
        gone = scratch + "-gone"  # renamed first: the workers still running can add nothing to it
        os.rename(scratch, gone)
        shutil.rmtree(gone, ignore_errors=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
    shutil.rmtree(scratch, ignore_errors=True)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


def cache_ok() -> None:
    """The compile cache, checked before any compile (one line when it cannot be used)."""
    from gpudissect.kernel.toolchain import CacheDirError, cache_dir

    try:
        cache_dir()
    except CacheDirError as e:
        fail(str(e))


def toolchain_ok() -> None:
    """ptxas and nvdisasm, found before any compile (one line when one is missing)."""
    from gpudissect.kernel.toolchain import ToolchainMissing, find_tool

    try:
        find_tool("ptxas")
        find_tool("nvdisasm")
    except ToolchainMissing as e:
        fail(str(e))


def open_catalog(paths: list[Path] | None):
    """The catalog (the built-in one, or the TOML files ``paths``)."""
    try:
        return load_catalog(paths or None)
    except CatalogError as e:
        fail(f"catalog: {e}")


def open_store(db: Path | None, create: bool = False):
    """The results database; for reading (``create=False``) an existing one only (.db, .db.gz or packed .db.xz),
    never a new file."""
    from gpudissect.store.db import StoreError
    from gpudissect.store.db import open_store as open_db

    try:
        return open_db(db, create=create)
    except StoreError as e:
        fail(str(e))


def default_db() -> Path:
    from gpudissect.store.db import default_path

    return default_path()


def target_of(arch: str, dev=None):
    """The target from ``--arch`` or, without one and with a GPU, from the GPU."""
    from gpudissect.arch.target import TargetError, make_target, target_of_device

    try:
        return make_target(arch) if arch or dev is None else target_of_device(dev.info)
    except TargetError as e:
        fail(str(e))


def open_device(index: int, isolate: bool = False, timeout: float = 60.0):
    """GPU ``index``: in a worker process with a watchdog (``isolate``) or in this process.
    ``GPUDISSECT_FAKE_DEVICE=N`` substitutes N synthetic GPUs (tests; see device/fakes.py)."""
    from gpudissect.device.device import CudaDevice, NoGPU
    from gpudissect.device.fakes import fake_from_env, fake_gpu_count

    if fake_gpu_count():
        if not 0 <= index < fake_gpu_count():
            fail(f"no fake GPU {index} (GPUDISSECT_FAKE_DEVICE={fake_gpu_count()})")
        factory = functools.partial(fake_from_env, index)
    else:
        factory = functools.partial(CudaDevice, index)
    try:
        if isolate:
            from gpudissect.device.worker import WorkerDevice

            return WorkerDevice(index, timeout=timeout, factory=factory)
        return factory()
    except NoGPU as e:
        fail(f"{e}. Timing needs an NVIDIA GPU; `gpudissect map` works without one.")
    except RuntimeError as e:  # WorkerFailed: the worker could not open the device
        fail(f"GPU {index}: {e}")
