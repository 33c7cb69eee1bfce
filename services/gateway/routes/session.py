"""Signing in and out: login, refresh (rotating), logout, and who am I.

Refresh tokens live in the reservations service (which owns accounts): the gateway keeps
nothing, so sign-in on one gateway replica, refresh on another and logout on a third work
alike. Failed logins are limited per username and per client address, counted by the
reservations service for every replica (`limits.py`).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Sequence
from typing import Any

from marshmallow import Schema, fields, validate

from services.accounts import api
from services.accounts.api import UserSchema
from services.gateway.context import LIMITS, REVOCATIONS, TOKENS
from services.gateway.limits import settle, take
from services.gateway.routing import Access, Call, Route
from services.shared.config.settings import IpNetwork
from services.shared.errors import AuthenticationFailed


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


class AuthMethodsSchema(Schema):
    ldap = fields.Boolean(
        required=True,
        metadata={
            "description": "names without a local account sign in with the lab's "
            "directory account ([auth.ldap])"
        },
    )


class MeSchema(Schema):
    user = fields.Nested(UserSchema, required=True)


def client_address(remote: str | None, forwarded_for: str, trusted: Sequence[IpNetwork]) -> str:
    """The client's address: the TCP peer, unless it is a trusted reverse proxy; then the
    nearest address in X-Forwarded-For that is not one of ours (proxies append to it, so
    what lies beyond the first untrusted address is the client's to forge)."""
    chain = [remote or "unknown"]
    chain += reversed([part.strip() for part in forwarded_for.split(",") if part.strip()])
    for hop, address in enumerate(chain):
        if not _is_trusted(address, trusted) or hop == len(chain) - 1:
            return address
    return chain[-1]


def _is_trusted(address: str, trusted: Sequence[IpNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def caller_address(call: Call) -> str:
    return client_address(
        call.request.remote,
        call.request.headers.get("X-Forwarded-For", ""),
        call.settings.gateway.trusted_proxies,
    )


def signed_in(call: Call, answer: dict[str, Any]) -> dict[str, Any]:
    """The tokens of a session the service opened (its user, refresh token and session)."""
    issuer = call.request.app[TOKENS]
    return {
        "access_token": issuer.access_token(answer["user"], answer.get("session", "")),
        "token_type": "Bearer",
        "expires_in": issuer.ttl_s,
        "refresh_token": answer["refresh_token"],
        "refresh_expires_at": answer["refresh_expires_at"],
        "user": answer["user"],
    }


async def login(call: Call) -> dict[str, Any]:
    limits = call.request.app[LIMITS]
    username, address = call.body["username"], caller_address(call)
    name_key, address_key = limits.by_user.of(username), limits.by_address.of(address)
    # Counted as failed until the password proves right: parallel attempts, on any replica,
    # see each other (checked, then recorded after the answer, a burst all passed the check).
    marks = await take(call.bus, (name_key, address_key), "failed logins")
    ttl_s = call.settings.auth.refresh_token_ttl_s
    try:
        answer = await call.rpc(api.LOGIN, {**call.body, "ttl_s": ttl_s})
    except AuthenticationFailed:
        raise
    except BaseException:  # not a wrong password (the service is down): no attempt counted
        await settle(call.bus, cancel=marks)
        raise
    await settle(call.bus, cancel=marks[1:], clear=[name_key["key"]])
    return signed_in(call, answer)


async def refresh(call: Call) -> dict[str, Any]:
    ttl_s = call.settings.auth.refresh_token_ttl_s
    answer = await call.rpc(api.REFRESH_SESSION, {**call.body, "ttl_s": ttl_s})
    return signed_in(call, answer)


async def logout(call: Call) -> None:
    await call.rpc(api.LOGOUT, call.body)
    if call.caller is not None and call.caller.session:
        # This gateway refuses the caller's access token at once; the others (and this one
        # again) when the service's session.revoked event arrives.
        call.request.app[REVOCATIONS].revoke(call.caller.username, call.caller.session, time.time())


async def auth_methods(call: Call) -> dict[str, Any]:
    return {"ldap": bool(call.settings.auth.ldap.url)}


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
        "Retry-After). With [auth.ldap], a name with no local account signs in with its "
        "directory password: 403 when its directory groups may not sign in, 503 when the "
        "directory is unreachable or refuses Warden's service account.",
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
    Route(
        "GET",
        "/auth/methods",
        auth_methods,
        Access.PUBLIC,
        "How one signs in here: whether directory (LDAP) accounts may",
        TAG,
        response=AuthMethodsSchema,
    ),
    Route("GET", "/me", me, Access.USER, "The signed-in user", TAG, response=MeSchema),
)
