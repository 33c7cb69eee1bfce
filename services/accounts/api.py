"""The accounts' public call contract: users, groups, sessions, passwords, LDAP sign-in,
SSH self-signup, the first run's set-up tokens, calendar-feed tokens, contacts for other
services, and the counted attempts of the gateway replicas' rate limits. The gateway, the CLI and
the other services call accounts through this module alone (see `services.shared.rpc`).

The accounts run inside the reservations service's process and database: its `handlers.py`
serves these methods beside its own. Their wire names keep the `reservations.` prefix they had
before accounts were a package of their own (`reservations.create_user`, ...), so gateways and
CLIs of the previous version keep working: do not change `SERVICE`.

Every method that acts for someone takes `actor`: the username the gateway authenticated.
"""

from __future__ import annotations

from dataclasses import dataclass

from marshmallow import Schema, fields, validate

from services.shared.errors import (
    AlreadyExists,
    AuthenticationFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServiceUnavailable,
    StateConflict,
)
from services.shared.rpc import Answer, methods_of

# The service that serves these methods: the prefix of their wire names (see above).
SERVICE = "reservations"

_Str = fields.String
_Time = fields.AwareDateTime
_method = methods_of(SERVICE)


@dataclass(frozen=True)
class Actor:
    """Who acts: the username the gateway authenticated, and whether they are an admin."""

    username: str
    is_admin: bool


# --- arguments ----------------------------------------------------------------------------------


class ActorArgs(Schema):
    """What every method acting for someone takes: who."""

    actor = _Str(required=True, validate=validate.Length(min=1))


class AuthenticateArgs(Schema):
    username = _Str(required=True)
    password = _Str(required=True)


class LoginArgs(AuthenticateArgs):
    ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class RefreshArgs(Schema):
    refresh_token = _Str(required=True, validate=validate.Length(min=1, max=256))
    ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class LogoutArgs(Schema):
    refresh_token = _Str(required=True, validate=validate.Length(min=1, max=256))


class SetupAdminArgs(Schema):
    token = _Str(required=True, validate=validate.Length(min=1, max=256))
    username = _Str(required=True)
    email = _Str(required=True)
    password = _Str(required=True)
    ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class FeedTokenArgs(Schema):
    token = _Str(required=True, validate=validate.Length(min=1, max=256))


class CheckSignupArgs(Schema):
    username = _Str(required=True)
    email = _Str(required=True)
    password = _Str(required=True)
    groups = fields.List(_Str(), load_default=list)


class SignupArgs(CheckSignupArgs):
    ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class ContactsArgs(Schema):
    usernames = fields.List(_Str(validate=validate.Length(min=1)), required=True)


class UserArgs(ActorArgs):
    username = _Str(required=True)


class CreateUserArgs(UserArgs):
    email = _Str(required=True)
    password = _Str(required=True)
    is_admin = fields.Boolean(load_default=False)
    groups = fields.List(_Str(), load_default=list)


class UpdateUserArgs(UserArgs):
    email = _Str(load_default=None)
    password = _Str(load_default=None)
    is_admin = fields.Boolean(load_default=None, allow_none=True)


class InviteUserArgs(ActorArgs):
    username = _Str(required=True)
    email = _Str(required=True)
    is_admin = fields.Boolean(load_default=False)
    groups = fields.List(_Str(), load_default=list)
    link_ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class ResetPasswordArgs(UserArgs):
    link_ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class PasswordLinkArgs(Schema):
    token = _Str(required=True, validate=validate.Length(min=1, max=256))


class UsePasswordLinkArgs(PasswordLinkArgs):
    password = _Str(required=True)
    ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class DeactivateUserArgs(UserArgs):
    free_bookings = fields.Boolean(
        load_default=False,
        metadata={"description": "true: also cancel their reservations that have not started"},
    )


class GroupArgs(ActorArgs):
    name = _Str(required=True)


class CreateGroupArgs(GroupArgs):
    description = _Str(load_default="")
    is_default = fields.Boolean(load_default=False)


class UpdateGroupArgs(GroupArgs):
    description = _Str(load_default=None)
    is_default = fields.Boolean(load_default=None, allow_none=True)


class MemberArgs(GroupArgs):
    username = _Str(required=True)


# --- answers ------------------------------------------------------------------------------------


