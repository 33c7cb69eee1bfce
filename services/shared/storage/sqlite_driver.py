"""aiosqlite as SQLAlchemy uses it, with one trip to its thread per statement.

SQLAlchemy's aiosqlite adapter runs a statement as four trips to aiosqlite's thread: make a
cursor, execute, fetch the rows, close. Each trip's answer comes back through the event
loop's queue, so under load a statement waits for the whole queue four times. Here the
cursor is made, executed, read and closed on the thread in one trip; SQLAlchemy then reads
the rows from memory (it fetches every row of a non-streaming result at once anyway).

A connection can also run its work on the caller's thread (`on_loop`, for the event loop's
small hot-path transactions, see `Store.write`): then a statement makes no trip at all.

`connect` is what `create_engine` gives SQLAlchemy as `async_creator_fn` for SQLite files.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from functools import partial
from threading import Thread
from typing import Any

import aiosqlite
from aiosqlite.context import contextmanager

Outcome = tuple[Any, int, int | None, list[Any]]  # description, rowcount, lastrowid, rows


def _run(db: sqlite3.Connection, sql: str, parameters: Any, many: bool) -> Outcome:
    """Runs on aiosqlite's thread: one statement (`many`: for each set of parameters)."""
    cursor = db.cursor()
    try:
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, () if parameters is None else parameters)
        rows = cursor.fetchall() if cursor.description else []
        return cursor.description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


class OneTripCursor:
    """The part of aiosqlite's cursor that SQLAlchemy's adapter uses; the rows of the last
    statement are held here."""

    def __init__(self, connection: OneTripConnection) -> None:
        self._connection = connection
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1
        self._rows: deque[Any] = deque()

    async def execute(self, sql: str, parameters: Any = None) -> OneTripCursor:
        self._took(await self._connection.run(_run, sql, parameters, False))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> OneTripCursor:
        self._took(await self._connection.run(_run, sql, parameters, True))
        return self

    def _took(self, outcome: Outcome) -> None:
        self.description, self.rowcount, self.lastrowid, rows = outcome
        self._rows = deque(rows)

    async def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    async def fetchmany(self, size: int | None = None) -> Sequence[Any]:
        count = min(self.arraysize if size is None else size, len(self._rows))
        return [self._rows.popleft() for _ in range(count)]

    async def fetchall(self) -> Sequence[Any]:
        rows = list(self._rows)
        self._rows.clear()
        return rows

    async def __aiter__(self) -> AsyncIterator[Any]:
        while self._rows:
            yield self._rows.popleft()

    async def close(self) -> None:
        self._rows.clear()

    async def __aenter__(self) -> OneTripCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


# SQLite's default: a COMMIT that leaves the write-ahead log this many pages long copies it into
# the database.
AUTOCHECKPOINT_PAGES = 1000


def _begin_without_waiting(db: sqlite3.Connection, begin: str) -> bool:
    """`begin` (BEGIN IMMEDIATE) if the write lock is free now; False if another process
    holds it (waiting for it is for aiosqlite's thread, not the event loop's)."""
    (busy_timeout_ms,) = db.execute("PRAGMA busy_timeout").fetchone()
    db.execute("PRAGMA busy_timeout = 0")
    try:
        db.execute(begin)
    except sqlite3.OperationalError as err:
        if "locked" in str(err) or "busy" in str(err):
            return False
        raise
    finally:
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    return True


class OneTripConnection(aiosqlite.Connection):
    _begin: str | None = None  # run before the next trip's work, in that trip
    # Run the work on the caller's thread, no trip (see `run_on_loop`).
    _on_loop = False
    _autocheckpoint_off = False

    @contextmanager
    async def cursor(self) -> Any:  # made here, not on the thread: nothing to make there yet
        return OneTripCursor(self)

    def begin_with_next(self, sql: str | None) -> None:
        """Run `sql` (a BEGIN) on the thread just before the next trip's work, in that trip:
        a transaction's first statement then costs one trip, not two. None: no longer."""
        self._begin = sql

    def run_on_loop(self, on: bool, *, checkpoint: bool = True) -> None:
        """Run this connection's work on the caller's (the event loop's) thread from now on,
        or no longer. For short transactions only: SQLite's work then blocks the loop, which
        costs less than a trip's wait behind everything queued in the loop. A BEGIN that would
        wait for another process's write lock goes to aiosqlite's thread instead, and the
        rest of that transaction with it. `checkpoint=False`: its COMMIT does not copy the
        write-ahead log into the database when the log is long (SQLite's automatic checkpoint,
        tens of milliseconds with its fsyncs): the caller has that done off the loop."""
        self._on_loop = on
        if checkpoint == self._autocheckpoint_off:
            pages = AUTOCHECKPOINT_PAGES if checkpoint else 0
            with contextlib.suppress(ValueError, sqlite3.Error):  # (closed: nothing to set)
                self._conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")
            self._autocheckpoint_off = not checkpoint

    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        begin, self._begin = self._begin, None
        if self._on_loop:
            if begin is None or _begin_without_waiting(self._conn, begin):
                return fn(*args, **kwargs)
            self._on_loop = False  # the lock is taken: wait for it off the loop
        if begin is None:
            return await super()._execute(fn, *args, **kwargs)
        db, work = self._conn, partial(fn, *args, **kwargs)

        def begun() -> Any:
            db.execute(begin)
            return work()

        return await super()._execute(begun)

    async def run(self, function: Any, *args: Any) -> Any:
        """`function(sqlite3_connection, *args)` on aiosqlite's thread."""
        return await self._execute(function, self._conn, *args)


def connect(database: str, **kwargs: Any) -> OneTripConnection:
    """As `aiosqlite.connect`; its thread a daemon, as SQLAlchemy makes aiosqlite's. The
    sqlite3 connection may be used from the event loop's thread too (`run_on_loop`), never
    from two at once: its user awaits each statement."""
    kwargs["check_same_thread"] = False
    connection = OneTripConnection(partial(sqlite3.connect, database, **kwargs), 64)
    thread = connection if isinstance(connection, Thread) else connection._thread  # < 0.22: one
    thread.daemon = True
    return connection
