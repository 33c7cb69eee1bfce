"""Reservations: the calendar by range and GPUs, booking, editing, cancelling, ending early, the
long-term overview and the earliest free slot.

The reservations service decides (who may, access rules, quotas, conflicts) and says why it
refuses; the gateway validates the request, names GPUs as the user does (`dgx1:0` or a uuid)
and hides the private fields of other people's reservations.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.gateway.calendar import item as calendar_item
from services.gateway.context import CALENDAR
from services.gateway.etag import conditional, make_tag
from services.gateway.routing import Access, Call, Page, Route, page_of, page_schema
from services.gateway.visibility import reservation_for
from services.reservations import api
from services.reservations.api import (
    CreatedReservationSchema,
    OverviewSchema,
    ReservationSchema,
    SlotSchema,
)
from services.shared import fastjson
from services.shared.errors import InvalidRequest
from services.shared.gpu_labels import selector_problem

_Str = fields.String
_Time = fields.AwareDateTime
GPU_REF = "a GPU uuid, or host:index (dgx1:0)"
DEFAULT_RANGE = timedelta(days=7)


class IdPath(Schema):
    id = fields.Integer(required=True, validate=validate.Range(min=1, max=2**31 - 1))


class ListQuery(Page):
    start = _Time(metadata={"description": "default: now"})
    end = _Time(metadata={"description": "default: start + 7 days (at most 8 weeks)"})
    gpus = fields.List(
        _Str(validate=validate.Length(min=1, max=128)),
        metadata={"description": f"only these GPUs: each {GPU_REF}"},
    )
    owner = _Str(validate=validate.Length(min=1, max=64))
    include_cancelled = fields.Boolean(load_default=False)


def _ordered(data: dict[str, Any], *, required: bool) -> None:
    end, duration = data.get("end"), data.get("duration_minutes")
    if end is not None and duration is not None:
        raise ValidationError("give end or duration_minutes, not both", "end")
    if required and end is None and duration is None:
        raise ValidationError("give end or duration_minutes", "end")


class CreateBody(api.CreateReservationArgs):
    """The service's arguments, less `actor`, with the end given or as a duration."""

    end = _Time(metadata={"description": "or give duration_minutes"})
    duration_minutes = fields.Integer(validate=validate.Range(min=1, max=60 * 24 * 366))

    class Meta:
        exclude = ("actor", "idempotency_key")  # (a header: IDEMPOTENCY_KEY)

    @validates_schema
    def one_end(self, data: dict[str, Any], **_: Any) -> None:
        _ordered(data, required=True)


IDEMPOTENCY_KEY = "Idempotency-Key"


def idempotency_key(call: Call) -> str | None:
    """The client's key of a create (visible ASCII, 1 to 255 characters), if it sent one."""
    key = call.request.headers.get(IDEMPOTENCY_KEY)
    if key is None:
        return None
    if not 1 <= len(key) <= 255 or not all("!" <= ch <= "~" for ch in key):
        raise InvalidRequest(
            f"{IDEMPOTENCY_KEY} must be 1 to 255 visible ASCII characters (e.g. a UUID)",
            {"field": IDEMPOTENCY_KEY},
        )
    return key


class UpdateBody(api.UpdateReservationArgs):
    """What to change (what is left out stays as it is), the end also as a duration."""

    duration_minutes = fields.Integer(validate=validate.Range(min=1, max=60 * 24 * 366))

    class Meta:
        exclude = ("actor", "id")

    @validates_schema
    def one_end(self, data: dict[str, Any], **_: Any) -> None:
        _ordered(data, required=False)


class CancelQuery(Schema):
    reason = _Str(load_default="", validate=validate.Length(max=500))


class OverviewQuery(Schema):
    start = _Time(metadata={"description": "default: now"})
    end = _Time(metadata={"description": "default: start + 7 days (at most 8 weeks)"})
    slot_minutes = fields.Integer(load_default=60, validate=validate.OneOf((30, 60)))
    gpus = fields.List(_Str(validate=validate.Length(min=1, max=128)))
    format = _Str(
        load_default="full",
        validate=validate.OneOf(("full", "compact")),
        metadata={
            "description": "full: an object per run; compact: per GPU the runs as flat "
            "`cells` [label, count, ...] over the answer's `labels` (same content, about a "
            "fifth of the bytes)"
        },
    )


