"""A user's calendar feed as iCalendar text (RFC 5545, written by `icalendar`). Pure.

What is in it: the reservations the user owns or is a guest of, and (when the address asks
with `?gpus=`) everyone's reservations on the GPUs they watch. Each reservation is one event:
its UID is `reservation-<id>@<site>`, the same on every fetch, so a calendar updates the event
in place; times are UTC. A cancelled reservation stays as `STATUS:CANCELLED` (calendars that
already show it drop or strike it through). Other people's reservations show who, what title
and which GPUs, never their description (as in the API for outsiders).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from icalendar import Calendar, Event, vDuration

PRODID = "-//Warden//GPU reservations//EN"
# How often a calendar should fetch it again (most take it as a hint).
REFRESH = timedelta(minutes=15)
# The feed's range around now: recent history and what is booked ahead.
PAST = timedelta(weeks=4)
AHEAD = timedelta(weeks=26)


def _time(value: Any) -> datetime:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.astimezone(UTC)


def gpu_places(reservation: Mapping[str, Any]) -> list[str]:
    """Its GPUs as `host:index` (the uuid when the index is unknown)."""
    return [
        f"{gpu['host']}:{gpu['index']}" if gpu.get("index") is not None else str(gpu["uuid"])
        for gpu in reservation.get("gpus") or ()
    ]


def takes_part(username: str, reservation: Mapping[str, Any]) -> bool:
    return reservation.get("owner") == username or username in (reservation.get("guests") or ())


def chosen(
    username: str, reservations: Iterable[Mapping[str, Any]], watched: Sequence[str] = ()
) -> list[Mapping[str, Any]]:
    """The reservations the feed lists: the user's own and guest ones, and any on a watched
    GPU uuid; each once, by start then id."""
    watching = set(watched)
    picked: dict[int, Mapping[str, Any]] = {}
    for reservation in reservations:
        on_watched = any(gpu["uuid"] in watching for gpu in reservation.get("gpus") or ())
        if takes_part(username, reservation) or on_watched:
            picked[int(reservation["id"])] = reservation
    return sorted(picked.values(), key=lambda r: (_time(r["start"]), int(r["id"])))


def _event(username: str, reservation: Mapping[str, Any], site: str) -> Event:
    places = gpu_places(reservation)
    mine = takes_part(username, reservation)
    owner = str(reservation.get("owner") or "")
    title = str(reservation.get("title") or "GPU reservation")
    event = Event()
    event.add("uid", f"reservation-{reservation['id']}@{site}")
    event.add("summary", f"{title} ({', '.join(places)})" if mine else f"{owner}: {title}")
    event.add("dtstart", _time(reservation["start"]))
    event.add("dtend", _time(reservation["end"]))
    changed = _time(reservation.get("updated_at") or reservation["start"])
    event.add("dtstamp", changed)
    event.add("last-modified", changed)
    event.add("location", ", ".join(places))
    cancelled = reservation.get("status") == "cancelled"
    event.add("status", "CANCELLED" if cancelled else "CONFIRMED")
    event.add("transp", "TRANSPARENT" if cancelled or not mine else "OPAQUE")
    lines = [f"Reserved by {owner} on {', '.join(places)}."]
    guests = list(reservation.get("guests") or ())
    if guests:
        lines.append(f"Shared with {', '.join(guests)}.")
    if mine and reservation.get("description"):
        lines += ["", str(reservation["description"])]
    event.add("description", "\n".join(lines))
    event.add("categories", ["Warden", "mine" if mine else "watched"])
    return event


def render(
    username: str,
    reservations: Iterable[Mapping[str, Any]],
    *,
    watched: Sequence[str] = (),
    site: str = "warden",
) -> bytes:
    """The feed of `username`: `reservations` filtered by `chosen`, as iCalendar bytes."""
    calendar = Calendar()
    calendar.add("prodid", PRODID)
    calendar.add("version", "2.0")
    calendar.add("calscale", "GREGORIAN")
    calendar.add("method", "PUBLISH")
    calendar.add("x-wr-calname", f"Warden: {username}")
    calendar.add("x-wr-timezone", "UTC")
    calendar.add("refresh-interval", REFRESH, parameters={"VALUE": "DURATION"})
    calendar.add("x-published-ttl", vDuration(REFRESH))
    for reservation in chosen(username, reservations, watched):
        calendar.add_component(_event(username, reservation, site))
    data: bytes = calendar.to_ical()
    return data
