"""Time-driven parts: reservation.started / .ended when their time comes, and usage statistics.

Both survive restarts: whether an event went out is a column (`started_event_ms`,
`ended_event_ms`) set by a conditional update in the same transaction as the event, so a
restart sends what it missed (late, never twice), and two replicas never both send one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Row

from services.reservations.booking import repository
from services.reservations.outbox import add_event
from services.reservations.store import Store, to_ms
from services.reservations.tables import reservations
from services.reservations.usage.totals import UsageTotals, add_samples, from_row, summary, to_row
from services.shared.cluster.background import cancel_and_wait
from services.shared.contracts import Envelope
from services.shared.failures import Retrying

log = logging.getLogger("warden.reservations")

TICK_S = 1.0
Figure = tuple[float | None, float | None]  # one GPU's utilisation (%) and memory used (MiB)
BATCH = 500


class UsageTracker:
    """Per-reservation usage from host.sampled events, kept in memory, saved every flush.

    Stored as {"totals": ..., "last_ms": {host: ms}}: the last sample time per host makes a
    redelivered or late event count once. A crash loses at most one flush interval.
    """

    def __init__(
        self,
        store: Store,
        idle_below_percent: float,
        *,
        refresh_s: float = 10.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_figures: Callable[[int, datetime, list[Figure]], None] | None = None,
    ) -> None:
        self.store = store
        self.idle_below_percent = idle_below_percent
        # Each reservation's figures of each sample, as they come: the idle watch (`idle.py`).
        self.on_figures = on_figures
        self.refresh_s = refresh_s
        self.clock = clock
        self._ongoing: dict[str, list[tuple[int, int, int]]] = {}  # gpu -> (id, start, end)
        self._totals: dict[int, UsageTotals] = {}
        self._last_ms: dict[int, dict[str, int]] = {}
        self._dirty: set[int] = set()
        self._refreshed_at = float("-inf")
        self._lock = asyncio.Lock()

    @property
    def margin_ms(self) -> int:
        """How far around now a refresh looks: a booking that starts later needs none."""
        return int(self.refresh_s * 1000) + 60_000

    def invalidate(self) -> None:
        """Reservations changed: look them up again before the next sample."""
        self._refreshed_at = float("-inf")

    async def _refresh(self) -> None:
        now_ms = to_ms(self.clock())
        margin = self.margin_ms
        async with self.store.read() as conn:
            rows = await repository.slots_in_range(conn, now_ms - margin, now_ms + margin)
            ids = {row.reservation_id for row in rows} - set(self._totals)
            stored: Any = (
                await conn.execute(
                    select(reservations.c.id, reservations.c.usage).where(
                        reservations.c.id.in_(ids)
                    )
                )
                if ids
                else []
            )
        ongoing: dict[str, list[tuple[int, int, int]]] = {}
        for row in rows:
            ongoing.setdefault(row.gpu_uuid, []).append(
                (row.reservation_id, row.start_ms, row.end_ms)
            )
        self._ongoing = ongoing
        for reservation_id, usage in stored:
            usage = usage or {}
            self._totals[reservation_id] = from_row(usage.get("totals") or {})
            self._last_ms[reservation_id] = dict(usage.get("last_ms") or {})
        self._refreshed_at = asyncio.get_running_loop().time()

    async def on_host_sampled(self, envelope: Envelope) -> None:
        data = envelope.data
        async with self._lock:
            if asyncio.get_running_loop().time() - self._refreshed_at > self.refresh_s:
                await self._refresh()
            if not self._ongoing:
                return
            at = datetime.fromisoformat(data["sampled_at"])
            at_ms = to_ms(at)
            host = data["host"]
            figures: dict[int, list[Figure]] = {}
            for gpu in data["gpus"]:
                for reservation_id, start_ms, end_ms in self._ongoing.get(gpu["uuid"], ()):
                    if start_ms <= at_ms < end_ms:
                        figures.setdefault(reservation_id, []).append(
                            (gpu.get("utilization_gpu_percent"), gpu.get("memory_used_mib"))
                        )
            for reservation_id, values in figures.items():
                if self.on_figures is not None:
                    self.on_figures(reservation_id, at, values)
                last = self._last_ms.setdefault(reservation_id, {})
                if at_ms <= last.get(host, -1) or reservation_id not in self._totals:
                    continue  # seen already (redelivered), or ended and frozen meanwhile
                last[host] = at_ms
                self._totals[reservation_id] = add_samples(
                    self._totals[reservation_id], at, values, self.idle_below_percent
                )
                self._dirty.add(reservation_id)

    def live(self, reservation_id: int) -> dict[str, Any] | None:
        """The running figures of a reservation being tracked (fresher than the stored ones)."""
        totals = self._totals.get(reservation_id)
        return None if totals is None or not totals.gpu_samples else summary(totals)

    def _stored(self, reservation_id: int) -> dict[str, Any]:
        return {
            "totals": to_row(self._totals[reservation_id]),
            "last_ms": self._last_ms.get(reservation_id, {}),
        }

    async def flush(self) -> None:
        async with self._lock:
            dirty, self._dirty = self._dirty, set()
            if not dirty:
                return
            async with self.store.write() as conn:
                for reservation_id in sorted(dirty):
                    await conn.execute(
                        update(reservations)
                        .where(
                            reservations.c.id == reservation_id,
                            reservations.c.ended_event_ms.is_(None),
                        )
                        .values(usage=self._stored(reservation_id))
                    )

    async def finish(self, reservation_id: int) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Freeze a reservation's usage: (summary for the event, value to store)."""
        async with self._lock:
            totals = self._totals.pop(reservation_id, None)
            last = self._last_ms.pop(reservation_id, {})
            self._dirty.discard(reservation_id)
        if totals is None:
            async with self.store.read() as conn:
                stored = (
                    await conn.execute(
                        select(reservations.c.usage).where(reservations.c.id == reservation_id)
                    )
                ).scalar_one_or_none() or {}
            totals = from_row(stored.get("totals") or {})
            last = stored.get("last_ms") or {}
        return summary(totals), {"totals": to_row(totals), "last_ms": last}


