"""The overview grid of `grid.Grid` (run-length cells from slot rows) answers exactly what the
pure planner (`planner.overview_by_gpu`, Run objects from Bookings) answers, on random fleets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from services.reservations.rules.domain import Booking, Interval
from services.reservations.rules.grid import Grid, SlotRow, by_gpu, label_dict, runs_of
from services.reservations.rules.planner import overview_by_gpu
from services.shared.storage.store import from_ms, to_ms

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
MIN_MS = 60_000


def full_runs(grid: Grid, rows: dict[str, list[int]]) -> dict[str, list[dict[str, object]]]:
    return {uuid: runs_of(row, grid.labels) for uuid, row in rows.items()}


def planner_runs(
    me: str,
    allowed: dict[str, list[Interval]],
    slot_rows: dict[str, list[SlotRow]],
    start: datetime,
    slot: timedelta,
    slots: int,
) -> dict[str, list[dict[str, object]]]:
    bookings = {
        uuid: [
            Booking(rid, owner, frozenset({uuid}), from_ms(a), from_ms(b))
            for _, rid, owner, a, b in rows
        ]
        for uuid, rows in slot_rows.items()
    }
    fleet = overview_by_gpu(me, allowed, bookings, start, slot, slots)
    return {uuid: [run.to_dict() for run in runs] for uuid, runs in fleet.items()}


def span(origin_ms: int) -> st.SearchStrategy[tuple[int, int]]:
    # Minute- and millisecond-grained bounds around the range, empty and reversed ones too.
    edge = st.integers(-60, 400).map(lambda m: origin_ms + m * MIN_MS) | st.integers(
        origin_ms - 3_600_000, origin_ms + 24_000_000
    )
    return st.tuples(edge, edge)


ORIGIN_MS = to_ms(T0)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.lists(span(ORIGIN_MS), max_size=4), min_size=1, max_size=3),
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.integers(1, 12),  # reservation id: one reservation may span GPUs
            span(ORIGIN_MS),
            st.sampled_from(["me", "bob", "carol"]),
        ),
        max_size=14,
    ),
    st.integers(0, 40),
    st.sampled_from([1, 7, 30, 60]),
    st.integers(-(10**9), 10**9),  # the range may start off the millisecond grid
)
def test_grid_equals_the_planner(
    allowed_lists: list[list[tuple[int, int]]],
    bookings_spec: list[tuple[int, int, tuple[int, int], str]],
    slots: int,
    slot_minutes: int,
    offset_us: int,
) -> None:
    start = T0 + timedelta(microseconds=offset_us)
    slot = timedelta(minutes=slot_minutes)
    shared = [
        [Interval(from_ms(min(a, b)), from_ms(max(a, b))) for a, b in spans]
        for spans in allowed_lists
    ]
    allowed = {f"GPU-{g}": shared[g % len(shared)] for g in range(6)}  # lists shared by GPUs
    # A reservation has one owner and interval on all its GPUs, and one GPU once.
    first_of: dict[int, tuple[str, tuple[int, int]]] = {}
    seen: set[tuple[int, int]] = set()
    rows = []
    for g, rid, interval, owner in bookings_spec:
        owner, (a, b) = first_of.setdefault(rid, (owner, interval))
        if (g, rid) not in seen:
            seen.add((g, rid))
            rows.append((f"GPU-{g}", rid, owner, a, b))
    slot_rows = by_gpu(rows)
    grid = Grid("me", start, slot, slots)
    cells = {uuid: grid.row(spans, slot_rows.get(uuid, ())) for uuid, spans in allowed.items()}
    assert full_runs(grid, cells) == planner_runs("me", allowed, slot_rows, start, slot, slots)
    for row in cells.values():
        assert sum(row[1::2]) == slots and all(n > 0 for n in row[1::2])
        assert all(a != b for a, b in zip(row[0::2], row[2::2], strict=False))
    assert [label_dict(label)["state"] for label in grid.labels[:3]] == [
        "free",
        "mine",
        "not_allowed",
    ]


def test_grid_of_a_day() -> None:
    # 08:00-12:00 in 30 min slots; allowed 09:00-11:00; bob 08:10-08:40, mine 10:00-10:30.
    grid = Grid("me", T0, timedelta(minutes=30), 8)
    allowed = [Interval(T0 + timedelta(hours=1), T0 + timedelta(hours=3))]
    rows: list[SlotRow] = [
        ("GPU-0", 5, "bob", ORIGIN_MS + 10 * MIN_MS, ORIGIN_MS + 40 * MIN_MS),
        ("GPU-0", 6, "me", ORIGIN_MS + 120 * MIN_MS, ORIGIN_MS + 150 * MIN_MS),
    ]
    row = grid.row(allowed, rows)
    assert row == [3, 2, 0, 2, 1, 1, 0, 1, 2, 2]
    assert grid.labels[3] == ("taken", "bob", 5)
    assert grid.row(allowed, []) is grid.row(allowed, [])  # idle GPUs share one row
