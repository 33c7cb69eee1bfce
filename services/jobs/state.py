"""A job as the engine keeps it in memory: its definition, schedule and each task's run.

`event_data` is what job.* events carry (no commands, no environment: they may hold secrets);
`answer` is what the owner reads by RPC (everything).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from services.jobs.domain import TASK_ACTIVE, TASK_ENDED, Job, job_status
from services.jobs.scripts import session_name
from services.jobs.spec import handback_dict, task_dict


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


@dataclass
class TaskRun:
    """The current (or last) run of one task."""

    status: str = "pending"
    run: int = 0
    host: str | None = None
    gpus: tuple[str, ...] = ()
    port: int | None = None
    pid: int | None = None
    started_at: datetime | None = None  # by the host's clock (the pid check compares it)
    ended_at: datetime | None = None
    exit_code: int | None = None
    reason: str | None = None
    last_seen_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.status in TASK_ACTIVE

    @property
    def ended(self) -> bool:
        return self.status in TASK_ENDED


@dataclass
class JobState:
    job: Job
    created_at: datetime
    updated_at: datetime
    tasks: list[TaskRun]
    status: str = "pending"
    queued: bool = False
    enqueued_at: datetime | None = None
    start_at: datetime | None = None
    stop_at: datetime | None = None
    reservation_id: int | None = None
    max_runtime_s: float | None = None
    from_queue: bool = False  # this run was started by the scheduler (it may be preempted)
    stop_requested_at: datetime | None = None  # SIGINT sent; TERM and KILL follow
    stop_reason: str | None = None  # why it is being stopped (then it ends as "stopped")
    interrupted_for: set[int] = field(default_factory=set)  # reservations it yielded to
    waiting_reason: str | None = None
    signals_sent: set[str] = field(default_factory=set)  # of the current stop
    interruptions: int = 0  # times it yielded its GPUs to a reservation
    time_limit_told: bool = False  # its owner was told this run passed max_runtime_s
    # How the last run failed (services.jobs.failures): "early" (its own error, not retried)
    # or "infrastructure" (its GPU failed or its host was lost: requeued), and why.
    failure: str | None = None
    failure_reason: str | None = None
    predicted_start: datetime | None = None  # a queued job's, from the queue's forecast

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def owner(self) -> str:
        return self.job.owner

    @property
    def active(self) -> bool:
        return any(task.active for task in self.tasks)

    @property
    def scheduled(self) -> bool:
        return self.start_at is not None or self.reservation_id is not None

    def derive_status(self) -> str:
        return job_status(
            [task.status for task in self.tasks],
            queued=self.queued,
            scheduled=self.scheduled,
            stopping=self.stop_reason is not None,
        )

    def window(self, minimum: timedelta) -> timedelta:
        """How long its GPUs must be free for it: its declared run time, else `minimum`."""
        if self.max_runtime_s is None:
            return minimum
        return timedelta(seconds=self.max_runtime_s)

    def task_data(self, index: int) -> dict[str, Any]:
        spec, run = self.job.tasks[index], self.tasks[index]
        return {
            "index": index,
            "host": run.host or spec.host,
            "gpus": list(run.gpus or spec.gpus),
            "gpu_count": spec.gpu_count,
            "labels": list(spec.labels),
            "status": run.status,
            "session": session_name(self.id, index),
            "exit_code": run.exit_code,
            "reason": run.reason,
            "started_at": _iso(run.started_at),
            "ended_at": _iso(run.ended_at),
        }

    def event_data(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner": self.owner,
            "name": self.job.name,
            "status": self.status,
            "queued": self.queued,
            "start_at": _iso(self.start_at),
            "stop_at": _iso(self.stop_at),
            "reservation_id": self.reservation_id,
            "max_runtime_s": self.max_runtime_s,
            "template": None if self.job.template is None else self.job.template.kind,
            "waiting_reason": self.waiting_reason,
            "interruptions": self.interruptions,
            "failure": self.failure,
            "predicted_start": _iso(self.predicted_start) if self.queued else None,
            "tasks": [self.task_data(i) for i in range(len(self.tasks))],
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }

    def answer(self) -> dict[str, Any]:
        """Everything about the job, for its owner and admins."""
        data = self.event_data()
        template = self.job.template
        data.update(
            description=self.job.description,
            params=[p.to_dict() for p in self.job.params],
            env=dict(self.job.env),
            template=None
            if template is None
            else {"kind": template.kind, "options": dict(template.options)},
            enqueued_at=_iso(self.enqueued_at),
            stop_reason=self.stop_reason,
            shared_gpus=self.job.shared_gpus,
            failure_reason=self.failure_reason,
            **handback_dict(self.job.handback),
        )
        for shown, spec, run in zip(data["tasks"], self.job.tasks, self.tasks, strict=True):
            shown.update(task_dict(spec))
            shown.update(
                host=run.host or spec.host,
                gpus=list(run.gpus or spec.gpus),
                pid=run.pid,
                port=run.port,
                run=run.run,
            )
        return data
