"""What the jobs service answers: its RPC methods (beside `health`) and event handlers.

Every RPC that acts on a job takes `actor` (who asks) and `admin` (whether they are one: the
gateway knows it from the caller's token); only a job's owner or an admin may change it or read
its commands, environment and logs. Events: GPUs and processes seen by the monitor (which GPUs
are free), reservation changes (what is reserved, and jobs that run inside a reservation).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from services.jobs.engine import LOG_MAX_BYTES, Engine
from services.jobs.spec import DefinitionSchema
from services.shared.bus import EventHandler, RpcHandler
from services.shared.contracts import JOB_STATUSES, Envelope
from services.shared.errors import Forbidden
from services.shared.validation import load_args as _load

_Str = fields.String
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
    owner = _Str(load_default=None)
    status = _Str(load_default=None, validate=validate.OneOf(JOB_STATUSES))
    limit = fields.Integer(load_default=50, strict=True, validate=validate.Range(min=1, max=500))
    offset = fields.Integer(load_default=0, strict=True, validate=validate.Range(min=0))


class LogArgs(JobArgs):
    task = fields.Integer(load_default=0, strict=True, validate=validate.Range(min=0))
    max_bytes = fields.Integer(
        load_default=65536, strict=True, validate=validate.Range(min=1, max=LOG_MAX_BYTES)
    )


class PreviewArgs(Caller, DefinitionSchema):
    owner = _Str(load_default=None, allow_none=True)


_DEFINITION_KEYS = tuple(DefinitionSchema().fields)


def _definition(query: dict[str, Any]) -> dict[str, Any]:
    return {key: query[key] for key in _DEFINITION_KEYS}


def rpc_methods(engine: Engine) -> dict[str, RpcHandler]:
    async def create_job(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(CreateArgs(), args)
        return await engine.create(
            query["actor"], query["admin"], query["owner"], _definition(query)
        )

    async def update_job(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(UpdateArgs(), args)
        return await engine.update(query["id"], query["actor"], query["admin"], _definition(query))

    async def delete_job(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(JobArgs(), args)
        return await engine.delete(query["id"], query["actor"], query["admin"])

    async def get_job(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(GetArgs(), args)
        return engine.get(query["id"], query["actor"], query["admin"])

    async def list_jobs(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(ListArgs(), args)
        return engine.list_jobs(
            owner=query["owner"],
            status=query["status"],
            limit=query["limit"],
            offset=query["offset"],
        )

    async def job_history(args: dict[str, Any]) -> list[dict[str, Any]]:
        query = _load(JobArgs(), args)
        return await engine.history(query["id"], query["actor"], query["admin"])

    async def start_job(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(JobArgs(), args)
        return await engine.start_job(query["id"], query["actor"], query["admin"])

    async def stop_job(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(JobArgs(), args)
        return await engine.stop_job(query["id"], query["actor"], query["admin"])

    def queueing(queued: bool) -> RpcHandler:
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            query = _load(JobArgs(), args)
            return await engine.set_queued(query["id"], query["actor"], query["admin"], queued)

        return handler

    async def task_logs(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(LogArgs(), args)
        return await engine.logs(
            query["id"], query["task"], query["actor"], query["admin"], query["max_bytes"]
        )

    async def preview_job(args: dict[str, Any]) -> list[dict[str, Any]]:
        query = _load(PreviewArgs(), args)
        if query["owner"] not in (None, query["actor"]) and not query["admin"]:
            raise Forbidden("only admins preview jobs for someone else")
        await engine.refresh_gpus(query)
        return engine.preview(query["owner"] or query["actor"], _definition(query))

    return {
        "create_job": create_job,
        "update_job": update_job,
        "delete_job": delete_job,
        "get_job": get_job,
        "list_jobs": list_jobs,
        "job_history": job_history,
        "start_job": start_job,
        "stop_job": stop_job,
        "enqueue_job": queueing(True),
        "dequeue_job": queueing(False),
        "task_logs": task_logs,
        "preview_job": preview_job,
    }


def event_handlers(engine: Engine) -> dict[tuple[str, str, str], EventHandler]:
    async def gpu_discovered(envelope: Envelope) -> None:
        engine.on_gpu_discovered(envelope.data)

    async def processes_observed(envelope: Envelope) -> None:
        engine.on_processes(envelope.data)

    async def reservation_changed(envelope: Envelope) -> None:
        await engine.on_reservation(envelope.type, envelope.data)

    return {
        ("monitor", "gpu.discovered", "gpus"): gpu_discovered,
        ("monitor", "processes.observed", "busy_gpus"): processes_observed,
        ("reservations", "reservation.*", "reservations"): reservation_changed,
    }
