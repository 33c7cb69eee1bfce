"""What goes out on each channel (pure): the e-mail and the chat body of one notification.

Built with `delivery`'s helpers (header-safe lines, the chat services' limits); sent by its
adapters (`SmtpSender.deliver`, `WebhookPoster.post`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from services.notifications.delivery.text import (
    ADAPTIVE_CARD_SCHEMA,
    ADAPTIVE_CARD_TYPE,
    ADAPTIVE_CARD_VERSION,
    DISCORD_CONTENT_CHARS,
    DISCORD_USERNAME,
    MATTERMOST_TEXT_CHARS,
    SLACK_SECTION_CHARS,
    clean,
    clip,
    one_line,
)

SUBJECT_CHARS = 150


@dataclass(frozen=True)
class Note:
    """One notification as `violations.notify` takes it."""

    user: str
    kind: str
    title: str
    text: str
    links: tuple[tuple[str, str], ...] = field(default=())  # (label, url)
    key: str | None = None

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> Note:
        links = tuple((link["label"], link["url"]) for link in args.get("links") or ())
        return cls(args["user"], args["kind"], args["title"], args["text"], links, args.get("key"))


def email(note: Note, address: str, mail_from: str, now: datetime | None = None) -> EmailMessage:
    title = " ".join(one_line(note.title).split())[:SUBJECT_CHARS]
    lines = [f"Hello {note.user},", "", *note.text.splitlines(), ""]
    lines += [f"{label}: {url}" for label, url in note.links]
    lines += ["", "-- ", "Warden, the GPU cluster manager (an automatic message)"]
    lines += ["Choose what you are told, and where, under Account > Notifications."]
    message = EmailMessage()
    message["Subject"] = f"[Warden] {title}"
    message["From"] = one_line(mail_from)
    message["To"] = one_line(address)
    message["Date"] = format_datetime(now or datetime.now(UTC))
    message["X-Warden-Notification"] = one_line(note.kind)
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies to this
    message.set_content("\n".join(one_line(line) for line in lines) + "\n")
    return message


def chat(format: str, note: Note) -> dict[str, Any]:
    """The body for the user's chat webhook, within the service's size limit."""
    title, text = clean(note.title), clean(note.text)
    if format == "slack":
        links = " ".join(f"<{url}|{clean(label)}>" for label, url in note.links)
        body = clip(f"*{title}*\n{text}\n{links}".strip(), SLACK_SECTION_CHARS)
        return {"text": body}
    if format == "mattermost":
        links = " ".join(f"[{clean(label)}]({url})" for label, url in note.links)
        return {"text": clip(f"**{title}**\n{text}\n{links}".strip(), MATTERMOST_TEXT_CHARS)}
    if format == "discord":
        links = " ".join(f"[{clean(label)}]({url})" for label, url in note.links)
        content = clip(f"**{title}**\n{text}\n{links}".strip(), DISCORD_CONTENT_CHARS)
        return {"username": DISCORD_USERNAME, "content": content}
    if format == "teams":
        card = {
            "type": "AdaptiveCard",
            "$schema": ADAPTIVE_CARD_SCHEMA,
            "version": ADAPTIVE_CARD_VERSION,
            "body": [
                {"type": "TextBlock", "text": clip(title, 200), "weight": "Bolder", "wrap": True},
                {"type": "TextBlock", "text": clip(text, 4000), "wrap": True},
            ],
            "actions": [
                {"type": "Action.OpenUrl", "title": clean(label), "url": url}
                for label, url in note.links
            ],
        }
        return {
            "type": "message",
            "attachments": [{"contentType": ADAPTIVE_CARD_TYPE, "content": card}],
        }
    raise ValueError(f"unknown chat format {format!r}")
