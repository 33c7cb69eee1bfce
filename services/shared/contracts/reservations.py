"""The events the reservations service publishes: reservations, access rules, user accounts."""

from __future__ import annotations

from marshmallow import fields, validate

from services.shared.contracts.schema import Integer, NonEmpty, Number, Str, Strict
from services.shared.contracts.validation import EventType


class GpuRef(Strict):
    uuid = Str(required=True, validate=NonEmpty)
    host = Str(required=True)
    index = Integer(required=True, allow_none=True)


RESERVATION_STATUSES = ("active", "cancelled", "ended")


class ReservationData(Strict):
    """A reservation as every reservation.* event carries it (its state after the change)."""

    id = Integer(required=True)
    owner = Str(required=True, validate=NonEmpty)
    gpus = fields.List(fields.Nested(GpuRef), required=True)
    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True)
    title = Str(required=True)
    description = Str(load_default="")
    status = Str(required=True, validate=validate.OneOf(RESERVATION_STATUSES))
    created_by = Str(required=True)
    cancelled_at = fields.AwareDateTime(allow_none=True, load_default=None)
    cancelled_by = Str(allow_none=True, load_default=None)
    cancel_reason = Str(allow_none=True, load_default=None)
    # Users who may use the reserved GPUs too (a shared booking): never violators.
    guests = fields.List(Str(), load_default=list)
    # When it last changed: copies built from events and answers keep the newest.
    updated_at = fields.AwareDateTime(allow_none=True, load_default=None)


class ReservationUpdated(ReservationData):
    # Names of the fields that changed: title, description, start, end, status (restored).
    changed = fields.List(Str(), required=True)
    actor = Str(required=True)


class ReservationCancelled(ReservationData):
    # True when an access change cancelled it (it is restored if allowed and free again).
    by_rules = fields.Boolean(required=True)


class UsageSummary(Strict):
    samples = Integer(required=True)
    avg_utilization_percent = Number(allow_none=True, load_default=None)
    peak_utilization_percent = Number(allow_none=True, load_default=None)
    avg_memory_used_mib = Number(allow_none=True, load_default=None)
    peak_memory_used_mib = Number(allow_none=True, load_default=None)
    idle_share = Number(allow_none=True, load_default=None)
    first_sample_at = fields.AwareDateTime(allow_none=True, load_default=None)
    last_sample_at = fields.AwareDateTime(allow_none=True, load_default=None)


class ReservationEnded(ReservationData):
    usage = fields.Nested(UsageSummary, allow_none=True, load_default=None)


class ReservationReleasedIdle(ReservationData):
    """The rest of an idle reservation was released (ended early with reason `idle`)."""

    reason = Str(required=True, validate=validate.OneOf(("idle",)))
    # warden: no answer within the grace; owner: "release now" (a link or the UI)
    released_by = Str(required=True, validate=validate.OneOf(("warden", "owner")))
    idle_since = fields.AwareDateTime(allow_none=True, load_default=None)
    notified_at = fields.AwareDateTime(allow_none=True, load_default=None)
    snoozed_until = fields.AwareDateTime(allow_none=True, load_default=None)
    released_at = fields.AwareDateTime(allow_none=True, load_default=None)


class AccessChanged(Strict):
    """Rules or group memberships changed; future reservations were re-checked."""

    cause = Str(required=True)  # rule.created | rule.updated | rule.deleted | group.* | user.*
    rule_id = Integer(allow_none=True, load_default=None)
    group = Str(allow_none=True, load_default=None)
    username = Str(allow_none=True, load_default=None)
    actor = Str(required=True)
    cancelled = fields.List(Integer(), required=True)
    restored = fields.List(Integer(), required=True)


class UserData(Strict):
    """A user account; never the password or its hash."""

    username = Str(required=True, validate=NonEmpty)
    email = Str(required=True)
    roles = fields.List(Str(), required=True)
    groups = fields.List(Str(), required=True)


class UserUpdated(UserData):
    changed = fields.List(Str(), required=True)


class SessionRevoked(Strict):
    """Sign-ins that end: one login's session (`session`), or every session of `username`
    up to `at` (`session` null: the password changed). Access tokens of them stop working."""

    username = Str(required=True, validate=NonEmpty)
    session = Str(allow_none=True, load_default=None)
    at = fields.AwareDateTime(required=True)


EVENTS: tuple[EventType, ...] = (
    EventType(
        "reservation.created",
        1,
        "reservations",
        ReservationData,
        "A reservation was made (all its GPUs at once).",
    ),
    EventType(
        "reservation.updated",
        1,
        "reservations",
        ReservationUpdated,
        "A reservation's title, description or times changed, or it was restored.",
    ),
    EventType(
        "reservation.cancelled",
        1,
        "reservations",
        ReservationCancelled,
        "A reservation was cancelled by a person or by an access change.",
    ),
    EventType(
        "reservation.started",
        1,
        "reservations",
        ReservationData,
        "A reservation's start time came (sent late after a restart, never lost).",
    ),
    EventType(
        "reservation.ended",
        1,
        "reservations",
        ReservationEnded,
        "A reservation's end time came, or it was ended early; carries its final usage.",
    ),
    EventType(
        "reservation.released_idle",
        1,
        "reservations",
        ReservationReleasedIdle,
        "The rest of an idle reservation was released: its owner was told it was idle and did "
        'not answer within the grace, or chose "release now" (reservation.ended follows).',
    ),
    EventType(
        "access.changed",
        1,
        "reservations",
        AccessChanged,
        "Access rules or group memberships changed; lists reservations cancelled or restored.",
    ),
    EventType(
        "user.created",
        1,
        "reservations",
        UserData,
        "An account was created.",
    ),
    EventType(
        "user.updated",
        1,
        "reservations",
        UserUpdated,
        "An account's e-mail, password, roles, groups or status (deactivated, active) changed.",
    ),
    EventType(
        "user.deleted",
        1,
        "reservations",
        UserData,
        "An account was deleted (its reservations keep its name).",
    ),
    EventType(
        "session.revoked",
        1,
        "reservations",
        SessionRevoked,
        "A login's session ended (logout, a reused refresh token), or all of a user's did "
        "(their password changed): gateways refuse their access tokens from now on.",
    ),
)
