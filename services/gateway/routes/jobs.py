"""Jobs: defining (and previewing) a job, reading it, starting, stopping, queueing, its runs
and its tasks' logs.

The jobs service decides (who may, what a valid definition is, whether the GPUs may be used
now) and says why it refuses; the gateway validates the request with the service's own
definition schema and passes the caller along (`actor`, `admin`): the owner and admins read a
job whole, anyone else its public view (no commands, no environment).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from marshmallow import Schema, fields, validate

from services.gateway.routing import Access, Call, Page, Route, page_of, page_schema
from services.jobs import api
from services.jobs.api import (
    LOG_DEFAULT_BYTES,
    LOG_MAX_BYTES,
    DefinitionSchema,
    JobDeletedSchema,
    JobHistorySchema,
    JobLogsSchema,
    JobPreviewSchema,
    JobSchema,
)
from services.shared.errors import Forbidden
from services.shared.rpc import Method

_Str = fields.String
_Time = fields.AwareDateTime
_Int = fields.Integer


# --- requests ----------------------------------------------------------------------------------


class JobPath(Schema):
    id = _Int(required=True, validate=validate.Range(min=1, max=2**31 - 1))


class JobTaskPath(JobPath):
    index = _Int(required=True, validate=validate.Range(min=0, max=2**31 - 1))


class JobListQuery(Page, api.ListArgs):
    pass


class JobDefinitionBody(DefinitionSchema):
    """A job definition: what each task runs where, and when the job runs (one of `start_at`,
    `reservation_id`, `queued`; none: on `POST /jobs/{id}/start`). A task names its GPUs by
    index on its `host` (0, 1, ...) or by uuid; a queued job's task may ask for `gpu_count`."""


class JobCreateBody(JobDefinitionBody):
    owner = _Str(
        validate=validate.Length(min=1, max=255),
        metadata={"description": "admins only: the job runs as this user (default: you)"},
    )


class JobLogsQuery(Schema):
    max_bytes = _Int(
        load_default=LOG_DEFAULT_BYTES,
        validate=validate.Range(min=1, max=LOG_MAX_BYTES),
        metadata={"description": "the log's last bytes at most (1 B to 1 MiB, default 64 KiB)"},
    )


# --- answers -----------------------------------------------------------------------------------


# --- helpers -----------------------------------------------------------------------------------


