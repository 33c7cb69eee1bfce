"""Accounts people run themselves: invitations and password resets as one-time links, choosing a
password with one, deactivating, activating and deleting accounts.

The accounts decide (`services.accounts.password_links`, `lifecycle`); the gateway adds the
link's address and, when an account's sessions end, refuses its access tokens here at once,
before it answers (the other replicas when the `session.revoked` event reaches them).
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import quote

from marshmallow import Schema, fields, validate

from services.accounts import api
from services.accounts.api import (
    DeactivatedSchema,
    LinkStateSchema,
    PasswordLinkSchema,
    UserSchema,
)
from services.gateway.context import REVOCATIONS
from services.gateway.routes.accounts import UsernamePath
from services.gateway.routes.session import TokensSchema, signed_in
from services.gateway.routing import Access, Call, Route
from services.gateway.setup_link import link_host
from services.notifications import api as notifications_api
from services.shared.errors import InvalidRequest, WardenError

_Str = fields.String
TAG = "users"
MAIL_WAIT_S = 5.0  # how long an invitation waits to say whether its e-mail went out
log = logging.getLogger("warden.gateway")


class InviteBody(Schema):
    username = _Str(required=True, validate=validate.Length(min=1, max=64))
    email = _Str(required=True, validate=validate.Length(min=1, max=254))
    is_admin = fields.Boolean(load_default=False)
    groups = fields.List(_Str(validate=validate.Length(min=1, max=64)), load_default=list)


class LinkAnswerSchema(PasswordLinkSchema):
    link = _Str(required=True, metadata={"description": "the address to give the person"})
    emailed = _Str(
        required=True,
        metadata={
            "description": "the link by e-mail: sent, failed (e.g. e-mail is not set up), "
            "limited, or unknown (no answer yet; it may still go out)"
        },
    )


class TokenPath(Schema):
    token = _Str(required=True, validate=validate.Length(min=1, max=256))


class ChooseBody(Schema):
    password = _Str(required=True, validate=validate.Length(min=1, max=1024))


class DeactivateBody(Schema):
    free_bookings = fields.Boolean(
        load_default=False,
        metadata={"description": "true: also cancel their reservations that have not started"},
    )


class DeleteQuery(Schema):
    confirm = _Str(
        required=True,
        validate=validate.Length(min=1, max=64),
        metadata={"description": "the username again: a delete is not undone"},
    )


class DeletedSchema(Schema):
    username = _Str(required=True)
    deleted = fields.Boolean(required=True)


def link_of(call: Call, token: str) -> str:
    gateway = call.settings.gateway
    base = gateway.public_url or f"http://{link_host(gateway.host)}:{gateway.port}"
    return f"{base.rstrip('/')}/password/{quote(token, safe='')}"


async def _mailed(call: Call, answer: dict[str, Any], url: str) -> str:
    """The link sent to its person through the notification path (kind `account`): what
    became of the e-mail. Waited for a few seconds only: the link is made either way."""
    invite = answer["purpose"] == "invite"
    args = {
        "user": answer["username"],
        "kind": "account",
        "title": "Your Warden account" if invite else "A new Warden password",
        "text": (
            f"You are invited to Warden as {answer['username']}: choose your password"
            if invite
            else f"Choose a new password for your Warden account {answer['username']}"
        )
        + f" with this link. It works once, until {answer['expires_at']}.",
        "links": [{"label": "Choose your password", "url": url}],
    }
    try:
        sent = await call.rpc(notifications_api.NOTIFY, args, timeout=MAIL_WAIT_S)
    except (TimeoutError, WardenError) as err:
        log.info("the password link of %s not e-mailed yet: %s", answer["username"], err)
        return "unknown"
    return str(sent["channels"].get("email", "failed"))


def _signed_out(call: Call, username: str) -> None:
    """This replica refuses the user's access tokens from now on, before answering."""
    call.request.app[REVOCATIONS].revoke(username, None, time.time())


async def invite(call: Call) -> dict[str, Any]:
    args = {
        "actor": call.user.username,
        **call.body,
        "link_ttl_s": call.settings.auth.password_link_ttl_s,
    }
    answer = await call.rpc(api.INVITE_USER, args)
    url = link_of(call, answer["token"])
    return {**answer, "link": url, "emailed": await _mailed(call, answer, url)}


