"""The events a test sees on the bus, kept in a list it can look through and wait on."""

from __future__ import annotations

from services.shared.bus import Bus
from services.shared.contracts import Envelope


async def record(bus: Bus, events: list[Envelope], service: str, pattern: str = "#") -> None:
    """From now on, append each event of `service` whose type matches `pattern` to `events`."""

    async def append(envelope: Envelope) -> None:
        events.append(envelope)

    await bus.subscribe(service, pattern, "test.recorder", append)
