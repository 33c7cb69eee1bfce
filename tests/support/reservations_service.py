"""The reservations service on the in-process bus: tests/integration/test_reservations_service_*.py.

Fixtures `database_url` (SQLite and PostgreSQL) and `service` (the service from its composition
root, the GPUs of `HOSTS` discovered as from the monitor, the accounts admin, alice and bob);
`Service` (its RPC calls and the events it sent), `at(hours)` (times in one day of next week) and
`book(...)`.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.accounts import users as accounts
from services.reservations.service import start as start_reservations
from services.reservations.store import Store
from services.shared.bus.inproc import InProcessBus
from services.shared.config import load_settings
from services.shared.contracts import Envelope
from services.shared.runtime import ServiceContext
from services.shared.storage import db
from tests.support.events import record
from tests.support.polling import until

HOSTS = {"dgx1": 4, "dgx2": 4}


def uuid_of(host: str, index: int) -> str:
    return f"GPU-{host}-{index}"


@dataclass
class Service:
    bus: InProcessBus
    events: list[Envelope]

    async def call(self, method: str, **args: Any) -> Any:
        return await self.bus.call("reservations", method, args, timeout=30)

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == event_type]

    async def until(self, condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
        await until(condition, what, timeout)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def service(
    database_url: str, tmp_path: Path, cheap_passwords: None
) -> AsyncIterator[Service]:
    url = database_url
    settings = load_settings(
        None,
        environ={
            "WARDEN_STORAGE_DATABASE_URL": url,
            "WARDEN_STORAGE_DATA_DIR": str(tmp_path),
            "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(48),
            "HOME": str(tmp_path),
        },
    )
    engine = db.create_engine(url)
    await db.upgrade(engine, "reservations")
    async with Store(engine).write() as conn:  # the first admin, as `warden init` makes it
        await accounts.create_user(
            conn,
            username="admin",
            email="admin@lab.example",
            password="admin-password",
            is_admin=True,
            actor="test",
        )
    await engine.dispose()
    bus = InProcessBus()
    await bus.start()
    events: list[Envelope] = []
    await record(bus, events, "reservations")
    stop = await start_reservations(ServiceContext("reservations", settings, bus))
    running = Service(bus, events)
    try:
        for host, count in HOSTS.items():
            for index in range(count):
                await bus.emit(
                    "gpu.discovered",
                    {
                        "host": host,
                        "uuid": uuid_of(host, index),
                        "index": index,
                        "name": "NVIDIA A100-SXM4-40GB" if host == "dgx1" else "NVIDIA H100",
                        "memory_total_mib": 40960.0,
                    },
                    source="monitor",
                )
        for name in ("alice", "bob"):
            await running.call(
                "create_user",
                actor="admin",
                username=name,
                email=f"{name}@lab.example",
                password=f"{name}-password",
            )

        async def every_gpu_known() -> bool:
            return len(await running.call("list_gpus")) >= sum(HOSTS.values())

        await until(every_gpu_known, "the GPUs arriving", timeout=10)
        yield running
    finally:
        await stop()
        await bus.close()


def _next_wednesday() -> datetime:
    today = datetime.now(UTC).replace(hour=8, minute=0, second=0, microsecond=0)
    return today + timedelta(days=(2 - today.weekday()) % 7 + 7)


BASE = _next_wednesday()  # 08:00 UTC: every test's hours fall in one day of one week


def at(hours: float) -> str:
    return (BASE + timedelta(hours=hours)).isoformat()


async def book(
    service: Service, actor: str, gpus: list[str], start: float, end: float, **kw: Any
) -> Any:
    made = await service.call(
        "create_reservation",
        actor=actor,
        gpus=gpus,
        start=at(start),
        end=at(end),
        title=kw.pop("title", f"{actor}'s run"),
        **kw,
    )
    # Only the answer to a booking says what runs on its GPUs now: nothing, next week.
    assert made.pop("warnings") == []
    return made


G0, G1, G2 = uuid_of("dgx1", 0), uuid_of("dgx1", 1), uuid_of("dgx1", 2)
