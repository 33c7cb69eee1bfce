"""What the jobs service does about a job's run besides starting and stopping it: how a failed
run failed (`services.jobs.failures`, pure), telling the owner of an early failure at once with
the tail of its output, a GPU that failed under a running job, and time limits.

- A task that ends is classified under the lock, before its change is written
  (`on_task_ended`, the supervisor's hook), so the job's `failure` goes out with the change and
  a job whose GPU failed or whose host was lost goes back to the queue in the same write
  (`WorkingState` requeues it).
- An early failure: its owner is told through the notification path (`violations.notify`,
  kind `job_failed`) with the exit status and the last lines of the task's log, read from its
  host in the background.
- `gpu.health_changed` with state "failed" (from the monitor): each running job on that GPU is
  marked; when it ends (it fails or is stopped), it is requeued if it came from the queue.
  Nothing is stopped for it: the job may still end well.
- Time limits (`max_runtime_s`): once a run is past it, its owner is told (once per run); with
  `on_time_limit = "stop"` the job is stopped too (its hand-back signal, then the usual
  escalation to SIGKILL).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from services.jobs import failures
from services.jobs.state import JobState
from services.jobs.supervisor import TaskSupervisor
from services.jobs.working_state import WorkingState
from services.notifications import api as notifications_api
from services.shared.bus import Bus
from services.shared.errors import WardenError

log = logging.getLogger("warden.jobs")

NOTIFY_TIMEOUT_S = 30.0
# The log read for an early failure's tail: enough for TAIL_LINES long lines.
TAIL_BYTES = 16384


class Aftercare:
    def __init__(self, working: WorkingState, supervisor: TaskSupervisor, bus: Bus | None) -> None:
        self.working = working
        self.supervisor = supervisor
        self.bus = bus
        self._background: set[asyncio.Task[None]] = set()
        supervisor.on_task_ended = self.on_task_ended

    async def settle(self) -> None:
        """Wait for the notifications started so far (tests and shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def _spawn(self, coro: Any, name: str) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- a task ended -------------------------------------------------------------------------

    def on_task_ended(self, state: JobState, index: int, before: str) -> None:
        """Under the lock, before the change is written: how the run failed, if it did."""
        run = state.tasks[index]
        infrastructure = state.failure_reason if state.failure == failures.INFRASTRUCTURE else None
        ending = failures.Ending(
            status=run.status,
            previous_status=before,
            exit_code=run.exit_code,
            started_at=run.started_at,
            ended_at=run.ended_at or self.working.clock(),
            stopped_by_warden=state.stop_reason is not None,
            infrastructure=infrastructure,
        )
        kind = failures.classify(ending, self.working.settings.early_failure_s)
        if kind == failures.INFRASTRUCTURE and infrastructure is None:
            state.failure = failures.INFRASTRUCTURE
            state.failure_reason = failures.host_lost_reason(run.host)
            run.reason = state.failure_reason
        elif kind == failures.EARLY and state.failure is None:
            state.failure = failures.EARLY
            state.failure_reason = f"task {index} exited with status {run.exit_code} on its own"
            ran = (ending.ended_at - run.started_at) if ending.ended_at and run.started_at else None
            ran_s = ran.total_seconds() if ran is not None else 0.0
            self._spawn(
                self._tell_early_failure(state, index, run.run, run.exit_code, ran_s),
                f"tell job {state.id} failed",
            )

    async def _tell_early_failure(
        self, state: JobState, index: int, run_number: int, exit_code: int | None, ran_s: float
    ) -> None:
        try:
            tail = failures.output_tail(await self.supervisor.log_tail(state, index, TAIL_BYTES))
        except WardenError as err:
            tail = f"(its output could not be read: {err.message})"
        title, text = failures.early_failure_note(
            state.id, state.job.name, index, exit_code, ran_s, tail
        )
        await self._notify(state.owner, title, text, f"job:{state.id}:run:{run_number}:early")

    async def _notify(self, user: str, title: str, text: str, key: str) -> None:
        if self.bus is None:
            return
        try:
            await notifications_api.NOTIFY.call(
                self.bus,
                {
                    "user": user,
                    "kind": "job_failed",
                    "title": title,
                    "text": text[:4000],
                    "key": key,
                },
                timeout=NOTIFY_TIMEOUT_S,
            )
        except Exception as err:  # best effort: the job's status and failure say it too
            log.warning("could not tell %s: %s (%s)", user, title, err)

    # -- a GPU failed -------------------------------------------------------------------------

    async def on_gpu_health(self, data: Mapping[str, Any]) -> None:
        """`gpu.health_changed`: a GPU that failed marks the running jobs on it."""
        if data.get("state") != "failed":
            return
        uuid = str(data.get("uuid"))
        reason = failures.gpu_failed_reason(
            str(data.get("host")), data.get("index"), uuid, data.get("reason")
        )
        async with self.working.lock:
            for state in list(self.working.jobs.values()):
                on_it = any(run.active and uuid in run.gpus for run in state.tasks)
                if not on_it or state.failure == failures.INFRASTRUCTURE:
                    continue
                state.failure, state.failure_reason = failures.INFRASTRUCTURE, reason
                await self.working.commit(state)
        self.working.kick()

    # -- time limits --------------------------------------------------------------------------

    async def time_limits(self, now: datetime) -> None:
        """Under the lock: tell the owners of runs past their time limit (once per run); stop
        the ones that said so."""
        for state in list(self.working.jobs.values()):
            if state.max_runtime_s is None or state.time_limit_told or not state.active:
                continue
            started = [r.started_at for r in state.tasks if r.active and r.started_at is not None]
            if not started or now - min(started) < timedelta(seconds=state.max_runtime_s):
                continue
            stopping = state.job.handback.on_time_limit == "stop" and state.stop_reason is None
            state.time_limit_told = True
            await self.working.commit(state)
            if stopping:
                await self.supervisor.request_stop(
                    state,
                    f"it ran past its time limit of {state.max_runtime_s:.0f} s",
                    first_signal=state.job.handback.signal,
                )
            title, text = failures.time_limit_note(
                state.id, state.job.name, state.max_runtime_s, stopping
            )
            run = max(r.run for r in state.tasks)
            self._spawn(
                self._notify(state.owner, title, text, f"job:{state.id}:run:{run}:time_limit"),
                f"tell job {state.id} time limit",
            )
