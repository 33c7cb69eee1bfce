"""Maintenance windows: admins drain a host or some of its GPUs (now or later, until a moment or
further notice) with a reason, and end a window; anyone signed in lists them (the calendar
shows them). The reservations service decides and says why it refuses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from marshmallow import Schema, fields

from services.gateway.routes.reservations import IdPath
from services.gateway.routing import Access, Call, Route
from services.reservations import api
from services.reservations.api import (
    CreatedMaintenanceSchema,
    CreateMaintenanceArgs,
    MaintenanceSchema,
)

_Time = fields.AwareDateTime


class MaintenanceBody(CreateMaintenanceArgs):
    """The service's arguments, less `actor`."""

    class Meta:
        exclude = ("actor",)


class MaintenanceQuery(Schema):
    start = _Time(metadata={"description": "default: now (windows not over yet)"})
    end = _Time(metadata={"description": "default: open (every later window)"})


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


async def create(call: Call) -> dict[str, Any]:
    args = {**call.body, "actor": call.user.username}
    for key in ("start", "end"):
        args[key] = _iso(args.get(key))
    answer: dict[str, Any] = await call.rpc(api.CREATE_MAINTENANCE, args)
    return answer


async def listing(call: Call) -> list[dict[str, Any]]:
    args = {"start": _iso(call.query.get("start")), "end": _iso(call.query.get("end"))}
    found: list[dict[str, Any]] = await call.rpc(api.LIST_MAINTENANCE, args)
    return found


async def end(call: Call) -> dict[str, Any]:
    args = {"actor": call.user.username, "id": call.params["id"]}
    answer: dict[str, Any] = await call.rpc(api.END_MAINTENANCE, args)
    return answer


TAG = "maintenance"
ROUTES = (
    Route(
        "GET",
        "/maintenance",
        listing,
        Access.USER,
        "Maintenance windows (drained hosts and GPUs) overlapping a range",
        TAG,
        query=MaintenanceQuery,
        response=MaintenanceSchema,
        many=True,
    ),
    Route(
        "POST",
        "/maintenance",
        create,
        Access.ADMIN,
        "Drain a host or some of its GPUs for a window, with a reason",
        TAG,
        body=MaintenanceBody,
        response=CreatedMaintenanceSchema,
        status=201,
        description="No booking is made in the window from now on (409 with the reason). "
        "The bookings it overlaps are listed in `affected`, each with the earliest "
        "alternative; their owners are told at once. `bookings` chooses what becomes of "
        "them: keep (the default), cancel (a booking that starts before the window ends at "
        "its start) or move (to the alternative). Running jobs are stopped when the window "
        "begins only with `stop_jobs`.",
    ),
    Route(
        "DELETE",
        "/maintenance/{id}",
        end,
        Access.ADMIN,
        "End a maintenance window now (one that has not begun is removed)",
        TAG,
        params=IdPath,
        response=MaintenanceSchema,
    ),
)
