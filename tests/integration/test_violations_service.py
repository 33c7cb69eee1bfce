"""The violations service from its composition root, on SQLite and PostgreSQL.

Reservations and process snapshots arrive as events, as from the reservations and monitor
services; what the service publishes is recorded from its exchange. Handlers are off here
(`handlers = []`): tests/e2e drives them.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from services.accounts import users as accounts
from services.reservations.service import start as start_reservations
from services.reservations.store import Store as ReservationsStore
from services.shared.bus import Teardown
from services.shared.bus.inproc import InProcessBus
from services.shared.config import Settings, WebhookTarget, load_settings
from services.shared.contracts import Envelope
from services.shared.errors import InvalidRequest, NotFound
from services.shared.remote.ssh import host_key_changed
from services.shared.runtime import ServiceContext
from services.shared.storage import db
from services.violations.actions.mail import MailSender
from services.violations.actions.remote import SshHostShell
from services.violations.actions.webhook import WebhookSender
from services.violations.responders import LATE, NOT_TAKEN, Responders
from services.violations.service import start as start_violations
from tests.support.events import record
from tests.support.polling import until

GPU = "GPU-h1-2"


def settings_for(url: str, tmp_path: Path, **violations: str) -> Settings:
    environ = {
        "WARDEN_STORAGE_DATABASE_URL": url,
        "WARDEN_STORAGE_DATA_DIR": str(tmp_path),
        "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(48),
        "WARDEN_VIOLATIONS_HANDLERS": "",
        "WARDEN_VIOLATIONS_STEPS": "0s webhook owner+admins, 1s email admins, 4s kill",
        "HOME": str(tmp_path),
    }
    environ.update({f"WARDEN_VIOLATIONS_{k.upper()}": v for k, v in violations.items()})
    return load_settings(None, environ=environ)


@dataclass
class Running:
    bus: InProcessBus
    settings: Settings
    events: list[Envelope] = field(default_factory=list)
    stop: Teardown | None = None

    async def start(self) -> None:
        self.stop = await start_violations(ServiceContext("violations", self.settings, self.bus))

    async def restart(self) -> None:
        assert self.stop is not None
        await self.stop()
        await self.start()

    async def call(self, method: str, **args: Any) -> Any:
        return await self.bus.call("violations", method, args, timeout=30)

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == event_type]

    async def until(self, condition: Callable[[], object], what: str, timeout: float = 10) -> None:
        await until(
            condition, what, timeout, report=lambda: f"events: {[e.type for e in self.events]}"
        )

    async def reserve(
        self, rid: int = 7, owner: str = "alice", guests: tuple[str, ...] = (), **times: datetime
    ) -> dict[str, Any]:
        start = times.get("start", datetime.now(UTC) - timedelta(minutes=5))
        data = {
            "id": rid,
            "owner": owner,
            "guests": list(guests),
            "gpus": [{"uuid": GPU, "host": "h1", "index": 2}],
            "start": start.isoformat(),
            "end": times.get("end", start + timedelta(hours=2)).isoformat(),
            "title": "training",
            "status": "active",
            "created_by": owner,
        }
        await self.bus.emit("reservation.created", data, source="reservations")
        return data

    async def observe(self, *processes: tuple[int, str], at: datetime | None = None) -> None:
        moment = at or datetime.now(UTC)
        await self.bus.emit(
            "processes.observed",
            {
                "host": "h1",
                "observed_at": moment.isoformat(),
                "processes": [
                    {
                        "gpu_uuid": GPU,
                        "pid": pid,
                        "user": user,
                        "command": f"python train_{user}.py",
                        "used_memory_mib": 1024.0,
                        "started_at": (moment - timedelta(seconds=30)).isoformat(),
                    }
                    for pid, user in processes
                ],
            },
            source="monitor",
        )


async def _nothing(_args: dict[str, Any]) -> list[Any]:
    return []


async def _contacts(_args: dict[str, Any]) -> dict[str, Any]:
    return {"users": {}, "admins": [{"username": "root", "email": None}]}


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/violations.db"
    return str(request.getfixturevalue("pg_url"))


async def _running(url: str, tmp_path: Path, **violations: str) -> AsyncIterator[Running]:
    engine = db.create_engine(url)
    await db.upgrade(engine, "violations")
    await engine.dispose()
    bus = InProcessBus()
    await bus.start()
    # The reservations service as a fresh one answers: nothing booked yet (the tests book
    # through reservation events); violations checks no process before it has answered.
    await bus.serve(
        "reservations", {"calendar": _nothing, "list_gpus": _nothing, "contacts": _contacts}
    )
    running = Running(bus, settings_for(url, tmp_path, **violations))
    await record(bus, running.events, "violations")
    await running.start()
    try:
        yield running
    finally:
        assert running.stop is not None
        await running.stop()
        await bus.close()


@pytest.fixture
async def service(database_url: str, tmp_path: Path) -> AsyncIterator[Running]:
    async for running in _running(database_url, tmp_path):
        yield running


async def test_a_foreign_process_opens_an_incident_and_escalates_step_by_step(
    service: Running,
) -> None:
    reservation = await service.reserve(guests=("carol",))
    await service.observe((100, "alice"), (101, "carol"), (200, "bob"), (201, "bob"))
    await service.until(lambda: service.of("violation.opened"), "violation.opened")
    (opened,) = service.of("violation.opened")
    assert opened["offender"] == "bob" and opened["owner"] == "alice"
    assert opened["pids"] == [200, 201] and opened["reservation_id"] == 7
    assert opened["gpu_index"] == 2 and opened["host"] == "h1"
    assert opened["reservation_end"] == reservation["end"]
    assert all(p["started_at"] for p in opened["processes"])

    await service.until(lambda: len(service.of("violation.escalated")) >= 2, "step 2")
    first, second = service.of("violation.escalated")[:2]
    assert (first["step_index"], first["action"], first["recipients"]) == (
        0,
        "webhook",
        ["owner", "admins"],
    )
    assert first["next_step"] == "1s email admins"
    assert (second["step_index"], second["action"]) == (1, "email")

    await service.observe((100, "alice"))  # bob's processes are gone
    await service.until(lambda: service.of("violation.resolved"), "violation.resolved")
    (resolved,) = service.of("violation.resolved")
    assert resolved["reason"] == "no offending process left"
    await asyncio.sleep(4.5)  # past the kill step's time: it is not taken
    assert [e["step_index"] for e in service.of("violation.escalated")] == [0, 1]

    page = await service.call("list_incidents", status="resolved")
    assert page["total"] == 1
    incident = await service.call("get_incident", id=opened["incident_id"])
    kinds = [entry["kind"] for entry in incident["timeline"]]
    assert kinds == ["opened", "escalated", "escalated", "resolved"]
    assert incident["status"] == "resolved" and incident["offender"] == "bob"


async def test_processes_coming_and_going_stay_in_one_incident(service: Running) -> None:
    await service.reserve()
    start = datetime.now(UTC)
    await service.observe((200, "bob"), at=start)
    await service.until(lambda: service.of("violation.opened"), "opened")
    await service.observe((201, "bob"), at=start + timedelta(seconds=1))
    await service.observe((201, "bob"), at=start + timedelta(seconds=2))
    await service.observe((200, "bob"), at=start + timedelta(seconds=1))  # late: ignored
    (opened,) = service.of("violation.opened")

    async def pids() -> list[int]:
        incident = await service.call("get_incident", id=opened["incident_id"])
        return [p["pid"] for p in incident["processes"]]

    for _ in range(200):
        if await pids() == [201]:
            break
        await asyncio.sleep(0.02)
    await service.observe((201, "bob"), at=start + timedelta(seconds=3))
    await asyncio.sleep(0.3)  # every snapshot, the late one too, has been handled
    assert await pids() == [201]
    incident = await service.call("get_incident", id=opened["incident_id"])
    assert [e["kind"] for e in incident["timeline"]].count("updated") == 1
    assert len(service.of("violation.opened")) == 1
    assert not service.of("violation.resolved")


async def test_cancelling_or_ending_the_reservation_resolves_its_incidents(
    service: Running,
) -> None:
    data = await service.reserve()
    await service.observe((200, "bob"))
    await service.until(lambda: service.of("violation.opened"), "opened")
    await service.bus.emit(
        "reservation.cancelled",
        {**data, "status": "cancelled", "by_rules": False},
        source="reservations",
    )
    await service.until(lambda: service.of("violation.resolved"), "resolved")
    assert service.of("violation.resolved")[0]["reason"] == "the reservation was cancelled"

    now = datetime.now(UTC)
    await service.reserve(rid=8, start=now - timedelta(minutes=1), end=now + timedelta(seconds=1))
    await service.observe((300, "eve"))
    await service.until(lambda: len(service.of("violation.opened")) == 2, "second incident")
    await service.until(lambda: len(service.of("violation.resolved")) == 2, "end by time")
    assert service.of("violation.resolved")[1]["reason"] == "the reservation ended"


async def test_unreserved_gpus_are_free_unless_strict(
    database_url: str, tmp_path: Path, service: Running
) -> None:
    await service.observe((200, "bob"))
    await asyncio.sleep(0.3)
    assert not service.of("violation.opened")
    async for strict in _running(database_url, tmp_path / "strict", mode="strict"):
        await strict.observe((200, "bob"), (1, "root"))
        await strict.until(
            lambda s=strict: len(s.of("violation.opened")) == 2,  # type: ignore[misc]
            "both offenders",
        )
        opened = strict.of("violation.opened")
        assert all(o["owner"] is None and o["mode"] == "strict" for o in opened)
        # root's python is no Xorg: only allowlisted (user, command) pairs are spared
        assert sorted(o["offender"] for o in opened) == ["bob", "root"]


async def test_a_restart_reloads_open_incidents_without_notifying_again(
    service: Running,
) -> None:
    await service.reserve()
    await service.observe((200, "bob"))
    await service.until(lambda: service.of("violation.escalated"), "first step")
    await service.restart()
    await service.reserve()  # the reservations service would re-send nothing; the book reloads
    await service.until(lambda: len(service.of("violation.escalated")) >= 2, "second step")
    await asyncio.sleep(0.5)
    steps = [e["step_index"] for e in service.of("violation.escalated")]
    assert steps == [0, 1]
    assert len(service.of("violation.opened")) == 1


async def test_a_host_back_with_another_key_is_told_to_the_admins_once(service: Running) -> None:
    since = datetime.now(UTC).isoformat()
    for reason in ("connection lost", host_key_changed("dgx3"), host_key_changed("dgx3")):
        data = {"host": "dgx3", "since": since, "reason": reason}
        await service.bus.emit("host.unreachable", data, source="monitor")

    def told() -> list[dict[str, Any]]:
        return [n for n in service.of("notification.sent") if n["kind"] == "host_key_changed"]

    await service.until(told, "the admins told")
    await asyncio.sleep(0.3)  # the redelivered reason has been handled too
    (note,) = told()
    assert note["user"] == "root" and note["title"] == "dgx3 presents another SSH host key"
    assert "man-in-the-middle" in note["text"]


async def test_records_actions_and_refuses_bad_arguments(service: Running) -> None:
    await service.reserve()
    await service.observe((200, "bob"))
    await service.until(lambda: service.of("violation.opened"), "opened")
    incident_id = service.of("violation.opened")[0]["incident_id"]
    answer = await service.call(
        "record_actions",
        incident_id=incident_id,
        step_index=0,
        handler="webhook",
        outcomes=[{"target": "lab-chat", "ok": True, "detail": "200"}],
    )
    assert answer == {"recorded": 1}
    timeline = (await service.call("get_incident", id=incident_id))["timeline"]
    assert timeline[-1]["handler"] == "webhook" and timeline[-1]["ok"] is True
    with pytest.raises(NotFound):
        await service.call("get_incident", id="no-such-incident")
    with pytest.raises(InvalidRequest):
        await service.call("list_incidents", limit=0)
    with pytest.raises(InvalidRequest):
        await service.call("record_actions", incident_id=incident_id, handler="x")
    mine = await service.call("list_incidents", involving="alice")
    assert mine["total"] == 1
    assert (await service.call("list_incidents", involving="mallory"))["total"] == 0


async def test_the_list_says_what_became_of_the_last_step(service: Running) -> None:
    await service.reserve()
    await service.observe((200, "bob"))
    await service.until(lambda: len(service.of("violation.escalated")) >= 2, "step 2")
    await service.observe()  # bob's process is gone: no step after the e-mail one is taken
    await service.until(lambda: service.of("violation.resolved"), "resolved")
    incident_id = service.of("violation.opened")[0]["incident_id"]

    async def listed() -> dict[str, Any]:
        [incident] = (await service.call("list_incidents"))["incidents"]
        assert incident["id"] == incident_id
        return dict(incident["last_step"])

    taken = await listed()
    assert taken.pop("taken_at")
    assert taken == {
        "index": 1,
        "step": "1s email admins",
        "handler": "email",
        "outcome": "pending",
        "detail": None,
    }
    why = "e-mail is not configured (smtp_host)"
    for step_index, handler, outcomes in [
        (0, "webhook", [{"target": "lab-chat", "ok": True, "detail": "200"}]),
        (1, "email", [{"target": "admin", "ok": False, "detail": why}]),
        (1, "email", [{"target": "root", "ok": False, "detail": why}]),
    ]:
        await service.call(
            "record_actions",
            incident_id=incident_id,
            step_index=step_index,
            handler=handler,
            outcomes=outcomes,
        )
    failed = await listed()
    assert (failed["index"], failed["outcome"], failed["detail"]) == (1, "failed", why)
    detail = await service.call("get_incident", id=incident_id)
    assert detail["last_step"] == {**failed, "taken_at": detail["last_step"]["taken_at"]}


async def test_reservations_are_loaded_from_the_reservations_service_at_start(
    tmp_path: Path, cheap_passwords: None
) -> None:
    """The real reservations service answers; no reservation event is replayed."""
    url = f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    engine = db.create_engine(url)
    await db.upgrade(engine, "reservations")
    async with ReservationsStore(engine).write() as conn:
        for name in ("alice", "bob"):
            await accounts.create_user(
                conn,
                username=name,
                email=f"{name}@lab.example",
                password="pw-123456",
                is_admin=name == "alice",
                actor="test",
            )
    await engine.dispose()
    bus = InProcessBus()
    await bus.start()
    reservations_settings = settings_for(url, tmp_path)
    stop_reservations = await start_reservations(
        ServiceContext("reservations", reservations_settings, bus)
    )
    try:
        await bus.emit(
            "gpu.discovered",
            {"host": "h1", "uuid": GPU, "index": 2, "name": "A100", "memory_total_mib": 1.0},
            source="monitor",
        )
        start = (datetime.now(UTC) + timedelta(minutes=2)).replace(second=0, microsecond=0)
        created = None
        for _ in range(100):  # the GPU arrives through an event: wait until it is known
            try:
                created = await bus.call(
                    "reservations",
                    "create_reservation",
                    {
                        "actor": "alice",
                        "gpus": [GPU],
                        "start": start.isoformat(),
                        "end": (start + timedelta(hours=1)).isoformat(),
                        "title": "mine",
                    },
                )
                break
            except InvalidRequest:
                await asyncio.sleep(0.05)
        assert created is not None
        vdb = f"sqlite+aiosqlite:///{tmp_path}/v2.db"
        engine = db.create_engine(vdb)
        await db.upgrade(engine, "violations")
        await engine.dispose()
        running = Running(bus, settings_for(vdb, tmp_path))
        await record(bus, running.events, "violations")
        await running.start()
        try:
            # The monitor sends a snapshot every poll; the first may come before the load.
            for poll in range(200):
                await running.observe((200, "bob"), at=start + timedelta(seconds=10 + poll))
                if running.of("violation.opened"):
                    break
                await asyncio.sleep(0.05)
            await running.until(lambda: running.of("violation.opened"), "opened from the RPC")
            assert running.of("violation.opened")[0]["reservation_id"] == created["id"]
        finally:
            assert running.stop is not None
            await running.stop()
    finally:
        await stop_reservations()
        await bus.close()


@pytest.fixture
async def posts() -> AsyncIterator[tuple[WebhookTarget, list[dict[str, Any]]]]:
    """A chat webhook on 127.0.0.1, and the messages it was posted."""
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hooks/lab", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    url = f"http://{host}:{port}/hooks/lab"
    try:
        yield WebhookTarget(url=url, format="slack", name="lab"), received
    finally:
        await runner.cleanup()


@pytest.fixture
async def signalling(database_url: str, tmp_path: Path) -> AsyncIterator[Running]:
    async for running in _running(database_url, tmp_path, steps="0s webhook owner, 0s kill"):
        yield running


async def test_a_step_due_while_open_goes_out_late_once_after_the_incident_resolved(
    signalling: Running, posts: tuple[WebhookTarget, list[dict[str, Any]]]
) -> None:
    """The broker held the steps back (stopped, then started with the reservation ended): the
    handlers get them after the resolution. A message goes out, once, marked late; a signal
    is not sent to processes that no longer offend."""
    service, (target, received) = signalling, posts
    data = await service.reserve()
    for _ in range(200):  # the reservation's event and the snapshot's may cross
        await service.observe((200, "bob"))
        if service.of("violation.opened"):
            break
        await asyncio.sleep(0.05)
    await service.until(lambda: len(service.of("violation.escalated")) == 2, "both steps")
    await service.bus.emit("reservation.ended", data, source="reservations")
    await service.until(lambda: service.of("violation.resolved"), "resolved")

    violations = replace(service.settings.violations, handlers=("webhook", "kill"))
    settings = replace(service.settings, violations=replace(violations, webhooks=(target,)))
    webhooks = WebhookSender.from_settings(settings.violations)
    await webhooks.start()
    consumers = Responders(
        service.bus,
        settings,
        shell=SshHostShell(settings.ssh),
        mail=MailSender(settings.violations.smtp),
        webhooks=webhooks,
    ).consumers()
    try:
        steps = [e for e in service.events if e.type == "violation.escalated"]
        for envelope in [*steps, *steps]:  # delivered late, then once more
            await consumers["webhook"](envelope)
            await consumers["kill"](envelope)
    finally:
        await webhooks.close()
    assert len(received) == 1
    incident = await service.call("get_incident", id=steps[0].data["incident_id"])
    actions = [e for e in incident["timeline"] if e["kind"] == "action"]
    taken = {e["handler"]: e for e in actions}
    assert len(actions) == 2 and sorted(taken) == ["kill", "webhook"]
    assert taken["webhook"]["ok"] is True and taken["webhook"]["target"] == "lab"
    assert taken["webhook"]["detail"].startswith(LATE)
    assert taken["kill"]["ok"] is False and taken["kill"]["detail"] == NOT_TAKEN
