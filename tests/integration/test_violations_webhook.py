"""WebhookSender against a real HTTP server: a recording aiohttp receiver on 127.0.0.1.

The HTTP is real; only time is faked: `sleep` records how long the sender wanted to wait and
moves a fake monotonic clock on, so back-off and pacing are asserted on those durations and
no test waits for them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web

from services.notifications.delivery.signature import verify
from services.notifications.delivery.webhook import encode
from services.shared.config import ViolationSettings, WebhookTarget
from services.violations.actions.base import Alert, Process
from services.violations.actions.webhook import WebhookSender
from services.violations.actions.webhook_payloads import payload
from tests.support.ports import free_port

T0 = datetime(2026, 11, 21, 13, 5, tzinfo=UTC)
WALL = 1_795_363_200.0
LOGGER = "services.notifications.delivery.webhook"

ALERT = Alert(
    incident_id="inc-7f3a",
    host="gpu01",
    gpu_uuid="GPU-5a1c0e2b",
    gpu_index=2,
    offender="bob",
    processes=(Process(4242, "python train.py"),),
    since=T0,
    reservation_id=12,
    owner="alice",
    reservation_start=T0 - timedelta(hours=1),
    reservation_end=T0 + timedelta(hours=5),
    step="0s webhook owner+admins",
    step_index=1,
    action="webhook",
    recipients=("owner", "admins"),
    next_step="60s email offender+admins",
    next_at=T0 + timedelta(minutes=1),
)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Records every POST; answers each path from its script, then 200 "ok"."""

    base: str = ""
    seen: list[Request] = field(default_factory=list)
    script: dict[str, list[tuple[int, dict[str, str], str]]] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, name: str) -> str:
        """A URL that looks like a chat webhook's: the path is the secret token."""
        return f"{self.base}/hooks/{name}/tok-{uuid.uuid4().hex}"

    def answer(self, url: str, *replies: tuple[int, dict[str, str], str]) -> None:
        self.script[url.removeprefix(self.base)] = list(replies)

    def to(self, url: str) -> list[Request]:
        return [r for r in self.seen if r.path == url.removeprefix(self.base)]

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(Request(request.path, dict(request.headers), await request.read()))
        if request.path.startswith("/hang/"):
            await self.release.wait()
        replies = self.script.get(request.path)
        status, headers, text = replies.pop(0) if replies else (200, {}, "ok")
        if text == "<echo>":  # a server that repeats the URL in its error message
            text = f"no hook at {request.url} (path {request.path})"
        return web.Response(status=status, headers=headers, text=text)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    received = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", received.handle)
    runner = web.AppRunner(app, access_log=None)  # its log would show the paths we look for
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    received.base = f"http://{host}:{port}"
    try:
        yield received
    finally:
        received.release.set()
        await runner.cleanup()


