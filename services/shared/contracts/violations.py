"""The events the violations service publishes: an incident opened, escalated, resolved."""

from __future__ import annotations

from marshmallow import fields, validate

from services.shared.contracts.schema import Integer, NonEmpty, Number, Str, Strict
from services.shared.contracts.validation import EventType


class OffendingProcess(Strict):
    pid = Integer(required=True, validate=validate.Range(min=0))
    command = Str(required=True)
    # From the host's clock: a handler compares it before signalling, so a pid the kernel
    # gave to another process meanwhile is never killed.
    started_at = fields.AwareDateTime(allow_none=True, load_default=None)
    used_memory_mib = Number(allow_none=True, load_default=None)


VIOLATION_MODES = ("reservations", "strict")


class ViolationContext(Strict):
    """Full context of an incident, carried by every violation.* event."""

    incident_id = Str(required=True, validate=NonEmpty)
    mode = Str(load_default="reservations", validate=validate.OneOf(VIOLATION_MODES))
    host = Str(required=True, validate=NonEmpty)
    gpu_uuid = Str(required=True)
    gpu_index = Integer(required=True, allow_none=True)
    offender = Str(required=True)
    pids = fields.List(Integer(), required=True)
    commands = fields.List(Str(), required=True)
    reservation_id = Integer(allow_none=True, load_default=None)
    owner = Str(allow_none=True, load_default=None)
    reservation_start = fields.AwareDateTime(allow_none=True, load_default=None)
    reservation_end = fields.AwareDateTime(allow_none=True, load_default=None)
    since = fields.AwareDateTime(required=True)
    processes = fields.List(fields.Nested(OffendingProcess), load_default=list)


class UpcomingStep(Strict):
    step = Str(required=True)
    action = Str(required=True)
    at = fields.AwareDateTime(required=True)


class ViolationEscalated(ViolationContext):
    step = Str(required=True)  # as configured: "60s email offender+admins"
    step_index = Integer(required=True, validate=validate.Range(min=0))
    action = Str(load_default="")  # terminal | email | webhook | terminate | kill | yours
    recipients = fields.List(Str(), load_default=list)  # offender | owner | admins
    after_s = Number(load_default=0.0)
    # What comes after this step unless the incident ends first (None: nothing more).
    next_step = Str(allow_none=True, load_default=None)
    next_at = fields.AwareDateTime(allow_none=True, load_default=None)
    # Every later step with its time (the first is next_step): notices say what is coming.
    upcoming = fields.List(fields.Nested(UpcomingStep), load_default=list)


class ViolationResolved(ViolationContext):
    resolved_at = fields.AwareDateTime(required=True)
    reason = Str(required=True)


EVENTS: tuple[EventType, ...] = (
    EventType(
        "violation.opened",
        1,
        "violations",
        ViolationContext,
        "Someone uses a GPU another person reserved: a new incident.",
    ),
    EventType(
        "violation.escalated",
        1,
        "violations",
        ViolationEscalated,
        "An escalation step of an open incident is due.",
    ),
    EventType(
        "violation.resolved",
        1,
        "violations",
        ViolationResolved,
        "An incident ended: no offending process left, or the reservation ended.",
    ),
)
