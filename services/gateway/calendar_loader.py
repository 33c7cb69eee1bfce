"""Filling the gateway's calendar copy: the start-up load, events, pruning."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

from services.gateway.calendar import KEEP_PAST, LOAD_AHEAD, CalendarView
from services.gateway.stream import Event, StreamHub
from services.reservations import api
from services.shared.bus import Bus
from services.shared.errors import ServiceUnavailable

log = logging.getLogger("warden.gateway")

# The reservations service answers at most this range per calendar call.
CHUNK = timedelta(weeks=8)
PRUNE_EVERY_S = 3600.0
RECONNECT_CHECK_S = 1.0


def follow_events(view: CalendarView, hub: StreamHub) -> None:
    def on_event(event: Event) -> None:
        if event.topic == "reservations":
            view.apply(event.type, event.data)

    hub.listeners.append(on_event)


async def load(view: CalendarView, bus: Bus, retry_max_s: float = 30.0) -> None:
    """Load [now - KEEP_PAST, now + LOAD_AHEAD) once the service answers (it may start later)."""
    delay = 0.5
    while True:
        now = datetime.now(UTC)
        start, end = now - KEEP_PAST, now + LOAD_AHEAD
        try:
            found = []
            at = start
            while at < end:
                until = min(at + CHUNK, end)
                found += await api.CALENDAR.call(
                    bus,
                    {"start": at.isoformat(), "end": until.isoformat(), "include_cancelled": True},
                    timeout=30,
                )
                at = until
        except ServiceUnavailable as err:
            log.debug("calendar not loaded yet: %s", err.message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, retry_max_s)
            continue
        view.load(found, start, end)
        log.info("calendar copy loaded: %d reservations", len(view))
        return


async def keep(view: CalendarView, bus: Bus) -> None:
    """Load, then prune once an hour (a long-running task of the app); load again after a
    broker reconnection, since the events published meanwhile never reached this replica."""
    await load(view, bus)
    reconnections, pruned = bus.reconnections, time.monotonic()
    while True:
        await asyncio.sleep(RECONNECT_CHECK_S)
        if bus.reconnections != reconnections:
            reconnections = bus.reconnections
            log.info("the broker was away: the calendar copy is loaded again")
            view.forget()
            await load(view, bus)
        if time.monotonic() - pruned >= PRUNE_EVERY_S:
            pruned = time.monotonic()
            view.prune(datetime.now(UTC))
