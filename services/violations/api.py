"""The violations service's public call contract: its RPC methods, their arguments and answers,
and the errors they raise (see `services.shared.rpc`). Its events are in
`services.shared.contracts`; handlers of your own subscribe to them (docs/developers/plugins.md).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

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
            "description": "pending (no handler has reported yet), ok, failed or partly failed "
            "(some targets reached, some not)"
        },
    )
    detail = _Str(
        required=True, allow_none=True, metadata={"description": "why it failed, when it did"}
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
    ok = fields.Boolean(required=True, allow_none=True)
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

# --- notifications: one path for every message to a person (issue 20) -----------------------

# What a user may be told about; each user chooses per kind which channels get it.
NOTIFICATION_KINDS = (
    "reservation_starting",  # my reservation starts in N minutes
    "reservation_ending",  # my reservation ends in N minutes
    "reservation_idle",  # my reserved GPUs are idle: keep it or release it (links)
    "reservation_released",  # my reservation was released (idle, or by an admin)
    "reservation_cancelled",  # a reservation of mine was cancelled by a rule change
    "reservation_violated",  # someone is using a GPU I reserved
    "job_finished",
    "job_failed",
)


class NotificationLink(Schema):
    label = _Str(required=True, validate=validate.Length(min=1, max=64))
    url = fields.Url(required=True, require_tld=False, schemes={"http", "https"})


class NotifyArgs(Schema):
    user = _Str(required=True, validate=_Name, metadata={"description": "the account told"})
    kind = _Str(required=True, validate=validate.OneOf(NOTIFICATION_KINDS))
    title = _Str(required=True, validate=validate.Length(min=1, max=200))
    text = _Str(required=True, validate=validate.Length(min=1, max=4000))
    links = fields.List(fields.Nested(NotificationLink), load_default=list)
    key = _Str(
        load_default=None,
        allow_none=True,
        validate=validate.Length(min=1, max=200),
        metadata={"description": "the same key twice is sent once (e.g. reservation:12:idle:1)"},
    )


class NotifyAnswerSchema(Answer):
    duplicate = fields.Boolean(
        required=True, metadata={"description": "its key was sent before: nothing went out"}
    )
    channels = fields.Dict(
        keys=_Str(),
        values=_Str(),
        required=True,
        metadata={"description": "channel -> sent, failed or limited"},
    )


NOTIFY = _method(
    "notify",
    "Tell a user something on the channels they chose for its kind (rate-limited, retried, "
    "recorded); answers which channels it went to",
    NotifyArgs,
    answer=NotifyAnswerSchema,
    raises=(InvalidRequest,),
    timeout_s=120.0,  # e-mail and chat are retried before it answers
)

CHANNELS = ("email", "chat", "browser")
CHAT_FORMATS = ("slack", "mattermost", "discord", "teams")
_Lead = validate.Range(min=1, max=1440)


class KindChannels(Schema):
    kind = _Str(required=True, validate=validate.OneOf(NOTIFICATION_KINDS))
    email = fields.Boolean(required=True)
    chat = fields.Boolean(required=True)
    browser = fields.Boolean(required=True)


class UserArgs(Schema):
    user = _Str(required=True, validate=_Name)


class PreferencesBody(Schema):
    """What a user changes; what is left out stays as it is."""

    kinds = fields.List(
        fields.Nested(KindChannels),
        validate=validate.Length(max=len(NOTIFICATION_KINDS)),
        metadata={"description": "per kind, which channels get it (kinds left out keep theirs)"},
    )
    start_lead_min = fields.Integer(
        strict=True, validate=_Lead, metadata={"description": "remind this long before a start"}
    )
    end_lead_min = fields.Integer(
        strict=True, validate=_Lead, metadata={"description": "remind this long before an end"}
    )
    chat_format = _Str(validate=validate.OneOf(CHAT_FORMATS))
    chat_url = fields.Url(
        require_tld=False,
        schemes={"http", "https"},
        allow_none=True,
        metadata={
            "description": "your chat webhook (a secret: answers show it masked); null removes it"
        },
    )

    @validates_schema
    def chat_complete(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("chat_url") and not data.get("chat_format"):
            raise ValidationError("required with chat_url", "chat_format")


class SetPreferencesArgs(UserArgs, PreferencesBody):
    pass


class PreferencesSchema(Answer):
    kinds = fields.List(fields.Nested(KindChannels), required=True)
    start_lead_min = fields.Integer(required=True)
    end_lead_min = fields.Integer(required=True)
    chat_format = _Str(required=True, allow_none=True)
    chat_handle = _Str(
        required=True,
        allow_none=True,
        metadata={"description": "the chat webhook, masked (host and last 4 characters)"},
    )


class SentArgs(UserArgs):
    limit = fields.Integer(load_default=50, strict=True, validate=validate.Range(min=1, max=500))
    offset = fields.Integer(
        load_default=0, strict=True, validate=validate.Range(min=0, max=10_000_000)
    )


class SentSchema(Answer):
    id = fields.Integer(required=True)
    kind = _Str(required=True)
    channel = _Str(required=True, metadata={"description": "email, chat or browser"})
    title = _Str(required=True)
    outcome = _Str(required=True, metadata={"description": "sent, failed or limited"})
    detail = _Str(required=True, metadata={"description": "why it failed, when it did"})
    at = _Time(required=True)


class SentPageSchema(Answer):
    items = fields.List(fields.Nested(SentSchema), required=True)
    total = fields.Integer(required=True)


NOTIFICATION_PREFS = _method(
    "notification_prefs",
    "A user's notification preferences (the defaults until they change them)",
    UserArgs,
    answer=PreferencesSchema,
    raises=(InvalidRequest,),
)
SET_NOTIFICATION_PREFS = _method(
    "set_notification_prefs",
    "Change a user's notification preferences; answers them as they are now",
    SetPreferencesArgs,
    answer=PreferencesSchema,
    raises=(InvalidRequest,),
)
LIST_NOTIFICATIONS = _method(
    "list_notifications",
    "What was sent to a user, on which channel and with what outcome, newest first",
    SentArgs,
    answer=SentPageSchema,
    raises=(InvalidRequest,),
)

METHODS = (
    LIST_INCIDENTS,
    GET_INCIDENT,
    RECORD_ACTIONS,
    USAGE_REPORT,
    NOTIFY,
    NOTIFICATION_PREFS,
    SET_NOTIFICATION_PREFS,
    LIST_NOTIFICATIONS,
)
