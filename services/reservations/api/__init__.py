"""The reservations service's public call contract: its RPC methods, their arguments and
answers, and the errors they raise. The gateway, the CLI and the other services call it through
this package alone (see `services.shared.rpc`); its schemas are in `arguments.py` and
`answers.py`. The service also serves the accounts' methods (users, groups, sessions, sign-in,
set-up, calendar feeds, attempts): they are declared in `services.accounts.api`.

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

from services.reservations.api.answers import (
    AccessChangeSchema,
    CalendarItemSchema,
    CreatedReservationSchema,
    GpuRefSchema,
    GpuSchema,
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
)
from services.reservations.api.arguments import (
    DAY_NAMES,
    FULL_DAY_NAMES,
    ActiveArgs,
    CalendarArgs,
    CancelReservationArgs,
    CreateReservationArgs,
    FindSlotArgs,
    GetReservationArgs,
    ListRulesArgs,
    OverviewArgs,
    ReservationIdArgs,
    RuleArgs,
    RuleIdArgs,
    UpdateReservationArgs,
    UpdateRuleArgs,
    UseArgs,
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
from services.reservations.api.maintenance import (
    CREATE_MAINTENANCE,
    END_MAINTENANCE,
    LIST_MAINTENANCE,
    CreatedMaintenanceSchema,
    CreateMaintenanceArgs,
    MaintenanceSchema,
)
from services.shared.bus import Bus
from services.shared.errors import (
    Forbidden,
    InvalidRequest,
    NotAllowed,
    NotFound,
    ReservationConflict,
    ServiceUnavailable,
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
    IDLE_NOTICES,
    KEEP_RESERVATION,
    RELEASE_RESERVATION,
    IDLE_LINK,
    ANSWER_IDLE_LINK,
    IDLE_STATS,
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
    CREATE_MAINTENANCE,
    LIST_MAINTENANCE,
    END_MAINTENANCE,
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
    "ANSWER_IDLE_LINK",
    "CALENDAR",
    "CANCEL_RESERVATION",
    "CHECK_USE",
    "CREATE_MAINTENANCE",
    "CREATE_RESERVATION",
    "CREATE_RULE",
    "DAY_NAMES",
    "DELETE_RULE",
    "END_MAINTENANCE",
    "END_RESERVATION",
    "FIND_SLOT",
    "FULL_DAY_NAMES",
    "GET_RESERVATION",
    "IDLE_LINK",
    "IDLE_NOTICES",
    "IDLE_STATS",
    "KEEP_RESERVATION",
    "LIST_GPUS",
    "LIST_MAINTENANCE",
    "LIST_RULES",
    "MAX_RANGE",
    "METHODS",
    "OVERVIEW",
    "RELEASE_RESERVATION",
    "RESERVATIONS_AHEAD",
    "SERVICE",
    "UPDATE_RESERVATION",
    "UPDATE_RULE",
    "USAGE_REPORT",
    "AccessChangeSchema",
    "ActiveArgs",
    "CalendarArgs",
    "CalendarItemSchema",
    "CancelReservationArgs",
    "CreateMaintenanceArgs",
    "CreateReservationArgs",
    "CreatedMaintenanceSchema",
    "CreatedReservationSchema",
    "FindSlotArgs",
    "GetReservationArgs",
    "GpuRefSchema",
    "GpuSchema",
    "IdleAnswerSchema",
    "IdleLinkSchema",
    "IdleNoticeSchema",
    "IdleStatsSchema",
    "ListRulesArgs",
    "MaintenanceSchema",
    "OverviewArgs",
    "OverviewGpuSchema",
    "OverviewHostSchema",
    "OverviewSchema",
    "ReservationIdArgs",
    "ReservationSchema",
    "RuleArgs",
    "RuleChangedSchema",
    "RuleDeletedSchema",
    "RuleIdArgs",
    "RuleSchema",
    "RuleWindowSchema",
    "RunSchema",
    "SlotGpuSchema",
    "SlotSchema",
    "UpdateReservationArgs",
    "UpdateRuleArgs",
    "UsageSchema",
    "UseArgs",
    "WindowArgs",
    "day_index",
    "fetch_calendar",
]
