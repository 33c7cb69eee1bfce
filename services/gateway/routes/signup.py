"""Self-signup by SSH key (`[auth] ssh_signup`): a person proves a Unix account on a host and
gets a `user` account of that name.

They put Warden's public key into that account's ~/.ssh/authorized_keys, then post a
username, e-mail and password here. The reservations service refuses fields an account could
never have (422) or a taken name (409) first; the monitor, which owns the inventory and logs in
to it, then logs in as that user with Warden's key (`monitor.prove_login`); only then does the
reservations service create the account and sign it in. Every attempt that reaches SSH counts
against the client address as a failed login does, until it succeeds (429 with Retry-After).
"""

from __future__ import annotations

import asyncio
from typing import Any

from marshmallow import Schema, fields, validate

from services.accounts import api
from services.gateway.context import LIMITS
from services.gateway.limits import settle, take
from services.gateway.routes.session import TokensSchema, caller_address, signed_in
from services.gateway.routing import Access, Call, Route, ValidationFailed
from services.monitor import api as monitor_api
from services.shared.errors import (
    ConfigError,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServiceUnavailable,
)
from services.shared.remote.ssh import public_key_line

DISABLED = "self-signup by SSH key is not enabled here: ask an admin for an account"
# What the person can do about each refusal of the monitor's proof (details.reason).
REFUSALS = {
    "key_not_installed": Forbidden,
    "unknown_user": Forbidden,
    "refused": Forbidden,
    "unreachable": ServiceUnavailable,
}


class SignupStateSchema(Schema):
    enabled = fields.Boolean(required=True, metadata={"description": "[auth] ssh_signup"})
    public_key = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "the line to add to ~/.ssh/authorized_keys (null: disabled)"},
    )
    hosts = fields.List(
        fields.String(),
        required=True,
        metadata={"description": "the SSH hosts a signup may prove the account on"},
    )


class SignupBody(Schema):
    username = fields.String(
        required=True,
        validate=validate.Length(min=1, max=64),
        metadata={"description": "your Unix username on the GPU hosts"},
    )
    email = fields.String(required=True, validate=validate.Length(min=1, max=254))
    password = fields.String(required=True, validate=validate.Length(min=1, max=1024))
    host = fields.String(
        load_default=None,
        allow_none=True,
        validate=validate.Length(min=1, max=63),
        metadata={"description": "the host whose authorized_keys has the key; default: any"},
    )


def _unprocessable(err: InvalidRequest) -> ValidationFailed:
    problems = err.details if isinstance(err.details, dict) else {}
    problems = problems.get("errors", problems)
    return ValidationFailed(
        err.message, {"in": "body", "errors": {k: [str(v)] for k, v in problems.items()}}
    )


async def _public_key(call: Call) -> str:
    try:
        return await asyncio.to_thread(public_key_line, call.settings)
    except ConfigError as err:  # its details name a file on the server: not for the public
        raise ServiceUnavailable(
            "self-signup needs Warden's SSH key (ssh.key_file), which is not set up: ask an admin"
        ) from err


async def signup_state(call: Call) -> dict[str, Any]:
    if not call.settings.auth.ssh_signup:
        return {"enabled": False, "public_key": None, "hosts": []}
    try:
        listed = await call.rpc(monitor_api.LIST_HOSTS)
        hosts = [h["name"] for h in listed["hosts"] if h["probe"] == "ssh"]
    except ServiceUnavailable:
        hosts = []  # the form still works: the signup then says the monitor is down
    return {"enabled": True, "public_key": await _public_key(call), "hosts": hosts}


async def sign_up(call: Call) -> dict[str, Any]:
    if not call.settings.auth.ssh_signup:
        raise Forbidden(DISABLED)
    address_key = call.request.app[LIMITS].by_address.of(caller_address(call))
    body, groups = call.body, list(call.settings.auth.ssh_signup_groups)
    fields_ = {"username": body["username"], "email": body["email"], "password": body["password"]}
    try:
        await call.rpc(api.CHECK_SIGNUP, {**fields_, "groups": groups})
    except InvalidRequest as err:  # nothing was tried: not counted
        raise _unprocessable(err) from err
    await _public_key(call)  # no key, no proof: say so before logging in anywhere
    marks = await take(call.bus, (address_key,))  # counted as failed until the account exists
    try:
        proof = await call.rpc(
            monitor_api.PROVE_LOGIN, {"username": body["username"], "host": body["host"]}
        )
    except InvalidRequest as err:
        await settle(call.bus, cancel=marks)
        raise _unprocessable(err) from err
    except NotFound as err:  # a host not in the inventory: a bad field, nothing was tried
        await settle(call.bus, cancel=marks)
        raise ValidationFailed(
            err.message, {"in": "body", "errors": {"host": [err.message]}}
        ) from err
    except ServiceUnavailable:
        await settle(call.bus, cancel=marks)  # the monitor is down: not the person's attempt
        raise
    if not proof["proven"]:
        details = {"reason": proof["outcome"], "host": proof["host"], "tried": proof["tried"]}
        raise REFUSALS[proof["outcome"]](f"cannot sign up: {proof['reason']}", details)
    ttl_s = call.settings.auth.refresh_token_ttl_s
    try:
        answer = await call.rpc(api.SIGNUP, {**fields_, "groups": groups, "ttl_s": ttl_s})
    except InvalidRequest as err:
        raise _unprocessable(err) from err
    await settle(call.bus, cancel=marks)
    return signed_in(call, answer)


TAG = "session"
ROUTES = (
    Route(
        "GET",
        "/signup",
        signup_state,
        Access.PUBLIC,
        "Whether self-signup by SSH key is enabled: Warden's key line and the hosts",
        TAG,
        response=SignupStateSchema,
    ),
    Route(
        "POST",
        "/signup",
        sign_up,
        Access.PUBLIC,
        "Sign up by SSH key: prove your Unix account, get a `user` account; signs you in",
        TAG,
        body=SignupBody,
        response=TokensSchema,
        status=201,
        description="Put Warden's key (GET /signup, /ssh-key) into ~/.ssh/authorized_keys of "
        "your Unix account on a host first. Warden logs in there as you with it. 403 when "
        "signup is disabled, or the login was refused (details.reason: key_not_installed, "
        "unknown_user, refused); 503 when no host could be reached (unreachable); 409 for a "
        "taken username; 422 for bad fields or a host not in the inventory. Attempts that "
        "reach SSH and fail are limited per address (429 with Retry-After).",
    ),
)
