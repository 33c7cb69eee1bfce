"""The store's reads on a real SQLite file (and PostgreSQL): a read on the event loop's own
thread sees what the writer committed and gives way when SQLite is busy; transactions begin,
commit and roll back as the block says, with aiosqlite's statements one trip each; PostgreSQL's
pool hands out the connection returned last."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from services.shared.storage import db
from services.shared.storage.store import Store, sqlite_in_transaction


async def _store(url: str) -> Store:
    store = Store(db.create_engine(url))
    async with store.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT)"))
    return store


async def test_a_read_now_sees_what_was_committed_and_not_what_was_rolled_back(
    tmp_path: Path,
) -> None:
    store = await _store(f"sqlite+aiosqlite:///{tmp_path / 'things.db'}")
    try:
        assert store.read_now("SELECT name FROM things", []) == []
        async with store.write() as conn:
            await conn.execute(text("INSERT INTO things (name) VALUES ('kept')"))
        with pytest.raises(RuntimeError):
            async with store.write() as conn:
                await conn.execute(text("INSERT INTO things (name) VALUES ('undone')"))
                raise RuntimeError("the block fails")
        assert store.read_now("SELECT name FROM things ORDER BY id", []) == [("kept",)]
        async with store.read() as conn:  # the same through aiosqlite
            assert (await conn.execute(text("SELECT count(*) FROM things"))).scalar() == 1
        with pytest.raises(sqlite3.OperationalError):  # a read only, never a write
            store.read_now("INSERT INTO things (name) VALUES ('no')", [])
    finally:
        await store.engine.dispose()


async def test_a_read_now_gives_way_while_sqlite_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "things.db"
    store = await _store(f"sqlite+aiosqlite:///{path}")
    await store.engine.dispose()  # (its connections closed: the journal mode may change)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("PRAGMA journal_mode=DELETE")  # a rollback journal: readers do wait
        other.execute("BEGIN EXCLUSIVE")
        assert store.read_now("SELECT name FROM things", []) is None  # ask off the thread
        other.execute("COMMIT")
        assert store.read_now("SELECT name FROM things", []) == []
    finally:
        other.close()
        await store.engine.dispose()


async def test_a_write_block_that_runs_nothing_begins_nothing_and_the_next_one_works(
    tmp_path: Path,
) -> None:
    store = await _store(f"sqlite+aiosqlite:///{tmp_path / 'things.db'}")
    try:
        async with store.write() as conn:
            pass  # BEGIN is sent with a block's first statement: none here
        async with store.write() as conn:
            raw = (await conn.get_raw_connection()).driver_connection
            await conn.execute(text("INSERT INTO things (name) VALUES ('one')"))
            assert sqlite_in_transaction(raw)  # inside the block's transaction
        assert not sqlite_in_transaction(raw)  # committed
        assert store.read_now("SELECT name FROM things", []) == [("one",)]
    finally:
        await store.engine.dispose()


async def test_no_read_now_on_postgresql(pg_url: str) -> None:
    store = await _store(pg_url)
    try:
        assert store.read_now("SELECT name FROM things", []) is None
    finally:
        await store.engine.dispose()


async def test_a_cancelled_write_stays_cancelled_when_its_connection_is_gone(
    tmp_path: Path,
) -> None:
    """A task cancelled in the middle of a statement: SQLAlchemy closes that connection (its
    state is unknown). The block's rollback then fails too; the caller must still get the
    cancellation, or a stopping service's loop takes it for a failure and runs on."""
    store = await _store(f"sqlite+aiosqlite:///{tmp_path / 'things.db'}")
    try:
        with pytest.raises(asyncio.CancelledError):
            async with store.write() as conn:
                await conn.execute(text("INSERT INTO things (name) VALUES ('half')"))
                sqlite: Any = (await conn.get_raw_connection()).driver_connection
                await sqlite.close()
                raise asyncio.CancelledError
        assert store.read_now("SELECT name FROM things", []) == []  # nothing committed
    finally:
        await store.engine.dispose()


async def _thread_of_statements(conn: Any) -> int:
    """The id of the thread that runs this connection's statements."""
    sqlite: Any = (await conn.get_raw_connection()).driver_connection
    # A function SQLite calls back on whichever thread runs the statement.
    await sqlite.run(lambda db: db.create_function("thread_id", 0, threading.get_ident))
    return int((await conn.execute(text("SELECT thread_id()"))).scalar_one())


