"""The inventory's rows in the monitor's database (table `monitor_hosts`): read, seed, write.

The rules (what seeding changes, what a tombstone means) are in `inventory.py`; this module
only moves rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.monitor.hosts.inventory import StoredHost, seed_plan, seeded
from services.monitor.tables import hosts as table
from services.shared.config import HostConfig


def _row(stored: StoredHost) -> dict[str, Any]:
    host = stored.host
    return {
        "address": host.address,
        "port": host.port,
        "user": host.user,
        "key_file": host.key_file,
        "probe": host.probe,
        "labels": json.dumps(list(host.labels)),
        "host_key": host.host_key,
        "source": stored.source,
        "removed": stored.removed,
    }


def _stored(row: Any) -> StoredHost:
    host = HostConfig(
        name=row.name,
        address=row.address,
        port=row.port,
        user=row.user,
        key_file=row.key_file,
        probe=row.probe,
        labels=tuple(json.loads(row.labels)),
        host_key=row.host_key,
    )
    return StoredHost(host, row.source, bool(row.removed))


class HostStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def all(self) -> list[StoredHost]:
        """Every row, tombstones included, by name."""
        async with self.engine.connect() as conn:
            return await self._all(conn)

    @staticmethod
    async def _all(conn: AsyncConnection) -> list[StoredHost]:
        rows = await conn.execute(sa.select(table).order_by(table.c.name))
        return [_stored(row) for row in rows]

    async def get(self, name: str) -> StoredHost | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(sa.select(table).where(table.c.name == name))).first()
        return _stored(row) if row is not None else None

    async def seed(self, configured: Sequence[HostConfig]) -> list[StoredHost]:
        """Apply `[[hosts]]` to the rows (`inventory.seed_plan`); the rows after it.

        Monitor replicas that start together seed at once: one whose insert loses the race
        plans again from the rows the other wrote."""
        for attempt in range(1, 4):
            try:
                return await self._seed(configured)
            except sa.exc.IntegrityError:
                if attempt == 3:
                    raise
        raise AssertionError("unreachable")

    async def _seed(self, configured: Sequence[HostConfig]) -> list[StoredHost]:
        async with self.engine.begin() as conn:
            stored = await self._all(conn)
            plan = seed_plan(stored, configured)
            now = datetime.now(UTC)
            for row in plan.insert:
                await conn.execute(
                    sa.insert(table).values(
                        name=row.name, created_at=now, updated_at=now, **_row(row)
                    )
                )
            for row in plan.update:
                await conn.execute(
                    sa.update(table)
                    .where(table.c.name == row.name)
                    .values(updated_at=now, **_row(row))
                )
            if plan.delete:
                await conn.execute(sa.delete(table).where(table.c.name.in_(plan.delete)))
        return seeded(stored, plan)

    async def put(self, stored: StoredHost) -> None:
        """Insert the row, or overwrite the one of that name (a tombstone is revived)."""
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            done = await conn.execute(
                sa.update(table)
                .where(table.c.name == stored.name)
                .values(updated_at=now, **_row(stored))
            )
            if done.rowcount == 0:
                await conn.execute(
                    sa.insert(table).values(
                        name=stored.name, created_at=now, updated_at=now, **_row(stored)
                    )
                )