def label_selector(terms: list[str]) -> None:
    """A label selector (`services.shared.gpu_labels`): a 422 naming the first bad term."""
    problem = selector_problem(terms)
    if problem:
        raise ValidationError(problem)


class SlotQuery(Schema):
    count = fields.Integer(required=True, validate=validate.Range(min=1, max=1024))
    duration_minutes = fields.Integer(
        required=True, validate=validate.Range(min=1, max=60 * 24 * 7 * 8)
    )
    not_before = _Time()
    host = _Str(validate=validate.Length(min=1, max=255))
    gpu_model = _Str(validate=validate.Length(min=1, max=255))
    same_host = fields.Boolean(load_default=False)
    labels = fields.List(
        _Str(validate=validate.Length(min=1, max=64)),
        validate=label_selector,
        metadata={
            "description": "only GPUs carrying every label: model=A100-80GB, memory=80GB, "
            "arch=hopper; key!=value: not carrying it (labels=a,b or labels=a&labels=b)"
        },
    )


# --- helpers shared with other routes ----------------------------------------------------------


async def resolve_gpus(call: Call, refs: list[str]) -> list[str]:
    """GPU uuids for what users write: a uuid, `host:index`, or `host:0/mig1` (instance 1 of GPU
    0, index 1001: see `mig_places`). Unknown ones are a 422."""
    if all(":" not in ref for ref in refs):
        return refs
    known = await call.rpc(api.LIST_GPUS)
    by_place = {f"{gpu['host']}:{gpu['index']}": gpu["uuid"] for gpu in known}
    by_place.update(mig_places(known))
    uuids, unknown = [], []
    for ref in refs:
        if ":" in ref and not ref.startswith(("GPU-", "MIG-")):
            found = by_place.get(ref)
            if found is None:
                unknown.append(ref)
            uuids.append(found or ref)
        else:
            uuids.append(ref)
    if unknown:
        raise InvalidRequest(
            f"unknown GPU {', '.join(unknown)}: use host:index of a known GPU, or its uuid",
            {"field": "gpus", "unknown": unknown},
        )
    return uuids


MIG_INDEX_BASE = 1000  # the monitor's: a MIG instance's index is 1000 x (GPU + 1) + MIG Dev


def mig_places(known: list[dict[str, Any]]) -> dict[str, str]:
    """`host:0/mig1` -> uuid of each MIG instance (index 1001: instance 1 of GPU 0)."""
    places = {}
    for gpu in known:
        index = gpu.get("index")
        if isinstance(index, int) and index >= MIG_INDEX_BASE:
            parent, device = index // MIG_INDEX_BASE - 1, index % MIG_INDEX_BASE
            places[f"{gpu['host']}:{parent}/mig{device}"] = gpu["uuid"]
    return places


def _range(query: dict[str, Any]) -> tuple[datetime, datetime]:
    start = query.get("start") or datetime.now(UTC)
    end = query.get("end") or start + DEFAULT_RANGE
    if end <= start:
        raise InvalidRequest("end must be after start", {"field": "end"})
    if end - start > api.MAX_RANGE:
        raise InvalidRequest(
            f"the range may be at most {api.MAX_RANGE.days // 7} weeks", {"field": "end"}
        )
    return start, end


def _end(body: dict[str, Any], start: datetime | None) -> datetime | None:
    if body.get("duration_minutes") is not None:
        if start is None:
            raise InvalidRequest("duration_minutes needs start", {"field": "duration_minutes"})
        return start + timedelta(minutes=body["duration_minutes"])
    end: datetime | None = body.get("end")
    return end


def _seen(call: Call, event_type: str, reservation: dict[str, Any]) -> dict[str, Any]:
    """Apply our own change to the calendar copy now: the next read shows it (its event may
    still be on the way)."""
    call.request.app[CALENDAR].apply(event_type, reservation)
    return reservation


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# --- handlers ----------------------------------------------------------------------------------


