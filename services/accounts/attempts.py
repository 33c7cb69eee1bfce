"""Counted attempts: the shared state behind the gateway's rate limits.

The gateway owns nothing durable and may run as many replicas: a limit it kept in its own
memory would give an attacker who spreads attempts over N replicas N times the budget. So each
limited attempt (a login that may fail, a set-up or signup attempt, a calendar-feed fetch) is a
row here, keyed by what it is counted against (`login-user:alice`, `address:10.0.0.7`,
`feed:alice`). `take` counts a key's rows within its window and, when every key is under its
limit, adds one row per key in the same transaction; `settle` removes rows that turned out not
to count (a right password) or clears a key (a successful login clears the name's failures).

Serialised per key, so a parallel burst spread over gateway and reservations replicas never
gets more than the limit: on PostgreSQL with a transaction-scoped advisory lock per key (taken
in key order: no deadlock), on SQLite by `Store.write()` (one writer at a time). Rows carry the
reservations replica's clock (keep replicas in NTP sync, as for reservations themselves).
Expired rows are deleted by the `take` that finds them and, across keys, at most once a minute.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.store import Store, now_ms
from services.reservations.tables import attempts

PURGE_EVERY_S = 60.0


def lock_id(key: str) -> int:
    """A signed 64-bit advisory lock id for `key` (stable across processes and replicas)."""
    return zlib.crc32(key.encode()) - 2**31


async def _lock(conn: AsyncConnection, keys: Sequence[str]) -> None:
    if conn.dialect.name != "postgresql":
        # SQLite: Store.write() runs one writer at a time, but its BEGIN IMMEDIATE goes with
        # the first statement: run one now, so that the write lock (which another process's
        # engine may hold) is ours before the caller reads the clock.
        await conn.execute(text("SELECT 1"))
        return
    for lock in sorted({lock_id(key) for key in keys}):
        await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock})


async def retry_after_ms(
    conn: AsyncConnection, key: str, window_ms: int, limit: int, now: int
) -> int | None:
    """Milliseconds until `key` is under `limit` within its window again; None: it is now."""
    rows = (
        await conn.execute(
            select(attempts.c.at_ms)
            .where(attempts.c.key == key, attempts.c.at_ms > now - window_ms)
            .order_by(attempts.c.at_ms)
        )
    ).all()
    if len(rows) < limit:
        return None
    # When the attempt that puts it at the limit leaves the window, it is under again.
    return max(0, int(rows[len(rows) - limit].at_ms) + window_ms - now)


async def take(conn: AsyncConnection, limits: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Count one attempt against each key, unless one is at its limit (then nothing is)."""
    await _lock(conn, [limit["key"] for limit in limits])
    # Read once the keys are ours: a clock read before waiting could be older than the rows
    # the holder wrote meanwhile, and a refusal would say to wait longer than the window.
    now = now_ms()
    waits = []
    for limit in limits:
        window_ms = int(limit["window_s"] * 1000)
        await conn.execute(
            delete(attempts).where(
                attempts.c.key == limit["key"], attempts.c.at_ms <= now - window_ms
            )
        )
        wait = await retry_after_ms(conn, limit["key"], window_ms, limit["limit"], now)
        if wait is not None:
            waits.append(wait)
    if waits:
        return {"retry_after_s": max(waits) / 1000, "marks": []}
    marks = []
    for limit in limits:
        until = now + int(limit["window_s"] * 1000)
        row = await conn.execute(
            insert(attempts)
            .values(key=limit["key"], at_ms=now, until_ms=until)
            .returning(attempts.c.id)
        )
        marks.append(int(row.scalar_one()))
    return {"retry_after_s": None, "marks": marks}


async def settle(conn: AsyncConnection, cancel: Sequence[int], clear: Sequence[str]) -> None:
    if cancel:
        await conn.execute(delete(attempts).where(attempts.c.id.in_(list(cancel))))
    if clear:
        await _lock(conn, clear)
        await conn.execute(delete(attempts).where(attempts.c.key.in_(list(clear))))


async def purge(conn: AsyncConnection) -> int:
    """Delete every row whose window has passed (names made up by the thousand included)."""
    gone = await conn.execute(delete(attempts).where(attempts.c.until_ms < now_ms()))
    return int(gone.rowcount or 0)


async def count(conn: AsyncConnection) -> int:
    return int((await conn.execute(select(func.count()).select_from(attempts))).scalar_one())


class AttemptCalls:
    """The RPC methods `take_attempts` and `settle_attempts`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._purged_at = 0.0

    async def take(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.write() as conn:
            answer = await take(conn, args["limits"])
        if time.monotonic() - self._purged_at > PURGE_EVERY_S:
            self._purged_at = time.monotonic()
            async with self.store.write() as conn:
                await purge(conn)
        return answer

    async def settle(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.write() as conn:
            await settle(conn, args.get("cancel", []), args.get("clear", []))
        return {}
