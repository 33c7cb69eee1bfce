"""The events of the notification path (published by the violations service, which serves it).

`notification.sent` goes to the gateway's live stream for the browser channel; the gateway
shows it only to the user it names.
"""

from __future__ import annotations

from marshmallow import fields

from services.shared.contracts.schema import NonEmpty, Str, Strict
from services.shared.contracts.validation import EventType


class NotificationLinkData(Strict):
    label = Str(required=True, validate=NonEmpty)
    url = Str(required=True, validate=NonEmpty)


class NotificationSent(Strict):
    id = Str(required=True, validate=NonEmpty)  # the record's id, unique per delivery
    user = Str(required=True, validate=NonEmpty)  # the only one who sees it
    kind = Str(required=True, validate=NonEmpty)
    title = Str(required=True)
    text = Str(required=True)
    links = fields.List(fields.Nested(NotificationLinkData), load_default=list)
    at = fields.AwareDateTime(required=True)


EVENTS: tuple[EventType, ...] = (
    EventType(
        "notification.sent",
        1,
        "violations",
        NotificationSent,
        "A notification for one user's browser (the live stream shows it only to them).",
    ),
)
