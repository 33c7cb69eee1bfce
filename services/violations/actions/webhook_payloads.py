"""Webhook bodies (pure): one JSON body per service for an escalation step's alert.

`payload` builds the body for Slack, Mattermost, Discord, Microsoft Teams (Workflows webhook,
Adaptive Card) or a generic `json` receiver, always within the service's size limits however
many processes there are and however long their commands (the services' limits are in
`services.notifications.delivery.text`); `encode` there gives the bytes posted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

from services.notifications.delivery.text import (
    ADAPTIVE_CARD_SCHEMA,
    ADAPTIVE_CARD_TYPE,
    ADAPTIVE_CARD_VERSION,
    DISCORD_CONTENT_CHARS,
    DISCORD_FIELD_VALUE_CHARS,
    DISCORD_TITLE_CHARS,
    DISCORD_USERNAME,
    SLACK_SECTION_CHARS,
    bounded,
    clean,
    clip,
    line,
    no_fence,
    units,
)
from services.violations.actions.base import Alert
from services.violations.actions.message import details, headline, next_text, process_lines

FORMATS = ("slack", "mattermost", "discord", "teams", "json")
EVENT = "violation.escalated"
JSON_VERSION = 1


def _processes(
    alert: Alert,
    *,
    line_chars: int,
    max_lines: int,
    budget: int,
    fit: Callable[[str, int], str] = line,
) -> list[str]:
    """Process lines for a code block: each cleaned and fitted to `line_chars`, bounded."""
    lines = [no_fence(fit(text, line_chars)) for text in process_lines(alert, line_chars)]
    if not lines:
        return ["(no processes reported)"]
    return bounded(lines, max_lines=max_lines, budget=budget)


def _facts(alert: Alert, value_chars: int) -> list[tuple[str, str]]:
    """The shared details (host, GPU, user, since, reservation, incident and step), without
    the process lines, which every format shows on their own and bounded."""
    procs = {f"Process {text}" for text in process_lines(alert)}
    facts = []
    for text in details(alert):
        if text in procs:
            continue
        name, _, value = text.partition(": ")
        facts.append((name, line(value, value_chars).strip() or "-"))  # never blank
    return facts


def audience(alert: Alert) -> str:
    """The step's recipients in words: "For alice and the admins." ("" when none)."""
    names: list[str] = []
    for recipient in alert.recipients:
        name = {
            "offender": alert.offender,
            "owner": alert.owner,
            "admins": "the admins",
        }.get(recipient, recipient)
        if name and name not in names:
            names.append(name)
    if not names:
        return ""
    words = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"For {words}."


# --- one body per service ------------------------------------------------------------------


