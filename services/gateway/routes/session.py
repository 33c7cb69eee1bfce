"""Signing in and out: login, refresh (rotating), logout, and who am I.

Refresh tokens live in the reservations service (which owns accounts): the gateway keeps
nothing. Failed logins are limited per username and per client address.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from services.gateway.context import LIMITS, TOKENS
from services.gateway.routing import Access, Call, Route
from services.reservations import api
from services.reservations.api import UserSchema
from services.shared.errors import AuthenticationFailed, WardenError


class TooManyAttempts(WardenError):
    code = "too_many_attempts"


class LoginBody(Schema):
    username = fields.String(required=True, validate=validate.Length(min=1, max=64))
    password = fields.String(required=True, validate=validate.Length(min=1, max=1024))


class RefreshBody(Schema):
    refresh_token = fields.String(required=True, validate=validate.Length(min=1, max=256))


class TokensSchema(Schema):
    access_token = fields.String(required=True)
    token_type = fields.String(required=True, metadata={"example": "Bearer"})
    expires_in = fields.Integer(required=True, metadata={"description": "seconds"})
    refresh_token = fields.String(required=True)
    refresh_expires_at = fields.AwareDateTime(required=True)
    user = fields.Nested(UserSchema, required=True)


class MeSchema(Schema):
    user = fields.Nested(UserSchema, required=True)


def _client_address(call: Call) -> str:
    return call.request.remote or "unknown"


def _tokens(call: Call, answer: dict[str, Any]) -> dict[str, Any]:
    issuer = call.request.app[TOKENS]
    return {
        "access_token": issuer.access_token(answer["user"]),
        "token_type": "Bearer",
        "expires_in": issuer.ttl_s,
        "refresh_token": answer["refresh_token"],
        "refresh_expires_at": answer["refresh_expires_at"],
        "user": answer["user"],
    }


async def login(call: Call) -> dict[str, Any]:
    limits = call.request.app[LIMITS]
    username, address = call.body["username"], _client_address(call)
    waits = [
        wait
        for wait in (limits.by_user.retry_after(username), limits.by_address.retry_after(address))
        if wait is not None
    ]
    if waits:
        wait = max(waits)
        raise TooManyAttempts(
            f"too many failed logins; try again in {wait:.0f}s", {"retry_after_s": wait}
        )
    ttl_s = call.settings.auth.refresh_token_ttl_s
    try:
        answer = await call.rpc(api.LOGIN, {**call.body, "ttl_s": ttl_s})
    except AuthenticationFailed:
        limits.by_user.failed(username)
        limits.by_address.failed(address)
        raise
    limits.by_user.succeeded(username)
    return _tokens(call, answer)


async def refresh(call: Call) -> dict[str, Any]:
    ttl_s = call.settings.auth.refresh_token_ttl_s
    answer = await call.rpc(api.REFRESH_SESSION, {**call.body, "ttl_s": ttl_s})
    return _tokens(call, answer)


async def logout(call: Call) -> None:
    await call.rpc(api.LOGOUT, call.body)


async def me(call: Call) -> dict[str, Any]:
    user = await call.rpc(
        api.GET_USER, {"actor": call.user.username, "username": call.user.username}
    )
    return {"user": user}


TAG = "session"
ROUTES = (
    Route(
        "POST",
        "/session",
        login,
        Access.PUBLIC,
        "Sign in: access and refresh tokens",
        TAG,
        body=LoginBody,
        response=TokensSchema,
        status=201,
        description="Failed attempts are limited per username and per address (429 with "
        "Retry-After).",
    ),
    Route(
        "POST",
        "/session/refresh",
        refresh,
        Access.PUBLIC,
        "Trade a refresh token for new tokens (the old one stops working)",
        TAG,
        body=RefreshBody,
        response=TokensSchema,
        description="A refresh token used twice revokes every token of its login (401).",
    ),
    Route(
        "POST",
        "/session/logout",
        logout,
        Access.PUBLIC,
        "Sign out: revoke the refresh token",
        TAG,
        body=RefreshBody,
        status=204,
    ),
    Route("GET", "/me", me, Access.USER, "The signed-in user", TAG, response=MeSchema),
)
