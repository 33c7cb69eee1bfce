"""What runs on the GPUs now: the warnings of a booking that starts now, and "any N" / the
earliest slot taking GPUs idle now first (pure: the board and the planner)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.reservations.booking.activity import IDLE, IN_USE, UNKNOWN, ActivityBoard
from services.reservations.rules.domain import Gpu, Interval
from services.reservations.rules.planner import IdleFirst, earliest_slot

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
H = timedelta(hours=1)
ALLOW = (("root", "Xorg"),)


def board() -> ActivityBoard:
    return ActivityBoard(stale_after=20 * S, now_window=60 * S, allow=ALLOW)


def observed(host: str, at: datetime, *processes: tuple[str, int, str | None, str]) -> dict:
    return {
        "host": host,
        "observed_at": at.isoformat(),
        "processes": [
            {"gpu_uuid": uuid, "pid": pid, "user": user, "command": command}
            for uuid, pid, user, command in processes
        ],
    }


def sampled(host: str, at: datetime, **utilization: float | None) -> dict:
    return {
        "host": host,
        "sampled_at": at.isoformat(),
        "gpus": [
            {"uuid": uuid, "index": i, "utilization_gpu_percent": util}
            for i, (uuid, util) in enumerate(utilization.items())
        ],
    }


def reservation(start: datetime, *uuids: str, owner: str = "alice", **more: Any) -> dict:
    return {
        "owner": owner,
        "guests": more.get("guests", []),
        "start": start.isoformat(),
        "end": (start + H).isoformat(),
        "gpus": [{"uuid": uuid, "host": "dgx1", "index": i} for i, uuid in enumerate(uuids)],
    }


# --- warnings -----------------------------------------------------------------------------------


def test_booking_a_gpu_in_use_now_warns_who_and_which_processes() -> None:
    live = board()
    live.on_processes_observed(
        observed(
            "dgx1",
            NOW - 2 * S,
            ("G0", 4242, "bob", "python train.py"),
            ("G0", 17, "root", "/usr/lib/xorg/Xorg :0"),  # allowed: never a warning
            ("G1", 99, "alice", "python mine.py"),  # the owner's own
        )
    )
    [warning] = live.warnings(reservation(NOW, "G0", "G1"), NOW)
    assert warning["gpu_uuid"] == "G0"
    assert (warning["host"], warning["gpu_index"]) == ("dgx1", 0)
    assert warning["processes"] == [{"pid": 4242, "user": "bob", "command": "python train.py"}]
    assert "dgx1:0" in warning["message"] and "bob" in warning["message"]
    assert "python train.py (pid 4242" in warning["message"]


def test_no_warning_for_a_later_slot_guests_or_an_idle_gpu() -> None:
    live = board()
    live.on_processes_observed(observed("dgx1", NOW, ("G0", 4242, "bob", "python x.py")))
    assert live.warnings(reservation(NOW + 61 * S, "G0"), NOW) == []  # later: no "now"
    assert live.warnings(reservation(NOW + 59 * S, "G0"), NOW) != []  # within the window
    assert live.warnings(reservation(NOW, "G0", guests=["bob"]), NOW) == []
    assert live.warnings(reservation(NOW, "G1"), NOW) == []


def test_a_stale_or_older_snapshot_says_nothing() -> None:
    live = board()
    live.on_processes_observed(observed("dgx1", NOW - 30 * S, ("G0", 1, "bob", "x")))
    assert live.warnings(reservation(NOW, "G0"), NOW) == []  # the host is silent: unknown
    live.on_processes_observed(observed("dgx1", NOW, ("G0", 1, "bob", "x")))
    live.on_processes_observed(observed("dgx1", NOW - S))  # late: the newer one stands
    assert len(live.warnings(reservation(NOW, "G0"), NOW)) == 1
    live.on_processes_observed(observed("dgx1", NOW + S))  # bob stopped
    assert live.warnings(reservation(NOW, "G0"), NOW + S) == []


def test_ranks_idle_then_unknown_then_in_use_each_by_utilisation() -> None:
    live = board()
    live.on_processes_observed(observed("dgx1", NOW, ("G2", 1, "bob", "x")))
    live.on_host_sampled(sampled("dgx1", NOW, G0=40.0, G1=None, G2=90.0))
    ranks = live.ranks([("dgx1", "G0"), ("dgx1", "G1"), ("dgx1", "G2"), ("dgx2", "H0")], NOW)
    assert ranks == {
        "G0": (IDLE, 40.0),
        "G1": (IDLE, 0.0),  # no figure: not available is not busy
        "G2": (IN_USE, 90.0),
        "H0": (UNKNOWN, 0.0),  # never heard from
    }


# --- the planner: idle first when the slot starts now -------------------------------------------


def gpus(host: str, count: int) -> list[Gpu]:
    return [Gpu(f"{host}-{i}", host, i) for i in range(count)]


def slot(fleet: list[Gpu], count: int, prefer: IdleFirst | None, **kw: Any) -> tuple[str, ...]:
    allowed = {g.uuid: [Interval(NOW - H, NOW + 48 * H)] for g in fleet}
    found = earliest_slot(
        fleet,
        allowed,
        kw.pop("busy", {}),
        count,
        H,
        kw.pop("at", NOW),
        NOW + 48 * H,
        prefer=prefer,
        **kw,
    )
    assert found is not None
    return found.gpus


def in_use(*uuids: str) -> dict[str, tuple[int, float]]:
    return dict.fromkeys(uuids, (IN_USE, 50.0))


def test_any_n_now_takes_idle_gpus_first() -> None:
    fleet = gpus("a", 4)
    prefer = IdleFirst(in_use("a-0", "a-1"), NOW + 60 * S)
    assert slot(fleet, 2, None) == ("a-0", "a-1")  # without live data: by host and index
    assert slot(fleet, 2, prefer) == ("a-2", "a-3")


def test_busy_gpus_only_when_too_few_are_idle_the_least_busy_first() -> None:
    fleet = gpus("a", 3)
    ranks = {"a-0": (IN_USE, 90.0), "a-1": (IN_USE, 10.0), "a-2": (IDLE, 0.0)}
    assert slot(fleet, 2, IdleFirst(ranks, NOW)) == ("a-2", "a-1")


def test_unknown_gpus_come_after_idle_and_before_in_use() -> None:
    fleet = gpus("a", 3)
    ranks = {"a-0": (IN_USE, 0.0), "a-2": (IDLE, 0.0)}  # a-1 unknown
    assert slot(fleet, 2, IdleFirst(ranks, NOW)) == ("a-2", "a-1")


def test_a_slot_that_starts_later_keeps_host_and_index_order() -> None:
    fleet = gpus("a", 4)
    prefer = IdleFirst(in_use("a-0", "a-1"), NOW + 60 * S)
    assert slot(fleet, 2, prefer, at=NOW + 2 * H) == ("a-0", "a-1")


def test_same_host_now_picks_the_idle_host_over_the_first_by_name() -> None:
    fleet = gpus("a", 2) + gpus("b", 2)
    prefer = IdleFirst(in_use("a-0"), NOW)
    assert slot(fleet, 2, None, same_host=True) == ("a-0", "a-1")
    assert slot(fleet, 2, prefer, same_host=True) == ("b-0", "b-1")


def test_same_host_an_earlier_slot_still_beats_an_idler_host() -> None:
    fleet = gpus("a", 2) + gpus("b", 2)
    busy = {"b-0": [Interval(NOW, NOW + 3 * H)]}  # b is reserved: only a fits now
    prefer = IdleFirst(in_use("a-0", "a-1"), NOW)
    assert slot(fleet, 2, prefer, same_host=True, busy=busy) == ("a-0", "a-1")


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_idle_first_never_changes_when_or_how_many(count: int) -> None:
    fleet = gpus("a", 2) + gpus("b", 2)
    allowed = {g.uuid: [Interval(NOW - H, NOW + 48 * H)] for g in fleet}
    busy = {"a-1": [Interval(NOW, NOW + 2 * H)]}
    plain = earliest_slot(fleet, allowed, busy, count, H, NOW, NOW + 48 * H)
    prefer = IdleFirst(in_use("a-0", "b-0"), NOW)
    idle = earliest_slot(fleet, allowed, busy, count, H, NOW, NOW + 48 * H, prefer=prefer)
    assert plain is not None and idle is not None
    assert (idle.start, len(idle.gpus)) == (plain.start, len(plain.gpus))
    if idle.start < NOW + 2 * H:
        assert "a-1" not in idle.gpus  # reserved then: idle-first never offers it
