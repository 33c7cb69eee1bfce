"""The events the jobs service publishes: jobs defined, changed, deleted; job and task status."""

from __future__ import annotations

from marshmallow import fields, validate

from services.shared.contracts.schema import Integer, NonEmpty, Number, Str, Strict
from services.shared.contracts.validation import EventType

JOB_STATUSES = (
    "pending",
    "scheduled",
    "queued",
    "starting",
    "running",
    "stopping",
    "succeeded",
    "failed",
    "stopped",
    "lost",
)
TASK_STATUSES = ("pending", "starting", "running", "succeeded", "failed", "stopped", "lost")


class TaskData(Strict):
    """A task as job events carry it: where and how it runs, never its command or environment
    (they may hold secrets; the owner reads them by RPC)."""

    index = Integer(required=True, validate=validate.Range(min=0))
    host = Str(required=True, allow_none=True)  # None: a queued task not placed yet
    gpus = fields.List(Str(), required=True)
    gpu_count = Integer(allow_none=True, load_default=None)
    # With gpu_count: only GPUs carrying these labels (services.shared.gpu_labels).
    labels = fields.List(Str(), load_default=list)
    status = Str(required=True, validate=validate.OneOf(TASK_STATUSES))
    session = Str(required=True)  # screen/tmux session name on the host
    exit_code = Integer(allow_none=True, load_default=None)
    reason = Str(allow_none=True, load_default=None)
    started_at = fields.AwareDateTime(allow_none=True, load_default=None)
    ended_at = fields.AwareDateTime(allow_none=True, load_default=None)


class JobData(Strict):
    """A job after the change (every job.* event)."""

    id = Integer(required=True)
    owner = Str(required=True, validate=NonEmpty)
    name = Str(required=True)
    status = Str(required=True, validate=validate.OneOf(JOB_STATUSES))
    queued = fields.Boolean(required=True)
    start_at = fields.AwareDateTime(allow_none=True, load_default=None)
    stop_at = fields.AwareDateTime(allow_none=True, load_default=None)
    reservation_id = Integer(allow_none=True, load_default=None)
    max_runtime_s = Number(allow_none=True, load_default=None)
    template = Str(allow_none=True, load_default=None)  # the template's kind
    waiting_reason = Str(allow_none=True, load_default=None)  # why a queued job waits
    interruptions = Integer(load_default=0)  # times it yielded its GPUs to a reservation
    # How its last run failed: "early" (on its own in its first minutes: not retried, its
    # owner told with the output's tail) or "infrastructure" (GPU failed, host lost: requeued).
    failure = Str(allow_none=True, load_default=None)
    # a queued job's predicted start (None: not within the forecast's horizon)
    predicted_start = fields.AwareDateTime(allow_none=True, load_default=None)
    tasks = fields.List(fields.Nested(TaskData), required=True)
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)


class JobChanged(JobData):
    actor = Str(required=True)
    changed = fields.List(Str(), load_default=list)  # job.updated: the fields edited


class JobStatusChanged(JobData):
    previous_status = Str(required=True, validate=validate.OneOf(JOB_STATUSES))


class TaskStatusChanged(Strict):
    job_id = Integer(required=True)
    owner = Str(required=True, validate=NonEmpty)
    task = fields.Nested(TaskData, required=True)
    previous_status = Str(required=True, validate=validate.OneOf(TASK_STATUSES))
    at = fields.AwareDateTime(required=True)


class QueuedJobData(Strict):
    """A waiting job in the queue's order."""

    id = Integer(required=True)
    owner = Str(required=True, validate=NonEmpty)
    name = Str(required=True)
    position = Integer(required=True, validate=validate.Range(min=1))
    gpus = Integer(required=True)
    enqueued_at = fields.AwareDateTime(required=True)
    max_runtime_s = Number(allow_none=True, load_default=None)
    reason = Str(allow_none=True, load_default=None)
    predicted_start = fields.AwareDateTime(allow_none=True, load_default=None)


class QueueUserData(Strict):
    """A user's standing in the fair share."""

    user = Str(required=True, validate=NonEmpty)
    share = Number(required=True)
    usage_gpu_h = Number(required=True)
    queued = Integer(required=True)
    running = Integer(required=True)


class QueueChanged(Strict):
    policy = Str(required=True, validate=validate.OneOf(("fair", "fifo")))
    half_life_h = Number(required=True)
    horizon_h = Number(required=True)
    at = fields.AwareDateTime(required=True)
    jobs = fields.List(fields.Nested(QueuedJobData), required=True)
    users = fields.List(fields.Nested(QueueUserData), required=True)


EVENTS: tuple[EventType, ...] = (
    EventType(
        "job.created",
        1,
        "jobs",
        JobChanged,
        "A job was defined (it starts later: now, at a time, in a reservation or from the queue).",
    ),
    EventType(
        "job.updated",
        1,
        "jobs",
        JobChanged,
        "A job's definition or schedule changed, or it was put in or taken out of the queue.",
    ),
    EventType(
        "job.deleted",
        1,
        "jobs",
        JobChanged,
        "A job that was not running was deleted.",
    ),
    EventType(
        "job.status_changed",
        1,
        "jobs",
        JobStatusChanged,
        "A job's status (derived from its tasks') changed.",
    ),
    EventType(
        "task.status_changed",
        1,
        "jobs",
        TaskStatusChanged,
        "A task started, is running, ended (with its exit code), was stopped or lost its host.",
    ),
    EventType(
        "queue.changed",
        1,
        "jobs",
        QueueChanged,
        "The queue's order, a waiting job's reason or predicted start changed: the whole "
        "queue as GET /queue answers it.",
    ),
)
