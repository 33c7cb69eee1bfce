"""How Warden's e-mail and chat messages go out, as the configuration file says: the SMTP server
(the smtp_* keys and mail_from of `[violations]`) and `[[violations.webhooks]]`. What an admin
saves in the web UI wins over these, per channel (`services.notifications.delivery.setup`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from marshmallow import validate

from services.shared.config.declare import about, option


@dataclass(frozen=True)
class WebhookTarget:
    """A chat or HTTP endpoint told about violations. The URL is a secret (it holds a token)."""

    url: str = field(
        repr=False,
        metadata=about(
            "Where to post (http or https); a secret, never logged.",
            check=validate.URL(schemes={"http", "https"}, require_tld=False),
            example="https://hooks.slack.com/services/...",
        ),
    )
    format: str = option(
        "slack",
        "The message's format; json: Warden's own, signed with secret.",
        choices=("slack", "mattermost", "discord", "teams", "json"),
    )
    secret: str = option(
        "", "json: the HMAC-SHA256 key of the X-Warden-Signature header.", secret=True
    )
    name: str = option(
        "",
        "How logs and incident timelines name it (never by its URL); empty: its format.",
        example="lab-chat",
    )

    @property
    def label(self) -> str:
        return self.name or self.format


@dataclass(frozen=True)
class SmtpSettings:
    """E-mail to offenders, owners and admins: the smtp_* keys and mail_from of [violations]."""

    host: str = option("", "SMTP server; empty: no e-mail is sent.", key="smtp_host")
    port: int = option(587, "SMTP port.", min=1, max=65535, key="smtp_port")
    security: str = option(
        "starttls",
        "tls: TLS from the start (implicit); starttls: upgraded after connecting; none: no TLS.",
        choices=("starttls", "tls", "none"),
        key="smtp_security",
    )
    username: str = option("", "SMTP login; empty: none.", key="smtp_username")
    password: str = option(
        "", "SMTP password (with smtp_username).", secret=True, key="smtp_password"
    )
    mail_from: str = option("warden@localhost", "Sender of Warden's e-mail.", min_length=3)
    timeout_s: float = option(
        10.0, "Deadline of an SMTP exchange, in seconds.", min=0.1, max=300, key="smtp_timeout_s"
    )
