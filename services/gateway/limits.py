"""The gateway's rate limits (failed logins per name and per address, set-up and signup
attempts per address, calendar-feed fetches per feed), counted by the reservations service.

The gateway keeps nothing durable and may run as several replicas behind one address: a count
in its own memory would give an attacker who spreads attempts over N replicas N times the
budget. Each attempt is counted in the reservations database instead (`take_attempts`), which
every gateway replica and every reservations replica shares; see `reservations/attempts.py`.
An attempt is counted as failed *before* its outcome is known, so parallel attempts see each
other, and uncounted (`settle`) when it did not fail after all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.accounts import api
from services.shared.bus import Bus
from services.shared.errors import WardenError

log = logging.getLogger("warden.gateway")

FEED_FETCHES_PER_MINUTE = 30


class TooManyAttempts(WardenError):
    code = "too_many_attempts"


@dataclass(frozen=True)
class Budget:
    """`limit` attempts per key of `scope` within `window_s`."""

    scope: str
    window_s: float
    limit: int

    def of(self, value: str) -> dict[str, Any]:
        return {"key": f"{self.scope}:{value}", "window_s": self.window_s, "limit": self.limit}


@dataclass(frozen=True)
class Limits:
    by_user: Budget  # failed logins per username
    by_address: Budget  # failed logins, set-up, signup and feed-token attempts per address
    feed_fetches: Budget  # fetches per calendar feed (by its owner)


def limits_from(window_s: float, per_user: int, per_address: int) -> Limits:
    return Limits(
        Budget("login-user", window_s, per_user),
        Budget("address", window_s, per_address),
        Budget("feed", 60.0, FEED_FETCHES_PER_MINUTE),
    )


async def take(
    bus: Bus, keys: Sequence[dict[str, Any]], what: str = "failed attempts"
) -> list[int]:
    """Count one attempt against each key; TooManyAttempts (429) when one is at its limit."""
    answer = await api.TAKE_ATTEMPTS.call(bus, {"limits": list(keys)})
    wait = answer.get("retry_after_s")
    if wait is not None:
        raise TooManyAttempts(f"too many {what}; try again in {wait:.0f}s", {"retry_after_s": wait})
    return [int(mark) for mark in answer["marks"]]


async def settle(bus: Bus, cancel: Sequence[int] = (), clear: Sequence[str] = ()) -> None:
    """Uncount attempts that did not fail after all. When the service cannot be told (it just
    went down), they stay counted until their window passes: the safe side, and not a reason
    to fail a request that succeeded."""
    try:
        await api.SETTLE_ATTEMPTS.call(bus, {"cancel": list(cancel), "clear": list(clear)})
    except WardenError as err:
        log.warning("could not uncount %d attempts: %s", len(cancel) + len(clear), err.message)
