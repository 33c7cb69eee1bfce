"""Safe by default, end to end on the simulated fleet served over real SSH, on the in-process
bus and on RabbitMQ, through the HTTP API and the `warden` CLI:

- booking a GPU someone else uses now succeeds (201) with a warning naming who and which
  processes; "any N" takes the GPUs idle now first;
- with the shipped escalation (no `steps` configured) a squatter on a reserved GPU gets a
  terminal message, the offender and the owner an e-mail, the chat a message, and the process
  is still running once every step due has been taken: nothing ahead would stop it.

Deadlines are generous and nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiosmtpd.controller import Controller

from services.cli import main
from services.shared.bus import Bus
from services.shared.config.escalation import STOPPING_ACTIONS
from services.shared.contracts import Envelope
from services.sim.model import SimFleet
from tests.support.accounts import PASSWORD
from tests.support.events import record
from tests.support.fleet import served_fleet
from tests.support.mailbox import Mailbox
from tests.support.polling import until
from tests.support.ports import free_port
from tests.support.system import (
    BUS_KINDS,
    bus_config,
    buses,
    discovered_gpu,
    running_services,
    system_settings,
)
from tests.support.webhooks import webhook_receiver

pytestmark = pytest.mark.timeout(240)

API = "/api/v1"
DEADLINE_S = 30.0
SERVICES = ["monitor", "reservations", "violations", "gateway"]


@dataclass
class System:
    fleet: SimFleet
    bus: Bus
    base: str
    http: aiohttp.ClientSession
    webhook: list[dict[str, Any]]
    mailbox: Mailbox
    events: list[Envelope] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return self.fleet.hosts[0]

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == event_type]

    async def until(self, condition: Callable[[], Any], what: str) -> Any:
        return await until(
            condition, what, DEADLINE_S, report=lambda: f"events {[e.type for e in self.events]}"
        )

    async def call(
        self, user: str, method: str, path: str, **kw: Any
    ) -> tuple[int, dict[str, Any]]:
        if user not in self.tokens:
            async with self.http.post(
                f"{self.base}{API}/session", json={"username": user, "password": PASSWORD}
            ) as answer:
                assert answer.status == 201, await answer.text()
                self.tokens[user] = (await answer.json())["access_token"]
        headers = {"Authorization": f"Bearer {self.tokens[user]}"}
        async with self.http.request(
            method, f"{self.base}{API}{path}", headers=headers, **kw
        ) as answer:
            return answer.status, await answer.json()

    async def slot(self, user: str, count: int) -> list[int]:
        """GPU indexes of the earliest slot for `count` GPUs, 30 minutes, from now."""
        params = {"count": str(count), "duration_minutes": "30"}
        status, found = await self.call(user, "GET", "/reservations/slot", params=params)
        assert status == 200, found
        return [gpu["index"] for gpu in found["gpus"]]

    def alive(self, pid: int) -> bool:
        return any(p["pid"] == pid for p in self.fleet.snapshot(self.host)["hosts"][0]["processes"])


@pytest.fixture(params=BUS_KINDS)
async def system(
    request: pytest.FixtureRequest, tmp_path: Path, cheap_passwords: None
) -> AsyncIterator[System]:
    received: list[dict[str, Any]] = []
    mailbox = Mailbox()
    smtp_port = free_port()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    receiver = await webhook_receiver(received, "/hooks/chat")
    hook_port = receiver.addresses[0][1]
    try:
        async with served_fleet(SimFleet(1, 4, seed=3, churn=False), tmp_path) as served:
            port = free_port()
            settings = await system_settings(
                tmp_path,
                served,
                bus=bus_config(request),
                gateway={"port": port, "frontend_dir": str(tmp_path / "no-frontend")},
                monitor={"interval_s": 0.5},
                # No `steps`: the shipped escalation is what is tested.
                violations={
                    "smtp_host": "127.0.0.1",
                    "smtp_port": smtp_port,
                    "smtp_security": "none",
                    "webhooks": [{"url": f"http://127.0.0.1:{hook_port}/hooks/chat"}],
                },
            )
            async with (
                buses(settings, request.param) as (bus, client),
                running_services(SERVICES, settings, request.param, bus),
                aiohttp.ClientSession() as http,
            ):
                base = f"http://127.0.0.1:{port}"
                found = System(served.fleet, client, base, http, received, mailbox)
                await record(client, found.events, "violations")
                for index in range(4):  # the reservations service knows every GPU
                    await discovered_gpu(client, found.host, index)
                await found.until(lambda: _answers(http, base), "the gateway")
                yield found
    finally:
        await receiver.cleanup()
        smtp.stop()


async def _answers(http: aiohttp.ClientSession, base: str) -> bool:
    """The gateway listens (its health is not all ok here: the jobs service does not run)."""
    try:
        async with http.get(f"{base}{API}/health"):
            return True
    except aiohttp.ClientError:
        return False


async def test_any_n_takes_idle_gpus_and_booking_one_in_use_warns_who_and_what(
    system: System, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    host = system.host
    squat = system.fleet.start_process(host, 0, "bob", "python squat.py --gpu 0")
    other = system.fleet.start_process(host, 1, "bob", "python other.py")

    # By host and index "any 1" would be GPU 0; bob uses 0 and 1 now, so 2 once that is known.
    await system.until(lambda: _first_is(system, 2), "any 1 to take the first idle GPU")
    assert await system.slot("alice", 2) == [2, 3]
    picked = await system.slot("alice", 3)  # too few idle: a busy one too, idle ones first
    assert picked[:2] == [2, 3] and picked[2] in (0, 1)

    start = datetime.now(UTC)
    status, made = await system.call(
        "alice",
        "POST",
        "/reservations",
        json={
            "gpus": [f"{host}:0", f"{host}:2"],
            "start": start.isoformat(),
            "duration_minutes": 30,
            "title": "now",
        },
    )
    assert status == 201, made
    [warning] = made["warnings"]
    assert (warning["host"], warning["gpu_index"]) == (host, 0)
    assert warning["gpu_uuid"] == next(g["uuid"] for g in made["gpus"] if g["index"] == 0)
    assert warning["processes"] == [
        {"pid": squat, "user": "bob", "command": "python squat.py --gpu 0"}
    ]
    assert "bob" in warning["message"] and str(squat) in warning["message"]

    # A booking that starts later says nothing about now.
    later = (start + timedelta(hours=3)).isoformat()
    body = {"gpus": [f"{host}:1"], "start": later, "duration_minutes": 30, "title": "later"}
    status, made = await system.call("alice", "POST", "/reservations", json=body)
    assert (status, made["warnings"]) == (201, [])

    # The CLI prints the warning of a booking that starts now.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("WARDEN_PASSWORD", PASSWORD)
    monkeypatch.delenv("WARDEN_SERVER", raising=False)
    login = ["login", "--server", system.base, "--user", "alice"]
    assert await asyncio.to_thread(main, login) == 0
    capsys.readouterr()
    reserve = ["reserve", f"{host}:1", "--duration", "30m", "--title", "cli"]
    assert await asyncio.to_thread(main, reserve) == 0
    printed = capsys.readouterr()
    assert "reserved:" in printed.out
    assert "warning:" in printed.err
    assert f"{host}:1 is in use now by bob" in printed.err
    assert f"python other.py (pid {other}" in printed.err


async def _first_is(system: System, index: int) -> bool:
    return await system.slot("alice", 1) == [index]


async def test_the_shipped_steps_tell_people_and_never_stop_the_process(system: System) -> None:
    fleet, host = system.fleet, system.host
    start = datetime.now(UTC)
    body = {"gpus": [f"{host}:3"], "start": start.isoformat(), "duration_minutes": 60}
    status, made = await system.call("alice", "POST", "/reservations", json={**body, "title": "x"})
    assert (status, made["warnings"]) == (201, [])  # nobody on it yet
    tty = fleet.login(host, "bob")
    pid = fleet.start_process(host, 3, "bob", "python steal_gpu.py")

    opened = (await system.until(lambda: system.of("violation.opened"), "violation.opened"))[0]
    assert (opened["offender"], opened["owner"], opened["pids"]) == ("bob", "alice", [pid])
    incident_id = opened["incident_id"]

    # Every step due at once: the terminal message, e-mail and chat to offender and owner.
    messages = await system.until(lambda: fleet.tty_messages(host, tty), "terminal message")
    assert "alice" in messages[0]
    assert not any(word in messages[0].lower() for word in ("kill", "terminat"))
    await system.until(lambda: len(system.mailbox.messages) >= 2, "two e-mails")
    recipients = sorted(rcpt for rcpts, _ in system.mailbox.messages for rcpt in rcpts)
    assert recipients == ["alice@lab.example", "bob@lab.example"]
    hook = (await system.until(lambda: system.webhook, "the chat message"))[0]
    assert "bob" in str(hook)

    def acted() -> set[str]:
        return {e["handler"] for e in timeline if e["kind"] == "action"}

    timeline: list[dict[str, Any]] = []

    async def all_done() -> bool:
        found = await system.bus.call("violations", "get_incident", {"id": incident_id})
        timeline[:] = found["timeline"]
        return {"terminal", "email", "webhook"} <= acted()

    await system.until(all_done, "the actions of every step due")
    await system.until(lambda: len(system.of("violation.escalated")) >= 3, "three steps")
    escalated = system.of("violation.escalated")
    assert sorted(e["step_index"] for e in escalated) == [0, 1, 2]
    # What is still ahead only tells the admins: nothing would ever stop bob's process.
    ahead = {u["action"] for e in escalated for u in e["upcoming"]}
    assert ahead == {"email", "webhook"}
    assert not {e["action"] for e in escalated} & set(STOPPING_ACTIONS)
    assert not acted() & set(STOPPING_ACTIONS)
    assert system.alive(pid)
    incident = await system.bus.call("violations", "get_incident", {"id": incident_id})
    assert incident["status"] == "open"
