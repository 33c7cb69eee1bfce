"""A create is carried out once, however often it arrives.

Over real RabbitMQ, on SQLite and PostgreSQL: a replica that saved a booking and died before
its answer went out leaves the request unacknowledged; the broker delivers it again, to the
other replica, which answers with the booking the first one made (the same answer), never a
409 conflict with itself. And the client's `idempotency_key` (the REST API's Idempotency-Key
header): the same create twice is one booking and the same answer; the same key for another
request is refused; another user's same key is their own.
"""

# ruff: noqa: F811 (the imported fixture `service` is the tests' parameter)

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.accounts import users as accounts
from services.reservations import api
from services.reservations.service import start as start_reservations
from services.reservations.store import Store
from services.shared.bus import RpcHandler, Teardown
from services.shared.bus.amqp import AmqpBus
from services.shared.config import Settings, load_settings
from services.shared.contracts import Envelope
from services.shared.errors import ServiceUnavailable, ValidationFailed
from services.shared.runtime import ServiceContext
from services.shared.storage import db
from tests.support.events import record
from tests.support.polling import until
from tests.support.reservations_service import (  # noqa: F401 (the fixture `service`)
    G0,
    G1,
    Service,
    at,
    book,
    service,
)

GPUS = ["GPU-a-0", "GPU-a-1"]


class DiesAfterSaving(AmqpBus):
    """A replica's bus whose create is carried out (committed), then the replica dies before
    its answer goes out: the handler waits until `dead` is set, then fails; the test closes
    the bus meanwhile, which gives the unacknowledged request back to the broker."""

    def __init__(self, url: str) -> None:
        super().__init__(url, name="doomed")
        self.saved: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.dead = asyncio.Event()

    async def serve(self, service: str, methods: Mapping[str, RpcHandler]) -> Teardown:
        table = dict(methods)
        create = table[api.CREATE_RESERVATION.name]

        async def save_then_die(args: dict[str, Any]) -> Any:
            self.saved.set_result(await create(args))
            await self.dead.wait()
            raise ServiceUnavailable("this replica died before answering")

        table[api.CREATE_RESERVATION.name] = save_then_die
        return await super().serve(service, table)


@dataclass
class Cluster:
    settings: Settings
    client: AmqpBus
    events: list[Envelope]
    amqp_url: str


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def cluster(
    database_url: str, amqp_url: str, tmp_path: Path, cheap_passwords: None
) -> AsyncIterator[Cluster]:
    engine = db.create_engine(database_url)
    await db.upgrade(engine, "reservations")
    async with Store(engine).write() as conn:
        await accounts.create_user(
            conn, username="alice", email="alice@lab.example", password="pw-alice-1", actor="t"
        )
    await engine.dispose()
    settings = load_settings(
        None,
        environ={
            "WARDEN_STORAGE_DATABASE_URL": database_url,
            "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(48),
            "HOME": str(tmp_path),
        },
    )
    client = AmqpBus(amqp_url, name="client")
    await client.start()
    events: list[Envelope] = []
    try:
        await record(client, events, "reservations", "reservation.*")
        yield Cluster(settings, client, events, amqp_url)
    finally:
        await client.close()


async def started(cluster: Cluster, bus: AmqpBus) -> Teardown:
    await bus.start()
    stop = await start_reservations(ServiceContext("reservations", cluster.settings, bus))
    for index, uuid in enumerate(GPUS):
        await cluster.client.emit(
            "gpu.discovered",
            {"host": "a", "uuid": uuid, "index": index, "name": "A100", "memory_total_mib": 1.0},
            source="monitor",
        )
    return stop


@pytest.mark.amqp
async def test_a_create_delivered_again_after_its_replica_died_is_answered_with_its_booking(
    cluster: Cluster,
) -> None:
    doomed = DiesAfterSaving(cluster.amqp_url)
    stop_doomed = await started(cluster, doomed)
    await until(lambda: _gpus_known(cluster), "the GPUs arriving", timeout=10)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    args = {
        "actor": "alice",
        "gpus": GPUS,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=2)).isoformat(),
        "title": "once",
    }
    call = asyncio.create_task(
        cluster.client.call("reservations", "create_reservation", args, timeout=60)
    )
    saved = await asyncio.wait_for(doomed.saved, 30)  # committed; its answer never goes out
    survivor = AmqpBus(cluster.amqp_url, name="survivor")
    stop_survivor = await started(cluster, survivor)
    # The doomed replica goes: its channel closes, the broker gives the request to the other.
    dying = asyncio.create_task(doomed.close())
    try:
        answer = await asyncio.wait_for(call, 60)
    finally:
        doomed.dead.set()
        await dying
        await stop_doomed()
    try:
        assert answer == saved  # the answer the first replica would have given
        listed = await cluster.client.call(
            "reservations",
            "calendar",
            {"start": start.isoformat(), "end": (start + timedelta(hours=3)).isoformat()},
        )
        assert [r["id"] for r in listed] == [saved["id"]]
        await until(
            lambda: any(e.type == "reservation.created" for e in cluster.events),
            "reservation.created",
            timeout=10,
        )
        created = [e.data["id"] for e in cluster.events if e.type == "reservation.created"]
        assert created == [saved["id"]]
    finally:
        await stop_survivor()
        await survivor.close()


async def _gpus_known(cluster: Cluster) -> bool:
    found = await cluster.client.call("reservations", "list_gpus", {}, timeout=10)
    return len(found) >= len(GPUS)


# --- the client's key (in-process bus: the `service` fixture) -------------------------------


async def test_the_same_key_twice_is_one_booking_and_the_same_answer(service: Service) -> None:
    first = await book(service, "alice", [G0], 1, 2, idempotency_key="k-1")
    again = await book(service, "alice", [G0], 1, 2, idempotency_key="k-1")
    assert again == first
    listed = await service.call("calendar", start=at(0), end=at(3))
    assert [r["id"] for r in listed] == [first["id"]]
    await service.until(lambda: bool(service.of("reservation.created")), "reservation.created")
    assert [e["id"] for e in service.of("reservation.created")] == [first["id"]]


async def test_the_same_key_at_once_is_one_booking(service: Service) -> None:
    made = await asyncio.gather(
        *(book(service, "alice", [G0, G1], 3, 4, idempotency_key="k-2") for _ in range(5))
    )
    assert len({m["id"] for m in made}) == 1
    assert all(m == made[0] for m in made)


async def test_a_key_is_answered_with_its_booking_as_it_is_now(service: Service) -> None:
    first = await book(service, "alice", [G1], 5, 6, idempotency_key="k-3")
    await service.call("cancel_reservation", actor="alice", id=first["id"], reason="")
    again = await book(service, "alice", [G1], 5, 6, idempotency_key="k-3")
    assert again["id"] == first["id"]
    assert again["status"] == "cancelled"  # not booked again behind the user's back


async def test_the_same_key_for_another_request_is_refused(service: Service) -> None:
    await book(service, "alice", [G0], 7, 8, idempotency_key="k-4")
    with pytest.raises(ValidationFailed) as refused:
        await book(service, "alice", [G0], 8, 9, idempotency_key="k-4")
    assert refused.value.details == {"field": "Idempotency-Key"}


async def test_keys_are_each_users_own(service: Service) -> None:
    alices = await book(service, "alice", [G0], 10, 11, idempotency_key="k-5")
    bobs = await book(service, "bob", [G1], 10, 11, idempotency_key="k-5")
    assert bobs["id"] != alices["id"]
    assert bobs["owner"] == "bob"
