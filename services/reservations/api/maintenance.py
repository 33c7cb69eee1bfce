"""The reservations service's methods for maintenance windows (`rules/maintenance.py`,
`maintenance/`): an admin drains a host or some of its GPUs, now or later, with a reason; part
of its api, re-exported by `__init__`."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from services.accounts.api import ActorArgs
from services.reservations.api.answers import GpuRefSchema
from services.shared.errors import Forbidden, InvalidRequest, NotFound
from services.shared.rpc import Answer, methods_of

_method = methods_of("reservations")  # the package's SERVICE (not imported: it imports this)
_ACTING = (Forbidden, InvalidRequest)
_Str = fields.String
_Time = fields.AwareDateTime

BOOKING_CHOICES = ("keep", "cancel", "move")
OUTCOMES = ("kept", "cancelled", "shortened", "ended", "moved", "not_moved")


class CreateMaintenanceArgs(ActorArgs):
    host = _Str(required=True, validate=validate.Length(min=1, max=253))
    gpus = fields.List(
        fields.Integer(strict=True, validate=validate.Range(min=0, max=1023)),
        load_default=None,
        allow_none=True,
        validate=validate.Length(min=1, max=256),
        metadata={"description": "GPU indices on the host; left out: every GPU of the host"},
    )
    start = _Time(load_default=None, allow_none=True, metadata={"description": "default: now"})
    end = _Time(
        load_default=None,
        allow_none=True,
        metadata={"description": "left out: until an admin ends the window"},
    )
    reason = _Str(required=True, validate=validate.Length(min=1, max=500))
    bookings = _Str(
        load_default="keep",
        validate=validate.OneOf(BOOKING_CHOICES),
        metadata={
            "description": "what becomes of the bookings the window overlaps: keep (their "
            "owners are told, with an alternative), cancel, or move them to the alternative"
        },
    )

    stop_jobs = fields.Boolean(
        load_default=False,
        metadata={
            "description": "stop the jobs running on the drained GPUs when the window begins "
            "(default: running jobs are left alone)"
        },
    )


class MaintenanceIdArgs(ActorArgs):
    id = fields.Integer(required=True, strict=True)


class ListMaintenanceArgs(Schema):
    start = _Time(load_default=None, allow_none=True)
    end = _Time(load_default=None, allow_none=True)


class AlternativeSchema(Answer):
    start = _Time(required=True)
    end = _Time(required=True)
    gpus = fields.List(fields.Nested(GpuRefSchema), required=True)


class AffectedSchema(Answer):
    """A booking the window overlapped, and what became of it."""

    reservation_id = fields.Integer(required=True)
    owner = _Str(required=True)
    title = _Str(required=True)
    start = _Time(required=True)
    end = _Time(required=True)
    outcome = _Str(
        required=True,
        validate=validate.OneOf(OUTCOMES),
        metadata={
            "description": "kept; cancelled, shortened (ends when the window starts) or ended "
            "(it ran) for cancel; moved, or not_moved (no alternative, or it failed) for move"
        },
    )
    alternative = fields.Nested(AlternativeSchema, required=True, allow_none=True)
    moved_to = fields.Integer(
        required=True, allow_none=True, metadata={"description": "the new booking (moved)"}
    )


class MaintenanceSchema(Answer):
    id = fields.Integer(required=True)
    host = _Str(required=True)
    gpus = fields.List(
        fields.Integer(), required=True, allow_none=True, metadata={"description": "null: all"}
    )
    target = _Str(required=True, metadata={"example": "dgx1:0,1"})
    start = _Time(required=True)
    end = _Time(required=True, allow_none=True, metadata={"description": "null: open-ended"})
    reason = _Str(required=True)
    bookings = _Str(required=True)
    stop_jobs = fields.Boolean(required=True)
    created_by = _Str(required=True)
    created_at = _Time(required=True)
    ended_by = _Str(required=True, allow_none=True)
    status = _Str(
        required=True,
        validate=validate.OneOf(("scheduled", "active", "ended", "removed")),
    )


class CreatedMaintenanceSchema(MaintenanceSchema):
    affected = fields.List(fields.Nested(AffectedSchema), required=True)


CREATE_MAINTENANCE = _method(
    "create_maintenance",
    "Admins: drain a host or some of its GPUs for a window; its bookings' owners are told",
    CreateMaintenanceArgs,
    answer=CreatedMaintenanceSchema,
    raises=_ACTING,
)
LIST_MAINTENANCE = _method(
    "list_maintenance",
    "Maintenance windows overlapping a range (default: those not over yet)",
    ListMaintenanceArgs,
    answer=MaintenanceSchema,
    many=True,
    raises=(InvalidRequest,),
)
END_MAINTENANCE = _method(
    "end_maintenance",
    "Admins: end a maintenance window now (one that has not started is removed)",
    MaintenanceIdArgs,
    answer=MaintenanceSchema,
    raises=(*_ACTING, NotFound),
)

METHODS = (CREATE_MAINTENANCE, LIST_MAINTENANCE, END_MAINTENANCE)
