"""Notifications end to end on RabbitMQ: every service and the gateway run, e-mail goes to a
real SMTP server (aiosmtpd) and chat to a real HTTP receiver on loopback.

A job that fails mails its owner; with the kind turned off nothing goes out; `violations.notify`
over RPC reaches the user's live stream and no one else's, is sent once per key, is rate-limited
(recorded as limited) and reaches the user's own chat webhook; a reminder comes before a
reservation starts. Deadlines are generous and nothing asserts how long anything took.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email import policy
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiosmtpd.controller import Controller

from services.notifications import api
from services.shared.bus import Bus
from services.shared.runtime import make_bus
from services.sim.model import SimFleet
from tests.e2e.api import API, EVERY_SERVICE, ApiClient, ApiSystem
from tests.e2e.test_api_stream import Stream
from tests.support.accounts import cheap_passwords
from tests.support.fleet import served_fleet
from tests.support.mailbox import Mailbox
from tests.support.polling import until
from tests.support.ports import free_port
from tests.support.system import buses, discovered_gpu, running_services, system_settings
from tests.support.webhooks import webhook_receiver

pytestmark = [pytest.mark.amqp, pytest.mark.timeout(300)]

DEADLINE_S = 60.0
PER_MINUTE = 3


@dataclass
class System:
    api: ApiSystem
    bus: Bus  # the test's own connection to RabbitMQ
    mailbox: Mailbox
    chat: list[dict[str, Any]]
    chat_url: str
    restart: Callable[[], Awaitable[None]]  # the violations service, stopped and started

    async def until(self, condition: Any, what: str) -> Any:
        return await until(condition, what, DEADLINE_S, interval=0.1)


@pytest.fixture
async def system(tmp_path: Path, amqp_url: str) -> AsyncIterator[System]:
    mailbox, chat = Mailbox(policy.default), []
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    receiver = await webhook_receiver(chat, "/hooks/alice-TOKEN-1234")
    chat_url = f"http://127.0.0.1:{receiver.addresses[0][1]}/hooks/alice-TOKEN-1234"
    fleet = SimFleet(1, 4, seed=5, churn=False)
    try:
        with cheap_passwords():
            async with served_fleet(fleet, tmp_path) as served:
                port = free_port()
                settings = await system_settings(
                    tmp_path,
                    served,
                    bus={"amqp_url": amqp_url},
                    gateway={"port": port, "frontend_dir": str(tmp_path / "no-frontend")},
                    monitor={"interval_s": 0.5},
                    jobs={"poll_interval_s": 0.3},
                    violations={
                        "smtp_host": "127.0.0.1",
                        "smtp_port": smtp.port,
                        "smtp_security": "none",
                        "notify_per_minute": PER_MINUTE,
                    },
                )
                core = [name for name in EVERY_SERVICE if name != "violations"]
                async with (
                    buses(settings, "amqp") as (bus, client),
                    running_services(core, settings, "amqp", bus),
                    running_services(
                        ["violations"], settings, "amqp", make_bus(settings, "amqp", name="v")
                    ) as violations,
                    aiohttp.ClientSession() as session,
                ):

                    async def restart() -> None:
                        await violations.stop()
                        violations.start(make_bus(settings, "amqp", name="v2"))
                        await until(lambda: _serves(client), "violations again", DEADLINE_S)

                    base = f"http://127.0.0.1:{port}"
                    apis = ApiSystem(base, settings, fleet, client, session, {})  # type: ignore[arg-type]
                    await until(lambda: _answers(session, base), "the gateway", DEADLINE_S)
                    yield System(apis, client, mailbox, chat, chat_url, restart)
    finally:
        await receiver.cleanup()
        smtp.stop()


async def _serves(bus: Bus) -> bool:
    try:
        await api.NOTIFICATION_PREFS.call(bus, {"user": "alice"}, timeout=2.0)
    except Exception:
        return False
    return True


async def _answers(session: aiohttp.ClientSession, base: str) -> bool:
    try:
        async with session.get(base + API + "/health") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def _sent(client: ApiClient) -> list[dict[str, Any]]:
    answer = await client.get("/me/notifications/sent", limit=100)
    assert answer.status == 200, answer.body
    return list(answer.body["items"])


async def _run_job(system: System, client: ApiClient, command: str, status: str) -> int:
    gpu = await discovered_gpu(system.bus, system.api.fleet.hosts[0], 1)
    job = {"name": "train", "tasks": [{"host": gpu["host"], "gpus": [1], "command": command}]}
    created = await client.post("/jobs", job)
    assert created.status == 201, created.body
    job_id = int(created.body["id"])
    assert (await client.post(f"/jobs/{job_id}/start")).status == 200

    async def ended() -> bool:
        return (await client.get(f"/jobs/{job_id}")).body["status"] == status

    await system.until(ended, f"job {job_id} {status}")
    return job_id


async def _stream(system: System, username: str) -> Stream:
    client = await system.api.as_user(username)
    response = await system.api.session.get(
        system.api.base + API + "/stream",
        headers=client.headers(),
        timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
    )
    assert response.status == 200
    return Stream(response)


async def test_a_failed_job_mails_its_owner_and_a_kind_turned_off_sends_nothing(
    system: System,
) -> None:
    alice = await system.api.as_user("alice")
    first = await _run_job(system, alice, "exit 3", "failed")
    mails = await system.until(lambda: system.mailbox.to("alice@lab.example"), "alice's e-mail")
    assert "failed" in mails[0]["Subject"] and f"#{first}" in mails[0].get_content()

    off = {"kind": "job_failed", "email": False, "chat": False, "browser": False}
    saved = await alice.put("/me/notifications", {"kinds": [off]})
    assert saved.status == 200, saved.body
    assert {**off} in saved.body["kinds"]
    second = await _run_job(system, alice, "exit 4", "failed")
    # A later job's end (browser by default) is told after the failed one was handled.
    third = await _run_job(system, alice, "exit 0", "succeeded")

    async def finished() -> list[dict[str, Any]]:
        return [s for s in await _sent(alice) if s["kind"] == "job_finished"]

    await system.until(finished, f"job {third} finished in the record")
    titles = [s["title"] for s in await _sent(alice)]
    assert len(system.mailbox.to("alice@lab.example")) == 1
    assert sum("failed" in t for t in titles) == 2  # the first job: e-mail and browser
    assert second != first


async def test_notify_reaches_only_its_user_once_per_key_within_the_rate_limit(
    system: System,
) -> None:
    alice, bob = await system.api.as_user("alice"), await system.api.as_user("bob")
    chat = await alice.put(
        "/me/notifications", {"chat_format": "slack", "chat_url": system.chat_url}
    )
    assert chat.status == 200, chat.body
    assert "TOKEN" not in str(chat.body) and chat.body["chat_handle"].endswith("1234")
    bad = await alice.put("/me/notifications", {"chat_url": system.chat_url + "x"})
    assert bad.status == 422
    alice_stream, bob_stream = await _stream(system, "alice"), await _stream(system, "bob")

    note = {
        "user": "alice",
        "kind": "reservation_idle",
        "title": "Your GPUs are idle",
        "text": "Keep the reservation?",
        "links": [{"label": "I still need it", "url": "http://warden.test/keep/1"}],
        "key": "reservation:1:idle:1",
    }
    answer = await api.NOTIFY.call(system.bus, note)
    assert answer == {
        "duplicate": False,
        "channels": {"email": "sent", "chat": "sent", "browser": "sent"},
    }
    _, shown = await alice_stream.next("notification.sent")
    assert shown["data"]["title"] == "Your GPUs are idle"
    assert shown["data"]["links"] == note["links"]
    assert (await api.NOTIFY.call(system.bus, note))["duplicate"] is True

    mail = system.mailbox.to("alice@lab.example")[0]
    assert "http://warden.test/keep/1" in mail.get_content()
    assert "I still need it" in system.chat[0]["text"]

    # bob's first notification on his stream is his own: alice's never reached it.
    mine = {**note, "user": "bob", "title": "For bob", "key": None}
    await api.NOTIFY.call(system.bus, mine)
    _, seen = await bob_stream.next("notification.sent")
    assert seen["data"]["user"] == "bob" and seen["data"]["title"] == "For bob"

    outcomes = [
        (await api.NOTIFY.call(system.bus, {**mine, "kind": "job_finished"}))["channels"]
        for _ in range(PER_MINUTE)
    ]
    assert outcomes[-1] == {"browser": "limited"}  # bob's 4th in the browser this minute
    assert ("browser", "limited") in [(s["channel"], s["outcome"]) for s in await _sent(bob)]
    assert all(s["title"] != "Your GPUs are idle" for s in await _sent(bob))


async def test_a_reminder_comes_before_a_reservation_starts_and_once_across_a_restart(
    system: System,
) -> None:
    alice = await system.api.as_user("alice")
    saved = await alice.put("/me/notifications", {"start_lead_min": 5})
    assert saved.status == 200 and saved.body["start_lead_min"] == 5

    async def book(index: int) -> tuple[int, datetime]:
        gpu = await discovered_gpu(system.bus, system.api.fleet.hosts[0], index)
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=3)
        body = {"gpus": [gpu["uuid"]], "start": start.isoformat(), "duration_minutes": 30}
        created = await alice.post("/reservations", {**body, "title": "r"})
        assert created.status == 201, created.body
        return int(created.body["id"]), start

    async def reminders_of(reservation: int) -> list[dict[str, Any]]:
        return [
            s
            for s in await _sent(alice)
            if s["kind"] == "reservation_starting" and f"#{reservation} " in s["title"]
        ]

    first, start = await book(2)
    found = await system.until(lambda: reminders_of(first), "the start reminder")
    assert found[0]["channel"] == "browser" and found[0]["outcome"] == "sent"
    assert datetime.now(UTC) < start

    # Restarted, the service reloads the coming reservations; its first pass reminds of the
    # second one and must not remind of the first again (its key was sent).
    await system.restart()
    second, _ = await book(3)
    await system.until(lambda: reminders_of(second), "the second reservation's reminder")
    assert len(await reminders_of(first)) == 1
