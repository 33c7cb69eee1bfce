"""An in-memory stand-in for the reservations service's `take_attempts` / `settle_attempts`
(services.accounts.attempts), for gateway tests that serve a fake reservations service.
Same answers; tests/unit/test_attempts_double.py holds it to the real one's rules."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from services.shared.bus import Bus


class FakeAttempts:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.rows: dict[int, tuple[str, float]] = {}  # mark -> (key, at)
        self._marks = itertools.count(1)

    async def take(self, args: dict[str, Any]) -> dict[str, Any]:
        now, waits = self.clock(), []
        for limit in args["limits"]:
            times = sorted(
                at
                for key, at in self.rows.values()
                if key == limit["key"] and at > now - limit["window_s"]
            )
            if len(times) >= limit["limit"]:
                waits.append(times[len(times) - limit["limit"]] + limit["window_s"] - now)
        if waits:
            return {"retry_after_s": max(0.0, max(waits)), "marks": []}
        marks = []
        for limit in args["limits"]:
            mark = next(self._marks)
            self.rows[mark] = (limit["key"], now)
            marks.append(mark)
        return {"retry_after_s": None, "marks": marks}

    async def settle(self, args: dict[str, Any]) -> dict[str, Any]:
        for mark in args.get("cancel", []):
            self.rows.pop(mark, None)
        clear = set(args.get("clear", []))
        self.rows = {m: row for m, row in self.rows.items() if row[0] not in clear}
        return {}

    def methods(self) -> dict[str, Any]:
        return {"take_attempts": self.take, "settle_attempts": self.settle}

    async def serve(self, bus: Bus, **others: Any) -> None:
        """Serve these two (and `others`) as the reservations service on `bus`."""
        await bus.serve("reservations", {**self.methods(), **others})
