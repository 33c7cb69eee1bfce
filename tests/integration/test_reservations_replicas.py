"""Two replicas of the reservations service behind RabbitMQ, sharing one database: twenty
concurrent requests for one slot still give exactly one reservation, and each event of a
change goes out once.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.accounts import users as accounts
from services.reservations.service import start as start_reservations
from services.reservations.store import Store
from services.shared.bus import Bus
from services.shared.bus.amqp import AmqpBus
from services.shared.config import load_settings
from services.shared.contracts import Envelope
from services.shared.errors import ReservationConflict
from services.shared.runtime import ServiceContext
from services.shared.storage import db
from tests.support.events import record
from tests.support.polling import until

pytestmark = pytest.mark.amqp

USERS = [f"user{i:02d}" for i in range(20)]
GPUS = ["GPU-a-0", "GPU-a-1"]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    return str(request.getfixturevalue("pg_url"))


async def prepare(url: str) -> None:
    engine = db.create_engine(url)
    await db.upgrade(engine, "reservations")
    async with Store(engine).write() as conn:
        for name in USERS:
            await accounts.create_user(
                conn,
                username=name,
                email=f"{name}@lab.example",
                password="password-1",
                actor="test",
            )
    await engine.dispose()


@pytest.fixture
async def client(
    database_url: str, amqp_url: str, tmp_path: Path, cheap_passwords: None
) -> AsyncIterator[tuple[Bus, list[Envelope]]]:
    await prepare(database_url)
    settings = load_settings(
        None,
        environ={
            "WARDEN_STORAGE_DATABASE_URL": database_url,
            "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(48),
            "HOME": str(tmp_path),
        },
    )
    buses = [AmqpBus(amqp_url, name=f"replica-{i}") for i in range(2)]
    client_bus = AmqpBus(amqp_url, name="client")
    stops = []
    events: list[Envelope] = []
    try:
        for bus in [*buses, client_bus]:
            await bus.start()
        await record(client_bus, events, "reservations", "reservation.*")
        for bus in buses:
            stops.append(await start_reservations(ServiceContext("reservations", settings, bus)))
        for index, uuid in enumerate(GPUS):
            await client_bus.emit(
                "gpu.discovered",
                {
                    "host": "a",
                    "uuid": uuid,
                    "index": index,
                    "name": "A100",
                    "memory_total_mib": 40960.0,
                },
                source="monitor",
            )

        async def every_gpu_known() -> bool:
            return len(await client_bus.call("reservations", "list_gpus", {})) >= len(GPUS)

        await until(every_gpu_known, "the GPUs arriving", timeout=10)
        yield client_bus, events
    finally:
        for stop in reversed(stops):
            await stop()
        for bus in [*buses, client_bus]:
            await bus.close()


async def test_replicas_give_one_success_for_one_slot(client: tuple[Bus, list[Envelope]]) -> None:
    bus, events = client
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    args = {
        "gpus": GPUS,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=2)).isoformat(),
        "title": "race",
    }
    results = await asyncio.gather(
        *(
            bus.call("reservations", "create_reservation", {**args, "actor": name}, timeout=30)
            for name in USERS
        ),
        return_exceptions=True,
    )
    made = [r for r in results if isinstance(r, dict)]
    assert len(made) == 1, results
    assert all(isinstance(r, ReservationConflict) for r in results if not isinstance(r, dict))
    for refused in (r for r in results if isinstance(r, ReservationConflict)):
        # Each refusal names the winner, even when the database settled the race.
        assert made[0]["owner"] in refused.message or refused.details["reasons"] == []
    listed = await bus.call(
        "reservations",
        "calendar",
        {"start": start.isoformat(), "end": (start + timedelta(hours=3)).isoformat()},
    )
    assert [r["id"] for r in listed] == [made[0]["id"]]
    await until(
        lambda: any(e.type == "reservation.created" for e in events),
        "reservation.created",
        timeout=10,
    )
    await asyncio.sleep(0.5)  # a second copy would have arrived by now
    assert [e.data["id"] for e in events if e.type == "reservation.created"] == [made[0]["id"]]
