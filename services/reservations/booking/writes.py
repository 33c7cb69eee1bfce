"""The one place a reservation's rows are written (the reservation, its GPU slots, its guests).

`write_rows`: checked creates, several at once inside the caller's transaction: for each, a
SAVEPOINT, the reservation, its GPU slots, its guests, its `reservation.created` outbox row and
its key (`booking.create_keys`). A constraint violation (an overlap the in-memory check did not
know of, a key written by another replica) undoes that one alone.

On SQLite the whole list runs as ONE call on the sqlite3 connection (the same connection and
transaction SQLAlchemy holds; on the thread the transaction runs on), with statements sqlite3
caches. On PostgreSQL the ids are drawn from the sequence first, then every table is written
for the whole list in one statement (one round trip); only if the database refuses one row is
the list written again row by row, each in its own SAVEPOINT.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.outbox import SOURCE
from services.reservations.tables import gpu_slots, guests, reservations
from services.shared.contracts import make_envelope
from services.shared.storage.store import now_ms


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
    key: str | None = None  # its create's key (booking.create_keys), written with it
    fingerprint: str = ""  # what the create asked for (with its key)

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
_KEY_SQL = (
    "INSERT INTO reservations_create_keys (key, reservation_id, fingerprint, created_at_ms)"
    " VALUES (?, ?, ?, ?)"
)


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
                if row.key is not None:
                    cursor.execute(_KEY_SQL, (row.key, reservation_id, row.fingerprint, row.now_ms))
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


# PostgreSQL: every table in ONE statement, each list one array parameter (data-modifying
# CTEs; the foreign keys are checked at the statement's end). The outbox rows keep the list's
# order, which is the order the relay publishes them in.
_INSERT_ALL = text(
    """
WITH new_reservations AS (
    INSERT INTO reservations (id, owner, title, description, start_ms, end_ms, status,
        created_by, created_at_ms, updated_at_ms, cancelled_by_rules)
    SELECT id, owner, title, description, start_ms, end_ms, 'active', created_by, at_ms,
        at_ms, false
    FROM unnest(CAST(:ids AS integer[]), CAST(:owners AS text[]), CAST(:titles AS text[]),
        CAST(:descriptions AS text[]), CAST(:starts AS bigint[]), CAST(:ends AS bigint[]),
        CAST(:created_by AS text[]), CAST(:created_at AS bigint[]))
        AS r(id, owner, title, description, start_ms, end_ms, created_by, at_ms)
), new_slots AS (
    INSERT INTO reservations_gpu_slots (reservation_id, gpu_uuid, owner, start_ms, end_ms,
        active)
    SELECT reservation_id, gpu_uuid, owner, start_ms, end_ms, true
    FROM unnest(CAST(:slot_ids AS integer[]), CAST(:slot_gpus AS text[]),
        CAST(:slot_owners AS text[]), CAST(:slot_starts AS bigint[]),
        CAST(:slot_ends AS bigint[]))
        AS s(reservation_id, gpu_uuid, owner, start_ms, end_ms)
), new_guests AS (
    INSERT INTO reservations_guests (reservation_id, username)
    SELECT reservation_id, username
    FROM unnest(CAST(:guest_ids AS integer[]), CAST(:guest_names AS text[]))
        AS g(reservation_id, username)
), new_keys AS (
    INSERT INTO reservations_create_keys (key, reservation_id, fingerprint, created_at_ms)
    SELECT key, reservation_id, fingerprint, at_ms
    FROM unnest(CAST(:key_ids AS integer[]), CAST(:keys AS text[]),
        CAST(:fingerprints AS text[]), CAST(:key_at AS bigint[]))
        AS k(reservation_id, key, fingerprint, at_ms)
)
INSERT INTO reservations_outbox (envelope, created_at_ms)
SELECT envelope, :outbox_at FROM unnest(CAST(:envelopes AS text[])) WITH ORDINALITY
    AS o(envelope, n)
ORDER BY n
"""
)
_NEXT_IDS = text(
    "SELECT nextval(pg_get_serial_sequence('reservations', 'id')) FROM generate_series(1, :n)"
)


async def _insert_all(conn: AsyncConnection, rows: Sequence[Row], ids: Sequence[int]) -> None:
    """Every row of every table in one statement (one round trip)."""
    pairs = list(zip(rows, ids, strict=True))
    slots = [(i, uuid, row) for row, i in pairs for uuid in row.gpu_uuids]
    named = [(i, guest) for row, i in pairs for guest in row.guests]
    keyed = [(i, row) for row, i in pairs if row.key is not None]
    await conn.execute(
        _INSERT_ALL,
        {
            "ids": list(ids),
            "owners": [row.owner for row in rows],
            "titles": [row.title for row in rows],
            "descriptions": [row.description for row in rows],
            "starts": [row.start_ms for row in rows],
            "ends": [row.end_ms for row in rows],
            "created_by": [row.created_by for row in rows],
            "created_at": [row.now_ms for row in rows],
            "slot_ids": [i for i, _uuid, _row in slots],
            "slot_gpus": [uuid for _i, uuid, _row in slots],
            "slot_owners": [row.owner for _i, _uuid, row in slots],
            "slot_starts": [row.start_ms for _i, _uuid, row in slots],
            "slot_ends": [row.end_ms for _i, _uuid, row in slots],
            "guest_ids": [i for i, _guest in named],
            "guest_names": [guest for _i, guest in named],
            "key_ids": [i for i, _row in keyed],
            "keys": [row.key for _i, row in keyed],
            "fingerprints": [row.fingerprint for _i, row in keyed],
            "key_at": [row.now_ms for _i, row in keyed],
            "envelopes": [row.envelope(i) for row, i in pairs],
            "outbox_at": now_ms(),
        },
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


# --- changes of one reservation (updates, cancels, ends, access re-checks) ------------------------


async def set_guests(conn: AsyncConnection, reservation_id: int, usernames: Sequence[str]) -> None:
    """Make `usernames` the reservation's guests (none: no guests)."""
    await conn.execute(delete(guests).where(guests.c.reservation_id == reservation_id))
    if usernames:
        await conn.execute(
            insert(guests),
            [{"reservation_id": reservation_id, "username": name} for name in usernames],
        )


async def update_reservation(conn: AsyncConnection, reservation_id: int, **values: Any) -> None:
    """Change columns of a reservation; its GPU slots follow its interval and state."""
    await conn.execute(
        update(reservations).where(reservations.c.id == reservation_id).values(**values)
    )
    slot_values: dict[str, Any] = {k: values[k] for k in ("start_ms", "end_ms") if k in values}
    if "status" in values:
        slot_values["active"] = values["status"] == "active"
    if slot_values:
        await conn.execute(
            update(gpu_slots)
            .where(gpu_slots.c.reservation_id == reservation_id)
            .values(**slot_values)
        )
