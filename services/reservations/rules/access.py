"""Who may use which GPU when (pure): access rules, deny by default, combined by union.

A rule grants its subjects (users, groups) its objects (GPUs, hosts, or all GPUs) within
[valid_from, valid_until) and, if it has windows, only during them (wall-clock times in the
rule's zone, so "08:00-18:00 Europe/Warsaw" follows daylight saving time). A rule with limits
grants nothing to a request that breaks one of them; another rule may still grant it. A rule's
idle policy (`idle.py`) applies to the running reservations it grants: `idle_policy_of`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from services.reservations.idle.policy import most_lenient, policy_problems
from services.reservations.rules.domain import (
    AccessRule,
    Booking,
    Gpu,
    IdlePolicy,
    Interval,
    Member,
    Refusal,
    WeeklyWindow,
)
from services.reservations.rules.intervals import intersect, merge, subtract, uncovered
from services.shared.gpu_labels import (
    failed_terms,
    gpu_labels,
    matches,
    selector_problem,
    selector_text,
)

_DAY = timedelta(days=1)
_WEEK = timedelta(days=7)
_HOUR = timedelta(hours=1)
_MIDNIGHT = time(0, 0)
# Hours are compared as floats: forgive rounding, never a real overrun (3.6 ms here).
_QUOTA_SLACK_HOURS = 1e-6
_LISTED_GAPS = 3  # periods a not_allowed message names before "and N more"


# --- time zones and windows -------------------------------------------------------------------


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The zone of a rule (raises ZoneInfoNotFoundError, ValueError or OSError if unknown)."""
    return ZoneInfo(name)


def local_to_utc(day: date, at: time, tz: ZoneInfo) -> datetime:
    """The first instant at which the clock in `tz` reads `at` on `day`, or later.

    A wall time that occurs twice (autumn) is its first occurrence; one that does not occur
    (skipped in spring) is the end of the jump, so a window starting or ending in the gap
    starts or ends when the clocks go forward.
    """
    wall = datetime.combine(day, at).replace(tzinfo=None, fold=0)
    instant = wall.replace(tzinfo=tz).astimezone(UTC)  # fold=0: the earlier one of a repeat
    if instant.astimezone(tz).replace(tzinfo=None) == wall:
        return instant
    # In a gap fold=1 reads the wall time with the offset after the jump, an instant before
    # it; fold=0 (above) uses the offset before the jump, an instant after it.
    before = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    return _jump_instant(before, instant, tz)


def _jump_instant(before: datetime, after: datetime, tz: ZoneInfo) -> datetime:
    """The instant the UTC offset changes between `before` and `after` (tzdata uses seconds)."""
    offset_after = after.astimezone(tz).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == offset_after:
            high = mid
        else:
            low = mid
    return datetime.fromtimestamp(high, UTC)


def occurrence(window: WeeklyWindow, tz: ZoneInfo, day: date) -> Interval | None:
    """The window starting on local date `day` in UTC (whatever the weekday); None if empty.

    `end <= start` runs into the next day (`start == end`: 24 h of wall-clock time).
    """
    start = local_to_utc(day, window.start, tz)
    end_day = day if window.end > window.start else day + _DAY
    end = local_to_utc(end_day, window.end, tz)
    return Interval(start, end) if end > start else None


def window_intervals(
    window: WeeklyWindow, tz: ZoneInfo, start: datetime, end: datetime
) -> list[Interval]:
    """The window's occurrences overlapping [start, end), clipped to it, merged and sorted."""
    if end <= start:
        return []
    found: list[Interval] = []
    # A day before: an occurrence over midnight reaches into the first day.
    day = start.astimezone(tz).date() - _DAY
    last = end.astimezone(tz).date() + _DAY
    while day <= last:
        if day.weekday() in window.days:
            span = occurrence(window, tz, day)
            if span is not None and span.start < end and start < span.end:
                found.append(Interval(max(span.start, start), min(span.end, end)))
        day += _DAY
    return merge(found)


# --- rules --------------------------------------------------------------------------------------


