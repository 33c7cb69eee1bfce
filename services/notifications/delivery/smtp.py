"""Sending e-mail (aiosmtplib): `SmtpSender` opens a connection to the configured server and
hands messages over; a notification's e-mail and the violation handlers' notices
(`services.violations.actions.mail`) go out through it. Outcomes never carry the password.
"""

from __future__ import annotations

import logging
import ssl
from email.message import EmailMessage
from email.utils import parseaddr

import aiosmtplib

from services.notifications.delivery.outcome import ActionOutcome
from services.notifications.delivery.text import one_line
from services.shared.config import SmtpSettings

log = logging.getLogger(__name__)

NOT_CONFIGURED = "e-mail is not configured (Admin → Settings, or smtp_host)"


def valid_address(address: str) -> bool:
    if address != one_line(address) or any(c.isspace() for c in address):
        return False
    local, at, domain = address.rpartition("@")
    return bool(at and local and domain) and parseaddr(address)[1] == address


class SmtpSender:
    """Sends ready messages over SMTP; one outcome per address."""

    def __init__(self, smtp: SmtpSettings, *, tls_context: ssl.SSLContext | None = None) -> None:
        self._smtp = smtp
        self._tls_context = tls_context

    @property
    def configured(self) -> bool:
        """An SMTP server is set: e-mail can be tried."""
        return bool(self._smtp.host)

    async def deliver(self, message: EmailMessage, address: str, label: str) -> ActionOutcome:
        """Send one ready message to `address` over its own connection; `label` names it in
        log lines."""
        if not self._smtp.host:
            return ActionOutcome(address, False, NOT_CONFIGURED)
        if not valid_address(address):
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

    async def _transmit(
        self, client: aiosmtplib.SMTP, message: EmailMessage, address: str, label: str
    ) -> ActionOutcome:
        sender = parseaddr(one_line(self._smtp.mail_from))[1] or self._smtp.mail_from
        try:
            refused, reply = await client.send_message(message, sender=sender, recipients=[address])
        except (aiosmtplib.SMTPException, OSError, TimeoutError, ValueError) as err:
            return self._failed_as(label, address, self._reason(err))
        if refused:  # one recipient per message, so not reached in practice
            response = next(iter(refused.values()))
            return self._failed_as(label, address, f"{response.code} {response.message}")
        log.debug("e-mail %s sent to %s", label, address)
        return ActionOutcome(address, True, self._scrub(f"accepted: {reply}"))

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
        return self._scrub(" ".join(one_line(text).split()))

    def _scrub(self, text: str) -> str:
        password = self._smtp.password
        return text.replace(password, "***") if password else text
