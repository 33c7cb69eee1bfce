"""The scrape-time metrics against the real servers: queue depths by passive declare on
RabbitMQ (the test's own vhost), and the outbox backlog on SQLite and PostgreSQL (the test's
own database)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, insert

from services.shared.bus.amqp import AmqpBus
from services.shared.bus.inproc import InProcessBus
from services.shared.bus.metered import MeteredBus
from services.shared.cluster.replicas import new_replica_id
from services.shared.contracts import Envelope, make_envelope, utc_now_iso
from services.shared.storage.db import create_engine
from services.shared.storage.outbox import Relay, outbox_table
from services.shared.storage.store import Store, now_ms


def heartbeat() -> dict[str, Any]:
    return {
        "service": "monitor",
        "replica": "x",
        "role": "active",
        "started_at": utc_now_iso(),
        "interval_s": 1.0,
        "details": {},
    }


@pytest.fixture
async def amqp(amqp_url: str) -> AsyncIterator[AmqpBus]:
    bus = AmqpBus(amqp_url, name="metrics-test")
    await bus.start()
    try:
        yield bus
    finally:
        await bus.close()


@pytest.mark.amqp
async def test_queue_depths_by_passive_declare_skip_a_missing_queue(amqp: AmqpBus) -> None:
    jobs = MeteredBus(amqp, "jobs", new_replica_id("jobs"))

    async def ignore(_envelope: Envelope) -> None:
        pass

    stop = await jobs.subscribe("monitor", "replica.heartbeat", "jobs.t", ignore)
    await stop()  # the durable queue stays, with nobody consuming it
    for _ in range(3):
        await amqp.emit("replica.heartbeat", heartbeat(), source="monitor")
    queue = "evt-monitor-replica.heartbeat--jobs.t"

    async def depth() -> dict[str, tuple[int, int | None]]:
        # A missing queue first: the broker closes that channel, the rest still answer.
        return await amqp.queue_depths(["no-such-queue", queue, f"{queue}.dead-letter"])

    found = await depth()
    for _ in range(50):  # the publishes are confirmed; the broker counts them a moment later
        if found.get(queue, (0, 0))[0] == 3:
            break
        found = await depth()
    assert found == {queue: (3, 0), f"{queue}.dead-letter": (0, 0)}
    samples = sorted(await jobs.queue_samples(), key=repr)
    assert ("warden_queue_messages", {"queue": queue}, 3) in samples
    assert ("warden_queue_consumers", {"queue": queue}, 0) in samples


async def test_the_outbox_backlog_on_sqlite(tmp_path: Path) -> None:
    await check_outbox_backlog(f"sqlite+aiosqlite:///{tmp_path / 'outbox.db'}")


@pytest.mark.postgres
async def test_the_outbox_backlog_on_postgresql(pg_url: str) -> None:
    await check_outbox_backlog(pg_url)


async def check_outbox_backlog(url: str) -> None:
    """The backlog counts what waits and says how old the oldest is; a flush empties it."""
    engine = create_engine(url)
    metadata = MetaData()
    table = outbox_table(metadata, "metricstest")
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        relay = Relay(
            Store(engine), MeteredBus(InProcessBus(), "jobs", new_replica_id("jobs")), table
        )
        assert await relay.backlog() == [("warden_outbox_backlog", {}, 0.0)]
        envelope = make_envelope("replica.heartbeat", heartbeat(), source="monitor")
        async with engine.begin() as conn:
            for age_ms in (5_000, 1_000):
                await conn.execute(
                    insert(table).values(
                        envelope=envelope.to_json().decode(), created_at_ms=now_ms() - age_ms
                    )
                )
        (name, _, count), (oldest_name, _, oldest_s) = await relay.backlog()
        assert (name, count) == ("warden_outbox_backlog", 2.0)
        assert oldest_name == "warden_outbox_oldest_seconds" and 5.0 <= oldest_s < 600
        assert await relay.flush() == 2
        assert await relay.backlog() == [("warden_outbox_backlog", {}, 0.0)]
    finally:
        await engine.dispose()
