"""The notification path as the violations service serves it: its RPC handlers, its event
consumers, and how it starts (the senders, the reminders). The service's composition root
builds it with the service's store, outbox and relay."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

from sqlalchemy import Table

from services.accounts import api as accounts_api
from services.notifications import api, delivery_api, preferences, producers, records
from services.notifications.delivery.smtp import SmtpSender
from services.notifications.delivery.webhook import WebhookPoster
from services.notifications.delivery_calls import DeliveryCalls
from services.notifications.notifier import Notifier
from services.notifications.reminders import Reminders
from services.shared.bus import Bus, EventHandler, RpcHandler
from services.shared.config import Settings, SmtpSettings
from services.shared.contracts import Envelope
from services.shared.reservation_book import ReservationBook
from services.shared.rpc import Method
from services.shared.storage.store import Store, now_ms


class NotificationCalls:
    """What the path's RPC methods do: notify, and a user's preferences and record."""

    def __init__(self, store: Store, notifier: Notifier, leads_changed: Callable[[], None]) -> None:
        self.store = store
        self.notifier = notifier
        self.leads_changed = leads_changed  # the reminders look again

    async def notify(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self.notifier.notify(args)

    async def get_prefs(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.read() as conn:
            return preferences.answer(*await records.load_prefs(conn, args["user"]))

    async def set_prefs(self, args: dict[str, Any]) -> dict[str, Any]:
        user = args["user"]
        async with self.store.write() as conn:
            prefs, chat_format, chat_url = await records.load_prefs(conn, user)
            prefs = prefs.changed(args)
            if "chat_url" in args:
                chat_url = args["chat_url"] or None
            if "chat_format" in args:
                chat_format = args["chat_format"]
            await records.save_prefs(conn, user, prefs, chat_format, chat_url, now_ms())
        self.leads_changed()  # a lead time may have changed
        return preferences.answer(prefs, chat_format, chat_url)

    async def list_sent(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.read() as conn:
            return await records.list_sent(conn, args["user"], args["limit"], args["offset"])


class Notifications:
    """Everything of the path one service runs: `start` it, then serve `rpc` and `events`."""

    def __init__(
        self,
        bus: Bus,
        store: Store,
        settings: Settings,
        on_commit: Callable[[], None],
        outbox: Table,
        labels_of: Callable[[str], Sequence[str]] = lambda _host: (),
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.labels_of = labels_of
        self.store = store
        violations = settings.violations
        # The user's own chat webhook is one target among none configured: same pacing and
        # retries as the violation handlers' webhooks.
        self.webhooks = WebhookPoster((), retries=violations.webhook_retries)
        # E-mail and chat delivery as the Settings page saved it, else the file's.
        self.delivery = DeliveryCalls(store, violations, self.address_of, self.webhooks)
        self.notifier = Notifier(
            store,
            smtp=violations.smtp,
            mail=SmtpSender(violations.smtp),
            webhooks=self.webhooks,
            address_of=self.address_of,
            per_minute=violations.notify_per_minute,
            on_commit=on_commit,
            outbox=outbox,
            smtp_now=self.smtp_now,
        )
        # Its own copy of the calendar (the tracker's is the tracker's to change).
        self.book = ReservationBook()
        self.reminders = Reminders(self.book.all, self.leads, self.notifier.notify)
        self.calls = NotificationCalls(store, self.notifier, self.reminders.wake)

    def load_reservations(self, found: list[dict[str, Any]]) -> None:
        """The current and coming reservations, from the reservations service at start."""
        self.book.load(found)
        self.reminders.wake()

    async def start(self, stack: AsyncExitStack) -> None:
        await self.webhooks.start()
        stack.push_async_callback(self.webhooks.close)
        await self.reminders.start()
        stack.push_async_callback(self.reminders.stop)

    async def smtp_now(self) -> SmtpSettings:
        return (await self.delivery.current()).smtp

    async def address_of(self, username: str) -> str | None:
        contacts: dict[str, Any] = await accounts_api.CONTACTS.call(
            self.bus, {"usernames": [username]}
        )
        found = (contacts["users"].get(username) or {}).get("email")
        return str(found) if found else None

    async def admins(self) -> list[str]:
        contacts: dict[str, Any] = await accounts_api.CONTACTS.call(self.bus, {"usernames": []})
        return [str(admin["username"]) for admin in contacts["admins"]]

    async def leads(self, owners: Iterable[str]) -> dict[str, tuple[int, int]]:
        async with self.store.read() as conn:
            chosen = await records.load_all_prefs(conn, owners)
        return {
            owner: (prefs.start_lead_min, prefs.end_lead_min) for owner, prefs in chosen.items()
        }

    def told_by_steps(self, incident: Mapping[str, Any]) -> frozenset[str]:
        violations = self.settings.violations
        host = str(incident.get("host"))
        steps = violations.steps_for(host, self.labels_of(host))
        return producers.owner_mailed_by_steps(steps, violations.handlers)

    def rpc(self) -> dict[Method, RpcHandler]:
        return rpc_handlers(self)

    def events(self) -> dict[tuple[str, str, str], EventHandler]:
        async def reservation_changed(envelope: Envelope) -> None:
            self.book.apply(envelope.type, envelope.data)
            self.reminders.changed(self.book.get(int(envelope.data["id"])))

        return {
            **producers.event_handlers(self.notifier.notify, self.told_by_steps, self.admins),
            ("reservations", "reservation.*", "notify-reminders"): reservation_changed,
        }


def rpc_handlers(notifications: Notifications) -> dict[Method, RpcHandler]:
    """The path's RPC handlers; building the table uses nothing of `notifications` yet."""
    return {
        api.NOTIFY: lambda args: notifications.calls.notify(args),
        api.NOTIFICATION_PREFS: lambda args: notifications.calls.get_prefs(args),
        api.SET_NOTIFICATION_PREFS: lambda args: notifications.calls.set_prefs(args),
        api.LIST_NOTIFICATIONS: lambda args: notifications.calls.list_sent(args),
        delivery_api.DELIVERY_SETTINGS: lambda args: notifications.delivery.get(args),
        delivery_api.SET_DELIVERY_SETTINGS: lambda args: notifications.delivery.set(args),
        delivery_api.TEST_DELIVERY: lambda args: notifications.delivery.test(args),
    }