async def test_a_write_on_loop_runs_on_the_loop_thread_and_commits(tmp_path: Path) -> None:
    store = await _store(f"sqlite+aiosqlite:///{tmp_path / 'things.db'}")
    try:
        async with store.write(on_loop=True) as conn:
            assert await _thread_of_statements(conn) == threading.get_ident()
            await conn.execute(text("INSERT INTO things (name) VALUES ('kept')"))
        with pytest.raises(RuntimeError):
            async with store.write(on_loop=True) as conn:
                await conn.execute(text("INSERT INTO things (name) VALUES ('undone')"))
                raise RuntimeError("the block fails")
        async with store.write() as conn:  # the next plain write: on aiosqlite's thread again
            assert await _thread_of_statements(conn) != threading.get_ident()
        assert store.read_now("SELECT name FROM things ORDER BY id", []) == [("kept",)]
    finally:
        await store.engine.dispose()


async def test_a_write_on_loop_waits_off_the_loop_for_another_process_lock(
    tmp_path: Path,
) -> None:
    """Another process holds SQLite's write lock: the write waits for it on aiosqlite's
    thread, and the event loop runs on meanwhile."""
    path = tmp_path / "things.db"
    store = await _store(f"sqlite+aiosqlite:///{path}")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        threads: list[int] = []

        async def write() -> None:
            async with store.write(on_loop=True) as conn:
                await conn.execute(text("INSERT INTO things (name) VALUES ('late')"))
                threads.append(await _thread_of_statements(conn))

        writing = asyncio.create_task(write())
        await asyncio.sleep(0.2)  # (a BEGIN waiting on the loop's thread would hold it 30 s)
        assert not writing.done()  # still waiting for the lock, and the loop ran meanwhile
        other.execute("COMMIT")
        await writing
        assert threads and threads[0] != threading.get_ident()
        assert store.read_now("SELECT name FROM things", []) == [("late",)]
    finally:
        other.close()
        await store.engine.dispose()


async def test_a_write_on_loop_and_a_read_leave_the_loop_no_turn(tmp_path: Path) -> None:
    """Nothing in them waits for the event loop's queue: not their statements (on the loop's
    thread), not the connection's close (SQLAlchemy's `async with` closes in a task)."""
    store = await _store(f"sqlite+aiosqlite:///{tmp_path / 'things.db'}")
    loop = asyncio.get_running_loop()
    try:
        turned: list[str] = []
        loop.call_soon(turned.append, "write")
        async with store.write(on_loop=True) as conn:
            await conn.execute(text("INSERT INTO things (name) VALUES ('one')"))
        assert turned == []
        await asyncio.sleep(0)
        loop.call_soon(turned.append, "read")  # a read's statement does go to the thread
        async with store.read() as conn:
            await conn.execute(text("SELECT 1"))
        assert turned == ["write", "read"]
        async with store.read():
            loop.call_soon(turned.append, "close")
        assert turned == ["write", "read"]  # closing it took no turn
    finally:
        await store.engine.dispose()


async def test_writes_on_loop_leave_the_checkpoint_to_a_thread(tmp_path: Path) -> None:
    """A COMMIT on the loop's thread does not copy a long write-ahead log into the database
    (SQLite's automatic checkpoint, fsyncs included); every `checkpoint_every` of them one
    runs on a worker thread. A COMMIT off the loop still checkpoints as SQLite does."""
    path = tmp_path / "things.db"
    store = await _store(f"sqlite+aiosqlite:///{path}")
    store.checkpoint_every = 2
    big = "x" * 5_000_000  # over SQLite's 1,000-page mark by itself
    try:
        size = path.stat().st_size
        async with store.write(on_loop=True) as conn:
            await conn.execute(text("INSERT INTO things (name) VALUES (:big)"), {"big": big})
        assert path.stat().st_size == size  # all of it still in the log
        async with store.write(on_loop=True) as conn:
            await conn.execute(text("DELETE FROM things"))
        checkpointing = store._checkpointing  # the second one's, on a thread
        assert checkpointing is not None
        await checkpointing
        assert path.stat().st_size > len(big)  # copied into the database
        async with store.write() as conn:  # off the loop: SQLite's own checkpoint again
            await conn.execute(text("INSERT INTO things (name) VALUES (:big)"), {"big": big * 2})
        assert path.stat().st_size > 2 * len(big)
    finally:
        await store.engine.dispose()


async def test_postgresql_hands_out_the_connection_returned_last(pg_url: str) -> None:
    """Each PostgreSQL connection has caches of its own (prepared statements, the server's
    plans): the pool gives the warm one, not the one that waited longest."""
    store = Store(db.create_engine(pg_url))
    backend_pid = text("SELECT pg_backend_pid()")
    try:
        async with store.read() as first, store.read() as second:  # two at once
            older = (await first.execute(backend_pid)).scalar_one()
            newer = (await second.execute(backend_pid)).scalar_one()
        # `second` went back first, then `first`: `first` is the last one returned.
        async with store.write() as conn:
            assert (await conn.execute(backend_pid)).scalar_one() == older
        assert older != newer
    finally:
        await store.engine.dispose()
