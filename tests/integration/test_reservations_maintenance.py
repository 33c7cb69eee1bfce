"""Maintenance windows through the reservations service's RPC methods, on SQLite and
PostgreSQL: a drain refuses bookings in it with its reason, the slot search goes around it,
the bookings it overlaps are listed with an alternative (kept, cancelled or moved as the admin
chose) in `maintenance.scheduled`, and only admins drain.

The service and its helpers: tests/support/reservations_service.py.
"""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

from typing import Any

import pytest

from services.shared.errors import Forbidden, InvalidRequest, NotFound, ReservationConflict
from tests.support.reservations_service import (  # noqa: F401 (fixtures)
    G0,
    G1,
    Service,
    at,
    book,
    database_url,
    service,
    uuid_of,
)


async def drain(service: Service, **args: Any) -> Any:
    return await service.call(
        "create_maintenance",
        actor=args.pop("actor", "admin"),
        host=args.pop("host", "dgx1"),
        reason=args.pop("reason", "new NVLink bridge"),
        **args,
    )


async def test_a_drain_refuses_bookings_in_it_and_tells_of_the_overlapped_ones(
    service: Service,
) -> None:
    mine = await book(service, "alice", [G0], 1, 3, title="sweep")
    elsewhere = await book(service, "bob", [uuid_of("dgx2", 0)], 1, 3)
    window = await drain(service, gpus=[0, 1], start=at(2), end=at(5))
    assert window["target"] == "dgx1:0,1" and window["status"] == "scheduled"
    assert window["bookings"] == "keep"
    (hit,) = window["affected"]  # bob's booking is on another host
    assert hit["reservation_id"] == mine["id"] and hit["owner"] == "alice"
    assert hit["outcome"] == "kept"
    # The earliest alternative: as many GPUs, as long, not drained, from the booking's start.
    alternative = hit["alternative"]
    assert alternative["start"] == at(1) and alternative["end"] == at(3)
    assert {g["uuid"] for g in alternative["gpus"]}.isdisjoint({G0, G1})
    # Kept means kept: nothing changed on the booking.
    assert (await service.call("get_reservation", id=mine["id"]))["status"] == "active"
    assert (await service.call("get_reservation", id=elsewhere["id"]))["status"] == "active"
    await service.until(lambda: bool(service.of("maintenance.scheduled")), "scheduled event")
    (event,) = service.of("maintenance.scheduled")
    assert event["id"] == window["id"] and event["affected"][0]["alternative"] == alternative

    with pytest.raises(ReservationConflict) as refused:
        await book(service, "bob", [G1], 4, 6)
    (reason,) = refused.value.details["reasons"]
    assert reason["code"] == "maintenance" and reason["maintenance_id"] == window["id"]
    assert "new NVLink bridge" in refused.value.message
    # Beside it and on the GPUs it leaves alone: booked as ever.
    await book(service, "bob", [G1], 5, 6)
    await book(service, "bob", [uuid_of("dgx1", 2)], 4, 6)
    # Nobody starts work on a drained GPU in its window without a booking either (jobs ask).
    use = await service.call("check_use", user="admin", gpus=[G1], start=at(4), end=at(4.5))
    assert not use["allowed"] and [r["code"] for r in use["reasons"]] == ["maintenance"]
    # The slot search goes around it.
    slot = await service.call(
        "find_slot",
        actor="bob",
        count=4,
        duration_minutes=60,
        host="dgx1",
        not_before=at(3),
    )
    assert slot["start"] == at(6)  # without the window: at(3)


async def test_an_owner_may_not_move_a_booking_into_a_drain_but_may_shrink_a_kept_one(
    service: Service,
) -> None:
    kept = await book(service, "alice", [G0], 1, 4)
    later = await book(service, "alice", [G0], 6, 7)
    await drain(service, start=at(3), end=at(5))
    shorter = await service.call("update_reservation", actor="alice", id=kept["id"], end=at(3.5))
    assert shorter["end"] == at(3.5)
    with pytest.raises(ReservationConflict, match="drained for maintenance"):
        await service.call("update_reservation", actor="alice", id=later["id"], start=at(4.5))


async def test_cancel_and_move_happen_only_when_the_admin_chooses_them(service: Service) -> None:
    before = await book(service, "alice", [G0], 1, 3)  # starts before the window
    inside = await book(service, "bob", [G1], 3, 4)  # within it
    to_move = await book(service, "alice", [uuid_of("dgx1", 3)], 3, 4, title="move me")
    cancelled = await drain(service, gpus=[0, 1], start=at(2), end=at(5), bookings="cancel")
    outcomes = {a["reservation_id"]: a["outcome"] for a in cancelled["affected"]}
    assert outcomes == {before["id"]: "shortened", inside["id"]: "cancelled"}
    assert (await service.call("get_reservation", id=before["id"]))["end"] == at(2)
    assert (await service.call("get_reservation", id=inside["id"]))["status"] == "cancelled"

    moved = await drain(service, gpus=[3], start=at(2), end=at(5), bookings="move")
    (hit,) = moved["affected"]
    assert hit["outcome"] == "moved" and hit["moved_to"] is not None
    new = await service.call("get_reservation", id=hit["moved_to"])
    assert new["owner"] == "alice" and new["title"] == "move me"
    assert new["start"] == at(3) and new["end"] == at(4)
    assert new["gpus"][0]["uuid"] != uuid_of("dgx1", 3)
    assert (await service.call("get_reservation", id=to_move["id"]))["status"] == "cancelled"


async def test_only_admins_drain_and_end_windows_and_bad_windows_say_why(
    service: Service,
) -> None:
    with pytest.raises(Forbidden):
        await drain(service, actor="alice")
    with pytest.raises(InvalidRequest, match="no GPU dgx1:9"):
        await drain(service, gpus=[9])
    with pytest.raises(InvalidRequest, match="knows no GPU on nowhere"):
        await drain(service, host="nowhere")
    with pytest.raises(InvalidRequest, match="end after it starts"):
        await drain(service, start=at(3), end=at(2))
    future = await drain(service, start=at(3), end=None, reason="PSU")
    now = await drain(service, host="dgx2", reason="rack move")
    assert now["status"] == "active" and future["end"] is None
    listed = await service.call("list_maintenance")
    assert [w["id"] for w in listed] == [now["id"], future["id"]]
    with pytest.raises(Forbidden):
        await service.call("end_maintenance", actor="bob", id=now["id"])
    with pytest.raises(NotFound):
        await service.call("end_maintenance", actor="admin", id=999999)
    removed = await service.call("end_maintenance", actor="admin", id=future["id"])
    ended = await service.call("end_maintenance", actor="admin", id=now["id"])
    assert removed["status"] == "removed" and ended["status"] == "ended"
    assert ended["ended_by"] == "admin"
    assert await service.call("list_maintenance") == []
    await service.until(lambda: len(service.of("maintenance.ended")) == 2, "ended events")
    # The drain is over: dgx1 takes bookings again.
    await book(service, "bob", [G0], 4, 5)
