"""What the jobs service's RPC methods do (`JobCalls`): define, change,
delete, queue, start and stop jobs, preview what they would run, read them, their history and
their tasks' logs. Each checks who may, then changes the `WorkingState` under its lock; work
on hosts goes to the `TaskSupervisor`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from services.jobs import api, repository
from services.jobs.api import GpusShared
from services.jobs.domain import Job, RenderedTask
from services.jobs.render import job_problems, shared_gpus
from services.jobs.scripts import session_name
from services.jobs.spec import definition_of, to_job
from services.jobs.start_checks import fixed_placement, refusal_error, run_until, use_refusals
from services.jobs.state import JobState, TaskRun
from services.jobs.supervisor import TaskSupervisor
from services.jobs.tables import outbox
from services.jobs.working_state import SOURCE, WorkingState
from services.reservations import api as reservations_api
from services.shared.bus import Bus
from services.shared.errors import (
    Forbidden,
    InvalidRequest,
    NotFound,
    StateConflict,
    WardenError,
)
from services.shared.storage.outbox import add_event


class JobCalls:
    def __init__(self, working: WorkingState, supervisor: TaskSupervisor, bus: Bus) -> None:
        self.working = working
        self.supervisor = supervisor
        self.bus = bus

    # -- reading ----------------------------------------------------------------------------

    def get(self, job_id: int, actor: str, admin: bool) -> dict[str, Any]:
        """All of it for its owner and admins; others see no command or environment."""
        state = self.working.job(job_id)
        return state.answer() if admin or state.owner == actor else state.event_data()

    def list_jobs(
        self,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> dict[str, Any]:
        found = [
            state
            for state in sorted(self.working.jobs.values(), key=lambda s: s.id, reverse=True)
            if (owner is None or state.owner == owner)
            and (status is None or state.status == status)
        ]
        return {
            "jobs": [state.event_data() for state in found[offset : offset + limit]],
            "total": len(found),
        }

    async def history(self, job_id: int, actor: str, admin: bool) -> list[dict[str, Any]]:
        self.working.owned(job_id, actor, admin)
        async with self.working.store.read() as conn:
            return await repository.task_runs(conn, job_id)

    async def logs(
        self, job_id: int, index: int, actor: str, admin: bool, max_bytes: int
    ) -> dict[str, Any]:
        state = self.working.owned(job_id, actor, admin)
        if not 0 <= index < len(state.tasks):
            raise NotFound(f"job {job_id} has no task {index}", {"id": job_id, "task": index})
        run = state.tasks[index]
        if run.host is None or run.run == 0:
            raise NotFound(
                f"task {index} of job {job_id} has not run yet", {"id": job_id, "task": index}
            )
        session = session_name(job_id, index)
        text = await self.supervisor.log_tail(state, index, min(max_bytes, api.LOG_MAX_BYTES))
        return {"job_id": job_id, "task": index, "host": run.host, "session": session, "log": text}

    # -- defining jobs ----------------------------------------------------------------------

    def _resolve_gpu(self, host: str, ref: int | str) -> str | None:
        for uuid, (on_host, index) in self.working.gpus.items():
            if on_host == host and (uuid == ref or (isinstance(ref, int) and index == ref)):
                return uuid
        return None

    async def refresh_gpus(self, definition: Mapping[str, Any]) -> None:
        """Ask the reservations service for the GPU list when the definition names a GPU not
        known here yet (its gpu.discovered event may still be on its way)."""
        unknown = [
            ref
            for raw in definition["tasks"]
            if raw.get("host") in self.working.hosts
            for ref in raw.get("gpus", ())
            if self._resolve_gpu(raw["host"], ref) is None
        ]
        if not unknown:
            return
        with contextlib.suppress(WardenError):
            self.working.add_gpus(await reservations_api.LIST_GPUS.call(self.bus))

    def build(self, job_id: int, owner: str, definition: Mapping[str, Any]) -> Job:  # noqa: C901 - checks every part of a definition and names every problem
        """The job a checked definition describes, GPUs resolved to uuids; InvalidRequest
        naming every problem."""
        hosts = self.working.hosts
        problems: dict[str, str] = {}
        resolved: dict[int, tuple[str, ...]] = {}
        queued = bool(definition.get("queued"))
        for i, raw in enumerate(definition["tasks"]):
            host = raw.get("host")
            where = f"tasks[{i}]"
            if host is not None and host not in hosts:
                known = ", ".join(sorted(hosts)) or "none configured"
                problems[f"{where}.host"] = (
                    f"{host!r} was removed from the inventory: no new work goes there "
                    f"(hosts now: {known})"
                    if hosts.was_removed(host)
                    else f"unknown host {host!r} (known: {known})"
                )
                continue
            if raw.get("labels") and raw.get("gpu_count") is None:
                problems[f"{where}.labels"] = "labels go with gpu_count: any N GPUs carrying them"
            if raw.get("gpu_count") is not None and not queued:
                problems[f"{where}.gpu_count"] = (
                    "only a queued job may ask for any N GPUs (the scheduler picks them)"
                )
            if host is None:
                if raw.get("gpus"):
                    problems[f"{where}.gpus"] = "GPUs by index or uuid need the task's host"
                elif raw.get("gpu_count") is None:
                    problems[f"{where}.host"] = "required (or queue the job with gpu_count)"
                continue
            uuids = []
            for ref in raw.get("gpus", ()):
                uuid = self._resolve_gpu(host, ref)
                if uuid is None:
                    problems[f"{where}.gpus"] = (
                        f"no GPU {ref} known on {host} (GPUs are known once the monitor saw them)"
                    )
                    break
                uuids.append(uuid)
            resolved[i] = tuple(uuids)
        job = to_job(job_id, owner, definition, resolved)
        problems.update(job_problems(job))
        reservation_id = definition.get("reservation_id")
        if reservation_id is not None:
            problems.update(self._reservation_problems(job, reservation_id))
        if problems:
            summary = "; ".join(f"{key}: {reason}" for key, reason in sorted(problems.items()))
            raise InvalidRequest(f"invalid job: {summary}", {"errors": problems})
        _refuse_shared(job, self.working.gpus)
        return job

    def _reservation_problems(self, job: Job, reservation_id: int) -> dict[str, str]:
        held = self.working.book.get(reservation_id)
        if held is None:
            return {"reservation_id": f"no active or coming reservation {reservation_id}"}
        if not held.may_use(job.owner):
            return {"reservation_id": f"reservation {reservation_id} is {held.owner}'s"}
        outside = sorted({g for task in job.tasks for g in task.gpus} - set(held.gpus))
        if outside:
            return {"tasks": f"GPUs {', '.join(outside)} are not in reservation {reservation_id}"}
        return {}

    def _apply_definition(self, state: JobState, job: Job, definition: Mapping[str, Any]) -> None:
        state.job = job
        state.tasks = [TaskRun() for _ in job.tasks]
        state.start_at = definition.get("start_at")
        state.stop_at = definition.get("stop_at")
        state.reservation_id = definition.get("reservation_id")
        state.max_runtime_s = definition.get("max_runtime_s")
        state.queued = bool(definition.get("queued"))
        state.enqueued_at = self.working.clock() if state.queued else None
        state.stop_reason = None
        state.stop_requested_at = None
        state.interrupted_for = set()
        state.waiting_reason = None

    async def create(
        self, actor: str, admin: bool, owner: str | None, definition: Mapping[str, Any]
    ) -> dict[str, Any]:
        owner = owner or actor
        if owner != actor and not admin:
            raise Forbidden("only an admin may create a job for someone else", {"owner": owner})
        await self.refresh_gpus(definition)
        now = self.working.clock()
        async with self.working.lock:
            job = self.build(0, owner, definition)
            state = JobState(job=job, created_at=now, updated_at=now, tasks=[])
            self._apply_definition(state, job, definition)
            state.status = state.derive_status()
            async with self.working.store.write() as conn:
                job_id = await repository.insert_job(conn, state)
                state.job = to_job(job_id, owner, definition, {t.index: t.gpus for t in job.tasks})
                await add_event(
                    conn, outbox, SOURCE, "job.created", {**state.event_data(), "actor": actor}
                )
            self.working.jobs[job_id] = state
        self.working.on_commit()
        self.working.kick()
        return state.answer()

    async def update(
        self, job_id: int, actor: str, admin: bool, definition: Mapping[str, Any]
    ) -> dict[str, Any]:
        await self.refresh_gpus(definition)
        async with self.working.lock:
            state = self.working.owned(job_id, actor, admin)
            _refuse_active(state, "edit")
            job = self.build(job_id, state.owner, definition)
            self._apply_definition(state, job, definition)
            await self.working.commit(
                state, job_event="job.updated", actor=actor, changed=["definition"]
            )
        self.working.kick()
        return state.answer()

    async def delete(self, job_id: int, actor: str, admin: bool) -> dict[str, Any]:
        async with self.working.lock:
            state = self.working.owned(job_id, actor, admin)
            _refuse_active(state, "delete")
            async with self.working.store.write() as conn:
                await repository.delete_job(conn, job_id)
                await add_event(
                    conn, outbox, SOURCE, "job.deleted", {**state.event_data(), "actor": actor}
                )
            del self.working.jobs[job_id]
            self.working.avoid.pop(job_id, None)
        self.working.on_commit()
        return {"deleted": job_id}

    async def set_queued(
        self, job_id: int, actor: str, admin: bool, queued: bool
    ) -> dict[str, Any]:
        async with self.working.lock:
            state = self.working.owned(job_id, actor, admin)
            _refuse_active(state, "enqueue" if queued else "dequeue")
            if state.queued != queued:
                if queued:
                    job = self.build(job_id, state.owner, {**_definition(state), "queued": True})
                    self._apply_definition(state, job, {**_definition(state), "queued": True})
                else:
                    state.queued = False
                    state.enqueued_at = None
                    state.waiting_reason = None
                    state.tasks = [TaskRun() for _ in state.job.tasks]
                await self.working.commit(
                    state, job_event="job.updated", actor=actor, changed=["queued"]
                )
        self.working.kick()
        return state.answer()

    def preview(self, owner: str, definition: Mapping[str, Any]) -> list[dict[str, Any]]:
        """What each task would run (commands, environment, ports), without saving anything.
        A task the scheduler would place shows where it would be if placed on `<host>`."""
        job = self.build(0, owner, definition)
        placement = {}
        for task in job.tasks:
            placeholder = tuple(f"<gpu-{n}>" for n in range(task.gpu_count or 0))
            placement[task.index] = (task.host or "<host>", task.gpus or placeholder)
        return [_rendered_dict(r) for r in self.supervisor.render(job, placement)]

    # -- starting and stopping --------------------------------------------------------------

    async def start_job(self, job_id: int, actor: str, admin: bool) -> dict[str, Any]:
        """Start now on the task's own hosts and GPUs, if the owner may use them now."""
        async with self.working.lock:
            state = self.working.owned(job_id, actor, admin)
            _refuse_active(state, "start")
            placement = fixed_placement(state)
            gone = self.working.hosts_gone(placement)
            if gone is not None:
                raise StateConflict(f"job {job_id} cannot start: {gone}", {"id": job_id})
        now = self.working.clock()
        reasons = await use_refusals(
            self.bus,
            state.owner,
            (g for _, gpus in placement.values() for g in gpus),
            now,
            run_until(state, now),
        )
        if reasons:
            raise refusal_error(reasons)
        async with self.working.lock:
            _refuse_active(state, "start")
            starting = await self.supervisor.mark_starting(state, placement, from_queue=False)
        await self.supervisor.start_tasks(state, starting)
        return state.answer()

    async def stop_job(self, job_id: int, actor: str, admin: bool) -> dict[str, Any]:
        """Stop a running job (SIGINT, then TERM, then KILL), or take a waiting one off its
        schedule or out of the queue."""
        async with self.working.lock:
            state = self.working.owned(job_id, actor, admin)
            if state.active:
                if state.stop_reason is None or state.stop_requested_at is None:
                    await self.supervisor.request_stop(state, f"stopped by {actor}")
            elif state.queued or state.scheduled:
                state.queued = False
                state.enqueued_at = None
                state.start_at = None
                state.reservation_id = None
                state.waiting_reason = None
                await self.working.commit(
                    state, job_event="job.updated", actor=actor, changed=["schedule"]
                )
            else:
                raise StateConflict(
                    f"job {job_id} is {state.status}: nothing to stop",
                    {"id": job_id, "status": state.status},
                )
        return state.answer()