async def list_reservations(call: Call) -> web.Response:
    query = call.query
    start, end = _range(query)
    gpus = await resolve_gpus(call, query["gpus"]) if query.get("gpus") else None
    view = call.request.app[CALENDAR]
    offset, limit = query["offset"], query["limit"]
    if view.covers(start, end):
        found = view.between(
            start,
            end,
            gpus,
            owner=query.get("owner"),
            include_cancelled=query["include_cancelled"],
        )
        page = found[offset : offset + limit]
        # Which reservations (their ids, in order, and how many in all) and their version
        # decide the answer (the range may move with the clock: `start` defaults to now).
        version = view.version(gpus)
        tag = make_tag(call.user, "calendar", version, len(found), offset, limit, _ids(page))
        return conditional(
            call.request, tag, lambda: _page_json(call, page, len(found)), charset="utf-8"
        )
    args: dict[str, Any] = {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "include_cancelled": query["include_cancelled"],
    }
    if gpus:
        args["gpus"] = gpus
    if query.get("owner"):
        args["owner"] = query["owner"]
    found = [calendar_item(r) for r in await call.rpc(api.CALENDAR, args)]
    body = _page_json(call, found[offset : offset + limit], len(found))
    # Asked of the service: the answer itself is its version.
    tag = make_tag(call.user, "answer", body)
    return conditional(call.request, tag, lambda: body, charset="utf-8")


def _ids(page: list[dict[str, Any]]) -> tuple[int, ...]:
    return tuple(reservation["id"] for reservation in page)


def _page_json(call: Call, page: list[dict[str, Any]], total: int) -> bytes:
    items = [reservation_for(call.user, r) for r in page]
    return fastjson.dumps(page_of(items, total, call.query))


async def create_reservation(call: Call) -> dict[str, Any]:
    body = call.body
    args = {
        "actor": call.user.username,
        "gpus": await resolve_gpus(call, body["gpus"]),
        "start": body["start"].isoformat(),
        "end": _iso(_end(body, body["start"])),
        "title": body["title"],
        "description": body["description"],
        "guests": body["guests"],
    }
    if body.get("owner"):
        args["owner"] = body["owner"]
    key = idempotency_key(call)
    if key is not None:
        args["idempotency_key"] = key
    created: dict[str, Any] = await call.rpc(api.CREATE_RESERVATION, args)
    return _seen(call, "reservation.created", created)


async def get_reservation(call: Call) -> dict[str, Any]:
    found = await call.rpc(api.GET_RESERVATION, {"id": call.params["id"]})
    return reservation_for(call.user, found)


async def update_reservation(call: Call) -> dict[str, Any]:
    body = call.body
    args: dict[str, Any] = {"actor": call.user.username, "id": call.params["id"]}
    for key in ("title", "description", "guests"):
        if key in body:
            args[key] = body[key]
    start = body.get("start")
    if start is not None:
        args["start"] = start.isoformat()
    if body.get("duration_minutes") is not None and start is None:
        current = await call.rpc(api.GET_RESERVATION, {"id": call.params["id"]})
        start = datetime.fromisoformat(current["start"])
    end = _end(body, start)
    if end is not None:
        args["end"] = end.isoformat()
    updated: dict[str, Any] = await call.rpc(api.UPDATE_RESERVATION, args)
    return _seen(call, "reservation.updated", updated)


async def cancel_reservation(call: Call) -> dict[str, Any]:
    args = {"actor": call.user.username, "id": call.params["id"], **call.query}
    cancelled: dict[str, Any] = await call.rpc(api.CANCEL_RESERVATION, args)
    return _seen(call, "reservation.cancelled", cancelled)


async def end_reservation(call: Call) -> dict[str, Any]:
    args = {"actor": call.user.username, "id": call.params["id"]}
    ended: dict[str, Any] = await call.rpc(api.END_RESERVATION, args)
    return _seen(call, "reservation.ended", ended)