def rule_problems(rule: AccessRule) -> dict[str, str]:
    """Why a rule cannot be stored, by field; empty when it is valid.

    A rule without subjects is valid (it grants nobody anything, e.g. while being prepared).
    """
    problems: dict[str, str] = {}
    try:
        zone(rule.timezone)
    except (KeyError, ValueError, OSError):
        problems["timezone"] = f"unknown time zone {rule.timezone!r}"
    if rule.valid_from.tzinfo is None:
        problems["valid_from"] = "needs a time zone"
    elif rule.valid_until is not None and rule.valid_until <= rule.valid_from:
        problems["valid_until"] = "must be later than valid_from"
    window_problem = _windows_problem(rule.windows)
    if window_problem:
        problems["windows"] = window_problem
    problems.update(_limits_problems(rule))
    if rule.idle_policy is not None:
        problems.update(policy_problems(rule.idle_policy))
    if not (rule.all_gpus or rule.hosts or rule.gpus or rule.labels):
        problems["objects"] = "grant all GPUs, or name hosts, GPUs or labels"
    label_problem = selector_problem(rule.labels)
    if label_problem:
        problems["labels"] = label_problem
    return problems


def _windows_problem(windows: Sequence[WeeklyWindow]) -> str | None:
    for number, window in enumerate(windows, start=1):
        if not window.days:
            return f"window {number} has no days"
        if any(not 0 <= day <= 6 for day in window.days):
            return f"window {number}: days are 0 (Monday) to 6 (Sunday)"
    return None


def _limits_problems(rule: AccessRule) -> dict[str, str]:
    limits = rule.limits
    problems: dict[str, str] = {}
    if limits.max_gpus is not None and limits.max_gpus < 1:
        problems["max_gpus"] = "must be at least 1"
    if limits.max_duration is not None and limits.max_duration <= timedelta(0):
        problems["max_duration"] = "must be longer than zero"
    quota = limits.max_gpu_hours_per_week
    if quota is not None and not quota > 0:  # `not >` also refuses NaN
        problems["max_gpu_hours_per_week"] = "must be more than zero"
    return problems


def rule_intervals(rule: AccessRule, start: datetime, end: datetime) -> list[Interval]:
    """When the rule grants anything within [start, end): validity, then windows (merged)."""
    lo = max(start, rule.valid_from)
    hi = end if rule.valid_until is None else min(end, rule.valid_until)
    if hi <= lo:
        return []
    if not rule.windows:
        return [Interval(lo, hi)]
    tz = zone(rule.timezone)
    return merge(span for window in rule.windows for span in window_intervals(window, tz, lo, hi))


def rule_applies_to(rule: AccessRule, member: Member) -> bool:
    return member.username in rule.users or not rule.groups.isdisjoint(member.groups)


def idle_policy_of(
    rules: Sequence[AccessRule],
    member: Member,
    gpu_uuids: Sequence[str],
    known: Mapping[str, Gpu],
    at: datetime,
) -> IdlePolicy | None:
    """The idle policy of `member`'s reservation of `gpu_uuids` at `at`: of the rules that grant
    the member any of those GPUs then and have a policy, the most lenient (`idle.most_lenient`).
    Rules without a policy neither add one nor turn the others off."""
    moment = Interval(at, at + timedelta(microseconds=1))
    return most_lenient(
        rule.idle_policy
        for rule in rules
        if rule.idle_policy is not None
        and rule_applies_to(rule, member)
        and any(_covers_uuid(rule, uuid, known) for uuid in gpu_uuids)
        and intersect(rule_intervals(rule, moment.start, moment.end), [moment])
    )


def rule_covers(rule: AccessRule, gpu: Gpu) -> bool:
    if rule.labels and not matches(gpu_labels(gpu.name, gpu.memory_total_mib), rule.labels):
        return False
    named = rule.all_gpus or gpu.host in rule.hosts or gpu.uuid in rule.gpus
    return named or (bool(rule.labels) and not (rule.hosts or rule.gpus))


def _covers_uuid(rule: AccessRule, uuid: str, known: Mapping[str, Gpu]) -> bool:
    """rule_covers for a GPU known by uuid only: its host and hardware come from `known` if
    there (a rule with labels covers no GPU it does not know)."""
    gpu = known.get(uuid)
    if gpu is not None:
        return rule_covers(rule, gpu)
    return not rule.labels and (rule.all_gpus or uuid in rule.gpus)


