"""The violations service's public call contract: its RPC methods, their arguments and answers,
and the errors they raise (see `services.shared.rpc`). Its events are in
`services.shared.contracts`; handlers of your own subscribe to them (docs/developers/plugins.md).

The service also serves the notification path, whose contract is `services.notifications.api`
(`METHODS` here includes its methods: they keep this service's name on the wire).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.notifications import api as notifications_api
from services.shared.errors import InvalidRequest, NotFound
from services.shared.rpc import Answer, methods_of
from services.shared.usage_report import FactsSchema, PeriodArgs

SERVICE = "violations"
_method = methods_of(SERVICE)

_Str = fields.String
_Time = fields.AwareDateTime
_Name = validate.Length(min=1, max=64)


# --- arguments ----------------------------------------------------------------------------------


class ListArgs(Schema):
    status = _Str(validate=validate.OneOf(("open", "resolved")))
    host = _Str(validate=validate.Length(min=1, max=255))
    gpu_uuid = _Str(validate=validate.Length(min=1, max=128))
    offender = _Str(validate=_Name)
    owner = _Str(validate=_Name, metadata={"description": "the reservation's owner"})
    reservation_id = fields.Integer(validate=validate.Range(min=1, max=2**31 - 1))
    # Incidents where this user is the offender or the reservation's owner.
    involving = _Str(validate=_Name)
    opened_after = _Time(metadata={"description": "opened at or after this time"})
    opened_before = _Time(metadata={"description": "opened before this time"})
    limit = fields.Integer(load_default=50, strict=True, validate=validate.Range(min=1, max=500))
    offset = fields.Integer(
        load_default=0, strict=True, validate=validate.Range(min=0, max=10_000_000)
    )

    @validates_schema
    def ordered(self, data: dict[str, Any], **_: Any) -> None:
        after, before = data.get("opened_after"), data.get("opened_before")
        if after is not None and before is not None and before <= after:
            raise ValidationError("must be after opened_after", "opened_before")


class GetArgs(Schema):
    id = _Str(required=True, validate=validate.Length(min=1, max=64))


class Outcome(Schema):
    target = _Str(required=True, validate=validate.Length(max=512))
    ok = fields.Boolean(required=True)
    detail = _Str(load_default="")
    skipped = fields.Boolean(
        load_default=False,
        metadata={"description": "not tried: the channel is not set up (detail says why)"},
    )


class RecordArgs(Schema):
    incident_id = _Str(required=True, validate=validate.Length(min=1, max=64))
    step_index = fields.Integer(required=True, strict=True, validate=validate.Range(min=0))
    handler = _Str(required=True, validate=validate.Length(min=1, max=64))
    outcomes = fields.List(fields.Nested(Outcome), required=True)


# --- answers ------------------------------------------------------------------------------------


class OffendingProcessSchema(Answer):
    pid = fields.Integer(required=True)
    command = _Str(required=True)
    started_at = _Time(required=True, allow_none=True)
    used_memory_mib = fields.Float(required=True, allow_none=True)


class LastStepSchema(Answer):
    index = fields.Integer(required=True, metadata={"description": "0 for the first step"})
    step = _Str(required=True, metadata={"description": 'as configured, e.g. "60s email owner"'})
    handler = _Str(required=True, allow_none=True)
    taken_at = _Time(required=True)
    outcome = _Str(
        required=True,
        metadata={
            "description": "pending (no handler has reported yet), ok, failed, partly failed "
            "(some targets reached, some not) or skipped (nothing tried: the channel is not "
            "set up)"
        },
    )
    detail = _Str(
        required=True,
        allow_none=True,
        metadata={"description": "why it failed or was skipped, when it was"},
    )


class IncidentSchema(Answer):
    id = _Str(required=True)
    status = _Str(required=True, metadata={"description": "open or resolved"})
    mode = _Str(required=True, metadata={"description": "reservations or strict"})
    host = _Str(required=True)
    gpu_uuid = _Str(required=True)
    gpu_index = fields.Integer(required=True, allow_none=True)
    offender = _Str(required=True, metadata={"description": "whose processes they are"})
    reservation_id = fields.Integer(required=True, allow_none=True)
    owner = _Str(required=True, allow_none=True, metadata={"description": "the GPU's holder"})
    reservation_start = _Time(required=True, allow_none=True)
    reservation_end = _Time(required=True, allow_none=True)
    opened_at = _Time(required=True)
    since = _Time(required=True, metadata={"description": "when the offence was first seen"})
    last_seen_at = _Time(required=True)
    resolved_at = _Time(required=True, allow_none=True)
    resolve_reason = _Str(required=True, allow_none=True)
    processes = fields.List(fields.Nested(OffendingProcessSchema), required=True)
    steps = fields.List(
        _Str(), required=True, metadata={"description": "the escalation steps, as configured"}
    )
    last_step = fields.Nested(
        LastStepSchema,
        required=True,
        allow_none=True,
        metadata={"description": "the last step taken and what became of it; null before any"},
    )


class TimelineEntrySchema(Answer):
    at = _Time(required=True)
    kind = _Str(
        required=True, metadata={"description": "opened, updated, escalated, action or resolved"}
    )
    step_index = fields.Integer(required=True, allow_none=True)
    handler = _Str(required=True, allow_none=True)
    target = _Str(required=True, allow_none=True)
    ok = fields.Boolean(
        required=True,
        allow_none=True,
        metadata={"description": "an action: reached or not; null when it was skipped"},
    )
    detail = _Str(required=True, allow_none=True)


class IncidentDetailSchema(IncidentSchema):
    timeline = fields.List(
        fields.Nested(TimelineEntrySchema),
        required=True,
        metadata={"description": "what happened, oldest first"},
    )


class IncidentPageSchema(Answer):
    incidents = fields.List(fields.Nested(IncidentSchema), required=True)
    total = fields.Integer(required=True)


# --- methods ------------------------------------------------------------------------------------

LIST_INCIDENTS = _method(
    "list_incidents",
    "Incidents, newest first, with the total that match",
    ListArgs,
    answer=IncidentPageSchema,
    raises=(InvalidRequest,),
)
GET_INCIDENT = _method(
    "get_incident",
    "One incident with its timeline",
    GetArgs,
    answer=IncidentDetailSchema,
    raises=(InvalidRequest, NotFound),
)
RECORD_ACTIONS = _method(
    "record_actions",
    "A handler's outcomes for one step of an incident (recorded once per handler and step)",
    RecordArgs,
    raises=(InvalidRequest, NotFound),
)

USAGE_REPORT = _method(
    "usage_report",
    "Incidents caused and suffered, GPU-hours used unreserved, per user and GPU over a period",
    PeriodArgs,
    answer=FactsSchema,
    raises=(InvalidRequest,),
)

METHODS = (
    LIST_INCIDENTS,
    GET_INCIDENT,
    RECORD_ACTIONS,
    USAGE_REPORT,
    # The notification path's methods, served by this service under its name (their own
    # contract is `services.notifications.api`).
    *notifications_api.METHODS,
)
