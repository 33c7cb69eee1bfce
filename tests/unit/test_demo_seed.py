"""The demo's week, as data: where it hangs in time and which GPUs each booking takes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from services.sim.demo_seed import ANCHOR_FILE, NOW_BOOKING, WEEK, Booking, anchor, gpus_of

NOW = datetime(2026, 11, 24, 20, 28, 13, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_the_anchor_is_this_hour_then_kept_while_recent(tmp_path: Path) -> None:
    first = anchor(tmp_path, NOW)
    assert first == datetime(2026, 11, 24, 20, tzinfo=UTC)
    assert (tmp_path / ANCHOR_FILE).read_text().strip() == first.isoformat()
    assert anchor(tmp_path, NOW + 19 * HOUR) == first  # a restart finds the same week
    later = anchor(tmp_path, NOW + 21 * HOUR)  # alice's "now" booking is over: a new week
    assert later == datetime(2026, 11, 25, 17, tzinfo=UTC)
    assert anchor(tmp_path, later + HOUR) == later


def test_an_unreadable_anchor_starts_a_new_week(tmp_path: Path) -> None:
    (tmp_path / ANCHOR_FILE).write_text("not a time\n")
    assert anchor(tmp_path, NOW) == datetime(2026, 11, 24, 20, tzinfo=UTC)


def test_the_week_has_a_past_a_present_and_a_future() -> None:
    at = datetime(2026, 11, 24, 20, tzinfo=UTC)

    def when(booking: Booking) -> str:
        start = booking.starts(at)
        end = start + booking.hours * HOUR
        return "past" if end <= at else "future" if start > at else "now"

    kinds = {when(b) for b in WEEK}
    assert kinds == {"past", "now", "future"}
    assert when(NOW_BOOKING) == "now" and NOW_BOOKING.owner == "alice"
    # it still runs as long as a restart keeps the anchor (20 h)
    assert NOW_BOOKING.starts(at) + NOW_BOOKING.hours * HOUR > at + 20 * HOUR
    assert {b.owner for b in WEEK} == {"admin", "alice", "bob"}
    # days are counted from midnight, the bookings running now from the anchor hour
    assert WEEK[-1].starts(at) == datetime(2026, 11, 28, 8, tzinfo=UTC)


def test_bookings_take_gpus_of_the_fleet_there_is() -> None:
    hosts = {
        name: [{"uuid": f"{name}-{i}", "host": name, "index": i} for i in range(2)]
        for name in ("sim-002", "sim-001")
    }
    every = Booking("admin", 2, (-1,), HOUR, 1, "all")
    assert gpus_of(every, hosts) == ("sim-001", ["sim-001-0", "sim-001-1"])  # 2 wraps to 0
    four = Booking("alice", 1, (0, 1, 2, 3), HOUR, 1, "four")
    assert gpus_of(four, hosts) == ("sim-002", ["sim-002-0", "sim-002-1"])  # on 2 GPUs: 2
