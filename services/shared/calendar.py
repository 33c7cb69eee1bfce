"""Fetching the reservations calendar and GPU list at start-up, for services that keep their
own `ReservationBook` (violations, jobs) from `reservation.*` events afterwards."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from services.shared.bus import Bus
from services.shared.errors import ServiceUnavailable

# Reservations are at most days long; this reaches every one that holds a GPU now or soon.
RESERVATIONS_AHEAD = timedelta(weeks=8)


async def fetch_calendar(
    bus: Bus, log: logging.Logger, retry_max_s: float = 30.0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(current and coming reservations, every GPU) from the reservations service; asks again,
    backing off, until it answers (it may start after the caller)."""
    delay, warned = 1.0, False
    while True:
        now = datetime.now(UTC)
        try:
            found = await bus.call(
                "reservations",
                "calendar",
                {"start": now.isoformat(), "end": (now + RESERVATIONS_AHEAD).isoformat()},
            )
            gpus = await bus.call("reservations", "list_gpus", {})
        except ServiceUnavailable as err:
            if not warned:
                log.warning("reservations not loaded (%s); retrying", err.message)
                warned = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, retry_max_s)
            continue
        return found, gpus
