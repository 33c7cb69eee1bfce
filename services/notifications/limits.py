"""Rate limits per user and channel (pure): at most `per_minute` in any 60 seconds; the rest
are not sent (recorded as `limited`). Counted in this process: a restart forgets."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 60.0


class RateLimiter:
    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._sent: dict[tuple[str, str], deque[float]] = {}

    def allow(self, user: str, channel: str) -> bool:
        """Whether one more goes to `user` on `channel` now; counts it when it does."""
        now = self._clock()
        sent = self._sent.setdefault((user, channel), deque())
        while sent and sent[0] <= now - WINDOW_S:
            sent.popleft()
        if len(sent) >= self.per_minute:
            return False
        sent.append(now)
        return True
