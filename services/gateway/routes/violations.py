"""Violations: incidents (someone's processes on a GPU reserved by another), with their
escalation timeline.

The violations service keeps them; the gateway narrows what a caller sees: admins see every
incident, everyone else only those where they are the offender or the reservation's owner.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.gateway.routing import Access, Answer, Call, Page, Route, page_of, page_schema
from services.gateway.visibility import sees_incident
from services.shared.errors import Forbidden

_Str = fields.String
_Time = fields.AwareDateTime
_Name = validate.Length(min=1, max=64)


class IncidentPath(Schema):
    id = _Str(required=True, validate=validate.Length(min=1, max=64))


class ListQuery(Page):
    status = _Str(validate=validate.OneOf(("open", "resolved")))
    host = _Str(validate=validate.Length(min=1, max=255))
    gpu_uuid = _Str(validate=validate.Length(min=1, max=128))
    offender = _Str(validate=_Name)
    owner = _Str(validate=_Name, metadata={"description": "the reservation's owner"})
    reservation_id = fields.Integer(validate=validate.Range(min=1, max=2**31 - 1))
    opened_after = _Time(metadata={"description": "opened at or after this time"})
    opened_before = _Time(metadata={"description": "opened before this time"})

    @validates_schema
    def ordered(self, data: dict[str, Any], **_: Any) -> None:
        after, before = data.get("opened_after"), data.get("opened_before")
        if after is not None and before is not None and before <= after:
            raise ValidationError("must be after opened_after", "opened_before")


class OffendingProcessSchema(Answer):
    pid = fields.Integer(required=True)
    command = _Str(required=True)
    started_at = _Time(required=True, allow_none=True)
    used_memory_mib = fields.Float(required=True, allow_none=True)


class IncidentSchema(Answer):
    id = _Str(required=True)
    status = _Str(required=True, metadata={"description": "open or resolved"})
    mode = _Str(required=True, metadata={"description": "reservations or strict"})
    host = _Str(required=True)
    gpu_uuid = _Str(required=True)
    gpu_index = fields.Integer(required=True, allow_none=True)
    offender = _Str(required=True, metadata={"description": "whose processes they are"})
    reservation_id = fields.Integer(required=True, allow_none=True)
    owner = _Str(required=True, allow_none=True, metadata={"description": "the GPU's holder"})
    reservation_start = _Time(required=True, allow_none=True)
    reservation_end = _Time(required=True, allow_none=True)
    opened_at = _Time(required=True)
    since = _Time(required=True, metadata={"description": "when the offence was first seen"})
    last_seen_at = _Time(required=True)
    resolved_at = _Time(required=True, allow_none=True)
    resolve_reason = _Str(required=True, allow_none=True)
    processes = fields.List(fields.Nested(OffendingProcessSchema), required=True)
    steps = fields.List(
        _Str(), required=True, metadata={"description": "the escalation steps, as configured"}
    )


class TimelineEntrySchema(Answer):
    at = _Time(required=True)
    kind = _Str(
        required=True, metadata={"description": "opened, updated, escalated, action or resolved"}
    )
    step_index = fields.Integer(required=True, allow_none=True)
    handler = _Str(required=True, allow_none=True)
    target = _Str(required=True, allow_none=True)
    ok = fields.Boolean(required=True, allow_none=True)
    detail = _Str(required=True, allow_none=True)


class IncidentDetailSchema(IncidentSchema):
    timeline = fields.List(
        fields.Nested(TimelineEntrySchema),
        required=True,
        metadata={"description": "what happened, oldest first"},
    )


FILTERS = ("status", "host", "gpu_uuid", "offender", "owner", "reservation_id")


async def list_violations(call: Call) -> dict[str, Any]:
    query = call.query
    args: dict[str, Any] = {key: query[key] for key in FILTERS if key in query}
    for key in ("opened_after", "opened_before"):
        if key in query:
            args[key] = query[key].isoformat()
    if not call.user.is_admin:
        args["involving"] = call.user.username  # only their own, whatever else they ask
    args["limit"], args["offset"] = query["limit"], query["offset"]
    found = await call.rpc("violations", "list_incidents", args)
    return page_of(found["incidents"], found["total"], query)


async def get_violation(call: Call) -> dict[str, Any]:
    incident: dict[str, Any] = await call.rpc(
        "violations", "get_incident", {"id": call.params["id"]}
    )
    if not sees_incident(call.user, incident):
        raise Forbidden("only admins, the offender and the reservation's owner see an incident")
    return incident


TAG = "violations"
ROUTES = (
    Route(
        "GET",
        "/violations",
        list_violations,
        Access.USER,
        "Incidents, newest first",
        TAG,
        query=ListQuery,
        response=page_schema(IncidentSchema),
        description="Admins see every incident; everyone else only those where they are the "
        "offender or the reservation's owner (the other filters apply within them).",
    ),
    Route(
        "GET",
        "/violations/{id}",
        get_violation,
        Access.OWNER,
        "One incident with its timeline",
        TAG,
        params=IncidentPath,
        response=IncidentDetailSchema,
        description="403 `forbidden` unless you are an admin, the offender or the owner.",
    ),
)
