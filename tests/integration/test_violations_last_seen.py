"""The tracker over a restart: an open incident's last sighting is written, coalesced, and
survives it; a step that fell due while the service was down goes out once, though the
incident was resolved meanwhile.

The tracker on a real database (SQLite and PostgreSQL) with a clock of the test's own: each
snapshot and tick happens at a chosen moment, so nothing waits for the write interval.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.shared.config import load_settings
from services.shared.storage import db
from services.shared.storage.store import Store
from services.violations import repository
from services.violations.tracker import Tracker
from services.violations.usage_report import usage_report

GPU = "GPU-h1-2"
OPENED = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
RESERVATION = {
    "id": 7,
    "owner": "alice",
    "guests": [],
    "gpus": [{"uuid": GPU, "host": "h1", "index": 2}],
    "start": (OPENED - timedelta(hours=1)).isoformat(),
    "end": (OPENED + timedelta(hours=2)).isoformat(),
    "title": "training",
    "status": "active",
    "created_by": "alice",
}


class Clock:
    def __init__(self) -> None:
        self.now = OPENED

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/violations.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    engine = db.create_engine(database_url)
    await db.upgrade(engine, "violations")
    try:
        yield Store(engine)
    finally:
        await engine.dispose()


async def _tracker(
    store: Store,
    clock: Clock,
    steps: str = "0s webhook owner",
    reservation: dict[str, Any] = RESERVATION,
) -> Tracker:
    settings = load_settings(
        None,
        environ={
            "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(48),
            "WARDEN_VIOLATIONS_STEPS": steps,
        },
    )
    tracker = Tracker(store, settings.violations, clock=clock, last_seen_every_s=30)
    await tracker.load()
    await tracker.load_reservations([reservation], [])
    return tracker


def _snapshot(at: datetime) -> dict[str, Any]:
    return {
        "host": "h1",
        "observed_at": at.isoformat(),
        "processes": [
            {
                "gpu_uuid": GPU,
                "pid": 200,
                "user": "bob",
                "command": "python squat.py",
                "used_memory_mib": 1024.0,
                "started_at": (OPENED - timedelta(seconds=30)).isoformat(),
            }
        ],
    }


async def _seen_again(tracker: Tracker, clock: Clock, after_s: float) -> None:
    """The same process seen `after_s` after opening, then a tick of the escalation timer."""
    clock.now = OPENED + timedelta(seconds=after_s)
    await tracker.on_processes(_snapshot(clock.now))
    await tracker.tick()


async def _stored_last_seen(store: Store) -> str:
    async with store.read() as conn:
        (incident,) = (await repository.list_incidents(conn, {}, **_ALL))["incidents"]
    return str(incident["last_seen_at"])


_ALL: dict[str, Any] = {
    "status": "open",
    "involving": None,
    "opened_after": None,
    "opened_before": None,
    "limit": 10,
    "offset": 0,
}


async def test_sightings_move_last_seen_at_once_per_interval_and_survive_a_restart(
    store: Store,
) -> None:
    clock = Clock()
    tracker = await _tracker(store, clock)
    await tracker.on_processes(_snapshot(OPENED))
    assert await _stored_last_seen(store) == OPENED.isoformat()

    for after_s in range(5, 616, 5):  # polled every 5 s for 615 s
        await _seen_again(tracker, clock, after_s)
    # Written at most every 30 s (at 5 s, 35 s, ... 605 s): 615 s waits for the next write.
    assert await _stored_last_seen(store) == (OPENED + timedelta(seconds=605)).isoformat()
    await _seen_again(tracker, clock, 630)
    assert await _stored_last_seen(store) == (OPENED + timedelta(seconds=605)).isoformat()
    await _seen_again(tracker, clock, 635)
    assert await _stored_last_seen(store) == (OPENED + timedelta(seconds=635)).isoformat()

    await _seen_again(tracker, clock, 640)
    await tracker.stop()  # stopping writes what is not written yet
    restarted = await _tracker(store, clock)
    assert await _stored_last_seen(store) == (OPENED + timedelta(seconds=640)).isoformat()
    async with store.read() as conn:
        report = await usage_report(conn, 0, int((OPENED + timedelta(days=1)).timestamp() * 1000))
    (bob,) = [f for f in report["facts"] if f["user"] == "bob"]
    # From the process's start (30 s before opening) to its last sighting.
    assert bob["unreserved_gpu_hours"] == pytest.approx(670 / 3600, abs=1e-5)

    # The restarted tracker goes on from there: an older snapshot changes nothing.
    await restarted.on_processes(_snapshot(OPENED + timedelta(seconds=620)))
    await _seen_again(restarted, clock, 700)
    assert await _stored_last_seen(store) == (OPENED + timedelta(seconds=700)).isoformat()


async def test_a_step_due_while_the_service_was_down_goes_out_once_though_the_reservation_ended(
    store: Store,
) -> None:
    clock = Clock()
    ending = {**RESERVATION, "end": (OPENED + timedelta(seconds=90)).isoformat()}
    steps = "0s webhook owner, 60s email admins, 100s kill"
    tracker = await _tracker(store, clock, steps, ending)
    await tracker.on_processes(_snapshot(OPENED))
    await tracker.stop()
    # Down from here: the e-mail step fell due at 60 s, the reservation ended at 90 s.
    clock.now = OPENED + timedelta(seconds=120)
    restarted = await _tracker(store, clock, steps, ending)
    await restarted.tick()
    await restarted.tick()
    async with store.read() as conn:
        (listed,) = (await repository.list_incidents(conn, {}, **{**_ALL, "status": None}))[
            "incidents"
        ]
        incident = await repository.get_incident(conn, listed["id"])
    assert incident is not None and incident["status"] == "resolved"
    assert [(e["kind"], e["step_index"]) for e in incident["timeline"]] == [
        ("opened", None),
        ("escalated", 0),
        ("escalated", 1),  # once, though it went out after the reservation ended
        ("resolved", None),
    ]  # and not the kill step: it fell due after the incident was resolved
