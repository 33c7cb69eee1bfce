"""Two replicas' outbox relays on one PostgreSQL database and a real RabbitMQ: each waiting
envelope is claimed by one relay, so every event goes out once (a duplicate only after a crash
between publishing and deleting), while both relays flush at the same moments."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from sqlalchemy import MetaData, insert

from services.shared.bus import BusSettings
from services.shared.bus.amqp import AmqpBus
from services.shared.contracts import Envelope, make_envelope, utc_now_iso
from services.shared.storage.db import create_engine
from services.shared.storage.outbox import Relay, outbox_table
from services.shared.storage.store import Store, now_ms

ROUNDS = 6
PER_ROUND = 40  # envelopes committed before both relays flush


def recovered(host: str) -> Envelope:
    data: dict[str, Any] = {"host": host, "at": utc_now_iso()}
    return make_envelope("host.recovered", data, source="monitor")


async def test_two_relays_publish_each_event_once(pg_url: str, amqp_url: str) -> None:
    metadata = MetaData()
    table = outbox_table(metadata, "replicatest")
    engines = [create_engine(pg_url), create_engine(pg_url)]  # one per replica
    async with engines[0].begin() as conn:
        await conn.run_sync(metadata.create_all)
    buses = [AmqpBus(amqp_url, BusSettings(), name=f"replica-{n}") for n in range(2)]
    listener = AmqpBus(amqp_url, BusSettings(), name="listener")
    got: Counter[str] = Counter()
    done = asyncio.Event()

    async def handler(envelope: Envelope) -> None:
        if envelope.data["host"] == "last":
            done.set()
        else:
            got[envelope.id] += 1

    relays = [
        Relay(Store(engine), bus, table, interval_s=3600)
        for engine, bus in zip(engines, buses, strict=True)
    ]
    written: list[str] = []
    sent = 0
    try:
        for bus in [*buses, listener]:
            await bus.start()
        await listener.subscribe("monitor", "host.recovered", "replicatest.got", handler)
        for round_ in range(ROUNDS):
            async with engines[round_ % 2].begin() as conn:
                for n in range(PER_ROUND):
                    envelope = recovered(f"h{round_}-{n}")
                    written.append(envelope.id)
                    await conn.execute(
                        insert(table).values(
                            envelope=envelope.to_json().decode(), created_at_ms=now_ms()
                        )
                    )
            sent += sum(await asyncio.gather(*(relay.flush() for relay in relays)))
        await buses[0].publish(recovered("last"))  # after every envelope in the queue
        await asyncio.wait_for(done.wait(), 60)

        assert set(got) == set(written)
        assert [id_ for id_, count in got.items() if count > 1] == []
        assert sent == len(written)
    finally:
        for bus in [listener, *buses]:
            await bus.close()
        for engine in engines:
            await engine.dispose()
