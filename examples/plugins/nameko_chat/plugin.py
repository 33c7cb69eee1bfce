"""A Warden plugin written as a plain nameko service: tell a chat room about GPU violations.

Warden's `violations` service publishes `violation.opened` / `violation.resolved` on the
durable topic exchange `violations.events` with nameko's conventions, so an ordinary
`@event_handler("violations", ...)` receives them unchanged: the payload is Warden's whole
event envelope (id, type, version, occurred_at, source, data) as a dict.

"Posting to chat" is, in this example, appending the chat text as one JSON line to the file
named by WARDEN_PLUGIN_OUT (default ./violations.log). See README.md for swapping in an HTTP
POST to a webhook.

Run it (from this directory):  nameko run --config config.yaml plugin
"""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime
from typing import Any

from nameko.events import event_handler

log = logging.getLogger("warden_chat_plugin")

SUPPORTED_VERSION = 1  # the envelope version of violation.* this plugin understands


def _when(value: Any) -> str | None:
    """An ISO-8601 time from the event as a short human time ("2025-05-01 18:00 UTC")."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.utcoffset() is not None and moment.utcoffset().total_seconds() == 0:
        return moment.strftime("%Y-%m-%d %H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M %z")


def _gpu(data: dict[str, Any]) -> str:
    index = data.get("gpu_index")
    where = data.get("host", "?")
    return f"GPU {index} on {where}" if index is not None else f"a GPU on {where}"


def format_message(envelope: dict[str, Any]) -> str:
    """One line of chat text for a violation.* envelope (version 1)."""
    data = envelope.get("data") or {}
    offender = data.get("offender") or "someone"
    owner = data.get("owner")
    until = _when(data.get("reservation_end"))
    incident = data.get("incident_id", "?")
    if envelope.get("type") == "violation.resolved":
        reason = data.get("reason") or "resolved"
        return f"✅ {_gpu(data)}: {offender} no longer uses it ({reason}; incident {incident})"
    reserved = ""
    if owner:
        reserved = f", reserved by {owner}" + (f" until {until}" if until else "")
    pids = ", ".join(str(p) for p in data.get("pids") or [])
    return (
        f"🚨 {_gpu(data)} is used by {offender}{reserved}"
        + (f" (pids {pids})" if pids else "")
        + f" — incident {incident}"
    )


class WardenChatPlugin:
    name = "warden_chat_plugin"

    _lock = threading.Lock()  # handlers run concurrently (green threads); one write at a time

    def _post(self, envelope: dict[str, Any]) -> None:
        if not isinstance(envelope, dict):
            log.warning("ignored a message that is not an envelope object: %r", envelope)
            return
        if envelope.get("version") != SUPPORTED_VERSION:
            log.warning(
                "ignored %s %s: version %r (this plugin understands version %d)",
                envelope.get("type"),
                envelope.get("id"),
                envelope.get("version"),
                SUPPORTED_VERSION,
            )
            return
        text = format_message(envelope)
        line = {
            "event_id": envelope.get("id"),
            "type": envelope.get("type"),
            "occurred_at": envelope.get("occurred_at"),
            "incident_id": (envelope.get("data") or {}).get("incident_id"),
            "offender": (envelope.get("data") or {}).get("offender"),
            "text": text,
        }
        path = os.environ.get("WARDEN_PLUGIN_OUT", "violations.log")
        with self._lock, open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        log.info("posted: %s", text)

    @event_handler("violations", "violation.opened")
    def on_opened(self, envelope: dict[str, Any]) -> None:
        self._post(envelope)

    @event_handler("violations", "violation.resolved")
    def on_resolved(self, envelope: dict[str, Any]) -> None:
        self._post(envelope)
