"""The webhook handler: one chat message (or one signed JSON body) per configured endpoint.

`payload` is pure: the body for Slack, Mattermost, Discord, Microsoft Teams (Workflows webhook,
Adaptive Card) or a generic `json` receiver, always within the service's size limits however
many processes there are and however long their commands. `WebhookSender` is the adapter that
posts them (aiohttp): one request at a time per URL and at most one per `min_interval_s`,
retries on 429 (honouring `Retry-After`), 5xx and connection errors with exponential back-off.

A webhook URL holds a token, so it never appears in a log line, an outcome or an error message.

Signed deliveries (`json` format with a `secret`)
-------------------------------------------------
Each request carries two headers:

    X-Warden-Timestamp: 1795363200                  (unix seconds when it was sent)
    X-Warden-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>", key = secret>

A receiver checks them on the raw body bytes, before parsing, and refuses stale timestamps
(replays). Copy this, or import `verify` from here:

    import hashlib, hmac, time

    def verify(secret, timestamp, body, signature, tolerance_s=300):
        try:
            age = abs(time.time() - int(timestamp))
        except ValueError:
            return False
        mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
        return age <= tolerance_s and hmac.compare_digest("sha256=" + mac.hexdigest(), signature)

A retried delivery is signed again with a fresh timestamp; `incident.incident_id` with
`incident.step_index` identifies one delivery, so a receiver can drop the duplicates that
at-least-once delivery brings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import errno
import hashlib
import hmac
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import aiohttp

from services.shared.config import ViolationSettings, WebhookTarget
from services.violations.actions.base import ActionOutcome, Alert
from services.violations.actions.message import details, headline, next_text, process_lines

log = logging.getLogger(__name__)

FORMATS = ("slack", "mattermost", "discord", "teams", "json")
EVENT = "violation.escalated"
JSON_VERSION = 1
SIGNATURE_HEADER = "X-Warden-Signature"
TIMESTAMP_HEADER = "X-Warden-Timestamp"
CONTENT_TYPE = "application/json"

# The services' documented limits. Text is measured in UTF-16 code units, which is what the
# JavaScript-based services count and never less than the code points the others count.
SLACK_SECTION_CHARS = 3000  # a section block's text (longer: HTTP 400 invalid_blocks)
SLACK_TEXT_CHARS = 40_000  # the top-level `text`
MATTERMOST_TEXT_CHARS = 16_383
DISCORD_CONTENT_CHARS = 2000
DISCORD_TITLE_CHARS = 256
DISCORD_DESCRIPTION_CHARS = 4096
DISCORD_FIELD_NAME_CHARS = 256
DISCORD_FIELD_VALUE_CHARS = 1024
DISCORD_FIELDS = 25
DISCORD_EMBED_TOTAL_CHARS = 6000  # title, description, field names and values, footer, author
DISCORD_USERNAME = "Warden"
TEAMS_MAX_BYTES = 28_000  # a Teams message, card included, is at most about 28 KB
ADAPTIVE_CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
ADAPTIVE_CARD_VERSION = "1.4"  # what Teams renders in Workflows posts
ADAPTIVE_CARD_TYPE = "application/vnd.microsoft.card.adaptive"

RETRY_AFTER_CAP_S = 60.0  # a longer Retry-After is clipped to this
RESPONSE_SNIPPET_CHARS = 200  # of a refusing server's response, in the outcome's detail

_LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


# --- pure: text that fits ------------------------------------------------------------------


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _clip(text: str, limit: int) -> str:
    """At most `limit` UTF-16 code units; "…" marks a cut (a surrogate pair is never split)."""
    if _units(text) <= limit:
        return text
    head = text.encode("utf-16-le")[: 2 * (limit - 1)].decode("utf-16-le", errors="ignore")
    return head + "…"


def _clean(text: str) -> str:
    """One line of valid Unicode: control characters, line separators and bidi overrides
    become a space (a command cannot add lines or reorder what is shown), lone surrogates "?"."""
    return _LINE_BREAKING.sub(" ", _LONE_SURROGATE.sub("?", text))


def _line(text: str, limit: int) -> str:
    return _clip(_clean(_clip(text, limit)), limit)


def _no_fence(text: str) -> str:
    """A command shown inside a Markdown code block cannot close it."""
    return text.replace("`", "\u02cb")  # MODIFIER LETTER GRAVE ACCENT looks the same


def _more(hidden: int) -> str:
    return f"… and {hidden} more process{'es' if hidden != 1 else ''}"


_MORE_RESERVE = 40  # units kept free for the `_more` line


def _bounded(lines: Sequence[str], *, max_lines: int, budget: int) -> list[str]:
    """The first lines that fit in `budget` units (a newline after each) and `max_lines`,
    then "… and N more processes" when some were left out."""
    kept: list[str] = []
    used = 0
    for i, text in enumerate(lines):
        cost = _units(text) + 1
        reserve = _MORE_RESERVE if i < len(lines) - 1 else 0
        if len(kept) >= max_lines or used + cost + reserve > budget:
            break
        kept.append(text)
        used += cost
    if len(kept) < len(lines):
        kept.append(_more(len(lines) - len(kept)))
    return kept


def _processes(
    alert: Alert,
    *,
    line_chars: int,
    max_lines: int,
    budget: int,
    fit: Callable[[str, int], str] = _line,
) -> list[str]:
    """Process lines for a code block: each cleaned and fitted to `line_chars`, bounded."""
    lines = [_no_fence(fit(text, line_chars)) for text in process_lines(alert, line_chars)]
    if not lines:
        return ["(no processes reported)"]
    return _bounded(lines, max_lines=max_lines, budget=budget)


def _facts(alert: Alert, value_chars: int) -> list[tuple[str, str]]:
    """The shared details (host, GPU, user, since, reservation, incident and step), without
    the process lines, which every format shows on their own and bounded."""
    procs = {f"Process {text}" for text in process_lines(alert)}
    facts = []
    for text in details(alert):
        if text in procs:
            continue
        name, _, value = text.partition(": ")
        facts.append((name, _line(value, value_chars).strip() or "-"))  # never blank
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


# --- pure: one body per service ------------------------------------------------------------


def _slack_escape(text: str) -> str:
    """Slack's three control characters: also what stops a command from writing <!channel>."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(text: str, limit: int) -> str:
    """Cleaned, escaped and clipped to `limit` units without cutting an entity in half."""
    escaped = _slack_escape(_clean(_clip(text, limit)))
    if _units(escaped) <= limit:
        return escaped
    head = _clip(escaped, limit)[:-1]
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
    who = _line(audience(alert), 500)
    lines = [f"#### :rotating_light: {_line(headline(alert), 1000)}"]
    if who:
        lines.append(who)
    lines.append("")
    lines += [f"**{name}:** {value}" for name, value in _facts(alert, 400)]
    lines.append("**Processes:**")
    lines.append("```")
    lines += _processes(alert, line_chars=300, max_lines=100, budget=8000)
    lines.append("```")
    lines.append(_line(next_text(alert, to_offender=False), 1000))
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
    fields.append({"name": "Next", "value": _line(next_text(alert, to_offender=False), 512)})
    embed: dict[str, Any] = {
        "title": _line(headline(alert), DISCORD_TITLE_CHARS),
        "color": 0xE67E22,
        "fields": fields,
        "footer": {"text": "Warden"},
        "timestamp": alert.since.isoformat(),
    }
    who = _line(audience(alert), 1000)
    body: dict[str, Any] = {
        "username": DISCORD_USERNAME,
        "embeds": [embed],
        "allowed_mentions": {"parse": []},  # an "@everyone" in a command pings nobody
    }
    if who:
        body["content"] = _clip(who, DISCORD_CONTENT_CHARS)
    return body