class UserSchema(Answer):
    username = fields.String(required=True)
    email = fields.String(required=True)
    roles = fields.List(fields.String(), required=True)
    groups = fields.List(fields.String(), required=True)
    created_at = fields.AwareDateTime(required=True)
    source = fields.String(
        metadata={"description": "local (its own password) or ldap (signs in through [auth.ldap])"}
    )
    status = fields.String(
        metadata={"description": "active, invited (no password chosen yet) or deactivated"}
    )
    change_at_sign_in = fields.Boolean(
        metadata={"description": "an admin chose the password: its owner is asked for a new one"}
    )


class PasswordLinkSchema(Answer):
    """A one-time link's secret, shown once, and what it is for."""

    username = _Str(required=True)
    purpose = _Str(required=True, metadata={"description": "invite or reset"})
    token = _Str(required=True)
    expires_at = _Time(required=True)


class LinkStateSchema(Answer):
    """What a link is for, without using it."""

    username = _Str(required=True)
    purpose = _Str(required=True, metadata={"description": "invite or reset"})
    expires_at = _Time(required=True)


class DeactivatedSchema(Answer):
    user = fields.Nested(UserSchema, required=True)
    cancelled = fields.List(
        fields.Integer(), required=True, metadata={"description": "reservations freed, by id"}
    )


class AccountSchema(Answer):
    """A user in the list: admins see the whole account, others the username and roles."""

    username = _Str(required=True)
    roles = fields.List(_Str(), required=True)
    email = _Str(metadata={"description": "admins only"})
    groups = fields.List(_Str(), metadata={"description": "admins only"})
    created_at = _Time(metadata={"description": "admins only"})
    source = _Str(metadata={"description": "admins only: local or ldap"})
    status = _Str(metadata={"description": "admins only: active, invited or deactivated"})
    change_at_sign_in = fields.Boolean(metadata={"description": "admins only"})


class GroupSchema(Answer):
    name = _Str(required=True)
    description = _Str(required=True)
    is_default = fields.Boolean(
        required=True, metadata={"description": "users created from now on join it"}
    )
    members = fields.List(_Str(), required=True)


class AccessChangeSchema(Answer):
    """Future reservations that an access change cancelled, or restored, by id."""

    cancelled = fields.List(fields.Integer(), required=True)
    restored = fields.List(fields.Integer(), required=True)


class GroupDeletedSchema(AccessChangeSchema):
    name = _Str(required=True)


class MembershipSchema(AccessChangeSchema):
    group = _Str(required=True)
    username = _Str(required=True)
    changed = fields.Boolean(
        required=True, metadata={"description": "false: they were (not) a member already"}
    )


# --- counted attempts (`attempts.py`) -----------------------------------------------------------


class AttemptLimit(Schema):
    key = fields.String(
        required=True,
        validate=validate.Length(min=1, max=320),
        metadata={"description": "what the attempt counts against, e.g. `address:10.0.0.7`"},
    )
    window_s = fields.Float(required=True, validate=validate.Range(min=0.001, max=86_400 * 7))
    limit = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class TakeAttemptsArgs(Schema):
    limits = fields.List(
        fields.Nested(AttemptLimit), required=True, validate=validate.Length(min=1, max=8)
    )


class TakeAttemptsAnswer(Schema):
    retry_after_s = fields.Float(
        allow_none=True, metadata={"description": "null: taken; else when to try again"}
    )
    marks = fields.List(fields.Integer(), metadata={"description": "one per key, for settle"})


class SettleAttemptsArgs(Schema):
    cancel = fields.List(
        fields.Integer(strict=True), load_default=list, validate=validate.Length(max=8)
    )
    clear = fields.List(
        fields.String(validate=validate.Length(min=1, max=320)),
        load_default=list,
        validate=validate.Length(max=8),
    )


TAKE_ATTEMPTS = _method(
    "take_attempts",
    "Count one attempt against each key unless one is at its limit within its window: "
    "{retry_after_s: null, marks} when counted, {retry_after_s} (seconds) when refused",
    TakeAttemptsArgs,
    answer=TakeAttemptsAnswer,
    raises=(InvalidRequest,),
)
SETTLE_ATTEMPTS = _method(
    "settle_attempts",
    "Attempts that did not count after all (`cancel`: marks of take_attempts) and keys whose "
    "count starts again (`clear`)",
    SettleAttemptsArgs,
    raises=(InvalidRequest,),
)


