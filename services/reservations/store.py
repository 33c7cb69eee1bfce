"""Transactions on the reservations database, and the time format of its columns.

Writes that must see a consistent state (a conflict check followed by an insert, a quota check,
a rule change that re-checks reservations) run in `write()`: on SQLite one writer at a time
(an in-process lock, then BEGIN IMMEDIATE, which also serialises other processes); on
PostgreSQL a normal transaction, where the exclusion constraint settles races between GPUs and
`lock_owner` serialises one owner's requests (quotas).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.reservations.models import users

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ms(moment: datetime) -> int:
    """Aware datetime -> integer milliseconds since the epoch (what the columns hold)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def iso_ms(ms: int | None) -> str | None:
    return None if ms is None else from_ms(ms).isoformat()


def now_ms() -> int:
    return to_ms(datetime.now(UTC))


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_sqlite = engine.dialect.name == "sqlite"
        self._write_lock = asyncio.Lock()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            yield conn

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A transaction that commits when the block ends without an error."""
        if not self.is_sqlite:
            async with self.engine.begin() as conn:
                yield conn
            return
        async with self._write_lock, self.engine.connect() as conn:
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                await conn.rollback()
                raise
            await conn.commit()


async def lock_owner(conn: AsyncConnection, username: str) -> None:
    """Serialise one owner's concurrent requests on PostgreSQL (SQLite writes are serial)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(select(users.c.id).where(users.c.username == username).with_for_update())
