"""Access rules: validation, and weekly windows across midnight and DST.

Shared values and builders: tests/support/access_rules.py.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reservations.rules.access import (
    local_to_utc,
    occurrence,
    rule_problems,
    window_intervals,
    zone,
)
from services.reservations.rules.domain import (
    Interval,
    Limits,
    WeeklyWindow,
)
from services.reservations.rules.intervals import merge
from tests.support.access_rules import (
    DAY,
    EVERY_DAY,
    MIN,
    MONDAY,
    NEW_YORK,
    WARSAW,
    WEEKDAYS,
    H,
    change_days,
    rule,
    utc,
    window,
    windows_st,
    zones,
)

# --- validation -------------------------------------------------------------------------------


def test_zone_is_cached_and_unknown_zones_raise() -> None:
    assert zone("Europe/Warsaw") is zone("Europe/Warsaw")
    with pytest.raises(KeyError):
        zone("Mars/Olympus")


def test_a_sound_rule_has_no_problems_even_without_subjects() -> None:
    assert rule_problems(rule()) == {}
    assert rule_problems(rule(users=frozenset(), all_gpus=False, hosts=frozenset({"a"}))) == {}
    assert rule_problems(rule(windows=(window(WEEKDAYS, "08:00", "18:00"),))) == {}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": "Europe"}, "timezone"),
        ({"timezone": ""}, "timezone"),
        ({"valid_until": utc(2020, 1, 1)}, "valid_until"),
        ({"valid_until": utc(2019, 1, 1)}, "valid_until"),
        ({"valid_from": datetime(2020, 1, 1)}, "valid_from"),
        ({"windows": (window(frozenset(), "08:00", "18:00"),)}, "windows"),
        ({"windows": (window(frozenset({7}), "08:00", "18:00"),)}, "windows"),
        ({"windows": (window(frozenset({-1, 2}), "08:00", "18:00"),)}, "windows"),
        ({"limits": Limits(max_gpus=0)}, "max_gpus"),
        ({"limits": Limits(max_duration=timedelta(0))}, "max_duration"),
        ({"limits": Limits(max_gpu_hours_per_week=0.0)}, "max_gpu_hours_per_week"),
        ({"limits": Limits(max_gpu_hours_per_week=float("nan"))}, "max_gpu_hours_per_week"),
        ({"all_gpus": False}, "objects"),
    ],
)
def test_rule_problems_name_the_field(changes: dict[str, Any], field: str) -> None:
    problems = rule_problems(rule(**changes))
    assert list(problems) == [field]
    assert problems[field]
    if field == "objects":
        assert problems[field] == "grant all GPUs, or name hosts, GPUs or labels"


# --- windows ------------------------------------------------------------------------------------


def test_office_hours_follow_daylight_saving_time_in_warsaw() -> None:
    office = window(WEEKDAYS, "08:00", "18:00")
    winter = window_intervals(office, WARSAW, MONDAY, MONDAY + DAY)
    assert winter == [Interval(utc(2026, 11, 23, 7), utc(2026, 11, 23, 17))]
    summer_monday = utc(2026, 6, 1)
    summer = window_intervals(office, WARSAW, summer_monday, summer_monday + DAY)
    assert summer == [Interval(utc(2026, 6, 1, 6), utc(2026, 6, 1, 16))]
    # Saturday and Sunday are not in the window; Friday is.
    weekend = window_intervals(office, WARSAW, utc(2026, 11, 27), utc(2026, 11, 30))
    assert weekend == [Interval(utc(2026, 11, 27, 7), utc(2026, 11, 27, 17))]


def test_a_window_over_midnight_belongs_to_the_day_it_starts() -> None:
    night = window(frozenset({4}), "22:00", "06:00")  # Friday night into Saturday
    week = window_intervals(night, WARSAW, MONDAY, MONDAY + 7 * DAY)
    assert week == [Interval(utc(2026, 11, 27, 21), utc(2026, 11, 28, 5))]
    # Asked from Saturday 00:00 UTC: the occurrence that started on Friday is clipped.
    saturday = window_intervals(night, WARSAW, utc(2026, 11, 28), utc(2026, 11, 29))
    assert saturday == [Interval(utc(2026, 11, 28), utc(2026, 11, 28, 5))]


def test_equal_start_and_end_is_a_whole_day_and_consecutive_days_merge() -> None:
    whole = window(frozenset({0, 1}), "00:00", "00:00")
    got = window_intervals(whole, ZoneInfo("UTC"), MONDAY - DAY, MONDAY + 7 * DAY)
    assert got == [Interval(MONDAY, MONDAY + 2 * DAY)]


def test_dst_change_days_are_shorter_and_longer() -> None:
    whole = window(EVERY_DAY, "00:00", "00:00")
    spring = occurrence(whole, WARSAW, date(2026, 3, 29))
    autumn = occurrence(whole, WARSAW, date(2026, 10, 25))
    assert spring is not None and spring.duration == 23 * H
    assert autumn is not None and autumn.duration == 25 * H
    nights = window(EVERY_DAY, "22:00", "06:00")
    spring_night = occurrence(nights, NEW_YORK, date(2026, 3, 7))  # into Sunday 8 March
    assert spring_night is not None and spring_night.duration == 7 * H


def test_wall_times_in_the_spring_gap_map_to_the_end_of_the_jump() -> None:
    # Warsaw, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    assert local_to_utc(date(2026, 3, 29), time(2, 30), WARSAW) == utc(2026, 3, 29, 1)
    assert local_to_utc(date(2026, 3, 29), time(3, 0), WARSAW) == utc(2026, 3, 29, 1)
    assert local_to_utc(date(2026, 3, 29), time(1, 59), WARSAW) == utc(2026, 3, 29, 0, 59)
    # A window lying wholly in the gap does not occur that day.
    assert occurrence(window(EVERY_DAY, "02:00", "02:45"), WARSAW, date(2026, 3, 29)) is None
    # A repeated (autumn) wall time is its first occurrence.
    assert local_to_utc(date(2026, 11, 1), time(1, 30), NEW_YORK) == utc(2026, 11, 1, 5, 30)


def test_an_unknown_weekday_window_yields_nothing_and_empty_ranges_too() -> None:
    assert window_intervals(window(WEEKDAYS, "08:00", "18:00"), WARSAW, MONDAY, MONDAY) == []
    saturday = utc(2026, 11, 28)
    assert (
        window_intervals(window(WEEKDAYS, "08:00", "18:00"), WARSAW, saturday, saturday + DAY) == []
    )


@settings(max_examples=150, deadline=None)
@given(
    windows_st,
    zones,
    change_days,
    st.integers(-3 * 24 * 60, 3 * 24 * 60),
    st.integers(0, 5 * 24 * 60),
)
def test_window_intervals_are_sorted_merged_and_inside_the_range(
    win: WeeklyWindow, tz: ZoneInfo, day: date, offset: int, length: int
) -> None:
    start = datetime.combine(day, time(), UTC) + offset * MIN
    end = start + length * MIN
    got = window_intervals(win, tz, start, end)
    assert all(start <= i.start < i.end <= end for i in got)
    assert merge(got) == got
    # Splitting the range changes nothing.
    middle = start + (length // 3) * MIN
    parts = window_intervals(win, tz, start, middle) + window_intervals(win, tz, middle, end)
    assert merge(parts) == got


@settings(max_examples=150, deadline=None)
@given(windows_st, zones, change_days)
def test_occurrences_start_on_the_wall_clock_and_never_overlap(
    win: WeeklyWindow, tz: ZoneInfo, day: date
) -> None:
    days = [day + k * DAY for k in range(-2, 3)]
    found = [occurrence(win, tz, d) for d in days]
    for d, span in zip(days, found, strict=True):
        if span is None:
            continue
        local = span.start.astimezone(tz)
        wall = datetime.combine(d, win.start)
        exists = wall.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
        if exists:
            assert local.replace(tzinfo=None) == wall
        else:  # skipped by the clocks: the occurrence starts as they jump past it
            assert local.replace(tzinfo=None) > wall
            before = (span.start - timedelta(seconds=1)).astimezone(tz).replace(tzinfo=None)
            assert before < wall
    spans = [s for s in found if s is not None]
    assert all(a.end <= b.start for a, b in pairwise(spans))


@settings(max_examples=100, deadline=None)
@given(zones, change_days, st.integers(0, 23), st.integers(0, 59))
def test_a_full_day_window_lasts_23_24_or_25_hours(
    tz: ZoneInfo, day: date, hour: int, minute: int
) -> None:
    whole_hour = window(EVERY_DAY, f"{hour:02}:00", f"{hour:02}:00")
    any_minute = WeeklyWindow(EVERY_DAY, time(hour, minute), time(hour, minute))
    for d in (day - DAY, day, day + DAY):
        span = occurrence(whole_hour, tz, d)
        assert span is not None and span.duration in (23 * H, 24 * H, 25 * H)
        span = occurrence(any_minute, tz, d)
        assert span is not None and 23 * H <= span.duration <= 25 * H
    # Every day, every minute: together they cover everything.
    start = datetime.combine(day, time(), UTC) - DAY
    got = window_intervals(any_minute, tz, start, start + 3 * DAY)
    assert got == [Interval(start, start + 3 * DAY)]


# --- rules --------------------------------------------------------------------------------------
