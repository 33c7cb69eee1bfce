"""Transactions on a service's database, and the time format of its columns (integer ms, UTC).

Writes that must see a consistent state run in `write()`: on SQLite one writer at a time (an
in-process lock, then BEGIN IMMEDIATE, which also serialises other processes); on PostgreSQL
a normal transaction. A `fence` (a leader's check that it still leads, see
`services.shared.cluster.leadership`) runs first in every write transaction and may refuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = logging.getLogger("warden.store")

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


def sqlite_in_transaction(connection: Any) -> bool:
    """Whether the sqlite3 connection under `connection` (the pool's proxy, SQLAlchemy's
    adapter, aiosqlite's connection or itself) is in a transaction: a flag read, no
    statement. True when it cannot tell."""
    found = connection
    for _ in range(4):
        if isinstance(found, sqlite3.Connection):
            return found.in_transaction
        found = getattr(found, "dbapi_connection", None) or getattr(found, "_connection", None)
    return True


def _closes_without_trip(conn: AsyncConnection) -> bool:
    """Whether closing `conn` makes no trip to the database: its driver holds no transaction
    open, so the pool takes it back without a ROLLBACK."""
    try:
        adapted: Any = conn.sync_connection.connection.dbapi_connection  # type: ignore[union-attr]
    except Exception:  # closed, invalidated: let SQLAlchemy sort it out
        return False
    if hasattr(adapted, "_transaction"):  # SQLAlchemy's asyncpg adapter
        return adapted._transaction is None
    return not sqlite_in_transaction(adapted)


@asynccontextmanager
async def _connected(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """`engine.connect()` as a block. SQLAlchemy's own `async with` closes the connection in a
    task of its own, so that a cancellation cannot cut its ROLLBACK short: a turn of the event
    loop's queue for every read and write, which under load is most of a short one's wait.
    Where closing makes no trip there is nothing to cut short, and it is closed here."""
    conn = await engine.connect()
    try:
        yield conn
    finally:
        if _closes_without_trip(conn):
            await conn.close()
        else:
            await conn.__aexit__(None, None, None)  # shielded, as SQLAlchemy does


# A write on the loop's thread leaves SQLite's checkpoint (copying the write-ahead log into the
# database, fsyncs included) to a thread: after this many of them, and one at a time.
CHECKPOINT_EVERY = 100


def _checkpoint(path: str) -> None:
    """Copy what it can of the write-ahead log of `path` into the database (PASSIVE: waits for
    no reader or writer). Runs on a worker thread."""
    with contextlib.closing(sqlite3.connect(path, timeout=READ_NOW_WAIT_S)) as db:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")


# How long a read on the event loop's thread may wait for SQLite (only while it recovers or
# resets its write-ahead log; readers wait for no writer) before it is asked off the thread.
READ_NOW_WAIT_S = 0.05


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_sqlite = engine.dialect.name == "sqlite"
        self._write_lock = asyncio.Lock()
        self.fence: Callable[[AsyncConnection], Awaitable[None]] | None = None
        # A plain file (not in memory, no URI options): what `read_now` opens beside aiosqlite.
        database = engine.url.database if self.is_sqlite and not engine.url.query else None
        self._file = database if database and database != ":memory:" else None
        self._reader: sqlite3.Connection | None = None
        self.checkpoint_every = CHECKPOINT_EVERY
        self._unchecked_commits = 0  # on the loop's thread, since the last checkpoint began
        self._checkpointing: asyncio.Future[None] | None = None

    def read_now(self, sql: str, parameters: Sequence[Any]) -> list[Any] | None:
        """The rows of one small read, on this (the event loop's) thread, for a SQLite file.

        In WAL mode a reader waits for no writer, so a read of a few rows costs less here
        than its trip to aiosqlite's thread, whose answer waits behind everything queued in
        the event loop (under load, most of a read's latency). None where it cannot be (not
        SQLite, or SQLite busy with its log): then read with `read()`."""
        if self._file is None:
            return None
        if self._reader is None:
            self._reader = sqlite3.connect(self._file, timeout=READ_NOW_WAIT_S)
            self._reader.execute("PRAGMA query_only = ON")
        try:
            return self._reader.execute(sql, parameters).fetchall()
        except sqlite3.OperationalError as err:
            if "locked" in str(err) or "busy" in str(err):
                return None
            raise

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with _connected(self.engine) as conn:
            yield conn

    @asynccontextmanager
    async def write(self, *, on_loop: bool = False) -> AsyncIterator[AsyncConnection]:
        """A transaction that commits when the block ends without an error.

        `on_loop` (SQLite): its statements run on this, the event loop's, thread instead of
        each making a trip to aiosqlite's thread and back through the loop's queue (under
        load, a queue's wait per trip). Only for a few small statements (see
        `sqlite_driver.OneTripConnection.run_on_loop`)."""
        if not self.is_sqlite:
            async with _connected(self.engine) as conn, conn.begin():
                if self.fence is not None:
                    await self.fence(conn)
                yield conn
            return
        async with self._write_lock, _connected(self.engine) as conn:
            # BEGIN, COMMIT and ROLLBACK by aiosqlite itself: one round trip to its thread
            # each (three for a statement through SQLAlchemy's cursor). SQLAlchemy's own
            # transaction, if a statement began one, ends with the connection.
            sqlite: Any = (await conn.get_raw_connection()).driver_connection
            one_trip = hasattr(
                sqlite, "begin_with_next"
            )  # services/shared/storage/sqlite_driver.py
            if one_trip:
                sqlite.begin_with_next("BEGIN IMMEDIATE")  # in the trip of the first statement
                # On the loop, no checkpoint in the COMMIT where one can be made off it.
                sqlite.run_on_loop(on_loop, checkpoint=not on_loop or self._file is None)
            else:
                await sqlite.execute("BEGIN IMMEDIATE")
            try:
                try:
                    if self.fence is not None:
                        await self.fence(conn)
                    yield conn
                except BaseException:
                    if sqlite_in_transaction(sqlite):
                        # What failed the block is what the caller must see: a rollback that
                        # fails too (the connection closed as the service stops) must not
                        # replace it, least of all a cancellation (the task would then run on).
                        with contextlib.suppress(Exception):
                            await sqlite.rollback()
                    raise
                if sqlite_in_transaction(sqlite):  # else the block's last write committed
                    await sqlite.commit()
            finally:
                if one_trip:
                    sqlite.begin_with_next(None)  # a block that ran no statement began nothing
                    sqlite.run_on_loop(False)
        if on_loop:
            self._committed_on_loop()

    def _committed_on_loop(self) -> None:
        self._unchecked_commits += 1
        if (
            self._file is None
            or self._unchecked_commits < self.checkpoint_every
            or (self._checkpointing is not None and not self._checkpointing.done())
        ):
            return
        self._unchecked_commits = 0
        self._checkpointing = asyncio.get_running_loop().run_in_executor(
            None, _checkpoint, self._file
        )
        self._checkpointing.add_done_callback(_checkpoint_done)


def _checkpoint_done(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        # SQLite's own checkpoint at the next write off the loop catches up; the next one here
        # tries again.
        log.warning("SQLite checkpoint failed: %s", done.exception())
