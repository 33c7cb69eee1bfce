"""What the jobs service answers: its RPC methods (declared in `api.py`, beside `health`) and
event handlers. Events: GPUs and processes seen by the monitor (which GPUs are free),
reservation changes (what is reserved, and jobs that run inside a reservation).
"""

from __future__ import annotations

from typing import Any

from services.jobs import api, usage_report
from services.jobs.calls import JobCalls
from services.jobs.engine import Engine
from services.shared.bus import EventHandler, RpcHandler
from services.shared.contracts import Envelope
from services.shared.errors import Forbidden
from services.shared.rpc import served
from services.shared.storage.store import Store
from services.shared.usage_report import report_handler

_DEFINITION_KEYS = tuple(api.DefinitionSchema().fields)


def _definition(args: dict[str, Any]) -> dict[str, Any]:
    return {key: args[key] for key in _DEFINITION_KEYS}


def rpc_methods(calls: JobCalls, store: Store) -> dict[str, RpcHandler]:  # noqa: C901 - one short closure per RPC method
    async def create_job(args: dict[str, Any]) -> dict[str, Any]:
        return await calls.create(args["actor"], args["admin"], args["owner"], _definition(args))

    async def update_job(args: dict[str, Any]) -> dict[str, Any]:
        return await calls.update(args["id"], args["actor"], args["admin"], _definition(args))

    async def delete_job(args: dict[str, Any]) -> dict[str, Any]:
        return await calls.delete(args["id"], args["actor"], args["admin"])

    async def get_job(args: dict[str, Any]) -> dict[str, Any]:
        return calls.get(args["id"], args["actor"], args["admin"])

    async def list_jobs(args: dict[str, Any]) -> dict[str, Any]:
        return calls.list_jobs(
            owner=args.get("owner"),
            status=args.get("status"),
            limit=args["limit"],
            offset=args["offset"],
        )

    async def job_history(args: dict[str, Any]) -> list[dict[str, Any]]:
        return await calls.history(args["id"], args["actor"], args["admin"])

    async def start_job(args: dict[str, Any]) -> dict[str, Any]:
        return await calls.start_job(args["id"], args["actor"], args["admin"])

    async def stop_job(args: dict[str, Any]) -> dict[str, Any]:
        return await calls.stop_job(args["id"], args["actor"], args["admin"])

    def queueing(queued: bool) -> RpcHandler:
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            return await calls.set_queued(args["id"], args["actor"], args["admin"], queued)

        return handler

    async def task_logs(args: dict[str, Any]) -> dict[str, Any]:
        return await calls.logs(
            args["id"], args["task"], args["actor"], args["admin"], args["max_bytes"]
        )

    async def preview_job(args: dict[str, Any]) -> list[dict[str, Any]]:
        if args["owner"] not in (None, args["actor"]) and not args["admin"]:
            raise Forbidden("only admins preview jobs for someone else")
        await calls.refresh_gpus(args)
        return calls.preview(args["owner"] or args["actor"], _definition(args))

    async def get_queue(_args: dict[str, Any]) -> dict[str, Any]:
        working = calls.working
        async with working.lock:
            return working.fair.answer(working.jobs, working.clock())

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
            api.GET_QUEUE: get_queue,
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

    async def gpu_health_changed(envelope: Envelope) -> None:
        await engine.on_gpu_health(envelope.data)

    async def maintenance_changed(envelope: Envelope) -> None:
        await engine.on_maintenance(envelope.type, envelope.data)

    return {
        ("reservations", "maintenance.*", "maintenance"): maintenance_changed,
        ("monitor", "gpu.discovered", "gpus"): gpu_discovered,
        ("monitor", "processes.observed", "busy_gpus"): processes_observed,
        ("reservations", "reservation.*", "reservations"): reservation_changed,
        # A failed GPU: never placed on, and a running job on it is requeued when it ends.
        ("monitor", "gpu.health_changed", "gpu_health"): gpu_health_changed,
    }
