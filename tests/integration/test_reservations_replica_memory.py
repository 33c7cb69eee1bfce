"""Two replicas' in-memory models over one database (SQLite and PostgreSQL): what one replica
changes, the other's next create sees. Each "replica" is its own `Changes` on its own engine,
so the test decides which one answers (behind RabbitMQ either may).

- a slot the other replica freed is bookable at once (no false refusal from memory);
- a booking the other replica made is a 409 naming it (the database's constraint), not a 500;
- users, groups, admin flags, access rules and GPUs changed by the other replica apply at once;
- in a group commit, the database refusing one create leaves the others of its group made;
- reads (overview, earliest slot) take the directory from memory too: a rule, a user or a GPU
  the other replica changed shows in the next read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import insert

from services.accounts import users as accounts
from services.accounts.api import Actor
from services.reservations.booking import repository
from services.reservations.booking.changes import Changes
from services.reservations.booking.queries import Queries
from services.reservations.rules.domain import Limits
from services.reservations.rules.refusals import DurationBounds
from services.reservations.store import Store, to_ms
from services.reservations.tables import gpus, outbox, reservations, versions
from services.shared.errors import NotAllowed, NotFound, ReservationConflict
from services.shared.storage import db

ADMIN = Actor("root", True)


@dataclass
class Replicas:
    a: Changes
    b: Changes
    b_store: Store


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    return str(request.getfixturevalue("pg_url"))


async def add_gpu(store: Store, uuid: str, index: int) -> None:
    now = to_ms(datetime.now(UTC))
    async with store.write() as conn:
        await conn.execute(
            insert(gpus).values(
                uuid=uuid,
                host="a",
                gpu_index=index,
                name="A100",
                present=True,
                first_seen_ms=now,
                last_change_ms=now,
            )
        )


@pytest.fixture
async def replicas(database_url: str, cheap_passwords: None) -> AsyncIterator[Replicas]:
    engines = [db.create_engine(database_url) for _ in range(2)]
    await db.upgrade(engines[0], "reservations")
    stores = [Store(engine) for engine in engines]
    async with stores[0].write() as conn:
        for name in ("ann", "bob"):
            await accounts.create_user(
                conn, username=name, email=f"{name}@lab.example", password="password-1", actor="t"
            )
        await accounts.create_user(
            conn,
            username="root",
            email="root@lab.example",
            password="password-1",
            is_admin=True,
            actor="t",
        )
    await add_gpu(stores[0], "GPU-a-0", 0)
    bounds = DurationBounds()
    try:
        yield Replicas(Changes(stores[0], bounds), Changes(stores[1], bounds), stores[1])
    finally:
        for engine in engines:
            await engine.dispose()


def slot(days: int, hours: int = 2) -> tuple[datetime, datetime]:
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=days)
    return start, start + timedelta(hours=hours)


async def book(commands: Changes, owner: str, when: tuple[datetime, datetime]) -> dict[str, Any]:
    return await commands.create(
        owner, owner=owner, gpu_uuids=["GPU-a-0"], start=when[0], end=when[1], title="t"
    )


async def test_a_slot_the_other_replica_freed_is_free(replicas: Replicas) -> None:
    when = slot(2)
    held = await book(replicas.a, "ann", when)
    with pytest.raises(ReservationConflict):  # b now holds ann's booking in memory
        await book(replicas.b, "bob", when)
    await replicas.a.cancel(ADMIN, held["id"])
    made = await book(replicas.b, "bob", when)
    assert made["owner"] == "bob"


async def test_a_slot_the_other_replica_shortened_is_free(replicas: Replicas) -> None:
    start, end = slot(3, hours=4)
    held = await book(replicas.a, "ann", (start, end))
    with pytest.raises(ReservationConflict):
        await book(replicas.b, "bob", (start + timedelta(hours=2), end))
    await replicas.a.update(ADMIN, held["id"], end=start + timedelta(hours=2))
    made = await book(replicas.b, "bob", (start + timedelta(hours=2), end))
    assert made["owner"] == "bob"


async def test_a_booking_the_other_replica_made_is_a_conflict_naming_it(
    replicas: Replicas,
) -> None:
    await book(replicas.a, "ann", slot(5))  # a has GPU-a-0's slots in memory now
    theirs = await book(replicas.b, "bob", slot(4))
    with pytest.raises(ReservationConflict) as refused:
        await book(replicas.a, "ann", slot(4))
    assert f"reservation {theirs['id']}" in refused.value.message
    with pytest.raises(ReservationConflict) as again:  # and a reloaded that GPU
        await book(replicas.a, "ann", slot(4))
    assert f"reservation {theirs['id']}" in again.value.message


async def test_a_refusal_by_the_database_does_not_fail_the_rest_of_its_group(
    replicas: Replicas,
) -> None:
    await add_gpu(replicas.b_store, "GPU-a-1", 1)
    await book(replicas.a, "ann", slot(5))  # a holds GPU-a-0's slots in memory now
    theirs = await book(replicas.b, "bob", slot(4))
    start, end = slot(4)
    results = await asyncio.gather(  # queued together: one group, one transaction
        *(
            replicas.a.create("ann", owner="ann", gpu_uuids=[gpu], start=start, end=end, title="t")
            for gpu in ("GPU-a-0", "GPU-a-1")
        ),
        return_exceptions=True,
    )
    refused, made = results
    assert isinstance(refused, ReservationConflict), results
    assert f"reservation {theirs['id']}" in refused.message
    assert isinstance(made, dict) and made["gpus"][0]["uuid"] == "GPU-a-1"
    async with replicas.b_store.read() as conn:
        ids = {row.id for row in await conn.execute(sa.select(reservations.c.id))}
        rows = await conn.execute(sa.select(outbox.c.envelope))
        envelopes = [json.loads(row.envelope) for row in rows]
    assert made["id"] in ids
    created = sorted(e["data"]["id"] for e in envelopes if e["type"] == "reservation.created")
    assert created == sorted(ids)  # one event per reservation; none of the refused one


async def test_a_quota_counts_the_earlier_creates_of_its_group(replicas: Replicas) -> None:
    await add_gpu(replicas.b_store, "GPU-a-1", 1)
    async with replicas.b_store.read() as conn:
        rule = (await repository.load_rules(conn))[0]
    quota = dataclasses.replace(rule, limits=Limits(max_gpu_hours_per_week=2))
    await replicas.b.update_rule(ADMIN, quota)  # 2 GPU-hours a week; a's model is older
    start, end = slot(9)
    start = start.replace(hour=12)  # its two hours in one quota week, whatever the hour now
    end = start + timedelta(hours=2)
    results = await asyncio.gather(  # one group: the second must count the first
        *(
            replicas.a.create("ann", owner="ann", gpu_uuids=[gpu], start=start, end=end, title="t")
            for gpu in ("GPU-a-0", "GPU-a-1")
        ),
        return_exceptions=True,
    )
    made = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, NotAllowed)]
    assert len(made) == 1 and len(refused) == 1, results
    assert refused[0].details["reasons"][0]["code"] == "limit_quota"


async def test_access_changes_of_the_other_replica_apply_at_once(replicas: Replicas) -> None:
    await book(replicas.a, "ann", slot(6))  # a holds the directory in memory now
    async with replicas.b_store.read() as conn:
        only_rule = (await repository.load_rules(conn))[0]  # "users: every GPU, any time"
    await replicas.b.delete_rule(ADMIN, only_rule.id)
    with pytest.raises(NotAllowed):
        await book(replicas.a, "ann", slot(7))


async def test_users_admins_and_gpus_of_the_other_replica_apply_at_once(
    replicas: Replicas,
) -> None:
    await book(replicas.a, "ann", slot(8))
    async with replicas.b_store.write() as conn:
        await accounts.create_user(
            conn, username="cyd", email="cyd@lab.example", password="password-1", actor="t"
        )
        await accounts.update_user(conn, "ann", is_admin=True, actor="t")
    await add_gpu(replicas.b_store, "GPU-a-1", 1)
    made = await replicas.a.create(
        "ann",
        owner="cyd",  # ann is an admin now: she may book for cyd, who exists now
        gpu_uuids=["GPU-a-1"],
        start=slot(8)[0],
        end=slot(8)[1],
        title="t",
    )
    assert made["owner"] == "cyd" and made["created_by"] == "ann"


async def test_the_versions_migration_goes_down_and_up_again(database_url: str) -> None:
    """reservations_0009 adds the counters and their triggers; going back removes them."""
    engine = db.create_engine(database_url)

    def downgrade(connection: sa.Connection) -> None:
        config = db.alembic_config("reservations")
        config.attributes["connection"] = connection
        command.downgrade(config, "reservations_0008")

    async def counters() -> tuple[int, int]:
        async with engine.connect() as conn:
            row = (
                await conn.execute(sa.select(versions.c.directory, versions.c.slots_freed))
            ).one()
            return int(row[0]), int(row[1])

    try:
        await db.upgrade(engine, "reservations")
        before = await counters()
        await add_gpu(Store(engine), "GPU-z-0", 0)
        assert (await counters())[0] > before[0]  # the trigger moved it
        async with engine.begin() as conn:
            await conn.run_sync(downgrade)
            names = await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names())
        assert "reservations_versions" not in names
        await add_gpu(Store(engine), "GPU-z-1", 1)  # no trigger left behind
        await db.upgrade(engine, "reservations")
        assert await counters() == (0, 0)
    finally:
        await engine.dispose()


def states(overview: dict[str, Any]) -> dict[str, set[str]]:
    """Each GPU's slot states in an overview (full format)."""
    return {
        gpu["uuid"]: {run["state"] for run in gpu["runs"]}
        for host in overview["hosts"]
        for gpu in host["gpus"]
    }


