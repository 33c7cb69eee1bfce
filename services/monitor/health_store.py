"""The GPUs' health in the monitor's database (table `monitor_gpu_health`): a row per degraded
or failed GPU, so a restarted monitor (or the replica a host moves to) goes on where it was.

`HealthStore` moves rows; `FakeHealthStore` beside it keeps them in memory for tests;
`KeptHealth` answers each host's first poll from one read of them all (a replica that starts or
takes over a thousand hosts reads the table once, not once per host).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.monitor.gpu_health import GpuHealth, HealthState
from services.monitor.tables import gpu_health as table

Known = dict[str, tuple[int | None, GpuHealth]]  # uuid -> (index, health)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _at(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


class HealthKeeper(Protocol):
    async def load(self) -> dict[str, Known]: ...

    async def save(self, host: str, uuid: str, index: int | None, health: GpuHealth) -> None: ...


class HealthStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def load(self) -> dict[str, Known]:
        """The degraded and failed GPUs, by host (few: an ok GPU has no row)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(sa.select(table))
            known: dict[str, Known] = {}
            for row in rows:
                since = _at(row.since_ms)
                assert since is not None
                health = GpuHealth(
                    HealthState(row.state), row.reason, since, _at(row.healthy_since_ms)
                )
                known.setdefault(row.host, {})[row.uuid] = (row.gpu_index, health)
        return known

    async def save(self, host: str, uuid: str, index: int | None, health: GpuHealth) -> None:
        """Keep a GPU's health (an ok GPU's row goes)."""
        async with self.engine.begin() as conn:
            await conn.execute(sa.delete(table).where(table.c.uuid == uuid))
            if health.state is not HealthState.OK:
                await conn.execute(
                    sa.insert(table).values(
                        uuid=uuid,
                        host=host,
                        gpu_index=index,
                        state=health.state.value,
                        reason=health.reason,
                        since_ms=_ms(health.since),
                        healthy_since_ms=None
                        if health.healthy_since is None
                        else _ms(health.healthy_since),
                    )
                )


class FakeHealthStore:
    """In memory; records what it was asked to save."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, int | None, GpuHealth]] = {}
        self.saved = 0
        self.loads = 0

    async def load(self) -> dict[str, Known]:
        self.loads += 1
        known: dict[str, Known] = {}
        for uuid, (on, i, h) in self.rows.items():
            known.setdefault(on, {})[uuid] = (i, h)
        return known

    async def save(self, host: str, uuid: str, index: int | None, health: GpuHealth) -> None:
        self.saved += 1
        if health.state is HealthState.OK:
            self.rows.pop(uuid, None)
        else:
            self.rows[uuid] = (host, index, health)


class KeptHealth:
    """What the database kept of a host's GPUs, for its first poll here: the rows of every host
    read at once and used for `fresh_s` (hosts a replica starts with, or takes over together,
    share one read; one taken over later reads again, as another replica may have saved since)."""

    def __init__(self, keeper: HealthKeeper, fresh_s: float = 5.0) -> None:
        self.keeper = keeper
        self.fresh_s = fresh_s
        self._known: dict[str, Known] = {}
        self._read_at: float | None = None
        self._lock = asyncio.Lock()

    async def of(self, host: str) -> Known:
        async with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at > self.fresh_s:
                self._known = await self.keeper.load()
                self._read_at = now
            return self._known.get(host, {})
