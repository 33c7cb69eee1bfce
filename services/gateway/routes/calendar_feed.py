"""Each user's calendar feed: a secret address calendars subscribe to (iCalendar).

`POST /me/calendar-feed` makes the signed-in user's address (shown once: only a hash of its
token is stored, in the reservations service) and replaces any older one; `DELETE` revokes it.
`GET /calendar/{token}.ics` is public: the token is the credential, so it is never logged (the
gateway writes no access log, and error lines mask it: `shared/http_errors.py`). Unknown tokens
count against the client address like failed logins; each feed may be fetched
`FETCHES_PER_MINUTE` times a minute (calendars fetch every few minutes to hours).

The feed lists the user's reservations from `ical_feed.PAST` ago to `ical_feed.AHEAD` ahead,
and with `?gpus=host:0,host:1` everyone's reservations on those GPUs (see `ical_feed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from marshmallow import Schema, fields, validate

from services.accounts import api as accounts_api
from services.gateway import ical_feed
from services.gateway.calendar import item as calendar_item
from services.gateway.context import CALENDAR, LIMITS
from services.gateway.limits import FEED_FETCHES_PER_MINUTE as FETCHES_PER_MINUTE
from services.gateway.limits import settle, take
from services.gateway.routes.reservations import resolve_gpus
from services.gateway.routes.session import caller_address
from services.gateway.routing import API, Access, Call, Route
from services.reservations import api
from services.shared.errors import NotFound

PATH = "/calendar/{token}.ics"


class FeedSchema(Schema):
    url = fields.String(
        required=True,
        metadata={"description": "the secret address to subscribe to (shown only now)"},
    )


class FeedStateSchema(Schema):
    exists = fields.Boolean(
        required=True, metadata={"description": "the user has a feed address that works"}
    )


class FeedPath(Schema):
    token = fields.String(required=True, validate=validate.Length(min=1, max=256))


class FeedQuery(Schema):
    gpus = fields.List(
        fields.String(validate=validate.Length(min=1, max=128)),
        validate=validate.Length(max=64),
        metadata={
            "description": "GPUs to watch, `host:index` or uuid, comma-separated: everyone's "
            "reservations on them are added (titles and owners, not descriptions)"
        },
    )


def _origin(call: Call) -> str:
    """Where this gateway is reached, as the client sees it (a trusted proxy may say https)."""
    request = call.request
    origin = request.url.origin()
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip()
    if proto in ("http", "https") and caller_address(call) != (request.remote or "unknown"):
        origin = origin.with_scheme(proto)  # the address came through a trusted proxy
    return str(origin)


async def create_feed(call: Call) -> dict[str, Any]:
    answer = await call.rpc(accounts_api.CREATE_CALENDAR_FEED, {"actor": call.user.username})
    return {"url": f"{_origin(call)}{API}/calendar/{answer['token']}.ics"}


async def feed_state(call: Call) -> dict[str, Any]:
    answer = await call.rpc(accounts_api.CALENDAR_FEED_STATE, {"actor": call.user.username})
    return {"exists": bool(answer["exists"])}


async def revoke_feed(call: Call) -> None:
    await call.rpc(accounts_api.REVOKE_CALENDAR_FEED, {"actor": call.user.username})


async def _owner(call: Call) -> str:
    """Whose feed the token opens; an unknown one counts as a failed attempt of the address."""
    address_key = call.request.app[LIMITS].by_address.of(caller_address(call))
    marks = await take(call.bus, (address_key,))  # counted as failed until the token proves right
    try:
        answer = await call.rpc(accounts_api.CALENDAR_FEED_OWNER, {"token": call.params["token"]})
    except NotFound:
        raise
    except BaseException:  # the service is down: not a guess at the token
        await settle(call.bus, cancel=marks)
        raise
    await settle(call.bus, cancel=marks)
    return str(answer["username"])


async def _reservations(call: Call, start: datetime, end: datetime) -> Sequence[Mapping[str, Any]]:
    """Every reservation overlapping [start, end), cancelled ones too: from the gateway's
    calendar copy, or from the service in ranges it allows when the copy does not cover it."""
    view = call.request.app[CALENDAR]
    if view.covers(start, end):
        return view.between(start, end, include_cancelled=True)
    found: dict[int, Mapping[str, Any]] = {}
    step_start = start
    while step_start < end:
        step_end = min(end, step_start + api.MAX_RANGE)
        args = {
            "start": step_start.isoformat(),
            "end": step_end.isoformat(),
            "include_cancelled": True,
        }
        for reservation in await call.rpc(api.CALENDAR, args):
            found[int(reservation["id"])] = calendar_item(reservation)
        step_start = step_end
    return list(found.values())


async def feed(call: Call) -> web.Response:
    username = await _owner(call)
    feed_key = call.request.app[LIMITS].feed_fetches.of(username)
    await take(call.bus, (feed_key,), "fetches of this feed")
    watched = await resolve_gpus(call, call.query["gpus"]) if call.query.get("gpus") else []
    now = datetime.now(UTC)
    found = await _reservations(call, now - ical_feed.PAST, now + ical_feed.AHEAD)
    site = call.request.url.host or "warden"
    body = ical_feed.render(username, found, watched=watched, site=site)
    return web.Response(
        body=body,
        content_type="text/calendar",
        charset="utf-8",
        headers={"Cache-Control": "private, no-store", "Referrer-Policy": "no-referrer"},
    )


TAG = "calendar feed"
ROUTES = (
    Route(
        "GET",
        "/me/calendar-feed",
        feed_state,
        Access.USER,
        "Whether the signed-in user has a calendar feed address",
        TAG,
        response=FeedStateSchema,
    ),
    Route(
        "POST",
        "/me/calendar-feed",
        create_feed,
        Access.USER,
        "Make the signed-in user's secret calendar feed address (replaces the old one)",
        TAG,
        response=FeedSchema,
        status=201,
        description="The address is shown only in this answer; the old one stops working.",
    ),
    Route(
        "DELETE",
        "/me/calendar-feed",
        revoke_feed,
        Access.USER,
        "Revoke the signed-in user's calendar feed address (404 from then on)",
        TAG,
        status=204,
    ),
    Route(
        "GET",
        PATH,
        feed,
        Access.PUBLIC,
        "A user's calendar feed (iCalendar): the token in the address is the credential",
        TAG,
        params=FeedPath,
        query=FeedQuery,
        raw=True,
        produces="text/calendar",
        description="The user's reservations (owned or shared with them) from 4 weeks ago to "
        "26 weeks ahead, cancelled ones as STATUS:CANCELLED; `gpus` adds everyone's on those "
        "GPUs. 404 for a revoked or unknown token (failed attempts are limited per address, "
        f"429); each feed may be fetched {FETCHES_PER_MINUTE} times a minute.",
    ),
)
