"""The model a user is answered with and the validation scores, in one place: a loop body,
its control codes and the tables (and where its data is) -> v0's bounds and model v1's cycles
per trip (:mod:`sched`'s region of ``trips`` trips of each warp, tensor SASS from the tensor
plan, memory instructions from the measured hierarchy when ``where`` says where the data is)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from gpudissect.arch.target import arch_table
from gpudissect.kernel.control import Control
from gpudissect.predict.banks import bank_extras
from gpudissect.predict.bounds import Prediction, predict
from gpudissect.predict.memory import MemoryPlan, Where, merged_plan
from gpudissect.predict.sched import Issued, region_cycles
from gpudissect.predict.tables import Tables
from gpudissect.predict.tensor_model import TensorPlan, plan_of


@dataclass
class Model:
    """Model v1's answer for one loop: ``cycles`` per iteration per warp over a region of
    ``trips`` trips, the ``binding`` resource and every resource's ``shares`` of the steady
    state's cycles, and the ``trace`` of a run of ``SHORT`` trips (the timeline)."""

    cycles: float
    trips: int
    binding: str
    shares: dict[str, float]
    trace: list[Issued]


@dataclass
class LoopModel:
    prediction: Prediction  # v0: bounds and baselines (with the memory plan's bandwidth bounds)
    plan: TensorPlan | None  # what the simulation takes beside the tables (tensor and memory SASS)
    memory: MemoryPlan | None
    tensor: TensorPlan | None

    def run_args(self, controls: list[Control] | None, tables: Tables) -> tuple:
        p = self.prediction
        return (p.entries, p.edges, controls, tables.schedulers, p.warps_per_scheduler)

    def cycles(self, controls: list[Control] | None, tables: Tables, trips: int, branch: float) -> float:
        """Model v1: cycles per trip of a region of ``trips`` trips of every warp."""
        return region_cycles(*self.run_args(controls, tables), trips, branch, self.plan)


def loop_model(name: str, body, tables: Tables, warps: int, where: Where | None = None,
               block_warps: int | None = None) -> LoopModel:
    """The loop's plans and v0 prediction for ``warps`` resident warps per SM; ``where``: where
    its data is (None: the tables' own latencies, the nearest level's); ``block_warps``: the
    warps of one block (its barriers hold them together; None: all ``warps`` are one block)."""
    memory = where.plan(body, tables, warps) if where is not None else None
    tensor = plan_of(list(body), tables.tensor, tables.schedulers)
    plan = merged_plan(tensor, memory)
    if tables.banks is not None and (ops := bank_opcodes(tables.arch)):
        extra = bank_extras(list(body), tables.banks, ops)
        if extra:
            plan = copy.deepcopy(plan) if plan is not None else TensorPlan()
            plan.operand_cycles.update(extra)
    prediction = predict(name, body, tables, warps, memory=memory)
    taken = guards_taken(list(body))
    if taken:
        plan = copy.deepcopy(plan) if plan is not None else TensorPlan()
        plan.taken = taken
    size = block_size(block_warps, warps)
    bars = barriers_of(list(body))
    cost = tables.barrier_cycles(size) if bars else None
    if cost is not None:
        plan = copy.deepcopy(plan) if plan is not None else TensorPlan()
        plan.barriers = bars
        plan.barrier_cycles = cost
    if plan is not None:
        plan.block_group = block_group(size, tables.schedulers)
    return LoopModel(prediction, plan, memory, tensor)


def barriers_of(body: list) -> set[int]:
    """Indices of the block barriers that hold warps (BAR.SYNC, BAR.RED; not BAR.ARV)."""
    return {j for j, i in enumerate(body) if i.opcode == "BAR" and ("SYNC" in i.modifiers or "RED" in i.modifiers)}


def block_size(block_warps: int | None, warps: int) -> int:
    """The warps of one block among ``warps`` resident per SM (None: all of them are one block;
    a block larger than the SM's warps is the SM's warps)."""
    return min(block_warps or warps, warps)


def guards_taken(body: list) -> set[int]:
    """Indices of the predicated forward branches the common path takes: those whose next
    instruction in ``body`` is not the next in the code (a guarded slow path was left out of
    the body right after them, ``loops.py``; the same gap marks them in a stored loop, whose
    branch targets are labels it does not keep: the gap is what says the branch goes forward)."""
    gaps = [b.offset - a.offset for a, b in zip(body, body[1:], strict=False)]
    size = min((g for g in gaps if g > 0), default=0)
    return {j for j, i in enumerate(body[:-1]) if i.opcode == "BRA" and i.predicate and size
            and gaps[j] > size}


def block_warps(block: tuple[int, ...]) -> int:
    """The warps of a block of shape ``block`` (threads in x, y, z)."""
    return max(1, -(-math.prod(block) // 32))


def block_group(block_warps: int, schedulers: int) -> int:
    """The warps of one block on one scheduler (the simulation's warps are one scheduler's; a
    block's warps are dealt to the schedulers in turn)."""
    return max(1, -(-block_warps // schedulers))


def common_path(body, controls: list[Control] | None, skippable) -> tuple[list, list[Control] | None]:
    """The body without the instructions a forward branch skips (``skippable``: their offsets),
    and their control codes."""
    skip = set(skippable)
    keep = [k for k, i in enumerate(body) if i.offset not in skip]
    return [body[k] for k in keep], (None if controls is None else [controls[k] for k in keep])


def common_model(name: str, body, controls: list[Control] | None, skippable, tables: Tables, warps: int,
                 where: Where | None = None, block_warps: int | None = None
                 ) -> tuple[LoopModel, list, list[Control] | None]:
    """The loop model of the common path (:func:`common_path`), its body and control codes: what
    :func:`rare_weighted` takes the common path's cycles from (the validation and the command)."""
    body_c, controls_c = common_path(body, controls, skippable)
    return loop_model(name, body_c, tables, warps, where, block_warps), body_c, controls_c


def rare_weighted(common: float, full: float, rare_every: int) -> float:
    """Cycles per trip of a loop whose skippable instructions run once every ``rare_every``
    trips (the caller's hint, from the source: e.g. a hash's block transform every 64th byte):
    the common path's cycles on the other trips, the whole body's on that one."""
    if rare_every < 1:
        raise ValueError(f"rare_every must be at least 1 (got {rare_every})")
    return common + (full - common) / rare_every


def bank_opcodes(arch: str) -> tuple[str, ...]:
    """The opcodes the register-bank rule is applied to (``predict.toml`` ``[banks] opcodes``;
    none where its ``apply`` is false: the validation decides)."""
    banks = arch_table(arch, "predict").get("banks", {})
    return tuple(banks.get("opcodes", ())) if banks.get("apply") else ()
