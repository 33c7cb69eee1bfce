"""What a delivery (or a violation handler) did to one target."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActionOutcome:
    """What a handler did to one target: an address, a webhook, a terminal, a pid."""

    target: str
    ok: bool
    detail: str = ""  # what happened, or the error (never a secret such as a webhook URL)
    # Not tried: the channel is not set up, or there was nobody to send to. Recorded as such
    # at once, so the step never stays "pending" (`ok` is False).
    skipped: bool = False
