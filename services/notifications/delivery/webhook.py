"""Posting to webhooks (aiohttp): `WebhookPoster` posts JSON bodies, signed as `signature`
describes for a `json` target with a secret: one request at a time per URL and at most one per
`min_interval_s`, retries on 429 (honouring `Retry-After`), 5xx and connection errors with
exponential back-off. A user's chat webhook (the notifications' chat channel) and the
violation handlers' webhooks (`services.violations.actions.webhook`) go out through it.

A webhook URL holds a token, so it never appears in a log line, an outcome or an error message.
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

import aiohttp

from services.notifications.delivery.outcome import ActionOutcome
from services.notifications.delivery.signature import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from services.notifications.delivery.text import clean, clip
from services.shared.config import WebhookTarget

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/json"
RETRY_AFTER_CAP_S = 60.0  # a longer Retry-After is clipped to this
RESPONSE_SNIPPET_CHARS = 200  # of a refusing server's response, in the outcome's detail


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


def encode(body: dict[str, Any]) -> bytes:
    """The bytes that are posted (and signed): compact UTF-8 JSON."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", errors="replace")  # a lone surrogate in the json format: "?"


def _attempts(count: int) -> str:
    return f"{count} attempt{'s' if count != 1 else ''}"


class WebhookPoster:
    """Posts bodies to webhooks; one `ActionOutcome` per delivery.

    `targets`: the webhooks a subclass sends to (none for a user's own chat hook).

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

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s)
            )

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def post(self, target: WebhookTarget, body: dict[str, Any]) -> ActionOutcome:
        """Post one ready body to one target (not one of `targets`: a user's own chat hook),
        paced and retried like the rest."""
        if self._session is None:
            raise RuntimeError("WebhookPoster.post before start()")
        return await self._deliver(target, encode(body))

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
        reason = f"{status} {clip(' '.join(clean(said).split()), RESPONSE_SNIPPET_CHARS)}"
        reason = reason.strip()
        return _Reply(status, reason, wait, retriable=status == 429 or status >= 500)

    def _failed(self, target: WebhookTarget, detail: str) -> ActionOutcome:
        log.warning("webhook %s (%s): not delivered: %s", target.label, target.format, detail)
        return ActionOutcome(target.label, False, detail)
