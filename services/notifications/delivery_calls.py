"""What the delivery settings' RPC methods do: read, save and test e-mail and chat delivery, and
the settings in force for every message that goes out (read at each send: a change on the
Settings page holds from the next message on, with no restart)."""

from __future__ import annotations

from typing import Any

from services.notifications import delivery_records
from services.notifications.channels import Note, chat, email
from services.notifications.delivery.outcome import ActionOutcome
from services.notifications.delivery.setup import (
    NO_SMTP,
    NO_WEBHOOK,
    Delivery,
    MissingUrl,
    answer,
    in_force,
    smtp_changed,
    webhooks_changed,
)
from services.notifications.delivery.smtp import SmtpSender
from services.notifications.delivery.webhook import WebhookPoster
from services.notifications.notifier import AddressOf
from services.shared.config import ViolationSettings
from services.shared.errors import InvalidRequest
from services.shared.storage.store import Store, now_ms

TEST_TITLE = "Warden test message"
TEST_TEXT = (
    "A test from Warden's Settings page: this channel works. Violations and notifications "
    "will reach people here."
)


class DeliveryCalls:
    def __init__(
        self,
        store: Store,
        settings: ViolationSettings,
        address_of: AddressOf,
        webhooks: WebhookPoster,
    ) -> None:
        self.store = store
        self.settings = settings
        self.address_of = address_of
        self.webhooks = webhooks  # started by the path (its pacing per URL is shared)

    async def current(self) -> Delivery:
        """The channels in force now (what was saved, else the file's)."""
        async with self.store.read() as conn:
            saved = await delivery_records.load_saved(conn)
        return in_force(self.settings, saved)

    async def get(self, _args: dict[str, Any]) -> dict[str, Any]:
        return answer(await self.current())

    async def set(self, args: dict[str, Any]) -> dict[str, Any]:
        at = now_ms()
        async with self.store.write() as conn:
            saved = await delivery_records.load_saved(conn)
            if "smtp" in args:
                given = args["smtp"]
                value = None if given is None else smtp_changed(saved.smtp, given)
                await delivery_records.save(conn, "smtp", value, args["by"], at)
            if "webhooks" in args:
                listed = args["webhooks"]
                try:
                    chosen = None if listed is None else webhooks_changed(saved.webhooks, listed)
                except MissingUrl as err:
                    raise InvalidRequest(str(err), {"field": "webhooks"}) from err
                await delivery_records.save(conn, "webhooks", chosen, args["by"], at)
        return await self.get({})

    async def test(self, args: dict[str, Any]) -> dict[str, Any]:
        delivery = await self.current()
        note = Note(args["by"], "job_finished", TEST_TITLE, TEST_TEXT)
        if args["channel"] == "email":
            outcomes = [await self._test_mail(delivery, note, args.get("to"))]
        else:
            outcomes = await self._test_webhooks(delivery, note)
        return {
            "outcomes": [{"target": o.target, "ok": o.ok, "detail": o.detail} for o in outcomes]
        }

    async def _test_mail(self, delivery: Delivery, note: Note, to: str | None) -> ActionOutcome:
        address = to or await self.address_of(note.user)
        if not address:
            raise InvalidRequest(
                f"{note.user} has no e-mail address: give the address to test with",
                {"field": "to"},
            )
        if not delivery.smtp.host:
            return ActionOutcome(address, False, NO_SMTP, skipped=True)
        message = email(note, address, delivery.smtp.mail_from)
        return await SmtpSender(delivery.smtp).deliver(message, address, "test")

    async def _test_webhooks(self, delivery: Delivery, note: Note) -> list[ActionOutcome]:
        if not delivery.webhooks:
            return [ActionOutcome("webhook", False, NO_WEBHOOK, skipped=True)]
        outcomes = []
        for target in delivery.webhooks:
            body = (
                {"type": "test", "title": note.title, "text": note.text}
                if target.format == "json"
                else chat(target.format, note)
            )
            outcomes.append(await self.webhooks.post(target, body))
        return outcomes
