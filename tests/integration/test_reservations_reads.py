"""The heavy reads (calendar, overview, earliest slot's busy times) through `reads.py` answer
exactly what the record-by-record path answered, on random data, on SQLite and PostgreSQL.

The references below are the code these reads replaced (`repository.slots_in_range`,
`repository.records`, `ReservationRecord.to_dict`, `planner.overview_by_gpu`), kept here to
compare with.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from services.accounts import users as accounts
from services.reservations.booking import heavy_reads as reads
from services.reservations.booking import repository
from services.reservations.booking.queries import Queries
from services.reservations.rules.access import allowed_by_gpu, rule_applies_to
from services.reservations.rules.domain import AccessRule, Limits, WeeklyWindow
from services.reservations.rules.planner import overview_by_gpu
from services.reservations.store import Store, now_ms, to_ms
from services.reservations.tables import access_rules, gpu_slots, gpus, guests, reservations
from services.shared.storage import db

HOSTS = ("alpha", "beta", "gamma")
USERS = ("ann", "bob", "cy", "dee")
MIN_MS = 60_000
DAY = timedelta(days=1)
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - 3 * DAY


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(database_url: str, cheap_passwords: None) -> AsyncIterator[Store]:
    engine = db.create_engine(database_url)
    try:
        await db.upgrade(engine, "reservations")
        yield Store(engine)
    finally:
        await engine.dispose()


def gpu_rows() -> list[dict[str, Any]]:
    return [
        {
            "uuid": f"GPU-{host}-{i}",
            "host": host,
            "gpu_index": i,
            "name": "NVIDIA A100" if i % 2 else "",
            "memory_total_mib": 40_960.0,
            "present": i != 3,
            "first_seen_ms": 0,
            "last_change_ms": 0,
        }
        for host in HOSTS
        for i in range(4)
    ]


def rule(rule_id: int, rng: random.Random) -> dict[str, Any]:
    windows = tuple(
        WeeklyWindow(frozenset(rng.sample(range(7), 4)), time(rng.randrange(12)), time(17, 30))
        for _ in range(rng.randint(0, 2))
    )
    made = AccessRule(
        id=rule_id,
        name=f"rule {rule_id}",
        valid_from=T0 - DAY + rng.randrange(3 * 24 * 60) * timedelta(minutes=1),
        users=frozenset(rng.sample(USERS, 2)),
        all_gpus=rng.random() < 0.3,
        hosts=frozenset(rng.sample(HOSTS, 1)),
        gpus=frozenset({f"GPU-{rng.choice(HOSTS)}-{rng.randrange(4)}"}),
        windows=windows,
        timezone=rng.choice(["UTC", "Europe/Warsaw", "America/New_York"]),
        limits=Limits(),
    )
    return {
        **repository.rule_values(made),
        "description": "",
        "created_by": "ann",
        "created_at_ms": 0,
        "updated_at_ms": 0,
    }


async def seed(store: Store, rng: random.Random) -> None:
    async with store.write() as conn:
        for name in USERS:
            await accounts.create_user(
                conn,
                username=name,
                email=f"{name}@example.org",
                password="a long password 1",
                actor="admin",
            )
        await conn.execute(insert(gpus), gpu_rows())
        await conn.execute(insert(access_rules), [rule(i, rng) for i in range(1, 5)])
        rows, slots, named = [], [], []
        taken: dict[str, list[tuple[int, int]]] = {}
        uuids = [g["uuid"] for g in gpu_rows()] + ["GPU-gone-0"]  # one GPU no longer known
        origin = to_ms(T0)
        for rid in range(1, 160):
            # Half on whole half hours, the rest anywhere to the millisecond; some touching.
            start = origin + rng.randrange(10 * 24 * 60) * MIN_MS
            if rng.random() < 0.5:
                start -= start % (30 * MIN_MS)
            else:
                start += rng.randrange(MIN_MS)
            end = start + rng.randint(1, 600) * MIN_MS + rng.randrange(2) * rng.randrange(MIN_MS)
            active = rng.random() < 0.85
            chosen = rng.sample(uuids, rng.choice([1, 1, 2, 3]))
            if active and any(
                s < end and start < e for uuid in chosen for s, e in taken.get(uuid, ())
            ):
                active = False  # the database refuses overlapping active slots
            for uuid in chosen:
                if active:
                    taken.setdefault(uuid, []).append((start, end))
            owner = rng.choice(USERS)
            usage = None
            if rng.random() < 0.3:
                usage = {"totals": {"samples": 3, "util_sum": 120.0, "util_max": 80.0}}
            rows.append(
                {
                    "id": rid,
                    "owner": owner,
                    "title": f"job {rid}",
                    "description": rng.choice(["", "private notes"]),
                    "start_ms": start,
                    "end_ms": end,
                    "status": "active" if active else "cancelled",
                    "created_by": owner,
                    "created_at_ms": start - 3_600_000,
                    "updated_at_ms": start - rng.randrange(3_600_000),
                    "cancelled_at_ms": None if active else start - 60_000,
                    "cancelled_by": None if active else owner,
                    "cancel_reason": None if active else rng.choice([None, "changed plans"]),
                    "cancelled_by_rules": not active and rng.random() < 0.5,
                    "usage": usage,
                }
            )
            slots += [
                {
                    "reservation_id": rid,
                    "gpu_uuid": uuid,
                    "owner": owner,
                    "start_ms": start,
                    "end_ms": end,
                    "active": active,
                }
                for uuid in chosen
            ]
            named += [
                {"reservation_id": rid, "username": name}
                for name in rng.sample([u for u in USERS if u != owner], rng.choice([0, 0, 1, 2]))
            ]
        await conn.execute(insert(reservations), rows)
        await conn.execute(insert(gpu_slots), slots)
        await conn.execute(insert(guests), named)


# --- the replaced code, as it was ---------------------------------------------------------------


async def old_calendar(
    store: Store,
    start: datetime,
    end: datetime,
    gpu_uuids: Sequence[str] | None,
    owner: str | None,
    include_cancelled: bool,
) -> list[dict[str, Any]]:
    async with store.read() as conn:
        slots = await repository.slots_in_range(
            conn,
            to_ms(start),
            to_ms(end),
            gpu_uuids,
            owner=owner,
            active_only=not include_cancelled,
        )
        found = await repository.records(conn, (row.reservation_id for row in slots))
        known = await repository.load_gpus(conn, {u for r in found.values() for u in r.gpu_uuids})
    return [r.to_dict(known) for r in sorted(found.values(), key=lambda r: (r.start_ms, r.id))]


async def old_overview(
    store: Store,
    username: str,
    start: datetime,
    end: datetime,
    slot: timedelta,
    gpu_uuids: Sequence[str] | None,
) -> dict[str, Any]:
    slots = int((end - start) / slot)
    end = start + slots * slot
    async with store.read() as conn:
        member = await repository.member(conn, username)
        rules = await repository.load_rules(conn)
        known = await repository.load_gpus(conn, gpu_uuids)
        rows = await repository.slots_in_range(conn, to_ms(start), to_ms(end), gpu_uuids)
    bookings_by_gpu: dict[str, list[Any]] = {}
    for booking in repository.bookings_from_slots(rows):
        for uuid in booking.gpus:
            bookings_by_gpu.setdefault(uuid, []).append(booking)
    mine = [r for r in rules if rule_applies_to(r, member)]
    allowed = allowed_by_gpu(member, mine, list(known.values()), start, end)
    runs = overview_by_gpu(username, allowed, bookings_by_gpu, start, slot, slots)
    hosts: dict[str, list[dict[str, Any]]] = {}
    for gpu in known.values():
        hosts.setdefault(gpu.host, []).append(
            {**repository.gpu_dict(gpu), "runs": [run.to_dict() for run in runs[gpu.uuid]]}
        )
    return {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "slot_minutes": slot.total_seconds() / 60,
        "slots": slots,
        "hosts": [{"host": host, "gpus": gpus} for host, gpus in hosts.items()],
    }


def expand(compact: dict[str, Any]) -> dict[str, Any]:
    """A compact overview as the full one: cells and labels back to runs."""
    labels = compact.pop("labels")
    for host in compact["hosts"]:
        for gpu in host["gpus"]:
            cells, first, runs = gpu.pop("cells"), 0, []
            for label, count in zip(cells[0::2], cells[1::2], strict=True):
                state, owner, reservation_id = labels[label]
                runs.append(
                    {
                        "first": first,
                        "count": count,
                        "state": state,
                        "owner": owner,
                        "reservation_id": reservation_id,
                    }
                )
                first += count
            gpu["runs"] = runs
    return compact


# --- the comparisons ----------------------------------------------------------------------------


def some_gpus(rng: random.Random) -> list[str] | None:
    pool = [g["uuid"] for g in gpu_rows()] + ["GPU-gone-0", "GPU-nowhere-9"]
    return None if rng.random() < 0.3 else rng.sample(pool, rng.randint(0, 6))  # [] too


async def test_calendar_answers_what_the_record_path_did(store: Store) -> None:
    rng = random.Random(11)
    await seed(store, rng)
    queries = Queries(store)
    answers = 0
    for _ in range(40):
        start = T0 + rng.randrange(-2 * 24 * 60, 11 * 24 * 60) * timedelta(minutes=1)
        start += timedelta(microseconds=rng.randrange(10**6))  # off the millisecond grid too
        end = start + rng.randint(1, 7 * 24 * 60) * timedelta(minutes=1)
        gpu_uuids = some_gpus(rng)
        owner = rng.choice([None, None, *USERS])
        include_cancelled = rng.random() < 0.4
        new = await queries.calendar(
            start, end, gpu_uuids, owner=owner, include_cancelled=include_cancelled
        )
        old = await old_calendar(store, start, end, gpu_uuids, owner, include_cancelled)
        assert new == old
        answers += len(new)
    assert answers > 200  # the comparisons saw reservations, not empty answers


async def test_overview_answers_what_the_planner_path_did(store: Store) -> None:
    rng = random.Random(12)
    await seed(store, rng)
    queries = Queries(store)
    runs = 0
    for _ in range(25):
        start = T0 + rng.randrange(-24 * 60, 8 * 24 * 60) * timedelta(minutes=1)
        start += timedelta(microseconds=rng.randrange(10**6))
        end = start + rng.randint(1, 14) * DAY
        slot = timedelta(minutes=rng.choice([30, 60]))
        gpu_uuids = some_gpus(rng)
        user = rng.choice(USERS)
        old = await old_overview(store, user, start, end, slot, gpu_uuids)
        assert await queries.overview(user, start, end, slot, gpu_uuids) == old
        compact = await queries.overview(user, start, end, slot, gpu_uuids, compact=True)
        assert expand(compact) == old
        runs += sum(len(g["runs"]) for h in old["hosts"] for g in h["gpus"])
    assert runs > 500


async def test_busy_slots_are_the_active_slots_in_range(store: Store) -> None:
    rng = random.Random(13)
    await seed(store, rng)
    for _ in range(30):
        start_ms = to_ms(T0) + rng.randrange(-MIN_MS, 11 * 24 * 60 * MIN_MS)
        end_ms = start_ms + rng.randrange(1, 5 * 24 * 60 * MIN_MS)
        gpu_uuids = some_gpus(rng)
        async with store.read() as conn:
            new = await reads.busy_slots(conn, start_ms, end_ms, gpu_uuids)
            old = await repository.slots_in_range(conn, start_ms, end_ms, gpu_uuids)
        assert sorted(tuple(row) for row in new) == sorted(
            (r.gpu_uuid, r.reservation_id, r.owner, r.start_ms, r.end_ms) for r in old
        )


async def test_an_ended_reservation_shows_as_ended(store: Store) -> None:
    async with store.write() as conn:
        await accounts.create_user(
            conn,
            username="ann",
            email="ann@example.org",
            password="a long password 1",
            actor="admin",
        )
        await conn.execute(insert(gpus), gpu_rows()[:1])
        now = now_ms()
        await conn.execute(
            insert(reservations),
            [
                {
                    "id": 1,
                    "owner": "ann",
                    "title": "t",
                    "description": "",
                    "start_ms": now - 7_200_000,
                    "end_ms": now - 3_600_000,
                    "status": "active",
                    "created_by": "ann",
                    "created_at_ms": now - 9_000_000,
                    "updated_at_ms": now - 9_000_000,
                    "cancelled_by_rules": False,
                }
            ],
        )
        await conn.execute(
            insert(gpu_slots),
            [
                {
                    "reservation_id": 1,
                    "gpu_uuid": "GPU-alpha-0",
                    "owner": "ann",
                    "start_ms": now - 7_200_000,
                    "end_ms": now - 3_600_000,
                    "active": True,
                }
            ],
        )
    found = await Queries(store).calendar(datetime.now(UTC) - DAY, datetime.now(UTC))
    assert [(r["id"], r["status"], r["usage"], r["gpus"]) for r in found] == [
        (1, "ended", None, [{"uuid": "GPU-alpha-0", "host": "alpha", "index": 0, "name": ""}])
    ]