async def reset(call: Call) -> dict[str, Any]:
    args = {
        "actor": call.user.username,
        "username": call.params["username"],
        "link_ttl_s": call.settings.auth.password_link_ttl_s,
    }
    answer = await call.rpc(api.RESET_PASSWORD, args)
    url = link_of(call, answer["token"])
    return {**answer, "link": url, "emailed": await _mailed(call, answer, url)}


async def link_state(call: Call) -> Any:
    return await call.rpc(api.PASSWORD_LINK, {"token": call.params["token"]})


async def choose_password(call: Call) -> dict[str, Any]:
    args = {
        "token": call.params["token"],
        "password": call.body["password"],
        "ttl_s": call.settings.auth.refresh_token_ttl_s,
    }
    answer = await call.rpc(api.USE_PASSWORD_LINK, args)
    _signed_out(call, answer["user"]["username"])  # tokens of before the new password
    return signed_in(call, answer)


async def deactivate(call: Call) -> Any:
    username = call.params["username"]
    args = {"actor": call.user.username, "username": username, **call.body}
    answer = await call.rpc(api.DEACTIVATE_USER, args)
    _signed_out(call, username)
    return answer


async def activate(call: Call) -> Any:
    args = {"actor": call.user.username, "username": call.params["username"]}
    return await call.rpc(api.ACTIVATE_USER, args)


async def delete(call: Call) -> Any:
    username = call.params["username"]
    if call.query["confirm"] != username:
        raise InvalidRequest(
            "confirm with the username: ?confirm=" + username, {"confirm": "must be the username"}
        )
    answer = await call.rpc(api.DELETE_USER, {"actor": call.user.username, "username": username})
    _signed_out(call, username)
    return answer


ROUTES = (
    Route(
        "POST",
        "/users/invites",
        invite,
        Access.ADMIN,
        "Invite someone: an account without a password and a one-time link to choose it",
        TAG,
        body=InviteBody,
        response=LinkAnswerSchema,
        status=201,
        description="The username is the person's UNIX username on the GPU hosts. The link "
        "works once and expires after [auth] password_link_ttl_s; nobody signs in as the "
        "account until it is used. 409 `already_exists` when the name is taken.",
    ),
    Route(
        "POST",
        "/users/{username}/reset",
        reset,
        Access.ADMIN,
        "A new one-time link for a user to choose a new password",
        TAG,
        params=UsernamePath,
        response=LinkAnswerSchema,
        status=201,
        description="Their earlier link stops working; their password works until the link is "
        "used, which signs them out everywhere. 409 for a directory (LDAP) account: its "
        "password is changed in the directory.",
    ),
    Route(
        "GET",
        "/password-links/{token}",
        link_state,
        Access.PUBLIC,
        "Whose a one-time link is and what for (without using it)",
        TAG,
        params=TokenPath,
        response=LinkStateSchema,
        description="403 when the link was used, replaced or has expired.",
    ),
    Route(
        "POST",
        "/password-links/{token}",
        choose_password,
        Access.PUBLIC,
        "Choose a password with a one-time link, and sign in",
        TAG,
        params=TokenPath,
        body=ChooseBody,
        response=TokensSchema,
        status=201,
        description="The link is spent and every earlier session of the account ends. 403 "
        "when the link was used, replaced or has expired; 422 for a password too short.",
    ),
    Route(
        "POST",
        "/users/{username}/deactivate",
        deactivate,
        Access.ADMIN,
        "Deactivate an account: signed out everywhere, no sign-in, history kept",
        TAG,
        params=UsernamePath,
        body=DeactivateBody,
        response=DeactivatedSchema,
        description="Their reservations stay unless `free_bookings` is true: then those that "
        "have not started are cancelled (`cancelled` lists them). Not your own account, nor "
        "the last active admin (422).",
    ),
    Route(
        "POST",
        "/users/{username}/activate",
        activate,
        Access.ADMIN,
        "Let a deactivated account sign in again",
        TAG,
        params=UsernamePath,
        response=UserSchema,
    ),
    Route(
        "DELETE",
        "/users/{username}",
        delete,
        Access.ADMIN,
        "Delete an account (confirm with ?confirm=<username>)",
        TAG,
        params=UsernamePath,
        query=DeleteQuery,
        response=DeletedSchema,
        description="Signed out everywhere; their reservations, jobs and incidents keep the "
        "name. Not your own account, nor the last active admin (422). Deactivating keeps "
        "the account instead.",
    ),
)
