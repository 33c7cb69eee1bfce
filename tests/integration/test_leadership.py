"""The leader lease with its fencing token (services/shared/cluster/leadership.py) on real SQLite
and PostgreSQL: one replica leads, a standby takes over once the lease expired, and a deposed
leader's late write is refused and rolled back (and it steps down).

A "crashed" leader is one whose lease loop is cancelled without releasing the lease: it
renews no more, as after kill -9, but its object is still here to try a late write.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.shared.cluster.leadership import LEADER, STANDBY, Deposed, Leadership, lease_table
from services.shared.storage.db import create_engine
from services.shared.storage.store import Store
from tests.support.polling import until

metadata = sa.MetaData()
LEASE = lease_table(metadata, "testsvc")
WRITES = sa.Table("testsvc_writes", metadata, sa.Column("what", sa.String(64), primary_key=True))
LEASE_S = 0.6


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/lease.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    made = create_engine(database_url)
    async with made.begin() as conn:
        await conn.run_sync(metadata.create_all)
    yield made
    await made.dispose()


class Replica:
    """A replica's store (fenced by its leadership) and what its office did."""

    def __init__(self, engine: AsyncEngine, name: str) -> None:
        self.store = Store(engine)
        self.events: list[str] = []
        self.leadership = Leadership(
            self.store, LEASE, "testsvc", name, self._elected, lease_s=LEASE_S
        )
        self.store.fence = self.leadership.fence

    async def _elected(self, office: AsyncExitStack) -> None:
        self.events.append("elected")
        office.callback(self.events.append, "stood down")

    def crash(self) -> None:
        """Stop renewing, as a killed process would (the lease is not released)."""
        assert self.leadership._task is not None
        self.leadership._task.cancel()

    async def write(self, what: str) -> None:
        async with self.store.write() as conn:
            await conn.execute(sa.insert(WRITES).values(what=what))


async def written(store: Store) -> set[str]:
    async with store.read() as conn:
        return {row[0] for row in (await conn.execute(sa.select(WRITES.c.what))).all()}


@contextlib.asynccontextmanager
async def replicas(engine: AsyncEngine, *names: str) -> AsyncIterator[list[Replica]]:
    made = [Replica(engine, name) for name in names]
    try:
        yield made
    finally:
        for replica in made:
            with contextlib.suppress(Exception):
                await replica.leadership.stop()


async def test_one_leads_and_the_standby_takes_over_once_the_lease_expired(
    engine: AsyncEngine,
) -> None:
    async with replicas(engine, "a", "b") as (a, b):
        await a.leadership.start()
        await b.leadership.start()
        assert (a.leadership.role(), b.leadership.role()) == (LEADER, STANDBY)
        assert a.events == ["elected"] and b.events == []
        first = a.leadership.token
        assert first is not None
        # The leader renews: the standby stays one over several lease lengths.
        await asyncio.sleep(LEASE_S * 3)
        assert (a.leadership.role(), b.leadership.role()) == (LEADER, STANDBY)

        a.crash()
        await until(lambda: b.leadership.role() == LEADER, "b leads", 30)
        assert b.events == ["elected"]
        assert b.leadership.token is not None and b.leadership.token > first
        holder, token, _left = await b.leadership.lease.current()
        assert (holder, token) == ("b", b.leadership.token)


async def test_a_deposed_leaders_late_write_is_refused_and_it_steps_down(
    engine: AsyncEngine,
) -> None:
    async with replicas(engine, "a", "b") as (a, b):
        await a.leadership.start()
        await a.write("before")
        await b.leadership.start()
        with pytest.raises(Deposed):
            await b.write("standby")  # a standby writes nothing at all
        a.crash()
        await until(lambda: b.leadership.role() == LEADER, "b leads", 30)
        assert a.leadership.role() == LEADER  # it does not know yet: only the fence tells

        with pytest.raises(Deposed):
            await a.write("late")
        await until(lambda: a.events == ["elected", "stood down"], "a stands down", 30)
        assert a.leadership.role() == STANDBY
        await b.write("after")
        assert await written(b.store) == {"before", "after"}


async def test_a_clean_stop_hands_over_without_waiting_for_expiry(engine: AsyncEngine) -> None:
    async with replicas(engine, "a", "b") as (a, b):
        await a.leadership.start()
        await b.leadership.start()
        await a.leadership.stop()
        assert a.events == ["elected", "stood down"]
        _holder, _token, left_ms = await b.leadership.lease.current()
        assert left_ms <= 0  # released: not left to expire
        await until(lambda: b.leadership.role() == LEADER, "b leads", 30)


async def test_a_takeover_waits_for_the_leaders_open_write(engine: AsyncEngine) -> None:
    """What a deposed leader committed is there for the new leader to reload: the takeover
    waits on the row lock the fence holds until the write ends (PostgreSQL's FOR SHARE;
    SQLite's single writer does the same)."""
    async with replicas(engine, "a") as (a,):
        await a.leadership.start()
        a.crash()
        holding = asyncio.Event()
        finish = asyncio.Event()

        async def slow_write() -> None:
            async with a.store.write() as conn:  # fenced: a still holds the token
                holding.set()
                await finish.wait()
                await conn.execute(sa.insert(WRITES).values(what="in flight"))

        writing = asyncio.create_task(slow_write())
        await holding.wait()
        await asyncio.sleep(LEASE_S * 2)  # the lease expired meanwhile
        other = Store(a.store.engine)
        taking = asyncio.create_task(
            Leadership(other, LEASE, "testsvc", "b", a._elected, lease_s=LEASE_S).lease.acquire("b")
        )
        await asyncio.sleep(0.5)
        blocked = not taking.done()
        finish.set()
        await writing
        token = await taking
        assert blocked, "the takeover did not wait for the open write"
        assert token is not None
        assert await written(other) == {"in flight"}