async def overview(call: Call) -> web.Response:
    start, end = _range(call.query)
    args: dict[str, Any] = {
        "actor": call.user.username,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "slot_minutes": call.query["slot_minutes"],
    }
    if call.query["format"] != "full":  # only then: a service from before it answers the rest
        args["format"] = call.query["format"]
    if call.query.get("gpus"):
        args["gpus"] = await resolve_gpus(call, call.query["gpus"])
    return await call.rpc_answer(api.OVERVIEW, args)  # passed on as the service wrote it


async def earliest_slot(call: Call) -> web.Response:
    args = {"actor": call.user.username, **call.query}
    if "not_before" in args:
        args["not_before"] = args["not_before"].isoformat()
    return await call.rpc_answer(api.FIND_SLOT, args)


# The error envelope of the OpenAPI document (services/gateway/openapi.py registers it).
ERROR_REF = {"$ref": "#/components/schemas/Error"}
TAG = "reservations"
ROUTES = (
    Route(
        "GET",
        "/reservations",
        list_reservations,
        Access.USER,
        "Reservations overlapping a time range (the calendar)",
        TAG,
        query=ListQuery,
        response=page_schema(ReservationSchema),
        raw=True,
        conditional=True,
        description="Answered from the gateway's copy of the calendar where it covers the "
        "range (8 weeks back, a year ahead), else by the reservations service.",
    ),
    Route(
        "POST",
        "/reservations",
        create_reservation,
        Access.USER,
        "Reserve GPUs",
        TAG,
        body=CreateBody,
        response=CreatedReservationSchema,
        status=201,
        description="Refusals say why: 409 `reservation_conflict` (who holds which GPU when), "
        "403 `not_allowed` (the access rules or quotas that do not allow it), 422 "
        "`validation_failed` (a GPU whose host was removed from the inventory is not offered). "
        "A reservation that starts now on a GPU someone else uses now is made all the same, "
        "with `warnings` naming the GPU, the users and their processes. With an "
        "`Idempotency-Key` header, the same create sent again (the same key and the same "
        "request, within 24 hours) is answered with the reservation it made, not booked twice "
        "nor refused; the same key with another request is refused (422).",
        extra={
            "parameters": [
                {
                    "name": IDEMPOTENCY_KEY,
                    "in": "header",
                    "required": False,
                    "description": "your key of this create (e.g. a UUID), 1 to 255 visible "
                    "ASCII characters: send it again with a retry",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                }
            ],
            "responses": {
                "422": {
                    "description": "not offered: a GPU whose host was removed from the "
                    "inventory (`details.reasons` name each), or a field that does not fit",
                    "content": {"application/json": {"schema": ERROR_REF}},
                }
            },
        },
    ),
    Route(
        "GET",
        "/reservations/overview",
        overview,
        Access.USER,
        "Long-term overview: per GPU, runs of free / mine / taken / not allowed slots",
        TAG,
        query=OverviewQuery,
        response=OverviewSchema,
        raw=True,
    ),
    Route(
        "GET",
        "/reservations/slot",
        earliest_slot,
        Access.USER,
        "The earliest slot where you may reserve N GPUs for a duration",
        TAG,
        description="For a slot that starts now (by default: the next whole minute), GPUs "
        "nobody uses now come first; GPUs in use are offered only when too few are idle.",
        query=SlotQuery,
        response=SlotSchema,
        raw=True,
    ),
    Route(
        "GET",
        "/reservations/{id}",
        get_reservation,
        Access.USER,
        "One reservation",
        TAG,
        params=IdPath,
        response=ReservationSchema,
    ),
    Route(
        "PATCH",
        "/reservations/{id}",
        update_reservation,
        Access.OWNER,
        "Edit a reservation (title, description, times, guests)",
        TAG,
        params=IdPath,
        body=UpdateBody,
        response=ReservationSchema,
    ),
    Route(
        "DELETE",
        "/reservations/{id}",
        cancel_reservation,
        Access.OWNER,
        "Cancel a reservation",
        TAG,
        params=IdPath,
        query=CancelQuery,
        response=ReservationSchema,
    ),
    Route(
        "POST",
        "/reservations/{id}/end",
        end_reservation,
        Access.OWNER,
        "End a running reservation now",
        TAG,
        params=IdPath,
        response=ReservationSchema,
    ),
)
