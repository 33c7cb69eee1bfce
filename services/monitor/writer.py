"""Feeds the metrics store in batches without ever making a poll wait for it.

`offer()` only appends to a bounded buffer; a background task writes a batch every
`flush_s` seconds. When the store fails, the batch stays buffered and is tried again with
back-off; when the buffer is full the oldest points are dropped, with one log line per episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from services.monitor.tsdb.base import HostPoint, MetricsStore
from services.shared.cluster.background import cancel_and_wait

log = logging.getLogger("warden.monitor.metrics")


class MetricsWriter:
    def __init__(
        self, store: MetricsStore, *, flush_s: float = 1.0, max_pending: int = 100_000
    ) -> None:
        self.store = store
        self.flush_s = flush_s
        self._pending: deque[HostPoint] = deque(maxlen=max_pending)
        self._dropping = False
        self._failing = False
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def offer(self, point: HostPoint) -> None:
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
            if not self._dropping:
                self._dropping = True
                log.warning(
                    "metrics store is behind: dropping the oldest samples (%d buffered)",
                    len(self._pending),
                )
        self._pending.append(point)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="metrics writer")

    async def _run(self) -> None:
        delay = self.flush_s
        while True:
            await asyncio.sleep(delay)
            delay = self.flush_s if await self.flush() else min(delay * 2, 30.0)

    async def flush(self) -> bool:
        """Write what is buffered; False when the store failed (the points stay buffered)."""
        if not self._pending:
            return True
        batch = list(self._pending)
        self._pending.clear()
        try:
            await self.store.write(batch)
        except Exception as err:
            # Back in front of what came meanwhile; a full buffer drops the oldest.
            newer = list(self._pending)
            self._pending.clear()
            self._pending.extend(batch + newer)
            if not self._failing:
                self._failing = True
                log.warning("writing metrics failed, will retry: %r", err)
            return False
        if self._failing:
            self._failing = False
            log.info("writing metrics works again")
        self._dropping = False
        return True

    async def close(self, deadline_s: float = 5.0) -> None:
        await cancel_and_wait(self._task)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(deadline_s):
                await self.flush()
