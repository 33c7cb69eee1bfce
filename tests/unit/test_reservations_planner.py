"""Planner: overview runs and the earliest-slot finder, against naive per-slot references."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reservations.rules.domain import Booking, Gpu, Interval
from services.reservations.rules.intervals import complement, merge
from services.reservations.rules.planner import (
    Run,
    Slot,
    earliest_slot,
    overview_by_gpu,
    overview_runs,
)

T0 = datetime(2026, 11, 23, tzinfo=UTC)
MIN = timedelta(minutes=1)
H = timedelta(hours=1)
SLOT = timedelta(minutes=30)


def at(minute: int) -> datetime:
    return T0 + minute * MIN


def iv(a: int, b: int) -> Interval:
    return Interval(at(a), at(b))


def booking(booking_id: int, owner: str, a: int, b: int) -> Booking:
    return Booking(booking_id, owner, frozenset({"GPU-0"}), at(a), at(b))


def labels(runs: list[Run]) -> list[tuple[int, int, str, str | None, int | None]]:
    return [(r.first, r.count, r.state, r.owner, r.reservation_id) for r in runs]


# --- overview ---------------------------------------------------------------------------------


def test_overview_runs_of_one_day() -> None:
    allowed = [iv(8 * 60, 18 * 60)]
    bookings = [
        booking(2, "bob", 10 * 60 + 15, 10 * 60 + 45),  # unaligned: marks two slots
        booking(1, "me", 12 * 60, 13 * 60),
        booking(3, "carol", 20 * 60, 22 * 60),  # outside allowed time: still taken
    ]
    runs = overview_runs("me", allowed, bookings, T0, SLOT, 48)
    assert labels(runs) == [
        (0, 16, "not_allowed", None, None),
        (16, 4, "free", None, None),
        (20, 2, "taken", "bob", 2),
        (22, 2, "free", None, None),
        (24, 2, "mine", None, None),
        (26, 10, "free", None, None),
        (36, 4, "not_allowed", None, None),
        (40, 4, "taken", "carol", 3),
        (44, 4, "not_allowed", None, None),
    ]
    assert runs[2].to_dict() == {
        "first": 20,
        "count": 2,
        "state": "taken",
        "owner": "bob",
        "reservation_id": 2,
    }


def test_overview_precedence_and_partial_allowed_slots() -> None:
    allowed = [iv(10, 50)]  # slots of 30 min: [0, 30) and [30, 60) are only partly allowed
    assert labels(overview_runs("me", allowed, [], T0, SLOT, 2)) == [
        (0, 2, "not_allowed", None, None)
    ]
    # Two others' bookings in one slot: the one that starts first names it.
    bookings = [booking(8, "carol", 20, 40), booking(9, "bob", 5, 20)]
    assert labels(overview_runs("me", [iv(0, 60)], bookings, T0, SLOT, 2)) == [
        (0, 1, "taken", "bob", 9),
        (1, 1, "taken", "carol", 8),
    ]
    # Mine beats taken in the same slot.
    bookings.append(booking(10, "me", 29, 31))
    assert labels(overview_runs("me", [iv(0, 60)], bookings, T0, SLOT, 2)) == [
        (0, 2, "mine", None, None)
    ]


def test_overview_clips_bookings_outside_the_range_and_handles_nothing() -> None:
    bookings = [booking(1, "bob", -100, 15), booking(2, "bob", 200, 300), booking(3, "me", 5, 5)]
    runs = overview_runs("me", [iv(-60, 600)], bookings, T0, SLOT, 4)
    assert labels(runs) == [(0, 1, "taken", "bob", 1), (1, 3, "free", None, None)]
    assert overview_runs("me", [], [], T0, SLOT, 0) == []
    with pytest.raises(ValueError):
        overview_runs("me", [], [], T0, timedelta(0), 3)


def naive_runs(
    me: str, allowed: list[Interval], bookings: list[Booking], slot: timedelta, slots: int
) -> list[tuple[int, int, str, str | None, int | None]]:
    merged = merge(allowed)
    states: list[tuple[str, str | None, int | None]] = []
    for i in range(slots):
        lo, hi = T0 + i * slot, T0 + (i + 1) * slot
        hits = [b for b in bookings if b.start < b.end and b.start < hi and lo < b.end]
        others = sorted((b for b in hits if b.owner != me), key=lambda b: (b.start, b.id))
        if any(b.owner == me for b in hits):
            states.append(("mine", None, None))
        elif others:
            states.append(("taken", others[0].owner, others[0].id))
        elif any(a.start <= lo and hi <= a.end for a in merged):
            states.append(("free", None, None))
        else:
            states.append(("not_allowed", None, None))
    runs: list[tuple[int, int, str, str | None, int | None]] = []
    for i, state in enumerate(states):
        if runs and runs[-1][2:] == state:
            first, count = runs[-1][:2]
            runs[-1] = (first, count + 1, *state)
        else:
            runs.append((i, 1, *state))
    return runs


span_st = st.tuples(st.integers(-30, 200), st.integers(0, 60)).map(lambda p: (p[0], p[0] + p[1]))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(span_st, max_size=5),
    st.lists(st.tuples(span_st, st.sampled_from(["me", "bob", "carol"])), max_size=6),
    st.integers(1, 25),
    st.sampled_from([1, 7, 10, 30]),
)
def test_overview_agrees_with_a_per_slot_reference(
    allowed_spec: list[tuple[int, int]],
    bookings_spec: list[tuple[tuple[int, int], str]],
    slots: int,
    slot_minutes: int,
) -> None:
    allowed = [iv(a, b) for a, b in allowed_spec]
    bookings = [booking(i, owner, a, b) for i, ((a, b), owner) in enumerate(bookings_spec)]
    slot = slot_minutes * MIN
    runs = overview_runs("me", allowed, bookings, T0, slot, slots)
    assert labels(runs) == naive_runs("me", allowed, bookings, slot, slots)
    assert runs[0].first == 0 and sum(r.count for r in runs) == slots
    assert all(a.first + a.count == b.first for a, b in pairwise(runs))
    assert all(r.count > 0 for r in runs)
    assert all(labels([a])[0][2:] != labels([b])[0][2:] for a, b in pairwise(runs))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(span_st, max_size=4), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 5), span_st, st.sampled_from(["me", "bob"])), max_size=8),
    st.integers(1, 20),
)
def test_overview_by_gpu_equals_one_gpu_at_a_time(
    allowed_lists: list[list[tuple[int, int]]],
    bookings_spec: list[tuple[int, tuple[int, int], str]],
    slots: int,
) -> None:
    shared = [[iv(a, b) for a, b in spans] for spans in allowed_lists]
    allowed = {f"GPU-{g}": shared[g % len(shared)] for g in range(6)}  # lists shared by GPUs
    bookings: dict[str, list[Booking]] = {}
    for i, (g, (a, b), owner) in enumerate(bookings_spec):
        bookings.setdefault(f"GPU-{g}", []).append(booking(i, owner, a, b))
    fleet = overview_by_gpu("me", allowed, bookings, T0, 10 * MIN, slots)
    assert set(fleet) == set(allowed)
    for uuid, runs in fleet.items():
        alone = overview_runs("me", allowed[uuid], bookings.get(uuid, []), T0, 10 * MIN, slots)
        assert runs == alone


def test_overview_of_a_large_fleet_covers_every_slot_of_every_gpu() -> None:
    # Its speed is measured in bench/api_load.py (the overview route), never asserted here.
    rng = random.Random(7)
    slots = 4 * 7 * 48  # four weeks of 30 minutes
    working_hours = [iv(d * 1440 + 7 * 60, d * 1440 + 17 * 60) for d in range(28)]
    allowed: dict[str, list[Interval]] = {}
    bookings: dict[str, list[Booking]] = {}
    for g in range(200):
        uuid = f"GPU-{g}"
        allowed[uuid] = working_hours
        starts = sorted(rng.sample(range(0, slots * 30 - 600, 60), 50))
        bookings[uuid] = [
            booking(i, rng.choice(["me", "bob"]), s, s + 45) for i, s in enumerate(starts)
        ]
    fleet = overview_by_gpu("me", allowed, bookings, T0, SLOT, slots)
    assert set(fleet) == set(allowed)
    assert all(sum(r.count for r in runs) == slots for runs in fleet.values())


# --- earliest slot ----------------------------------------------------------------------------

GPUS = [Gpu("b1", "beta", 1), Gpu("a0", "alpha", 0), Gpu("a1", "alpha", 1), Gpu("b0", "beta", 0)]
ALL_TIME = {g.uuid: [iv(-10_000, 10_000)] for g in GPUS}


def test_earliest_slot_examples() -> None:
    busy = {"a0": [iv(0, 60)], "a1": [iv(30, 90)]}
    slot = earliest_slot(GPUS, ALL_TIME, busy, 2, H, at(0), at(600))
    assert slot == Slot(at(0), at(60), ("b0", "b1"))
    assert slot.to_dict()["gpus"] == ["b0", "b1"]
    busy["b0"] = [iv(0, 10)]
    assert earliest_slot(GPUS, ALL_TIME, busy, 4, H, at(0), at(600)) == Slot(
        at(90), at(150), ("a0", "a1", "b0", "b1")
    )
    # On one host: alpha is free from 90, beta from 10: beta wins.
    assert earliest_slot(GPUS, ALL_TIME, busy, 2, H, at(0), at(600), same_host=True) == Slot(
        at(10), at(70), ("b0", "b1")
    )
    # The horizon bounds the end of the slot.
    assert earliest_slot(GPUS, ALL_TIME, busy, 4, H, at(0), at(149)) is None
    assert earliest_slot(GPUS, ALL_TIME, busy, 4, H, at(0), at(150)) is not None
    assert earliest_slot(GPUS, ALL_TIME, busy, 5, H, at(0), at(600)) is None


def test_earliest_slot_respects_allowed_time_and_host_ties() -> None:
    allowed = {"a0": [iv(0, 50), iv(50, 200)], "b0": [iv(100, 300)], "b1": [iv(100, 130)]}
    # a0's touching intervals are one (merge them first as documented).
    allowed = {uuid: merge(spans) for uuid, spans in allowed.items()}
    assert earliest_slot(GPUS, allowed, {}, 1, 2 * H, at(0), at(1000)) == Slot(
        at(0), at(120), ("a0",)
    )
    assert earliest_slot(GPUS, allowed, {}, 2, H, at(0), at(1000)) == Slot(
        at(100), at(160), ("a0", "b0")
    )
    assert earliest_slot(GPUS, allowed, {}, 2, H, at(0), at(1000), same_host=True) is None
    # Ties between hosts go to the first by name.
    assert earliest_slot(GPUS, ALL_TIME, {}, 2, H, at(5), at(1000), same_host=True) == Slot(
        at(5), at(65), ("a0", "a1")
    )
    with pytest.raises(ValueError):
        earliest_slot(GPUS, ALL_TIME, {}, 0, H, at(0), at(10))
    with pytest.raises(ValueError):
        earliest_slot(GPUS, ALL_TIME, {}, 1, timedelta(0), at(0), at(10))


def brute_force(
    gpus: Sequence[Gpu],
    allowed: Mapping[str, Sequence[Interval]],
    busy: Mapping[str, Sequence[Interval]],
    count: int,
    minutes: int,
    not_before: int,
    horizon: int,
    same_host: bool,
) -> Slot | None:
    ordered = sorted(gpus, key=lambda g: (g.host, g.index))
    for t in range(not_before, horizon - minutes + 1):
        lo, hi = at(t), at(t + minutes)
        fit = [
            g
            for g in ordered
            if any(a.start <= lo and hi <= a.end for a in allowed.get(g.uuid, ()))
            and not any(b.start < hi and lo < b.end for b in busy.get(g.uuid, ()))
        ]
        groups = [[g for g in fit if g.host == h] for h in sorted({g.host for g in fit})]
        # Topology unknown: every set of a host is as good; packed: the host with the fewest
        # fitting GPUs, then by name; none has enough: the fewest hosts, the fullest first.
        enough = [group for group in groups if len(group) >= count]
        if enough:
            group = min(enough, key=len)
            return Slot(lo, hi, tuple(g.uuid for g in group[:count]))
        if not same_host and len(fit) >= count:
            taken: list[str] = []
            for group in sorted(groups, key=len, reverse=True):
                taken += [g.uuid for g in group[: count - len(taken)]]
            return Slot(lo, hi, tuple(taken[:count]))
    return None


def spans_st(length: int, least: int, most: int) -> st.SearchStrategy[list[Interval]]:
    """Merged minute-granular intervals, each up to `length` minutes long."""
    spans = st.tuples(st.integers(-30, 180), st.integers(1, length))
    lists = st.lists(spans, min_size=least, max_size=most)
    return lists.map(lambda s: merge(iv(a, a + n) for a, n in s))


gpus_st = st.lists(
    st.tuples(st.sampled_from(["alpha", "beta", "gamma"]), st.integers(0, 3)),
    min_size=1,
    max_size=5,
    unique=True,
).map(lambda specs: [Gpu(f"{h}-{i}", h, i) for h, i in specs])


@settings(max_examples=300, deadline=None)
@given(
    gpus_st,
    st.data(),
    st.integers(1, 40),
    st.integers(-20, 80),
    st.integers(0, 200),
    st.booleans(),
)
def test_earliest_slot_agrees_with_brute_force(
    gpus: list[Gpu],
    data: st.DataObject,
    minutes: int,
    not_before: int,
    window: int,
    same_host: bool,
) -> None:
    count = data.draw(st.integers(1, min(len(gpus), 3)))
    # Most GPUs allowed for long stretches and busy for short ones, so that slots exist.
    mostly = st.sampled_from([True, True, True, False])
    allowed = {g.uuid: data.draw(spans_st(200, 1, 3)) for g in gpus if data.draw(mostly)}
    busy = {g.uuid: data.draw(spans_st(30, 0, 3)) for g in gpus}
    horizon = not_before + window
    found = earliest_slot(
        gpus, allowed, busy, count, minutes * MIN, at(not_before), at(horizon), same_host
    )
    expected = brute_force(gpus, allowed, busy, count, minutes, not_before, horizon, same_host)
    assert found == expected
    if found is not None:
        assert at(not_before) <= found.start and found.end <= at(horizon)
        chosen = Interval(found.start, found.end)
        for uuid in found.gpus:
            assert not any(chosen.overlaps(b) for b in busy.get(uuid, ()))
            assert any(a.start <= chosen.start and chosen.end <= a.end for a in allowed[uuid])


def test_earliest_slot_over_a_large_fleet_is_free_and_allowed() -> None:
    # Its speed belongs in a benchmark, never in an assertion.
    rng = random.Random(11)
    weeks = 8 * 7 * 1440
    fleet = [Gpu(f"GPU-{h}-{i}", f"host{h:02}", i) for h in range(25) for i in range(8)]
    working_hours = [iv(d * 1440 + 7 * 60, d * 1440 + 19 * 60) for d in range(8 * 7)]
    allowed = {g.uuid: working_hours for g in fleet}
    busy = {}
    for gpu in fleet:
        starts = sorted(rng.sample(range(0, weeks - 600, 60), 100))
        busy[gpu.uuid] = merge(iv(s, s + rng.choice([60, 120, 240, 480])) for s in starts)
    found = earliest_slot(fleet, allowed, busy, 8, 8 * H, at(0), at(weeks))
    same = earliest_slot(fleet, allowed, busy, 8, 4 * H, at(0), at(weeks), same_host=True)
    assert found is not None and same is not None
    for slot in (found, same):
        for uuid in slot.gpus:
            blocked = merge([*busy[uuid], *complement(allowed[uuid], at(0), at(weeks))])
            assert not any(Interval(slot.start, slot.end).overlaps(b) for b in blocked)
