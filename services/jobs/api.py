"""The jobs service's public call contract: its RPC methods, their arguments (a job definition
among them) and answers, and the errors they raise (see `services.shared.rpc`).

Every method that acts on a job takes `actor` (who asks) and `admin` (whether they are one: the
gateway knows it from the caller's token); only a job's owner or an admin may change it or read
its commands, environment and logs.
"""

from __future__ import annotations

import re
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.jobs.domain import HANDBACK_SIGNALS, TEMPLATE_KINDS, TIME_LIMIT_ACTIONS
from services.shared.contracts import JOB_STATUSES, TASK_STATUSES
from services.shared.errors import (
    Forbidden,
    InvalidRequest,
    NotAllowed,
    NotFound,
    ReservationConflict,
    StateConflict,
    WardenError,
    register_error,
)
from services.shared.gpu_labels import selector_problem
from services.shared.remote.ssh import HostUnreachable
from services.shared.rpc import Answer, methods_of
from services.shared.usage_report import FactsSchema, PeriodArgs

SERVICE = "jobs"

_Str = fields.String
_Time = fields.AwareDateTime
_Int = fields.Integer

# One read of a task's log returns at most this many bytes.
LOG_MAX_BYTES = 1 << 20
LOG_DEFAULT_BYTES = 64 * 1024
# Starting a job logs in to its hosts over SSH (one round trip each, in parallel), and reading
# a log is one more: longer than an ordinary RPC may take.
SSH_RPC_TIMEOUT_S = 60.0


@register_error
class GpusShared(WardenError):
    """Two tasks of a job name the same GPU and the job does not say `shared_gpus` (422);
    `details.gpus` maps each such GPU to the tasks that name it."""

    code = "gpus_shared"


# --- a job definition ---------------------------------------------------------------------------

NAME_MAX = 255
MAX_TASKS = 256


_MIG_PLACE = re.compile(r"([0-9]{1,3})/mig([0-9])")  # instance 1 of GPU 0: `0/mig1`


