"""What the violations service answers: its RPC methods (declared in `api.py`, beside `health`)
and event handlers.

RPC (for the gateway and for the handlers, which may run in other processes):
`list_incidents`, `get_incident` (with its timeline) and `record_actions` (a handler's
outcomes); the notification path's methods (`services.notifications.api`), which this service
serves under its name. Events: processes seen by the monitor, GPUs it discovered, reservation
changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.notifications import api as notifications_api
from services.shared.bus import EventHandler, RpcHandler
from services.shared.contracts import Envelope
from services.shared.errors import NotFound
from services.shared.rpc import Method, served
from services.shared.storage.store import Store
from services.shared.usage_report import report_handler
from services.violations import api, repository, usage_report
from services.violations.tracker import Tracker

# Reads of the database: any replica answers them (a standby forwards the rest to the leader).
LOCAL_METHODS = tuple(
    m.name
    for m in (
        api.LIST_INCIDENTS,
        api.GET_INCIDENT,
        api.USAGE_REPORT,
        notifications_api.NOTIFICATION_PREFS,
        notifications_api.LIST_NOTIFICATIONS,
        notifications_api.DELIVERY_SETTINGS,
    )
)


def rpc_methods(
    store: Store, tracker: Tracker, notifications: Mapping[Method, RpcHandler]
) -> dict[str, RpcHandler]:
    """`notifications`: the notification path's handlers (`services.notifications.serving`)."""

    async def list_incidents(args: dict[str, Any]) -> dict[str, Any]:
        filters = {key: args[key] for key in repository.FILTERS if key in args}
        async with store.read() as conn:
            return await repository.list_incidents(
                conn,
                filters,
                status=args.get("status"),
                involving=args.get("involving"),
                opened_after=args.get("opened_after"),
                opened_before=args.get("opened_before"),
                limit=args["limit"],
                offset=args["offset"],
            )

    async def get_incident(args: dict[str, Any]) -> dict[str, Any]:
        incident_id = args["id"]
        async with store.read() as conn:
            found = await repository.get_incident(conn, incident_id)
        if found is None:
            raise NotFound(f"no incident {incident_id}", {"id": incident_id})
        return found

    async def record_actions(args: dict[str, Any]) -> dict[str, Any]:
        async with store.read() as conn:
            if await repository.get_incident(conn, args["incident_id"]) is None:
                raise NotFound(f"no incident {args['incident_id']}", {"id": args["incident_id"]})
        recorded = await tracker.record_actions(
            args["incident_id"], args["step_index"], args["handler"], args["outcomes"]
        )
        return {"recorded": recorded}

    return served(
        api.METHODS,
        {
            api.LIST_INCIDENTS: list_incidents,
            api.GET_INCIDENT: get_incident,
            api.RECORD_ACTIONS: record_actions,
            api.USAGE_REPORT: report_handler(store, usage_report.usage_report),
            **notifications,
        },
    )


def event_handlers(tracker: Tracker) -> dict[tuple[str, str, str], EventHandler]:
    async def processes_observed(envelope: Envelope) -> None:
        await tracker.on_processes(envelope.data)

    async def gpu_discovered(envelope: Envelope) -> None:
        tracker.on_gpu_discovered(envelope.data)

    async def reservation_changed(envelope: Envelope) -> None:
        await tracker.on_reservation(envelope.type, envelope.data)

    return {
        ("monitor", "processes.observed", "detect"): processes_observed,
        ("monitor", "gpu.discovered", "gpu_indexes"): gpu_discovered,
        ("reservations", "reservation.*", "reservations"): reservation_changed,
    }
