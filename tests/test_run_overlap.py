"""Issue 36: items measured two at a time (bench/runner.py ``_measure_items``): one item's
analysis on the host beside the other's calls into the GPU, the calls one at a time
(device.SerialDevice), the outcomes stored in the items' order, an item that may not overlap
measured alone in the run's own thread, and the same results as one item at a time."""

from __future__ import annotations

import threading
import time

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context, Item, Outcome, Plan, SuiteBase
from gpudissect.bench.runner import DEPTH, run
from gpudissect.device.device import FakeDevice, SerialDevice
from gpudissect.device.fakes import ScriptedDevice
from gpudissect.store.db import Result, Store
from gpudissect.suites.instructions.suite import STUDIES, InstructionsSuite

TARGET = make_target("sm_90")


class Probe(FakeDevice):
    """A device that counts the calls inside it at once and the threads bound to it."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = self.most = 0
        self.bound: list[str] = []
        self._lock = threading.Lock()

    def bind_thread(self) -> None:
        self.bound.append(threading.current_thread().name)

    def run(self, *a, **k):
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.002)  # the GPU's part
        with self._lock:
            self.inside -= 1
        return []


class Overlapping(SuiteBase):
    """Items that call the device, then analyse on the host; ``alone``: items that may not
    overlap (they record how many items were being measured when they began, and where)."""

    name = "overlapping"

    def __init__(self, n: int, alone: tuple[str, ...] = (), overlap: bool = True):
        self.n, self.alone, self.overlap = n, set(alone), overlap
        self.active = self.most = 0
        self.seen_alone: list[tuple[str, int, bool]] = []
        self._lock = threading.Lock()

    def plan(self, ctx, patterns):
        return Plan([Item(f"i{k:03d}") for k in range(self.n)])

    def overlaps(self, item):
        return self.overlap and item.name not in self.alone

    def measure(self, ctx, item, redo=None):
        with self._lock:
            self.active += 1
            self.most = max(self.most, self.active)
            if item.name in self.alone:
                self.seen_alone.append((item.name, self.active,
                                        threading.current_thread() is threading.main_thread()))
        ctx.dev.run("cubin", item.name)
        time.sleep(0.004)  # the host's analysis
        with self._lock:
            self.active -= 1
        return Outcome([Result(item.name, "x", float(item.name[1:]), "-", "s")])


def _stored(store: Store, run_id: int) -> list[str]:
    return [r["variant"] for r in sorted(store.results(run_id), key=lambda r: r["id"])]


def test_overlapping_items_are_measured_two_at_a_time_with_the_device_calls_one_at_a_time(tmp_path):
    dev, suite = Probe(), Overlapping(24)
    store = Store(tmp_path / "r.db")
    out = run(suite, Context(dev, store, TARGET), None)
    assert suite.most == DEPTH == 2  # beside each other, never more than DEPTH
    assert dev.most == 1  # the device's calls never at once
    assert _stored(store, out.run_id) == [f"i{k:03d}" for k in range(24)]  # stored in order
    assert out.timing["gpu_s"] > 0 and out.timing["store_s"] >= 0


def test_an_item_that_may_not_overlap_waits_for_every_item_before_it(tmp_path):
    suite = Overlapping(12, alone=("i005", "i009"))
    store = Store(tmp_path / "r.db")
    out = run(suite, Context(Probe(), store, TARGET), None)
    # alone when it began, in the run's own thread (a store it reads is that thread's)
    assert suite.seen_alone == [("i005", 1, True), ("i009", 1, True)]
    assert suite.most == 2
    assert _stored(store, out.run_id) == [f"i{k:03d}" for k in range(12)]


def test_a_suite_that_does_not_overlap_measures_one_item_at_a_time(tmp_path):
    suite = Overlapping(8, overlap=False)
    run(suite, Context(Probe(), Store(tmp_path / "r.db"), TARGET), None)
    assert suite.most == 1


def test_a_serial_device_binds_each_new_thread_once_and_not_the_one_that_opened_it():
    dev = Probe()
    serial = SerialDevice(dev)
    serial.run()
    assert dev.bound == []
    t = threading.Thread(target=lambda: (serial.run(), serial.run()), name="other")
    t.start()
    t.join()
    assert dev.bound == ["other"]
    assert serial.info is dev.info  # what is not a call is the device's


def test_the_instruction_suite_gives_the_same_results_measured_two_at_a_time(tmp_path, sweep):
    studies = tuple(s for s in STUDIES if s.name != "stall_patch")  # see tests/test_guard.py
    got = []
    for overlap in (False, True):
        store = Store(tmp_path / f"{overlap}.db")
        suite = InstructionsSuite(studies=studies, overlap=overlap)
        run_id = sweep(ScriptedDevice(), store, ["add.f32", "mul.lo.u32"], suite=suite).run_id
        got.append([(r["variant"], r["measure"], r["params"], r["value"], r["flags"])
                    for r in sorted(store.results(run_id), key=lambda r: r["id"])])
    assert len(got[0]) > 20
    assert got[0] == got[1]


class BatchedOverlapping(Overlapping):
    """Overlapping items prepared in batches; a batch after the first takes ``delay`` to prepare."""

    prepare_batch = 4

    def __init__(self, n: int, delay: float):
        super().__init__(n)
        self.delay, self.batches = delay, 0
        self.early: list[str] = []  # items measured before their batch was prepared

    def prepare(self, ctx, items):
        if self.batches:
            time.sleep(self.delay)
        self.batches += 1
        ctx.state.setdefault("ready", set()).update(it.name for it in items)

    def measure(self, ctx, item, redo=None):
        if item.name not in ctx.state.get("ready", set()):
            self.early.append(item.name)
        return super().measure(ctx, item, redo)


def test_a_wait_for_a_batch_still_compiling_is_compile_time_not_gpu_time(tmp_path):
    # batches of 1, 2, 4, 4, 1 items (runner.batches); each one after the first takes 0.2 s, two
    # prepared at a time (about 0.4 s in all)
    suite = BatchedOverlapping(12, delay=0.2)
    store = Store(tmp_path / "r.db")
    out = run(suite, Context(Probe(), store, TARGET), None)
    assert suite.early == []
    assert _stored(store, out.run_id) == [f"i{k:03d}" for k in range(12)]
    # the measurements (about 6 ms each) are far shorter than the batches: the waits for them
    # (with nothing in flight) are compile time, not hidden in the GPU's
    assert out.timing["compile_s"] > 0.3 > out.timing["gpu_s"]
