"""What the violations service answers: its RPC methods (beside `health`) and event handlers.

RPC (for the gateway and for the handlers, which may run in other processes):
`list_incidents`, `get_incident` (with its timeline) and `record_actions` (a handler's
outcomes). Events: processes seen by the monitor, GPUs it discovered, reservation changes.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from services.shared.bus import EventHandler, RpcHandler
from services.shared.contracts import Envelope
from services.shared.errors import NotFound
from services.shared.store import Store
from services.shared.validation import load_args as _load
from services.violations import repository
from services.violations.tracker import Tracker

_Str = fields.String


class ListArgs(Schema):
    status = _Str(load_default=None, validate=validate.OneOf(("open", "resolved")))
    host = _Str(load_default=None)
    gpu_uuid = _Str(load_default=None)
    offender = _Str(load_default=None)
    owner = _Str(load_default=None)
    reservation_id = fields.Integer(load_default=None, strict=True)
    # Incidents where this user is the offender or the reservation's owner.
    involving = _Str(load_default=None)
    opened_after = fields.AwareDateTime(load_default=None)
    opened_before = fields.AwareDateTime(load_default=None)
    limit = fields.Integer(load_default=50, strict=True, validate=validate.Range(min=1, max=500))
    offset = fields.Integer(load_default=0, strict=True, validate=validate.Range(min=0))


class GetArgs(Schema):
    id = _Str(required=True, validate=validate.Length(min=1, max=64))


class Outcome(Schema):
    target = _Str(required=True, validate=validate.Length(max=512))
    ok = fields.Boolean(required=True)
    detail = _Str(load_default="")


class RecordArgs(Schema):
    incident_id = _Str(required=True, validate=validate.Length(min=1, max=64))
    step_index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    handler = _Str(required=True, validate=validate.Length(min=1, max=64))
    outcomes = fields.List(fields.Nested(Outcome), required=True)


def rpc_methods(store: Store, tracker: Tracker) -> dict[str, RpcHandler]:
    async def list_incidents(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(ListArgs(), args)
        filters = {key: query[key] for key in repository.FILTERS if query[key] is not None}
        async with store.read() as conn:
            return await repository.list_incidents(
                conn,
                filters,
                status=query["status"],
                involving=query["involving"],
                opened_after=query["opened_after"],
                opened_before=query["opened_before"],
                limit=query["limit"],
                offset=query["offset"],
            )

    async def get_incident(args: dict[str, Any]) -> dict[str, Any]:
        incident_id = _load(GetArgs(), args)["id"]
        async with store.read() as conn:
            found = await repository.get_incident(conn, incident_id)
        if found is None:
            raise NotFound(f"no incident {incident_id}", {"id": incident_id})
        return found

    async def record_actions(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(RecordArgs(), args)
        async with store.read() as conn:
            if await repository.get_incident(conn, query["incident_id"]) is None:
                raise NotFound(f"no incident {query['incident_id']}", {"id": query["incident_id"]})
        recorded = await tracker.record_actions(
            query["incident_id"], query["step_index"], query["handler"], query["outcomes"]
        )
        return {"recorded": recorded}

    return {
        "list_incidents": list_incidents,
        "get_incident": get_incident,
        "record_actions": record_actions,
    }


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
