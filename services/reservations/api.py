"""The reservations service's public call contract: its RPC methods, their arguments and
answers, and the errors they raise. The gateway, the CLI and the other services call it through
this module alone (see `services.shared.rpc`).

Every method that acts for someone takes `actor`: the username the gateway authenticated. The
service looks the actor up itself (roles come from the database, not from a token) and decides
what they may do. Times are ISO-8601 with an offset.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

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
)
from services.shared.rpc import Answer, Method

SERVICE = "reservations"

_Str = fields.String
_Time = fields.AwareDateTime


# --- arguments ----------------------------------------------------------------------------------

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class _Args(Schema):
    actor = _Str(required=True, validate=validate.Length(min=1))


_GPU_REF = _Str(validate=validate.Length(min=1, max=128))
_USERNAME = _Str(validate=validate.Length(min=1, max=64))


class CreateReservationArgs(_Args):
    owner = _Str(
        validate=validate.Length(min=1, max=64),
        metadata={"description": "admins only: book for someone else"},
    )
    gpus = fields.List(
        _GPU_REF,
        required=True,
        validate=validate.Length(min=1, max=1024),
        metadata={"description": "GPU uuids (the REST API also takes host:index, e.g. dgx1:0)"},
    )
    start = _Time(required=True)
    end = _Time(required=True)
    title = _Str(required=True, validate=validate.Length(min=1, max=200))
    description = _Str(load_default="", validate=validate.Length(max=5000))
    guests = fields.List(_USERNAME, load_default=list)


class ReservationIdArgs(_Args):
    id = fields.Integer(required=True, strict=True)


class UpdateReservationArgs(ReservationIdArgs):
    # What is left out stays as it is.
    title = _Str(validate=validate.Length(min=1, max=200))
    description = _Str(validate=validate.Length(max=5000))
    start = _Time()
    end = _Time()
    guests = fields.List(_USERNAME, metadata={"description": "replaces the list ([]: none)"})


class CancelReservationArgs(ReservationIdArgs):
    reason = _Str(load_default="", validate=validate.Length(max=500))


class GetReservationArgs(Schema):
    id = fields.Integer(required=True, strict=True)


class CalendarArgs(Schema):
    start = _Time(required=True)
    end = _Time(required=True)
    gpus = fields.List(_Str(), load_default=None)
    owner = _Str(load_default=None)
    include_cancelled = fields.Boolean(load_default=False)


class OverviewArgs(_Args):
    start = _Time(required=True)
    end = _Time(required=True)
    slot_minutes = fields.Integer(load_default=30, validate=validate.OneOf((30, 60)))
    gpus = fields.List(_Str(), load_default=None)


class FindSlotArgs(_Args):
    count = fields.Integer(required=True, validate=validate.Range(min=1, max=1024))
    duration_minutes = fields.Integer(required=True, validate=validate.Range(min=1))
    not_before = _Time(load_default=None)
    host = _Str(load_default=None)
    gpu_model = _Str(load_default=None)
    same_host = fields.Boolean(load_default=False)


class ActiveArgs(Schema):
    at = _Time(load_default=None)
    gpus = fields.List(_Str(), load_default=None)
    host = _Str(load_default=None)


class UseArgs(Schema):
    user = _Str(required=True, validate=validate.Length(min=1))
    gpus = fields.List(_Str(), required=True, validate=validate.Length(min=1, max=1024))
    start = _Time(required=True)
    end = _Time(required=True)

    @validates_schema
    def ordered(self, data: dict[str, Any], **_: Any) -> None:
        if data["end"] <= data["start"]:
            raise ValidationError("must be after start", "end")


class WindowArgs(Schema):
    days = fields.List(fields.Raw(), required=True, validate=validate.Length(min=1))
    start = _Str(required=True, validate=validate.Regexp(r"^([01]\d|2[0-3]):[0-5]\d$"))
    end = _Str(required=True, validate=validate.Regexp(r"^([01]\d|2[0-3]):[0-5]\d$|^24:00$"))

    @validates_schema
    def known_days(self, data: dict[str, Any], **_: Any) -> None:
        for day in data["days"]:
            if not (
                (isinstance(day, int) and not isinstance(day, bool) and 0 <= day <= 6)
                or (isinstance(day, str) and day_index(day) is not None)
            ):
                raise ValidationError(
                    f"{day!r} is not a day: 0 (Monday) to 6 (Sunday), or mon..sun", "days"
                )


_Name = _Str(validate=validate.Length(min=1, max=255))
# Limits fit the 32-bit columns; times stay where datetime arithmetic cannot overflow.
_MAX_INT = 2**31 - 1
_SANE_TIME = validate.Range(
    min=datetime(1970, 1, 1, tzinfo=UTC), max=datetime(9000, 1, 1, tzinfo=UTC)
)


class RuleArgs(_Args):
    name = _Str(required=True, validate=validate.Length(min=1, max=128))
    description = _Str(load_default="", validate=validate.Length(max=500))
    users = fields.List(_Name, load_default=list)
    groups = fields.List(_Name, load_default=list)
    all_gpus = fields.Boolean(load_default=False)
    hosts = fields.List(_Name, load_default=list)
    gpus = fields.List(_Name, load_default=list)
    valid_from = _Time(load_default=None, validate=_SANE_TIME)
    valid_until = _Time(load_default=None, allow_none=True, validate=_SANE_TIME)
    windows = fields.List(fields.Nested(WindowArgs), load_default=list)
    timezone = _Str(load_default="UTC")
    max_gpus = fields.Integer(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=_MAX_INT)
    )
    max_duration_s = fields.Integer(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=_MAX_INT)
    )
    max_gpu_hours_per_week = fields.Float(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=1e9)
    )


class UpdateRuleArgs(RuleArgs):
    id = fields.Integer(required=True, strict=True)


class ListRulesArgs(Schema):
    # Given: an admin sees every rule, anyone else those that apply to them. Left out (other
    # services): every rule.
    actor = _Str(load_default=None, validate=validate.Length(min=1))


class RuleIdArgs(_Args):
    id = fields.Integer(required=True, strict=True)


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


class ContactsArgs(Schema):
    usernames = fields.List(_Str(validate=validate.Length(min=1)), required=True)


class UserArgs(_Args):
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


class GroupArgs(_Args):
    name = _Str(required=True)


class CreateGroupArgs(GroupArgs):
    description = _Str(load_default="")
    is_default = fields.Boolean(load_default=False)


class UpdateGroupArgs(GroupArgs):
    description = _Str(load_default=None)
    is_default = fields.Boolean(load_default=None, allow_none=True)


class MemberArgs(GroupArgs):
    username = _Str(required=True)


FULL_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def day_index(name: str) -> int | None:
    """mon..sun or monday..sunday (any case); anything else is not a day."""
    text = name.lower()
    for index, (short, full) in enumerate(zip(DAY_NAMES, FULL_DAY_NAMES, strict=True)):
        if text in (short, full):
            return index
    return None


# --- answers ------------------------------------------------------------------------------------


class UserSchema(Answer):
    username = fields.String(required=True)
    email = fields.String(required=True)
    roles = fields.List(fields.String(), required=True)
    groups = fields.List(fields.String(), required=True)
    created_at = fields.AwareDateTime(required=True)


class AccountSchema(Answer):
    """A user in the list: admins see the whole account, others the username and roles."""

    username = _Str(required=True)
    roles = fields.List(_Str(), required=True)
    email = _Str(metadata={"description": "admins only"})
    groups = fields.List(_Str(), metadata={"description": "admins only"})
    created_at = _Time(metadata={"description": "admins only"})


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


class RuleWindowSchema(Answer):
    days = fields.List(fields.Integer(), required=True, metadata={"description": "0 = Monday"})
    start = _Str(required=True, metadata={"example": "08:00"})
    end = _Str(required=True, metadata={"example": "18:00"})


class RuleSchema(Answer):
    id = fields.Integer(required=True)
    name = _Str(required=True)
    description = _Str(required=True)
    users = fields.List(_Str(), required=True)
    groups = fields.List(_Str(), required=True)
    all_gpus = fields.Boolean(required=True)
    hosts = fields.List(_Str(), required=True)
    gpus = fields.List(_Str(), required=True)
    valid_from = _Time(required=True)
    valid_until = _Time(required=True, allow_none=True)
    windows = fields.List(fields.Nested(RuleWindowSchema), required=True)
    timezone = _Str(required=True)
    max_gpus = fields.Integer(required=True, allow_none=True)
    max_duration_s = fields.Integer(required=True, allow_none=True)
    max_gpu_hours_per_week = fields.Float(required=True, allow_none=True)
    created_by = _Str()
    created_at = _Time()
    updated_at = _Time()


class RuleDeletedSchema(AccessChangeSchema):
    id = fields.Integer(required=True)


class GpuRefSchema(Answer):
    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True, allow_none=True)
    name = _Str()


class UsageSchema(Answer):
    samples = fields.Integer(required=True)
    avg_utilization_percent = fields.Float(allow_none=True)
    peak_utilization_percent = fields.Float(allow_none=True)
    avg_memory_used_mib = fields.Float(allow_none=True)
    peak_memory_used_mib = fields.Float(allow_none=True)
    idle_share = fields.Float(allow_none=True)


class ReservationSchema(Answer):
    id = fields.Integer(required=True)
    owner = _Str(required=True)
    gpus = fields.List(fields.Nested(GpuRefSchema), required=True)
    start = _Time(required=True)
    end = _Time(required=True)
    title = _Str(required=True)
    description = _Str(
        required=True, metadata={"description": "empty unless you own, share or administer it"}
    )
    status = _Str(required=True, metadata={"description": "active, cancelled or ended"})
    guests = fields.List(_Str(), required=True)
    created_by = _Str(required=True)
    cancelled_at = _Time(allow_none=True)
    cancelled_by = _Str(allow_none=True)
    cancel_reason = _Str(allow_none=True)
    created_at = _Time()
    updated_at = _Time()
    usage = fields.Nested(UsageSchema, allow_none=True)


class CalendarItemSchema(Answer):
    id = fields.Integer(required=True)
    owner = _Str(required=True)
    gpus = fields.List(fields.Nested(GpuRefSchema), required=True)
    start = _Time(required=True)
    end = _Time(required=True)
    title = _Str(required=True)
    description = _Str(required=True)
    status = _Str(required=True)
    guests = fields.List(_Str(), required=True)
    created_by = _Str(required=True)
    cancelled_at = _Time(allow_none=True)
    cancelled_by = _Str(allow_none=True)
    cancel_reason = _Str(allow_none=True)
    updated_at = _Time(allow_none=True)


class RunSchema(Answer):
    state = _Str(required=True, metadata={"description": "free, mine, taken or not_allowed"})


class OverviewGpuSchema(Answer):
    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True, allow_none=True)
    runs = fields.List(fields.Nested(RunSchema), required=True)


class OverviewHostSchema(Answer):
    host = _Str(required=True)
    gpus = fields.List(fields.Nested(OverviewGpuSchema), required=True)


class OverviewSchema(Answer):
    start = _Time(required=True)
    end = _Time(required=True)
    slot_minutes = fields.Float(required=True)
    slots = fields.Integer(required=True)
    hosts = fields.List(fields.Nested(OverviewHostSchema), required=True)


class SlotGpuSchema(Answer):
    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True, allow_none=True)


class SlotSchema(Answer):
    start = _Time(required=True)
    end = _Time(required=True)
    gpus = fields.List(fields.Nested(SlotGpuSchema), required=True)


class GpuSchema(Answer):
    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True, allow_none=True)
    name = _Str(required=True)
    memory_total_mib = fields.Integer(allow_none=True)
    present = fields.Boolean(required=True)


# --- methods ------------------------------------------------------------------------------------

# Acting for someone: an unknown actor is Forbidden, bad arguments InvalidRequest.
_ACTING = (Forbidden, InvalidRequest)
_RULE_CHANGE = (*_ACTING, NotFound)
_BOOKING = (*_ACTING, NotFound, ReservationConflict, NotAllowed)


def _method(name: str, summary: str, args: type[Schema] | None = None, **more: Any) -> Method:
    return Method(SERVICE, name, summary, args, **more)


# Accounts and sessions
AUTHENTICATE = _method(
    "authenticate",
    "The user and roles for a username and password (the same error for both wrong)",
    AuthenticateArgs,
    raises=(AuthenticationFailed,),
)
LOGIN = _method(
    "login",
    "Check the password and open a session: the user and a first refresh token",
    LoginArgs,
    raises=(AuthenticationFailed,),
)
REFRESH_SESSION = _method(
    "refresh_session",
    "The next refresh token of a session and its user as they are now (a reused token "
    "revokes the whole session)",
    RefreshArgs,
    raises=(AuthenticationFailed,),
)
LOGOUT = _method("logout", "Close a session: its refresh tokens stop working", LogoutArgs)
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
    _Args,
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
    _Args,
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
    answer=RuleSchema,
    raises=_RULE_CHANGE,
)
UPDATE_RULE = _method(
    "update_rule",
    "Replace an access rule (admins); future reservations are re-checked",
    UpdateRuleArgs,
    answer=RuleSchema,
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
    answer=ReservationSchema,
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

METHODS = (
    AUTHENTICATE,
    LOGIN,
    REFRESH_SESSION,
    LOGOUT,
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
