"""Events written in the same transaction as their change, published after the commit.

`add_event` validates the event against its contract at once (a bug surfaces in the request
that caused it) and stores the envelope; the `Relay` publishes stored envelopes in order and
deletes them. A crash between publishing and deleting publishes an envelope again with the
same id, which consumers treat as a duplicate (delivery is at least once anyway).

Several replicas share one PostgreSQL outbox: a relay claims the table for a batch (a
transaction-scoped advisory lock, taken before reading and held until the batch is deleted),
so each envelope goes out from one relay, in order, and twice only after a crash. SQLite's
outbox is one process's, whose flushes already take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    MetaData,
    Select,
    Table,
    Text,
    delete,
    func,
    insert,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from services.shared.bus import Bus, Teardown
from services.shared.bus.metered import MeteredBus
from services.shared.cluster.background import cancel_and_wait
from services.shared.contracts import make_envelope, parse_envelope
from services.shared.failures import Retrying
from services.shared.metrics import Sample
from services.shared.storage.store import Store, now_ms

log = logging.getLogger("warden.outbox")


def outbox_table(metadata: MetaData, service: str) -> Table:
    """`<service>_outbox`: envelopes waiting to be published."""
    return Table(
        f"{service}_outbox",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("envelope", Text, nullable=False),
        Column("created_at_ms", BigInteger, nullable=False),
    )


async def add_event(
    conn: AsyncConnection, table: Table, source: str, type_name: str, data: Mapping[str, Any]
) -> None:
    envelope = make_envelope(type_name, data, source=source)
    await conn.execute(
        insert(table).values(envelope=envelope.to_json().decode(), created_at_ms=now_ms())
    )


class Relay:
    """Publishes the outbox: when kicked after a commit, and every `interval_s` as a backstop.

    `min_gap_s`: a kick within that long of the last flush's start waits for the rest of it,
    so a stream of commits shares flushes (a flush is two transactions whatever it carries);
    a kick after a quiet moment flushes at once."""

    def __init__(
        self,
        store: Store,
        bus: Bus,
        table: Table,
        interval_s: float = 5.0,
        batch: int = 200,
        min_gap_s: float = 0.0,
    ) -> None:
        self.store = store
        self.bus = bus
        self.table = table
        self.interval_s = interval_s
        self.batch = batch
        self.min_gap_s = min_gap_s
        self.flushes = 0  # flushes begun (tests: kicks are coalesced)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._flushing = asyncio.Lock()
        self._stopping = False
        self._unprobe: Teardown | None = None
        # PostgreSQL's advisory locks are one space per database: the table's name picks one.
        self._lock_key = zlib.crc32(table.name.encode())

    def kick(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"{self.table.name} relay")
        if isinstance(self.bus, MeteredBus):  # the backlog, for the service's metrics
            self._unprobe = self.bus.add_probe(self.backlog)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Publish what is waiting and stop. The loop is let finish its flush, not cancelled in
        the middle of one (which would publish its envelopes again at the next start)."""
        unprobe, self._unprobe = self._unprobe, None
        if unprobe is not None:
            await unprobe()
        if self._task is None:
            return
        self._stopping = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        except TimeoutError:
            await cancel_and_wait(self._task)
        self._task = None

    async def backlog(self) -> list[Sample]:
        """How many envelopes wait, and for how long the oldest has (a metrics probe)."""
        table = self.table
        async with self.store.read() as conn:
            count, oldest_ms = (
                await conn.execute(select(func.count(), func.min(table.c.created_at_ms)))
            ).one()
        samples: list[Sample] = [("warden_outbox_backlog", {}, float(count))]
        if oldest_ms is not None:
            age_s = max(0.0, (now_ms() - oldest_ms) / 1000)
            samples.append(("warden_outbox_oldest_seconds", {}, age_s))
        return samples

    async def flush(self) -> int:
        """Publish everything waiting when it starts; returns how many envelopes went out.
        (What commits meanwhile kicks the relay again: a flush does not go on reading it.)"""
        sent = 0
        async with self._flushing:
            while True:
                if self.store.is_sqlite:
                    count = await self._publish_batch()
                else:
                    count = await self._publish_claimed_batch()
                sent += count
                if count < self.batch:
                    return sent

    async def _publish_batch(self) -> int:
        """SQLite: read, publish, then delete in a short write (the write lock is not held
        while publishing: the creates' groups would wait for the broker)."""
        async with self.store.read() as conn:
            rows = (await conn.execute(self._waiting())).all()
        for row in rows:
            await self.bus.publish(parse_envelope(row.envelope))
        if rows:
            # On the loop's thread: a create group waiting for the write lock waits for
            # no trip to SQLite's thread.
            async with self.store.write(on_loop=True) as conn:
                await conn.execute(
                    delete(self.table).where(self.table.c.id.in_([r.id for r in rows]))
                )
        return len(rows)

    async def _publish_claimed_batch(self) -> int:
        """PostgreSQL: the batch is claimed (another replica's relay waits for this one's
        commit, then reads what is left), published and deleted in one transaction."""
        async with self.store.write() as conn:
            await conn.execute(select(func.pg_advisory_xact_lock(self._lock_key)))
            rows = (await conn.execute(self._waiting())).all()
            for row in rows:
                await self.bus.publish(parse_envelope(row.envelope))
            if rows:
                await conn.execute(
                    delete(self.table).where(self.table.c.id.in_([r.id for r in rows]))
                )
        return len(rows)

    def _waiting(self) -> Select[tuple[int, str]]:
        table = self.table
        return select(table.c.id, table.c.envelope).order_by(table.c.id).limit(self.batch)

    async def _run(self) -> None:
        retrying = Retrying(log, f"publishing {self.table.name}")
        wait_s = self.interval_s
        loop = asyncio.get_running_loop()
        last = float("-inf")
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):  # (3.11's wait_for can swallow a cancel)
                    await self._wake.wait()
            rest = last + self.min_gap_s - loop.time()
            if rest > 0 and not self._stopping:
                await asyncio.sleep(rest)  # the commits of the next moments join this flush
            self._wake.clear()
            last = loop.time()
            self.flushes += 1
            try:
                await self.flush()
            except Exception as err:
                wait_s = retrying.failed(err)
            else:
                retrying.succeeded()
                wait_s = self.interval_s
            if self._stopping:
                return