def _refuse_shared(job: Job, known: Mapping[str, tuple[str, int | None]]) -> None:
    """GpusShared when two tasks name one GPU and the job does not say they may."""
    shared = shared_gpus(job)
    if not shared:
        return

    def named(gpu: str) -> str:
        host, index = known.get(gpu, ("", None))
        return f"{host} GPU {index}" if host and index is not None else gpu

    clashes = "; ".join(
        f"tasks {', '.join(map(str, tasks))} all use {named(gpu)}" for gpu, tasks in shared.items()
    )
    raise GpusShared(
        f"tasks would share a GPU ({clashes}): give each task GPUs of its own, or set "
        "shared_gpus if they are meant to share",
        {"gpus": {named(gpu): tasks for gpu, tasks in shared.items()}},
    )


def _refuse_active(state: JobState, what: str) -> None:
    if state.active:
        raise StateConflict(
            f"job {state.id} is {state.status}: stop it before you {what} it",
            {"id": state.id, "status": state.status},
        )


def _definition(state: JobState) -> dict[str, Any]:
    """The job as a definition again (for re-checking it), without a schedule."""
    return {
        "name": state.job.name,
        "description": state.job.description,
        **definition_of(state.job),
        "max_runtime_s": state.max_runtime_s,
        "stop_at": state.stop_at,
    }


def _rendered_dict(task: RenderedTask) -> dict[str, Any]:
    return {
        "index": task.index,
        "host": task.host,
        "command": task.command,
        "env": dict(task.env),
        "gpus": list(task.gpus),
        "port": task.port,
    }
