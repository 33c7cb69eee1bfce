"""The reservations service through its RPC methods and events, on SQLite and PostgreSQL:
overview, calendar, earliest slot, usage, lost GPUs, `started` once.

The service and its helpers: tests/support/reservations_service.py.
"""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.accounts import users as accounts
from services.reservations.service import start as start_reservations
from services.reservations.store import Store
from services.shared.bus.inproc import InProcessBus
from services.shared.config import load_settings
from services.shared.contracts import Envelope
from services.shared.errors import NotFound
from services.shared.runtime import ServiceContext
from services.shared.storage import db
from tests.support.events import record
from tests.support.polling import until
from tests.support.reservations_service import (  # noqa: F401 (fixtures)
    G0,
    G1,
    G2,
    Service,
    at,
    book,
    database_url,
    service,
)


async def test_overview_calendar_and_earliest_slot(service: Service) -> None:
    mine = await book(service, "alice", [G0], 0, 2)
    theirs = await book(service, "bob", [G1], 1, 3)
    start = datetime.fromisoformat(at(0))
    overview = await service.call(
        "overview", actor="alice", start=start.isoformat(), end=at(4), slot_minutes=30
    )
    assert overview["slots"] == 8
    dgx1 = next(h for h in overview["hosts"] if h["host"] == "dgx1")
    runs = {g["index"]: g["runs"] for g in dgx1["gpus"]}
    assert runs[0] == [
        {"first": 0, "count": 4, "state": "mine", "owner": None, "reservation_id": None},
        {"first": 4, "count": 4, "state": "free", "owner": None, "reservation_id": None},
    ]
    assert runs[1][1] == {
        "first": 2,
        "count": 4,
        "state": "taken",
        "owner": "bob",
        "reservation_id": theirs["id"],
    }
    listed = await service.call("calendar", start=at(0), end=at(4))
    assert [r["id"] for r in listed] == [mine["id"], theirs["id"]]
    slot = await service.call(
        "find_slot",
        actor="alice",
        count=2,
        duration_minutes=60,
        not_before=at(0),
        host="dgx1",
        same_host=True,
    )
    assert slot["start"] == at(0)
    assert [g["index"] for g in slot["gpus"]] == [1, 2]  # bob takes GPU 1 only from 1
    slot = await service.call(
        "find_slot", actor="alice", count=4, duration_minutes=60, not_before=at(0), host="dgx1"
    )
    assert slot["start"] == at(3)  # G1 is bob's until 3
    with pytest.raises(NotFound):
        await service.call("find_slot", actor="alice", count=9, duration_minutes=60)


async def test_usage_statistics_follow_samples_and_freeze_at_the_end(service: Service) -> None:
    now = datetime.now(UTC)
    made = await service.call(
        "create_reservation",
        actor="alice",
        gpus=[G0, G1],
        title="train",
        start=now.isoformat(),
        end=(now + timedelta(hours=1)).isoformat(),
    )
    await service.until(lambda: len(service.of("reservation.started")) == 1, "started")
    for i, (util0, util1) in enumerate([(100.0, 0.0), (50.0, None), (100.0, 2.0)]):
        sample = {
            "host": "dgx1",
            "sampled_at": (datetime.now(UTC) + timedelta(milliseconds=i)).isoformat(),
            "gpus": [
                {
                    "uuid": G0,
                    "index": 0,
                    "utilization_gpu_percent": util0,
                    "memory_used_mib": 1000.0,
                },
                {"uuid": G1, "index": 1, "utilization_gpu_percent": util1, "memory_used_mib": None},
                {"uuid": G2, "index": 2, "utilization_gpu_percent": 99.0, "memory_used_mib": 9.0},
            ],
        }
        envelope = await service.bus.emit("host.sampled", sample, source="monitor")
        await service.bus.publish(envelope)  # a redelivery counts once

    async def live_samples() -> int:
        usage = (await service.call("get_reservation", id=made["id"]))["usage"]
        return 0 if usage is None else int(usage["samples"])

    async def five_counted() -> bool:
        return await live_samples() >= 5  # shown while it runs

    await until(five_counted, "the samples counted", timeout=10)
    await service.call("end_reservation", actor="alice", id=made["id"])
    await service.until(lambda: len(service.of("reservation.ended")) == 1, "ended")
    usage = service.of("reservation.ended")[0]["usage"]
    assert usage["samples"] == 5  # G1's missing figure is left out, G2 is not reserved
    assert usage["avg_utilization_percent"] == pytest.approx(252 / 5)
    assert usage["peak_utilization_percent"] == 100.0
    assert usage["idle_share"] == pytest.approx(2 / 5)
    assert usage["peak_memory_used_mib"] == 1000.0
    frozen = await service.call("get_reservation", id=made["id"])
    assert frozen["usage"]["samples"] == 5


async def test_a_gpu_that_disappears_stays_known_with_its_reservations(service: Service) -> None:
    made = await book(service, "alice", [G0], 0, 1)
    await service.bus.emit(
        "gpu.disappeared",
        {"host": "dgx1", "uuid": G0, "index": 0, "at": datetime.now(UTC).isoformat()},
        source="monitor",
    )
    await asyncio.sleep(0.1)
    gpus = {g["uuid"]: g for g in await service.call("list_gpus")}
    assert gpus[G0]["present"] is False
    assert (await service.call("get_reservation", id=made["id"]))["status"] == "active"


async def test_started_is_sent_after_a_restart_and_only_once(
    tmp_path: Path, cheap_passwords: None
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    settings = load_settings(
        None,
        environ={
            "WARDEN_STORAGE_DATABASE_URL": url,
            "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(48),
            "HOME": str(tmp_path),
        },
    )
    engine = db.create_engine(url)
    await db.upgrade(engine, "reservations")
    async with Store(engine).write() as conn:
        await accounts.create_user(
            conn, username="alice", email="alice@lab.example", password="password-1", actor="t"
        )
    await engine.dispose()
    bus = InProcessBus()
    await bus.start()
    events: list[Envelope] = []
    await record(bus, events, "reservations", "reservation.*")
    try:
        stop = await start_reservations(ServiceContext("reservations", settings, bus))
        await bus.emit(
            "gpu.discovered",
            {"host": "a", "uuid": G0, "index": 0, "name": "A100", "memory_total_mib": None},
            source="monitor",
        )
        await asyncio.sleep(0.2)
        start = datetime.now(UTC) + timedelta(seconds=1.5)
        await bus.call(
            "reservations",
            "create_reservation",
            {
                "actor": "alice",
                "gpus": [G0],
                "title": "soon",
                "start": start.isoformat(),
                "end": (start + timedelta(hours=1)).isoformat(),
            },
        )
        await stop()  # down before the start comes
        await asyncio.sleep(2.0)
        assert not [e for e in events if e.type == "reservation.started"]
        for _ in range(2):  # two restarts: the missed event once, then nothing more
            stop = await start_reservations(ServiceContext("reservations", settings, bus))
            await asyncio.sleep(1.5)
            await stop()
        started = [e for e in events if e.type == "reservation.started"]
        assert len(started) == 1
        assert (
            started[0].data["start"]
            == start.replace(microsecond=start.microsecond // 1000 * 1000).isoformat()
        )
    finally:
        await bus.close()


# --- guests (shared bookings) and contacts, for the violations service ------------------------