_Spans = Callable[[int], list[Interval]]


def _spans_of(rules: Sequence[AccessRule], start: datetime, end: datetime) -> _Spans:
    """rule_intervals per rule position, each computed at most once."""
    cache: dict[int, list[Interval]] = {}

    def spans(position: int) -> list[Interval]:
        if position not in cache:
            cache[position] = rule_intervals(rules[position], start, end)
        return cache[position]

    return spans


# --- allowed time (no limits) ---------------------------------------------------------------


def allowed_by_gpu(
    member: Member, rules: Sequence[AccessRule], gpus: Sequence[Gpu], start: datetime, end: datetime
) -> dict[str, list[Interval]]:
    """Per GPU uuid, when the member may use it within [start, end), limits aside (merged).

    Each rule's intervals are computed once, and GPUs covered by the same rules share one
    union (and one list object: do not mutate it), so a whole fleet costs about one GPU.
    """
    applicable = [rule for rule in rules if rule_applies_to(rule, member)]
    spans = _spans_of(applicable, start, end)
    unions: dict[tuple[int, ...], list[Interval]] = {}
    allowed: dict[str, list[Interval]] = {}
    for gpu in gpus:
        key = tuple(i for i, rule in enumerate(applicable) if rule_covers(rule, gpu))
        if key not in unions:
            unions[key] = merge(span for i in key for span in spans(i))
        allowed[gpu.uuid] = unions[key]
    return allowed


# --- checking one request ---------------------------------------------------------------------


def access_refusals(
    member: Member,
    rules: Sequence[AccessRule],
    gpus: Sequence[Gpu],
    start: datetime,
    end: datetime,
    owner_bookings: Sequence[Booking],
    known_gpus: Mapping[str, Gpu] | None = None,
) -> list[Refusal]:
    """Why `member` may not hold `gpus` over [start, end); an empty list means allowed.

    `owner_bookings` are the member's other active reservations (not the one being edited),
    at least those overlapping the weeks [start, end) touches. `known_gpus` (uuid -> GPU)
    tells the hosts of their GPUs, which host rules need; the requested GPUs are known anyway.
    Order: not_allowed per GPU (host, index), then limit refusals by rule id.
    """
    known = {**(known_gpus or {}), **{gpu.uuid: gpu for gpu in gpus}}
    applicable = [rule for rule in rules if rule_applies_to(rule, member)]
    failed = {
        i: refusals
        for i, rule in enumerate(applicable)
        if (refusals := _limit_refusals(rule, gpus, start, end, owner_bookings, known))
    }
    spans = _spans_of(applicable, start, end)
    target = Interval(start, end)
    not_allowed: list[Refusal] = []
    blocking: set[int] = set()
    for gpu in sorted(gpus, key=lambda g: (g.host, g.index, g.uuid)):
        covering = [i for i, rule in enumerate(applicable) if rule_covers(rule, gpu)]
        gaps = uncovered(target, [s for i in covering if i not in failed for s in spans(i)])
        if not gaps:
            continue
        # Rules that would have granted some of the gap but for a limit: those limits are
        # the reason; what no rule grants at all is not_allowed.
        helpers = [i for i in covering if i in failed and intersect(spans(i), gaps)]
        blocking.update(helpers)
        never = subtract(gaps, merge(s for i in helpers for s in spans(i)))
        if never:
            not_allowed.append(_not_allowed(member, gpu, never, applicable))
    by_rule = sorted(blocking, key=lambda i: (applicable[i].id, i))
    return not_allowed + [refusal for i in by_rule for refusal in failed[i]]


def use_refusals(
    member: Member, rules: Sequence[AccessRule], gpus: Sequence[Gpu], start: datetime, end: datetime
) -> list[Refusal]:
    """Why `member` may not use `gpus` over [start, end) without reserving them (a job on free
    GPUs): only the rules' times count, their reservation limits do not."""
    allowed = allowed_by_gpu(member, rules, gpus, start, end)
    target = Interval(start, end)
    refusals = []
    for gpu in sorted(gpus, key=lambda g: (g.host, g.index, g.uuid)):
        gaps = uncovered(target, allowed[gpu.uuid])
        if gaps:
            applicable = [rule for rule in rules if rule_applies_to(rule, member)]
            refusals.append(_not_allowed(member, gpu, gaps, applicable))
    return refusals


