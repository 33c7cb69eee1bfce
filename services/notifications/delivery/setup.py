"""How Warden's own messages go out: e-mail (SMTP) and chat webhooks, as admins set them on the
Settings page or in the configuration file (pure).

Per channel, what was saved on the Settings page wins over the file's `[violations]` keys;
forgetting it there (`null`) falls back to the file. Secrets (the SMTP password, a webhook's
URL and signing key) are write-only: an answer says whether one is set, never what it is, and
a change that leaves one out keeps the saved one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from services.shared.config import SmtpSettings, ViolationSettings, WebhookTarget

SAVED = "settings"  # saved on the Settings page (the database)
FILE = "file"  # the configuration file's keys
NONE = "none"  # neither: the channel is not set up

NO_SMTP = "skipped: e-mail is not set up (Admin → Settings, or smtp_host)"
NO_WEBHOOK = "skipped: no chat webhook is set up (Admin → Settings, or [[violations.webhooks]])"
NOBODY = "skipped: nobody to send to"


@dataclass(frozen=True)
class Saved:
    """What the Settings page saved, per channel; None: nothing saved (the file's holds)."""

    smtp: Mapping[str, Any] | None = None
    webhooks: Sequence[Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class Delivery:
    """The channels in force now, and where each comes from (SAVED, FILE or NONE)."""

    smtp: SmtpSettings
    webhooks: tuple[WebhookTarget, ...]
    smtp_source: str
    webhooks_source: str

    @property
    def reaches_nobody(self) -> bool:
        """Neither e-mail nor chat is set up: an incident's e-mail and chat steps tell no one."""
        return not self.smtp.host and not self.webhooks


def in_force(file: ViolationSettings, saved: Saved) -> Delivery:
    """The channels in force: each saved one, else the file's."""
    if saved.smtp is not None:
        s = saved.smtp
        smtp = SmtpSettings(
            host=s["host"],
            port=int(s["port"]),
            security=s["security"],
            username=s.get("username", ""),
            password=s.get("password", ""),
            mail_from=s["mail_from"],
            timeout_s=file.smtp.timeout_s,
        )
        smtp_source = SAVED
    else:
        smtp, smtp_source = file.smtp, FILE if file.smtp.host else NONE
    if saved.webhooks is not None:
        webhooks = tuple(
            WebhookTarget(
                url=w["url"], format=w["format"], secret=w.get("secret", ""), name=w["name"]
            )
            for w in saved.webhooks
        )
        webhooks_source = SAVED
    else:
        webhooks, webhooks_source = file.webhooks, FILE if file.webhooks else NONE
    return Delivery(smtp, webhooks, smtp_source, webhooks_source)


def url_hint(url: str) -> str:
    """A webhook URL as an answer may show it: its scheme and host, never its path (a token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}/…"


def answer(delivery: Delivery) -> dict[str, Any]:
    """The settings as the API answers them: no password, URL or signing key."""
    smtp = delivery.smtp
    return {
        "smtp": {
            "source": delivery.smtp_source,
            "host": smtp.host,
            "port": smtp.port,
            "security": smtp.security,
            "username": smtp.username,
            "password_set": bool(smtp.password),
            "mail_from": smtp.mail_from,
        },
        "webhooks": {
            "source": delivery.webhooks_source,
            "targets": [
                {
                    "name": w.label,
                    "format": w.format,
                    "url_hint": url_hint(w.url),
                    "secret_set": bool(w.secret),
                }
                for w in delivery.webhooks
            ],
        },
        "reaches_nobody": delivery.reaches_nobody,
    }


def smtp_changed(saved: Mapping[str, Any] | None, given: Mapping[str, Any]) -> dict[str, Any]:
    """The SMTP fields to save: `given`, with the saved password kept when none is given."""
    fields = {k: given[k] for k in ("host", "port", "security", "username", "mail_from")}
    password = given.get("password")
    if password is None:
        password = (saved or {}).get("password", "")
    return {**fields, "password": password}


class MissingUrl(ValueError):
    """A new webhook was given without its URL."""


def webhooks_changed(
    saved: Sequence[Mapping[str, Any]] | None, given: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The webhooks to save: `given`, each keeping the saved URL and signing key of the webhook
    of its name when it leaves them out. Raises MissingUrl for a new one without a URL."""
    before = {w["name"]: w for w in saved or ()}
    chosen = []
    for w in given:
        old = before.get(w["name"], {})
        url = w.get("url") or old.get("url")
        if not url:
            raise MissingUrl(f"webhook {w['name']!r} needs its url")
        secret = w.get("secret")
        chosen.append(
            {
                "name": w["name"],
                "format": w["format"],
                "url": url,
                "secret": old.get("secret", "") if secret is None else secret,
            }
        )
    return chosen
