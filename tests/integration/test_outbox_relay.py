"""The outbox relay on SQLite and PostgreSQL: kicks soon after a flush share the next flush
(`min_gap_s`), every envelope still goes out once and in order, and a flush publishes what
waited when it began (what commits meanwhile is the next kick's)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, insert

from services.shared.bus.inproc import InProcessBus
from services.shared.contracts import Envelope, make_envelope, utc_now_iso
from services.shared.storage.db import create_engine
from services.shared.storage.outbox import Relay, outbox_table
from services.shared.storage.store import Store, now_ms

GAP_S = 2.0  # long beside four inserts (milliseconds), so the kicks below all come within it


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'outbox.db'}"
    return str(request.getfixturevalue("pg_url"))


def recovered(host: str) -> Envelope:
    data: dict[str, Any] = {"host": host, "at": utc_now_iso()}
    return make_envelope("host.recovered", data, source="monitor")


async def test_kicks_soon_after_a_flush_share_the_next_one(database_url: str) -> None:
    engine = create_engine(database_url)
    metadata = MetaData()
    table = outbox_table(metadata, "relaytest")
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    bus = InProcessBus()
    await bus.start()
    got: list[str] = []
    arrived = asyncio.Event()

    async def handler(envelope: Envelope) -> None:
        got.append(envelope.data["host"])
        arrived.set()

    await bus.subscribe("monitor", "host.recovered", "relaytest.got", handler)
    relay = Relay(Store(engine), bus, table, interval_s=3600, min_gap_s=GAP_S)

    async def commit_and_kick(host: str) -> None:
        async with engine.begin() as conn:
            envelope = recovered(host).to_json().decode()
            await conn.execute(insert(table).values(envelope=envelope, created_at_ms=now_ms()))
        relay.kick()

    async def until(count: int) -> None:
        while len(got) < count:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), 60)

    try:
        await relay.start()
        await commit_and_kick("h0")
        await until(1)  # a first kick: flushed at once
        assert relay.flushes == 1
        for n in range(1, 5):
            await commit_and_kick(f"h{n}")
        await until(5)
        await asyncio.sleep(0.1)
        assert got == ["h0", "h1", "h2", "h3", "h4"]
        assert relay.flushes == 2  # the four kicks within the gap: one flush
        await relay.stop()
        assert await relay.flush() == 0
    finally:
        await relay.stop()
        await bus.close()
        await engine.dispose()
