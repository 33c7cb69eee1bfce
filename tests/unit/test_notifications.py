"""The notification path's pure parts (preferences, rate limit, reminders' plan, what producers
make of events, the chat and e-mail bodies) and the notifier over a real SQLite database with
recording senders: dedupe by key, preferences off, rate limit recorded as limited."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import create_async_engine

from services.gateway.auth import Caller
from services.gateway.stream import Event, visible_data
from services.notifications import channels, producers, records
from services.notifications.api import NOTIFICATION_KINDS
from services.notifications.channels import Note
from services.notifications.delivery.outcome import ActionOutcome
from services.notifications.limits import RateLimiter
from services.notifications.notifier import Notifier
from services.notifications.preferences import Preferences, answer, mask
from services.notifications.reminders import Reminders, plan, reminders
from services.notifications.tables import metadata
from services.shared.config import SmtpSettings, WebhookTarget
from services.shared.config.escalation import parse_step
from services.shared.contracts import Envelope, make_envelope
from services.shared.remote import ssh
from services.shared.reservation_book import Holding
from services.shared.storage.store import Store
from services.violations.tables import metadata as violations_metadata
from services.violations.tables import outbox

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


# --- preferences ---------------------------------------------------------------------------


def test_defaults_send_every_kind_to_the_browser_and_only_urgent_ones_by_mail() -> None:
    prefs = Preferences()
    for kind in NOTIFICATION_KINDS:
        assert "browser" in prefs.channels_for(kind)
    assert prefs.channels_for("job_failed") == ["email", "chat", "browser"]
    assert prefs.channels_for("reservation_idle") == ["email", "chat", "browser"]
    assert prefs.channels_for("job_finished") == ["browser"]
    assert prefs.channels_for("reservation_starting") == ["browser"]
    assert (prefs.start_lead_min, prefs.end_lead_min) == (10, 10)


def test_a_change_keeps_what_it_does_not_name_and_survives_storage() -> None:
    changed = Preferences().changed(
        {
            "kinds": [{"kind": "job_failed", "email": False, "chat": False, "browser": False}],
            "start_lead_min": 3,
        }
    )
    assert changed.channels_for("job_failed") == []
    assert changed.channels_for("reservation_idle") == ["email", "chat", "browser"]
    assert (changed.start_lead_min, changed.end_lead_min) == (3, 10)
    assert Preferences.from_json(changed.to_json()) == changed
    assert Preferences.from_json(None) == Preferences()


def test_a_kind_added_after_the_user_saved_starts_with_its_default() -> None:
    stored = '{"kinds": {"job_failed": []}, "start_lead_min": 5, "end_lead_min": 7}'
    prefs = Preferences.from_json(stored)
    assert prefs.channels_for("job_failed") == []
    assert prefs.channels_for("reservation_violated") == ["email", "chat", "browser"]


def test_the_chat_url_is_only_ever_answered_masked() -> None:
    url = "https://hooks.slack.com/services/T000/B000/SECRETTOKENabcd"
    shown = answer(Preferences(), "slack", url)
    assert shown["chat_handle"] == "hooks.slack.com/…abcd"
    assert "SECRET" not in str(shown)
    assert mask(None) is None
    assert answer(Preferences(), "slack", None)["chat_format"] is None


# --- rate limit ----------------------------------------------------------------------------


def test_the_rate_limit_counts_per_user_and_channel_within_a_minute() -> None:
    now = [0.0]
    limiter = RateLimiter(2, clock=lambda: now[0])
    assert limiter.allow("alice", "email") and limiter.allow("alice", "email")
    assert not limiter.allow("alice", "email")
    assert limiter.allow("alice", "browser")
    assert limiter.allow("bob", "email")
    now[0] = 59.9
    assert not limiter.allow("alice", "email")
    now[0] = 60.1
    assert limiter.allow("alice", "email")


# --- reminders -----------------------------------------------------------------------------


def _held(start_in: timedelta, length: timedelta = timedelta(hours=1)) -> Holding:
    return Holding(
        7, "alice", frozenset(), NOW + start_in, NOW + start_in + length, {"u": ("h", 1)}
    )


def _plan_by_reminders(
    holdings: list[Holding], leads: dict[str, tuple[int, int]], now: datetime
) -> tuple[list[dict[str, Any]], datetime | None]:
    """The plan as every reservation's two reminders (notes and all) say it."""
    due, upcoming = [], []
    for held in holdings:
        start_lead, end_lead = leads.get(held.owner, (10, 10))
        for reminder, moment in zip(
            reminders(held, start_lead, end_lead), (held.start, held.end), strict=True
        ):
            if now >= moment:
                continue
            if reminder.at <= now:
                minutes = -(-int((moment - now).total_seconds()) // 60)
                due.append({**reminder.note, "text": f"{reminder.note['text']} (in {minutes} min)"})
            else:
                upcoming.append(reminder.at)
    return due, min(upcoming, default=None)


async def test_a_due_reminder_is_handed_to_the_notifier_once_not_on_every_pass() -> None:
    sent: list[str] = []

    async def leads(owners: Any) -> dict[str, tuple[int, int]]:
        return {owner: (10, 10) for owner in owners}

    async def notify(note: dict[str, Any]) -> None:
        sent.append(note["key"])

    holdings = [_held(timedelta(minutes=5)), _held(timedelta(hours=3))]
    now = [NOW]
    due_soon = Reminders(lambda: holdings, leads, notify, clock=lambda: now[0])
    upcoming = await due_soon.pass_once()
    assert upcoming == NOW + timedelta(minutes=55)  # the first one's end (65 min) less 10
    await due_soon.pass_once()
    assert len(sent) == 1 and ":reservation_starting:" in sent[0]
    now[0] = NOW + timedelta(minutes=56)  # its end reminder is due now, and sent once
    await due_soon.pass_once()
    await due_soon.pass_once()
    assert len(sent) == 2


def test_a_booking_wakes_the_reminders_only_if_a_reminder_of_it_may_come_before_the_next_pass() -> (
    None
):
    async def leads(owners: Any) -> dict[str, tuple[int, int]]:
        return {}

    async def notify(note: dict[str, Any]) -> None:
        return None

    watch = Reminders(list, leads, notify, clock=lambda: NOW)
    watch._next_pass = NOW + timedelta(minutes=30)  # as a pass that found nothing sooner plans
    watch.changed(_held(timedelta(weeks=2)))
    assert not watch._wake.is_set()  # weeks ahead: nothing due before the planned pass
    watch.changed(None)  # cancelled: nothing to remind of
    assert not watch._wake.is_set()
    watch.changed(_held(timedelta(hours=20)))  # may be due within the longest lead time
    assert watch._wake.is_set()


async def test_a_booking_during_a_pass_brings_another_only_if_a_reminder_may_come_sooner() -> None:
    in_pass, go_on = asyncio.Event(), asyncio.Event()

    async def leads(owners: Any) -> dict[str, tuple[int, int]]:
        in_pass.set()
        await go_on.wait()
        return {}

    async def notify(note: dict[str, Any]) -> None:
        return None

    async def pass_with(booked: Holding) -> bool:
        """A pass during which `booked` comes; whether another pass is coming after it."""
        watch = Reminders(list, leads, notify, clock=lambda: NOW)
        in_pass.clear()
        go_on.clear()
        await watch.start()
        try:
            await in_pass.wait()
            watch.changed(booked)
            go_on.set()
            for _ in range(100):  # until the pass has planned the next
                if watch._next_pass is not None or watch._wake.is_set():
                    break
                await asyncio.sleep(0)
            return watch._wake.is_set()
        finally:
            await watch.stop()

    assert not await pass_with(_held(timedelta(weeks=2)))  # the next pass, in 60 s, is soon enough
    assert await pass_with(_held(timedelta(minutes=5)))  # due before that: another pass now


def test_the_plan_is_what_each_reservations_reminders_say() -> None:
    rng = random.Random(3)
    for _ in range(50):
        holdings = [
            Holding(
                i,
                rng.choice(("alice", "bob", "cyd")),
                frozenset(),
                start := NOW + timedelta(minutes=rng.randint(-90, 90)),
                start + timedelta(minutes=rng.randint(1, 120)),
                {f"u{g}": ("h", g) for g in rng.sample(range(8), rng.randint(1, 3))},
            )
            for i in range(rng.randint(0, 12))
        ]
        leads = {"alice": (rng.randint(0, 60), rng.randint(0, 60)), "bob": (5, 30)}
        assert plan(holdings, leads, NOW) == _plan_by_reminders(holdings, leads, NOW)


def test_a_reminder_is_due_within_the_lead_time_and_keyed_by_what_it_reminds_of() -> None:
    due, upcoming = plan([_held(timedelta(minutes=5))], {"alice": (10, 10)}, NOW)
    assert [n["kind"] for n in due] == ["reservation_starting"]
    assert due[0]["user"] == "alice"
    assert (
        due[0]["key"]
        == f"reservation:7:reservation_starting:{(NOW + timedelta(minutes=5)).isoformat()}"
    )
    assert "in 5 min" in due[0]["text"]
    assert upcoming == NOW + timedelta(minutes=65) - timedelta(minutes=10)


def test_no_reminder_before_the_lead_time_nor_after_the_moment() -> None:
    due, upcoming = plan([_held(timedelta(minutes=30))], {"alice": (10, 10)}, NOW)
    assert due == [] and upcoming == NOW + timedelta(minutes=20)
    started = _held(-timedelta(minutes=5), timedelta(minutes=60))
    due, upcoming = plan([started], {"alice": (10, 10)}, NOW)
    assert due == [] and upcoming == NOW + timedelta(minutes=45)


# --- producers -----------------------------------------------------------------------------


def test_a_job_tells_its_owner_when_it_ends_and_not_before() -> None:
    base = {"id": 4, "owner": "alice", "name": "train", "previous_status": "running"}
    failed = producers.job_note({**base, "status": "failed"})
    assert failed is not None and failed["kind"] == "job_failed" and failed["user"] == "alice"
    assert failed["key"] == "job:4:failed"
    done = producers.job_note({**base, "status": "succeeded"})
    assert done is not None and done["kind"] == "job_finished"
    assert producers.job_note({**base, "status": "running", "previous_status": "starting"}) is None


def test_a_violation_tells_the_owner_and_a_cancellation_only_when_rules_did_it() -> None:
    incident = {"incident_id": "i1", "host": "h", "gpu_index": 2, "offender": "bob"}
    note = producers.violation_note({**incident, "owner": "alice", "reservation_id": 3})
    assert note is not None and note["user"] == "alice" and note["kind"] == "reservation_violated"
    assert producers.violation_note({**incident, "owner": None}) is None
    cancelled = {"id": 3, "owner": "alice", "title": "x", "start": "s", "end": "e"}
    assert producers.cancelled_note({**cancelled, "by_rules": False}) is None
    by_rules = producers.cancelled_note({**cancelled, "by_rules": True, "cancel_reason": "r"})
    assert by_rules is not None and by_rules["kind"] == "reservation_cancelled"


async def test_a_changed_host_key_is_told_to_every_admin_once_per_outage() -> None:
    sent: list[dict[str, Any]] = []

    async def notify(note: dict[str, Any], **_options: Any) -> None:
        sent.append(note)

    async def admins() -> list[str]:
        return ["root", "carol"]

    handlers = producers.event_handlers(notify, lambda _incident: frozenset(), admins)
    consume = handlers[("monitor", "host.unreachable", "notify-hosts")]
    since = "2026-11-24T12:00:00+00:00"
    reason = ssh.host_key_changed("dgx3")
    for why in ("connection lost", reason):  # how the outage began, then the key
        data = {"host": "dgx3", "since": since, "reason": why}
        await consume(make_envelope("host.unreachable", data, source="monitor"))
    assert [(n["user"], n["kind"], n["key"]) for n in sent] == [
        ("root", "host_key_changed", f"host-key:dgx3:{since}"),
        ("carol", "host_key_changed", f"host-key:dgx3:{since}"),
    ]
    assert sent[0]["title"] == "dgx3 presents another SSH host key"
    assert "man-in-the-middle" in sent[0]["text"] and "warden hosts check dgx3" in sent[0]["text"]
    assert Preferences().channels_for("host_key_changed") == ["email", "chat", "browser"]


async def test_a_violation_tells_the_offender_in_the_browser_once_per_incident() -> None:
    told: list[tuple[dict[str, Any], frozenset[str]]] = []

    async def notify(note: dict[str, Any], skip: frozenset[str] = frozenset()) -> None:
        told.append((note, skip))

    async def admins() -> list[str]:
        return []

    handlers = producers.event_handlers(notify, lambda _incident: frozenset({"email"}), admins)
    opened = handlers[("violations", "violation.opened", "notify-violations")]
    data = {"incident_id": "i1", "host": "h", "gpu_index": 2, "offender": "bob", "owner": "alice"}
    await opened(Envelope("e1", "violation.opened", 1, "2026-11-27T18:00:00Z", "violations", data))
    by_user = {note["user"]: (note, skip) for note, skip in told}
    offender, skip = by_user["bob"]
    assert offender["kind"] == "using_reserved_gpu" and offender["key"] == "incident:i1:offender"
    assert offender["title"] == "You are using h GPU 2, which alice reserved" and not skip
    assert by_user["alice"][0]["kind"] == "reservation_violated"
    assert Preferences().channels_for("using_reserved_gpu") == ["browser"]
    strict = producers.offender_note({**data, "owner": None})
    assert strict["title"] == "You are using h GPU 2, which nobody reserved"


# --- bodies ----------------------------------------------------------------------------------


NOTE = Note(
    "alice", "reservation_idle", "GPU idle\nBcc: x@y", "Keep it?", (("Keep", "https://w/k"),)
)


@pytest.mark.parametrize("format", ["slack", "mattermost", "discord", "teams"])
def test_each_chat_format_carries_the_title_and_links(format: str) -> None:
    body = str(channels.chat(format, NOTE))
    assert "GPU idle" in body and "https://w/k" in body


def test_the_mail_subject_cannot_be_broken_into_headers() -> None:
    message = channels.email(NOTE, "alice@lab.example", "warden@lab.example", NOW)
    assert "\n" not in message["Subject"] and message["Bcc"] is None
    assert "https://w/k" in message.get_content()


# --- the notifier over SQLite ----------------------------------------------------------------


class FakeMail:
    def __init__(self) -> None:
        self.sent: list[tuple[EmailMessage, str]] = []
        self.fail = 0  # the next this many attempts fail

    async def deliver(self, message: EmailMessage, address: str, label: str) -> ActionOutcome:
        if self.fail:
            self.fail -= 1
            return ActionOutcome(address, False, "451 try again")
        self.sent.append((message, address))
        return ActionOutcome(address, True, "accepted")


class FakeHooks:
    def __init__(self) -> None:
        self.posted: list[tuple[WebhookTarget, dict[str, Any]]] = []

    async def post(self, target: WebhookTarget, body: dict[str, Any]) -> ActionOutcome:
        self.posted.append((target, body))
        return ActionOutcome(target.label, True, "200 after 1 attempt")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/v.db")
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await conn.run_sync(violations_metadata.create_all)  # the outbox
    yield Store(engine)
    await engine.dispose()


def _notifier(store: Store, mail: FakeMail, hooks: FakeHooks, per_minute: int = 5) -> Notifier:
    async def address_of(user: str) -> str | None:
        return f"{user}@lab.example"

    async def no_sleep(_: float) -> None:
        return None

    return Notifier(
        store,
        smtp=SmtpSettings(host="127.0.0.1"),
        mail=mail,  # type: ignore[arg-type]
        webhooks=hooks,  # type: ignore[arg-type]
        address_of=address_of,
        per_minute=per_minute,
        outbox=outbox,
        sleep=no_sleep,
    )


def _args(**extra: Any) -> dict[str, Any]:
    return {"user": "alice", "kind": "job_failed", "title": "t", "text": "x", "links": [], **extra}


async def _sent(store: Store) -> list[tuple[str, str]]:
    async with store.read() as conn:
        found = await records.list_sent(conn, "alice", 100, 0)
    return sorted((item["channel"], item["outcome"]) for item in found["items"])


async def test_the_same_key_is_sent_once(store: Store) -> None:
    mail, hooks = FakeMail(), FakeHooks()
    notifier = _notifier(store, mail, hooks)
    first = await notifier.notify(_args(key="job:1:failed"))
    assert first == {"duplicate": False, "channels": {"email": "sent", "browser": "sent"}}
    again = await notifier.notify(_args(key="job:1:failed"))
    assert again == {"duplicate": True, "channels": {}}
    assert len(mail.sent) == 1
    assert await _sent(store) == [("browser", "sent"), ("email", "sent")]


async def test_channels_turned_off_get_nothing_and_chat_goes_to_the_users_hook(
    store: Store,
) -> None:
    mail, hooks = FakeMail(), FakeHooks()
    notifier = _notifier(store, mail, hooks)
    url = "http://127.0.0.1:9/hook/SECRET"
    async with store.write() as conn:
        prefs = Preferences().changed(
            {"kinds": [{"kind": "job_failed", "email": False, "chat": True, "browser": False}]}
        )
        await records.save_prefs(conn, "alice", prefs, "discord", url, 0)
    answer = await notifier.notify(_args())
    assert answer["channels"] == {"chat": "sent"}
    assert mail.sent == []
    assert [(t.url, t.format) for t, _ in hooks.posted] == [(url, "discord")]


async def test_over_the_rate_limit_is_recorded_as_limited(store: Store) -> None:
    notifier = _notifier(store, FakeMail(), FakeHooks(), per_minute=2)
    outcomes = [(await notifier.notify(_args()))["channels"]["email"] for _ in range(3)]
    assert outcomes == ["sent", "sent", "limited"]
    assert (await _sent(store)).count(("email", "limited")) == 1


async def test_a_failed_mail_is_retried(store: Store) -> None:
    mail = FakeMail()
    mail.fail = 2
    answer = await _notifier(store, mail, FakeHooks()).notify(_args())
    assert answer["channels"]["email"] == "sent" and len(mail.sent) == 1
    mail.fail = 5
    answer = await _notifier(store, mail, FakeHooks()).notify(_args())
    assert answer["channels"]["email"] == "failed"


async def test_a_database_away_fails_the_mail_in_one_log_line(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Its settings or the address unreadable while PostgreSQL restarts: a warning, no trace."""
    notifier = _notifier(store, FakeMail(), FakeHooks())

    async def restarting(user: str) -> str | None:
        cause = ConnectionResetError("the database system is shutting down")
        raise sa_exc.OperationalError("SELECT email", {}, cause)

    notifier.address_of = restarting
    with caplog.at_level(logging.WARNING, logger="warden.notifications"):
        answer = await notifier.notify(_args())
    assert answer["channels"]["email"] == "failed"
    failed = [r for r in caplog.records if "notification on email failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is None
    assert failed[0].getMessage().endswith("the database is unreachable")


def test_the_live_stream_shows_a_notification_only_to_its_user_not_even_admins() -> None:
    data = {"id": "1", "user": "alice", "kind": "job_failed", "title": "t", "text": "x"}
    sent = Event(1, "e-1", "notifications", "notification.sent", "2026-11-24T20:00:00Z", data)
    assert visible_data(Caller("alice", False), sent) == data
    assert visible_data(Caller("bob", False), sent) is None
    assert visible_data(Caller("root", True), sent) is None


def test_an_owner_mailed_by_the_escalation_is_not_mailed_again_by_the_notification() -> None:
    owner_mail = [parse_step("0s terminal offender"), parse_step("60s email offender+owner")]
    assert producers.owner_mailed_by_steps(owner_mail, ("terminal", "email")) == {"email"}
    assert producers.owner_mailed_by_steps(owner_mail, ("terminal",)) == frozenset()
    others = [parse_step("0s email offender+admins"), parse_step("0s webhook owner")]
    assert producers.owner_mailed_by_steps(others, ("email", "webhook")) == frozenset()


async def test_skipped_channels_are_left_out(store: Store) -> None:
    mail = FakeMail()
    answer = await _notifier(store, mail, FakeHooks()).notify(_args(), skip=frozenset({"email"}))
    assert answer["channels"] == {"browser": "sent"} and mail.sent == []
