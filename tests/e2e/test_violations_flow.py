"""A violation from start to end, on the simulated fleet served over real SSH.

Every service runs (`run_services`, as `warden run all` does) on the in-process bus and, in the
second variant, on RabbitMQ. alice reserves GPU 2 of a host; bob, logged in there, starts a
process on it. Then: violation.opened; bob's terminal gets the message (the sim's tty), a
local HTTP receiver gets the Slack message, a local SMTP server the e-mails; the kill step
ends bob's process in the sim; the incident resolves and the last step is never taken. On
RabbitMQ, the example CSV plugin is started while everything runs and receives the next
violation. Deadlines are generous and nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import csv
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from services.shared.bus import Bus
from services.shared.bus.inproc import InProcessBus
from services.shared.config import Settings
from services.shared.contracts import Envelope
from services.sim.model import SimFleet
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

ROOT = Path(__file__).resolve().parents[2]
PIKA_CONSUMER = ROOT / "examples" / "plugins" / "pika_csv" / "consumer.py"
DEADLINE_S = 30.0
STEPS = [
    "0s terminal offender",
    "0s webhook owner+admins",
    "0s email offender+admins",
    "2s kill",
    "8s webhook admins",  # after the kill resolved the incident: never taken
]


@dataclass
class System:
    fleet: SimFleet
    bus: Bus
    settings: Settings
    webhook: list[dict[str, Any]]
    mailbox: Mailbox
    events: list[Envelope] = field(default_factory=list)

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == event_type]

    async def until(self, condition: Callable[[], Any], what: str) -> Any:
        return await until(
            condition, what, DEADLINE_S, report=lambda: f"events {[e.type for e in self.events]}"
        )


@pytest.fixture(params=BUS_KINDS)
async def system(
    request: pytest.FixtureRequest, tmp_path: Path, cheap_passwords: None
) -> AsyncIterator[System]:
    kind = request.param
    received: list[dict[str, Any]] = []
    mailbox = Mailbox()
    smtp_port = free_port()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    receiver = await webhook_receiver(received, "/hooks/slack")
    hook_port = receiver.addresses[0][1]
    try:
        async with served_fleet(SimFleet(2, 4, seed=3, churn=False), tmp_path) as served:
            settings = await system_settings(
                tmp_path,
                served,
                bus=bus_config(request),
                gateway={"port": 0},
                monitor={"interval_s": 1.0},
                violations={
                    "steps": STEPS,
                    "smtp_host": "127.0.0.1",
                    "smtp_port": smtp_port,
                    "smtp_security": "none",
                    "webhooks": [
                        {
                            "url": f"http://127.0.0.1:{hook_port}/hooks/slack",
                            "format": "slack",
                            "name": "lab-chat",
                        }
                    ],
                },
            )
            services = ["monitor", "reservations", "violations", "gateway"]
            async with (
                buses(settings, kind) as (bus, client),
                running_services(services, settings, kind, bus),
            ):
                system = System(served.fleet, client, settings, received, mailbox)
                await record(client, system.events, "violations")
                yield system
    finally:
        await receiver.cleanup()
        smtp.stop()


async def _gpu(system: System, host: str, index: int) -> str:
    return str((await discovered_gpu(system.bus, host, index))["uuid"])


async def _reserve(system: System, uuid: str) -> dict[str, Any]:
    start = datetime.now(UTC)
    created: dict[str, Any] = await system.bus.call(
        "reservations",
        "create_reservation",
        {
            "actor": "alice",
            "gpus": [uuid],
            "start": start.isoformat(),
            "end": (start + timedelta(hours=1)).isoformat(),
            "title": "protected",
        },
    )
    return created


def _alive(fleet: SimFleet, host: str, pid: int) -> bool:
    return any(p["pid"] == pid for p in fleet.snapshot(host)["hosts"][0]["processes"])


async def test_a_violation_is_told_everywhere_stopped_and_resolved(
    system: System, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="warden.violations")
    fleet, host = system.fleet, system.fleet.hosts[0]
    uuid = await _gpu(system, host, 2)
    reservation = await _reserve(system, uuid)
    tty = fleet.login(host, "bob")
    pid = fleet.start_process(host, 2, "bob", "python steal_gpu.py --epochs 100")

    opened = (await system.until(lambda: system.of("violation.opened"), "violation.opened"))[0]
    assert (opened["offender"], opened["owner"]) == ("bob", "alice")
    assert (opened["host"], opened["gpu_index"], opened["pids"]) == (host, 2, [pid])
    assert opened["reservation_id"] == reservation["id"]

    # terminal: on bob's own tty, saying whose GPU it is and what happens next
    messages = await system.until(lambda: fleet.tty_messages(host, tty), "terminal message")
    assert "alice" in messages[0] and "killed" in messages[0]
    # webhook: one Slack message naming the offender
    hook = (await system.until(lambda: system.webhook, "webhook delivery"))[0]
    assert "bob" in hook["text"] and "blocks" in hook
    # e-mail: to bob (the offender) and to the admin account; alice, the owner, is told by her
    # notifications (reservation_violated: e-mail by default), not by the escalation step
    await system.until(lambda: len(system.mailbox.messages) >= 3, "three e-mails")
    steps = [(r, m) for r, m in system.mailbox.messages if m["X-Warden-Notification"] is None]
    recipients = sorted(rcpt for rcpts, _ in steps for rcpt in rcpts)
    assert recipients == ["admin@lab.example", "bob@lab.example"]
    assert all(msg["X-Warden-Incident"] == opened["incident_id"] for _, msg in steps)
    told = [(r, m) for r, m in system.mailbox.messages if m["X-Warden-Notification"]]
    assert [(r, m["X-Warden-Notification"]) for r, m in told] == [
        (["alice@lab.example"], "reservation_violated")
    ]

    # browser: bob, the offender, is told where he is signed in (his live stream)
    await system.until(
        lambda: [
            n
            for n in system.of("notification.sent")
            if n["user"] == "bob" and n["kind"] == "using_reserved_gpu"
        ],
        "the offender's browser notification",
    )

    # kill after 2 s: the process is gone in the sim, so the incident resolves
    await system.until(lambda: not _alive(fleet, host, pid), "the kill step")
    resolved = (await system.until(lambda: system.of("violation.resolved"), "resolution"))[0]
    assert resolved["reason"] == "no offending process left"

    opened_at = datetime.fromisoformat(system.events[0].occurred_at)
    await asyncio.sleep(
        max(0.0, (opened_at + timedelta(seconds=9.5) - datetime.now(UTC)).total_seconds())
    )
    assert [e["step_index"] for e in system.of("violation.escalated")] == [0, 1, 2, 3]
    assert len(system.webhook) == 1

    incident = await system.bus.call("violations", "get_incident", {"id": opened["incident_id"]})
    done = {(e["handler"], e["ok"]) for e in incident["timeline"] if e["kind"] == "action"}
    assert {("terminal", True), ("webhook", True), ("email", True), ("kill", True)} <= done
    assert incident["status"] == "resolved"
    # Operators see it at INFO: the incident opening, and each notice and e-mail going out.
    said = [r.getMessage() for r in caplog.records if r.name == "warden.violations"]
    incident_id = opened["incident_id"]
    assert any(line.startswith(f"incident {incident_id} opened: bob on {host}") for line in said)
    for handler, target in (("terminal", f"{host}:"), ("email", "bob@lab.example")):
        assert any(f"{handler} reached {target}" in line for line in said), (handler, said)
    assert not any("steal_gpu" in line for line in said)  # no message bodies


@pytest.mark.amqp
async def test_a_plugin_started_at_run_time_gets_the_next_violation(
    system: System, tmp_path: Path
) -> None:
    if isinstance(system.bus, InProcessBus):
        pytest.skip("plugins bind queues on RabbitMQ")
    fleet, host = system.fleet, system.fleet.hosts[1]
    uuid = await _gpu(system, host, 1)
    await _reserve(system, uuid)
    out = tmp_path / "violations.csv"
    plugin = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PIKA_CONSUMER),
        "--out",
        str(out),
        cwd=PIKA_CONSUMER.parent,
        env={**os.environ, "WARDEN_AMQP_URL": system.settings.bus.amqp_url},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await asyncio.sleep(1.0)  # its queue is declared and bound when it starts consuming
        fleet.start_process(host, 1, "eve", "python mine.py")
        opened = (await system.until(lambda: system.of("violation.opened"), "violation"))[0]

        def row() -> dict[str, str] | None:
            if not out.exists():
                return None
            with out.open(newline="", encoding="utf-8") as rows:
                return next(
                    (r for r in csv.DictReader(rows) if r["incident_id"] == opened["incident_id"]),
                    None,
                )

        found = await system.until(row, "the plugin's CSV row")
        assert found["offender"] == "eve"
    finally:
        plugin.terminate()
        await asyncio.wait_for(plugin.wait(), 10)