# --- methods ------------------------------------------------------------------------------------

# Acting for someone: an unknown actor is Forbidden, bad arguments InvalidRequest.
_ACTING = (Forbidden, InvalidRequest)
_GROUP_CHANGE = (*_ACTING, NotFound)

# Accounts and sessions
AUTHENTICATE = _method(
    "authenticate",
    "The user and roles for a username and password (the same error for both wrong)",
    AuthenticateArgs,
    raises=(AuthenticationFailed,),
)
LOGIN = _method(
    "login",
    "Check the password and open a session: the user and a first refresh token. With "
    "[auth.ldap], a name with no local account signs in through the directory: Forbidden "
    "when its groups may not, ServiceUnavailable when the directory cannot answer",
    LoginArgs,
    raises=(AuthenticationFailed, Forbidden, ServiceUnavailable),
    timeout_s=30.0,  # a directory sign-in may take 3 times [auth.ldap] timeout_s (at most 24 s)
)
REFRESH_SESSION = _method(
    "refresh_session",
    "The next refresh token of a session and its user as they are now (a reused token "
    "revokes the whole session)",
    RefreshArgs,
    raises=(AuthenticationFailed,),
)
LOGOUT = _method("logout", "Close a session: its refresh tokens stop working", LogoutArgs)
# The first run (no admin yet): the one-time set-up link
SETUP_STATE = _method("setup_state", "Whether the first admin is still to be created: {needed}")
ISSUE_SETUP_TOKEN = _method(
    "issue_setup_token",
    "A new one-time set-up token while no admin exists: {token} (null once one exists)",
)
SETUP_ADMIN = _method(
    "setup_admin",
    "Create the first admin with a set-up token and open their session (as login answers); "
    "every set-up token is spent",
    SetupAdminArgs,
    raises=(Forbidden, StateConflict, InvalidRequest, AlreadyExists),
)
# Each user's secret calendar feed address (`calendar_feeds.py`)
CREATE_CALENDAR_FEED = _method(
    "create_calendar_feed",
    "A new calendar-feed token for the actor, shown once: {token}; their old one stops working",
    ActorArgs,
    raises=_ACTING,
)
REVOKE_CALENDAR_FEED = _method(
    "revoke_calendar_feed",
    "Revoke the actor's calendar-feed token: {revoked} (false when there was none)",
    ActorArgs,
    raises=_ACTING,
)
CALENDAR_FEED_STATE = _method(
    "calendar_feed_state",
    "Whether the actor has a calendar-feed token: {exists}",
    ActorArgs,
    raises=_ACTING,
)
CALENDAR_FEED_OWNER = _method(
    "calendar_feed_owner",
    "Whose calendar feed a token opens: {username}; NotFound for an unknown token",
    FeedTokenArgs,
    raises=(NotFound, InvalidRequest),
)
# SSH self-signup (the gateway has the monitor prove the Unix account between the two)
CHECK_SIGNUP = _method(
    "check_signup",
    "Whether an account could be signed up with these fields (before the SSH proof)",
    CheckSignupArgs,
    raises=(InvalidRequest, AlreadyExists, StateConflict),
)
SIGNUP = _method(
    "signup",
    "Create a `user` account (default groups and `groups`) whose Unix account was proven, "
    "and open its session (as login answers)",
    SignupArgs,
    raises=(InvalidRequest, AlreadyExists, NotFound),
)
CONTACTS = _method(
    "contacts",
    "For other services (no actor): e-mail and roles of the known usernames, and every admin",
    ContactsArgs,
)
GET_USER = _method(
    "get_user",
    "One account: the actor's own, or anyone's for admins",
    UserArgs,
    answer=UserSchema,
    raises=(*_ACTING, NotFound),
)
LIST_USERS = _method(
    "list_users",
    "Accounts: whole for admins, usernames and roles for others",
    ActorArgs,
    answer=AccountSchema,
    many=True,
    raises=_ACTING,
)
CREATE_USER = _method(
    "create_user",
    "Create an account (admins); it joins every default group",
    CreateUserArgs,
    answer=UserSchema,
    raises=(*_ACTING, AlreadyExists, NotFound),
)
UPDATE_USER = _method(
    "update_user",
    "Change one's e-mail or password; admins also roles (never the last admin); StateConflict "
    "for a directory account's password",
    UpdateUserArgs,
    answer=UserSchema,
    raises=(*_ACTING, NotFound, StateConflict),
)
# Accounts people run themselves (`password_links.py`, `lifecycle.py`)
INVITE_USER = _method(
    "invite_user",
    "Create an account without a password (admins) and a one-time link to choose it",
    InviteUserArgs,
    answer=PasswordLinkSchema,
    raises=(*_ACTING, AlreadyExists, NotFound),
)
RESET_PASSWORD = _method(
    "reset_password",
    "A new one-time link for a user to choose a password (admins); StateConflict for a "
    "directory account",
    ResetPasswordArgs,
    answer=PasswordLinkSchema,
    raises=(*_ACTING, NotFound, StateConflict),
)
PASSWORD_LINK = _method(
    "password_link",
    "Whose a one-time link is and what for, without using it; Forbidden when not valid",
    PasswordLinkArgs,
    answer=LinkStateSchema,
    raises=(Forbidden, InvalidRequest),
)
USE_PASSWORD_LINK = _method(
    "use_password_link",
    "Choose a password with a one-time link and open a session (as login answers)",
    UsePasswordLinkArgs,
    raises=(Forbidden, InvalidRequest),
)
DEACTIVATE_USER = _method(
    "deactivate_user",
    "Deactivate an account (admins): signed out everywhere, history kept; `free_bookings` "
    "also cancels its reservations that have not started",
    DeactivateUserArgs,
    answer=DeactivatedSchema,
    raises=(*_ACTING, NotFound),
)
ACTIVATE_USER = _method(
    "activate_user",
    "Let a deactivated account sign in again (admins)",
    UserArgs,
    answer=UserSchema,
    raises=(*_ACTING, NotFound),
)
DELETE_USER = _method(
    "delete_user",
    "Delete an account (admins): signed out everywhere; reservations keep its name",
    UserArgs,
    raises=(*_ACTING, NotFound),
)
LIST_GROUPS = _method(
    "list_groups",
    "Groups with their members",
    ActorArgs,
    answer=GroupSchema,
    many=True,
    raises=_ACTING,
)
CREATE_GROUP = _method(
    "create_group",
    "Create a group (admins)",
    CreateGroupArgs,
    answer=GroupSchema,
    raises=(*_ACTING, AlreadyExists),
)
UPDATE_GROUP = _method(
    "update_group",
    "Change a group's description or default flag (admins)",
    UpdateGroupArgs,
    answer=GroupSchema,
    raises=_GROUP_CHANGE,
)
DELETE_GROUP = _method(
    "delete_group",
    "Delete a group (admins); future reservations are re-checked",
    GroupArgs,
    answer=GroupDeletedSchema,
    raises=_GROUP_CHANGE,
)
ADD_GROUP_MEMBER = _method(
    "add_group_member",
    "Add a user to a group (admins); their reservations are re-checked",
    MemberArgs,
    answer=MembershipSchema,
    raises=_GROUP_CHANGE,
)
REMOVE_GROUP_MEMBER = _method(
    "remove_group_member",
    "Remove a user from a group (admins); their reservations are re-checked",
    MemberArgs,
    answer=MembershipSchema,
    raises=_GROUP_CHANGE,
)

METHODS = (
    AUTHENTICATE,
    LOGIN,
    REFRESH_SESSION,
    LOGOUT,
    SETUP_STATE,
    ISSUE_SETUP_TOKEN,
    SETUP_ADMIN,
    CREATE_CALENDAR_FEED,
    REVOKE_CALENDAR_FEED,
    CALENDAR_FEED_STATE,
    CALENDAR_FEED_OWNER,
    CHECK_SIGNUP,
    SIGNUP,
    TAKE_ATTEMPTS,
    SETTLE_ATTEMPTS,
    CONTACTS,
    GET_USER,
    LIST_USERS,
    CREATE_USER,
    UPDATE_USER,
    INVITE_USER,
    RESET_PASSWORD,
    PASSWORD_LINK,
    USE_PASSWORD_LINK,
    DEACTIVATE_USER,
    ACTIVATE_USER,
    DELETE_USER,
    LIST_GROUPS,
    CREATE_GROUP,
    UPDATE_GROUP,
    DELETE_GROUP,
    ADD_GROUP_MEMBER,
    REMOVE_GROUP_MEMBER,
)
