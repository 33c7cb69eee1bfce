"""The calendar feed's iCalendar text (services.gateway.ical_feed), parsed back with
`icalendar`: which reservations it lists, stable UIDs, UTC times, what outsiders see; and the
feed token masked in error logs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from icalendar import Calendar

from services.gateway.ical_feed import render
from services.shared.http_errors import loggable_path


def reservation(id_: int, owner: str, gpu: str = "GPU-a", **extra: Any) -> dict[str, Any]:
    host, index = {"GPU-a": ("node1", 0), "GPU-b": ("node1", 1), "GPU-c": ("node2", 0)}[gpu]
    return {
        "id": id_,
        "owner": owner,
        "gpus": [{"uuid": gpu, "host": host, "index": index}],
        "start": "2026-11-24T10:00:00+01:00",
        "end": "2026-11-24T12:30:00+01:00",
        "title": f"run {id_}",
        "description": f"notes of {id_}",
        "status": "active",
        "guests": [],
        "updated_at": "2026-11-20T08:00:00+00:00",
        **extra,
    }


def parsed(data: bytes) -> dict[str, Any]:
    calendar = Calendar.from_ical(data)
    assert str(calendar["version"]) == "2.0"
    assert "prodid" in calendar
    return {str(event["uid"]): event for event in calendar.walk("VEVENT")}


def test_own_reservations_in_utc_with_stable_uids() -> None:
    booked = [reservation(1, "ann"), reservation(2, "ann", "GPU-b")]

    first = render("ann", booked, site="warden.lab")
    events = parsed(first)

    assert set(events) == {"reservation-1@warden.lab", "reservation-2@warden.lab"}
    one = events["reservation-1@warden.lab"]
    assert one.decoded("dtstart") == datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
    assert one.decoded("dtend") == datetime(2026, 11, 24, 11, 30, tzinfo=UTC)
    assert one.decoded("dtstart").utcoffset() == timedelta(0)
    assert b"DTSTART:20261124T090000Z" in first
    assert str(one["summary"]) == "run 1 (node1:0)"
    assert str(one["location"]) == "node1:0"
    assert "notes of 1" in str(one["description"])
    assert str(one["status"]) == "CONFIRMED"
    # The same reservations give the same text: calendars see no change where there is none.
    assert render("ann", list(reversed(booked)), site="warden.lab") == first


def test_cancelled_ones_stay_as_cancelled_and_guests_see_shared_bookings() -> None:
    booked = [
        reservation(1, "ann", status="cancelled"),
        reservation(2, "bob", guests=["ann"]),
        reservation(3, "bob", "GPU-b"),
    ]

    events = parsed(render("ann", booked))

    assert set(events) == {"reservation-1@warden", "reservation-2@warden"}
    assert str(events["reservation-1@warden"]["status"]) == "CANCELLED"
    shared = events["reservation-2@warden"]
    assert "notes of 2" in str(shared["description"])
    assert "Shared with ann" in str(shared["description"])


def test_watched_gpus_add_others_bookings_without_their_description() -> None:
    booked = [reservation(1, "bob", "GPU-a"), reservation(2, "bob", "GPU-c")]

    events = parsed(render("ann", booked, watched=["GPU-a"]))

    assert list(events) == ["reservation-1@warden"]
    theirs = events["reservation-1@warden"]
    assert str(theirs["summary"]) == "bob: run 1"
    assert "notes of 1" not in str(theirs["description"])
    assert str(theirs["transp"]) == "TRANSPARENT"
    assert parsed(render("ann", booked)) == {}


def test_the_feed_token_is_masked_in_logged_paths() -> None:
    assert loggable_path("/api/v1/calendar/s3cret-TOKEN_x.ics") == "/api/v1/calendar/***.ics"
    assert loggable_path("/api/v1/reservations/12") == "/api/v1/reservations/12"