def _not_allowed(
    member: Member, gpu: Gpu, gaps: list[Interval], applicable: Sequence[AccessRule] = ()
) -> Refusal:
    periods = [period_text(gap) for gap in gaps[:_LISTED_GAPS]]
    if len(gaps) > _LISTED_GAPS:
        periods.append(f"{len(gaps) - _LISTED_GAPS} more periods")
    when = periods[0] if len(periods) == 1 else ", ".join(periods[:-1]) + " and " + periods[-1]
    missed = _label_misses(applicable, gpu)
    because = "".join(
        f"; rule '{rule.name}' is for GPUs labelled {selector_text(terms)}"
        for rule, terms in missed
    )
    details: dict[str, Any] = {
        "gpu": gpu.uuid,
        "host": gpu.host,
        "index": gpu.index,
        "uncovered": [gap.to_dict() for gap in gaps],
    }
    if missed:
        details["labels_failed"] = [
            {**_rule_details(rule), "failed": terms} for rule, terms in missed
        ]
    return Refusal(
        code="not_allowed",
        message=(
            f"{member.username} may not use GPU {gpu.host}:{gpu.index} {when}: "
            f"no access rule covers that time{because}"
        ),
        details=details,
    )


def _label_misses(rules: Sequence[AccessRule], gpu: Gpu) -> list[tuple[AccessRule, list[str]]]:
    """The member's rules that would cover the GPU but for their labels, with the terms the
    GPU fails: what a refusal names (at most _LISTED_GAPS of them)."""
    missed = []
    for rule in rules:
        if not rule.labels:
            continue
        named = rule.all_gpus or gpu.host in rule.hosts or gpu.uuid in rule.gpus
        if named or not (rule.hosts or rule.gpus):
            failed = failed_terms(gpu_labels(gpu.name, gpu.memory_total_mib), rule.labels)
            if failed:
                missed.append((rule, failed))
    return missed[:_LISTED_GAPS]


def period_text(interval: Interval) -> str:
    """'from 2026-11-23 18:00 to 20:00 UTC' (the end's date only when it differs)."""
    start, end = interval.start.astimezone(UTC), interval.end.astimezone(UTC)
    end_format = "%H:%M" if end.date() == start.date() else "%Y-%m-%d %H:%M"
    return f"from {start:%Y-%m-%d %H:%M} to {end.strftime(end_format)} UTC"


# --- limits -----------------------------------------------------------------------------------


def _limit_refusals(
    rule: AccessRule,
    gpus: Sequence[Gpu],
    start: datetime,
    end: datetime,
    owner_bookings: Sequence[Booking],
    known: Mapping[str, Gpu],
) -> list[Refusal]:
    """The rule's limits this request breaks, counting only the GPUs the rule covers."""
    limits = rule.limits
    covered = sum(1 for gpu in gpus if rule_covers(rule, gpu))
    if not limits.any or covered == 0:
        return []  # a rule that covers none of the request has nothing to say about it
    refusals: list[Refusal] = []
    if limits.max_duration is not None and end - start > limits.max_duration:
        refusals.append(_duration_refusal(rule, limits.max_duration, end - start))
    held = [(b, _covered_count(rule, b, known)) for b in owner_bookings]
    held = [(b, n) for b, n in held if n > 0]
    if limits.max_gpus is not None:
        at_once = _peak(held, start, end) + covered
        if at_once > limits.max_gpus:
            refusals.append(_gpus_refusal(rule, limits.max_gpus, at_once))
    quota = limits.max_gpu_hours_per_week
    if quota is not None:
        refusal = _quota_refusal(rule, quota, held, covered, start, end)
        if refusal is not None:
            refusals.append(refusal)
    return refusals


def _covered_count(rule: AccessRule, booking: Booking, known: Mapping[str, Gpu]) -> int:
    return sum(1 for uuid in booking.gpus if _covers_uuid(rule, uuid, known))


