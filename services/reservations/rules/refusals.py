"""Pure rules of a reservation request: bounds, who may change what and when, conflicts.

Every function returns refusals as data (`Refusal`), never raises: the caller turns them into
one error that lists every reason, so the UI and CLI can show all of them at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from services.accounts.api import Actor
from services.reservations.rules.domain import Gpu, Refusal
from services.shared.errors import (
    Forbidden,
    InvalidRequest,
    NotAllowed,
    ReservationConflict,
    ValidationFailed,
    WardenError,
)

MAX_TITLE = 100
MAX_DESCRIPTION = 4000
# How far in the past a new reservation may start (the request took a moment to arrive).
START_GRACE = timedelta(minutes=1)


@dataclass(frozen=True)
class DurationBounds:
    shortest: timedelta = timedelta(minutes=30)
    longest: timedelta = timedelta(days=8)


@dataclass(frozen=True)
class Current:
    """What the permission rules need to know about an existing reservation."""

    owner: str
    start: datetime
    end: datetime
    status: str


@dataclass(frozen=True)
class Clash:
    """A GPU of the request already held by another active reservation."""

    gpu_uuid: str
    reservation_id: int
    owner: str
    start: datetime
    end: datetime


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _gpu_name(uuid: str, gpus: Mapping[str, Gpu]) -> str:
    gpu = gpus.get(uuid)
    return f"GPU {gpu.host}:{gpu.index}" if gpu else f"GPU {uuid}"


def text_refusals(title: str | None, description: str | None) -> list[Refusal]:
    found = []
    if title is not None and not 1 <= len(title.strip()) <= MAX_TITLE:
        found.append(
            Refusal("invalid", f"the title must be 1 to {MAX_TITLE} characters", {"field": "title"})
        )
    if description is not None and len(description) > MAX_DESCRIPTION:
        found.append(
            Refusal(
                "invalid",
                f"the description must be at most {MAX_DESCRIPTION} characters",
                {"field": "description"},
            )
        )
    return found


def guest_refusals(owner: str, guests: Sequence[str] | None) -> list[Refusal]:
    """Guests share the GPUs with the owner, who is never one of them (None: unchanged)."""
    if guests is not None and owner in guests:
        return [
            Refusal(
                "invalid",
                f"{owner} owns the reservation and cannot also be its guest",
                {"field": "guests", "username": owner},
            )
        ]
    return []


def interval_refusals(
    start: datetime, end: datetime, bounds: DurationBounds, now: datetime, *, new_start: bool
) -> list[Refusal]:
    """Times of a new or changed reservation; `new_start`: the start is being set now."""
    if end <= start:
        return [Refusal("invalid", "the end must be after the start", {"field": "end"})]
    found = []
    if new_start and start < now - START_GRACE:
        found.append(
            Refusal("invalid", "a reservation cannot start in the past", {"field": "start"})
        )
    if end - start < bounds.shortest:
        found.append(
            Refusal(
                "invalid",
                f"a reservation lasts at least {_span(bounds.shortest)}",
                {"field": "end", "min_duration_s": bounds.shortest.total_seconds()},
            )
        )
    if end - start > bounds.longest:
        found.append(
            Refusal(
                "invalid",
                f"a reservation lasts at most {_span(bounds.longest)}",
                {"field": "end", "max_duration_s": bounds.longest.total_seconds()},
            )
        )
    return found


def _span(duration: timedelta) -> str:
    minutes = int(duration.total_seconds() // 60)
    if minutes % (24 * 60) == 0:
        return f"{minutes // (24 * 60)} days"
    if minutes % 60 == 0:
        return f"{minutes // 60} hours"
    return f"{minutes} minutes"


def conflict_refusals(clashes: Sequence[Clash], gpus: Mapping[str, Gpu]) -> list[Refusal]:
    return [
        Refusal(
            "conflict",
            f"{_gpu_name(c.gpu_uuid, gpus)} is reserved by {c.owner} from {_when(c.start)} "
            f"to {_when(c.end)} (reservation {c.reservation_id})",
            {
                "gpu": c.gpu_uuid,
                "host": gpus[c.gpu_uuid].host if c.gpu_uuid in gpus else None,
                "index": gpus[c.gpu_uuid].index if c.gpu_uuid in gpus else None,
                "reservation_id": c.reservation_id,
                "owner": c.owner,
                "start": c.start.isoformat(),
                "end": c.end.isoformat(),
            },
        )
        for c in sorted(clashes, key=lambda c: (c.start, c.gpu_uuid))
    ]


def removed_host_refusals(gpus: Iterable[Gpu], offered: Callable[[str], bool]) -> list[Refusal]:
    """A new booking of a GPU whose host left the monitor's inventory (`offered` says which
    hosts are in it): refused until the host is added again; its reservations stay."""
    return [
        Refusal(
            "not_offered",
            f"GPU {gpu.host}:{gpu.index} is not offered: {gpu.host} was removed from the "
            "hosts Warden watches (an admin can add it again)",
            {"field": "gpus", "gpu": gpu.uuid, "host": gpu.host, "index": gpu.index},
        )
        for gpu in sorted(gpus, key=lambda g: (g.host, g.index))
        if not offered(gpu.host)
    ]


def _forbidden(message: str) -> list[Refusal]:
    return [Refusal("forbidden", message)]


def _owner_or_admin(actor: Actor, current: Current) -> list[Refusal]:
    if actor.is_admin or actor.username == current.owner:
        return []
    return _forbidden(f"only {current.owner} or an admin may change this reservation")


def edit_refusals(
    actor: Actor,
    current: Current,
    now: datetime,
    *,
    start: datetime | None,
    end: datetime | None,
) -> list[Refusal]:
    """May `actor` change this reservation's times (title and description: any time)?

    The past is not rewritten, by anyone: a started reservation keeps its start, an ended one
    keeps both; an end may move but not into the past (end an ongoing one with `end_now`).
    """
    found = _owner_or_admin(actor, current)
    if found:
        return found
    if current.status != "active":
        return _forbidden("a cancelled reservation cannot be changed")
    if start is not None and start != current.start:
        if current.start <= now:
            found += _forbidden("the reservation has started: its start can no longer change")
        elif start < now - START_GRACE:
            found += _forbidden("a reservation cannot be moved into the past")
    if end is not None and end != current.end:
        if current.end <= now:
            found += _forbidden("the reservation has ended: its end can no longer change")
        elif end <= now:
            found += _forbidden("the end cannot move into the past (end it now instead)")
    return found


def cancel_refusals(actor: Actor, current: Current, now: datetime) -> list[Refusal]:
    """Owners cancel before the start; admins also while it runs. The past stays."""
    found = _owner_or_admin(actor, current)
    if found:
        return found
    if current.status != "active":
        return _forbidden("the reservation is already cancelled")
    if current.end <= now:
        return _forbidden("the reservation has ended and is kept as it was")
    if current.start <= now and not actor.is_admin:
        return _forbidden("the reservation has started: end it now instead of cancelling it")
    return []


def end_now_refusals(actor: Actor, current: Current, now: datetime) -> list[Refusal]:
    found = _owner_or_admin(actor, current)
    if found:
        return found
    if current.status != "active":
        return _forbidden("the reservation is cancelled")
    if not current.start <= now < current.end:
        return _forbidden("only a reservation that is running can be ended now")
    return []


MAX_REASONS_IN_MESSAGE = 3


def refusal_error(refusals: Sequence[Refusal]) -> WardenError:
    """One error for a list of reasons: the most fundamental kind decides the class."""
    codes = {r.code for r in refusals}
    messages = [r.message for r in refusals]
    message = "; ".join(messages[:MAX_REASONS_IN_MESSAGE])
    if len(messages) > MAX_REASONS_IN_MESSAGE:
        message += f" (and {len(messages) - MAX_REASONS_IN_MESSAGE} more)"
    details = {"reasons": [r.to_dict() for r in refusals]}
    if "forbidden" in codes:
        return Forbidden(message, details)
    if "invalid" in codes:
        return InvalidRequest(message, details)
    if codes & {"not_offered", "mig_split", "gpu_failed"}:  # well-formed, but GPUs that take
        return ValidationFailed(message, details)  # no booking: 422
    if codes <= {"conflict", "maintenance"}:  # taken: by a booking or a drain window
        return ReservationConflict(message, details)
    return NotAllowed(message, details)
