"""The store's reads on a real SQLite file (and PostgreSQL): a read on the event loop's own
thread sees what the writer committed and gives way when SQLite is busy; transactions begin,
commit and roll back as the block says, with aiosqlite's statements one trip each."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from services.shared import db
from services.shared.store import Store, sqlite_in_transaction


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
