"""Counted attempts (services.accounts.attempts), the shared state of the gateway
replicas' rate limits, on SQLite and PostgreSQL: a parallel burst spread over two reservations
replicas (two engines on one database) gets exactly the limit, a refusal says when to try
again (within the window, even after waiting for the key), settling uncounts, and expired rows
go.

The database fixtures are tests/support/accounts_store.py's, imported.
"""
# ruff: noqa: F811 (the imported `store` fixture is every test's parameter)

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import insert, text, update

from services.accounts import attempts
from services.accounts.attempts import AttemptCalls
from services.reservations.store import Store, now_ms
from services.reservations.tables import attempts as attempts_table
from services.shared.storage import db
from tests.support.accounts_store import (  # noqa: F401 (fixtures)
    _cheap_passwords,
    database_url,
    events,
    store,
)


def key(name: str, limit: int = 5, window_s: float = 300.0) -> dict[str, object]:
    return {"key": name, "window_s": window_s, "limit": limit}


@pytest.fixture
async def other(database_url: str, store: Store) -> AsyncIterator[Store]:
    """A second replica's store on the same database (its own engine and connections)."""
    engine = db.create_engine(database_url)
    try:
        yield Store(engine)
    finally:
        await engine.dispose()


async def test_a_burst_over_two_replicas_gets_exactly_the_limit(store: Store, other: Store) -> None:
    replicas = [AttemptCalls(store), AttemptCalls(other)]
    answers = await asyncio.gather(
        *(
            replicas[i % 2].take({"limits": [key("login-user:bob"), key("address:10.0.0.9", 50)]})
            for i in range(40)
        )
    )
    taken = [a for a in answers if a["retry_after_s"] is None]
    refused = [a for a in answers if a["retry_after_s"] is not None]
    assert len(taken) == 5 and len(refused) == 35
    assert all(len(a["marks"]) == 2 for a in taken)
    assert all(0 < a["retry_after_s"] <= 300 and a["marks"] == [] for a in refused)
    async with store.read() as conn:
        # A refused take counts nothing, against no key.
        assert await attempts.count(conn) == 10


async def test_settling_uncounts_and_clearing_starts_again(store: Store, other: Store) -> None:
    a, b = AttemptCalls(store), AttemptCalls(other)
    first = await a.take({"limits": [key("address:1.2.3.4", 2)]})
    second = await b.take({"limits": [key("address:1.2.3.4", 2)]})
    assert (await a.take({"limits": [key("address:1.2.3.4", 2)]}))["retry_after_s"] is not None
    await b.settle({"cancel": first["marks"], "clear": []})  # the other replica uncounts it
    third = await a.take({"limits": [key("address:1.2.3.4", 2)]})
    assert third["retry_after_s"] is None
    assert third["marks"] != second["marks"]
    await a.settle({"cancel": [], "clear": ["address:1.2.3.4"]})
    async with store.read() as conn:
        assert await attempts.count(conn) == 0


async def test_one_key_at_its_limit_refuses_the_whole_take(store: Store) -> None:
    calls = AttemptCalls(store)
    assert (await calls.take({"limits": [key("login-user:eve", 1)]}))["retry_after_s"] is None
    both = await calls.take({"limits": [key("login-user:eve", 1), key("address:9.9.9.9")]})
    assert both["retry_after_s"] is not None
    async with store.read() as conn:
        assert await attempts.count(conn) == 1  # nothing counted against the address


async def test_attempts_out_of_their_window_count_no_more_and_are_deleted(store: Store) -> None:
    calls = AttemptCalls(store)
    for _ in range(3):
        assert (await calls.take({"limits": [key("feed:alice", 3, 60)]}))["retry_after_s"] is None
    refused = await calls.take({"limits": [key("feed:alice", 3, 60)]})
    assert 59 <= refused["retry_after_s"] <= 60
    async with store.write() as conn:  # a minute and a bit ago
        await conn.execute(
            update(attempts_table).values(
                at_ms=attempts_table.c.at_ms - 61_000, until_ms=attempts_table.c.until_ms - 61_000
            )
        )
    assert (await calls.take({"limits": [key("feed:alice", 3, 60)]}))["retry_after_s"] is None
    async with store.write() as conn:
        assert await attempts.count(conn) == 1  # the expired ones went with that take
        await conn.execute(update(attempts_table).values(until_ms=0))
        assert await attempts.purge(conn) == 1


_WAITING_FOR_A_LOCK = text(
    "SELECT count(*) FROM pg_locks WHERE NOT granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


@pytest.mark.postgres
async def test_a_take_that_waited_for_the_key_counts_from_when_it_got_it(pg_url: str) -> None:
    """The holder of a key writes while a take waits for it: the take's refusal says to wait at
    most the window, however long it waited."""
    engine = db.create_engine(pg_url)
    try:
        await db.upgrade(engine, "reservations")
        holder = await engine.connect()
        await holder.begin()
        await holder.execute(
            text("SELECT pg_advisory_xact_lock(:id)"), {"id": attempts.lock_id("feed:bob")}
        )
        waiting = asyncio.create_task(
            AttemptCalls(Store(engine)).take({"limits": [key("feed:bob", 1, 60)]})
        )
        for _ in range(1000):  # until the take waits for the key (10 s at most)
            if (await holder.execute(_WAITING_FOR_A_LOCK)).scalar_one():
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the take never waited for the key")
        await holder.execute(  # the holder's attempt, counted after the take began
            insert(attempts_table).values(
                key="feed:bob", at_ms=now_ms(), until_ms=now_ms() + 60_000
            )
        )
        await holder.commit()
        await holder.close()
        refused = await waiting
        assert refused["marks"] == []
        assert 0 < refused["retry_after_s"] <= 60
    finally:
        await engine.dispose()


async def test_a_take_that_waited_for_another_engines_write_counts_from_when_it_got_it(
    tmp_path: Path,
) -> None:
    """SQLite: another replica's engine holds the write lock and counts an attempt while a take
    waits for it; the take's refusal says to wait at most the window."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'reservations.db'}"
    holding, taking = db.create_engine(url), db.create_engine(url)
    try:
        await db.upgrade(holding, "reservations")
        holder = Store(holding)
        async with holder.write() as conn:
            await conn.execute(text("SELECT 1"))  # the write lock is the holder's from here
            waiting = asyncio.create_task(
                AttemptCalls(Store(taking)).take({"limits": [key("feed:bob", 1, 60)]})
            )
            await asyncio.sleep(0.3)  # the take has begun and waits for the lock
            assert not waiting.done()
            await conn.execute(
                insert(attempts_table).values(
                    key="feed:bob", at_ms=now_ms(), until_ms=now_ms() + 60_000
                )
            )
        refused = await waiting
        assert refused["marks"] == []
        assert 0 < refused["retry_after_s"] <= 60
    finally:
        await holding.dispose()
        await taking.dispose()
