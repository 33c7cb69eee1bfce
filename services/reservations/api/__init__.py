"""The reservations service's public call contract: its RPC methods, their arguments and
answers, and the errors they raise. The gateway, the CLI and the other services call it through
this package alone (see `services.shared.rpc`); its schemas are in `arguments.py` and
`answers.py`.

Every method that acts for someone takes `actor`: the username the gateway authenticated. The
service looks the actor up itself (roles come from the database, not from a token) and decides
what they may do. Times are ISO-8601 with an offset.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from marshmallow import fields

from services.accounts.attempts_api import SETTLE_ATTEMPTS, TAKE_ATTEMPTS
from services.reservations.api.answers import (
    AccessChangeSchema,
    AccountSchema,
    CalendarItemSchema,
    CreatedReservationSchema,
    GpuRefSchema,
    GpuSchema,
    GroupDeletedSchema,
    GroupSchema,
    MembershipSchema,
    OverviewGpuSchema,
    OverviewHostSchema,
    OverviewSchema,
    ReservationSchema,
    RuleChangedSchema,
    RuleDeletedSchema,
    RuleSchema,
    RuleWindowSchema,
    RunSchema,
    SlotGpuSchema,
    SlotSchema,
    UsageSchema,
    UserSchema,
)
from services.reservations.api.arguments import (
    DAY_NAMES,
    FULL_DAY_NAMES,
    ActiveArgs,
    ActorArgs,
    AuthenticateArgs,
    CalendarArgs,
    CancelReservationArgs,
    CheckSignupArgs,
    ContactsArgs,
    CreateGroupArgs,
    CreateReservationArgs,
    CreateUserArgs,
    FeedTokenArgs,
    FindSlotArgs,
    GetReservationArgs,
    GroupArgs,
    ListRulesArgs,
    LoginArgs,
    LogoutArgs,
    MemberArgs,
    OverviewArgs,
    RefreshArgs,
    ReservationIdArgs,
    RuleArgs,
    RuleIdArgs,
    SetupAdminArgs,
    SignupArgs,
    UpdateGroupArgs,
    UpdateReservationArgs,
    UpdateRuleArgs,
    UpdateUserArgs,
    UseArgs,
    UserArgs,
    WindowArgs,
    day_index,
)
from services.reservations.api.idle import (
    ANSWER_IDLE_LINK,
    IDLE_LINK,
    IDLE_NOTICES,
    IDLE_STATS,
    KEEP_RESERVATION,
    RELEASE_RESERVATION,
    IdleAnswerSchema,
    IdleLinkSchema,
    IdleNoticeSchema,
    IdleStatsSchema,
)
from services.shared.bus import Bus
from services.shared.errors import (
    AlreadyExists,
    AuthenticationFailed,
    Forbidden,
    InvalidRequest,
    NotAllowed,
    NotFound,
    ReservationConflict,
    ServiceUnavailable,
    StateConflict,
)
from services.shared.rpc import Answer, methods_of
from services.shared.usage_report import FactSchema, PeriodArgs

SERVICE = "reservations"
# The longest range a calendar or overview read may ask for.
MAX_RANGE = timedelta(weeks=8)


# --- methods ------------------------------------------------------------------------------------

# Acting for someone: an unknown actor is Forbidden, bad arguments InvalidRequest.
_ACTING = (Forbidden, InvalidRequest)
_RULE_CHANGE = (*_ACTING, NotFound)
_BOOKING = (*_ACTING, NotFound, ReservationConflict, NotAllowed)


_method = methods_of(SERVICE)


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
    "Change one's e-mail or password; admins also roles (never the last admin)",
    UpdateUserArgs,
    answer=UserSchema,
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
    raises=_RULE_CHANGE,
)
DELETE_GROUP = _method(
    "delete_group",
    "Delete a group (admins); future reservations are re-checked",
    GroupArgs,
    answer=GroupDeletedSchema,
    raises=_RULE_CHANGE,
)
ADD_GROUP_MEMBER = _method(
    "add_group_member",
    "Add a user to a group (admins); their reservations are re-checked",
    MemberArgs,
    answer=MembershipSchema,
    raises=_RULE_CHANGE,
)
REMOVE_GROUP_MEMBER = _method(
    "remove_group_member",
    "Remove a user from a group (admins); their reservations are re-checked",
    MemberArgs,
    answer=MembershipSchema,
    raises=_RULE_CHANGE,
)

# GPUs and access rules
LIST_GPUS = _method("list_gpus", "Every GPU ever discovered", answer=GpuSchema, many=True)
LIST_RULES = _method(
    "list_rules",
    "Access rules: every one for admins and other services, those that apply to the actor "
    "for anyone else",
    ListRulesArgs,
    answer=RuleSchema,
    many=True,
    raises=_ACTING,
)
CREATE_RULE = _method(
    "create_rule",
    "Create an access rule (admins); future reservations are re-checked",
    RuleArgs,
    answer=RuleChangedSchema,
    raises=_RULE_CHANGE,
)
UPDATE_RULE = _method(
    "update_rule",
    "Replace an access rule (admins); future reservations are re-checked",
    UpdateRuleArgs,
    answer=RuleChangedSchema,
    raises=_RULE_CHANGE,
)
DELETE_RULE = _method(
    "delete_rule",
    "Delete an access rule (admins); future reservations are re-checked",
    RuleIdArgs,
    answer=RuleDeletedSchema,
    raises=_RULE_CHANGE,
)

# Reservations
CREATE_RESERVATION = _method(
    "create_reservation",
    "Reserve GPUs (all or nothing); refusals say why in data",
    CreateReservationArgs,
    answer=CreatedReservationSchema,
    raises=_BOOKING,
)
GET_RESERVATION = _method(
    "get_reservation",
    "One reservation with its usage",
    GetReservationArgs,
    answer=ReservationSchema,
    raises=(InvalidRequest, NotFound),
)
UPDATE_RESERVATION = _method(
    "update_reservation",
    "Edit title, description, times or guests",
    UpdateReservationArgs,
    answer=ReservationSchema,
    raises=_BOOKING,
)
CANCEL_RESERVATION = _method(
    "cancel_reservation",
    "Cancel a reservation",
    CancelReservationArgs,
    answer=ReservationSchema,
    raises=(*_ACTING, NotFound),
)
END_RESERVATION = _method(
    "end_reservation",
    "End a running reservation now",
    ReservationIdArgs,
    answer=ReservationSchema,
    raises=(*_ACTING, NotFound),
)
CALENDAR = _method(
    "calendar",
    "Reservations overlapping a range (all of them: nothing hidden)",
    CalendarArgs,
    answer=CalendarItemSchema,
    many=True,
    raises=(InvalidRequest,),
)
OVERVIEW = _method(
    "overview",
    "Per GPU, runs of free / mine / taken / not allowed slots",
    OverviewArgs,
    answer=OverviewSchema,
    raises=_ACTING,
)
FIND_SLOT = _method(
    "find_slot",
    "The earliest slot where the actor may reserve N GPUs",
    FindSlotArgs,
    answer=SlotSchema,
    raises=_ACTING,
)
ACTIVE_RESERVATIONS = _method(
    "active_reservations",
    "Per GPU, the reservation holding it at a moment (default: now)",
    ActiveArgs,
    raises=(InvalidRequest,),
)
CHECK_USE = _method(
    "check_use",
    "May a user run on these GPUs over a range without reserving them? (jobs)",
    UseArgs,
    raises=(InvalidRequest,),
)


class UsageReportSchema(Answer):
    facts = fields.List(fields.Nested(FactSchema), required=True)
    gpus = fields.List(
        fields.Dict(), required=True, metadata={"description": "uuid, host, index, model"}
    )
    groups = fields.List(fields.Dict(), required=True, metadata={"description": "user, groups"})


USAGE_REPORT = _method(
    "usage_report",
    "GPU-hours reserved, used and idle per owner and GPU over a period; the GPUs; the groups",
    PeriodArgs,
    answer=UsageReportSchema,
    raises=(InvalidRequest,),
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
    IDLE_NOTICES,
    KEEP_RESERVATION,
    RELEASE_RESERVATION,
    IDLE_LINK,
    ANSWER_IDLE_LINK,
    IDLE_STATS,
    CONTACTS,
    GET_USER,
    LIST_USERS,
    CREATE_USER,
    UPDATE_USER,
    LIST_GROUPS,
    CREATE_GROUP,
    UPDATE_GROUP,
    DELETE_GROUP,
    ADD_GROUP_MEMBER,
    REMOVE_GROUP_MEMBER,
    LIST_GPUS,
    LIST_RULES,
    CREATE_RULE,
    UPDATE_RULE,
    DELETE_RULE,
    CREATE_RESERVATION,
    GET_RESERVATION,
    UPDATE_RESERVATION,
    CANCEL_RESERVATION,
    END_RESERVATION,
    CALENDAR,
    OVERVIEW,
    FIND_SLOT,
    ACTIVE_RESERVATIONS,
    CHECK_USE,
    USAGE_REPORT,
)


# --- clients ------------------------------------------------------------------------------------

# Reservations are at most days long; this reaches every one that holds a GPU now or soon.
RESERVATIONS_AHEAD = timedelta(weeks=8)


async def fetch_calendar(
    bus: Bus, log: logging.Logger, retry_max_s: float = 30.0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(current and coming reservations, every GPU), for services that keep their own copy
    (`services.shared.reservation_book`) from `reservation.*` events afterwards; asks again,
    backing off, until the service answers (it may start after the caller)."""
    delay, warned = 1.0, False
    while True:
        now = datetime.now(UTC)
        try:
            window = {"start": now.isoformat(), "end": (now + RESERVATIONS_AHEAD).isoformat()}
            found = await CALENDAR.call(bus, window)
            gpus = await LIST_GPUS.call(bus)
        except ServiceUnavailable as err:
            if not warned:
                log.warning("reservations not loaded (%s); retrying", err.message)
                warned = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, retry_max_s)
            continue
        return found, gpus


