"""The building blocks of event data schemas: wire-form fields and strict schemas.

`data` is in wire form, so a number must be a JSON number and an integer a JSON integer (never
a string converted); a publisher's schema refuses keys it does not declare.
"""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, fields, validate

Str = fields.String
NonEmpty = validate.Length(min=1)


class Number(fields.Float):
    """A JSON number: a string such as "12" is refused, not converted (data is wire form)."""

    def _validated(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        return super()._validated(value)


class Integer(fields.Integer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strict=True, **kwargs)


class Strict(Schema):
    class Meta:
        unknown = RAISE
