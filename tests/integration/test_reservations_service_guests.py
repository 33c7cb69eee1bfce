"""The reservations service through its RPC methods and events, on SQLite and PostgreSQL:
guests, contacts, and the guests migration down and up again.

The service and its helpers: tests/support/reservations_service.py.
"""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic import command

from services.reservations import tables
from services.shared.errors import (
    Forbidden,
    InvalidRequest,
)
from services.shared.http_errors import STATUS_BY_CODE
from services.shared.storage import db
from tests.support.reservations_service import (  # noqa: F401 (fixtures)
    G0,
    G1,
    G2,
    Service,
    at,
    book,
    database_url,
    service,
)


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