__all__ = [
    "ACTIVE_RESERVATIONS",
    "ADD_GROUP_MEMBER",
    "ANSWER_IDLE_LINK",
    "AUTHENTICATE",
    "CALENDAR",
    "CALENDAR_FEED_OWNER",
    "CALENDAR_FEED_STATE",
    "CANCEL_RESERVATION",
    "CHECK_SIGNUP",
    "CHECK_USE",
    "CONTACTS",
    "CREATE_CALENDAR_FEED",
    "CREATE_GROUP",
    "CREATE_RESERVATION",
    "CREATE_RULE",
    "CREATE_USER",
    "DAY_NAMES",
    "DELETE_GROUP",
    "DELETE_RULE",
    "END_RESERVATION",
    "FIND_SLOT",
    "FULL_DAY_NAMES",
    "GET_RESERVATION",
    "GET_USER",
    "IDLE_LINK",
    "IDLE_NOTICES",
    "IDLE_STATS",
    "ISSUE_SETUP_TOKEN",
    "KEEP_RESERVATION",
    "LIST_GPUS",
    "LIST_GROUPS",
    "LIST_RULES",
    "LIST_USERS",
    "LOGIN",
    "LOGOUT",
    "MAX_RANGE",
    "METHODS",
    "OVERVIEW",
    "REFRESH_SESSION",
    "RELEASE_RESERVATION",
    "REMOVE_GROUP_MEMBER",
    "RESERVATIONS_AHEAD",
    "REVOKE_CALENDAR_FEED",
    "SERVICE",
    "SETTLE_ATTEMPTS",
    "SETUP_ADMIN",
    "SETUP_STATE",
    "SIGNUP",
    "TAKE_ATTEMPTS",
    "UPDATE_GROUP",
    "UPDATE_RESERVATION",
    "UPDATE_RULE",
    "UPDATE_USER",
    "USAGE_REPORT",
    "AccessChangeSchema",
    "AccountSchema",
    "ActiveArgs",
    "AuthenticateArgs",
    "CalendarArgs",
    "CalendarItemSchema",
    "CancelReservationArgs",
    "ContactsArgs",
    "CreateGroupArgs",
    "CreateReservationArgs",
    "CreateUserArgs",
    "CreatedReservationSchema",
    "FindSlotArgs",
    "GetReservationArgs",
    "GpuRefSchema",
    "GpuSchema",
    "GroupArgs",
    "GroupDeletedSchema",
    "GroupSchema",
    "IdleAnswerSchema",
    "IdleLinkSchema",
    "IdleNoticeSchema",
    "IdleStatsSchema",
    "ListRulesArgs",
    "LoginArgs",
    "LogoutArgs",
    "MemberArgs",
    "MembershipSchema",
    "OverviewArgs",
    "OverviewGpuSchema",
    "OverviewHostSchema",
    "OverviewSchema",
    "RefreshArgs",
    "ReservationIdArgs",
    "ReservationSchema",
    "RuleArgs",
    "RuleChangedSchema",
    "RuleDeletedSchema",
    "RuleIdArgs",
    "RuleSchema",
    "RuleWindowSchema",
    "RunSchema",
    "SetupAdminArgs",
    "SlotGpuSchema",
    "SlotSchema",
    "UpdateGroupArgs",
    "UpdateReservationArgs",
    "UpdateRuleArgs",
    "UpdateUserArgs",
    "UsageSchema",
    "UseArgs",
    "UserArgs",
    "UserSchema",
    "WindowArgs",
    "day_index",
    "fetch_calendar",
]
