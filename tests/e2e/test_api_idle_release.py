"""Idle reservations given back, end to end: the simulated fleet (its GPUs idle unless a process
is started), the services on the in-process bus, the gateway over HTTP, and a double of the one
notification path (`violations.notify`) that records what it is asked to send.

Policies in seconds (fractional minutes): on sim-001 an idle reservation is told after 3 s and
released 60 s later (time to answer); on sim-002 told after 3 s and released 6 s later.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import pytest_asyncio

from services.shared.contracts import Envelope
from tests.e2e.api import ApiClient, ApiSystem, running_system
from tests.e2e.test_cli_client import Cli
from tests.support.events import record
from tests.support.notify_double import NotifyDouble

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

# No violations service: the double alone answers violations.notify.
SERVICES = ["monitor", "reservations", "jobs", "gateway"]


def policy(grace_minutes: float) -> dict[str, float]:
    return {
        "below_util_percent": 5,
        "below_memory_mib": 1024,
        "for_minutes": 0.05,
        "grace_minutes": grace_minutes,
        "snooze_minutes": 10,
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[ApiSystem, NotifyDouble, list[Envelope]]]:
    async with running_system(tmp_path_factory.mktemp("api-idle"), services=SERVICES) as system:
        double = NotifyDouble(system.bus)
        await double.serve()
        events: list[Envelope] = []
        await record(system.bus, events, "reservations", "reservation.*")
        admin = await system.as_user("admin")
        for host, grace in ((system.fleet.hosts[0], 1.0), (system.fleet.hosts[1], 0.1)):
            made = await admin.post(
                "/rules",
                {
                    "name": f"idle on {host}",
                    "users": ["alice"],
                    "hosts": [host],
                    "idle_policy": policy(grace),
                },
            )
            assert made.status == 201, made.body
            assert made.body["idle_policy"] == policy(grace)
        yield system, double, events


async def book_now(
    system: ApiSystem, client: ApiClient, host: int, index: int, start: str | None = None
) -> dict[str, Any]:
    gpu = await system.gpu(host, index)
    made = await client.post(
        "/reservations",
        {
            "gpus": [gpu["uuid"]],
            "start": start or datetime.now(UTC).replace(microsecond=0).isoformat(),
            "duration_minutes": 60,
            "title": f"training on {index}",
        },
    )
    assert made.status == 201, made.body
    body: dict[str, Any] = made.body
    return body


async def notice_of(system: ApiSystem, double: NotifyDouble, reservation_id: int) -> dict[str, Any]:
    async def told() -> dict[str, Any] | None:
        found = double.of_kind("reservation_idle", f"reservation:{reservation_id}:")
        return found[-1] if found else None

    notice: dict[str, Any] = await system.until(told, f"the idle notice of {reservation_id}")
    return notice


def token_and_action(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    assert parts.path.startswith("/idle/")
    return parts.path.rsplit("/", 1)[1], parse_qs(parts.query)["action"][0]


async def test_an_idle_booking_is_told_once_with_two_links_and_keep_snoozes_it(
    system: tuple[ApiSystem, NotifyDouble, list[Envelope]],
) -> None:
    api, double, _ = system
    alice = await api.as_user("alice")
    booked = await book_now(api, alice, 0, 0)
    notice = await notice_of(api, double, booked["id"])
    assert notice["user"] == "alice"
    assert [link["label"] for link in notice["links"]] == ["I still need it", "Release now"]
    (keep_token, keep), (release_token, release) = (
        token_and_action(link["url"]) for link in notice["links"]
    )
    assert (keep, release) == ("keep", "release") and keep_token == release_token

    # Reading the link (as a mail scanner would) does nothing.
    anonymous = api.anonymous()
    for _ in range(2):
        seen = await anonymous.get(f"/idle/links/{keep_token}")
        assert seen.status == 200, seen.body
        assert seen.body["pending"] is True and seen.body["id"] == booked["id"]
    waiting = await alice.get("/me/idle")
    assert [n["id"] for n in waiting.body] == [booked["id"]]
    assert waiting.body[0]["release_at"] is not None

    kept = await anonymous.post(f"/idle/links/{keep_token}", {"action": "keep"})
    assert kept.status == 200, kept.body
    assert kept.body["action"] == "keep" and kept.body["snoozed_until"]
    again = await anonymous.post(f"/idle/links/{release_token}", {"action": "release"})
    assert again.status == 409, again.body  # single use: the notice was answered
    assert (await anonymous.get(f"/idle/links/{keep_token}")).body["pending"] is False
    forged = keep_token[:-1] + ("0" if keep_token[-1] != "0" else "1")
    assert (await anonymous.get(f"/idle/links/{forged}")).status == 404

    still = await alice.get(f"/reservations/{booked['id']}")
    assert still.body["status"] == "active" and still.body["end"] == booked["end"]
    assert (await alice.get("/me/idle")).body == []
    # Snoozed for 10 minutes: the counts in the last test show no second notice of it.


async def test_no_answer_releases_the_rest_and_a_busy_booking_is_left_alone(
    system: tuple[ApiSystem, NotifyDouble, list[Envelope]],
) -> None:
    api, double, events = system
    alice, bob = await api.as_user("alice"), await api.as_user("bob")
    host = api.fleet.hosts[1]
    # GPU 1 is busy (4 GiB used) for the whole test: never idle, never told.
    api.fleet.start_process(host, 1, "alice", "python train.py", used_memory_mib=4096)
    busy = await book_now(api, alice, 1, 1)
    idle = await book_now(api, alice, 1, 0)
    notice = await notice_of(api, double, idle["id"])
    token, _ = token_and_action(notice["links"][1]["url"])

    async def released() -> Envelope | None:
        for event in events:
            if event.type == "reservation.released_idle" and event.data["id"] == idle["id"]:
                return event
        return None

    event = await api.until(released, "the idle reservation released")
    assert event.data["reason"] == "idle" and event.data["released_by"] == "warden"
    assert event.data["notified_at"] is not None
    ended = await alice.get(f"/reservations/{idle['id']}")
    assert ended.body["status"] == "ended", ended.body
    assert datetime.fromisoformat(ended.body["end"]) < datetime.fromisoformat(idle["end"])
    [told] = double.of_kind("reservation_released", f"reservation:{idle['id']}:")
    assert told["user"] == "alice"

    # Its link is over; the GPU is free for someone else at once.
    used = await api.anonymous().post(f"/idle/links/{token}", {"action": "keep"})
    assert used.status == 409, used.body
    await book_now(api, bob, 1, 0, start=ended.body["end"])

    # The busy booking, as old as the idle one, was never told.
    assert double.of_kind("reservation_idle", f"reservation:{busy['id']}:") == []
    still = await alice.get(f"/reservations/{busy['id']}")
    assert still.body["status"] == "active"


async def test_release_now_signed_in_and_the_admins_counts(
    system: tuple[ApiSystem, NotifyDouble, list[Envelope]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, double, _ = system
    alice, bob, admin = [await api.as_user(name) for name in ("alice", "bob", "admin")]
    booked = await book_now(api, alice, 0, 2)
    await notice_of(api, double, booked["id"])
    refused = await bob.post(f"/reservations/{booked['id']}/release")
    assert refused.status == 403, refused.body
    cli = Cli(api, tmp_path, monkeypatch, capsys)
    assert (await cli.login("alice")).code == 0
    listed = await cli("idle")
    assert listed.code == 0 and f"#{booked['id']} training on 2" in listed.out, listed
    done = await cli("idle", "--release", str(booked["id"]), "--json")
    assert done.code == 0, done
    assert json.loads(done.out)["action"] == "release"
    again = await cli("idle", "--keep", str(booked["id"]))
    assert again.code == 1 and "no idle notice" in again.err, again
    assert (await alice.post(f"/reservations/{booked['id']}/keep")).status == 409
    ended = await alice.get(f"/reservations/{booked['id']}")
    assert ended.body["status"] == "ended"

    assert (await alice.get("/idle/stats")).status == 403
    stats = await admin.get("/idle/stats")
    assert stats.status == 200, stats.body
    [row] = stats.body
    assert row == {
        "user": "alice",
        "notices": 3,
        "kept": 1,
        "released_idle": 1,
        "released_by_owner": 1,
    }
