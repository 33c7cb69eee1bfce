"""RPC arguments checked against a marshmallow schema: InvalidRequest naming each bad field."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError

from services.shared.errors import InvalidRequest


def load_args(schema: Schema, args: dict[str, Any]) -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = schema.load(args)
    except ValidationError as err:
        messages = err.normalized_messages()
        summary = "; ".join(
            f"{key}: {' '.join(map(str, value)) if isinstance(value, list) else value}"
            for key, value in sorted(messages.items())
        )
        raise InvalidRequest(f"invalid arguments: {summary}", {"errors": messages}) from err
    return loaded
