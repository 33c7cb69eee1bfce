"""A test double of the one notification path, `violations.notify` (served through
`services.shared.rpc.served`, so every call is checked against the violations api), that records
what it was asked to send. Used where the real notifications are not under test.

    double = NotifyDouble(bus)
    await double.serve()
    ...
    [call] = double.of_kind("reservation_idle")
"""

from __future__ import annotations

from typing import Any

from services.notifications import api as violations_api
from services.shared.bus import Bus, Teardown
from services.shared.errors import ServiceUnavailable
from services.shared.rpc import served


class NotifyDouble:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.calls: list[dict[str, Any]] = []
        self.failures = 0  # the next this many calls fail (as an unreachable service would)
        self.failed: list[dict[str, Any]] = []
        self._stop: Teardown | None = None

    async def _notify(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.failures > 0:
            self.failures -= 1
            self.failed.append(args)
            raise ServiceUnavailable("the notification path is down (test double)")
        self.calls.append(args)
        return {"channels": ["test"]}

    async def serve(self) -> None:
        self._stop = await self.bus.serve(
            violations_api.SERVICE,
            served([violations_api.NOTIFY], {violations_api.NOTIFY: self._notify}),
        )

    async def stop(self) -> None:
        if self._stop is not None:
            await self._stop()
            self._stop = None

    def of_kind(self, kind: str, key_prefix: str = "") -> list[dict[str, Any]]:
        return [c for c in self.calls if c["kind"] == kind and str(c["key"]).startswith(key_prefix)]
