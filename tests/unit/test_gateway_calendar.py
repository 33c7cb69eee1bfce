"""The gateway's copy of the calendar: events in any order, ranges, now and next (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.gateway.calendar import CalendarView, item

T0 = datetime(2026, 11, 23, 8, tzinfo=UTC)


def reservation(rid: int, gpus: list[str], start_h: float, hours: float, **extra: object) -> dict:
    return {
        "id": rid,
        "owner": extra.pop("owner", "alice"),
        "gpus": [{"uuid": u, "host": "h", "index": i, "name": "A100"} for i, u in enumerate(gpus)],
        "start": (T0 + timedelta(hours=start_h)).isoformat(),
        "end": (T0 + timedelta(hours=start_h + hours)).isoformat(),
        "title": "t",
        "description": "secret plan",
        "status": extra.pop("status", "active"),
        "created_by": "alice",
        "guests": [],
        "usage": None,
        **extra,
    }


def loaded(*reservations: dict) -> CalendarView:
    view = CalendarView()
    view.load(reservations, T0 - timedelta(days=30), T0 + timedelta(days=60))
    return view


def test_items_have_the_event_shape_whatever_the_source() -> None:
    shown = item(reservation(1, ["g0"], 0, 1))
    assert set(shown) == {
        "id", "owner", "gpus", "start", "end", "title", "description", "status",
        "created_by", "cancelled_at", "cancelled_by", "cancel_reason", "guests", "updated_at",
    }  # fmt: skip
    assert shown["gpus"] == [{"uuid": "g0", "host": "h", "index": 0}]


def test_ranges_by_gpu_owner_and_status() -> None:
    view = loaded(
        reservation(1, ["g0"], 0, 2),
        reservation(2, ["g1"], 1, 2, owner="bob"),
        reservation(3, ["g0", "g1"], 5, 1),
        reservation(4, ["g0"], 3, 1, status="cancelled"),
    )
    window = (T0, T0 + timedelta(hours=4))
    assert [r["id"] for r in view.between(*window)] == [1, 2]
    assert [r["id"] for r in view.between(*window, include_cancelled=True)] == [1, 2, 4]
    assert [r["id"] for r in view.between(*window, ["g1"])] == [2]
    assert [r["id"] for r in view.between(*window, owner="alice")] == [1]
    # Touching ends do not overlap: [0, 2) and [2, 3).
    assert view.between(T0 + timedelta(hours=2), T0 + timedelta(hours=3), ["g0"]) == []


def test_events_update_and_cancel_and_a_late_create_does_not_revive() -> None:
    view = loaded()
    view.apply("reservation.created", reservation(7, ["g0"], 0, 1))
    view.apply("reservation.cancelled", reservation(7, ["g0"], 0, 1, status="cancelled"))
    view.apply("reservation.created", reservation(7, ["g0"], 0, 1))  # duplicate, late
    assert view.between(T0, T0 + timedelta(hours=1)) == []
    restored = reservation(7, ["g0"], 0, 1, changed=["status"])
    view.apply("reservation.updated", restored)
    assert [r["id"] for r in view.between(T0, T0 + timedelta(hours=1))] == [7]
    moved = reservation(7, ["g1"], 2, 1, changed=["gpus", "start", "end"])
    view.apply("reservation.updated", moved)
    assert view.between(T0, T0 + timedelta(hours=1)) == []
    assert [r["id"] for r in view.between(T0, T0 + timedelta(hours=4), ["g1"])] == [7]


def test_the_start_up_load_never_overwrites_what_an_event_brought() -> None:
    view = CalendarView()
    view.apply("reservation.updated", reservation(1, ["g0"], 0, 1, title="new", changed=["title"]))
    view.load(
        [reservation(1, ["g0"], 0, 1, title="old")], T0 - timedelta(days=1), T0 + timedelta(days=1)
    )
    assert view.between(T0, T0 + timedelta(hours=1))[0]["title"] == "new"


def test_coverage_and_pruning() -> None:
    view = CalendarView()
    assert not view.covers(T0, T0 + timedelta(hours=1))  # not loaded yet
    view = CalendarView()
    old, new = reservation(1, ["g0"], -24 * 70, 1), reservation(2, ["g0"], 0, 1)
    view.load([old, new], T0 - timedelta(days=100), T0 + timedelta(days=60))
    assert view.covers(T0, T0 + timedelta(days=7))
    assert view.covers(T0 - timedelta(days=90), T0)
    assert not view.covers(T0, T0 + timedelta(days=90))
    view.prune(T0)
    assert len(view) == 1
    assert view.covers_from == T0 - timedelta(weeks=8)
    assert not view.covers(T0 - timedelta(days=90), T0)  # asked of the service now


def test_now_and_next_on_a_gpu() -> None:
    view = loaded(
        reservation(1, ["g0"], -1, 2),
        reservation(2, ["g0"], 5, 1),
        reservation(3, ["g0"], 3, 1),
        reservation(4, ["g0"], 2, 1, status="cancelled"),
        reservation(5, ["g0"], 24 * 10, 1),
    )
    current, coming = view.now_and_next("g0", T0, timedelta(days=7))
    assert current is not None and current["id"] == 1
    assert coming is not None and coming["id"] == 3
    assert view.now_and_next("g9", T0, timedelta(days=7)) == (None, None)


def test_an_answer_applied_first_is_not_undone_by_its_late_event() -> None:
    view = loaded()
    created = reservation(8, ["g0"], 0, 1, updated_at=(T0 - timedelta(minutes=5)).isoformat())
    edited = reservation(
        8, ["g0"], 0, 1, title="edited", updated_at=(T0 - timedelta(minutes=1)).isoformat()
    )
    view.apply("reservation.updated", edited)  # the gateway's own answer
    view.apply("reservation.created", created)  # the event of the older change, late
    assert view.between(T0, T0 + timedelta(hours=1))[0]["title"] == "edited"
    same_time = reservation(8, ["g0"], 0, 1, title="again", updated_at=edited["updated_at"])
    view.apply("reservation.updated", same_time)  # equal times: the later arrival wins
    assert view.between(T0, T0 + timedelta(hours=1))[0]["title"] == "again"


def test_the_next_one_starts_strictly_within_the_range_ahead() -> None:
    view = loaded(reservation(1, ["g0"], 24 * 7, 1), reservation(2, ["g1"], 24 * 7 - 1, 1))
    assert view.now_and_next("g0", T0, timedelta(days=7)) == (None, None)  # at T0 + 7 days
    assert view.now_and_next("g1", T0, timedelta(days=7))[1] is not None


def test_listeners_hear_which_gpus_changed_and_nothing_when_nothing_did() -> None:
    view = CalendarView()
    heard: list[frozenset[str]] = []
    view.listeners.append(heard.append)
    view.load(
        [reservation(1, ["g0"], 0, 1), reservation(2, ["g1", "g2"], 0, 1)],
        T0 - timedelta(days=30),
        T0 + timedelta(days=60),
    )
    assert heard == [{"g0", "g1", "g2"}]
    heard.clear()
    created = reservation(3, ["g3"], 2, 1, updated_at=T0.isoformat())
    view.apply("reservation.created", created)
    view.apply("reservation.created", created)  # its event after our own answer: the same
    moved = reservation(
        3, ["g4"], 2, 1, updated_at=(T0 + timedelta(minutes=1)).isoformat(), changed=["gpus"]
    )
    view.apply("reservation.updated", moved)
    view.apply("reservation.created", created)  # late: older than what is here
    view.apply("reservation.cancelled", reservation(1, ["g0"], 0, 1, status="cancelled"))
    assert heard == [{"g3"}, {"g3", "g4"}, {"g0"}]
    heard.clear()
    view.apply("reservation.created", reservation(4, ["g5"], -24 * 70, 1))
    heard.clear()
    view.prune(T0)
    assert heard == [{"g5"}]
    view.prune(T0)  # nothing left to forget
    assert heard == [{"g5"}]


def held(view: CalendarView, gpu: str, at: datetime) -> tuple[int | None, int | None]:
    """The ids of the reservation holding `gpu` at `at` and of the next within a week."""
    current, coming = view.now_and_next(gpu, at, timedelta(days=7))
    return (current and current["id"]), (coming and coming["id"])


def test_a_moved_reservation_takes_its_new_place_on_each_of_its_gpus() -> None:
    view = loaded(reservation(1, ["g0", "g1"], 5, 1), reservation(2, ["g0"], 3, 1))
    assert held(view, "g0", T0) == (None, 2)
    view.apply("reservation.updated", reservation(1, ["g0", "g1"], 1, 1, changed=["start"]))
    assert held(view, "g0", T0) == (None, 1)
    assert held(view, "g1", T0 + timedelta(hours=1)) == (1, None)
    # On both GPUs asked for, listed once.
    assert [r["id"] for r in view.between(T0, T0 + timedelta(days=1), ["g0", "g1"])] == [1, 2]
    view.apply("reservation.cancelled", reservation(1, ["g0", "g1"], 1, 1, status="cancelled"))
    assert held(view, "g0", T0) == (None, 2)
    assert held(view, "g1", T0) == (None, None)


def test_a_copy_that_missed_events_is_forgotten_then_loaded_anew() -> None:
    view = loaded(reservation(1, ["g0"], 0, 1), reservation(2, ["g1"], 2, 1))
    heard: list[frozenset[str]] = []
    view.listeners.append(heard.append)
    view.forget()  # the broker was away: a cancel of 2 may have been missed
    assert len(view) == 0 and not view.covers(T0, T0 + timedelta(hours=1))
    assert heard == [frozenset({"g0", "g1"})]
    view.load([reservation(1, ["g0"], 0, 1)], T0 - timedelta(days=1), T0 + timedelta(days=7))
    assert [r["id"] for r in view.between(T0, T0 + timedelta(days=1), None)] == [1]


def test_a_read_asked_again_is_answered_as_before_until_its_gpus_change() -> None:
    view = loaded(reservation(1, ["g0"], 0, 1))
    window = (T0 - timedelta(hours=1), T0 + timedelta(days=1))
    first = view.between(*window, ["g0"])
    assert view.between(*window, ["g0"]) is first  # kept: nothing on g0 changed
    view.apply("reservation.created", reservation(2, ["g1"], 0, 1))
    assert view.between(*window, ["g0"]) is first  # a change on another GPU only
    view.apply("reservation.created", reservation(3, ["g0"], 2, 1))
    assert [r["id"] for r in view.between(*window, ["g0"])] == [1, 3]
    view.forget()  # drops what it held without moving any version
    view.load([reservation(4, ["g0"], 0, 1)], T0 - timedelta(days=30), T0 + timedelta(days=60))
    assert [r["id"] for r in view.between(*window, ["g0"])] == [4]


def test_kept_answers_hold_a_bounded_number_of_reservations_together() -> None:
    from services.gateway.calendar import ANSWER_ITEMS_KEPT

    many = 2_000
    view = loaded(*(reservation(n, [f"g{n % 8}"], n / 100, 0.5) for n in range(1, many + 1)))
    everything = (T0 - timedelta(days=1), T0 + timedelta(days=30))
    first = view.between(*everything)
    assert len(first) == many and view.between(*everything) is first  # kept: asked again
    # Other ranges of a caller's choosing, each holding every reservation: past the bound,
    # the kept answers are dropped instead of piling up.
    for minutes in range(1, ANSWER_ITEMS_KEPT // many + 2):
        view.between(everything[0] - timedelta(minutes=minutes), everything[1])
    again = view.between(*everything)
    assert again == first and again is not first
