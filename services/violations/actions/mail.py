"""The e-mail handler: one notice per address, all of a step's mails over one SMTP connection.

`compose` is pure (two templates: one to the offender, one to the owner and the admins);
`MailSender` is the adapter that talks SMTP, through the notifications' `SmtpSender`
(`services.notifications.delivery.smtp`). Outcomes never carry the password.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr

import aiosmtplib

from services.notifications.delivery.smtp import (
    NOT_CONFIGURED,
    SmtpSender,
    valid_address,
)
from services.notifications.delivery.text import one_line
from services.violations.actions.base import ActionOutcome, Alert
from services.violations.actions.message import details, headline, next_text, when

log = logging.getLogger(__name__)

ROLES = ("offender", "owner", "admin")  # in the order that wins when one address has several
SUBJECT_PART_CHARS = 64  # a name or host longer than this is clipped in the subject
_MSGID_UNSAFE = re.compile(r"[^A-Za-z0-9.\-]+")


@dataclass(frozen=True)
class Recipient:
    role: str  # "offender" | "owner" | "admin"
    username: str | None
    address: str


# --- pure: wording and message -------------------------------------------------------------


def _part(text: str, limit: int = SUBJECT_PART_CHARS) -> str:
    clean = " ".join(one_line(text).split())
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def _role_rank(role: str) -> int:
    return ROLES.index(role) if role in ROLES else len(ROLES)


def subject(alert: Alert, recipient: Recipient) -> str:
    """One line: host, GPU and offender, built only from cleaned parts."""
    where = f"[Warden] {_part(alert.host)} {_part(alert.gpu_label)}"
    offender = _part(alert.offender)
    owner = _part(alert.owner) if alert.owner is not None else None
    if recipient.role == "offender":
        whose = f"reserved by {owner}" if owner is not None else "nobody reserved"
        return f"{where}: {offender}, you are using a GPU {whose} - please stop"
    if owner is None:
        return f"{where}: {offender} is using a GPU nobody reserved"
    reservation = (
        f"reservation #{alert.reservation_id}"
        if alert.reservation_id is not None
        else "reservation"
    )
    if recipient.role == "owner":
        return f"{where}: {offender} is using your {reservation}"
    return f"{where}: {offender} is using the {reservation} of {owner}"


def _offender_body(alert: Alert, recipient: Recipient) -> list[str]:
    where = f"{alert.gpu_label} on {alert.host}"
    if alert.owner is None:
        situation = [
            f"You are using {where}, which nobody reserved.",
            "On this cluster a GPU may only be used with a reservation (strict mode).",
        ]
    else:
        reservation = (
            f" (reservation #{alert.reservation_id})" if alert.reservation_id is not None else ""
        )
        situation = [
            f"You are using {where}, which {alert.owner} reserved "
            f"until {when(alert.reservation_end)}{reservation}."
        ]
    return [
        f"Hello {recipient.username or alert.offender},",
        "",
        *situation,
        "",
        "Please stop your processes on this GPU now, or make a reservation of your own.",
        next_text(alert),
    ]


def _others_body(alert: Alert, recipient: Recipient) -> list[str]:
    if recipient.role == "owner":
        why = (
            f"You receive this as the owner of reservation #{alert.reservation_id}."
            if alert.reservation_id is not None
            else "You receive this as the owner of the reservation."
        )
    else:
        why = "You receive this as a Warden administrator."
    greeting = f"Hello {recipient.username}," if recipient.username else "Hello,"
    return [
        greeting,
        "",
        f"{headline(alert)}.",
        why,
        "",
        "What Warden does next:",
        f"  {next_text(alert, to_offender=False)}",
        "",
        f"{alert.offender} has been asked to stop.",
    ]


def _message_id(alert: Alert, recipient: Recipient, domain: str) -> str:
    """The same incident step to the same address gets the same id: a resent copy dedupes."""
    incident = _MSGID_UNSAFE.sub("-", alert.incident_id).strip("-.") or "incident"
    digest = hashlib.sha256(recipient.address.strip().lower().encode()).hexdigest()[:16]
    return f"<warden.{incident}.{alert.step_index}.{digest}@{domain}>"


def _domain(mail_from: str) -> str:
    _, address = parseaddr(mail_from)
    domain = _MSGID_UNSAFE.sub("-", address.rpartition("@")[2]).strip("-.")
    return domain or "warden.invalid"


def compose(
    alert: Alert, recipient: Recipient, mail_from: str, *, now: datetime | None = None
) -> EmailMessage:
    """The notice for one recipient: the offender's template or the owner/admin one.

    Never raises on odd input: every header is built from parts without line breaks.
    """
    if recipient.role == "offender":
        lines = _offender_body(alert, recipient)
    else:
        lines = _others_body(alert, recipient)
    lines += ["", "Details:", *(f"  {line}" for line in details(alert))]
    lines += ["", "-- ", "Warden, the GPU cluster manager (an automatic message)"]
    body = "\n".join(one_line(line) for line in lines) + "\n"

    message = EmailMessage()
    message["Subject"] = subject(alert, recipient)
    message["From"] = one_line(mail_from)
    message["To"] = one_line(recipient.address)
    message["Date"] = format_datetime(now or datetime.now(UTC))
    message["Message-ID"] = _message_id(alert, recipient, _domain(mail_from))
    message["X-Warden-Incident"] = _part(alert.incident_id, 200)
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies to this
    message.set_content(body)
    return message


def unique_recipients(
    recipients: Iterable[Recipient], skip: Collection[str] = ()
) -> list[Recipient]:
    """One recipient per address (case-insensitive), in first-seen order, none in `skip`.

    When an address has several roles the offender's wins, then the owner's, then admin's.
    """
    skipped = {address.strip().lower() for address in skip}
    chosen: dict[str, Recipient] = {}
    for recipient in recipients:
        key = recipient.address.strip().lower()
        if key in skipped:
            continue
        held = chosen.get(key)
        if held is None or _role_rank(recipient.role) < _role_rank(held.role):
            chosen[key] = recipient  # a replaced key keeps its first-seen place
    return list(chosen.values())


# --- adapter: SMTP ---------------------------------------------------------------------------


class MailSender(SmtpSender):
    """Sends a step's notices over one SMTP connection (opened as `SmtpSender` opens it); one
    outcome per address."""

    async def send(
        self,
        alert: Alert,
        recipients: Sequence[Recipient],
        *,
        skip: Collection[str] = (),
    ) -> list[ActionOutcome]:
        """Mail every recipient not in `skip` (addresses already mailed for this step).

        Skipped addresses get no outcome. A refused recipient fails only itself; a failed
        connection or login fails every address with the reason.
        """
        todo = unique_recipients(recipients, skip)
        if not todo:
            return []
        if not self._smtp.host:
            return [ActionOutcome(r.address, False, NOT_CONFIGURED) for r in todo]

        outcomes: dict[str, ActionOutcome] = {}
        valid: list[Recipient] = []
        for recipient in todo:
            if valid_address(recipient.address):
                valid.append(recipient)
            else:
                outcomes[recipient.address] = self._failed(
                    alert, recipient.address, "not a valid e-mail address"
                )
        if valid:
            outcomes.update(await self._send_all(alert, valid))
        return [outcomes[r.address] for r in todo]

    async def _send_all(self, alert: Alert, todo: list[Recipient]) -> dict[str, ActionOutcome]:
        client = self._client()
        try:
            reason = await self._open(client)
            if reason is not None:
                log.warning(
                    "e-mail for incident %s to %d address(es) not sent: %s",
                    alert.incident_id,
                    len(todo),
                    reason,
                )
                return {r.address: ActionOutcome(r.address, False, reason) for r in todo}
            return {r.address: await self._send_one(client, alert, r) for r in todo}
        finally:
            await self._close(client)

    async def _send_one(
        self, client: aiosmtplib.SMTP, alert: Alert, recipient: Recipient
    ) -> ActionOutcome:
        message = compose(alert, recipient, self._smtp.mail_from)
        return await self._transmit(
            client, message, recipient.address, f"for incident {alert.incident_id}"
        )

    def _failed(self, alert: Alert, address: str, reason: str) -> ActionOutcome:
        return self._failed_as(f"for incident {alert.incident_id}", address, reason)
