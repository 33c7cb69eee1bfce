"""Violations: incidents (someone's processes on a GPU reserved by another), with their
escalation timeline.

The violations service keeps them; the gateway narrows what a caller sees: admins see every
incident, everyone else only those where they are the offender or the reservation's owner.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from marshmallow import fields, validate

from services.gateway.routing import Access, Call, Page, Route, page_of, page_schema
from services.gateway.visibility import sees_incident
from services.shared.errors import Forbidden
from services.violations import api as violations_api
from services.violations.api import IncidentDetailSchema, IncidentSchema

_Str = fields.String
_Time = fields.AwareDateTime
_Name = validate.Length(min=1, max=64)


class ListQuery(Page, violations_api.ListArgs):
    class Meta:
        exclude = ("involving",)


async def list_violations(call: Call) -> dict[str, Any]:
    query = call.query
    args: dict[str, Any] = {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in query.items()
        if value is not None
    }
    if not call.user.is_admin:
        args["involving"] = call.user.username  # only their own, whatever else they ask
    found = await call.rpc(violations_api.LIST_INCIDENTS, args)
    return page_of(found["incidents"], found["total"], query)


async def get_violation(call: Call) -> dict[str, Any]:
    incident: dict[str, Any] = await call.rpc(
        violations_api.GET_INCIDENT, {"id": call.params["id"]}
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
        params=violations_api.GetArgs,
        response=IncidentDetailSchema,
        description="403 `forbidden` unless you are an admin, the offender or the owner.",
    ),
)
