"""Stopping a background task: cancel it and wait until it has finished.

The loops of sharding, leadership, the replica heartbeat, the host directory, the outbox relay,
the metrics writer, the jobs engine, the reservations' lifecycle and idle watch, the escalation
and the reminders each run as one `asyncio` task, started with
`asyncio.create_task(..., name=...)` and stopped with `cancel_and_wait`, so that nothing of the
loop still runs once `stop` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (None: nothing to stop) and wait for it to end; the `CancelledError` it
    ends with stays here (a cancel of the caller itself still reaches the caller)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
