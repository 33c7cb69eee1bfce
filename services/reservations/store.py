"""Transactions on the reservations database (the shared `Store`), and one lock of its own.

On SQLite `Store.write()` runs one writer at a time; on PostgreSQL the exclusion constraint
settles races between GPUs and `lock_owner` serialises one owner's requests (quotas).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.tables import users
from services.shared.storage.store import Store, from_ms, iso_ms, now_ms, to_ms

__all__ = ["Store", "from_ms", "iso_ms", "lock_owner", "lock_owners", "now_ms", "to_ms"]


async def lock_owner(conn: AsyncConnection, username: str) -> None:
    """Serialise one owner's concurrent requests on PostgreSQL (SQLite writes are serial)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(select(users.c.id).where(users.c.username == username).with_for_update())


async def lock_owners(conn: AsyncConnection, usernames: list[str]) -> None:
    """`lock_owner` for several owners in one statement, in name order (no lock cycles)."""
    if usernames and conn.dialect.name == "postgresql":
        await conn.execute(
            select(users.c.id)
            .where(users.c.username.in_(usernames))
            .order_by(users.c.username)
            .with_for_update()
        )
