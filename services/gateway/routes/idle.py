"""Idle reservations given back: the owner's notices, their answers, the admins' counts.

An idle notice (a message on the owner's channels) carries two links to the web UI's page
`/idle/{token}?action=keep|release`; the page reads `GET /idle/links/{token}` (which does
nothing: mail scanners fetch links) and acts only on the person's click, a `POST` with the
action. The token (signed, bound to one notice, single use) is the credential, so the path is
logged masked (`shared/http_errors.py`). Signed in, the owner answers with
`POST /reservations/{id}/keep` or `/release`; `GET /me/idle` lists what waits for an answer.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from services.gateway.routes.reservations import IdPath
from services.gateway.routing import Access, Call, Route
from services.reservations import api
from services.reservations.api import (
    IdleAnswerSchema,
    IdleLinkSchema,
    IdleNoticeSchema,
    IdleStatsSchema,
)


class LinkPath(Schema):
    token = fields.String(required=True, validate=validate.Length(min=1, max=256))


class AnswerBody(Schema):
    action = fields.String(
        required=True,
        validate=validate.OneOf(("keep", "release")),
        metadata={"description": 'keep: "I still need it"; release: end the rest of it now'},
    )


class NoticesQuery(Schema):
    everyone = fields.Boolean(
        load_default=False, metadata={"description": "admins: every user's notices"}
    )


async def my_notices(call: Call) -> list[dict[str, Any]]:
    args = {"actor": call.user.username, "everyone": call.query["everyone"]}
    found: list[dict[str, Any]] = await call.rpc(api.IDLE_NOTICES, args)
    return found


async def keep(call: Call) -> dict[str, Any]:
    args = {"actor": call.user.username, "id": call.params["id"]}
    answer: dict[str, Any] = await call.rpc(api.KEEP_RESERVATION, args)
    return answer


async def release(call: Call) -> dict[str, Any]:
    args = {"actor": call.user.username, "id": call.params["id"]}
    answer: dict[str, Any] = await call.rpc(api.RELEASE_RESERVATION, args)
    return answer


async def link(call: Call) -> dict[str, Any]:
    answer: dict[str, Any] = await call.rpc(api.IDLE_LINK, {"token": call.params["token"]})
    return answer


async def answer_link(call: Call) -> dict[str, Any]:
    args = {"token": call.params["token"], "action": call.body["action"]}
    answer: dict[str, Any] = await call.rpc(api.ANSWER_IDLE_LINK, args)
    return answer


async def stats(call: Call) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = await call.rpc(api.IDLE_STATS, {"actor": call.user.username})
    return found


TAG = "idle reservations"
ROUTES = (
    Route(
        "GET",
        "/me/idle",
        my_notices,
        Access.USER,
        "Your reservations told idle that wait for an answer (keep or release)",
        TAG,
        query=NoticesQuery,
        response=IdleNoticeSchema,
        many=True,
    ),
    Route(
        "POST",
        "/reservations/{id}/keep",
        keep,
        Access.OWNER,
        '"I still need it": answer the reservation\'s idle notice; its idle policy snoozes',
        TAG,
        params=IdPath,
        response=IdleAnswerSchema,
        description="409 when no idle notice of it waits for an answer.",
    ),
    Route(
        "POST",
        "/reservations/{id}/release",
        release,
        Access.OWNER,
        '"Release now": answer the reservation\'s idle notice by ending the rest of it',
        TAG,
        params=IdPath,
        response=IdleAnswerSchema,
        description="409 when no idle notice of it waits for an answer.",
    ),
    Route(
        "GET",
        "/idle/stats",
        stats,
        Access.ADMIN,
        "Per user: idle notices, how often they kept, released or let the grace run out",
        TAG,
        response=IdleStatsSchema,
        many=True,
    ),
    Route(
        "GET",
        "/idle/links/{token}",
        link,
        Access.PUBLIC,
        "What an idle notice's link is about; reading it does nothing",
        TAG,
        params=LinkPath,
        response=IdleLinkSchema,
        description="The token is the credential. 404 for one Warden did not sign.",
    ),
    Route(
        "POST",
        "/idle/links/{token}",
        answer_link,
        Access.PUBLIC,
        "Answer an idle notice through its link: keep or release (works once)",
        TAG,
        params=LinkPath,
        body=AnswerBody,
        response=IdleAnswerSchema,
        description="409 once the link was used, or its notice is over (answered, released, "
        "or the GPUs got busy again); 404 for a token Warden did not sign.",
    ),
)
