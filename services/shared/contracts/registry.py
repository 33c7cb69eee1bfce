"""Every declared event type, one tuple in a fixed order, and the lookup by name and version."""

from __future__ import annotations

from services.shared.contracts import (
    jobs,
    maintenance,
    monitor,
    notifications,
    replicas,
    reservations,
    violations,
)
from services.shared.contracts.validation import EventType
from services.shared.errors import ContractError

EVENT_TYPES: tuple[EventType, ...] = (
    *monitor.EVENTS,
    *reservations.EVENTS,
    *maintenance.EVENTS,
    *jobs.EVENTS,
    *violations.EVENTS,
    *notifications.EVENTS,
    *replicas.EVENTS,
)

_BY_KEY: dict[tuple[str, int], EventType] = {(t.name, t.version): t for t in EVENT_TYPES}
_LATEST: dict[str, EventType] = {}
for _t in sorted(EVENT_TYPES, key=lambda t: t.version):
    _LATEST[_t.name] = _t


def event_type(name: str, version: int | None = None) -> EventType:
    """The declared type `name` at `version` (latest when omitted); ContractError if unknown."""
    found = _LATEST.get(name) if version is None else _BY_KEY.get((name, version))
    if found is None:
        known = f"version {version} of " if version is not None and name in _LATEST else ""
        raise ContractError(
            f"unknown event type {known}{name!r}", {"type": name, "version": version}
        )
    return found