def _definition(body: dict[str, Any]) -> dict[str, Any]:
    """A loaded definition as it travels on the bus (times as ISO-8601 text)."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in body.items()
    }


def _job_args(call: Call) -> dict[str, Any]:
    return {"id": call.params["id"], **call.actor()}


async def _act(call: Call, method: Method) -> dict[str, Any]:
    answer: dict[str, Any] = await call.rpc(method, _job_args(call))
    return answer


# --- handlers ----------------------------------------------------------------------------------


async def list_jobs(call: Call) -> dict[str, Any]:
    query = call.query
    args: dict[str, Any] = {key: value for key, value in query.items() if value is not None}
    found = await call.rpc(api.LIST_JOBS, args)
    return page_of(found["jobs"], found["total"], query)


async def create_job(call: Call) -> dict[str, Any]:
    created: dict[str, Any] = await call.rpc(
        api.CREATE_JOB, {**_definition(call.body), **call.actor()}
    )
    return created


async def preview_job(call: Call) -> dict[str, Any]:
    owner = call.body.get("owner")
    if owner is not None and owner != call.user.username and not call.user.is_admin:
        raise Forbidden("only an admin may preview a job for someone else", {"owner": owner})
    rendered = await call.rpc(api.PREVIEW_JOB, {**_definition(call.body), **call.actor()})
    return {"tasks": rendered}


async def get_job(call: Call) -> dict[str, Any]:
    return await _act(call, api.GET_JOB)


async def update_job(call: Call) -> dict[str, Any]:
    updated: dict[str, Any] = await call.rpc(
        api.UPDATE_JOB, {**_definition(call.body), **_job_args(call)}
    )
    return updated


async def delete_job(call: Call) -> dict[str, Any]:
    return await _act(call, api.DELETE_JOB)


async def start_job(call: Call) -> dict[str, Any]:
    return await _act(call, api.START_JOB)


async def stop_job(call: Call) -> dict[str, Any]:
    return await _act(call, api.STOP_JOB)


async def enqueue_job(call: Call) -> dict[str, Any]:
    return await _act(call, api.ENQUEUE_JOB)


async def dequeue_job(call: Call) -> dict[str, Any]:
    return await _act(call, api.DEQUEUE_JOB)


async def job_history(call: Call) -> dict[str, Any]:
    runs = await call.rpc(api.JOB_HISTORY, _job_args(call))
    return {"runs": runs}


async def task_logs(call: Call) -> dict[str, Any]:
    args = {**_job_args(call), "task": call.params["index"], "max_bytes": call.query["max_bytes"]}
    logs: dict[str, Any] = await call.rpc(api.TASK_LOGS, args)
    return logs


TAG = "jobs"
_REFUSALS = (
    "Refusals say why: 403 `forbidden` (not yours), 409 `state_conflict` (it runs, or nothing "
    "to do), 409 `reservation_conflict` / 403 `not_allowed` (the GPUs may not be used now)."
)
ROUTES = (
    Route(
        "GET",
        "/jobs",
        list_jobs,
        Access.USER,
        "Jobs, newest first (their public view: no commands, no environment)",
        TAG,
        query=JobListQuery,
        response=page_schema(JobSchema),
    ),
    Route(
        "POST",
        "/jobs",
        create_job,
        Access.USER,
        "Define a job",
        TAG,
        body=JobCreateBody,
        response=JobSchema,
        status=201,
        description="A definition the service refuses answers 400 `invalid_request` with "
        "`details.errors` naming each problem (unknown host, GPU, role ...); a body that does "
        "not fit the schema answers 422 `validation_failed`; tasks that would share a GPU "
        "answer 422 `gpus_shared` (`details.gpus`: each GPU and its tasks) unless the job says "
        "`shared_gpus`.",
    ),
    Route(
        "POST",
        "/jobs/preview",
        preview_job,
        Access.USER,
        "What each task of a definition would run (command, environment, GPUs, port)",
        TAG,
        body=JobCreateBody,
        response=JobPreviewSchema,
        description="Nothing is saved. Templates are rendered as they would be at start; a "
        "task the scheduler would place shows `<host>` and `<gpu-N>`.",
    ),
    Route(
        "GET",
        "/jobs/{id}",
        get_job,
        Access.USER,
        "One job: whole for its owner and admins, else its public view",
        TAG,
        params=JobPath,
        response=JobSchema,
    ),
    Route(
        "PUT",
        "/jobs/{id}",
        update_job,
        Access.OWNER,
        "Replace a job's definition (not while it runs)",
        TAG,
        params=JobPath,
        body=JobDefinitionBody,
        response=JobSchema,
        description=_REFUSALS,
    ),
    Route(
        "DELETE",
        "/jobs/{id}",
        delete_job,
        Access.OWNER,
        "Delete a job (not while it runs)",
        TAG,
        params=JobPath,
        response=JobDeletedSchema,
        description=_REFUSALS,
    ),
    Route(
        "POST",
        "/jobs/{id}/start",
        start_job,
        Access.OWNER,
        "Start a job now on its tasks' hosts and GPUs",
        TAG,
        params=JobPath,
        response=JobSchema,
        description=_REFUSALS,
    ),
    Route(
        "POST",
        "/jobs/{id}/stop",
        stop_job,
        Access.OWNER,
        "Stop a running job (SIGINT, then TERM, then KILL), or take a waiting one off its "
        "schedule or out of the queue",
        TAG,
        params=JobPath,
        response=JobSchema,
        description=_REFUSALS,
    ),
    Route(
        "POST",
        "/jobs/{id}/enqueue",
        enqueue_job,
        Access.OWNER,
        "Queue a job: it starts when its GPUs are free",
        TAG,
        params=JobPath,
        response=JobSchema,
        description=_REFUSALS,
    ),
    Route(
        "POST",
        "/jobs/{id}/dequeue",
        dequeue_job,
        Access.OWNER,
        "Take a job out of the queue",
        TAG,
        params=JobPath,
        response=JobSchema,
        description=_REFUSALS,
    ),
    Route(
        "GET",
        "/jobs/{id}/history",
        job_history,
        Access.OWNER,
        "Every ended run of a job's tasks",
        TAG,
        params=JobPath,
        response=JobHistorySchema,
    ),
    Route(
        "GET",
        "/jobs/{id}/tasks/{index}/logs",
        task_logs,
        Access.OWNER,
        "The tail of a task's output (of its current or last run)",
        TAG,
        params=JobTaskPath,
        query=JobLogsQuery,
        response=JobLogsSchema,
        description="404 `not_found` when the task has not run yet.",
    ),
)