class _GpuRef(fields.Field):
    """A GPU by index (an int, or a string of digits) or by uuid; a MIG instance also by its
    place `0/mig1` (index 1001: 1000 x (GPU + 1) + MIG Dev)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int | str:
        if isinstance(value, bool):
            raise ValidationError("a GPU index (0, 1, ...) or uuid")
        if isinstance(value, int) and value >= 0:
            return value
        if isinstance(value, str) and (place := _MIG_PLACE.fullmatch(value)):
            return 1000 * (int(place[1]) + 1) + int(place[2])
        if isinstance(value, str) and value.isdigit() and len(value) < 4:
            return int(value)
        if isinstance(value, str) and 0 < len(value) <= 128 and value.isprintable():
            return value
        raise ValidationError("a GPU index (0, 1, ...) or uuid")


class ParamSchema(Schema):
    name = _Str(load_default="", validate=validate.Length(max=256))
    value = _Str(load_default=None, allow_none=True, validate=validate.Length(max=65536))
    separator = _Str(load_default=" ", validate=validate.OneOf((" ", "=")))


_Env = fields.Dict(
    keys=_Str(validate=validate.Length(min=1, max=256)),
    values=_Str(validate=validate.Length(max=65536)),
    load_default=dict,
)


class TemplateSchema(Schema):
    kind = _Str(required=True, validate=validate.OneOf(TEMPLATE_KINDS))
    options = fields.Dict(keys=_Str(), load_default=dict)


def _label_selector(terms: list[str]) -> None:
    problem = selector_problem(terms)
    if problem:
        raise ValidationError(problem)


class TaskSchema(Schema):
    host = _Str(load_default=None, allow_none=True, validate=validate.Length(min=1, max=255))
    command = _Str(required=True, validate=validate.Length(min=1, max=65536))
    gpus = fields.List(_GpuRef(), load_default=list, validate=validate.Length(max=64))
    gpu_count = fields.Integer(
        load_default=None, allow_none=True, strict=True, validate=validate.Range(min=1, max=64)
    )
    labels = fields.List(
        _Str(),
        load_default=list,
        validate=_label_selector,
        metadata={
            "description": "with gpu_count: only GPUs carrying every label "
            "(model=A100-80GB, arch=hopper, memory=80GB; key!=value: not carrying it)"
        },
    )
    cwd = _Str(load_default="", validate=validate.Length(max=4096))
    params = fields.List(fields.Nested(ParamSchema), load_default=list)
    env = _Env
    role = _Str(load_default="worker")


class DefinitionSchema(Schema):
    """What create_job and update_job take (beside actor and the job id)."""

    name = _Str(required=True, validate=validate.Length(min=1, max=NAME_MAX))
    description = _Str(load_default="", validate=validate.Length(max=10_000))
    params = fields.List(fields.Nested(ParamSchema), load_default=list)
    env = _Env
    template = fields.Nested(TemplateSchema, load_default=None, allow_none=True)
    tasks = fields.List(
        fields.Nested(TaskSchema), required=True, validate=validate.Length(min=1, max=MAX_TASKS)
    )
    # When it runs: start_at (a time), reservation_id (inside one of the owner's
    # reservations), queued (when its GPUs are free); none of them: on `start_job`.
    start_at = fields.AwareDateTime(load_default=None, allow_none=True)
    stop_at = fields.AwareDateTime(load_default=None, allow_none=True)
    reservation_id = fields.Integer(load_default=None, allow_none=True, strict=True)
    queued = fields.Boolean(load_default=False)
    shared_gpus = fields.Boolean(
        load_default=False,
        metadata={
            "description": "true: tasks of this job may run on the same GPU; false (default): "
            "a GPU named by two tasks is refused (422 `gpus_shared`)"
        },
    )
    max_runtime_s = fields.Float(
        load_default=None,
        allow_none=True,
        validate=validate.Range(min=1, max=366 * 86400),
        metadata={"description": "its time limit: how long it may run (seconds)"},
    )
    # How a queued job gives its GPUs back to a reservation, and its time limit's action.
    handback_signal = _Str(
        load_default="TERM",
        validate=validate.OneOf(HANDBACK_SIGNALS),
        metadata={
            "description": "the signal a queued job gets handback_grace_s before someone "
            "else's reservation of its GPUs starts (to checkpoint); SIGKILL follows at its start"
        },
    )
    handback_grace_s = fields.Float(
        load_default=None,
        allow_none=True,
        validate=validate.Range(min=0, max=86400),
        metadata={
            "description": "seconds between the hand-back signal and the reservation's "
            "start; null: [jobs] preempt_lead_s"
        },
    )
    requeue = fields.Boolean(
        load_default=None,
        allow_none=True,
        metadata={
            "description": "a queued job that yielded to a reservation goes back to the "
            "queue (keeping its place) to resume; null: [jobs] requeue_on_preempt"
        },
    )
    on_time_limit = _Str(
        load_default="tell",
        validate=validate.OneOf(TIME_LIMIT_ACTIONS),
        metadata={
            "description": "past max_runtime_s its owner is told (tell); with stop it "
            "is stopped too"
        },
    )

    @validates_schema
    def one_schedule(self, data: dict[str, Any], **_: Any) -> None:
        chosen = [
            key
            for key in ("start_at", "reservation_id", "queued")
            if data.get(key) not in (None, False)
        ]
        if len(chosen) > 1:
            raise ValidationError(f"choose one of start_at, reservation_id, queued (got {chosen})")
        start, stop = data.get("start_at"), data.get("stop_at")
        if start is not None and stop is not None and stop <= start:
            raise ValidationError("must be after start_at", "stop_at")


# --- arguments ----------------------------------------------------------------------------------

_User = _Str(required=True, validate=validate.Length(min=1, max=255))
_JobId = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class Caller(Schema):
    actor = _User
    admin = fields.Boolean(load_default=False)


class CreateArgs(Caller, DefinitionSchema):
    owner = _Str(load_default=None, allow_none=True, validate=validate.Length(min=1, max=255))


class UpdateArgs(Caller, DefinitionSchema):
    id = _JobId


class JobArgs(Caller):
    id = _JobId


class GetArgs(Schema):
    id = _JobId
    actor = _Str(load_default="")
    admin = fields.Boolean(load_default=False)


class ListArgs(Schema):
    owner = _Str(
        validate=validate.Length(min=1, max=255),
        metadata={"description": "only theirs"},
    )
    status = _Str(validate=validate.OneOf(JOB_STATUSES))
    limit = fields.Integer(load_default=50, strict=True, validate=validate.Range(min=1, max=500))
    offset = fields.Integer(load_default=0, strict=True, validate=validate.Range(min=0))


class LogArgs(JobArgs):
    task = fields.Integer(load_default=0, strict=True, validate=validate.Range(min=0))
    max_bytes = fields.Integer(
        load_default=LOG_DEFAULT_BYTES,
        strict=True,
        validate=validate.Range(min=1, max=LOG_MAX_BYTES),
    )


class PreviewArgs(Caller, DefinitionSchema):
    owner = _Str(load_default=None, allow_none=True)


# --- answers ------------------------------------------------------------------------------------


class JobParamSchema(Answer):
    name = _Str(required=True, metadata={"description": "empty: a positional argument"})
    value = _Str(required=True, allow_none=True, metadata={"description": "null: a flag"})
    separator = _Str(required=True, metadata={"description": '" " or "="'})


class JobTaskSchema(Answer):
    index = _Int(required=True)
    host = _Str(required=True, allow_none=True, metadata={"description": "null: not placed yet"})
    gpus = fields.List(_Str(), required=True, metadata={"description": "GPU uuids"})
    gpu_count = _Int(allow_none=True)
    labels = fields.List(_Str(), metadata={"description": "with gpu_count: the GPUs' labels"})
    status = _Str(required=True, metadata={"description": ", ".join(TASK_STATUSES)})
    session = _Str(required=True, metadata={"description": "the screen/tmux session on the host"})
    exit_code = _Int(allow_none=True)
    reason = _Str(allow_none=True)
    started_at = _Time(allow_none=True)
    ended_at = _Time(allow_none=True)
    # The owner's (and admins') view only:
    command = _Str(metadata={"description": "owner and admins only"})
    cwd = _Str()
    params = fields.List(fields.Nested(JobParamSchema))
    env = fields.Dict(keys=_Str(), values=_Str(), metadata={"description": "owner and admins"})
    role = _Str()
    pid = _Int(allow_none=True)
    port = _Int(allow_none=True)
    run = _Int(metadata={"description": "how many times the task was started"})


class JobSchema(Answer):
    id = _Int(required=True)
    owner = _Str(required=True)
    name = _Str(required=True)
    status = _Str(required=True, metadata={"description": ", ".join(JOB_STATUSES)})
    queued = fields.Boolean(required=True)
    start_at = _Time(allow_none=True)
    stop_at = _Time(allow_none=True)
    reservation_id = _Int(allow_none=True)
    max_runtime_s = fields.Float(allow_none=True)
    template = fields.Raw(
        allow_none=True,
        metadata={"description": "the template's kind; for the owner and admins `{kind, options}`"},
    )
    waiting_reason = _Str(allow_none=True, metadata={"description": "why a queued job waits"})
    predicted_start = _Time(
        allow_none=True,
        metadata={"description": "a queued job's predicted start; null: not within the horizon"},
    )
    tasks = fields.List(fields.Nested(JobTaskSchema), required=True)
    created_at = _Time(required=True)
    updated_at = _Time(required=True)
    # The owner's (and admins') view only:
    description = _Str()
    params = fields.List(fields.Nested(JobParamSchema))
    env = fields.Dict(keys=_Str(), values=_Str(), metadata={"description": "owner and admins"})
    enqueued_at = _Time(allow_none=True)
    stop_reason = _Str(allow_none=True)
    shared_gpus = fields.Boolean(metadata={"description": "its tasks may share a GPU"})
    handback_signal = _Str(metadata={"description": ", ".join(HANDBACK_SIGNALS)})
    handback_grace_s = fields.Float(allow_none=True)
    requeue = fields.Boolean(allow_none=True)
    on_time_limit = _Str(metadata={"description": ", ".join(TIME_LIMIT_ACTIONS)})
    interruptions = _Int(
        metadata={"description": "how many times it yielded its GPUs to a reservation"}
    )
    failure = _Str(
        allow_none=True,
        metadata={
            "description": "how its last run failed: early (on its own, in its first "
            "minutes: not retried), infrastructure (its GPU failed or its host was lost: requeued)"
        },
    )
    failure_reason = _Str(allow_none=True)


class QueueArgs(Schema):
    """The queue is the same for everyone: no arguments."""


class QueuedJobSchema(Answer):
    id = _Int(required=True)
    owner = _Str(required=True)
    name = _Str(required=True)
    position = _Int(required=True, metadata={"description": "1: the next to get GPUs"})
    gpus = _Int(required=True, metadata={"description": "GPUs it asks for"})
    enqueued_at = _Time(required=True)
    max_runtime_s = fields.Float(allow_none=True, metadata={"description": "its time limit"})
    reason = _Str(allow_none=True, metadata={"description": "why it waits"})
    predicted_start = _Time(
        allow_none=True, metadata={"description": "null: not within the forecast's horizon"}
    )


class QueueUserSchema(Answer):
    user = _Str(required=True)
    share = fields.Float(required=True, metadata={"description": "their share, 0 to 1"})
    usage_gpu_h = fields.Float(
        required=True, metadata={"description": "recent GPU-hours, decayed by the half-life"}
    )
    queued = _Int(required=True)
    running = _Int(required=True)


class QueueSchema(Answer):
    policy = _Str(required=True, metadata={"description": "fair or fifo"})
    half_life_h = fields.Float(required=True)
    horizon_h = fields.Float(required=True, metadata={"description": "the forecast's horizon"})
    at = _Time(required=True, metadata={"description": "when it was computed"})
    jobs = fields.List(
        fields.Nested(QueuedJobSchema), required=True, metadata={"description": "in order"}
    )
    users = fields.List(
        fields.Nested(QueueUserSchema),
        required=True,
        metadata={"description": "lowest usage for their share first"},
    )


class JobDeletedSchema(Answer):
    deleted = _Int(required=True, metadata={"description": "the deleted job's id"})


class JobRunSchema(Answer):
    task = _Int(required=True)
    run = _Int(required=True)
    host = _Str(required=True, allow_none=True)
    gpus = fields.List(_Str(), required=True)
    status = _Str(required=True)
    exit_code = _Int(allow_none=True)
    reason = _Str(allow_none=True)
    started_at = _Time(allow_none=True)
    ended_at = _Time(allow_none=True)


class JobHistorySchema(Answer):
    runs = fields.List(
        fields.Nested(JobRunSchema),
        required=True,
        metadata={"description": "every ended run of the job's tasks, by task then run"},
    )


class JobLogsSchema(Answer):
    job_id = _Int(required=True)
    task = _Int(required=True)
    host = _Str(required=True)
    session = _Str(required=True)
    log = _Str(required=True, metadata={"description": "the tail of the task's output"})


class JobPreviewTaskSchema(Answer):
    index = _Int(required=True)
    host = _Str(required=True, metadata={"description": "`<host>` where the scheduler picks"})
    command = _Str(required=True, metadata={"description": "one line of sh, values quoted"})
    env = fields.Dict(
        keys=_Str(),
        values=_Str(),
        required=True,
        metadata={"description": "exported before the command, CUDA_VISIBLE_DEVICES included"},
    )
    gpus = fields.List(_Str(), required=True)
    port = _Int(allow_none=True, metadata={"description": "the port a template took"})


class JobPreviewSchema(Answer):
    tasks = fields.List(fields.Nested(JobPreviewTaskSchema), required=True)


class JobPageSchema(Answer):
    jobs = fields.List(fields.Nested(JobSchema), required=True)
    total = _Int(required=True)


# --- methods ------------------------------------------------------------------------------------

_ON_A_JOB = (InvalidRequest, NotFound, Forbidden)
_DEFINING = (*_ON_A_JOB, GpusShared)  # what checks a definition
_RUNNING = (*_ON_A_JOB, StateConflict, ReservationConflict, NotAllowed, HostUnreachable)


_method = methods_of(SERVICE)


CREATE_JOB = _method(
    "create_job",
    "Define a job (admins: for someone else with `owner`)",
    CreateArgs,
    answer=JobSchema,
    raises=(*_DEFINING, ReservationConflict, NotAllowed),
)
UPDATE_JOB = _method(
    "update_job",
    "Replace a job's definition while it does not run",
    UpdateArgs,
    answer=JobSchema,
    raises=(*_DEFINING, StateConflict, ReservationConflict, NotAllowed),
)
DELETE_JOB = _method(
    "delete_job",
    "Delete a job that does not run",
    JobArgs,
    answer=JobDeletedSchema,
    raises=(*_ON_A_JOB, StateConflict),
)
GET_JOB = _method(
    "get_job",
    "One job: whole for its owner and admins, its public view for others",
    GetArgs,
    answer=JobSchema,
    raises=(InvalidRequest, NotFound),
)
LIST_JOBS = _method(
    "list_jobs",
    "Jobs (public views), newest first, with the total that match",
    ListArgs,
    answer=JobPageSchema,
    raises=(InvalidRequest,),
)
JOB_HISTORY = _method(
    "job_history",
    "Every ended run of the job's tasks, by task then run",
    JobArgs,
    answer=JobRunSchema,
    many=True,
    raises=_ON_A_JOB,
)
START_JOB = _method(
    "start_job",
    "Start a job's tasks on their hosts now",
    JobArgs,
    answer=JobSchema,
    raises=_RUNNING,
    timeout_s=SSH_RPC_TIMEOUT_S,
)
STOP_JOB = _method(
    "stop_job",
    "Stop a running job (SIGINT, then SIGTERM, then SIGKILL)",
    JobArgs,
    answer=JobSchema,
    raises=(*_ON_A_JOB, StateConflict),
)
ENQUEUE_JOB = _method(
    "enqueue_job",
    "Put a job in the queue: it starts when its GPUs are free",
    JobArgs,
    answer=JobSchema,
    raises=(*_DEFINING, StateConflict),
)
DEQUEUE_JOB = _method(
    "dequeue_job",
    "Take a job out of the queue",
    JobArgs,
    answer=JobSchema,
    raises=(*_ON_A_JOB, StateConflict),
)
TASK_LOGS = _method(
    "task_logs",
    "The tail of a task's output, read on its host",
    LogArgs,
    answer=JobLogsSchema,
    raises=(*_ON_A_JOB, HostUnreachable),
    timeout_s=SSH_RPC_TIMEOUT_S,
)
PREVIEW_JOB = _method(
    "preview_job",
    "Each task's command line and environment as they would run",
    PreviewArgs,
    answer=JobPreviewTaskSchema,
    many=True,
    raises=_DEFINING,
)

GET_QUEUE = _method(
    "get_queue",
    "The queue in the order jobs get GPUs: each job's reason and predicted start, each "
    "user's share and usage",
    QueueArgs,
    answer=QueueSchema,
)

USAGE_REPORT = _method(
    "usage_report",
    "Jobs run and GPU-hours of jobs without a reservation over a period, per user and GPU",
    PeriodArgs,
    answer=FactsSchema,
    raises=(InvalidRequest,),
)

METHODS = (
    CREATE_JOB,
    UPDATE_JOB,
    DELETE_JOB,
    GET_JOB,
    LIST_JOBS,
    JOB_HISTORY,
    START_JOB,
    STOP_JOB,
    ENQUEUE_JOB,
    DEQUEUE_JOB,
    TASK_LOGS,
    PREVIEW_JOB,
    GET_QUEUE,
    USAGE_REPORT,
)
