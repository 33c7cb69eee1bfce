"""Access-rule values for tests/unit/test_reservations_access_*.py: times, zones, members, GPUs.

`rule(...)`, `window(...)`, `booking(...)` build the rules' domain values with defaults;
`codes(refusals)` lists their codes; `windows_st`, `zones`, `change_days` are Hypothesis strategies
(weekly windows, the two zones, days around their DST changes).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from hypothesis import strategies as st

from services.reservations.rules.access import zone
from services.reservations.rules.domain import (
    AccessRule,
    Booking,
    Gpu,
    Member,
    Refusal,
    WeeklyWindow,
)

H = timedelta(hours=1)
MIN = timedelta(minutes=1)
DAY = timedelta(days=1)
EVERY_DAY = frozenset(range(7))
WEEKDAYS = frozenset(range(5))
WARSAW = zone("Europe/Warsaw")
NEW_YORK = zone("America/New_York")
ALICE = Member("alice", frozenset({"phd"}))
BOB = Member("bob")
# Monday 2026-11-23; Warsaw is UTC+1 then.
MONDAY = datetime(2026, 11, 23, tzinfo=UTC)
GPUS = [Gpu(f"GPU-{host}-{i}", host, i) for host in ("dgx1", "dgx2") for i in range(4)]
DGX1 = GPUS[:4]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def rule(rule_id: int = 1, **kw: Any) -> AccessRule:
    fields: dict[str, Any] = {
        "id": rule_id,
        "name": f"rule {rule_id}",
        "valid_from": utc(2020, 1, 1),
        "users": frozenset({"alice"}),
        "all_gpus": True,
    }
    fields.update(kw)
    return AccessRule(**fields)


def window(days: frozenset[int], start: str, end: str) -> WeeklyWindow:
    return WeeklyWindow(days, time.fromisoformat(start), time.fromisoformat(end))


def booking(
    booking_id: int, start: datetime, end: datetime, *gpus: Gpu, owner: str = "alice"
) -> Booking:
    return Booking(booking_id, owner, frozenset(g.uuid for g in gpus), start, end)


def codes(refusals: list[Refusal]) -> list[str]:
    return [r.code for r in refusals]


# Ranges around the DST changes of both zones (2026: 8 Mar / 1 Nov New York, 29 Mar / 25 Oct
# Warsaw), and minute-granular windows.
change_days = st.sampled_from(
    [date(2026, 3, 8), date(2026, 11, 1), date(2026, 3, 29), date(2026, 10, 25), date(2026, 7, 1)]
)
zones = st.sampled_from([WARSAW, NEW_YORK])
wall_times = st.integers(0, 24 * 60 - 1).map(lambda m: time(m // 60, m % 60))
windows_st = st.builds(
    WeeklyWindow,
    st.frozensets(st.integers(0, 6), min_size=1),
    wall_times,
    wall_times,
)
