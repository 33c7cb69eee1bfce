"""Accounts, groups and access rules: who may sign in, who belongs where, who may use what.

The reservations service owns all three and decides who may see or change what (admins manage
them; a user reads and edits their own account). The gateway validates requests with the
service's own argument schemas (less `actor` and what the path names), pages the user list,
shows a user only the access rules that apply to them, and never answers a password.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from marshmallow import Schema, fields, validate

from services.accounts import api as accounts_api
from services.accounts.api import (
    AccountSchema,
    CreateGroupArgs,
    CreateUserArgs,
    GroupDeletedSchema,
    GroupSchema,
    MembershipSchema,
    UpdateGroupArgs,
    UpdateUserArgs,
    UserSchema,
)
from services.gateway.context import REVOCATIONS
from services.gateway.routes.reservations import IdPath
from services.gateway.routing import Access, Call, Page, Route, page_of, page_schema
from services.reservations import api
from services.reservations.api import (
    RuleArgs,
    RuleChangedSchema,
    RuleDeletedSchema,
    RuleSchema,
)
from services.shared.rpc import Method

_Str = fields.String
_Time = fields.AwareDateTime
_NAME = validate.Length(min=1, max=64)


# --- path parameters --------------------------------------------------------------------------


class UsernamePath(Schema):
    username = _Str(required=True, validate=_NAME)


class GroupPath(Schema):
    name = _Str(required=True, validate=_NAME)


class MemberPath(GroupPath):
    username = _Str(required=True, validate=_NAME)


# --- request bodies: the service's argument schemas, less `actor` and the path's names ----------


class UserCreateBody(CreateUserArgs):
    class Meta:
        exclude = ("actor",)


class UserUpdateBody(UpdateUserArgs):
    """Yourself: `email`, `password`. Admins also `is_admin` (never the last admin)."""

    class Meta:
        exclude = ("actor", "username")


class GroupCreateBody(CreateGroupArgs):
    class Meta:
        exclude = ("actor",)


class GroupUpdateBody(UpdateGroupArgs):
    class Meta:
        exclude = ("actor", "name")


# What the service's schema leaves open but its columns and clock cannot hold (a 32-bit
# integer; a time whose UTC form leaves years 1-9999): refused here (422), not a 502 there.
# Rule validity is kept within 1900-9000, far from those edges.
_INT32 = validate.Range(max=2**31 - 1)
_SPAN = validate.Range(min=datetime(1900, 1, 1, tzinfo=UTC), max=datetime(9000, 1, 1, tzinfo=UTC))


class RuleBody(RuleArgs):
    """A whole access rule (PUT replaces every field: what is left out takes its default)."""

    users = fields.List(_Str(validate=_NAME), load_default=list)
    groups = fields.List(_Str(validate=_NAME), load_default=list)
    hosts = fields.List(_Str(validate=validate.Length(min=1, max=255)), load_default=list)
    gpus = fields.List(_Str(validate=validate.Length(min=1, max=128)), load_default=list)
    valid_from = _Time(load_default=None, validate=_SPAN, metadata={"description": "default: now"})
    valid_until = _Time(
        load_default=None, allow_none=True, validate=_SPAN, metadata={"description": "null: open"}
    )
    max_gpus = fields.Integer(load_default=None, allow_none=True, validate=_INT32)
    max_duration_s = fields.Integer(load_default=None, allow_none=True, validate=_INT32)

    class Meta:
        exclude = ("actor",)


# --- answers ------------------------------------------------------------------------------------


# --- helpers ------------------------------------------------------------------------------------


def _without_secrets(found: Any) -> Any:
    """The answer with every password field left out, however deep (the service sends none)."""
    if isinstance(found, dict):
        return {
            key: _without_secrets(value)
            for key, value in found.items()
            if "password" not in str(key).lower()
        }
    if isinstance(found, list):
        return [_without_secrets(item) for item in found]
    return found


def _wire(values: dict[str, Any]) -> dict[str, Any]:
    """Loaded values as the bus carries them: times as ISO-8601."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in values.items()
    }


async def _answer(call: Call, method: Method, args: dict[str, Any]) -> Any:
    return _without_secrets(await call.rpc(method, args))


# --- users --------------------------------------------------------------------------------------


async def list_users(call: Call) -> dict[str, Any]:
    found = await _answer(call, accounts_api.LIST_USERS, {"actor": call.user.username})
    offset, limit = call.query["offset"], call.query["limit"]
    return page_of(found[offset : offset + limit], len(found), call.query)


async def create_user(call: Call) -> Any:
    return await _answer(call, accounts_api.CREATE_USER, {"actor": call.user.username, **call.body})


async def get_user(call: Call) -> Any:
    args = {"actor": call.user.username, "username": call.params["username"]}
    return await _answer(call, accounts_api.GET_USER, args)


async def update_user(call: Call) -> Any:
    args = {"actor": call.user.username, "username": call.params["username"], **call.body}
    answer = await _answer(call, accounts_api.UPDATE_USER, args)
    if call.body.get("password") is not None:
        # The service ended the user's sessions; this replica refuses their access tokens
        # before answering (the others when the session.revoked event reaches them).
        call.request.app[REVOCATIONS].revoke(call.params["username"], None, time.time())
    return answer


# --- groups -------------------------------------------------------------------------------------


async def list_groups(call: Call) -> Any:
    return await _answer(call, accounts_api.LIST_GROUPS, {"actor": call.user.username})


async def create_group(call: Call) -> Any:
    return await _answer(
        call, accounts_api.CREATE_GROUP, {"actor": call.user.username, **call.body}
    )


async def update_group(call: Call) -> Any:
    args = {"actor": call.user.username, "name": call.params["name"], **call.body}
    return await _answer(call, accounts_api.UPDATE_GROUP, args)


