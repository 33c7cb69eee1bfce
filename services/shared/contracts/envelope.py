"""The envelope every event travels in (its shape: the package's docstring): built and
checked for publishing with `make_envelope`, checked from the wire with `parse_envelope`."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from services.shared import fastjson
from services.shared.contracts.registry import event_type
from services.shared.contracts.replicas import ANY_SOURCE
from services.shared.errors import ContractError


@dataclass(frozen=True)
class Envelope:
    id: str
    type: str
    version: int
    occurred_at: str
    source: str
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "version": self.version,
            "occurred_at": self.occurred_at,
            "source": self.source,
            "data": self.data,
        }

    def to_json(self) -> bytes:
        return fastjson.dumps(self.to_dict())


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat()


def make_envelope(
    type_name: str,
    data: Mapping[str, Any],
    *,
    version: int | None = None,
    source: str | None = None,
) -> Envelope:
    """Build an envelope for publishing; invalid data is a programming error (ContractError)."""
    etype = event_type(type_name, version)
    if etype.source != ANY_SOURCE and source is not None and source != etype.source:
        raise ContractError(
            f"{type_name!r} is published by {etype.source!r}, not {source!r}",
            {"type": type_name, "source": source},
        )
    errors = etype.errors(data, strict=True)
    if errors:
        raise ContractError(
            f"data of {type_name!r} v{etype.version} does not match its schema",
            {"type": type_name, "version": etype.version, "errors": errors},
        )
    if etype.source == ANY_SOURCE:  # a type every service publishes: its data names the service
        source = source or data["service"]
        if source != data["service"]:
            raise ContractError(
                f"{type_name!r} is published by the service its data names",
                {"type": type_name, "source": source},
            )
    try:
        fastjson.dumps(data)
    except (TypeError, ValueError) as err:
        raise ContractError(
            f"data of {type_name!r} must be JSON values (times as ISO-8601 strings): {err}",
            {"type": type_name},
        ) from err
    return Envelope(
        id=str(uuid.uuid4()),
        type=etype.name,
        version=etype.version,
        occurred_at=utc_now_iso(),
        source=etype.source if source is None else source,
        data=dict(data),
    )


_ENVELOPE_KEYS = ("id", "type", "version", "occurred_at", "source", "data")


def parse_envelope(body: bytes | str | Mapping[str, Any]) -> Envelope:
    """Validate a message from the wire; ContractError says what is wrong with it."""
    if isinstance(body, bytes | str):
        try:
            raw = fastjson.loads(body)
        except (ValueError, UnicodeDecodeError) as err:
            raise ContractError(f"body is not JSON: {err}") from err
    else:
        raw = body
    if not isinstance(raw, Mapping):
        raise ContractError("envelope must be a JSON object")
    missing = [k for k in _ENVELOPE_KEYS if k not in raw]
    if missing:
        raise ContractError(f"envelope lacks {', '.join(missing)}", {"missing": missing})
    name, version = raw["type"], raw["version"]
    if not isinstance(name, str) or not isinstance(version, int) or isinstance(version, bool):
        raise ContractError("envelope type must be a string and version an integer")
    etype = event_type(name, version)
    errors = etype.errors(raw["data"], strict=False)
    if errors:
        raise ContractError(
            f"data of {name!r} v{version} does not match its schema",
            {"type": name, "version": version, "errors": errors},
        )
    return Envelope(
        id=str(raw["id"]),
        type=name,
        version=version,
        occurred_at=str(raw["occurred_at"]),
        source=str(raw["source"]),
        data=dict(raw["data"]),
    )
