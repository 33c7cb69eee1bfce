"""The first run: create the first administrator with the one-time set-up link.

While no admin exists the gateway prints a link with a set-up token (see `setup_link.py`);
the web UI's /setup page posts it here with the new admin's name and password. The reservations
service checks the token and creates the admin in one transaction (`reservations/setup.py`);
the answer signs the new admin in, as a login does. Failed attempts count against the client
address like failed logins (a token is 32 random bytes: the limit is for good measure).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from services.accounts import api
from services.gateway.context import LIMITS
from services.gateway.limits import settle, take
from services.gateway.routes.session import TokensSchema, caller_address, signed_in
from services.gateway.routing import Access, Call, Route, ValidationFailed
from services.shared.errors import Forbidden, InvalidRequest


class SetupStateSchema(Schema):
    needed = fields.Boolean(required=True, metadata={"description": "no administrator exists yet"})


class SetupBody(Schema):
    token = fields.String(
        required=True,
        validate=validate.Length(min=1, max=256),
        metadata={"description": "the token of the set-up link the gateway printed"},
    )
    username = fields.String(required=True, validate=validate.Length(min=1, max=64))
    password = fields.String(required=True, validate=validate.Length(min=1, max=1024))
    email = fields.String(
        validate=validate.Length(min=1, max=254),
        metadata={"description": "default: USERNAME@localhost"},
    )


async def setup_state(call: Call) -> dict[str, Any]:
    answer: dict[str, Any] = await call.rpc(api.SETUP_STATE)
    return {"needed": answer["needed"]}


async def create_first_admin(call: Call) -> dict[str, Any]:
    address_key = call.request.app[LIMITS].by_address.of(caller_address(call))
    # Counted as failed until the token proves right.
    marks = await take(call.bus, (address_key,))
    body = call.body
    args = {
        **body,
        "email": body.get("email") or f"{body['username']}@localhost",
        "ttl_s": call.settings.auth.refresh_token_ttl_s,
    }
    try:
        answer = await call.rpc(api.SETUP_ADMIN, args)
    except Forbidden:
        raise
    except InvalidRequest as err:  # a name or password the service refuses: nothing happened
        await settle(call.bus, cancel=marks)
        problems = err.details if isinstance(err.details, dict) else {}
        raise ValidationFailed(
            err.message,
            {"in": "body", "errors": {k: [str(v)] for k, v in problems.items()}},
        ) from err
    except BaseException:  # an admin exists, the service is down: not a guess at the token
        await settle(call.bus, cancel=marks)
        raise
    await settle(call.bus, cancel=marks)
    return signed_in(call, answer)


TAG = "session"
ROUTES = (
    Route(
        "GET",
        "/setup",
        setup_state,
        Access.PUBLIC,
        "Whether the first administrator is still to be created",
        TAG,
        response=SetupStateSchema,
    ),
    Route(
        "POST",
        "/setup",
        create_first_admin,
        Access.PUBLIC,
        "Create the first administrator with the one-time set-up token; signs them in",
        TAG,
        body=SetupBody,
        response=TokensSchema,
        status=201,
        description="Only while no administrator exists (409 after) and with a token of a "
        "set-up link (403 otherwise; failed attempts are limited per address, 429 with "
        "Retry-After). Every set-up token stops working once it succeeds.",
    ),
)
