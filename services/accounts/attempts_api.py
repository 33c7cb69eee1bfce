"""The reservations service's methods for counted attempts (`attempts.py`): the shared state
of the gateway replicas' rate limits; part of its api, re-exported by `__init__`."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from services.shared.errors import InvalidRequest
from services.shared.rpc import methods_of

_method = methods_of("reservations")  # the package's SERVICE (not imported: it imports this)

__all__ = ["SETTLE_ATTEMPTS", "TAKE_ATTEMPTS"]


class AttemptLimit(Schema):
    key = fields.String(
        required=True,
        validate=validate.Length(min=1, max=320),
        metadata={"description": "what the attempt counts against, e.g. `address:10.0.0.7`"},
    )
    window_s = fields.Float(required=True, validate=validate.Range(min=0.001, max=86_400 * 7))
    limit = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class TakeAttemptsArgs(Schema):
    limits = fields.List(
        fields.Nested(AttemptLimit), required=True, validate=validate.Length(min=1, max=8)
    )


class TakeAttemptsAnswer(Schema):
    retry_after_s = fields.Float(
        allow_none=True, metadata={"description": "null: taken; else when to try again"}
    )
    marks = fields.List(fields.Integer(), metadata={"description": "one per key, for settle"})


class SettleAttemptsArgs(Schema):
    cancel = fields.List(
        fields.Integer(strict=True), load_default=list, validate=validate.Length(max=8)
    )
    clear = fields.List(
        fields.String(validate=validate.Length(min=1, max=320)),
        load_default=list,
        validate=validate.Length(max=8),
    )


TAKE_ATTEMPTS = _method(
    "take_attempts",
    "Count one attempt against each key unless one is at its limit within its window: "
    "{retry_after_s: null, marks} when counted, {retry_after_s} (seconds) when refused",
    TakeAttemptsArgs,
    answer=TakeAttemptsAnswer,
    raises=(InvalidRequest,),
)
SETTLE_ATTEMPTS = _method(
    "settle_attempts",
    "Attempts that did not count after all (`cancel`: marks of take_attempts) and keys whose "
    "count starts again (`clear`)",
    SettleAttemptsArgs,
    raises=(InvalidRequest,),
)
