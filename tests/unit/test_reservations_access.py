"""Access rules: validation, weekly windows across midnight and DST, deny by default, limits."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reservations.rules.access import (
    access_refusals,
    allowed_by_gpu,
    local_to_utc,
    occurrence,
    rule_applies_to,
    rule_covers,
    rule_intervals,
    rule_problems,
    window_intervals,
    zone,
)
from services.reservations.rules.domain import (
    AccessRule,
    Booking,
    Gpu,
    Interval,
    Limits,
    Member,
    Refusal,
    WeeklyWindow,
)
from services.reservations.rules.intervals import merge, uncovered

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
        assert problems[field] == "grant all GPUs, or name hosts or GPUs"


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


def test_rule_intervals_cut_validity_and_windows() -> None:
    r = rule(
        valid_from=utc(2026, 11, 24, 12),
        valid_until=utc(2026, 11, 26, 8),
        windows=(window(WEEKDAYS, "08:00", "18:00"),),
        timezone="Europe/Warsaw",
    )
    got = rule_intervals(r, MONDAY, MONDAY + 7 * DAY)
    assert got == [
        Interval(utc(2026, 11, 24, 12), utc(2026, 11, 24, 17)),
        Interval(utc(2026, 11, 25, 7), utc(2026, 11, 25, 17)),
        Interval(utc(2026, 11, 26, 7), utc(2026, 11, 26, 8)),
    ]
    assert rule_intervals(rule(), MONDAY, MONDAY + H) == [Interval(MONDAY, MONDAY + H)]
    assert rule_intervals(rule(valid_until=utc(2021, 1, 1)), MONDAY, MONDAY + H) == []


def test_subjects_and_objects() -> None:
    by_group = rule(users=frozenset(), groups=frozenset({"phd"}), all_gpus=False)
    assert rule_applies_to(by_group, ALICE) and not rule_applies_to(by_group, BOB)
    assert rule_applies_to(rule(), ALICE) and not rule_applies_to(rule(), BOB)
    on_host = rule(all_gpus=False, hosts=frozenset({"dgx2"}), gpus=frozenset({GPUS[1].uuid}))
    assert [g.index for g in GPUS if rule_covers(on_host, g)] == [1, 0, 1, 2, 3]
    assert all(rule_covers(rule(), g) for g in GPUS)


def test_allowed_by_gpu_unions_the_rules_covering_each_gpu() -> None:
    office = rule(1, windows=(window(WEEKDAYS, "08:00", "18:00"),), timezone="Europe/Warsaw")
    nights = rule(
        2, all_gpus=False, hosts=frozenset({"dgx2"}), windows=(window(EVERY_DAY, "18:00", "08:00"),)
    )
    not_mine = rule(3, users=frozenset({"bob"}))
    end = MONDAY + DAY
    allowed = allowed_by_gpu(ALICE, [office, nights, not_mine], GPUS, MONDAY, end)
    assert allowed[GPUS[0].uuid] == [Interval(utc(2026, 11, 23, 7), utc(2026, 11, 23, 17))]
    assert allowed[GPUS[4].uuid] == [
        Interval(MONDAY, utc(2026, 11, 23, 17)),
        Interval(utc(2026, 11, 23, 18), end),
    ]
    assert allowed[GPUS[4].uuid] is allowed[GPUS[7].uuid]  # same rules, one union
    assert allowed_by_gpu(BOB, [office, nights], GPUS, MONDAY, end)[GPUS[0].uuid] == []


# --- refusals: deny by default, windows ---------------------------------------------------------


def test_deny_by_default_one_refusal_per_gpu_in_host_index_order() -> None:
    start, end = utc(2026, 11, 23, 18), utc(2026, 11, 23, 20)
    refusals = access_refusals(ALICE, [], [GPUS[6], GPUS[2]], start, end, [])
    assert codes(refusals) == ["not_allowed", "not_allowed"]
    first = refusals[0]
    assert first.message == (
        "alice may not use dgx1 GPU 2 from 2026-11-23 18:00 to 20:00 UTC: "
        "no access rule covers that time"
    )
    assert first.details == {
        "gpu": GPUS[2].uuid,
        "host": "dgx1",
        "index": 2,
        "uncovered": [{"start": start.isoformat(), "end": end.isoformat()}],
    }
    assert refusals[1].details["host"] == "dgx2"
    json.dumps([r.to_dict() for r in refusals])


def test_a_window_allows_inside_and_names_the_gaps_outside() -> None:
    office = rule(windows=(window(WEEKDAYS, "08:00", "18:00"),), timezone="Europe/Warsaw")
    inside = access_refusals(
        ALICE, [office], DGX1[:2], utc(2026, 11, 23, 8), utc(2026, 11, 23, 16), []
    )
    assert inside == []
    start, end = utc(2026, 11, 23, 15), utc(2026, 11, 24, 9)
    [refusal] = access_refusals(ALICE, [office], [GPUS[1]], start, end, [])
    assert refusal.details["uncovered"] == [
        {"start": utc(2026, 11, 23, 17).isoformat(), "end": utc(2026, 11, 24, 7).isoformat()}
    ]
    assert "from 2026-11-23 17:00 to 2026-11-24 07:00 UTC" in refusal.message
    assert access_refusals(BOB, [office], [GPUS[1]], utc(2026, 11, 23, 8), utc(2026, 11, 23, 9), [])


def test_many_gaps_are_listed_briefly() -> None:
    office = rule(windows=(window(EVERY_DAY, "08:00", "18:00"),))
    [refusal] = access_refusals(ALICE, [office], [GPUS[0]], MONDAY, MONDAY + 6 * DAY, [])
    assert len(refusal.details["uncovered"]) == 7
    assert refusal.message.endswith("and 4 more periods: no access rule covers that time")


def test_a_rule_that_starts_later_or_has_ended_does_not_grant() -> None:
    later = rule(valid_from=MONDAY + H)
    [refusal] = access_refusals(ALICE, [later], [GPUS[0]], MONDAY, MONDAY + 2 * H, [])
    assert refusal.details["uncovered"] == [Interval(MONDAY, MONDAY + H).to_dict()]
    ended = rule(valid_until=MONDAY)
    assert codes(access_refusals(ALICE, [ended], [GPUS[0]], MONDAY, MONDAY + H, [])) == [
        "not_allowed"
    ]


def test_rules_combine_by_union_across_windows_and_gpus() -> None:
    days = rule(1, windows=(window(EVERY_DAY, "08:00", "20:00"),))
    nights = rule(
        2,
        windows=(window(EVERY_DAY, "20:00", "08:00"),),
        all_gpus=False,
        gpus=frozenset({GPUS[0].uuid}),
    )
    refusals = access_refusals(ALICE, [days, nights], DGX1[:2], MONDAY, MONDAY + 2 * DAY, [])
    assert [r.details["index"] for r in refusals] == [1]


# --- refusals: limits -------------------------------------------------------------------------


def test_max_duration_refuses_only_when_no_other_rule_grants() -> None:
    short = rule(1, name="short", limits=Limits(max_duration=8 * H))
    [refusal] = access_refusals(ALICE, [short], [GPUS[0]], MONDAY, MONDAY + 12 * H, [])
    assert refusal.code == "limit_max_duration"
    assert refusal.message == (
        "rule 'short' allows reservations of at most 8 h; this one lasts 12 h"
    )
    assert refusal.details == {
        "rule_id": 1,
        "rule_name": "short",
        "limit": 28800,
        "requested": 43200,
    }
    assert access_refusals(ALICE, [short], [GPUS[0]], MONDAY, MONDAY + 8 * H, []) == []
    unlimited_dgx1 = rule(2, all_gpus=False, hosts=frozenset({"dgx1"}))
    assert (
        access_refusals(ALICE, [short, unlimited_dgx1], [GPUS[0]], MONDAY, MONDAY + 12 * H, [])
        == []
    )
    # On a GPU the unlimited rule does not cover, the limit still bites.
    refusals = access_refusals(
        ALICE, [short, unlimited_dgx1], [GPUS[0], GPUS[4]], MONDAY, MONDAY + 12 * H, []
    )
    assert codes(refusals) == ["limit_max_duration"]


def test_max_gpus_counts_the_peak_of_the_owners_other_reservations() -> None:
    four = rule(1, name="phd weekdays", limits=Limits(max_gpus=4))
    start, end = MONDAY + 10 * H, MONDAY + 14 * H
    held = [
        booking(10, MONDAY + 8 * H, MONDAY + 11 * H, GPUS[4], GPUS[5]),
        booking(11, MONDAY + 11 * H, MONDAY + 12 * H, GPUS[6], GPUS[7]),  # touches #10
        booking(12, MONDAY + 14 * H, MONDAY + 20 * H, GPUS[4], GPUS[5], GPUS[6]),  # after
    ]
    assert access_refusals(ALICE, [four], DGX1[:2], start, end, held) == []
    held.append(booking(13, MONDAY + 10 * H + 30 * MIN, MONDAY + 11 * H + 30 * MIN, GPUS[3]))
    refusals = access_refusals(ALICE, [four], DGX1[:2], start, end, held)
    assert [(r.code, r.details["requested"]) for r in refusals] == [("limit_max_gpus", 5)]


def test_max_gpus_message_and_numbers() -> None:
    four = rule(1, name="phd weekdays", limits=Limits(max_gpus=4))
    held = [booking(10, MONDAY, MONDAY + DAY, *GPUS[4:8])]
    [refusal] = access_refusals(ALICE, [four], DGX1[:2], MONDAY + H, MONDAY + 2 * H, held)
    assert refusal.message == (
        "rule 'phd weekdays' allows at most 4 GPUs at once; this reservation would hold 6"
    )
    assert refusal.details == {
        "rule_id": 1,
        "rule_name": "phd weekdays",
        "limit": 4,
        "requested": 6,
    }


def test_limits_count_only_the_gpus_the_rule_covers() -> None:
    dgx1_two = rule(1, all_gpus=False, hosts=frozenset({"dgx1"}), limits=Limits(max_gpus=2))
    anywhere = rule(2, all_gpus=False, hosts=frozenset({"dgx2"}))
    # Held on dgx2: does not count against the dgx1 rule (known_gpus tells the hosts).
    held = [booking(10, MONDAY, MONDAY + DAY, *GPUS[4:8])]
    known = {g.uuid: g for g in GPUS}
    request = [GPUS[0], GPUS[1], GPUS[4]]
    assert (
        access_refusals(ALICE, [dgx1_two, anywhere], request, MONDAY, MONDAY + H, held, known) == []
    )
    held.append(booking(11, MONDAY, MONDAY + DAY, GPUS[3]))
    refusals = access_refusals(
        ALICE, [dgx1_two, anywhere], request, MONDAY, MONDAY + H, held, known
    )
    assert [(r.code, r.details["requested"]) for r in refusals] == [("limit_max_gpus", 3)]
    # A limited rule covering none of the request has nothing to say.
    other = rule(3, all_gpus=False, hosts=frozenset({"dgx2"}), limits=Limits(max_gpus=1))
    assert access_refusals(ALICE, [other, dgx1_two], DGX1[:2], MONDAY, MONDAY + H, []) == []


def test_quota_weeks_start_on_monday_in_the_rules_zone() -> None:
    quota = rule(
        1, name="quota", timezone="Europe/Warsaw", limits=Limits(max_gpu_hours_per_week=10)
    )
    # The Warsaw week starts Sunday 23:00 UTC; 8 GPU-hours on the Sunday evening before it
    # belong to the previous week.
    week_start = MONDAY - H
    held = [booking(10, week_start - 4 * H, week_start, GPUS[4], GPUS[5])]
    assert access_refusals(ALICE, [quota], DGX1[:2], week_start, week_start + 5 * H, held) == []
    held.append(booking(11, week_start + DAY, week_start + DAY + 3 * H, GPUS[4]))
    [refusal] = access_refusals(ALICE, [quota], DGX1[:2], week_start, week_start + 5 * H, held)
    assert refusal.code == "limit_quota"
    assert refusal.details == {
        "rule_id": 1,
        "rule_name": "quota",
        "limit": 10,
        "requested": 10,
        "week_start": week_start.isoformat(),
        "used": 3,
    }
    assert refusal.message == (
        "rule 'quota' allows 10 GPU-hours per week; the week of 2026-11-23 already has 3 "
        "booked and this reservation would add 10"
    )


def test_a_request_across_weeks_is_counted_per_week() -> None:
    quota = rule(1, limits=Limits(max_gpu_hours_per_week=24))
    sunday_noon = MONDAY - 12 * H
    # 24 h across midnight: 12 h in each (UTC) week, well within 24 each.
    assert access_refusals(ALICE, [quota], [GPUS[0]], sunday_noon, sunday_noon + DAY, []) == []
    held = [booking(10, MONDAY + 2 * DAY, MONDAY + 2 * DAY + 13 * H, GPUS[1])]
    [refusal] = access_refusals(ALICE, [quota], [GPUS[0]], sunday_noon, sunday_noon + DAY, held)
    assert refusal.details["week_start"] == MONDAY.isoformat()
    assert (refusal.details["used"], refusal.details["requested"]) == (13, 12)


def test_limit_refusals_are_one_per_rule_and_limit_sorted_by_rule() -> None:
    limits = Limits(max_gpus=1, max_duration=H, max_gpu_hours_per_week=1)
    rules = [rule(7, limits=limits), rule(3, limits=Limits(max_duration=H))]
    refusals = access_refusals(ALICE, rules, DGX1, MONDAY, MONDAY + 2 * DAY, [])
    assert [(r.details["rule_id"], r.code) for r in refusals] == [
        (3, "limit_max_duration"),
        (7, "limit_max_duration"),
        (7, "limit_max_gpus"),
        (7, "limit_quota"),
    ]


def test_a_limit_and_a_time_no_rule_covers_are_both_reported() -> None:
    office = rule(1, windows=(window(EVERY_DAY, "08:00", "18:00"),), limits=Limits(max_duration=H))
    refusals = access_refusals(ALICE, [office], [GPUS[0]], MONDAY + 8 * H, MONDAY + 20 * H, [])
    assert codes(refusals) == ["not_allowed", "limit_max_duration"]
    assert refusals[0].details["uncovered"] == [
        Interval(MONDAY + 18 * H, MONDAY + 20 * H).to_dict()
    ]
    # A limited rule that would not have covered the gap anyway is not blamed.
    mornings = rule(
        2, windows=(window(EVERY_DAY, "06:00", "07:00"),), limits=Limits(max_duration=H)
    )
    refusals = access_refusals(ALICE, [mornings], [GPUS[0]], MONDAY + 8 * H, MONDAY + 20 * H, [])
    assert codes(refusals) == ["not_allowed"]


# --- refusals: properties ---------------------------------------------------------------------

hours = st.integers(0, 14 * 24)
rules_st = st.builds(
    rule,
    st.integers(1, 50),
    valid_from=hours.map(lambda h: MONDAY - 7 * DAY + h * H),
    valid_until=st.none() | hours.map(lambda h: MONDAY - 7 * DAY + h * H + H),
    users=st.sampled_from([frozenset({"alice"}), frozenset(), frozenset({"bob"})]),
    groups=st.sampled_from([frozenset(), frozenset({"phd"})]),
    all_gpus=st.booleans(),
    hosts=st.frozensets(st.sampled_from(["dgx1", "dgx2"])),
    gpus=st.frozensets(st.sampled_from([g.uuid for g in GPUS]), max_size=3),
    windows=st.lists(windows_st, max_size=2).map(tuple),
    timezone=st.sampled_from(["UTC", "Europe/Warsaw", "America/New_York"]),
    limits=st.builds(
        Limits,
        max_gpus=st.none() | st.integers(1, 6),
        max_duration=st.none() | st.integers(1, 48).map(lambda h: h * H),
        max_gpu_hours_per_week=st.none() | st.integers(1, 200).map(float),
    ),
)
request_st = st.tuples(
    st.lists(st.sampled_from(GPUS), min_size=1, max_size=4, unique=True),
    hours.map(lambda h: MONDAY - 7 * DAY + h * H),
    st.integers(1, 72).map(lambda h: h * H),
)
held_st = st.lists(
    st.builds(
        lambda i, s, n, gpus: booking(i, s, s + n * H, *gpus),
        st.integers(100, 200),
        hours.map(lambda h: MONDAY - 7 * DAY + h * H),
        st.integers(1, 48),
        st.lists(st.sampled_from(GPUS), min_size=1, max_size=3, unique=True),
    ),
    max_size=4,
)
KNOWN = {g.uuid: g for g in GPUS}


def not_allowed_minutes(refusals: list[Refusal]) -> dict[str, list[Interval]]:
    return {
        r.details["gpu"]: merge(
            Interval(datetime.fromisoformat(u["start"]), datetime.fromisoformat(u["end"]))
            for u in r.details["uncovered"]
        )
        for r in refusals
        if r.code == "not_allowed"
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(rules_st, max_size=3), rules_st, request_st, held_st)
def test_adding_a_rule_never_adds_refusals(
    rules: list[AccessRule], extra: AccessRule, request: Any, held: list[Booking]
) -> None:
    gpus, start, length = request
    before = access_refusals(ALICE, rules, gpus, start, start + length, held, KNOWN)
    after = access_refusals(ALICE, [*rules, extra], gpus, start, start + length, held, KNOWN)
    if not before:
        assert after == []
    old_limits = [r for r in after if r.code != "not_allowed" and r.details["rule_id"] != extra.id]
    assert all(r in before for r in old_limits)
    gaps_before, gaps_after = not_allowed_minutes(before), not_allowed_minutes(after)
    for uuid, gaps in gaps_after.items():
        assert uuid in gaps_before
        assert all(not uncovered(gap, gaps_before[uuid]) for gap in gaps)


@settings(max_examples=100, deadline=None)
@given(request_st, held_st, st.lists(rules_st, max_size=2))
def test_an_open_rule_without_windows_covers_everything_for_its_subjects(
    request: Any, held: list[Booking], others: list[AccessRule]
) -> None:
    gpus, start, length = request
    open_rule = rule(99, valid_from=start - 30 * DAY, groups=frozenset({"phd"}), users=frozenset())
    assert (
        access_refusals(ALICE, [*others, open_rule], gpus, start, start + length, held, KNOWN) == []
    )
    refusals = access_refusals(BOB, [open_rule], gpus, start, start + length, held, KNOWN)
    assert codes(refusals) == ["not_allowed"] * len(gpus)  # not bob's
    assert [r.details["gpu"] for r in refusals] == [
        g.uuid for g in sorted(gpus, key=lambda g: (g.host, g.index))
    ]
    assert all(
        r.details["uncovered"] == [Interval(start, start + length).to_dict()] for r in refusals
    )


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 100),
    st.lists(st.tuples(st.integers(1, 3), st.integers(1, 600)), max_size=4),
    st.sampled_from(["UTC", "Europe/Warsaw", "America/New_York"]),
)
def test_gpu_hours_exactly_at_the_quota_pass_and_a_minute_more_does_not(
    quota_hours: int, held_spec: list[tuple[int, int]], tz_name: str
) -> None:
    tz = zone(tz_name)
    week = local_to_utc(date(2026, 11, 23), time(), tz)
    held, used_minutes, at = [], 0, week
    for number, (gpu_count, minutes) in enumerate(held_spec):
        held.append(booking(number, at, at + minutes * MIN, *GPUS[4 : 4 + gpu_count]))
        used_minutes += gpu_count * minutes
        at += minutes * MIN
    left = quota_hours * 60 - used_minutes
    quota = rule(1, timezone=tz_name, limits=Limits(max_gpu_hours_per_week=float(quota_hours)))
    if left <= 0:
        refusals = access_refusals(ALICE, [quota], [GPUS[0]], week, week + MIN, held)
        assert codes(refusals) == ["limit_quota"]
        return
    end = week + left * MIN
    assert access_refusals(ALICE, [quota], [GPUS[0]], week, end, held) == []
    assert codes(access_refusals(ALICE, [quota], [GPUS[0]], week, end + MIN, held)) == [
        "limit_quota"
    ]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20), st.integers(1, 4)), max_size=5),
    st.integers(0, 40),
    st.integers(1, 20),
    st.integers(1, 8),
)
def test_max_gpus_agrees_with_counting_minute_by_minute(
    held_spec: list[tuple[int, int, int]], start_min: int, length: int, limit: int
) -> None:
    held = [
        booking(i, MONDAY + s * MIN, MONDAY + (s + n) * MIN, *GPUS[4 : 4 + k])
        for i, (s, n, k) in enumerate(held_spec)
    ]
    start, end = MONDAY + start_min * MIN, MONDAY + (start_min + length) * MIN
    peak = max(
        (
            sum(len(b.gpus) for b in held if b.start <= m < b.end)
            for m in (MONDAY + k * MIN for k in range(start_min, start_min + length))
        ),
        default=0,
    )
    capped = rule(1, limits=Limits(max_gpus=limit))
    refusals = access_refusals(ALICE, [capped], DGX1[:2], start, end, held)
    if peak + 2 <= limit:
        assert refusals == []
    else:
        assert [(r.code, r.details["requested"]) for r in refusals] == [
            ("limit_max_gpus", peak + 2)
        ]


def test_refusals_do_not_depend_on_the_order_of_rules_or_gpus() -> None:
    rules = [
        rule(1, limits=Limits(max_duration=H)),
        rule(
            2,
            all_gpus=False,
            hosts=frozenset({"dgx2"}),
            windows=(window(WEEKDAYS, "08:00", "18:00"),),
        ),
    ]
    a = access_refusals(ALICE, rules, GPUS, MONDAY, MONDAY + DAY, [])
    b = access_refusals(ALICE, rules[::-1], GPUS[::-1], MONDAY, MONDAY + DAY, [])
    assert a == b
