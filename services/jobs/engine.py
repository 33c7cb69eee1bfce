"""The jobs service's working state: jobs and their tasks, what they wait for, and their runs.

Every change is written with its events (through the outbox) in one transaction, then kept in
memory; one asyncio lock orders commands, event reactions and ticks, so the service runs as a
single replica (a restart reloads the jobs and goes on polling their tasks).

SSH work (starting, polling, signalling tasks) runs outside the lock in background tasks: a
slow or dead host never holds up another host, an RPC or the queue. Each result is applied
only if the task is still in the run it was meant for.

A tick (every `poll_interval_s`, and at once after an event that may free or take GPUs):
polls the running tasks (one round trip per host and owner), escalates stops (SIGINT, then
SIGTERM after `int_grace_s`, SIGKILL after `term_grace_s` more), starts jobs whose time or
reservation came, stops jobs whose stop time or reservation end came, and runs one pass of
the queue scheduler (a pure function: `scheduler.schedule`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from services.jobs import api, repository
from services.jobs.domain import TASK_ENDED, Job, RenderedTask
from services.jobs.queue_model import (
    Booking,
    Demand,
    Gpu,
    Interrupt,
    Kill,
    QueuedJob,
    QueueState,
    RunningJob,
    Start,
    Waiting,
)
from services.jobs.render import job_problems, render_job
from services.jobs.scheduler import schedule
from services.jobs.scripts import Probe, Started, session_name
from services.jobs.spec import definition_of, to_job
from services.jobs.state import JobState, TaskRun
from services.jobs.tables import outbox
from services.reservations import api as reservations_api
from services.shared.bus import Bus
from services.shared.config import HostConfig, Settings
from services.shared.errors import (
    Forbidden,
    InvalidRequest,
    NotAllowed,
    NotFound,
    ReservationConflict,
    StateConflict,
    WardenError,
)
from services.shared.outbox import add_event
from services.shared.reservation_book import ReservationBook
from services.shared.store import Store

log = logging.getLogger("warden.jobs")

SOURCE = "jobs"
Clock = Callable[[], datetime]
# A job started by hand without a declared run time: its GPUs must be usable at least now.
START_CHECK_WINDOW = timedelta(minutes=1)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class TaskRunner(Protocol):
    """What the engine needs from `runner.TaskRunner` (a fake one in unit tests)."""

    async def start(
        self,
        host: HostConfig,
        login: str,
        session: str,
        cwd: str,
        command: str,
        env: Mapping[str, str],
    ) -> Started: ...

    async def poll(
        self, host: HostConfig, login: str, sessions: Sequence[str]
    ) -> dict[str, Probe]: ...

    async def signal(self, host: HostConfig, login: str, session: str, signal: str) -> str: ...

    async def log_tail(
        self, host: HostConfig, login: str, session: str, max_bytes: int = 65536
    ) -> str: ...


def refusal_error(reasons: Sequence[Mapping[str, Any]]) -> WardenError:
    message = "; ".join(str(r.get("message", r)) for r in reasons[:3])
    if len(reasons) > 3:
        message += f" (and {len(reasons) - 3} more)"
    details = {"reasons": list(reasons)}
    if reasons and all(r.get("code") == "conflict" for r in reasons):
        return ReservationConflict(message, details)
    return NotAllowed(message, details)


class Engine:
    def __init__(
        self,
        store: Store,
        bus: Bus,
        settings: Settings,
        runner: TaskRunner,
        *,
        on_commit: Callable[[], None] = lambda: None,
        clock: Clock = _utc_now,
    ) -> None:
        self.store = store
        self.bus = bus
        self.settings = settings.jobs
        self.hosts: dict[str, HostConfig] = {h.name: h for h in settings.hosts}
        self.runner = runner
        self.on_commit = on_commit
        self.clock = clock
        self.jobs: dict[int, JobState] = {}
        self.book = ReservationBook()
        self.book_loaded = False
        self.gpus: dict[str, tuple[str, int | None]] = {}  # uuid -> (host, index)
        self.busy: dict[str, frozenset[str]] = {}  # host -> GPUs with processes on them
        self.avoid: dict[int, set[str]] = {}  # job id -> GPUs its owner may not use now
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._polling: dict[tuple[str, str], asyncio.Task[None]] = {}

    # -- start-up and shutdown ----------------------------------------------------------------

    async def load(self) -> None:
        async with self.store.read() as conn:
            for state in await repository.load_jobs(conn):
                self.jobs[state.id] = state
        if self.jobs:
            log.info("%d jobs reloaded", len(self.jobs))

    async def load_reservations(
        self, reservations: Iterable[Mapping[str, Any]], gpus: Iterable[Mapping[str, Any]]
    ) -> None:
        """What the reservations service answered at start-up (events may have come first)."""
        async with self._lock:
            self.book.load(reservations)
            for gpu in gpus:
                self.gpus.setdefault(gpu["uuid"], (gpu["host"], gpu.get("index")))
            self.book_loaded = True
        self.kick()

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="jobs engine")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        pending = list(self._background)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def kick(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.poll_interval_s)
            self._wake.clear()
            try:
                await self.tick()
            except Exception:
                log.exception("a jobs tick failed; retrying")

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def settle(self) -> None:
        """Wait for the SSH work started so far (tests and shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # -- events -----------------------------------------------------------------------------

    def on_gpu_discovered(self, data: Mapping[str, Any]) -> None:
        self.gpus[data["uuid"]] = (data["host"], data.get("index"))

    def on_processes(self, data: Mapping[str, Any]) -> None:
        busy = frozenset(p["gpu_uuid"] for p in data["processes"])
        if self.busy.get(data["host"]) != busy:
            self.busy[data["host"]] = busy
            self.kick()

    async def on_reservation(self, event_type: str, data: Mapping[str, Any]) -> None:
        async with self._lock:
            self.book.apply(event_type, data)
        self.kick()

    # -- who may ----------------------------------------------------------------------------

    def _job(self, job_id: int) -> JobState:
        state = self.jobs.get(job_id)
        if state is None:
            raise NotFound(f"no job {job_id}", {"id": job_id})
        return state

    def _owned(self, job_id: int, actor: str, admin: bool) -> JobState:
        state = self._job(job_id)
        if state.owner != actor and not admin:
            raise Forbidden(
                f"job {job_id} belongs to {state.owner}: only they or an admin may do this",
                {"id": job_id, "owner": state.owner},
            )
        return state

    # -- reading ----------------------------------------------------------------------------

    def get(self, job_id: int, actor: str, admin: bool) -> dict[str, Any]:
        """All of it for its owner and admins; others see no command or environment."""
        state = self._job(job_id)
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
            for state in sorted(self.jobs.values(), key=lambda s: s.id, reverse=True)
            if (owner is None or state.owner == owner)
            and (status is None or state.status == status)
        ]
        return {
            "jobs": [state.event_data() for state in found[offset : offset + limit]],
            "total": len(found),
        }

    async def history(self, job_id: int, actor: str, admin: bool) -> list[dict[str, Any]]:
        self._owned(job_id, actor, admin)
        async with self.store.read() as conn:
            return await repository.task_runs(conn, job_id)

    # -- defining jobs ----------------------------------------------------------------------

    def _resolve_gpu(self, host: str, ref: int | str) -> str | None:
        for uuid, (on_host, index) in self.gpus.items():
            if on_host == host and (uuid == ref or (isinstance(ref, int) and index == ref)):
                return uuid
        return None

    async def refresh_gpus(self, definition: Mapping[str, Any]) -> None:
        """Ask the reservations service for the GPU list when the definition names a GPU not
        known here yet (its gpu.discovered event may still be on its way)."""
        unknown = [
            ref
            for raw in definition["tasks"]
            if raw.get("host") in self.hosts
            for ref in raw.get("gpus", ())
            if self._resolve_gpu(raw["host"], ref) is None
        ]
        if not unknown:
            return
        with contextlib.suppress(WardenError):
            for gpu in await reservations_api.LIST_GPUS.call(self.bus):
                self.gpus.setdefault(gpu["uuid"], (gpu["host"], gpu.get("index")))

    def build(self, job_id: int, owner: str, definition: Mapping[str, Any]) -> Job:
        """The job a checked definition describes, GPUs resolved to uuids; InvalidRequest
        naming every problem."""
        problems: dict[str, str] = {}
        resolved: dict[int, tuple[str, ...]] = {}
        queued = bool(definition.get("queued"))
        for i, raw in enumerate(definition["tasks"]):
            host = raw.get("host")
            where = f"tasks[{i}]"
            if host is not None and host not in self.hosts:
                known = ", ".join(sorted(self.hosts)) or "none configured"
                problems[f"{where}.host"] = f"unknown host {host!r} (known: {known})"
                continue
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
        return job

    def _reservation_problems(self, job: Job, reservation_id: int) -> dict[str, str]:
        held = self.book.get(reservation_id)
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
        state.enqueued_at = self.clock() if state.queued else None
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
        now = self.clock()
        async with self._lock:
            job = self.build(0, owner, definition)
            state = JobState(job=job, created_at=now, updated_at=now, tasks=[])
            self._apply_definition(state, job, definition)
            state.status = state.derive_status()
            async with self.store.write() as conn:
                job_id = await repository.insert_job(conn, state)
                state.job = to_job(job_id, owner, definition, {t.index: t.gpus for t in job.tasks})
                await add_event(
                    conn, outbox, SOURCE, "job.created", {**state.event_data(), "actor": actor}
                )
            self.jobs[job_id] = state
        self.on_commit()
        self.kick()
        return state.answer()

    async def update(
        self, job_id: int, actor: str, admin: bool, definition: Mapping[str, Any]
    ) -> dict[str, Any]:
        await self.refresh_gpus(definition)
        async with self._lock:
            state = self._owned(job_id, actor, admin)
            self._refuse_active(state, "edit")
            job = self.build(job_id, state.owner, definition)
            self._apply_definition(state, job, definition)
            await self._commit(state, job_event="job.updated", actor=actor, changed=["definition"])
        self.kick()
        return state.answer()

    async def delete(self, job_id: int, actor: str, admin: bool) -> dict[str, Any]:
        async with self._lock:
            state = self._owned(job_id, actor, admin)
            self._refuse_active(state, "delete")
            async with self.store.write() as conn:
                await repository.delete_job(conn, job_id)
                await add_event(
                    conn, outbox, SOURCE, "job.deleted", {**state.event_data(), "actor": actor}
                )
            del self.jobs[job_id]
            self.avoid.pop(job_id, None)
        self.on_commit()
        return {"deleted": job_id}

    @staticmethod
    def _refuse_active(state: JobState, what: str) -> None:
        if state.active:
            raise StateConflict(
                f"job {state.id} is {state.status}: stop it before you {what} it",
                {"id": state.id, "status": state.status},
            )

    async def set_queued(
        self, job_id: int, actor: str, admin: bool, queued: bool
    ) -> dict[str, Any]:
        async with self._lock:
            state = self._owned(job_id, actor, admin)
            self._refuse_active(state, "enqueue" if queued else "dequeue")
            if state.queued != queued:
                if queued:
                    job = self.build(
                        job_id, state.owner, {**self._definition(state), "queued": True}
                    )
                    self._apply_definition(state, job, {**self._definition(state), "queued": True})
                else:
                    state.queued = False
                    state.enqueued_at = None
                    state.waiting_reason = None
                    state.tasks = [TaskRun() for _ in state.job.tasks]
                await self._commit(state, job_event="job.updated", actor=actor, changed=["queued"])
        self.kick()
        return state.answer()

    @staticmethod
    def _definition(state: JobState) -> dict[str, Any]:
        """The job as a definition again (for re-checking it), without a schedule."""
        return {
            "name": state.job.name,
            "description": state.job.description,
            **definition_of(state.job),
            "max_runtime_s": state.max_runtime_s,
            "stop_at": state.stop_at,
        }

    def preview(self, owner: str, definition: Mapping[str, Any]) -> list[dict[str, Any]]:
        """What each task would run (commands, environment, ports), without saving anything.
        A task the scheduler would place shows where it would be if placed on `<host>`."""
        job = self.build(0, owner, definition)
        placement = {}
        for task in job.tasks:
            placeholder = tuple(f"<gpu-{n}>" for n in range(task.gpu_count or 0))
            placement[task.index] = (task.host or "<host>", task.gpus or placeholder)
        return [_rendered_dict(r) for r in self._render(job, placement)]

    def _render(
        self, job: Job, placement: Mapping[int, tuple[str, tuple[str, ...]]]
    ) -> list[RenderedTask]:
        taken: dict[str, set[int]] = {}
        for state in self.jobs.values():
            for run in state.tasks:
                if run.active and run.host is not None and run.port is not None:
                    taken.setdefault(run.host, set()).add(run.port)
        addresses = {name: host.address or name for name, host in self.hosts.items()}
        try:
            return render_job(
                job,
                placement,
                addresses=addresses,
                taken_ports=taken,
                port_range=(self.settings.port_min, self.settings.port_max),
            )
        except ValueError as err:
            raise StateConflict(str(err), {"id": job.id}) from err

    # -- starting ---------------------------------------------------------------------------

    def _fixed_placement(self, state: JobState) -> dict[int, tuple[str, tuple[str, ...]]]:
        placement = {}
        for task in state.job.tasks:
            if task.host is None or task.gpu_count is not None:
                raise StateConflict(
                    f"task {task.index} of job {state.id} asks for any {task.gpu_count} GPUs: "
                    "queue the job, the scheduler places it",
                    {"id": state.id, "task": task.index},
                )
            placement[task.index] = (task.host, task.gpus)
        return placement

    def _run_until(self, state: JobState, now: datetime) -> datetime:
        if state.stop_at is not None and state.stop_at > now:
            return state.stop_at
        if state.max_runtime_s is not None:
            return now + timedelta(seconds=state.max_runtime_s)
        return now + START_CHECK_WINDOW

    async def _use_refusals(
        self, owner: str, gpus: Iterable[str], start: datetime, end: datetime
    ) -> list[dict[str, Any]]:
        wanted = sorted(set(gpus))
        if not wanted:
            return []
        answer = await reservations_api.CHECK_USE.call(
            self.bus,
            {"user": owner, "gpus": wanted, "start": start.isoformat(), "end": end.isoformat()},
        )
        reasons: list[dict[str, Any]] = answer["reasons"]
        return reasons

    async def start_job(self, job_id: int, actor: str, admin: bool) -> dict[str, Any]:
        """Start now on the task's own hosts and GPUs, if the owner may use them now."""
        async with self._lock:
            state = self._owned(job_id, actor, admin)
            self._refuse_active(state, "start")
            placement = self._fixed_placement(state)
        now = self.clock()
        reasons = await self._use_refusals(
            state.owner,
            (g for _, gpus in placement.values() for g in gpus),
            now,
            self._run_until(state, now),
        )
        if reasons:
            raise refusal_error(reasons)
        async with self._lock:
            self._refuse_active(state, "start")
            starting = await self._mark_starting(state, placement, from_queue=False)
        await self._start_tasks(state, starting)
        return state.answer()

    async def _mark_starting(
        self,
        state: JobState,
        placement: Mapping[int, tuple[str, tuple[str, ...]]],
        *,
        from_queue: bool,
    ) -> list[tuple[RenderedTask, int]]:
        """Under the lock: render, mark every task starting (its GPUs are taken from now)."""
        rendered = self._render(state.job, placement)
        changed = []
        for task in rendered:
            previous = state.tasks[task.index]
            state.tasks[task.index] = TaskRun(
                status="starting",
                run=previous.run + 1,
                host=task.host,
                gpus=task.gpus,
                port=task.port,
            )
            changed.append((task.index, previous.status))
        state.queued = False
        state.from_queue = from_queue
        state.stop_requested_at = None
        state.stop_reason = None
        state.signals_sent = set()
        state.waiting_reason = None
        self.avoid.pop(state.id, None)
        await self._commit(state, task_changes=changed)
        return [(task, state.tasks[task.index].run) for task in rendered]

    async def _start_tasks(self, state: JobState, starting: list[tuple[RenderedTask, int]]) -> None:
        outcomes = await asyncio.gather(
            *(self._start_one(state, task, run_number) for task, run_number in starting)
        )
        failures = [
            f"task {task.index}: {why}"
            for (task, _), why in zip(starting, outcomes, strict=True)
            if why
        ]
        if not failures:
            return
        async with self._lock:
            changes = []
            for (task, run_number), why in zip(starting, outcomes, strict=True):
                run = state.tasks[task.index]
                if why is None or run.run != run_number or run.status != "starting":
                    continue
                run.status, run.reason, run.ended_at = "failed", why, self.clock()
                changes.append((task.index, "starting"))
            if changes:
                await self._commit(state, task_changes=changes, runs=[i for i, _ in changes])
            if state.active and state.stop_reason is None:
                # The others cannot do their part alone (a distributed job waits for all).
                await self._request_stop(state, f"a task could not start ({failures[0]})")

    async def _start_one(self, state: JobState, task: RenderedTask, run_number: int) -> str | None:
        """Start one task; None when it runs (applied at once), else why it did not start."""
        host = self.hosts[task.host]
        session = session_name(state.id, task.index)
        spec = state.job.tasks[task.index]
        try:
            started = await self.runner.start(
                host, state.owner, session, spec.cwd, task.command, task.env
            )
        except WardenError as err:
            return err.message
        if started.status == "exists":
            return (
                f"a session named {session} already runs on {task.host} "
                f"(`screen -ls` / `tmux ls` as {state.owner}); end it first"
            )
        if started.status != "started":
            return f"{task.host}: the task did not start: {started.detail or 'no reason given'}"
        async with self._lock:
            run = state.tasks[task.index]
            if run.run == run_number and run.status == "starting":
                run.status, run.pid = "running", started.pid
                run.started_at = started.started_at or self.clock()
                run.last_seen_at = self.clock()
                await self._commit(state, task_changes=[(task.index, "starting")])
        return None

    # -- stopping ---------------------------------------------------------------------------

    async def stop_job(self, job_id: int, actor: str, admin: bool) -> dict[str, Any]:
        """Stop a running job (SIGINT, then TERM, then KILL), or take a waiting one off its
        schedule or out of the queue."""
        async with self._lock:
            state = self._owned(job_id, actor, admin)
            if state.active:
                if state.stop_reason is None or state.stop_requested_at is None:
                    await self._request_stop(state, f"stopped by {actor}")
            elif state.queued or state.scheduled:
                state.queued = False
                state.enqueued_at = None
                state.start_at = None
                state.reservation_id = None
                state.waiting_reason = None
                await self._commit(
                    state, job_event="job.updated", actor=actor, changed=["schedule"]
                )
            else:
                raise StateConflict(
                    f"job {job_id} is {state.status}: nothing to stop",
                    {"id": job_id, "status": state.status},
                )
        return state.answer()

    async def _request_stop(self, state: JobState, reason: str) -> None:
        """Under the lock: SIGINT now; the tick sends TERM and KILL after their grace."""
        state.stop_reason = reason
        state.stop_requested_at = self.clock()
        state.signals_sent = {"INT"}
        await self._commit(state)
        self._signal(state, "INT")

    def _signal(self, state: JobState, signal: str) -> None:
        for index, run in enumerate(state.tasks):
            if run.active and run.host is not None and run.host in self.hosts:
                self._spawn(
                    self._signal_one(state, index, run.run, signal),
                    f"signal {signal} job {state.id} task {index}",
                )

    async def _signal_one(self, state: JobState, index: int, run_number: int, signal: str) -> None:
        run = state.tasks[index]
        host = self.hosts[run.host or ""]
        try:
            answer = await self.runner.signal(
                host, state.owner, session_name(state.id, index), signal
            )
        except WardenError as err:
            log.warning("job %d task %d: SIG%s not sent: %s", state.id, index, signal, err.message)
            return
        if answer == "gone" and signal == "KILL":
            self.kick()  # the next poll records how it ended
        log.info("job %d task %d run %d: SIG%s %s", state.id, index, run_number, signal, answer)

    # -- logs ---------------------------------------------------------------------------------

    async def logs(
        self, job_id: int, index: int, actor: str, admin: bool, max_bytes: int
    ) -> dict[str, Any]:
        state = self._owned(job_id, actor, admin)
        if not 0 <= index < len(state.tasks):
            raise NotFound(f"job {job_id} has no task {index}", {"id": job_id, "task": index})
        run = state.tasks[index]
        if run.host is None or run.run == 0:
            raise NotFound(
                f"task {index} of job {job_id} has not run yet", {"id": job_id, "task": index}
            )
        session = session_name(job_id, index)
        text = await self.runner.log_tail(
            self.hosts[run.host], state.owner, session, min(max_bytes, api.LOG_MAX_BYTES)
        )
        return {"job_id": job_id, "task": index, "host": run.host, "session": session, "log": text}

    # -- writing ------------------------------------------------------------------------------

    async def _commit(
        self,
        state: JobState,
        *,
        task_changes: Sequence[tuple[int, str]] = (),
        runs: Sequence[int] = (),
        job_event: str | None = None,
        actor: str = "",
        changed: Sequence[str] = (),
    ) -> None:
        """Under the lock: derive the status, write the job with its events."""
        now = self.clock()
        previous = state.status
        for index, _ in task_changes:
            run = state.tasks[index]
            if run.status in TASK_ENDED and run.ended_at is None:
                run.ended_at = now
        async with self.store.write() as conn:
            for index in runs:
                await repository.record_run(conn, state, index)
            for index, before in task_changes:
                await add_event(
                    conn,
                    outbox,
                    SOURCE,
                    "task.status_changed",
                    {
                        "job_id": state.id,
                        "owner": state.owner,
                        "task": state.task_data(index),
                        "previous_status": before,
                        "at": now.isoformat(),
                    },
                )
            if self._requeue_if_preempted(state):
                job_event, actor, changed = "job.updated", "warden", ["queued"]
            state.status = state.derive_status()
            state.updated_at = now
            await repository.save_job(conn, state)
            if job_event is not None:
                data = {**state.event_data(), "actor": actor, "changed": list(changed)}
                await add_event(conn, outbox, SOURCE, job_event, data)
            if state.status != previous:
                await add_event(
                    conn,
                    outbox,
                    SOURCE,
                    "job.status_changed",
                    {**state.event_data(), "previous_status": previous},
                )
        self.on_commit()

    def _requeue_if_preempted(self, state: JobState) -> bool:
        """A queued job that yielded to a reservation goes back to the queue once it ended."""
        if not (
            state.from_queue
            and state.interrupted_for
            and self.settings.requeue_on_preempt
            and state.stop_requested_at is None
            and state.stop_reason is not None
            and not state.active
            and all(run.status in TASK_ENDED for run in state.tasks)
        ):
            return False
        state.tasks = [TaskRun(run=run.run) for run in state.tasks]
        state.queued = True
        state.from_queue = False
        state.stop_reason = None
        return True

    # -- the tick -----------------------------------------------------------------------------

    async def tick(self) -> None:
        self._poll_tasks()
        async with self._lock:
            now = self.clock()
            await self._escalate_stops(now)
            launches = await self._timers(now)
        for state, placement in launches:
            await self._launch_checked(state, placement, from_queue=False)
        await self._queue_pass()

    def _poll_tasks(self) -> None:
        groups: dict[tuple[str, str], list[tuple[JobState, int, int]]] = {}
        for state in self.jobs.values():
            for index, run in enumerate(state.tasks):
                if run.active and run.host in self.hosts:
                    groups.setdefault((run.host or "", state.owner), []).append(
                        (state, index, run.run)
                    )
        for key, items in groups.items():
            running = self._polling.get(key)
            if running is None or running.done():
                self._polling[key] = self._spawn(self._poll(key, items), f"poll {key}")

    async def _poll(self, key: tuple[str, str], items: list[tuple[JobState, int, int]]) -> None:
        host, login = key
        sessions = [session_name(state.id, index) for state, index, _ in items]
        try:
            probes = await self.runner.poll(self.hosts[host], login, sessions)
        except WardenError as err:
            await self._unreachable(items, err.message)
            return
        async with self._lock:
            now = self.clock()
            by_job: dict[int, list[tuple[int, str]]] = {}
            for (state, index, run_number), session in zip(items, sessions, strict=True):
                run = state.tasks[index]
                probe = probes.get(session)
                if probe is None or run.run != run_number or not run.active:
                    continue
                before = run.status
                if self._apply_probe(state, run, probe, now):
                    by_job.setdefault(state.id, []).append((index, before))
            for job_id, changes in by_job.items():
                state = self.jobs[job_id]
                ended = [i for i, _ in changes if state.tasks[i].status in TASK_ENDED]
                await self._commit(state, task_changes=changes, runs=ended)

    def _apply_probe(self, state: JobState, run: TaskRun, probe: Probe, now: datetime) -> bool:
        """Update one task from what its host said; True when its status changed."""
        before = run.status
        if probe.state == "running":
            run.last_seen_at = now
            run.status = "running"
            run.pid = probe.pid or run.pid
            run.reason = None
        elif probe.state == "exited":
            run.exit_code = probe.exit_code
            run.status = self._ended_status(state, probe.exit_code)
            if run.status == "failed":
                run.reason = f"exit code {probe.exit_code}"
        elif probe.state == "gone":
            run.status = "stopped" if state.stop_reason is not None else "failed"
            run.reason = (
                state.stop_reason
                if state.stop_reason is not None
                else "the process ended without an exit code (killed, or the host restarted)"
            )
        if run.status == "stopped" and run.reason is None:
            run.reason = state.stop_reason
        return run.status != before

    @staticmethod
    def _ended_status(state: JobState, exit_code: int | None) -> str:
        if state.stop_reason is not None:
            return "stopped"
        return "succeeded" if exit_code == 0 else "failed"

    async def _unreachable(self, items: list[tuple[JobState, int, int]], reason: str) -> None:
        async with self._lock:
            now = self.clock()
            lost_after = timedelta(seconds=self.settings.lost_after_s)
            by_job: dict[int, list[tuple[int, str]]] = {}
            for state, index, run_number in items:
                run = state.tasks[index]
                seen = run.last_seen_at or run.started_at or now
                if run.run != run_number or run.status == "lost" or not run.active:
                    continue
                if run.status == "running" and now - seen >= lost_after:
                    run.status, run.reason = "lost", reason
                    by_job.setdefault(state.id, []).append((index, "running"))
            for job_id, changes in by_job.items():
                await self._commit(self.jobs[job_id], task_changes=changes)

    async def _escalate_stops(self, now: datetime) -> None:
        int_grace = timedelta(seconds=self.settings.int_grace_s)
        term_grace = timedelta(seconds=self.settings.term_grace_s)
        for state in self.jobs.values():
            if state.stop_requested_at is None:
                continue
            if not state.active:
                state.stop_requested_at = None
                state.signals_sent = set()
                await self._commit(state)
                continue
            elapsed = now - state.stop_requested_at
            if elapsed >= int_grace + term_grace and "KILL" not in state.signals_sent:
                state.signals_sent |= {"TERM", "KILL"}
                self._signal(state, "KILL")
            elif elapsed >= int_grace and "TERM" not in state.signals_sent:
                state.signals_sent.add("TERM")
                self._signal(state, "TERM")

    async def _timers(self, now: datetime) -> list[tuple[JobState, dict[int, Any]]]:
        """Stop jobs whose time is up; the scheduled jobs whose start came (to launch)."""
        lead = timedelta(seconds=self.settings.reservation_stop_lead_s)
        launches = []
        for state in list(self.jobs.values()):
            held = self.book.get(state.reservation_id) if state.reservation_id else None
            if state.active:
                if state.stop_reason is not None:
                    continue
                if state.stop_at is not None and now >= state.stop_at:
                    await self._request_stop(state, "its stop time came")
                elif state.reservation_id is not None and self.book_loaded:
                    if held is None:
                        await self._request_stop(
                            state, f"reservation {state.reservation_id} was cancelled or ended"
                        )
                    elif now >= held.end - lead:
                        await self._request_stop(
                            state, f"reservation {state.reservation_id} ends at {held.end}"
                        )
                continue
            if state.status != "scheduled":
                continue
            if state.start_at is not None and now >= state.start_at:
                launches.append(state)
            elif state.reservation_id is not None and self.book_loaded:
                if held is None or now >= held.end - lead:
                    await self._fail_waiting(
                        state,
                        f"reservation {state.reservation_id} was cancelled or ended "
                        "before the job could start",
                    )
                elif held.start <= now:
                    launches.append(state)
        return [(state, self._fixed_placement(state)) for state in launches]

    async def _fail_waiting(self, state: JobState, reason: str) -> None:
        changes = []
        for index, run in enumerate(state.tasks):
            if run.status == "pending":
                run.status, run.reason = "failed", reason
                changes.append((index, "pending"))
        state.start_at = None
        state.reservation_id = None
        await self._commit(state, task_changes=changes, runs=[i for i, _ in changes])

    async def _launch_checked(
        self,
        state: JobState,
        placement: Mapping[int, tuple[str, tuple[str, ...]]],
        *,
        from_queue: bool,
    ) -> bool:
        """Launch after asking whether the owner may use the GPUs now; False if refused."""
        now = self.clock()
        until = self._run_until(state, now)
        if from_queue:
            until = max(until, now + state.window(self._min_window))
        gpus = [g for _, on in placement.values() for g in on]
        try:
            reasons = await self._use_refusals(state.owner, gpus, now, until)
        except WardenError as err:
            log.warning("job %d not started: %s", state.id, err.message)
            return False
        async with self._lock:
            if state.active or self.jobs.get(state.id) is not state:
                return False
            if reasons:
                message = "; ".join(str(r.get("message")) for r in reasons[:3])
                if from_queue:
                    refused = {str(r["gpu"]) for r in reasons if r.get("gpu")}
                    self.avoid.setdefault(state.id, set()).update(refused or gpus)
                    state.waiting_reason = message
                    return False
                await self._fail_waiting(state, f"not started: {message}")
                return False
            starting = await self._mark_starting(state, placement, from_queue=from_queue)
        self._spawn(self._start_tasks(state, starting), f"start job {state.id}")
        return True

    @property
    def _min_window(self) -> timedelta:
        return timedelta(seconds=self.settings.queue_min_window_s)

    # -- the queue ------------------------------------------------------------------------------

    def queue_state(self, now: datetime) -> QueueState:
        held = {g for s in self.jobs.values() for run in s.tasks if run.active for g in run.gpus}
        busy = {g for on_host in self.busy.values() for g in on_host} | held
        gpus = {
            uuid: Gpu(uuid, host, index, uuid in busy) for uuid, (host, index) in self.gpus.items()
        }
        bookings = {
            uuid: [
                Booking(h.reservation_id, h.owner, h.guests, h.start, h.end)
                for h in self.book.on_gpu(uuid)
            ]
            for uuid in gpus
        }
        queue = [
            QueuedJob(
                job_id=s.id,
                owner=s.owner,
                enqueued_at=s.enqueued_at or s.created_at,
                demands=tuple(Demand(t.index, t.host, t.gpus, t.gpu_count) for t in s.job.tasks),
                max_runtime=None if s.max_runtime_s is None else timedelta(seconds=s.max_runtime_s),
            )
            for s in self.jobs.values()
            if s.queued and s.status == "queued"
        ]
        running = [
            RunningJob(
                job_id=s.id,
                owner=s.owner,
                gpus=frozenset(g for run in s.tasks if run.active for g in run.gpus),
                preemptible=True,
                interrupted_for=frozenset(s.interrupted_for),
            )
            for s in self.jobs.values()
            if s.active and s.from_queue
        ]
        return QueueState(
            now=now,
            gpus=gpus,
            bookings=bookings,
            queue=queue,
            running=running,
            min_window=self._min_window,
            preempt_lead=timedelta(seconds=self.settings.preempt_lead_s),
            avoid={job_id: frozenset(gpus) for job_id, gpus in self.avoid.items()},
            hold_after=timedelta(seconds=self.settings.queue_hold_after_s)
            if self.settings.queue_hold_after_s
            else None,
        )

    async def _queue_pass(self) -> None:
        async with self._lock:
            if not any(s.queued or (s.active and s.from_queue) for s in self.jobs.values()):
                return
            decisions = schedule(self.queue_state(self.clock()))
            starts = []
            for decision in decisions:
                state = self.jobs.get(decision.job_id)
                if state is None:
                    continue
                if isinstance(decision, Interrupt):
                    state.interrupted_for.add(decision.reservation_id)
                    if state.stop_reason is None:
                        state.stop_reason = (
                            f"yields to reservation {decision.reservation_id}, "
                            f"which starts at {decision.reservation_start.isoformat()}"
                        )
                    await self._commit(state)
                    self._signal(state, "INT")
                elif isinstance(decision, Kill):
                    state.interrupted_for.add(decision.reservation_id)
                    state.stop_reason = state.stop_reason or (
                        f"yields to reservation {decision.reservation_id}"
                    )
                    await self._commit(state)
                    self._signal(state, "KILL")
                elif isinstance(decision, Waiting):
                    state.waiting_reason = decision.reason
                elif isinstance(decision, Start):
                    starts.append((state, decision.placement))
        for state, placement in starts:
            await self._launch_checked(state, placement, from_queue=True)


def _rendered_dict(task: RenderedTask) -> dict[str, Any]:
    return {
        "index": task.index,
        "host": task.host,
        "command": task.command,
        "env": dict(task.env),
        "gpus": list(task.gpus),
        "port": task.port,
    }
