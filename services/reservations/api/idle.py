"""The reservations service's methods for idle reservations given back (`idle/policy.py`,
`idle/watch.py`, `idle/calls.py`); part of its api, re-exported by `__init__`."""

from __future__ import annotations

from services.reservations.api.answers import (
    IdleAnswerSchema,
    IdleLinkSchema,
    IdleNoticeSchema,
    IdleStatsSchema,
)
from services.reservations.api.arguments import (
    ActorArgs,
    FeedTokenArgs,
    IdleAnswerArgs,
    IdleNoticesArgs,
    ReservationIdArgs,
)
from services.shared.errors import Forbidden, InvalidRequest, NotFound, StateConflict
from services.shared.rpc import methods_of

_method = methods_of("reservations")  # the package's SERVICE (not imported: it imports this)
_ACTING = (Forbidden, InvalidRequest)

__all__ = [
    "ANSWER_IDLE_LINK",
    "IDLE_LINK",
    "IDLE_NOTICES",
    "IDLE_STATS",
    "KEEP_RESERVATION",
    "RELEASE_RESERVATION",
    "IdleAnswerSchema",
    "IdleLinkSchema",
    "IdleNoticeSchema",
    "IdleStatsSchema",
]

IDLE_NOTICES = _method(
    "idle_notices",
    "The actor's reservations told idle and not answered yet (everyone's for an admin with all)",
    IdleNoticesArgs,
    answer=IdleNoticeSchema,
    many=True,
    raises=_ACTING,
)
KEEP_RESERVATION = _method(
    "keep_reservation",
    '"I still need it": answer the reservation\'s idle notice, snoozing its idle policy',
    ReservationIdArgs,
    answer=IdleAnswerSchema,
    raises=(*_ACTING, NotFound, StateConflict),
)
RELEASE_RESERVATION = _method(
    "release_reservation",
    '"Release now": answer the reservation\'s idle notice by ending the rest of it',
    ReservationIdArgs,
    answer=IdleAnswerSchema,
    raises=(*_ACTING, NotFound, StateConflict),
)
IDLE_LINK = _method(
    "idle_link",
    "What an idle notice's link is about (reading it does nothing); NotFound for a bad token",
    FeedTokenArgs,
    answer=IdleLinkSchema,
    raises=(NotFound, InvalidRequest),
)
ANSWER_IDLE_LINK = _method(
    "answer_idle_link",
    "Answer an idle notice through its link (once): keep or release; StateConflict when used",
    IdleAnswerArgs,
    answer=IdleAnswerSchema,
    raises=(NotFound, InvalidRequest, StateConflict),
)
IDLE_STATS = _method(
    "idle_stats",
    "Admins: per user, idle notices, keeps and releases",
    ActorArgs,
    answer=IdleStatsSchema,
    many=True,
    raises=_ACTING,
)
