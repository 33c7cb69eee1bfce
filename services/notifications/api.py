"""The notification path's public call contract (issue 20): one path for every message to a
person. Its RPC methods, their arguments and answers; its event, `notification.sent`, is declared in
`services.shared.contracts.notifications` (`EVENTS` here).

The path runs inside the violations service (its process, its database, its leader), so its
methods keep their wire names under that service: `violations.notify`,
`violations.notification_prefs`, `violations.set_notification_prefs`,
`violations.list_notifications`. Callers from before this package keep working unchanged.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.notifications.delivery_api import (  # re-exported: the path's public contract
    DELIVERY_SETTINGS,
    SET_DELIVERY_SETTINGS,
    TEST_DELIVERY,
)
from services.notifications.delivery_api import DeliveryBody as DeliveryBody
from services.notifications.delivery_api import DeliverySchema as DeliverySchema
from services.notifications.delivery_api import DeliveryTestAnswerSchema as DeliveryTestAnswerSchema
from services.notifications.delivery_api import DeliveryTestBody as DeliveryTestBody
from services.shared.contracts.notifications import EVENTS as _EVENTS
from services.shared.errors import InvalidRequest
from services.shared.rpc import Answer, methods_of

# The service that serves these methods: the wire name stays "violations" (see above).
SERVICE = "violations"
_method = methods_of(SERVICE)

_Str = fields.String
_Time = fields.AwareDateTime
_Name = validate.Length(min=1, max=64)

# The events the path publishes: `notification.sent` (the browser channel), whose source stays
# the violations service.
EVENTS = _EVENTS

# What a user may be told about; each user chooses per kind which channels get it.
NOTIFICATION_KINDS = (
    "reservation_starting",  # my reservation starts in N minutes
    "reservation_ending",  # my reservation ends in N minutes
    "reservation_idle",  # my reserved GPUs are idle: keep it or release it (links)
    "reservation_released",  # my reservation was released (idle, or by an admin)
    "reservation_cancelled",  # a reservation of mine was cancelled by a rule change
    "reservation_violated",  # someone is using a GPU I reserved
    "using_reserved_gpu",  # I am using a GPU I may not (the incident's offender)
    "job_finished",
    "job_failed",
    "account",  # my account: an invitation or a new password link (its one-time link)
    "host_key_changed",  # (admins) a host presents another SSH key than the one trusted for it
    "maintenance",  # GPUs I booked are drained for maintenance (what became of the booking)
    "gpu_health",  # a GPU of my booking failed (with an alternative); (admins) any GPU failed
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
    NOTIFY,
    NOTIFICATION_PREFS,
    SET_NOTIFICATION_PREFS,
    LIST_NOTIFICATIONS,
    # How Warden's e-mail and chat go out (the Settings page): `delivery_api`.
    DELIVERY_SETTINGS,
    SET_DELIVERY_SETTINGS,
    TEST_DELIVERY,
)
