"""The personal calendar feed through the gateway: a user makes their secret address, a calendar
fetches it (parsed back with `icalendar`), and revoking or replacing it ends the old address at
once; `warden calendar-feed` prints one. Another user's feed shows alice's bookings only on
GPUs it watches, never her description. One embedded system for the module.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from icalendar import Calendar

from tests.e2e.api import ApiClient, ApiSystem, running_system
from tests.e2e.test_cli_client import Cli

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-calendar-feed")) as system:
        yield system


async def fetch(system: ApiSystem, url: str, **params: Any) -> tuple[int, str, str]:
    """(status, content type, text) of a feed address, as a calendar would fetch it."""
    async with system.session.get(url, params=params or None) as response:
        return response.status, response.content_type, await response.text()


def events(text: str) -> dict[str, Any]:
    """The feed's events by UID."""
    calendar = Calendar.from_ical(text)
    return {str(event["uid"]): event for event in calendar.walk("VEVENT")}


async def book(
    client: ApiClient, gpu: str, hours_ahead: int, title: str, description: str = ""
) -> dict[str, Any]:
    start = (datetime.now(UTC) + timedelta(hours=hours_ahead)).replace(microsecond=0)
    made = await client.post(
        "/reservations",
        {
            "gpus": [gpu],
            "start": start.isoformat(),
            "duration_minutes": 90,
            "title": title,
            "description": description,
        },
    )
    assert made.status == 201, made.body
    body: dict[str, Any] = made.body
    return body


async def new_feed(client: ApiClient) -> str:
    made = await client.post("/me/calendar-feed")
    assert made.status == 201, made.body
    url = str(made.body["url"])
    assert url.endswith(".ics")
    return url


async def test_create_fetch_parse_and_revoke(
    system: ApiSystem, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    alice = await system.as_user("alice")
    gpu = await system.gpu(0, 0)
    place = f"{gpu['host']}:{gpu['index']}"
    kept = await book(alice, place, 2, "alice trains", "the secret plan")
    dropped = await book(alice, place, 5, "alice evaluates")
    cancelled = await alice.delete(f"/reservations/{dropped['id']}")
    assert cancelled.status == 200, cancelled.body
    assert (await alice.get("/me/calendar-feed")).body == {"exists": False}

    url = await new_feed(alice)
    assert (await alice.get("/me/calendar-feed")).body == {"exists": True}
    status, content_type, text = await fetch(system, url)

    assert status == 200 and content_type == "text/calendar"
    found = events(text)
    site = urlsplit(url).hostname
    mine = found[f"reservation-{kept['id']}@{site}"]
    assert str(mine["summary"]) == f"alice trains ({place})"
    assert str(mine["location"]) == place
    assert "the secret plan" in str(mine["description"])
    assert str(mine["status"]) == "CONFIRMED"
    start = mine.decoded("dtstart")
    assert start.utcoffset() == timedelta(0)
    assert start == datetime.fromisoformat(kept["start"])
    assert mine.decoded("dtend") == datetime.fromisoformat(kept["end"])
    gone = found[f"reservation-{dropped['id']}@{site}"]
    assert str(gone["status"]) == "CANCELLED"
    # Fetched again: the same UIDs (a calendar updates its events in place).
    assert set(events((await fetch(system, url))[2])) == set(found)

    revoked = await alice.delete("/me/calendar-feed")
    assert revoked.status == 204
    status, _, text = await fetch(system, url)
    assert status == 404 and "secret plan" not in text
    assert (await alice.get("/me/calendar-feed")).body == {"exists": False}
    token = url.rsplit("/", 1)[1].removesuffix(".ics")
    assert token not in caplog.text  # the credential is never logged


async def test_a_new_address_replaces_the_old_one(system: ApiSystem) -> None:
    bob = await system.as_user("bob")
    first = await new_feed(bob)
    second = await new_feed(bob)

    assert first != second
    assert (await fetch(system, first))[0] == 404
    assert (await fetch(system, second))[0] == 200


async def test_another_feed_shows_alice_only_on_watched_gpus_and_never_her_description(
    system: ApiSystem,
) -> None:
    alice, bob = await system.as_user("alice"), await system.as_user("bob")
    gpu = await system.gpu(1, 2)
    place = f"{gpu['host']}:{gpu['index']}"
    hers = await book(alice, place, 3, "alice's sweep", "a private note")
    url = await new_feed(bob)
    site = urlsplit(url).hostname
    uid = f"reservation-{hers['id']}@{site}"

    status, _, plain = await fetch(system, url)
    assert status == 200
    assert uid not in events(plain)
    assert "alice" not in plain

    status, _, watching = await fetch(system, url, gpus=place)
    assert status == 200
    seen = events(watching)[uid]
    assert str(seen["summary"]) == "alice: alice's sweep"
    assert str(seen["location"]) == place
    assert "a private note" not in watching
    # Only the watched GPU: alice's booking elsewhere stays out.
    elsewhere = await book(alice, f"{gpu['host']}:3", 3, "alice elsewhere")
    status, _, again = await fetch(system, url, gpus=place)
    assert f"reservation-{elsewhere['id']}@{site}" not in events(again)

    status, _, refused = await fetch(system, url, gpus="no-such-host:0")
    assert status == 400 and "no-such-host:0" in refused


async def test_signing_in_is_needed_to_make_or_revoke_and_bad_tokens_are_404(
    system: ApiSystem,
) -> None:
    anonymous = system.anonymous()
    for method in ("GET", "POST", "DELETE"):
        answer = await anonymous.request(method, "/me/calendar-feed")
        assert answer.status == 401, method
        assert answer.body["error"] == "authentication_required"
    unknown = await anonymous.get("/calendar/not-a-real-token.ics")
    assert unknown.status == 404
    assert unknown.body["error"] == "not_found"


async def test_the_cli_prints_a_working_address_and_revokes_it(
    system: ApiSystem,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin = await system.as_user("admin")
    gpu = await system.gpu(0, 1)
    place = f"{gpu['host']}:{gpu['index']}"
    booked = await book(admin, place, 4, "admin's maintenance")
    cli = Cli(system, tmp_path, monkeypatch, capsys)
    await cli.login("admin")

    ran = await cli("calendar-feed", "--watch", place)

    assert ran.code == 0, ran
    url = ran.out.splitlines()[0]
    assert url.endswith(f".ics?gpus={place}")
    status, _, text = await fetch(system, url)
    assert status == 200
    assert f"reservation-{booked['id']}@" in text

    revoked = await cli("calendar-feed", "--revoke")
    assert revoked.code == 0, revoked
    assert (await fetch(system, url))[0] == 404
