"""What the jobs service answers: its RPC methods (declared in `api.py`, beside `health`) and
event handlers. Events: GPUs and processes seen by the monitor (which GPUs are free),
reservation changes (what is reserved, and jobs that run inside a reservation).
"""

from __future__ import annotations

from typing import Any

from services.jobs import api, usage_report
from services.jobs.commands import JobCommands
from services.jobs.engine import Engine
from services.shared.bus import EventHandler, RpcHandler
from services.shared.contracts import Envelope
from services.shared.errors import Forbidden
from services.shared.rpc import served
from services.shared.store import Store
from services.shared.usage_report import report_handler

_DEFINITION_KEYS = tuple(api.DefinitionSchema().fields)


def _definition(query: dict[str, Any]) -> dict[str, Any]:
    return {key: query[key] for key in _DEFINITION_KEYS}


def rpc_methods(commands: JobCommands, store: Store) -> dict[str, RpcHandler]:  # noqa: C901 - one short closure per RPC method
    async def create_job(query: dict[str, Any]) -> dict[str, Any]:
        return await commands.create(
            query["actor"], query["admin"], query["owner"], _definition(query)
        )

    async def update_job(query: dict[str, Any]) -> dict[str, Any]:
        return await commands.update(
            query["id"], query["actor"], query["admin"], _definition(query)
        )

    async def delete_job(query: dict[str, Any]) -> dict[str, Any]:
        return await commands.delete(query["id"], query["actor"], query["admin"])

    async def get_job(query: dict[str, Any]) -> dict[str, Any]:
        return commands.get(query["id"], query["actor"], query["admin"])

    async def list_jobs(query: dict[str, Any]) -> dict[str, Any]:
        return commands.list_jobs(
            owner=query.get("owner"),
            status=query.get("status"),
            limit=query["limit"],
            offset=query["offset"],
        )

    async def job_history(query: dict[str, Any]) -> list[dict[str, Any]]:
        return await commands.history(query["id"], query["actor"], query["admin"])

    async def start_job(query: dict[str, Any]) -> dict[str, Any]:
        return await commands.start_job(query["id"], query["actor"], query["admin"])

    async def stop_job(query: dict[str, Any]) -> dict[str, Any]:
        return await commands.stop_job(query["id"], query["actor"], query["admin"])

    def queueing(queued: bool) -> RpcHandler:
        async def handler(query: dict[str, Any]) -> dict[str, Any]:
            return await commands.set_queued(query["id"], query["actor"], query["admin"], queued)

        return handler

    async def task_logs(query: dict[str, Any]) -> dict[str, Any]:
        return await commands.logs(
            query["id"], query["task"], query["actor"], query["admin"], query["max_bytes"]
        )

    async def preview_job(query: dict[str, Any]) -> list[dict[str, Any]]:
        if query["owner"] not in (None, query["actor"]) and not query["admin"]:
            raise Forbidden("only admins preview jobs for someone else")
        await commands.refresh_gpus(query)
        return commands.preview(query["owner"] or query["actor"], _definition(query))

    return served(
        api.METHODS,
        {
            api.CREATE_JOB: create_job,
            api.UPDATE_JOB: update_job,
            api.DELETE_JOB: delete_job,
            api.GET_JOB: get_job,
            api.LIST_JOBS: list_jobs,
            api.JOB_HISTORY: job_history,
            api.START_JOB: start_job,
            api.STOP_JOB: stop_job,
            api.ENQUEUE_JOB: queueing(True),
            api.DEQUEUE_JOB: queueing(False),
            api.TASK_LOGS: task_logs,
            api.PREVIEW_JOB: preview_job,
            api.USAGE_REPORT: report_handler(store, usage_report.usage_report),
        },
    )


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
