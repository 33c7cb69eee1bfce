"""The hosts board: each GPU's reservation now and next from the gateway's calendar copy (the
service's answer until the copy has loaded), changed GPUs serialised again alone, private
fields hidden from outsiders, the GPUs of a host the monitor has no reading of shown as known
from before. A fake RPC answers the monitor's snapshot, the calendar and the known GPUs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from services.gateway.auth import Caller
from services.gateway.calendar import CalendarView
from services.gateway.fleet_board import FleetBoard
from services.monitor import api as monitor_api
from services.reservations import api as reservations_api
from services.shared.rpc import Method

NOW = datetime.now(UTC).replace(microsecond=0)
GPUS = ("GPU-0", "GPU-1")
ADMIN = Caller(username="admin", is_admin=True)


def snapshot() -> dict[str, Any]:
    gpus = [{"uuid": uuid, "index": i, "name": "A100"} for i, uuid in enumerate(GPUS)]
    host = {"name": "h1", "reachable": True, "sample": {"gpus": gpus}, "processes": []}
    return {"hosts": [host], "generated_at": NOW.isoformat()}


def reservation(
    rid: int, gpu: str, start_h: float, hours: float = 1, owner: str = "bob", **extra: Any
) -> dict[str, Any]:
    return {
        "id": rid,
        "owner": owner,
        "gpus": [{"uuid": gpu, "host": "h1", "index": GPUS.index(gpu)}],
        "start": (NOW + timedelta(hours=start_h)).isoformat(),
        "end": (NOW + timedelta(hours=start_h + hours)).isoformat(),
        "title": f"run {rid}",
        "description": "the secret plan",
        "status": "active",
        "created_by": owner,
        "guests": extra.pop("guests", []),
        "updated_at": NOW.isoformat(),
        **extra,
    }


class FakeRpc:
    """Answers the snapshot, the calendar and the known GPUs; records what it was asked."""

    def __init__(self, calendar: list[dict[str, Any]] | None = None) -> None:
        self.calendar = calendar or []
        self.known: list[dict[str, Any]] = []
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, method: Method, args: Mapping[str, Any] | None = None) -> Any:
        self.asked.append((method.name, dict(args or {})))
        if method is monitor_api.SNAPSHOT:
            return snapshot()
        if method is reservations_api.LIST_GPUS:
            return self.known
        assert method is reservations_api.CALENDAR
        return self.calendar

    def names(self) -> list[str]:
        return [name for name, _ in self.asked]


class GatedRpc(FakeRpc):
    """Holds every snapshot after the first until `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def __call__(self, method: Method, args: Mapping[str, Any] | None = None) -> Any:
        if method is monitor_api.SNAPSHOT and len(self.asked) > 0:
            await self.gate.wait()
        return await super().__call__(method, args)


def loaded(*reservations: dict[str, Any]) -> CalendarView:
    view = CalendarView()
    view.load(reservations, NOW - timedelta(weeks=8), NOW + timedelta(weeks=52))
    return view


def board_on(view: CalendarView) -> FleetBoard:
    return FleetBoard(view, clock=lambda: 0.0)  # the snapshot never ages: only changes count


async def gpus_for(board: FleetBoard, rpc: FakeRpc, caller: Caller) -> dict[str, Any]:
    composed = await board.composition(rpc)
    answer: dict[str, Any] = json.loads(composed.answer(caller, "gpus"))
    return {gpu["uuid"]: gpu for gpu in answer["gpus"]}


def held(gpu: dict[str, Any]) -> tuple[int | None, int | None]:
    now, following = gpu["reservation"], gpu["next_reservation"]
    return (now and now["id"]), (following and following["id"])


async def test_before_the_copy_has_loaded_the_service_answers_and_then_the_copy_does() -> None:
    view = CalendarView()
    board = board_on(view)
    rpc = FakeRpc([reservation(1, "GPU-0", -1, 2)])
    shown = await gpus_for(board, rpc, ADMIN)
    assert held(shown["GPU-0"]) == (1, None)
    assert rpc.names() == ["snapshot", "calendar"]
    (_, window) = rpc.asked[1]
    start, end = (datetime.fromisoformat(window[k]) for k in ("start", "end"))
    assert end - start == timedelta(days=7)
    # Loaded: the copy answers for every GPU, also one its load did not touch.
    view.load([reservation(2, "GPU-1", -1, 2)], NOW - timedelta(weeks=8), NOW + timedelta(weeks=52))
    shown = await gpus_for(board, rpc, ADMIN)
    assert held(shown["GPU-0"]) == (None, None)
    assert held(shown["GPU-1"]) == (2, None)
    view.apply("reservation.created", reservation(3, "GPU-0", 3))
    shown = await gpus_for(board, rpc, ADMIN)
    assert held(shown["GPU-0"]) == (None, 3)
    assert rpc.names() == ["snapshot", "calendar"]  # nothing asked once the copy covers


async def test_a_booking_shows_at_once_and_only_its_gpu_is_serialised_again() -> None:
    view = loaded(reservation(1, "GPU-0", -1, 2))
    board = board_on(view)
    rpc = FakeRpc()
    before = await board.composition(rpc)
    # What a write through the gateway does (`_seen`): no event, no RPC needed.
    view.apply("reservation.created", reservation(2, "GPU-1", 1))
    after = await board.composition(rpc)
    assert after is not before
    untouched, booked = (after.hosts["h1"].gpus[i] for i in range(2))
    assert untouched is before.hosts["h1"].gpus[0]
    assert booked is not before.hosts["h1"].gpus[1]
    assert held(booked.data) == (None, 2)
    assert rpc.names() == ["snapshot"]
    assert await board.composition(rpc) is after  # nothing changed since


async def test_a_booking_that_shows_nowhere_keeps_the_composition_and_its_tags() -> None:
    view = loaded(reservation(1, "GPU-0", -1, 2))
    board = board_on(view)
    rpc = FakeRpc()
    before = await board.composition(rpc)
    view.apply("reservation.created", reservation(2, "GPU-1", 24 * 8))  # beyond "next"
    assert await board.composition(rpc) is before  # the same serial: the same ETag
    view.apply("reservation.created", reservation(3, "GPU-1", 24 * 6))  # next on GPU-1
    after = await board.composition(rpc)
    assert after is not before and after.serial != before.serial
    assert held(after.hosts["h1"].gpus[1].data) == (None, 3)


async def test_the_next_reservation_is_the_first_starting_within_7_days() -> None:
    view = loaded(
        reservation(1, "GPU-0", 5),
        reservation(2, "GPU-0", 2),
        reservation(3, "GPU-0", -3, 1),  # over
        reservation(4, "GPU-1", 24 * 8),  # too far ahead
        reservation(5, "GPU-1", 1, status="cancelled"),
    )
    shown = await gpus_for(board_on(view), FakeRpc(), ADMIN)
    assert held(shown["GPU-0"]) == (None, 2)
    assert held(shown["GPU-1"]) == (None, None)


async def test_private_fields_are_hidden_from_outsiders_only() -> None:
    view = loaded(
        reservation(1, "GPU-0", -1, 2, guests=["alice"]),
        reservation(2, "GPU-1", 2, cancel_reason=None),
    )
    board = board_on(view)
    rpc = FakeRpc()
    for who, sees in (("bob", True), ("alice", True), ("carol", False)):
        shown = await gpus_for(board, rpc, Caller(username=who, is_admin=False))
        assert (shown["GPU-0"]["reservation"]["description"] == "the secret plan") is sees
        assert shown["GPU-0"]["reservation"]["title"] == "run 1"
    carol = await gpus_for(board, rpc, Caller(username="carol", is_admin=False))
    assert carol["GPU-1"]["next_reservation"]["description"] == ""
    admin = await gpus_for(board, rpc, ADMIN)
    assert admin["GPU-1"]["next_reservation"]["description"] == "the secret plan"


async def test_a_caller_gets_the_figures_its_own_request_asked_for() -> None:
    """Polling once a second must not always get the figures of the second before (a refresh
    started for one caller used to be served only to the next)."""
    clock = [0.0]
    board = FleetBoard(loaded(), clock=lambda: clock[0])
    rpc = FakeRpc()
    first = await board.composition(rpc)
    assert rpc.names() == ["snapshot"]
    clock[0] = 0.5  # young enough: served as it is, no RPC
    assert await board.composition(rpc) is first
    clock[0] = 0.99  # one poll later: this caller gets a composition made for it now
    fresh = await board.composition(rpc)
    assert rpc.names() == ["snapshot", "snapshot"]
    assert fresh is not first and fresh.built_at == 0.99


async def test_while_one_caller_refreshes_the_others_get_what_it_replaces_up_to_max_age() -> None:
    clock = [0.0]
    board = FleetBoard(loaded(), clock=lambda: clock[0])
    rpc = GatedRpc()
    first = await board.composition(rpc)
    clock[0] = 0.7  # old enough to refresh
    refreshing = asyncio.create_task(board.composition(rpc))
    await asyncio.sleep(0)
    assert not refreshing.done()  # its caller waits for the snapshot it asked for
    async with asyncio.timeout(5):  # another caller meanwhile: no wait
        assert await board.composition(rpc) is first
    clock[0] = 1.0  # too old to serve: the others wait for the update too
    waiting = asyncio.create_task(board.composition(rpc))
    await asyncio.sleep(0)
    assert not waiting.done()
    rpc.gate.set()
    fresh = await refreshing
    assert await waiting is fresh and fresh is not first
    assert rpc.names() == ["snapshot", "snapshot"]


async def test_a_booking_heard_during_a_refresh_shows_at_once_and_after_it() -> None:
    clock = [0.0]
    view = loaded()
    board = FleetBoard(view, clock=lambda: clock[0])
    rpc = GatedRpc()
    await board.composition(rpc)
    clock[0] = 0.7
    refreshing = asyncio.create_task(board.composition(rpc))
    await asyncio.sleep(0)
    view.apply("reservation.created", reservation(2, "GPU-1", 1))
    async with asyncio.timeout(5):  # (fails rather than hangs if it waited for the refresh)
        meanwhile = await board.composition(rpc)
    assert not refreshing.done()
    assert held(meanwhile.hosts["h1"].gpus[1].data) == (None, 2)
    rpc.gate.set()
    refreshed = await refreshing
    assert held(refreshed.hosts["h1"].gpus[1].data) == (None, 2)
    assert await board.composition(rpc) is refreshed  # nothing left to put in


async def test_each_host_shows_its_labels_and_a_label_picks_hosts_and_their_gpus() -> None:
    class LabelledRpc(FakeRpc):
        async def __call__(self, method: Method, args: Mapping[str, Any] | None = None) -> Any:
            if method is not monitor_api.SNAPSHOT:
                return await super().__call__(method, args)
            answer = snapshot()
            h1 = {**answer["hosts"][0], "labels": ["a100", "lab-b"]}
            h2 = {"name": "h2", "reachable": None, "sample": None, "processes": []}  # no labels
            gpu = {"uuid": "GPU-9", "index": 0, "name": "H100"}
            h3 = {**h2, "name": "h3", "labels": ["h100"], "sample": {"gpus": [gpu]}}
            return {**answer, "hosts": [h1, h2, h3]}

    composed = await board_on(loaded()).composition(LabelledRpc())
    hosts = json.loads(composed.answer(ADMIN, "hosts"))["hosts"]
    assert [(h["name"], h["labels"]) for h in hosts] == [
        ("h1", ["a100", "lab-b"]),
        ("h2", []),
        ("h3", ["h100"]),
    ]
    labelled = json.loads(composed.answer(ADMIN, "hosts", label="lab-b"))["hosts"]
    assert [h["name"] for h in labelled] == ["h1"]
    gpus = json.loads(composed.answer(ADMIN, "gpus", label="h100"))["gpus"]
    assert [g["uuid"] for g in gpus] == ["GPU-9"]
    assert json.loads(composed.answer(ADMIN, "gpus", label="none"))["gpus"] == []
    assert len(json.loads(composed.answer(ADMIN, "gpus"))["gpus"]) == 3


async def test_gpus_carry_hardware_labels_and_hosts_their_union_which_a_label_picks() -> None:
    class MixedRpc(FakeRpc):
        async def __call__(self, method: Method, args: Mapping[str, Any] | None = None) -> Any:
            if method is not monitor_api.SNAPSHOT:
                return await super().__call__(method, args)
            h200 = {"uuid": "GPU-H", "index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771}
            a100 = {"uuid": "GPU-A", "index": 1, "name": "NVIDIA A100-SXM4-40GB"}
            a100["memory_total_mib"] = 40960
            host = {"name": "mixed", "reachable": True, "labels": ["lab-b"], "processes": []}
            bare = {"name": "bare", "reachable": True, "sample": {"gpus": []}, "processes": []}
            return {
                "hosts": [{**host, "sample": {"gpus": [h200, a100]}}, bare],
                "generated_at": NOW.isoformat(),
            }

    composed = await board_on(loaded()).composition(MixedRpc())
    hosts = json.loads(composed.answer(ADMIN, "hosts"))["hosts"]
    mixed = hosts[0]
    assert mixed["labels"] == ["lab-b"]  # the admin's, unchanged
    assert [g["labels"] for g in mixed["gpus"]] == [
        ["model=H200", "model=H200-141GB", "memory=141GB", "arch=hopper"],
        ["model=A100", "model=A100-40GB", "memory=40GB", "arch=ampere"],
    ]
    assert mixed["gpu_labels"] == sorted(
        {label for gpu in mixed["gpus"] for label in gpu["labels"]}
    )
    assert hosts[1]["gpu_labels"] == []
    picked = json.loads(composed.answer(ADMIN, "hosts", label="arch=Hopper"))["hosts"]
    assert [h["name"] for h in picked] == ["mixed"]
    assert json.loads(composed.answer(ADMIN, "gpus", label="arch=volta"))["gpus"] == []
    # /gpus by a hardware label: only the GPUs that carry it, not their host's others.
    h200s = json.loads(composed.answer(ADMIN, "gpus", label="model=H200"))["gpus"]
    assert [g["uuid"] for g in h200s] == ["GPU-H"]
    # by the host's own label: every GPU of it
    labbed = json.loads(composed.answer(ADMIN, "gpus", label="lab-b"))["gpus"]
    assert [g["uuid"] for g in labbed] == ["GPU-H", "GPU-A"]


class DownHostRpc(FakeRpc):
    """h1 as in `snapshot`, h2 down with no reading (the monitor started after it went down);
    the reservations service knows h2's GPUs (and one taken out of it, no longer present)."""

    def __init__(self) -> None:
        super().__init__()
        self.known = [
            {"uuid": f"GPU-h2-{i}", "host": "h2", "index": i, "name": "H100", "present": True}
            for i in (1, 0)
        ] + [{"uuid": "GPU-h2-old", "host": "h2", "index": 2, "name": "H100", "present": False}]

    async def __call__(self, method: Method, args: Mapping[str, Any] | None = None) -> Any:
        if method is not monitor_api.SNAPSHOT:
            return await super().__call__(method, args)
        answer = await super().__call__(method, args)
        h2 = {"name": "h2", "reachable": False, "sample": None, "processes": []}
        return {**answer, "hosts": [*answer["hosts"], h2]}


async def test_the_gpus_of_a_host_without_a_reading_are_shown_as_known_from_before() -> None:
    clock = [0.0]
    board = FleetBoard(loaded(reservation(1, "GPU-0", -1, 2)), clock=lambda: clock[0])
    rpc = DownHostRpc()
    composed = await board.composition(rpc)
    gpus = json.loads(composed.answer(ADMIN, "gpus"))["gpus"]
    shown = [(g["host"], g["index"], g["uuid"], g["present"], g["reachable"]) for g in gpus]
    assert shown == [
        ("h1", 0, "GPU-0", True, True),
        ("h1", 1, "GPU-1", True, True),
        ("h2", 0, "GPU-h2-0", False, False),
        ("h2", 1, "GPU-h2-1", False, False),
    ]
    last_known = gpus[2]
    assert last_known["name"] == "H100"
    assert last_known["utilization_gpu_percent"] is None and last_known["memory_used_mib"] is None
    host = json.loads(composed.answer(ADMIN, "host", "h2"))
    assert [g["uuid"] for g in host["gpus"]] == ["GPU-h2-0", "GPU-h2-1"]
    # Asked once, not with every snapshot.
    clock[0] = 1.0
    await board.composition(rpc)
    assert rpc.names().count("list_gpus") == 1
    assert rpc.names().count("snapshot") == 2


async def test_no_known_gpus_are_asked_for_while_every_host_shows_its_own() -> None:
    rpc = FakeRpc()
    rpc.known = [{"uuid": "GPU-x", "host": "h1", "index": 5, "name": "A100", "present": True}]
    shown = await gpus_for(board_on(loaded()), rpc, ADMIN)
    assert sorted(shown) == ["GPU-0", "GPU-1"]
    assert all(gpu["present"] for gpu in shown.values())
    assert "list_gpus" not in rpc.names()
