"""Who may see what: the rules shared by the routes and the live stream. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.gateway.auth import Caller

# What only a reservation's owner, its guests and admins see.
PRIVATE_RESERVATION_FIELDS = ("description", "cancel_reason")


def takes_part(caller: Caller, reservation: Mapping[str, Any]) -> bool:
    return (
        caller.is_admin
        or reservation.get("owner") == caller.username
        or caller.username in (reservation.get("guests") or ())
    )


def reservation_for(caller: Caller, reservation: dict[str, Any]) -> dict[str, Any]:
    """The reservation as `caller` may see it: private fields emptied for outsiders."""
    if takes_part(caller, reservation):
        return reservation
    shown = dict(reservation)
    for key in PRIVATE_RESERVATION_FIELDS:
        if shown.get(key):
            shown[key] = "" if key == "description" else None
    return shown


def sees_incident(caller: Caller, incident: Mapping[str, Any]) -> bool:
    """Admins, the offender and the reservation's owner see an incident."""
    return caller.is_admin or caller.username in (incident.get("offender"), incident.get("owner"))


def sees_account(caller: Caller, username: str | None) -> bool:
    return caller.is_admin or caller.username == username
