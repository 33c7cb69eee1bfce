"""The writes of checked creates, several at once inside the caller's transaction: for each, a
SAVEPOINT, the reservation, its GPU slots, its guests and its `reservation.created` outbox row.
A constraint violation (an overlap the in-memory check did not know of) undoes that one alone.

On SQLite the whole list runs in ONE hand-off to aiosqlite's thread, on its sqlite3 connection
(the same connection and transaction SQLAlchemy holds), with statements sqlite3 caches. On
PostgreSQL the ids are drawn from the sequence first and each table gets one executemany for
the whole list (asyncpg sends it in one round trip); only if the database refuses one row is
the list written again row by row, each in its own SAVEPOINT.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.outbox import SOURCE
from services.reservations.tables import gpu_slots, guests, outbox, reservations
from services.shared.contracts import make_envelope
from services.shared.store import now_ms


@dataclass(frozen=True)
class Row:
    """One reservation to write; `event(id)` is its reservation.created data."""

    owner: str
    title: str
    description: str
    start_ms: int
    end_ms: int
    created_by: str
    now_ms: int
    gpu_uuids: Sequence[str]
    guests: Sequence[str]
    event: Callable[[int], Mapping[str, Any]]

    def envelope(self, reservation_id: int) -> str:
        data = self.event(reservation_id)
        return make_envelope("reservation.created", data, source=SOURCE).to_json().decode()


# Each answer: the new reservation's id, or the IntegrityError that undid it.
Written = list[int | Exception]

_RESERVATION_SQL = (
    "INSERT INTO reservations (owner, title, description, start_ms, end_ms, status, created_by,"
    " created_at_ms, updated_at_ms, cancelled_by_rules)"
    " VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?, 0) RETURNING id"
)
_SLOT_SQL = (
    "INSERT INTO reservations_gpu_slots (reservation_id, gpu_uuid, owner, start_ms, end_ms,"
    " active) VALUES (?, ?, ?, ?, ?, 1)"
)
_GUEST_SQL = "INSERT INTO reservations_guests (reservation_id, username) VALUES (?, ?)"
_OUTBOX_SQL = "INSERT INTO reservations_outbox (envelope, created_at_ms) VALUES (?, ?)"


def _sqlite_writes(db: sqlite3.Connection, rows: Sequence[Row], commit: bool) -> Written:
    """Runs on aiosqlite's thread, inside the open transaction; commits it when `commit` and
    every row was written."""
    cursor = db.cursor()
    written: Written = []
    try:
        for row in rows:
            cursor.execute("SAVEPOINT warden_create")
            try:
                cursor.execute(
                    _RESERVATION_SQL,
                    (
                        row.owner,
                        row.title,
                        row.description,
                        row.start_ms,
                        row.end_ms,
                        row.created_by,
                        row.now_ms,
                        row.now_ms,
                    ),
                )
                reservation_id = int(cursor.fetchone()[0])
                cursor.executemany(
                    _SLOT_SQL,
                    [
                        (reservation_id, uuid, row.owner, row.start_ms, row.end_ms)
                        for uuid in row.gpu_uuids
                    ],
                )
                if row.guests:
                    cursor.executemany(_GUEST_SQL, [(reservation_id, g) for g in row.guests])
                cursor.execute(_OUTBOX_SQL, (row.envelope(reservation_id), now_ms()))
            except sqlite3.IntegrityError as err:
                cursor.execute("ROLLBACK TO warden_create")
                written.append(err)
            else:
                written.append(reservation_id)
            cursor.execute("RELEASE warden_create")
        if commit and not any(isinstance(outcome, Exception) for outcome in written):
            db.commit()
    finally:
        cursor.close()
    return written


_INSERT_RESERVATIONS = insert(reservations)
_INSERT_SLOTS = insert(gpu_slots)
_INSERT_GUESTS = insert(guests)
_INSERT_OUTBOX = insert(outbox)
_NEXT_IDS = text(
    "SELECT nextval(pg_get_serial_sequence('reservations', 'id')) FROM generate_series(1, :n)"
)


async def _insert_all(conn: AsyncConnection, rows: Sequence[Row], ids: Sequence[int]) -> None:
    """Every table in one executemany (one round trip each with asyncpg)."""
    await conn.execute(
        _INSERT_RESERVATIONS,
        [
            {
                "id": reservation_id,
                "owner": row.owner,
                "title": row.title,
                "description": row.description,
                "start_ms": row.start_ms,
                "end_ms": row.end_ms,
                "status": "active",
                "created_by": row.created_by,
                "created_at_ms": row.now_ms,
                "updated_at_ms": row.now_ms,
                "cancelled_by_rules": False,
            }
            for row, reservation_id in zip(rows, ids, strict=True)
        ],
    )
    await conn.execute(
        _INSERT_SLOTS,
        [
            {
                "reservation_id": reservation_id,
                "gpu_uuid": uuid,
                "owner": row.owner,
                "start_ms": row.start_ms,
                "end_ms": row.end_ms,
                "active": True,
            }
            for row, reservation_id in zip(rows, ids, strict=True)
            for uuid in row.gpu_uuids
        ],
    )
    named = [
        {"reservation_id": reservation_id, "username": guest}
        for row, reservation_id in zip(rows, ids, strict=True)
        for guest in row.guests
    ]
    if named:
        await conn.execute(_INSERT_GUESTS, named)
    at_ms = now_ms()
    await conn.execute(
        _INSERT_OUTBOX,
        [
            {"envelope": row.envelope(reservation_id), "created_at_ms": at_ms}
            for row, reservation_id in zip(rows, ids, strict=True)
        ],
    )


async def _core_writes(conn: AsyncConnection, rows: Sequence[Row]) -> Written:
    """Ids drawn first (one query), then all rows at once in one SAVEPOINT; only when the
    database refuses one of them (another replica's booking) each row again in its own."""
    ids = [int(found) for found in (await conn.execute(_NEXT_IDS, {"n": len(rows)})).scalars()]
    try:
        async with conn.begin_nested():
            await _insert_all(conn, rows, ids)
        return list(ids)
    except IntegrityError:
        pass
    written: Written = []
    for row, reservation_id in zip(rows, ids, strict=True):
        try:
            async with conn.begin_nested():
                await _insert_all(conn, [row], [reservation_id])
        except IntegrityError as err:
            written.append(err)
        else:
            written.append(reservation_id)
    return written


async def write_rows(conn: AsyncConnection, rows: Sequence[Row], *, last: bool = False) -> Written:
    """Write `rows` in the transaction of `conn`; one answer per row, in order.

    `last`: nothing else is written in this transaction. On SQLite, when every row was
    written, the COMMIT then goes in the same round trip to aiosqlite's thread (the store
    finds nothing left to commit); otherwise the transaction stays open for the caller's
    reads of the refusal, and the store commits it."""
    if not rows:
        return []
    if conn.dialect.name != "sqlite":
        return await _core_writes(conn, rows)
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection  # aiosqlite.Connection
    # aiosqlite's own way to run a function on its thread (where its sqlite3 connection lives).
    written: Written = await driver._execute(_sqlite_writes, driver._conn, rows, last)
    return written