def _slack_escape(text: str) -> str:
    """Slack's three control characters: also what stops a command from writing <!channel>."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(text: str, limit: int) -> str:
    """Cleaned, escaped and clipped to `limit` units without cutting an entity in half."""
    escaped = _slack_escape(clean(clip(text, limit)))
    if units(escaped) <= limit:
        return escaped
    head = clip(escaped, limit)[:-1]
    amp = head.rfind("&")
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    return head + "…"


def _slack_payload(alert: Alert) -> dict[str, Any]:
    title = _slack(headline(alert), 1000)
    who = _slack(audience(alert), 500)
    facts = "\n".join(f"*{name}:* {_slack(value, 400)}" for name, value in _facts(alert, 400))
    procs = _processes(
        alert, line_chars=300, max_lines=50, budget=SLACK_SECTION_CHARS - 100, fit=_slack
    )
    procs_text = "*Processes*\n```" + "\n".join(procs) + "```"
    first = f":rotating_light: *{title}*" + (f"\n{who}" if who else "")
    return {
        "text": f"{title}. {who}"
        if who
        else title,  # notifications and fallback: well below 40,000
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": first}},
            {"type": "section", "text": {"type": "mrkdwn", "text": facts}},
            {"type": "section", "text": {"type": "mrkdwn", "text": procs_text}},
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": _slack(next_text(alert, to_offender=False), 1000)}
                ],
            },
        ],
    }


def _mattermost_payload(alert: Alert) -> dict[str, Any]:
    who = line(audience(alert), 500)
    lines = [f"#### :rotating_light: {line(headline(alert), 1000)}"]
    if who:
        lines.append(who)
    lines.append("")
    lines += [f"**{name}:** {value}" for name, value in _facts(alert, 400)]
    lines.append("**Processes:**")
    lines.append("```")
    lines += _processes(alert, line_chars=300, max_lines=100, budget=8000)
    lines.append("```")
    lines.append(line(next_text(alert, to_offender=False), 1000))
    return {"text": "\n".join(lines)}


def _discord_payload(alert: Alert) -> dict[str, Any]:
    # Fixed budgets: 256 title + 8 fields (names < 20, values: 6 x 256, processes 1024,
    # next 512) + footer stays far below the 6,000 of an embed; `content` at most 1000.
    fields = [
        {"name": name, "value": value, "inline": name in ("Host", "GPU", "User")}
        for name, value in _facts(alert, 256)
    ]
    procs = _processes(alert, line_chars=200, max_lines=20, budget=DISCORD_FIELD_VALUE_CHARS - 8)
    fields.append({"name": "Processes", "value": "```\n" + "\n".join(procs) + "```"})
    fields.append({"name": "Next", "value": line(next_text(alert, to_offender=False), 512)})
    embed: dict[str, Any] = {
        "title": line(headline(alert), DISCORD_TITLE_CHARS),
        "color": 0xE67E22,
        "fields": fields,
        "footer": {"text": "Warden"},
        "timestamp": alert.since.isoformat(),
    }
    who = line(audience(alert), 1000)
    body: dict[str, Any] = {
        "username": DISCORD_USERNAME,
        "embeds": [embed],
        "allowed_mentions": {"parse": []},  # an "@everyone" in a command pings nobody
    }
    if who:
        body["content"] = clip(who, DISCORD_CONTENT_CHARS)
    return body


def _teams_payload(alert: Alert) -> dict[str, Any]:
    # At most 3 bytes of UTF-8 per UTF-16 unit: ~6,000 units of text and the card's own JSON
    # stay below the 28 KB of a Teams message.
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": line(headline(alert), 500),
            "size": "Medium",
            "weight": "Bolder",
            "style": "heading",
            "wrap": True,
        }
    ]
    who = line(audience(alert), 300)
    if who:
        body.append({"type": "TextBlock", "text": who, "isSubtle": True, "wrap": True})
    body.append(
        {
            "type": "FactSet",
            "facts": [{"title": name, "value": value} for name, value in _facts(alert, 300)],
        }
    )
    body.append({"type": "TextBlock", "text": "Processes", "weight": "Bolder", "wrap": True})
    body += [
        {
            "type": "TextBlock",
            "text": text,
            "fontType": "Monospace",
            "spacing": "None",
            "wrap": True,
        }
        for text in _processes(alert, line_chars=200, max_lines=20, budget=3000)
    ]
    body.append(
        {"type": "TextBlock", "text": line(next_text(alert, to_offender=False), 500), "wrap": True}
    )
    card = {
        "$schema": ADAPTIVE_CARD_SCHEMA,
        "type": "AdaptiveCard",
        "version": ADAPTIVE_CARD_VERSION,
        "msteams": {"width": "Full"},
        "body": body,
    }
    return {
        "type": "message",
        "attachments": [{"contentType": ADAPTIVE_CARD_TYPE, "content": card}],
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def _json_payload(alert: Alert) -> dict[str, Any]:
    """Every field of the alert, times as ISO-8601: `Alert.from_event(body["incident"])`
    gives the alert back."""
    return {
        "event": EVENT,
        "version": JSON_VERSION,
        "incident": _jsonable(dataclasses.asdict(alert)),
        "text": headline(alert),
    }


_PAYLOADS: dict[str, Callable[[Alert], dict[str, Any]]] = {
    "slack": _slack_payload,
    "mattermost": _mattermost_payload,
    "discord": _discord_payload,
    "teams": _teams_payload,
    "json": _json_payload,
}


def payload(format: str, alert: Alert) -> dict[str, Any]:
    """The JSON body for one service (`FORMATS`); ValueError for any other format."""
    try:
        build = _PAYLOADS[format]
    except KeyError:
        raise ValueError(
            f"unknown webhook format {format!r} (known: {', '.join(FORMATS)})"
        ) from None
    return build(alert)
