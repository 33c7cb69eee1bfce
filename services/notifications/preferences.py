"""Each user's choices: which channels get which kinds, and reminder lead times (pure).

Defaults help without spamming: every kind in the browser; e-mail and chat only for what needs
action or went wrong; reminders 10 minutes before a reservation starts and ends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.notifications.api import CHANNELS, NOTIFICATION_KINDS

DEFAULT_LEAD_MIN = 10
URGENT = frozenset(
    {
        "reservation_idle",
        "reservation_released",
        "reservation_cancelled",
        "reservation_violated",
        "job_failed",
        "account",
        "host_key_changed",
        "maintenance",
        "gpu_health",
    }
)


def _default_kinds() -> dict[str, frozenset[str]]:
    return {
        kind: frozenset({"browser", "email", "chat"} if kind in URGENT else {"browser"})
        for kind in NOTIFICATION_KINDS
    }


@dataclass(frozen=True)
class Preferences:
    kinds: Mapping[str, frozenset[str]] = field(default_factory=_default_kinds)
    start_lead_min: int = DEFAULT_LEAD_MIN
    end_lead_min: int = DEFAULT_LEAD_MIN

    def channels_for(self, kind: str) -> list[str]:
        """The channels that get `kind`, in `CHANNELS` order."""
        chosen = self.kinds.get(kind, frozenset())
        return [channel for channel in CHANNELS if channel in chosen]

    def to_json(self) -> str:
        return json.dumps(
            {
                "kinds": {kind: sorted(channels) for kind, channels in self.kinds.items()},
                "start_lead_min": self.start_lead_min,
                "end_lead_min": self.end_lead_min,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> Preferences:
        """Stored choices over the defaults: a kind added later starts with its default."""
        if not text:
            return cls()
        stored = json.loads(text)
        kinds = _default_kinds()
        for kind, channels in (stored.get("kinds") or {}).items():
            if kind in kinds:
                kinds[kind] = frozenset(c for c in channels if c in CHANNELS)
        return cls(
            kinds=kinds,
            start_lead_min=int(stored.get("start_lead_min", DEFAULT_LEAD_MIN)),
            end_lead_min=int(stored.get("end_lead_min", DEFAULT_LEAD_MIN)),
        )

    def changed(self, update: Mapping[str, Any]) -> Preferences:
        """These preferences with `update` (the set arguments) applied; kinds not named keep
        their channels."""
        kinds = dict(self.kinds)
        for row in update.get("kinds") or ():
            kinds[row["kind"]] = frozenset(c for c in CHANNELS if row.get(c))
        return Preferences(
            kinds=kinds,
            start_lead_min=int(update.get("start_lead_min", self.start_lead_min)),
            end_lead_min=int(update.get("end_lead_min", self.end_lead_min)),
        )


def mask(url: str | None) -> str | None:
    """A chat URL as answers show it: its host and the last 4 characters (it holds a token)."""
    if not url:
        return None
    host = url.split("://", 1)[-1].split("/", 1)[0]
    return f"{host}/…{url[-4:]}" if len(url) > len(host) + 16 else f"{host}/…"


def answer(prefs: Preferences, chat_format: str | None, chat_url: str | None) -> dict[str, Any]:
    """The preferences as the RPC answers them (never the chat URL itself)."""
    return {
        "kinds": [
            {"kind": kind, **{c: c in prefs.kinds.get(kind, ()) for c in CHANNELS}}
            for kind in NOTIFICATION_KINDS
        ],
        "start_lead_min": prefs.start_lead_min,
        "end_lead_min": prefs.end_lead_min,
        "chat_format": chat_format if chat_url else None,
        "chat_handle": mask(chat_url),
    }
