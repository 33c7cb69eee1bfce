"""The reservations service through its RPC methods and events, on SQLite and PostgreSQL.

The service runs from its composition root on the in-process bus against a real database;
GPUs arrive as gpu.discovered events, as from the monitor.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from services.accounts import users as accounts
from services.reservations import tables
from services.reservations.service import start as start_reservations
from services.reservations.store import Store
from services.shared.bus.inproc import InProcessBus
from services.shared.config import load_settings
from services.shared.contracts import Envelope
from services.shared.errors import (
    Forbidden,
    InvalidRequest,
    NotAllowed,
    NotFound,
    ReservationConflict,
)
from services.shared.http_errors import STATUS_BY_CODE
from services.shared.runtime import ServiceContext
from services.shared.storage import db
from tests.support.events import record
from tests.support.polling import until

HOSTS = {"dgx1": 4, "dgx2": 4}


def uuid_of(host: str, index: int) -> str:
    return f"GPU-{host}-{index}"


@dataclass
class Service:
    bus: InProcessBus
    events: list[Envelope]

    async def call(self, method: str, **args: Any) -> Any:
        return await self.bus.call("reservations", method, args, timeout=30)

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == event_type]

    async def until(self, condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
        await until(condition, what, timeout)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def service(
    database_url: str, tmp_path: Path, cheap_passwords: None
) -> AsyncIterator[Service]:
    url = database_url
    settings = load_settings(
        None,
        environ={
            "WARDEN_STORAGE_DATABASE_URL": url,
            "WARDEN_STORAGE_DATA_DIR": str(tmp_path),
            "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(48),
            "HOME": str(tmp_path),
        },
    )
    engine = db.create_engine(url)
    await db.upgrade(engine, "reservations")
    async with Store(engine).write() as conn:  # the first admin, as `warden init` makes it
        await accounts.create_user(
            conn,
            username="admin",
            email="admin@lab.example",
            password="admin-password",
            is_admin=True,
            actor="test",
        )
    await engine.dispose()
    bus = InProcessBus()
    await bus.start()
    events: list[Envelope] = []
    await record(bus, events, "reservations")
    stop = await start_reservations(ServiceContext("reservations", settings, bus))
    running = Service(bus, events)
    try:
        for host, count in HOSTS.items():
            for index in range(count):
                await bus.emit(
                    "gpu.discovered",
                    {
                        "host": host,
                        "uuid": uuid_of(host, index),
                        "index": index,
                        "name": "NVIDIA A100-SXM4-40GB" if host == "dgx1" else "NVIDIA H100",
                        "memory_total_mib": 40960.0,
                    },
                    source="monitor",
                )
        for name in ("alice", "bob"):
            await running.call(
                "create_user",
                actor="admin",
                username=name,
                email=f"{name}@lab.example",
                password=f"{name}-password",
            )

        async def every_gpu_known() -> bool:
            return len(await running.call("list_gpus")) >= sum(HOSTS.values())

        await until(every_gpu_known, "the GPUs arriving", timeout=10)
        yield running
    finally:
        await stop()
        await bus.close()


def _next_wednesday() -> datetime:
    today = datetime.now(UTC).replace(hour=8, minute=0, second=0, microsecond=0)
    return today + timedelta(days=(2 - today.weekday()) % 7 + 7)


BASE = _next_wednesday()  # 08:00 UTC: every test's hours fall in one day of one week


def at(hours: float) -> str:
    return (BASE + timedelta(hours=hours)).isoformat()


async def book(
    service: Service, actor: str, gpus: list[str], start: float, end: float, **kw: Any
) -> Any:
    made = await service.call(
        "create_reservation",
        actor=actor,
        gpus=gpus,
        start=at(start),
        end=at(end),
        title=kw.pop("title", f"{actor}'s run"),
        **kw,
    )
    # Only the answer to a booking says what runs on its GPUs now: nothing, next week.
    assert made.pop("warnings") == []
    return made


G0, G1, G2 = uuid_of("dgx1", 0), uuid_of("dgx1", 1), uuid_of("dgx1", 2)


async def test_a_reservation_holds_all_its_gpus_and_is_announced_once(service: Service) -> None:
    made = await book(service, "alice", [G0, G1], 0, 2)
    assert made["owner"] == "alice" and made["status"] == "active"
    assert [g["index"] for g in made["gpus"]] == [0, 1]
    assert made["gpus"][0]["host"] == "dgx1"
    await service.until(lambda: len(service.of("reservation.created")) == 1, "created event")
    assert service.of("reservation.created")[0]["id"] == made["id"]
    assert await service.call("get_reservation", id=made["id"]) == made


async def test_an_overlap_is_refused_with_the_conflicting_reservation(service: Service) -> None:
    first = await book(service, "alice", [G0], 0, 2)
    with pytest.raises(ReservationConflict) as refused:
        await book(service, "bob", [G1, G0], 1, 3)
    reasons = refused.value.details["reasons"]
    assert [r["code"] for r in reasons] == ["conflict"]
    assert reasons[0]["reservation_id"] == first["id"]
    assert reasons[0]["owner"] == "alice" and reasons[0]["gpu"] == G0
    assert "reserved by alice" in refused.value.message
    # All or nothing: G1 was free, yet nothing was booked on it.
    assert await service.call("calendar", start=at(0), end=at(4), gpus=[G1]) == []
    # Back to back is fine: intervals are half-open.
    await book(service, "bob", [G0], 2, 3)


async def test_twenty_concurrent_requests_for_one_slot_give_one_success(service: Service) -> None:
    users = [f"user{i:02d}" for i in range(20)]
    for name in users:
        await service.call(
            "create_user",
            actor="admin",
            username=name,
            email=f"{name}@lab.example",
            password="password-123",
        )
    results = await asyncio.gather(
        *(book(service, name, [G2, G1], 5, 7) for name in users), return_exceptions=True
    )
    made = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, ReservationConflict)]
    assert len(made) == 1, results
    assert len(refused) == 19, [r for r in results if not isinstance(r, dict | ReservationConflict)]
    assert len(await service.call("calendar", start=at(0), end=at(10), gpus=[G1, G2])) == 1


async def test_bad_requests_say_why(service: Service) -> None:
    with pytest.raises(InvalidRequest) as short:
        await book(service, "alice", [G0], 0, 0.25)
    assert "at least 30 minutes" in short.value.message
    with pytest.raises(InvalidRequest, match="past"):
        await service.call(
            "create_reservation",
            actor="alice",
            gpus=[G0],
            title="x",
            start=(datetime.now(UTC) - timedelta(hours=2)).isoformat(),
            end=(datetime.now(UTC) + timedelta(hours=2)).isoformat(),
        )
    with pytest.raises(InvalidRequest, match="unknown GPU"):
        await book(service, "alice", ["GPU-nope"], 0, 1)
    with pytest.raises(InvalidRequest, match="start"):
        await service.call("create_reservation", actor="alice", gpus=[G0], title="x", end=at(1))
    with pytest.raises(Forbidden):
        await book(service, "alice", [G0], 0, 1, owner="bob")
    for_bob = await book(service, "admin", [G0], 0, 1, owner="bob")
    assert for_bob["owner"] == "bob" and for_bob["created_by"] == "admin"


async def test_owners_edit_and_cancel_before_the_start_others_may_not(service: Service) -> None:
    made = await book(service, "alice", [G0], 0, 2)
    with pytest.raises(Forbidden):
        await service.call("cancel_reservation", actor="bob", id=made["id"])
    with pytest.raises(Forbidden):
        await service.call("update_reservation", actor="bob", id=made["id"], title="mine")
    changed = await service.call(
        "update_reservation", actor="alice", id=made["id"], title="renamed", end=at(3)
    )
    assert changed["title"] == "renamed" and changed["end"] == at(3)
    await service.until(lambda: len(service.of("reservation.updated")) == 1, "updated event")
    assert service.of("reservation.updated")[0]["changed"] == ["end", "title"]
    cancelled = await service.call(
        "cancel_reservation", actor="alice", id=made["id"], reason="plans changed"
    )
    assert cancelled["status"] == "cancelled" and cancelled["cancelled_by"] == "alice"
    assert cancelled["cancel_reason"] == "plans changed"
    # Kept, not deleted; no longer blocking anyone.
    assert (await service.call("get_reservation", id=made["id"]))["status"] == "cancelled"
    await book(service, "bob", [G0], 0, 2)
    with pytest.raises(NotFound):
        await service.call("get_reservation", id=999_999)


async def test_a_running_reservation_is_ended_early_not_cancelled(service: Service) -> None:
    now = datetime.now(UTC)
    made = await service.call(
        "create_reservation",
        actor="alice",
        gpus=[G0],
        title="now",
        start=now.isoformat(),
        end=(now + timedelta(hours=1)).isoformat(),
    )
    await service.until(lambda: len(service.of("reservation.started")) == 1, "started event")
    with pytest.raises(Forbidden, match="end it now"):
        await service.call("cancel_reservation", actor="alice", id=made["id"])
    with pytest.raises(Forbidden, match="start"):
        await service.call("update_reservation", actor="alice", id=made["id"], start=at(1))
    active = await service.call("active_reservations", gpus=[G0])
    assert [(a["gpu_uuid"], a["owner"]) for a in active] == [(G0, "alice")]
    ended = await service.call("end_reservation", actor="alice", id=made["id"])
    assert datetime.fromisoformat(ended["end"]) <= datetime.now(UTC)
    await service.until(lambda: len(service.of("reservation.ended")) == 1, "ended event")
    assert service.of("reservation.ended")[0]["id"] == made["id"]
    assert await service.call("active_reservations", gpus=[G0]) == []


async def test_deny_by_default_then_rules_with_windows(service: Service) -> None:
    rules = await service.call("list_rules")
    assert [r["name"] for r in rules] == ["users: every GPU, any time"]
    await service.call("delete_rule", actor="admin", id=rules[0]["id"])
    with pytest.raises(NotAllowed) as refused:
        await book(service, "alice", [G0], 0, 1)
    assert refused.value.details["reasons"][0]["code"] == "not_allowed"
    with pytest.raises(Forbidden):
        await service.call(
            "create_rule", actor="alice", name="mine", all_gpus=True, users=["alice"]
        )
    await service.call(
        "create_rule",
        actor="admin",
        name="alice on dgx1 weekdays",
        users=["alice"],
        hosts=["dgx1"],
        windows=[
            {
                "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                "start": "00:00",
                "end": "00:00",
            }
        ],
        timezone="Europe/Warsaw",
    )
    await book(service, "alice", [G0], 0, 1)
    with pytest.raises(NotAllowed, match="dgx2 GPU 0"):
        await book(service, "alice", [uuid_of("dgx2", 0)], 0, 1)
    with pytest.raises(InvalidRequest, match="timezone"):
        await service.call(
            "create_rule", actor="admin", name="bad", all_gpus=True, timezone="Mars/Olympus"
        )


async def test_rule_changes_cancel_and_restore_future_reservations(service: Service) -> None:
    everyone = (await service.call("list_rules"))[0]
    await service.call("create_group", actor="admin", name="phd")
    await service.call("add_group_member", actor="admin", name="phd", username="alice")
    phd_rule = await service.call(
        "create_rule", actor="admin", name="phd", groups=["phd"], hosts=["dgx1"]
    )
    await service.call("delete_rule", actor="admin", id=everyone["id"])
    kept = await book(service, "alice", [G0], 0, 2)
    # bob may not book at all now; alice loses access when she leaves the group.
    removed = await service.call("remove_group_member", actor="admin", name="phd", username="alice")
    assert removed["cancelled"] == [kept["id"]]
    now_cancelled = await service.call("get_reservation", id=kept["id"])
    assert now_cancelled["status"] == "cancelled" and now_cancelled["cancelled_by_rules"]
    assert "access changed" in now_cancelled["cancel_reason"]
    added = await service.call("add_group_member", actor="admin", name="phd", username="alice")
    assert added["restored"] == [kept["id"]]
    assert (await service.call("get_reservation", id=kept["id"]))["status"] == "active"
    # A quota on the rule: 2 GPU-hours a week; the 2-hour booking uses all of it.
    await service.call(
        "update_rule",
        actor="admin",
        id=phd_rule["id"],
        name="phd",
        groups=["phd"],
        hosts=["dgx1"],
        max_gpu_hours_per_week=2,
    )
    with pytest.raises(NotAllowed) as over:
        await book(service, "alice", [G1], 3, 4)
    assert over.value.details["reasons"][0]["code"] == "limit_quota"
    causes = [
        "group.member_added",
        "rule.created",
        "rule.deleted",
        "group.member_removed",
        "group.member_added",
        "rule.updated",
    ]
    await service.until(
        lambda: len(service.of("access.changed")) == len(causes), "one access.changed per change"
    )
    assert [e["cause"] for e in service.of("access.changed")] == causes
    await service.until(lambda: len(service.of("reservation.cancelled")) == 1, "cancel event")
    cancelled_events = service.of("reservation.cancelled")
    assert cancelled_events[0]["by_rules"] is True
    assert [e["changed"] for e in service.of("reservation.updated")] == [["status"]]


async def test_overview_calendar_and_earliest_slot(service: Service) -> None:
    mine = await book(service, "alice", [G0], 0, 2)
    theirs = await book(service, "bob", [G1], 1, 3)
    start = datetime.fromisoformat(at(0))
    overview = await service.call(
        "overview", actor="alice", start=start.isoformat(), end=at(4), slot_minutes=30
    )
    assert overview["slots"] == 8
    dgx1 = next(h for h in overview["hosts"] if h["host"] == "dgx1")
    runs = {g["index"]: g["runs"] for g in dgx1["gpus"]}
    assert runs[0] == [
        {"first": 0, "count": 4, "state": "mine", "owner": None, "reservation_id": None},
        {"first": 4, "count": 4, "state": "free", "owner": None, "reservation_id": None},
    ]
    assert runs[1][1] == {
        "first": 2,
        "count": 4,
        "state": "taken",
        "owner": "bob",
        "reservation_id": theirs["id"],
    }
    listed = await service.call("calendar", start=at(0), end=at(4))
    assert [r["id"] for r in listed] == [mine["id"], theirs["id"]]
    slot = await service.call(
        "find_slot",
        actor="alice",
        count=2,
        duration_minutes=60,
        not_before=at(0),
        host="dgx1",
        same_host=True,
    )
    assert slot["start"] == at(0)
    assert [g["index"] for g in slot["gpus"]] == [1, 2]  # bob takes GPU 1 only from 1
    slot = await service.call(
        "find_slot", actor="alice", count=4, duration_minutes=60, not_before=at(0), host="dgx1"
    )
    assert slot["start"] == at(3)  # G1 is bob's until 3
    with pytest.raises(NotFound):
        await service.call("find_slot", actor="alice", count=9, duration_minutes=60)


async def test_usage_statistics_follow_samples_and_freeze_at_the_end(service: Service) -> None:
    now = datetime.now(UTC)
    made = await service.call(
        "create_reservation",
        actor="alice",
        gpus=[G0, G1],
        title="train",
        start=now.isoformat(),
        end=(now + timedelta(hours=1)).isoformat(),
    )
    await service.until(lambda: len(service.of("reservation.started")) == 1, "started")
    for i, (util0, util1) in enumerate([(100.0, 0.0), (50.0, None), (100.0, 2.0)]):
        sample = {
            "host": "dgx1",
            "sampled_at": (datetime.now(UTC) + timedelta(milliseconds=i)).isoformat(),
            "gpus": [
                {
                    "uuid": G0,
                    "index": 0,
                    "utilization_gpu_percent": util0,
                    "memory_used_mib": 1000.0,
                },
                {"uuid": G1, "index": 1, "utilization_gpu_percent": util1, "memory_used_mib": None},
                {"uuid": G2, "index": 2, "utilization_gpu_percent": 99.0, "memory_used_mib": 9.0},
            ],
        }
        envelope = await service.bus.emit("host.sampled", sample, source="monitor")
        await service.bus.publish(envelope)  # a redelivery counts once

    async def live_samples() -> int:
        usage = (await service.call("get_reservation", id=made["id"]))["usage"]
        return 0 if usage is None else int(usage["samples"])

    async def five_counted() -> bool:
        return await live_samples() >= 5  # shown while it runs

    await until(five_counted, "the samples counted", timeout=10)
    await service.call("end_reservation", actor="alice", id=made["id"])
    await service.until(lambda: len(service.of("reservation.ended")) == 1, "ended")
    usage = service.of("reservation.ended")[0]["usage"]
    assert usage["samples"] == 5  # G1's missing figure is left out, G2 is not reserved
    assert usage["avg_utilization_percent"] == pytest.approx(252 / 5)
    assert usage["peak_utilization_percent"] == 100.0
    assert usage["idle_share"] == pytest.approx(2 / 5)
    assert usage["peak_memory_used_mib"] == 1000.0
    frozen = await service.call("get_reservation", id=made["id"])
    assert frozen["usage"]["samples"] == 5


async def test_a_gpu_that_disappears_stays_known_with_its_reservations(service: Service) -> None:
    made = await book(service, "alice", [G0], 0, 1)
    await service.bus.emit(
        "gpu.disappeared",
        {"host": "dgx1", "uuid": G0, "index": 0, "at": datetime.now(UTC).isoformat()},
        source="monitor",
    )
    await asyncio.sleep(0.1)
    gpus = {g["uuid"]: g for g in await service.call("list_gpus")}
    assert gpus[G0]["present"] is False
    assert (await service.call("get_reservation", id=made["id"]))["status"] == "active"


async def test_started_is_sent_after_a_restart_and_only_once(
    tmp_path: Path, cheap_passwords: None
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    settings = load_settings(
        None,
        environ={
            "WARDEN_STORAGE_DATABASE_URL": url,
            "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(48),
            "HOME": str(tmp_path),
        },
    )
    engine = db.create_engine(url)
    await db.upgrade(engine, "reservations")
    async with Store(engine).write() as conn:
        await accounts.create_user(
            conn, username="alice", email="alice@lab.example", password="password-1", actor="t"
        )
    await engine.dispose()
    bus = InProcessBus()
    await bus.start()
    events: list[Envelope] = []
    await record(bus, events, "reservations", "reservation.*")
    try:
        stop = await start_reservations(ServiceContext("reservations", settings, bus))
        await bus.emit(
            "gpu.discovered",
            {"host": "a", "uuid": G0, "index": 0, "name": "A100", "memory_total_mib": None},
            source="monitor",
        )
        await asyncio.sleep(0.2)
        start = datetime.now(UTC) + timedelta(seconds=1.5)
        await bus.call(
            "reservations",
            "create_reservation",
            {
                "actor": "alice",
                "gpus": [G0],
                "title": "soon",
                "start": start.isoformat(),
                "end": (start + timedelta(hours=1)).isoformat(),
            },
        )
        await stop()  # down before the start comes
        await asyncio.sleep(2.0)
        assert not [e for e in events if e.type == "reservation.started"]
        for _ in range(2):  # two restarts: the missed event once, then nothing more
            stop = await start_reservations(ServiceContext("reservations", settings, bus))
            await asyncio.sleep(1.5)
            await stop()
        started = [e for e in events if e.type == "reservation.started"]
        assert len(started) == 1
        assert (
            started[0].data["start"]
            == start.replace(microsecond=start.microsecond // 1000 * 1000).isoformat()
        )
    finally:
        await bus.close()


# --- guests (shared bookings) and contacts, for the violations service ------------------------


async def test_guests_share_a_reservation_and_travel_with_it(service: Service) -> None:
    made = await book(service, "alice", [G0, G1], 0, 2, guests=["bob", "admin", "bob"])
    assert made["guests"] == ["admin", "bob"]  # sorted, duplicates collapsed
    await service.until(lambda: len(service.of("reservation.created")) == 1, "created event")
    assert service.of("reservation.created")[0]["guests"] == ["admin", "bob"]
    assert await service.call("get_reservation", id=made["id"]) == made
    [listed] = await service.call("calendar", start=at(0), end=at(4))
    assert listed["guests"] == ["admin", "bob"]
    plain = await book(service, "bob", [G2], 0, 1)
    assert plain["guests"] == []

    # A guest is not an owner: bob may not change alice's guests; alice and admins may.
    with pytest.raises(Forbidden):
        await service.call("update_reservation", actor="bob", id=made["id"], guests=["bob"])
    changed = await service.call("update_reservation", actor="alice", id=made["id"], guests=["bob"])
    assert changed["guests"] == ["bob"]
    same = await service.call("update_reservation", actor="alice", id=made["id"], guests=["bob"])
    assert same["updated_at"] == changed["updated_at"]  # nothing changed: no event
    both = await service.call(
        "update_reservation", actor="admin", id=made["id"], guests=[], title="solo"
    )
    assert both["guests"] == [] and both["title"] == "solo"
    await service.until(lambda: len(service.of("reservation.updated")) == 2, "updated events")
    updated = service.of("reservation.updated")
    assert [(e["changed"], e["guests"], e["actor"]) for e in updated] == [
        (["guests"], ["bob"], "alice"),
        (["guests", "title"], [], "admin"),
    ]
    # Other changes leave the guests alone (None: unchanged).
    await service.call("update_reservation", actor="alice", id=made["id"], guests=["admin"])
    kept = await service.call("update_reservation", actor="alice", id=made["id"], end=at(3))
    assert kept["guests"] == ["admin"]
    cancelled = await service.call("cancel_reservation", actor="alice", id=made["id"])
    assert cancelled["guests"] == ["admin"]
    await service.until(lambda: len(service.of("reservation.cancelled")) == 1, "cancelled")
    assert service.of("reservation.cancelled")[0]["guests"] == ["admin"]
    with pytest.raises(Forbidden, match="cancelled"):
        await service.call("update_reservation", actor="alice", id=made["id"], guests=[])


async def test_guests_change_while_it_runs_and_active_reservations_name_them(
    service: Service,
) -> None:
    now = datetime.now(UTC)
    made = await service.call(
        "create_reservation",
        actor="alice",
        gpus=[G0],
        title="shared run",
        start=now.isoformat(),
        end=(now + timedelta(hours=1)).isoformat(),
        guests=["bob"],
    )
    await service.until(lambda: len(service.of("reservation.started")) == 1, "started event")
    assert service.of("reservation.started")[0]["guests"] == ["bob"]
    [active] = await service.call("active_reservations", gpus=[G0])
    assert (active["owner"], active["guests"]) == ("alice", ["bob"])
    # The past is not rewritten for times only: guests may change while it runs.
    await service.call("update_reservation", actor="alice", id=made["id"], guests=["bob", "admin"])
    [active] = await service.call("active_reservations", host="dgx1")
    assert active["reservation_id"] == made["id"] and active["guests"] == ["admin", "bob"]
    await service.call("end_reservation", actor="alice", id=made["id"])
    await service.until(lambda: len(service.of("reservation.ended")) == 1, "ended event")
    assert service.of("reservation.ended")[0]["guests"] == ["admin", "bob"]


async def test_guests_must_be_other_known_users(service: Service) -> None:
    with pytest.raises(InvalidRequest) as unknown:
        await book(service, "alice", [G0], 0, 1, guests=["bob", "zed", "carol"])
    assert STATUS_BY_CODE[unknown.value.code] == 400
    assert unknown.value.message == "unknown user carol, zed in guests"
    assert unknown.value.details == {"field": "guests", "unknown": ["carol", "zed"]}
    with pytest.raises(InvalidRequest) as owner:
        await book(service, "alice", [G0], 0, 1, guests=["alice", "bob"])
    assert "alice owns the reservation" in owner.value.message
    assert owner.value.details["reasons"][0]["field"] == "guests"
    with pytest.raises(InvalidRequest, match="bob owns"):  # an admin booking for bob too
        await book(service, "admin", [G0], 0, 1, owner="bob", guests=["bob"])
    with pytest.raises(InvalidRequest) as malformed:
        await book(service, "alice", [G0], 0, 1, guests="bob")
    assert "guests" in malformed.value.details["errors"]
    with pytest.raises(InvalidRequest, match="guests"):
        await book(service, "alice", [G0], 0, 1, guests=[""])
    assert await service.call("calendar", start=at(0), end=at(2)) == []  # nothing was booked

    made = await book(service, "alice", [G0], 0, 1)
    with pytest.raises(InvalidRequest) as later:
        await service.call("update_reservation", actor="alice", id=made["id"], guests=["zed"])
    assert later.value.details == {"field": "guests", "unknown": ["zed"]}
    with pytest.raises(InvalidRequest, match="alice owns"):
        await service.call("update_reservation", actor="admin", id=made["id"], guests=["alice"])
    assert (await service.call("get_reservation", id=made["id"]))["guests"] == []
    assert service.of("reservation.updated") == []


async def test_contacts_give_emails_and_roles_of_known_users_and_the_admins(
    service: Service,
) -> None:
    found = await service.call("contacts", usernames=["alice", "nobody", "admin", "alice"])
    assert found == {
        "users": {
            "admin": {"email": "admin@lab.example", "roles": ["user", "admin"]},
            "alice": {"email": "alice@lab.example", "roles": ["user"]},
        },
        "admins": [{"username": "admin", "email": "admin@lab.example"}],
    }
    await service.call("update_user", actor="admin", username="bob", is_admin=True)
    found = await service.call("contacts", usernames=[])
    assert found == {
        "users": {},
        "admins": [
            {"username": "admin", "email": "admin@lab.example"},
            {"username": "bob", "email": "bob@lab.example"},
        ],
    }
    with pytest.raises(InvalidRequest, match="usernames"):
        await service.call("contacts")
    with pytest.raises(InvalidRequest, match="usernames"):
        await service.call("contacts", usernames="alice")


async def test_the_guests_migration_goes_down_and_up_again(database_url: str) -> None:
    """reservations_0003 adds the guests table; going back removes only it."""
    engine = db.create_engine(database_url)

    def downgrade(connection: sa.Connection, revision: str) -> None:
        config = db.alembic_config("reservations")
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

    async def table_names() -> set[str]:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names()))

    try:
        assert await db.upgrade(engine, "reservations", "reservations_0003") == "reservations_0003"
        async with engine.begin() as conn:
            await conn.execute(
                sa.insert(tables.reservations).values(
                    id=1,
                    owner="alice",
                    title="kept",
                    description="",
                    start_ms=0,
                    end_ms=3_600_000,
                    status="active",
                    created_by="alice",
                    created_at_ms=0,
                    updated_at_ms=0,
                    cancelled_by_rules=False,
                )
            )
            await conn.execute(sa.insert(tables.guests).values(reservation_id=1, username="bob"))
        assert "reservations_guests" in await table_names()

        async with engine.begin() as conn:
            await conn.run_sync(downgrade, "reservations_0002")
        assert await db.current_revision(engine, "reservations") == "reservations_0002"
        assert "reservations_guests" not in await table_names()
        async with engine.connect() as conn:
            titles = await conn.scalars(sa.select(tables.reservations.c.title))
            assert list(titles) == ["kept"]

        assert await db.upgrade(engine, "reservations") == db.head_revision("reservations")
        async with engine.connect() as conn:
            assert list(await conn.execute(sa.select(tables.guests))) == []
        await db.ensure_migrated(engine, "reservations")
    finally:
        await engine.dispose()