def _teams_payload(alert: Alert) -> dict[str, Any]:
    # At most 3 bytes of UTF-8 per UTF-16 unit: ~6,000 units of text and the card's own JSON
    # stay below the 28 KB of a Teams message.
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": _line(headline(alert), 500),
            "size": "Medium",
            "weight": "Bolder",
            "style": "heading",
            "wrap": True,
        }
    ]
    who = _line(audience(alert), 300)
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
        {"type": "TextBlock", "text": _line(next_text(alert, to_offender=False), 500), "wrap": True}
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


def encode(body: dict[str, Any]) -> bytes:
    """The bytes that are posted (and signed): compact UTF-8 JSON."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", errors="replace")  # a lone surrogate in the json format: "?"


# --- pure: signatures ----------------------------------------------------------------------


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 with key `secret` of "<timestamp>.<body>"."""
    message = str(timestamp).encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(
    secret: str,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> bool:
    """What a receiver checks: the signature matches and the timestamp is recent."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    current = time.time() if now is None else now
    if abs(current - sent) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, sent, body), signature)


# --- the adapter ---------------------------------------------------------------------------


@dataclass
class _Gate:
    """One URL's queue: one request at a time, the next not before `not_before` (clock)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    not_before: float = float("-inf")


@dataclass(frozen=True)
class _Reply:
    status: int | None  # None: no HTTP answer (connection error, timeout)
    reason: str  # what went wrong, in our words (never the URL)
    retry_after_s: float | None = None
    retriable: bool = True


def retry_after(value: str | None, cap_s: float = RETRY_AFTER_CAP_S) -> float | None:
    """Seconds from a `Retry-After` header (seconds or an HTTP date), at most `cap_s`."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if moment.tzinfo is None:
            return None
        seconds = moment.timestamp() - time.time()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), cap_s)


def _secrets_of(url: str) -> list[str]:
    """The URL and the parts of it that may be a token, longest first."""
    parts = urlsplit(url)
    found = {url, parts.netloc + parts.path, parts.path, parts.query}
    found.update(parts.path.split("/"))
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        found.update((key, value))
    found |= {unquote(part) for part in found}
    return sorted((part for part in found if len(part) >= 8), key=len, reverse=True)


def _scrub(text: str, url: str) -> str:
    for secret in _secrets_of(url):
        text = text.replace(secret, "…")
    return text


def _describe(err: BaseException, timeout_s: float) -> _Reply:
    """Our words for a failed request: aiohttp's own messages carry the URL."""
    if isinstance(err, aiohttp.InvalidURL):
        return _Reply(None, "invalid URL", retriable=False)
    if isinstance(err, TimeoutError | aiohttp.ServerTimeoutError):
        return _Reply(None, f"no answer within {timeout_s:g} s")
    if isinstance(err, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        return _Reply(None, f"TLS error ({type(err).__name__})", retriable=False)
    if isinstance(err, aiohttp.ClientConnectorError):
        code = err.os_error.errno
        what = os.strerror(code).lower() if code else type(err.os_error).__name__
        return _Reply(None, f"cannot connect: {what}")
    if isinstance(err, aiohttp.ServerDisconnectedError):
        return _Reply(None, "server disconnected")
    if isinstance(err, OSError) and err.errno is not None and err.errno in errno.errorcode:
        return _Reply(None, f"connection error: {os.strerror(err.errno).lower()}")
    return _Reply(None, f"request failed ({type(err).__name__})")


def _attempts(count: int) -> str:
    return f"{count} attempt{'s' if count != 1 else ''}"


class WebhookSender:
    """Posts an alert to every configured webhook; one `ActionOutcome` per target.

    Per URL: one request at a time, at most one per `min_interval_s` (sends queue up, none is
    dropped). Retries: on 429 (after `Retry-After`, at most 60 s, or the back-off), 5xx and
    connection errors or timeouts, up to `retries` more attempts, the back-off starting at
    `backoff_s` and doubling up to `max_backoff_s`. Any other 4xx fails at once.
    `sleep`, `clock` (monotonic, for pacing) and `wall_clock` (signature timestamps) are
    injectable for tests.
    """

    def __init__(
        self,
        targets: Sequence[WebhookTarget],
        *,
        min_interval_s: float = 1.0,
        retries: int = 4,
        timeout_s: float = 10.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.targets = tuple(targets)
        self.min_interval_s = min_interval_s
        self.retries = retries
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._clock = clock
        self._wall_clock = wall_clock
        self._gates: dict[str, _Gate] = {}
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_settings(cls, settings: ViolationSettings, **options: Any) -> WebhookSender:
        return cls(
            settings.webhooks,
            min_interval_s=settings.webhook_min_interval_s,
            retries=settings.webhook_retries,
            **options,
        )

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s)
            )

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> WebhookSender:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def send(self, alert: Alert, *, skip: Collection[str] = ()) -> list[ActionOutcome]:
        """Post to every target whose label is not in `skip`, all targets at once."""
        if self._session is None:
            raise RuntimeError("WebhookSender.send before start()")
        targets = [t for t in self.targets if t.label not in skip]
        bodies: dict[str, bytes | str] = {}
        for target in targets:
            if target.format not in bodies:
                try:
                    bodies[target.format] = encode(payload(target.format, alert))
                except ValueError as err:
                    bodies[target.format] = str(err)
        return list(await asyncio.gather(*(self._deliver(t, bodies[t.format]) for t in targets)))

    def _backoff(self, attempt: int) -> float:
        return float(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))

    async def _deliver(self, target: WebhookTarget, body: bytes | str) -> ActionOutcome:
        if isinstance(body, str):  # the payload could not be built
            return self._failed(target, body)
        try:
            return await self._deliver_body(target, body)
        except Exception as err:  # a bug here must not cost the other targets their outcome
            return self._failed(target, f"internal error ({type(err).__name__})")

    async def _deliver_body(self, target: WebhookTarget, body: bytes) -> ActionOutcome:
        gate = self._gates.setdefault(target.url, _Gate())
        attempt = 0
        while True:
            attempt += 1
            async with gate.lock:
                wait = gate.not_before - self._clock()
                if wait > 0:
                    await self._sleep(wait)
                gate.not_before = self._clock() + self.min_interval_s
                reply = await self._post(target, body)
                if reply.retry_after_s is not None:  # the server's word holds for every send
                    gate.not_before = max(gate.not_before, self._clock() + reply.retry_after_s)
            if reply.status is not None and 200 <= reply.status < 300:
                return ActionOutcome(
                    target.label, True, f"{reply.status} after {_attempts(attempt)}"
                )
            detail = f"{reply.reason} after {_attempts(attempt)}"
            if not reply.retriable:
                return self._failed(target, detail)
            if attempt > self.retries:
                return self._failed(target, f"{detail} (retries exhausted)")
            log.debug("webhook %s: %s, retrying", target.label, detail)
            if reply.retry_after_s is None:
                await self._sleep(self._backoff(attempt))

    async def _post(self, target: WebhookTarget, body: bytes) -> _Reply:
        assert self._session is not None
        headers = {"Content-Type": CONTENT_TYPE}
        if target.format == "json" and target.secret:
            stamp = str(int(self._wall_clock()))
            headers[TIMESTAMP_HEADER] = stamp
            headers[SIGNATURE_HEADER] = sign(target.secret, stamp, body)
        try:
            async with self._session.post(
                target.url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                if 200 <= status < 300:
                    return _Reply(status, str(status))
                answer = await response.content.read(2048)
                wait = (
                    retry_after(response.headers.get("Retry-After"))
                    if status in (429, 503)
                    else None
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            return _describe(err, self.timeout_s)
        said = _scrub(answer.decode("utf-8", "replace"), target.url)
        reason = f"{status} {_clip(' '.join(_clean(said).split()), RESPONSE_SNIPPET_CHARS)}"
        reason = reason.strip()
        return _Reply(status, reason, wait, retriable=status == 429 or status >= 500)

    def _failed(self, target: WebhookTarget, detail: str) -> ActionOutcome:
        log.warning("webhook %s (%s): not delivered: %s", target.label, target.format, detail)
        return ActionOutcome(target.label, False, detail)
