"""The notification path: dedupe by key, the user's channels for the kind, rate limits, delivery
with retries, and a record of every outcome (sent, failed, limited)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy.exc import IntegrityError

from services.notifications import channels, records
from services.notifications.channels import Note
from services.notifications.delivery.outcome import ActionOutcome
from services.notifications.delivery.smtp import SmtpSender
from services.notifications.delivery.webhook import WebhookPoster
from services.notifications.limits import RateLimiter
from services.shared.config import SmtpSettings, WebhookTarget
from services.shared.failures import describe_failure, outage
from services.shared.storage.outbox import add_event
from services.shared.storage.store import Store, iso_ms, now_ms

log = logging.getLogger("warden.notifications")

# The source of `notification.sent` (its contract): the service that runs the path.
SOURCE = "violations"
# E-mail is retried like the webhooks are: a failed attempt waits, doubling, then tries again;
# a refusal that no retry changes (no address, not configured) is not retried.
MAIL_RETRIES = 2
MAIL_BACKOFF_S = 1.0
NOT_RETRIED = ("not configured", "not a valid e-mail address")

# The address of a user, or None when they have none (asked of the accounts).
AddressOf = Callable[[str], Awaitable[str | None]]


class Notifier:
    def __init__(
        self,
        store: Store,
        *,
        smtp: SmtpSettings,
        mail: SmtpSender,
        webhooks: WebhookPoster,
        address_of: AddressOf,
        per_minute: int,
        outbox: Table,
        on_commit: Callable[[], None] = lambda: None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        smtp_now: Callable[[], Awaitable[SmtpSettings]] | None = None,
    ) -> None:
        self.store = store
        self.smtp = smtp
        self.mail = mail
        # The SMTP settings in force at each send (the Settings page's, else the file's); None:
        # always `smtp` through `mail`.
        self.smtp_now = smtp_now
        self.webhooks = webhooks
        self.address_of = address_of
        self.limiter = RateLimiter(per_minute)
        self.outbox = outbox  # the running service's (its relay publishes what is added)
        self.on_commit = on_commit
        self._sleep = sleep

    async def notify(
        self, args: dict[str, Any], *, skip: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """Deliver one notification (NOTIFY's loaded arguments); what became of it per channel.

        `skip`: channels that told the user already another way (an escalation step's e-mail
        to the owner), so the user does not get the same news twice there."""
        note = Note.from_args(args)
        if note.key is not None and not await self._claim(note):
            return {"duplicate": True, "channels": {}}
        async with self.store.read() as conn:
            prefs, chat_format, chat_url = await records.load_prefs(conn, note.user)
        chosen = [
            channel
            for channel in prefs.channels_for(note.kind)
            if channel not in skip
            and (channel != "chat" or (chat_url and chat_format))  # no handle: no chat
        ]
        results = await asyncio.gather(
            *(self._channel(note, channel, chat_format, chat_url) for channel in chosen)
        )
        return {"duplicate": False, "channels": dict(zip(chosen, results, strict=True))}

    async def _claim(self, note: Note) -> bool:
        assert note.key is not None
        try:
            async with self.store.write() as conn:
                await records.claim_key(conn, note.user, note.key, now_ms())
        except IntegrityError:
            log.debug("notification %s to %s sent before", note.key, note.user)
            return False
        return True

    async def _channel(
        self, note: Note, channel: str, chat_format: str | None, chat_url: str | None
    ) -> str:
        if not self.limiter.allow(note.user, channel):
            await self._record(note, channel, "limited", "over the rate limit")
            return "limited"
        if channel == "browser":
            await self._browser(note)
            return "sent"
        try:
            if channel == "email":
                outcome = await self._email(note)
            else:
                assert chat_format is not None and chat_url is not None
                target = WebhookTarget(url=chat_url, format=chat_format, name="chat")
                outcome = await self.webhooks.post(target, channels.chat(chat_format, note))
        except Exception as err:  # recorded; one channel failing never costs the others
            if outage(err):  # a server away for a while (its database): one line, no trace
                log.warning("notification on %s failed: %s", channel, describe_failure(err))
            else:
                log.exception("notification on %s failed", channel)
            outcome = ActionOutcome(channel, False, f"failed: {type(err).__name__}")
        result = "sent" if outcome.ok else "failed"
        # The detail names the server's answer, never the chat URL (the sender scrubs it).
        await self._record(note, channel, result, outcome.detail)
        log.info("notification %s to %s on %s: %s", note.kind, note.user, channel, result)
        return result

    async def _email(self, note: Note) -> ActionOutcome:
        address = await self.address_of(note.user)
        if not address:
            return ActionOutcome(note.user, False, f"no e-mail address for {note.user}")
        smtp, mail = self.smtp, self.mail
        if self.smtp_now is not None:
            smtp = await self.smtp_now()
            mail = SmtpSender(smtp)
        attempt = 0
        while True:
            attempt += 1
            message = channels.email(note, address, smtp.mail_from)
            outcome = await mail.deliver(message, address, f"notification {note.kind}")
            if outcome.ok or attempt > MAIL_RETRIES or outcome.detail.startswith(NOT_RETRIED):
                return outcome
            await self._sleep(MAIL_BACKOFF_S * 2 ** (attempt - 1))

    async def _browser(self, note: Note) -> None:
        """The record and the event in one transaction: the stream shows what was recorded."""
        at = now_ms()
        async with self.store.write() as conn:
            record_id = await records.record(
                conn,
                username=note.user,
                kind=note.kind,
                channel="browser",
                title=note.title,
                outcome="sent",
                detail="",
                at_ms=at,
            )
            data = {
                "id": str(record_id),
                "user": note.user,
                "kind": note.kind,
                "title": note.title,
                "text": note.text,
                "links": [{"label": label, "url": url} for label, url in note.links],
                "at": iso_ms(at) or datetime.now(UTC).isoformat(),
            }
            await add_event(conn, self.outbox, SOURCE, "notification.sent", data)
        self.on_commit()

    async def _record(self, note: Note, channel: str, outcome: str, detail: str) -> None:
        async with self.store.write() as conn:
            await records.record(
                conn,
                username=note.user,
                kind=note.kind,
                channel=channel,
                title=note.title,
                outcome=outcome,
                detail=detail,
                at_ms=now_ms(),
            )
