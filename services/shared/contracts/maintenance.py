"""The events of maintenance windows, published by the reservations service: an admin drained a
host or some of its GPUs for a window (with the bookings it overlapped and what became of
them), and a window was ended early or removed before it began."""

from __future__ import annotations

from marshmallow import fields, validate

from services.shared.contracts.reservations import GpuRef
from services.shared.contracts.schema import Integer, NonEmpty, Str, Strict
from services.shared.contracts.validation import EventType


class MaintenanceData(Strict):
    """A maintenance window: `gpus` null drains every GPU of the host; `end` null: until an
    admin ends it."""

    id = Integer(required=True)
    host = Str(required=True, validate=NonEmpty)
    gpus = fields.List(Integer(), required=True, allow_none=True)
    target = Str(required=True)  # host, or host:0,1
    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True, allow_none=True)
    reason = Str(required=True)
    bookings = Str(required=True, validate=validate.OneOf(("keep", "cancel", "move")))
    # True: the jobs service stops the jobs running on the drained GPUs when the window begins.
    stop_jobs = fields.Boolean(required=True)
    created_by = Str(required=True)
    created_at = fields.AwareDateTime(required=True)
    ended_by = Str(required=True, allow_none=True)
    status = Str(
        required=True, validate=validate.OneOf(("scheduled", "active", "ended", "removed"))
    )


class Alternative(Strict):
    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True)
    gpus = fields.List(fields.Nested(GpuRef), required=True)
    why = Str(allow_none=True)  # why those GPUs (the best connected, ...), as find-slot says


class Affected(Strict):
    """A booking the window overlapped: kept (the default), or what the admin chose."""

    reservation_id = Integer(required=True)
    owner = Str(required=True, validate=NonEmpty)
    title = Str(required=True)
    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True)
    outcome = Str(
        required=True,
        validate=validate.OneOf(("kept", "cancelled", "shortened", "ended", "moved", "not_moved")),
    )
    # The earliest slot its owner may book instead (as many GPUs, as long), if any.
    alternative = fields.Nested(Alternative, required=True, allow_none=True)
    moved_to = Integer(required=True, allow_none=True)


class MaintenanceScheduled(MaintenanceData):
    affected = fields.List(fields.Nested(Affected), required=True)


EVENTS: tuple[EventType, ...] = (
    EventType(
        "maintenance.scheduled",
        1,
        "reservations",
        MaintenanceScheduled,
        "An admin drained a host or some of its GPUs for a window (now or later) with a "
        "reason: no booking is made in it; lists the bookings it overlapped and what became of "
        "them (their owners are told).",
    ),
    EventType(
        "maintenance.ended",
        1,
        "reservations",
        MaintenanceData,
        "A maintenance window was ended early by an admin (status ended), or removed before it "
        "began (status removed).",
    ),
)