class Lifecycle:
    """Sends reservation.started / .ended when due (checked every second, or when kicked)."""

    def __init__(
        self,
        store: Store,
        usage: UsageTracker,
        *,
        on_commit: Callable[[], None],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        flush_every_s: float = 15.0,
    ) -> None:
        self.store = store
        self.usage = usage
        self.on_commit = on_commit
        self.clock = clock
        self.flush_every_s = flush_every_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def kick(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="reservations lifecycle")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        with contextlib.suppress(Exception):
            await self.usage.flush()

    async def _due(self, column: Any, time_column: Any, now_ms: int) -> list[Row[Any]]:
        async with self.store.read() as conn:
            return list(
                await conn.execute(
                    select(reservations.c.id)
                    .where(
                        reservations.c.status == "active",
                        column.is_(None),
                        time_column <= now_ms,
                    )
                    .order_by(time_column)
                    .limit(BATCH)
                )
            )

    async def tick(self) -> int:
        """Send what is due; returns how many events were written."""
        now_ms = to_ms(self.clock())
        sent = 0
        for row in await self._due(
            reservations.c.started_event_ms, reservations.c.start_ms, now_ms
        ):
            sent += await self._mark(row.id, "reservation.started", now_ms, {})
        for row in await self._due(reservations.c.ended_event_ms, reservations.c.end_ms, now_ms):
            usage_summary, stored = await self.usage.finish(row.id)
            sent += await self._mark(
                row.id, "reservation.ended", now_ms, {"usage": usage_summary}, stored
            )
        if sent:
            self.usage.invalidate()
            self.on_commit()
        return sent

    async def _mark(
        self,
        reservation_id: int,
        event: str,
        now_ms: int,
        extra: dict[str, Any],
        usage: dict[str, Any] | None = None,
    ) -> int:
        column = "started_event_ms" if event == "reservation.started" else "ended_event_ms"
        time_column = (
            reservations.c.start_ms if column == "started_event_ms" else reservations.c.end_ms
        )
        values: dict[str, Any] = {column: now_ms}
        if usage is not None:
            values["usage"] = usage
        async with self.store.write() as conn:
            result = await conn.execute(
                update(reservations)
                .where(
                    reservations.c.id == reservation_id,
                    reservations.c.status == "active",
                    reservations.c[column].is_(None),
                    time_column <= now_ms,
                )
                .values(**values)
            )
            if not result.rowcount:
                return 0  # another replica sent it, or it changed meanwhile
            found = await repository.record(conn, reservation_id)
            assert found is not None
            known = await repository.load_gpus(conn, found.gpu_uuids)
            await add_event(conn, event, {**found.event_data(known), **extra})
        return 1

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        flushed_at = loop.time()
        retrying = Retrying(log, "the reservation lifecycle (started/ended events, usage)")
        wait_s = TICK_S
        while True:
            try:
                await self.tick()
                if loop.time() - flushed_at >= self.flush_every_s:
                    await self.usage.flush()
                    flushed_at = loop.time()
            except Exception as err:
                wait_s = retrying.failed(err)
            else:
                retrying.succeeded()
                wait_s = TICK_S
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):  # (3.11's wait_for can swallow a cancel)
                    await self._wake.wait()
            self._wake.clear()
