"""Ray: the cluster's GPUs, one task each (``num_gpus=1``, pinned to the GPU's node), a per-task
timeout, and one retry on the same GPU of a task that faults, hangs or loses its node.

A GPU is a *slot*: a node and an index there. A real node's slots are its Ray ``GPU``
resources; a task is pinned to its node (node affinity) and opens GPU ``index`` itself, so that
its retry runs on the same GPU. Custom resources named ``gpudissect-node:<name>`` declare
virtual nodes instead (tests and demonstrations on one machine: ``ray start --resources
'{"gpudissect-node:a": 2}'``): their slots are numbered across them in name order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VNODE = "gpudissect-node:"
POLL_S = 0.5


class FleetError(RuntimeError):
    """No cluster, or no GPU in it: one line."""


def ray_module():
    try:
        import ray
    except ImportError:
        raise FleetError("fleet mode needs Ray: pip install 'gpudissect[fleet]'") from None
    return ray


def connect(address: str | None, **init: Any):
    """Ray, connected to the cluster at ``address`` (``auto`` or ``HOST:PORT``), or to a local
    instance started here (``address`` None); an existing connection is used as it is."""
    ray = ray_module()
    if address and address != "auto":
        reachable(address)
    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, **init)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise FleetError(f"cannot connect to {where}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return ray


def reachable(address: str, timeout_s: float = 5.0) -> None:
    """``HOST:PORT`` answers a TCP connection (Ray itself waits a long time for a cluster that
    is not there)."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FleetError(f"--address '{address}': use auto or HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise FleetError(f"no Ray cluster answers at {address} ({e.strerror or e})") from None


@dataclass
class Slot:
    key: str  # "<node>/<index>"
    node: str
    index: int
    placement: dict = field(default_factory=dict)  # Ray options that put the task on its node


def _node_names(nodes: list[dict]) -> dict[str, str]:
    """Node id -> name: the hostname, with the address where two nodes share one."""
    hosts = [n["NodeManagerHostname"] for n in nodes]
    return {n["NodeID"]: n["NodeManagerHostname"] if hosts.count(n["NodeManagerHostname"]) == 1
            else f"{n['NodeManagerHostname']}@{n['NodeManagerAddress']}" for n in nodes}


def discover(ray) -> list[Slot]:
    """The cluster's GPUs as slots (virtual nodes where any are declared, else the live nodes)."""
    total = ray.cluster_resources()
    vnodes = sorted(k for k in total if k.startswith(VNODE))
    slots: list[Slot] = []
    if vnodes:
        for v in vnodes:
            name = v[len(VNODE):]
            for _ in range(int(total[v])):
                i = len(slots)
                slots.append(Slot(f"{name}/{i}", name, i, {"resources": {v: 1}}))
        return slots
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    names = _node_names(nodes)
    for n in nodes:
        for i in range(int(n.get("Resources", {}).get("GPU", 0))):
            slots.append(Slot(f"{names[n['NodeID']]}/{i}", names[n["NodeID"]], i, {
                "scheduling_strategy": NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)}))
    return slots


def failure_reason(e: BaseException) -> str:
    """One line on why a task failed: what the task raised, or what Ray says became of it."""
    ray = ray_module()
    ex = ray.exceptions
    if isinstance(ex_cause := getattr(e, "cause", None), BaseException) and isinstance(e, ex.RayTaskError):
        return f"raised {type(ex_cause).__name__}: {str(ex_cause).splitlines()[0] if str(ex_cause) else ''}"[:300]
    kinds = [("NodeDiedError", "its node was lost"), ("WorkerCrashedError", "the task's process died"),
             ("TaskUnschedulableError", "it could not be scheduled (node gone?)"),
             ("OwnerDiedError", "its owner died"), ("ObjectLostError", "its result was lost (node lost?)"),
             ("OutOfMemoryError", "killed for memory"), ("TaskCancelledError", "cancelled")]
    for name, says in kinds:
        if isinstance(e, getattr(ex, name, ())):
            return f"{says} ({type(e).__name__})"
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:300]


@dataclass
class Attempt:
    slot: Slot
    number: int  # 1: first, 2: the retry
    ok: bool
    result: Any = None
    reason: str = ""
    wall_s: float = 0.0


def run_slots(ray, slots: list[Slot], fn: Callable, make_args: Callable[[Slot], Any], timeout_s: float,
              on_attempt: Callable[[Attempt], None], retries: int = 1) -> None:
    """``fn(make_args(slot))`` as a Ray task on each slot's GPU at once; each attempt's end
    reported to ``on_attempt`` (a result, or why not: an exception, a lost node, a timeout
    counted from the submission, after which the task is cancelled); a failed attempt is
    retried (``retries`` times) on the same GPU, the other slots carrying on meanwhile."""
    remote = ray.remote(max_calls=1)(fn)  # a fresh process per task: a CUDA context of its own
    pending: dict[Any, tuple[Slot, int, float]] = {}

    def submit(slot: Slot, number: int) -> None:
        ref = remote.options(num_gpus=1, max_retries=0, **slot.placement).remote(make_args(slot))
        pending[ref] = (slot, number, time.monotonic())

    def ended(a: Attempt) -> None:
        on_attempt(a)
        if not a.ok and a.number <= retries:
            submit(a.slot, a.number + 1)

    for s in slots:
        submit(s, 1)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
        for ref in ready:
            slot, number, t0 = pending.pop(ref)
            try:
                a = Attempt(slot, number, True, ray.get(ref), wall_s=time.monotonic() - t0)
            except Exception as e:
                a = Attempt(slot, number, False, reason=failure_reason(e), wall_s=time.monotonic() - t0)
            ended(a)
        now = time.monotonic()
        for ref, (slot, number, t0) in list(pending.items()):
            if now - t0 > timeout_s:
                del pending[ref]
                ray.cancel(ref, force=True)
                ended(Attempt(slot, number, False, reason=f"timed out after {timeout_s:g} s (cancelled)",
                              wall_s=now - t0))
