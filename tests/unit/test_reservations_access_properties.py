"""Access rules: properties of the refusals, drawn by Hypothesis.

Shared values and builders: tests/support/access_rules.py.
"""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.reservations.rules.access import (
    access_refusals,
    local_to_utc,
    zone,
)
from services.reservations.rules.domain import (
    AccessRule,
    Booking,
    Interval,
    Limits,
    Refusal,
)
from services.reservations.rules.intervals import merge, uncovered
from tests.support.access_rules import (
    ALICE,
    BOB,
    DAY,
    DGX1,
    GPUS,
    MIN,
    MONDAY,
    WEEKDAYS,
    H,
    booking,
    codes,
    rule,
    window,
    windows_st,
)

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
