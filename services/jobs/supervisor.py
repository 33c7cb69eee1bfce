"""The jobs service's task supervisor: all it does on hosts goes through the `TaskRunner`
(`services.jobs.runner`): it starts a job's tasks, polls them (one round trip per host and
owner), signals them, escalates a stop (SIGINT, then SIGTERM after `int_grace_s`, SIGKILL after
`term_grace_s` more) and reads their logs.

SSH work (starting, polling, signalling tasks) runs outside the lock in background tasks: a
slow or dead host never holds up another host, an RPC or the queue. Each result is applied
(under the lock of the `WorkingState`) only if the task is still in the run it was meant for.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from services.jobs.affinity import affinity_prefix, with_affinity
from services.jobs.domain import TASK_ENDED, Job, RenderedTask
from services.jobs.render import render_job
from services.jobs.scripts import Probe, Started, session_name
from services.jobs.state import JobState, TaskRun
from services.jobs.working_state import WorkingState
from services.shared.config import HostConfig
from services.shared.errors import NotFound, StateConflict, WardenError

log = logging.getLogger("warden.jobs")


class TaskRunner(Protocol):
    """What the supervisor needs from `runner.TaskRunner` (a fake one in unit tests)."""

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


class TaskSupervisor:
    def __init__(self, working: WorkingState, runner: TaskRunner) -> None:
        self.working = working
        self.runner = runner
        self._background: set[asyncio.Task[None]] = set()
        self._polling: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Under the lock, before a task's end is written: (job, task index, status before).
        self.on_task_ended: Callable[[JobState, int, str], None] | None = None

    # -- its background work ------------------------------------------------------------------

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def settle(self) -> None:
        """Wait for the SSH work started so far (tests and shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def stop(self) -> None:
        pending = list(self._background)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _followed(self, host: str | None) -> bool:
        """Whether tasks on `host` are followed: a host of the inventory, or one removed from it
        while they ran (its last record: removing a host never abandons work on it)."""
        return host is not None and self.working.hosts.known(host) is not None

    # -- starting ---------------------------------------------------------------------------

    def render(
        self, job: Job, placement: Mapping[int, tuple[str, tuple[str, ...]]]
    ) -> list[RenderedTask]:
        """What each task runs where, on a port no running task holds on its host."""
        taken: dict[str, set[int]] = {}
        for state in self.working.jobs.values():
            for run in state.tasks:
                if run.active and run.host is not None and run.port is not None:
                    taken.setdefault(run.host, set()).add(run.port)
        addresses = {name: host.address or name for name, host in self.working.hosts.items()}
        try:
            rendered = render_job(
                job,
                placement,
                addresses=addresses,
                taken_ports=taken,
                port_range=(self.working.settings.port_min, self.working.settings.port_max),
            )
        except ValueError as err:
            raise StateConflict(str(err), {"id": job.id}) from err
        if self.working.settings.cpu_affinity:
            rendered = [self._bound(task) for task in rendered]
        return rendered

    def _bound(self, task: RenderedTask) -> RenderedTask:
        """The task with its shell bound to the CPUs nearest its GPUs (when known)."""
        indexes = [self.working.gpus.get(uuid, (task.host, None))[1] for uuid in task.gpus]
        if any(index is None for index in indexes):
            return task
        prefix = affinity_prefix(
            self.working.topologies.get(task.host), [i for i in indexes if i is not None]
        )
        return replace(task, command=with_affinity(task.command, prefix))

    async def mark_starting(
        self,
        state: JobState,
        placement: Mapping[int, tuple[str, tuple[str, ...]]],
        *,
        from_queue: bool,
    ) -> list[tuple[RenderedTask, int]]:
        """Under the lock: render, mark every task starting (its GPUs are taken from now)."""
        rendered = self.render(state.job, placement)
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
        state.failure = state.failure_reason = None
        state.time_limit_told = False
        self.working.avoid.pop(state.id, None)
        await self.working.commit(state, task_changes=changed)
        return [(task, state.tasks[task.index].run) for task in rendered]

    def start_in_background(
        self, state: JobState, starting: list[tuple[RenderedTask, int]]
    ) -> None:
        self._spawn(self.start_tasks(state, starting), f"start job {state.id}")

    async def start_tasks(self, state: JobState, starting: list[tuple[RenderedTask, int]]) -> None:
        """Start the tasks `mark_starting` marked; if one does not start, stop the job."""
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
        async with self.working.lock:
            changes = []
            for (task, run_number), why in zip(starting, outcomes, strict=True):
                run = state.tasks[task.index]
                if why is None or run.run != run_number or run.status != "starting":
                    continue
                run.status, run.reason, run.ended_at = "failed", why, self.working.clock()
                changes.append((task.index, "starting"))
            if changes:
                await self.working.commit(state, task_changes=changes, runs=[i for i, _ in changes])
            if state.active and state.stop_reason is None:
                # The others cannot do their part alone (a distributed job waits for all).
                await self.request_stop(state, f"a task could not start ({failures[0]})")

    async def _start_one(self, state: JobState, task: RenderedTask, run_number: int) -> str | None:
        """Start one task; None when it runs (applied at once), else why it did not start."""
        host = self.working.hosts.get(task.host)
        if host is None:  # removed from the inventory since the job was placed
            return f"{task.host} was removed from the inventory"
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
        async with self.working.lock:
            run = state.tasks[task.index]
            if run.run == run_number and run.status == "starting":
                run.status, run.pid = "running", started.pid
                run.started_at = started.started_at or self.working.clock()
                run.last_seen_at = self.working.clock()
                await self.working.commit(state, task_changes=[(task.index, "starting")])
        return None

    # -- stopping ---------------------------------------------------------------------------

    async def request_stop(self, state: JobState, reason: str, first_signal: str = "INT") -> None:
        """Under the lock: SIGINT (or `first_signal`) now; the tick sends TERM and KILL after
        their grace."""
        state.stop_reason = reason
        state.stop_requested_at = self.working.clock()
        state.signals_sent = {first_signal}
        await self.working.commit(state)
        self.signal(state, first_signal)

    def signal(self, state: JobState, signal: str) -> None:
        """Send `signal` to each active task of the job, in the background."""
        for index, run in enumerate(state.tasks):
            if run.active and self._followed(run.host):
                self._spawn(
                    self._signal_one(state, index, run.run, signal),
                    f"signal {signal} job {state.id} task {index}",
                )

    async def _signal_one(self, state: JobState, index: int, run_number: int, signal: str) -> None:
        run = state.tasks[index]
        host = self.working.hosts.known(run.host or "")
        if host is None:
            return
        try:
            answer = await self.runner.signal(
                host, state.owner, session_name(state.id, index), signal
            )
        except WardenError as err:
            log.warning("job %d task %d: SIG%s not sent: %s", state.id, index, signal, err.message)
            return
        if answer == "gone" and signal == "KILL":
            self.working.kick()  # the next poll records how it ended
        log.info("job %d task %d run %d: SIG%s %s", state.id, index, run_number, signal, answer)

    async def escalate_stops(self, now: datetime) -> None:
        """Under the lock: TERM, then KILL, to jobs that outlived their stop's grace."""
        int_grace = timedelta(seconds=self.working.settings.int_grace_s)
        term_grace = timedelta(seconds=self.working.settings.term_grace_s)
        for state in self.working.jobs.values():
            if state.stop_requested_at is None:
                continue
            if not state.active:
                state.stop_requested_at = None
                state.signals_sent = set()
                await self.working.commit(state)
                continue
            elapsed = now - state.stop_requested_at
            # Recorded before it goes out: a new leader never sends a signal twice.
            if elapsed >= int_grace + term_grace and "KILL" not in state.signals_sent:
                state.signals_sent |= {"TERM", "KILL"}
                await self.working.commit(state)
                self.signal(state, "KILL")
            elif elapsed >= int_grace and "TERM" not in state.signals_sent:
                state.signals_sent.add("TERM")
                await self.working.commit(state)
                self.signal(state, "TERM")

    # -- polling ------------------------------------------------------------------------------

    def poll_tasks(self) -> None:
        """Poll the active tasks in the background, one round trip per host and owner (none
        while the last poll of that host and owner still runs)."""
        groups: dict[tuple[str, str], list[tuple[JobState, int, int]]] = {}
        for state in self.working.jobs.values():
            for index, run in enumerate(state.tasks):
                if run.active and self._followed(run.host):
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
            known = self.working.hosts.known(host)
            if known is None:
                return
            probes = await self.runner.poll(known, login, sessions)
        except WardenError as err:
            await self._unreachable(items, err.message)
            return
        async with self.working.lock:
            now = self.working.clock()
            by_job: dict[int, list[tuple[int, str]]] = {}
            for (state, index, run_number), session in zip(items, sessions, strict=True):
                run = state.tasks[index]
                probe = probes.get(session)
                if probe is None or run.run != run_number or not run.active:
                    continue
                before = run.status
                if self._apply_probe(state, run, probe, now):
                    by_job.setdefault(state.id, []).append((index, before))
                    if run.ended and self.on_task_ended is not None:
                        self.on_task_ended(state, index, before)
            for job_id, changes in by_job.items():
                state = self.working.jobs[job_id]
                ended = [i for i, _ in changes if state.tasks[i].status in TASK_ENDED]
                await self.working.commit(state, task_changes=changes, runs=ended)

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
        async with self.working.lock:
            now = self.working.clock()
            lost_after = timedelta(seconds=self.working.settings.lost_after_s)
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
                await self.working.commit(self.working.jobs[job_id], task_changes=changes)

    # -- logs ---------------------------------------------------------------------------------

    async def log_tail(self, state: JobState, index: int, max_bytes: int) -> str:
        """The end of the output of the task's last run, read on its host."""
        run = state.tasks[index]
        host = self.working.hosts.known(run.host or "")
        if host is None:
            raise NotFound(
                f"{run.host} is not a host Warden knows (any more)",
                {"id": state.id, "task": index, "host": run.host},
            )
        return await self.runner.log_tail(
            host,
            state.owner,
            session_name(state.id, index),
            max_bytes,
        )
