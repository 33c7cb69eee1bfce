"""Maintenance windows' pure rules (`reservations/rules/maintenance.py`): what a window drains,
the refusal of a booking in it, the slot search's busy time, the bookings it overlaps, edits
that gain drained time; and the notice each overlapped booking's owner gets
(`notifications/producers.py`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from services.notifications import producers
from services.reservations.rules.domain import Gpu, Interval
from services.reservations.rules.maintenance import (
    Window,
    busy_by_gpu,
    gained_refusals,
    maintenance_refusals,
    target_refusals,
    window_refusals,
)
from services.reservations.rules.refusals import Current, refusal_error
from services.shared.errors import InvalidRequest, ReservationConflict

T0 = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
GPUS = {f"{host}-{i}": Gpu(f"{host}-{i}", host, i) for host in ("dgx1", "dgx2") for i in range(4)}


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def window(
    start: float = 2,
    end: float | None = 4,
    host: str = "dgx1",
    indices: frozenset[int] | None = None,
    reason: str = "new NVLink bridge",
) -> Window:
    return Window(1, host, indices, at(start), None if end is None else at(end), reason, "admin")


def test_a_host_window_drains_every_gpu_of_that_host_and_a_gpu_window_only_those() -> None:
    whole, two = window(), window(indices=frozenset({0, 2}))
    assert [g.uuid for g in GPUS.values() if whole.covers(g)] == [f"dgx1-{i}" for i in range(4)]
    assert [g.uuid for g in GPUS.values() if two.covers(g)] == ["dgx1-0", "dgx1-2"]
    assert whole.target == "dgx1" and two.target == "dgx1:0,2"


def test_a_booking_in_the_window_is_refused_with_its_reason_and_one_beside_it_is_not() -> None:
    drained = [window()]
    refused = maintenance_refusals(drained, [GPUS["dgx1-1"], GPUS["dgx2-0"]], at(3), at(5))
    assert len(refused) == 1
    assert refused[0].code == "maintenance"
    assert "new NVLink bridge" in refused[0].message and "dgx1:1" in refused[0].message
    assert refused[0].details["maintenance_id"] == 1 and refused[0].details["gpus"] == ["dgx1-1"]
    # Half-open: back to back on either side is fine; another host is never refused.
    assert maintenance_refusals(drained, [GPUS["dgx1-1"]], at(0), at(2)) == []
    assert maintenance_refusals(drained, [GPUS["dgx1-1"]], at(4), at(6)) == []
    assert maintenance_refusals(drained, [GPUS["dgx2-1"]], at(3), at(5)) == []
    # A refusal is a conflict (409): the GPU is taken, by the window.
    assert isinstance(refusal_error(refused), ReservationConflict)


def test_an_open_ended_window_refuses_every_booking_after_its_start() -> None:
    drained = [window(end=None)]
    assert maintenance_refusals(drained, [GPUS["dgx1-0"]], at(24 * 300), at(24 * 300 + 1))
    assert maintenance_refusals(drained, [GPUS["dgx1-0"]], at(0), at(2)) == []
    assert (
        "further notice" in maintenance_refusals(drained, [GPUS["dgx1-0"]], at(3), at(4))[0].message
    )


def test_the_slot_search_sees_the_window_as_busy_within_its_range() -> None:
    busy = busy_by_gpu([window(indices=frozenset({3}))], GPUS.values(), at(3), at(10))
    assert busy == {"dgx1-3": [Interval(at(3), at(4))]}
    open_ended = busy_by_gpu([window(end=None, host="dgx2")], GPUS.values(), at(0), at(10))
    assert set(open_ended) == {f"dgx2-{i}" for i in range(4)}
    assert open_ended["dgx2-0"] == [Interval(at(2), at(10))]


@given(
    st.floats(min_value=-10, max_value=10),
    st.floats(min_value=0.5, max_value=10),
    st.floats(min_value=-10, max_value=10),
    st.floats(min_value=0.5, max_value=10),
)
def test_refused_exactly_when_the_intervals_overlap(
    w_start: float, w_len: float, b_start: float, b_len: float
) -> None:
    drained = window(w_start, w_start + w_len)
    refused = maintenance_refusals([drained], [GPUS["dgx1-0"]], at(b_start), at(b_start + b_len))
    overlaps = Interval(at(w_start), at(w_start + w_len)).overlaps(
        Interval(at(b_start), at(b_start + b_len))
    )
    assert bool(refused) == overlaps


def test_an_edit_is_refused_only_for_the_drained_time_it_gains() -> None:
    drained = [window(2, 4)]
    kept = Current("alice", at(1), at(3), "active")  # kept in the window by the admin
    gpu = [GPUS["dgx1-0"]]
    assert gained_refusals(drained, gpu, kept, at(1), at(2.5)) == []  # shorter: fine
    assert gained_refusals(drained, gpu, kept, at(0), at(3)) == []  # earlier start: not drained
    longer = gained_refusals(drained, gpu, kept, at(1), at(5))
    assert [r.code for r in longer] == ["maintenance"]
    moved = gained_refusals(drained, gpu, kept, at(3), at(5))
    assert len(moved) == 1  # one refusal per window, however many parts gain


def test_a_window_needs_a_reason_an_end_after_its_start_and_a_known_target() -> None:
    now = at(0)
    assert window_refusals(at(1), at(2), "firmware", "keep", now) == []
    assert window_refusals(at(1), None, "firmware", "move", now) == []
    codes = [r.details["field"] for r in window_refusals(at(2), at(1), " ", "drop", now)]
    assert codes == ["reason", "end", "bookings"]
    assert target_refusals("dgx1", frozenset({0, 3}), GPUS.values()) == []
    assert "no GPU dgx1:7" in target_refusals("dgx1", frozenset({7}), GPUS.values())[0].message
    assert "knows no GPU on dgx9" in target_refusals("dgx9", None, GPUS.values())[0].message
    assert isinstance(
        refusal_error(window_refusals(at(2), at(1), "x", "keep", now)), InvalidRequest
    )


def _scheduled(**affected: object) -> dict[str, object]:
    booking = {
        "reservation_id": 7,
        "owner": "alice",
        "title": "sweep",
        "start": at(1).isoformat(),
        "end": at(3).isoformat(),
        "outcome": "kept",
        "alternative": {
            "start": at(4).isoformat(),
            "end": at(6).isoformat(),
            "gpus": [{"uuid": "dgx2-0", "host": "dgx2", "index": 0}],
        },
        "moved_to": None,
        **affected,
    }
    return {
        "id": 3,
        "target": "dgx1",
        "start": at(2).isoformat(),
        "end": None,
        "reason": "PSU swap",
        "affected": [booking],
    }


def test_each_overlapped_owner_is_told_the_reason_the_outcome_and_the_alternative() -> None:
    (note,) = producers.maintenance_notes(_scheduled())
    assert note["user"] == "alice" and note["kind"] == "maintenance"
    assert note["key"] == "maintenance:3:7"  # a redelivered event tells nobody twice
    assert "PSU swap" in note["text"] and "further notice" in note["text"]
    assert "kept as it is" in note["text"]
    assert f"GPU dgx2:0 from {at(4).isoformat()}" in note["text"]
    (moved,) = producers.maintenance_notes(_scheduled(outcome="moved", moved_to=9))
    assert "moved it to GPU dgx2:0" in moved["text"] and "#9" in moved["text"]
    (none,) = producers.maintenance_notes(_scheduled(outcome="cancelled", alternative=None))
    assert "cancel" in none["text"] and "no alternative" in none["text"]
    assert producers.maintenance_notes({**_scheduled(), "affected": []}) == []
