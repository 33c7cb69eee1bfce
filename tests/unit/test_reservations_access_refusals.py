"""Access rules: rule intervals, subjects and objects, deny by default, limits and quotas.

Shared values and builders: tests/support/access_rules.py.
"""

from __future__ import annotations

import json

from services.reservations.rules.access import (
    access_refusals,
    allowed_by_gpu,
    rule_applies_to,
    rule_covers,
    rule_intervals,
)
from services.reservations.rules.domain import (
    Interval,
    Limits,
)
from tests.support.access_rules import (
    ALICE,
    BOB,
    DAY,
    DGX1,
    EVERY_DAY,
    GPUS,
    MIN,
    MONDAY,
    WEEKDAYS,
    H,
    booking,
    codes,
    rule,
    utc,
    window,
)


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
        "alice may not use GPU dgx1:2 from 2026-11-23 18:00 to 20:00 UTC: "
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