async def delete_group(call: Call) -> Any:
    return await _answer(
        call, accounts_api.DELETE_GROUP, {"actor": call.user.username, "name": call.params["name"]}
    )


async def add_group_member(call: Call) -> Any:
    return await _answer(
        call, accounts_api.ADD_GROUP_MEMBER, {"actor": call.user.username, **call.params}
    )


async def remove_group_member(call: Call) -> Any:
    args = {"actor": call.user.username, **call.params}
    return await _answer(call, accounts_api.REMOVE_GROUP_MEMBER, args)


# --- access rules -------------------------------------------------------------------------------


async def list_rules(call: Call) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = await _answer(call, api.LIST_RULES, {"actor": call.user.username})
    return rules


async def create_rule(call: Call) -> Any:
    args = {"actor": call.user.username, **_wire(call.body)}
    return await _answer(call, api.CREATE_RULE, args)


async def replace_rule(call: Call) -> Any:
    args = {"actor": call.user.username, "id": call.params["id"], **_wire(call.body)}
    return await _answer(call, api.UPDATE_RULE, args)


async def delete_rule(call: Call) -> Any:
    args = {"actor": call.user.username, "id": call.params["id"]}
    return await _answer(call, api.DELETE_RULE, args)


_RECHECKED = (
    "Future reservations are re-checked: those no longer allowed are cancelled, and ones an "
    "earlier change cancelled that are allowed and free again are restored"
)
_RECHECK = _RECHECKED + " (`cancelled` and `restored` list them)."

ROUTES = (
    Route(
        "GET",
        "/users",
        list_users,
        Access.USER,
        "Accounts (admins see them whole, others usernames and roles)",
        "users",
        query=Page,
        response=page_schema(AccountSchema),
    ),
    Route(
        "POST",
        "/users",
        create_user,
        Access.ADMIN,
        "Create an account (it joins every default group too)",
        "users",
        body=UserCreateBody,
        response=UserSchema,
        status=201,
        description="The username is the person's UNIX username on the GPU hosts. 409 "
        "`already_exists` when it is taken, 404 for an unknown group. The person is to choose "
        "their own password at sign-in (`change_at_sign_in`): until then every route but "
        "`GET /me`, `GET`/`PATCH /users/{username}` and the stream answers 403. "
        "`POST /users/invites` lets them choose it from the start.",
    ),
    Route(
        "GET",
        "/users/{username}",
        get_user,
        Access.OWNER,
        "One account: your own, or anyone's for admins",
        "users",
        params=UsernamePath,
        response=UserSchema,
    ),
    Route(
        "PATCH",
        "/users/{username}",
        update_user,
        Access.OWNER,
        "Change your e-mail or password; admins also change roles (`is_admin`)",
        "users",
        params=UsernamePath,
        body=UserUpdateBody,
        response=UserSchema,
        description="A new password signs the user out everywhere (their refresh tokens stop "
        "working, their access tokens at once); one an admin sets for someone else is to be "
        "changed at their next sign-in. The last admin cannot be demoted; 409 for a directory "
        "(LDAP) account's password.",
    ),
    Route(
        "GET",
        "/groups",
        list_groups,
        Access.USER,
        "Groups with their members",
        "groups",
        response=GroupSchema,
        many=True,
    ),
    Route(
        "POST",
        "/groups",
        create_group,
        Access.ADMIN,
        "Create a group",
        "groups",
        body=GroupCreateBody,
        response=GroupSchema,
        status=201,
    ),
    Route(
        "PATCH",
        "/groups/{name}",
        update_group,
        Access.ADMIN,
        "Change a group's description or whether new users join it",
        "groups",
        params=GroupPath,
        body=GroupUpdateBody,
        response=GroupSchema,
    ),
    Route(
        "DELETE",
        "/groups/{name}",
        delete_group,
        Access.ADMIN,
        "Delete a group (rules naming it match nobody through it)",
        "groups",
        params=GroupPath,
        response=GroupDeletedSchema,
        description=_RECHECK,
    ),
    Route(
        "PUT",
        "/groups/{name}/members/{username}",
        add_group_member,
        Access.ADMIN,
        "Add a user to a group",
        "groups",
        params=MemberPath,
        response=MembershipSchema,
        description=_RECHECK,
    ),
    Route(
        "DELETE",
        "/groups/{name}/members/{username}",
        remove_group_member,
        Access.ADMIN,
        "Remove a user from a group",
        "groups",
        params=MemberPath,
        response=MembershipSchema,
        description=_RECHECK,
    ),
    Route(
        "GET",
        "/rules",
        list_rules,
        Access.USER,
        "Access rules: every one for admins, those that apply to you for others",
        "rules",
        response=RuleSchema,
        many=True,
    ),
    Route(
        "POST",
        "/rules",
        create_rule,
        Access.ADMIN,
        "Create an access rule",
        "rules",
        body=RuleBody,
        response=RuleChangedSchema,
        status=201,
        description="Windows are `{days, start, end}` in the rule's `timezone` (days `mon`..`sun` "
        "or 0..6, 0 = Monday; `HH:MM`, end `24:00` allowed). " + _RECHECK,
    ),
    Route(
        "PUT",
        "/rules/{id}",
        replace_rule,
        Access.ADMIN,
        "Replace an access rule (every field; what is left out takes its default)",
        "rules",
        params=IdPath,
        body=RuleBody,
        response=RuleChangedSchema,
        description=_RECHECK,
    ),
    Route(
        "DELETE",
        "/rules/{id}",
        delete_rule,
        Access.ADMIN,
        "Delete an access rule",
        "rules",
        params=IdPath,
        response=RuleDeletedSchema,
        description=_RECHECK,
    ),
)
