"""The reservations service through its RPC methods and events, on SQLite and PostgreSQL:
bookings, overlaps, races, bad requests, edits, cancels and early ends.

The service and its helpers: tests/support/reservations_service.py.
"""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from services.shared.errors import (
    Forbidden,
    InvalidRequest,
    NotFound,
    ReservationConflict,
)
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
