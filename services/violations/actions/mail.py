"""The e-mail handler: one notice per address, all of a step's mails over one SMTP connection.

`compose` is pure (two templates: one to the offender, one to the owner and the admins);
`MailSender` is the adapter that talks SMTP (aiosmtplib). Outcomes never carry the password.
"""

from __future__ import annotations

import hashlib
import logging
import re
import ssl
import unicodedata
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr

import aiosmtplib

from services.shared.config import SmtpSettings
from services.violations.actions.base import ActionOutcome, Alert
from services.violations.actions.message import details, headline, next_text, when

log = logging.getLogger(__name__)

ROLES = ("offender", "owner", "admin")  # in the order that wins when one address has several
NOT_CONFIGURED = "e-mail is not configured (smtp_host)"
SUBJECT_PART_CHARS = 64  # a name or host longer than this is clipped in the subject
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_MSGID_UNSAFE = re.compile(r"[^A-Za-z0-9.\-]+")


@dataclass(frozen=True)
class Recipient:
    role: str  # "offender" | "owner" | "admin"
    username: str | None
    address: str


# --- pure: wording and message -------------------------------------------------------------


def _one_line(text: str) -> str:
    """`text` without anything a mail header or a line of body could break on.

    Line breaks of any kind (CR, LF, VT, FF, NEL, U+2028...), other control characters and
    bidi overrides become a space, so a username or command can never start a new header.
    """
    return "".join(
        " " if unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in _BIDI_CONTROLS else c
        for c in text
    )


def _part(text: str, limit: int = SUBJECT_PART_CHARS) -> str:
    clean = " ".join(_one_line(text).split())
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
    body = "\n".join(_one_line(line) for line in lines) + "\n"

    message = EmailMessage()
    message["Subject"] = subject(alert, recipient)
    message["From"] = _one_line(mail_from)
    message["To"] = _one_line(recipient.address)
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


def _valid_address(address: str) -> bool:
    if address != _one_line(address) or any(c.isspace() for c in address):
        return False
    local, at, domain = address.rpartition("@")
    return bool(at and local and domain) and parseaddr(address)[1] == address


# --- adapter: SMTP ---------------------------------------------------------------------------


class MailSender:
    """Sends a step's notices over one SMTP connection; one outcome per address."""

    def __init__(self, smtp: SmtpSettings, *, tls_context: ssl.SSLContext | None = None) -> None:
        self._smtp = smtp
        self._tls_context = tls_context

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
            if _valid_address(recipient.address):
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

    async def deliver(self, message: EmailMessage, address: str, label: str) -> ActionOutcome:
        """Send one ready message to `address` over its own connection (notifications reuse
        the SMTP path); `label` names it in log lines instead of an incident."""
        if not self._smtp.host:
            return ActionOutcome(address, False, NOT_CONFIGURED)
        if not _valid_address(address):
            return ActionOutcome(address, False, "not a valid e-mail address")
        client = self._client()
        try:
            reason = await self._open(client)
            if reason is not None:
                log.warning("e-mail %s to %s not sent: %s", label, address, reason)
                return ActionOutcome(address, False, reason)
            return await self._transmit(client, message, address, label)
        finally:
            await self._close(client)

    def _client(self) -> aiosmtplib.SMTP:
        security = self._smtp.security
        return aiosmtplib.SMTP(
            hostname=self._smtp.host,
            port=self._smtp.port,
            timeout=self._smtp.timeout_s,
            use_tls=security == "tls",
            start_tls=security == "starttls",  # required, never "if offered"
            tls_context=self._tls_context if security in ("tls", "starttls") else None,
        )

    async def _open(self, client: aiosmtplib.SMTP) -> str | None:
        """Connect (and log in); the reason it failed, or None."""
        smtp = self._smtp
        if smtp.security not in ("starttls", "tls", "none"):
            return f"smtp_security must be starttls, tls or none, not {smtp.security!r}"
        try:
            await client.connect()
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as err:
            reason = self._reason(err)
            if isinstance(err, aiosmtplib.SMTPConnectError):  # it names host and port itself
                return reason
            return f"cannot connect to {smtp.host}:{smtp.port}: {reason}"
        if smtp.username:
            try:
                await client.login(smtp.username, smtp.password)
            except (aiosmtplib.SMTPException, OSError, TimeoutError) as err:
                return f"login as {smtp.username!r} failed: {self._reason(err)}"
        return None

    async def _send_one(
        self, client: aiosmtplib.SMTP, alert: Alert, recipient: Recipient
    ) -> ActionOutcome:
        message = compose(alert, recipient, self._smtp.mail_from)
        return await self._transmit(
            client, message, recipient.address, f"for incident {alert.incident_id}"
        )

    async def _transmit(
        self, client: aiosmtplib.SMTP, message: EmailMessage, address: str, label: str
    ) -> ActionOutcome:
        sender = parseaddr(_one_line(self._smtp.mail_from))[1] or self._smtp.mail_from
        try:
            refused, reply = await client.send_message(message, sender=sender, recipients=[address])
        except (aiosmtplib.SMTPException, OSError, TimeoutError, ValueError) as err:
            return self._failed_as(label, address, self._reason(err))
        if refused:  # one recipient per message, so not reached in practice
            response = next(iter(refused.values()))
            return self._failed_as(label, address, f"{response.code} {response.message}")
        log.debug("e-mail %s sent to %s", label, address)
        return ActionOutcome(address, True, self._scrub(f"accepted: {reply}"))

    def _failed(self, alert: Alert, address: str, reason: str) -> ActionOutcome:
        return self._failed_as(f"for incident {alert.incident_id}", address, reason)

    def _failed_as(self, label: str, address: str, reason: str) -> ActionOutcome:
        reason = self._scrub(reason)
        log.warning("e-mail %s to %s failed: %s", label, address, reason)
        return ActionOutcome(address, False, reason)

    @staticmethod
    async def _close(client: aiosmtplib.SMTP) -> None:
        if not client.is_connected:
            client.close()
            return
        try:
            await client.quit()
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            client.close()  # the mails are handed over already; a failed QUIT changes nothing

    def _reason(self, err: BaseException) -> str:
        if isinstance(err, aiosmtplib.SMTPRecipientsRefused):
            text = "; ".join(f"{e.code} {e.message}" for e in err.recipients) or "refused"
        elif isinstance(err, aiosmtplib.SMTPResponseException):
            text = f"{err.code} {err.message}"
        elif isinstance(err, aiosmtplib.SMTPException):
            text = err.message
        elif isinstance(err, TimeoutError):
            text = f"timed out after {self._smtp.timeout_s:g}s"
        else:
            text = str(err) or type(err).__name__
        return self._scrub(" ".join(_one_line(text).split()))

    def _scrub(self, text: str) -> str:
        password = self._smtp.password
        return text.replace(password, "***") if password else text