async def test_a_rule_changed_on_one_replica_shows_in_the_others_reads(
    replicas: Replicas,
) -> None:
    reads = Queries(replicas.b_store, directory=replicas.b.creates.memory.reads)
    start, _end = slot(1)
    hour = timedelta(hours=1)

    async def overview() -> dict[str, set[str]]:
        return states(await reads.overview("ann", start, start + 4 * hour, hour))

    async def find() -> dict[str, Any]:
        return await reads.find_slot("ann", count=1, duration=hour, not_before=start)

    assert await overview() == {"GPU-a-0": {"free"}}  # b holds the directory now
    assert (await find())["start"] == start.isoformat()
    async with replicas.b_store.read() as conn:
        only_rule = (await repository.load_rules(conn))[0]  # "users: every GPU, any time"
    await replicas.a.delete_rule(ADMIN, only_rule.id)
    assert await overview() == {"GPU-a-0": {"not_allowed"}}
    with pytest.raises(NotFound):
        await find()
    await replicas.a.create_rule(ADMIN, only_rule)  # back, on a again
    assert await overview() == {"GPU-a-0": {"free"}}
    await add_gpu(replicas.a.store, "GPU-a-1", 1)
    assert await overview() == {"GPU-a-0": {"free"}, "GPU-a-1": {"free"}}
    with pytest.raises(NotFound):  # a user a makes is one b's reads know
        await reads.overview("dan", start, start + hour, hour)
    async with replicas.a.store.write() as conn:
        await accounts.create_user(
            conn, username="dan", email="dan@lab.example", password="password-1", actor="t"
        )
    assert states(await reads.overview("dan", start, start + hour, hour))["GPU-a-1"] == {"free"}
