"""The notification path's delivery settings as a call contract: e-mail (SMTP) and chat webhooks
for Warden's own messages, as admins set them on the Settings page, and a test of each.

Served by the violations service under its name, with the rest of the path
(`services.notifications.api` lists these methods too). Secrets are write-only: no answer holds
the SMTP password, a webhook's URL or its signing key.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.shared.errors import InvalidRequest
from services.shared.rpc import Answer, methods_of

_method = methods_of("violations")
_Str = fields.String
_Name = validate.Length(min=1, max=64)
SOURCES = "settings (saved on the Settings page), file (the configuration file) or none"
WEBHOOK_FORMATS = ("slack", "mattermost", "discord", "teams", "json")


class SmtpBody(Schema):
    host = _Str(required=True, validate=validate.Length(min=1, max=255))
    port = fields.Integer(load_default=587, strict=True, validate=validate.Range(min=1, max=65535))
    security = _Str(load_default="starttls", validate=validate.OneOf(("starttls", "tls", "none")))
    username = _Str(load_default="", validate=validate.Length(max=255))
    password = _Str(
        load_default=None,
        allow_none=True,
        load_only=True,
        validate=validate.Length(max=1024),
        metadata={"description": "write-only; left out or null: the saved one is kept"},
    )
    mail_from = fields.Email(required=True, metadata={"description": "the sender's address"})


class WebhookBody(Schema):
    name = _Str(required=True, validate=_Name, metadata={"description": "how timelines name it"})
    format = _Str(load_default="slack", validate=validate.OneOf(WEBHOOK_FORMATS))
    url = fields.Url(
        load_default=None,
        allow_none=True,
        load_only=True,
        require_tld=False,
        schemes={"http", "https"},
        metadata={"description": "write-only; left out: the saved one of this name is kept"},
    )
    secret = _Str(
        load_default=None,
        allow_none=True,
        load_only=True,
        validate=validate.Length(max=256),
        metadata={"description": "json: the signing key; write-only, left out: kept"},
    )


class DeliveryBody(Schema):
    """A channel left out stays as it is; null forgets what was saved (the file's holds)."""

    smtp = fields.Nested(SmtpBody, allow_none=True)
    webhooks = fields.List(
        fields.Nested(WebhookBody), allow_none=True, validate=validate.Length(max=20)
    )

    @validates_schema
    def names_unique(self, data: dict[str, Any], **_: Any) -> None:
        names = [w["name"] for w in data.get("webhooks") or ()]
        if len(names) != len(set(names)):
            raise ValidationError("two webhooks have the same name", "webhooks")


class SetDeliveryArgs(DeliveryBody):
    by = _Str(required=True, validate=_Name, metadata={"description": "the admin who saves"})


class DeliveryTestBody(Schema):
    channel = _Str(required=True, validate=validate.OneOf(("email", "webhook")))
    to = fields.Email(
        load_default=None,
        allow_none=True,
        metadata={"description": "email: the address tested; null: the caller's own"},
    )


class TestDeliveryArgs(DeliveryTestBody):
    by = _Str(required=True, validate=_Name)


class NoArgs(Schema):
    pass


class SmtpSummary(Answer):
    source = _Str(required=True, metadata={"description": SOURCES})
    host = _Str(required=True, metadata={"description": "empty: no e-mail is sent"})
    port = fields.Integer(required=True)
    security = _Str(required=True)
    username = _Str(required=True)
    password_set = fields.Boolean(required=True)
    mail_from = _Str(required=True)


class WebhookSummary(Answer):
    name = _Str(required=True)
    format = _Str(required=True)
    url_hint = _Str(required=True, metadata={"description": "scheme and host only"})
    secret_set = fields.Boolean(required=True)


class WebhooksSummary(Answer):
    source = _Str(required=True, metadata={"description": SOURCES})
    targets = fields.List(fields.Nested(WebhookSummary), required=True)


class DeliverySchema(Answer):
    smtp = fields.Nested(SmtpSummary, required=True)
    webhooks = fields.Nested(WebhooksSummary, required=True)
    reaches_nobody = fields.Boolean(
        required=True,
        metadata={"description": "neither e-mail nor chat is set up: violations reach nobody"},
    )


class DeliveryTestOutcome(Answer):
    target = _Str(required=True)
    ok = fields.Boolean(required=True)
    detail = _Str(required=True)


class DeliveryTestAnswerSchema(Answer):
    outcomes = fields.List(fields.Nested(DeliveryTestOutcome), required=True)


DELIVERY_SETTINGS = _method(
    "delivery_settings",
    "How Warden's e-mail and chat messages go out now, and where each setting comes from",
    NoArgs,
    answer=DeliverySchema,
)
SET_DELIVERY_SETTINGS = _method(
    "set_delivery_settings",
    "Save e-mail or chat delivery (the saved wins over the file); answers them as they are now",
    SetDeliveryArgs,
    answer=DeliverySchema,
    raises=(InvalidRequest,),
)
TEST_DELIVERY = _method(
    "test_delivery",
    "Send a test e-mail or a test message to every chat webhook with the settings in force",
    TestDeliveryArgs,
    answer=DeliveryTestAnswerSchema,
    raises=(InvalidRequest,),
    timeout_s=120.0,  # webhooks are retried before it answers
)

METHODS = (DELIVERY_SETTINGS, SET_DELIVERY_SETTINGS, TEST_DELIVERY)
