"""The built-in handlers as consumers: each on its own durable queue of `violations.events`.

Queue `evt-violations-violation.escalated--violations.<handler>` gets every escalation; the
consumer acts on the steps whose action is its own name and ignores the rest. Before acting it
asks the service which targets this step already reached (a redelivered event mails nobody
twice) and whether the incident is still open: a step is published only when it fell due while
the incident was open, so it still goes out when the incident was resolved since (the broker was
down, the queue was long), marked late on the timeline; only signals are no longer sent then, as
the processes do not offend any more. After acting it records one outcome per target on the
incident's timeline. Everything goes through RPC, so a handler can run in any process, be
scaled or be replaced by a plugin.

With several replicas (only the leader consumes), the first take of a step is `claim`ed in
the database before anything goes out: a duplicate delivery, or a new leader redelivered a
step the old one claimed and died before reporting, finds the claim and takes nothing: a step
goes out at most once, never twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

from services.accounts import api as accounts_api
from services.notifications.delivery.setup import NO_SMTP, NO_WEBHOOK, NOBODY, Delivery
from services.shared.bus import Bus, EventHandler
from services.shared.config import HostConfig, Settings
from services.shared.contracts import Envelope
from services.shared.errors import WardenError
from services.violations import api
from services.violations.actions.base import ActionOutcome, Alert
from services.violations.actions.mail import MailSender, Recipient
from services.violations.actions.remote import HostShell
from services.violations.actions.signals import kill, terminate
from services.violations.actions.terminal import notify_terminals
from services.violations.actions.webhook import WebhookSender

log = logging.getLogger("warden.violations")

Act = Callable[[Alert, frozenset[str]], Awaitable[list[ActionOutcome]]]
# The e-mail server and chat webhooks in force now (the Settings page's, else the file's).
DeliveryNow = Callable[[], Awaitable[Delivery]]
# (incident id, step index, handler) -> True when this call claimed the step, False when it
# was claimed before.
Claim = Callable[[str, int, str], Awaitable[bool]]
# A step that fell due while the incident was open but reaches its handler after it resolved.
LATE = "late: the incident was resolved before this step went out"
NOT_TAKEN = "not taken: the incident was resolved before this step went out"
# Steps not taken late: they stop processes that no longer offend.
SIGNALS = frozenset({"terminate", "kill"})
# Handlers whose step is done once whatever the outcome (signals are not resent on a
# redelivery); the others retry only the targets not reached yet.
ONCE_PER_STEP = frozenset({"terminal", "terminate", "kill"})


class Responders:
    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        *,
        shell: HostShell,
        mail: MailSender,
        webhooks: WebhookSender,
        hosts: Mapping[str, HostConfig] | None = None,
        claim: Claim | None = None,
        delivery: DeliveryNow | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.shell = shell
        self.mail = mail
        self.webhooks = webhooks
        self.claim = claim
        self.delivery = delivery  # None: `mail` and `webhooks` as they were made
        # The inventory now (a `HostDirectory`: hosts added at runtime get messages too).
        self.hosts: Mapping[str, HostConfig] = (
            hosts if hosts is not None else {h.name: h for h in settings.hosts}
        )

    def consumers(self) -> dict[str, EventHandler]:
        """Handler name -> consumer, for the handlers the settings turn on."""
        acts: dict[str, Act] = {
            "terminal": self._terminal,
            "email": self._email,
            "webhook": self._webhook,
            "terminate": self._terminate,
            "kill": self._kill,
        }
        return {
            name: self._consumer(name, acts[name]) for name in self.settings.violations.handlers
        }

    def _consumer(self, name: str, act: Act) -> EventHandler:
        async def consume(envelope: Envelope) -> None:
            alert = Alert.from_event(envelope.data)
            if alert.action == name:
                await self.respond(name, act, alert)

        return consume

    async def respond(self, name: str, act: Act, alert: Alert) -> list[ActionOutcome]:
        incident = await api.GET_INCIDENT.call(self.bus, {"id": alert.incident_id})
        recorded = [
            entry
            for entry in incident["timeline"]
            if entry["kind"] == "action"
            and entry["handler"] == name
            and entry["step_index"] == alert.step_index
        ]
        if name in ONCE_PER_STEP and recorded:
            return []  # a redelivered escalation: this step was taken already
        if (
            not recorded
            and self.claim is not None
            and not await self.claim(alert.incident_id, alert.step_index, name)
        ):
            log.info(
                "incident %s step %d: %s claimed before (another delivery, or a replica "
                "that stopped before reporting): not taken again",
                alert.incident_id,
                alert.step_index,
                name,
            )
            return []
        reached = frozenset(entry["target"] for entry in recorded if entry["ok"])
        if incident["status"] == "open":
            outcomes = await self._take(name, act, alert, reached)
        elif name in SIGNALS:
            outcomes = [ActionOutcome(name, False, NOT_TAKEN)]
        else:  # it fell due while open: it goes out, without the steps that will not follow
            late = replace(alert, next_step=None, next_at=None, upcoming=())
            outcomes = [
                replace(o, detail=f"{LATE}; {o.detail}" if o.detail else LATE)
                for o in await self._take(name, act, late, reached)
            ]
        if not outcomes and not recorded:  # never left pending: say nobody was there
            outcomes = [ActionOutcome(name, False, NOBODY, skipped=True)]
        for outcome in outcomes:  # what went out, where (never a message body or a secret)
            log.info(
                "incident %s step %d: %s %s %s",
                alert.incident_id,
                alert.step_index,
                name,
                "reached" if outcome.ok else "skipped" if outcome.skipped else "did not reach",
                outcome.target,
                extra={"fields": {"detail": outcome.detail[:200]}},
            )
        if outcomes:
            await api.RECORD_ACTIONS.call(
                self.bus,
                {
                    "incident_id": alert.incident_id,
                    "step_index": alert.step_index,
                    "handler": name,
                    "outcomes": [asdict(o) for o in outcomes],
                },
            )
        return outcomes

    async def _take(
        self, name: str, act: Act, alert: Alert, reached: frozenset[str]
    ) -> list[ActionOutcome]:
        try:
            return await act(alert, reached)
        except WardenError as err:
            return [ActionOutcome(name, False, err.message)]
        except Exception as err:  # recorded on the incident; the event is not retried
            log.exception("violation handler %s failed", name)
            return [ActionOutcome(name, False, f"failed: {type(err).__name__}")]

    # -- the handlers ---------------------------------------------------------------------

    def _host(self, alert: Alert) -> HostConfig | ActionOutcome:
        host = self.hosts.get(alert.host)
        if host is None or host.probe != "ssh":
            return ActionOutcome(
                alert.host, False, f"{alert.host} is not an SSH host of the inventory"
            )
        return host

    async def _terminal(self, alert: Alert, _reached: frozenset[str]) -> list[ActionOutcome]:
        host = self._host(alert)
        if isinstance(host, ActionOutcome):
            return [host]
        return await notify_terminals(self.shell, host, alert, self.settings.violations)

    async def _terminate(self, alert: Alert, _reached: frozenset[str]) -> list[ActionOutcome]:
        host = self._host(alert)
        if isinstance(host, ActionOutcome):
            return [host]
        return await terminate(self.shell, host, alert, self.settings.violations)

    async def _kill(self, alert: Alert, _reached: frozenset[str]) -> list[ActionOutcome]:
        host = self._host(alert)
        if isinstance(host, ActionOutcome):
            return [host]
        return await kill(self.shell, host, alert, self.settings.violations)

    async def _webhook(self, alert: Alert, reached: frozenset[str]) -> list[ActionOutcome]:
        if self.delivery is None:
            targets = self.webhooks.targets
        else:
            targets = (await self.delivery()).webhooks
        if not targets:
            return [ActionOutcome("webhook", False, NO_WEBHOOK, skipped=True)]
        return await self.webhooks.send(alert, skip=reached, targets=targets)

    async def _email(self, alert: Alert, reached: frozenset[str]) -> list[ActionOutcome]:
        mail = self.mail
        if self.delivery is not None:
            mail = MailSender((await self.delivery()).smtp)
        if not mail.configured:
            return [ActionOutcome("e-mail", False, NO_SMTP, skipped=True)]
        recipients, missing = await self.recipients(alert)
        outcomes = await mail.send(alert, recipients, skip=reached)
        return [*missing, *outcomes]

    async def recipients(self, alert: Alert) -> tuple[list[Recipient], list[ActionOutcome]]:
        """E-mail addresses for the step's recipients, from the accounts; who has none."""
        wanted = alert.recipients
        people = [
            (role, username)
            for role, username in (("offender", alert.offender), ("owner", alert.owner))
            if role in wanted and username
        ]
        contacts: dict[str, Any] = await accounts_api.CONTACTS.call(
            self.bus, {"usernames": [username for _, username in people]}
        )
        found: list[Recipient] = []
        missing: list[ActionOutcome] = []
        for role, username in people:
            email = (contacts["users"].get(username) or {}).get("email")
            if email:
                found.append(Recipient(role, username, email))
            else:
                missing.append(ActionOutcome(username, False, f"no e-mail address for {username}"))
        if "admins" in wanted:
            found += [
                Recipient("admin", admin["username"], admin["email"])
                for admin in contacts["admins"]
                if admin.get("email")
            ]
            found += [
                Recipient("admin", None, address)
                for address in self.settings.violations.admin_emails
            ]
        return found, missing