class FakeTime:
    """A monotonic clock that only `sleep` moves; every wanted sleep is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


def sender(fake: FakeTime, *targets: WebhookTarget, **options: float) -> WebhookSender:
    options = {"min_interval_s": 0.0, "retries": 4, **options}
    return WebhookSender(
        targets,
        min_interval_s=options["min_interval_s"],
        retries=int(options["retries"]),
        backoff_s=options.get("backoff_s", 0.5),
        max_backoff_s=options.get("max_backoff_s", 30.0),
        timeout_s=options.get("timeout_s", 10.0),
        sleep=fake.sleep,
        clock=fake.clock,
        wall_clock=lambda: WALL,
    )


# --- delivery --------------------------------------------------------------------------------


async def test_each_format_is_posted_as_json(receiver: Receiver, fake: FakeTime) -> None:
    targets = [
        WebhookTarget(url=receiver.url(fmt), format=fmt, name=f"lab-{fmt}")
        for fmt in ("slack", "mattermost", "discord", "teams")
    ]
    signed = WebhookTarget(url=receiver.url("json"), format="json", secret="s3cret", name="audit")
    plain = WebhookTarget(url=receiver.url("json2"), format="json", name="audit-plain")
    async with sender(fake, *targets, signed, plain) as webhooks:
        outcomes = await webhooks.send(ALERT)

    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        ("lab-slack", True, "200 after 1 attempt"),
        ("lab-mattermost", True, "200 after 1 attempt"),
        ("lab-discord", True, "200 after 1 attempt"),
        ("lab-teams", True, "200 after 1 attempt"),
        ("audit", True, "200 after 1 attempt"),
        ("audit-plain", True, "200 after 1 attempt"),
    ]
    for target in [*targets, signed, plain]:
        [request] = receiver.to(target.url)
        assert request.headers["Content-Type"] == "application/json"
        assert json.loads(request.body) == payload(target.format, ALERT)
        assert request.body == encode(payload(target.format, ALERT))
        if target is not signed:
            assert "X-Warden-Signature" not in request.headers
            assert "X-Warden-Timestamp" not in request.headers

    [request] = receiver.to(signed.url)
    assert request.headers["X-Warden-Timestamp"] == str(int(WALL))
    assert request.headers["X-Warden-Signature"].startswith("sha256=")
    assert verify(
        "s3cret",
        request.headers["X-Warden-Timestamp"],
        request.body,
        request.headers["X-Warden-Signature"],
        now=WALL,
    )
    assert json.loads(request.body)["incident"]["incident_id"] == "inc-7f3a"
    assert fake.sleeps == []


async def test_skip_leaves_those_targets_out(receiver: Receiver, fake: FakeTime) -> None:
    chat = WebhookTarget(url=receiver.url("chat"), format="slack", name="chat")
    audit = WebhookTarget(url=receiver.url("audit"), format="json", name="audit")
    async with sender(fake, chat, audit) as webhooks:
        outcomes = await webhooks.send(ALERT, skip={"chat"})
        assert await webhooks.send(ALERT, skip=("chat", "audit")) == []
    assert [(o.target, o.ok) for o in outcomes] == [("audit", True)]
    assert receiver.to(chat.url) == []
    assert len(receiver.to(audit.url)) == 1


async def test_the_label_defaults_to_the_format(receiver: Receiver, fake: FakeTime) -> None:
    target = WebhookTarget(url=receiver.url("x"), format="discord")
    async with sender(fake, target) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert outcome.target == "discord"


async def test_an_unknown_format_fails_alone(receiver: Receiver, fake: FakeTime) -> None:
    odd = WebhookTarget(url=receiver.url("odd"), format="irc", name="odd")
    good = WebhookTarget(url=receiver.url("good"), format="slack", name="good")
    async with sender(fake, odd, good) as webhooks:
        outcomes = await webhooks.send(ALERT)
    assert [(o.target, o.ok) for o in outcomes] == [("odd", False), ("good", True)]
    assert "unknown webhook format 'irc'" in outcomes[0].detail
    assert receiver.to(odd.url) == []


# --- retries -----------------------------------------------------------------------------------


async def test_429_waits_retry_after_then_delivers(receiver: Receiver, fake: FakeTime) -> None:
    target = WebhookTarget(url=receiver.url("busy"), format="slack", name="chat")
    receiver.answer(target.url, (429, {"Retry-After": "7"}, "rate_limited"))
    async with sender(fake, target) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert (outcome.ok, outcome.detail) == (True, "200 after 2 attempts")
    assert fake.sleeps == [7.0]
    assert len(receiver.to(target.url)) == 2


async def test_a_long_retry_after_is_capped(receiver: Receiver, fake: FakeTime) -> None:
    target = WebhookTarget(url=receiver.url("busy"), format="discord", name="chat")
    receiver.answer(target.url, (429, {"Retry-After": "86400"}, ""))
    async with sender(fake, target) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert outcome.ok
    assert fake.sleeps == [60.0]


async def test_429_without_retry_after_backs_off(receiver: Receiver, fake: FakeTime) -> None:
    target = WebhookTarget(url=receiver.url("busy"), format="slack", name="chat")
    receiver.answer(target.url, (429, {}, ""), (429, {}, ""))
    async with sender(fake, target) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert (outcome.ok, outcome.detail) == (True, "200 after 3 attempts")
    assert fake.sleeps == [0.5, 1.0]


async def test_500_three_times_then_200(receiver: Receiver, fake: FakeTime) -> None:
    target = WebhookTarget(url=receiver.url("flaky"), format="mattermost", name="mm")
    receiver.answer(target.url, *[(500, {}, "oops")] * 3)
    async with sender(fake, target) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert (outcome.ok, outcome.detail) == (True, "200 after 4 attempts")
    assert fake.sleeps == [0.5, 1.0, 2.0]
    assert len(receiver.to(target.url)) == 4


async def test_404_fails_at_once(
    receiver: Receiver, fake: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    target = WebhookTarget(url=receiver.url("gone"), format="slack", name="chat")
    receiver.answer(target.url, (404, {}, "no_service"))
    caplog.set_level(logging.DEBUG)
    async with sender(fake, target) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert (outcome.ok, outcome.detail) == (False, "404 no_service after 1 attempt")
    assert len(receiver.to(target.url)) == 1
    assert fake.sleeps == []
    [line] = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    assert "chat" in line.getMessage() and "404" in line.getMessage()


async def test_retries_exhausted(
    receiver: Receiver, fake: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    target = WebhookTarget(url=receiver.url("down"), format="teams", name="teams")
    receiver.answer(target.url, *[(503, {}, "")] * 10)
    caplog.set_level(logging.DEBUG)
    async with sender(fake, target, retries=6, max_backoff_s=1.5) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert not outcome.ok
    assert outcome.detail == "503 after 7 attempts (retries exhausted)"
    assert len(receiver.to(target.url)) == 7
    assert fake.sleeps == [0.5, 1.0, 1.5, 1.5, 1.5, 1.5]  # doubled, then capped
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    assert len(warnings) == 1  # one line per failed delivery, not per attempt
    assert "teams" in warnings[0].getMessage() and "503" in warnings[0].getMessage()


async def test_no_retries_configured(receiver: Receiver, fake: FakeTime) -> None:
    target = WebhookTarget(url=receiver.url("down"), format="slack", name="chat")
    receiver.answer(target.url, (502, {}, ""))
    async with sender(fake, target, retries=0) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert outcome.detail == "502 after 1 attempt (retries exhausted)"
    assert fake.sleeps == []


async def test_a_timeout_is_retried_like_a_5xx(receiver: Receiver, fake: FakeTime) -> None:
    url = receiver.url("x").replace("/hooks/", "/hang/")
    target = WebhookTarget(url=url, format="slack", name="slow")
    async with sender(fake, target, retries=1, timeout_s=0.2) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert not outcome.ok
    assert outcome.detail == "no answer within 0.2 s after 2 attempts (retries exhausted)"
    assert fake.sleeps == [0.5]


# --- pacing ------------------------------------------------------------------------------------


async def test_one_url_is_paced_and_concurrent_sends_queue(
    receiver: Receiver, fake: FakeTime
) -> None:
    target = WebhookTarget(url=receiver.url("paced"), format="slack", name="chat")
    async with sender(fake, target, min_interval_s=5.0) as webhooks:
        first, second = await asyncio.gather(webhooks.send(ALERT), webhooks.send(ALERT))
        assert fake.sleeps == [5.0]  # the second waited for the first, none was dropped
        third = await webhooks.send(ALERT)
        assert fake.sleeps == [5.0, 5.0]
        fake.now += 60.0  # long after the last one: no wait
        fourth = await webhooks.send(ALERT)
        assert fake.sleeps == [5.0, 5.0]
    assert all(o.ok for o in [*first, *second, *third, *fourth])
    assert len(receiver.to(target.url)) == 4


async def test_different_urls_do_not_wait_for_each_other(
    receiver: Receiver, fake: FakeTime
) -> None:
    one = WebhookTarget(url=receiver.url("one"), format="slack", name="one")
    two = WebhookTarget(url=receiver.url("two"), format="discord", name="two")
    async with sender(fake, one, two, min_interval_s=5.0) as webhooks:
        outcomes = await webhooks.send(ALERT)
    assert [o.ok for o in outcomes] == [True, True]
    assert fake.sleeps == []


async def test_two_targets_with_one_url_share_its_pace(receiver: Receiver, fake: FakeTime) -> None:
    url = receiver.url("shared")
    a = WebhookTarget(url=url, format="slack", name="a")
    b = WebhookTarget(url=url, format="mattermost", name="b")
    async with sender(fake, a, b, min_interval_s=5.0) as webhooks:
        outcomes = await webhooks.send(ALERT)
    assert [o.ok for o in outcomes] == [True, True]
    assert fake.sleeps == [5.0]


async def test_retry_after_holds_back_other_sends_to_that_url(
    receiver: Receiver, fake: FakeTime
) -> None:
    target = WebhookTarget(url=receiver.url("busy"), format="slack", name="chat")
    receiver.answer(target.url, (429, {"Retry-After": "7"}, ""))
    async with sender(fake, target, min_interval_s=1.0) as webhooks:
        first, second = await asyncio.gather(webhooks.send(ALERT), webhooks.send(ALERT))
    assert first[0].ok and second[0].ok
    # whichever went first got the 429: the next request to that URL waited 7 s, the one
    # after it the minimum interval, never less
    assert fake.sleeps == [7.0, 1.0]
    assert len(receiver.to(target.url)) == 3


# --- secrets -----------------------------------------------------------------------------------


async def test_the_url_never_shows_on_connection_refused(
    fake: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    token = f"T0001/B0002/{uuid.uuid4().hex}"
    url = f"http://127.0.0.1:{free_port()}/services/{token}"
    target = WebhookTarget(url=url, format="slack", name="lab-chat")
    caplog.set_level(logging.DEBUG)
    async with sender(fake, target, retries=2) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert not outcome.ok
    assert (
        outcome.detail == "cannot connect: connection refused after 3 attempts (retries exhausted)"
    )
    assert fake.sleeps == [0.5, 1.0]
    for text in (outcome.detail, outcome.target, caplog.text):
        assert url not in text and token not in text and token.split("/")[-1] not in text
    assert "lab-chat" in caplog.text


async def test_the_url_never_shows_when_the_server_repeats_it(
    receiver: Receiver, fake: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    target = WebhookTarget(url=receiver.url("gone"), format="discord", name="lab")
    receiver.answer(target.url, (400, {}, "<echo>"))
    caplog.set_level(logging.DEBUG)
    async with sender(fake, target) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert not outcome.ok
    assert outcome.detail.startswith("400 no hook at")
    token = target.url.rsplit("/", 1)[-1]
    for text in (outcome.detail, caplog.text):
        assert target.url not in text and token not in text


async def test_the_url_never_shows_when_it_is_malformed(
    fake: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    url = "http://[::1/hooks/tok-6b1f0c9e2d7a4e55"
    target = WebhookTarget(url=url, format="json", secret="k", name="broken")
    caplog.set_level(logging.DEBUG)
    async with sender(fake, target) as webhooks:
        [outcome] = await webhooks.send(ALERT)
    assert not outcome.ok
    assert outcome.detail == "invalid URL after 1 attempt"
    assert fake.sleeps == []  # a bad URL is not retried
    for text in (outcome.detail, caplog.text):
        assert "tok-6b1f0c9e2d7a4e55" not in text


# --- life cycle --------------------------------------------------------------------------------


async def test_send_needs_start(fake: FakeTime) -> None:
    webhooks = sender(fake)
    with pytest.raises(RuntimeError, match="start"):
        await webhooks.send(ALERT)
    await webhooks.start()
    assert await webhooks.send(ALERT) == []
    await webhooks.close()
    await webhooks.close()  # twice is fine


def test_from_settings_takes_the_violation_settings() -> None:
    target = WebhookTarget(url="https://chat.example/hooks/x", format="slack")
    settings = ViolationSettings(webhooks=(target,), webhook_min_interval_s=2.5, webhook_retries=7)
    webhooks = WebhookSender.from_settings(settings)
    assert webhooks.targets == (target,)
    assert (webhooks.min_interval_s, webhooks.retries) == (2.5, 7)