def _peak(held: Sequence[tuple[Booking, int]], start: datetime, end: datetime) -> int:
    """The most GPUs the bookings hold at once within [start, end)."""
    changes: list[tuple[datetime, int]] = []
    for booking, count in held:
        lo, hi = max(booking.start, start), min(booking.end, end)
        if lo < hi:
            changes += [(lo, count), (hi, -count)]
    # At one instant releases (negative) sort first: [a, b) and [b, c) never overlap.
    changes.sort()
    peak = now = 0
    for _, change in changes:
        now += change
        peak = max(peak, now)
    return peak


def _weeks(tz: ZoneInfo, start: datetime, end: datetime) -> list[Interval]:
    """The weeks (Monday 00:00 local to the next) that [start, end) touches, in UTC."""
    local = start.astimezone(tz).date()
    monday = local - timedelta(days=local.weekday())
    weeks: list[Interval] = []
    week_start = local_to_utc(monday, _MIDNIGHT, tz)
    while week_start < end:
        monday += _WEEK
        week_end = local_to_utc(monday, _MIDNIGHT, tz)
        weeks.append(Interval(week_start, week_end))
        week_start = week_end
    return weeks


def _overlap(start: datetime, end: datetime, week: Interval) -> timedelta:
    return max(timedelta(0), min(end, week.end) - max(start, week.start))


def _quota_refusal(
    rule: AccessRule,
    quota: float,
    held: Sequence[tuple[Booking, int]],
    covered: int,
    start: datetime,
    end: datetime,
) -> Refusal | None:
    """A refusal for the first week whose GPU-hours would exceed the quota, if any."""
    for week in _weeks(zone(rule.timezone), start, end):
        # timedelta sums are exact; only the final comparison is in (float) hours.
        used = sum((_overlap(b.start, b.end, week) * n for b, n in held), timedelta(0))
        wanted = _overlap(start, end, week) * covered
        if (used + wanted) / _HOUR > quota + _QUOTA_SLACK_HOURS:
            return _quota_week_refusal(rule, quota, week, used / _HOUR, wanted / _HOUR)
    return None


def _rule_details(rule: AccessRule) -> dict[str, Any]:
    return {"rule_id": rule.id, "rule_name": rule.name}


def _duration_refusal(rule: AccessRule, limit: timedelta, requested: timedelta) -> Refusal:
    return Refusal(
        code="limit_max_duration",
        message=(
            f"rule '{rule.name}' allows reservations of at most {_duration_text(limit)}; "
            f"this one lasts {_duration_text(requested)}"
        ),
        details={
            **_rule_details(rule),
            "limit": _number(limit.total_seconds()),
            "requested": _number(requested.total_seconds()),
        },
    )


def _gpus_refusal(rule: AccessRule, limit: int, at_once: int) -> Refusal:
    return Refusal(
        code="limit_max_gpus",
        message=(
            f"rule '{rule.name}' allows at most {limit} GPUs at once; "
            f"this reservation would hold {at_once}"
        ),
        details={**_rule_details(rule), "limit": limit, "requested": at_once},
    )


def _quota_week_refusal(
    rule: AccessRule, quota: float, week: Interval, used: float, wanted: float
) -> Refusal:
    monday = week.start.astimezone(zone(rule.timezone)).date()
    return Refusal(
        code="limit_quota",
        message=(
            f"rule '{rule.name}' allows {_hours_text(quota)} GPU-hours per week; "
            f"the week of {monday.isoformat()} already has {_hours_text(used)} booked "
            f"and this reservation would add {_hours_text(wanted)}"
        ),
        details={
            **_rule_details(rule),
            "limit": _number(quota),
            "requested": _number(round(wanted, 4)),
            "week_start": week.start.isoformat(),
            "used": _number(round(used, 4)),
        },
    )


def _number(value: float) -> int | float:
    """Whole numbers as ints, so JSON and messages show 3600, not 3600.0."""
    return int(value) if float(value).is_integer() else value


def _hours_text(hours: float) -> str:
    """'40', '7.5', '0.33': two decimals at most, no exponent."""
    value = round(float(hours), 2)
    return str(int(value)) if value.is_integer() else str(value)


def _duration_text(span: timedelta) -> str:
    """'8 h', '30 min', '1 h 30 min', '2 d 4 h' (seconds are left out)."""
    minutes = int(span.total_seconds() // 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n]
    return " ".join(parts) if parts else f"{int(span.total_seconds())} s"
