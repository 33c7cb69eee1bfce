"""`Mailbox`: an aiosmtpd handler that keeps every message it is sent, for tests that read the
mail Warden sends (serve it with `aiosmtpd.controller.Controller(Mailbox(), ...)`)."""

from __future__ import annotations

from email import message_from_bytes
from email.policy import Policy, compat32
from typing import Any


class Mailbox:
    """Received messages as (recipients, message), parsed with `policy` (email's default:
    compat32; `email.policy.default` gives `EmailMessage`s)."""

    def __init__(self, policy: Policy = compat32) -> None:
        self.policy = policy
        self.messages: list[tuple[list[str], Any]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(
            (list(envelope.rcpt_tos), message_from_bytes(envelope.content, policy=self.policy))
        )
        return "250 OK"

    def to(self, address: str) -> list[Any]:
        return [message for rcpt, message in self.messages if address in rcpt]
