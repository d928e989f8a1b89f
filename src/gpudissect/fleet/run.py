"""A fleet run: the GPUs found, the per-GPU task on each through Ray, every GPU's runs merged
into one store as they end, and the fleet's state (each GPU's node, UUID, status, attempts with
their reasons, runs, evidence) kept in the store's ``fleet`` meta entry after every change, so
that an interrupted or partly failed fleet is resumed: the GPUs already done are skipped, the
others run again (their tasks resume their own stores on their nodes)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from gpudissect.fleet.merge import merge_runs
from gpudissect.fleet.profile import Profile
from gpudissect.fleet.schedule import Attempt, FleetError, Slot, discover, run_slots
from gpudissect.fleet.task import GpuTask, run_gpu

META = "fleet"
SCHEMA = "gpudissect.fleet/1"
RETRIES = 1  # a failed GPU task is retried once, on the same GPU


def fleet_state(store, profile: Profile, resume: bool) -> dict:
    """The stored fleet to resume (it must have asked for the same work), or a new one."""
    old = store.get_meta(META)
    if old and resume:
        if old.get("plan") != profile.plan_json():
            raise FleetError(f"{store.name} holds a fleet that ran other items: give the same items, "
                             "or --new to start a new fleet in it")
        return old
    return {"schema": SCHEMA, "id": uuid.uuid4().hex[:12], "plan": profile.plan_json(),
            "started": time.time(), "finished": None, "gpus": {}}


def run_fleet(ray, store, profile: Profile, *, resume: bool = True, isolate: bool = True,
              call_timeout: float = 60.0, arch: str = "", timeout_s: float | None = None,
              work_dir: str = "", jobs: int = 0, env_for: Callable[[Slot], dict[str, str]] | None = None,
              echo: Callable[[str], None] = print) -> dict:
    """Run ``profile`` on every GPU of the cluster ``ray`` is connected to, into ``store``;
    the fleet's state. ``env_for(slot)``: environment variables of that GPU's task."""
    state = fleet_state(store, profile, resume)
    slots = discover(ray)
    if not slots:
        raise FleetError("no GPU in the Ray cluster (no node offers a GPU resource)")
    todo = [s for s in slots if state["gpus"].get(s.key, {}).get("status") != "done"]
    skipped = len(slots) - len(todo)
    for s in todo:
        g = state["gpus"].setdefault(s.key, {"node": s.node, "index": s.index, "attempts": []})
        g.update(status="pending", reason=None)
    here = {s.key for s in slots}
    for k, g in state["gpus"].items():  # a GPU of the stored fleet that the cluster lacks now
        if k not in here and g.get("status") != "done":
            g.update(status="absent", reason="not in the cluster now")
    state["finished"] = None
    store.set_meta(META, state)
    echo(f"{len(slots)} GPU(s) on {len({s.node for s in slots})} node(s)"
         + (f"; {skipped} already done (resumed fleet {state['id']})" if skipped else "")
         + (f"; running {len(todo)}" if todo else ""))

    def task(slot: Slot) -> GpuTask:
        return GpuTask(slot.key, slot.node, slot.index, state["id"], profile.suites, profile.quick,
                       dict(profile.options), isolate, call_timeout, arch, profile.sample_s,
                       profile.throttle_reasons, work_dir, jobs,
                       env_for(slot) if env_for else {})

    def on_attempt(a: Attempt) -> None:
        g = state["gpus"][a.slot.key]
        g["attempts"].append({"attempt": a.number, "ok": a.ok, "reason": a.reason or None,
                              "wall_s": round(a.wall_s, 2), "at": time.time()})
        if a.ok:
            r = a.result
            ids = {name: s["run_id"] for name, s in r["suites"].items() if s.get("run_id")}
            mapping = merge_runs(store, r["db"], sorted(set(ids.values())))
            g.update(status="done", reason=None, uuid=r["uuid"], name=r["name"], host=r["host"],
                     evidence=r["evidence"], task_wall_s=round(r["wall_s"], 2),
                     runs={name: mapping[i] for name, i in ids.items()},
                     suite_errors={n: s["error"] for n, s in r["suites"].items() if s.get("error")})
            echo(f"{a.slot.key}: done ({r['uuid']}, {a.wall_s:.0f} s)"
                 + (f"; suite(s) failed: {', '.join(g['suite_errors'])}" if g["suite_errors"] else ""))
        else:
            final = a.number > RETRIES
            g.update(status="failed" if final else "retrying", reason=a.reason)
            echo(f"{a.slot.key}: attempt {a.number} failed: {a.reason}"
                 + ("" if final else "; retrying on the same GPU"))
        store.set_meta(META, state)

    if todo:
        run_slots(ray, todo, run_gpu, task, timeout_s or profile.timeout_s, on_attempt, RETRIES)
    state["finished"] = time.time()
    store.set_meta(META, state)
    return state
