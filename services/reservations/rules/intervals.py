"""Set arithmetic on half-open intervals [start, end) (pure).

A *merged* list is sorted, with no empty, overlapping or touching members: the canonical form
of a set of instants. `merge` makes one; the other functions take and return merged lists, so
their results compare equal exactly when they cover the same instants.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from operator import attrgetter

from services.reservations.rules.domain import Interval

_BY_BOUNDS = attrgetter("start", "end")


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """The sorted union; touching intervals ([a, b) and [b, c)) become one, empty ones go."""
    merged: list[Interval] = []
    for interval in sorted(intervals, key=_BY_BOUNDS):
        if interval.end <= interval.start:
            continue
        if merged and interval.start <= merged[-1].end:
            last = merged[-1]
            if interval.end > last.end:
                merged[-1] = Interval(last.start, interval.end)
        else:
            merged.append(interval)  # intervals are immutable: reuse, do not copy
    return merged


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The instants in both of two merged lists (a merged list)."""
    result: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start = max(a[i].start, b[j].start)
        end = min(a[i].end, b[j].end)
        if start < end:
            result.append(Interval(start, end))
        # Whichever ends first cannot meet anything further in the other list.
        if a[i].end <= b[j].end:
            i += 1
        else:
            j += 1
    return result


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The instants of merged list `a` that are not in merged list `b` (a merged list)."""
    result: list[Interval] = []
    j = 0
    for interval in a:
        cursor = interval.start
        while j < len(b) and b[j].end <= cursor:
            j += 1
        k = j  # later members of `a` may still meet b[j], so scan on with a copy
        while k < len(b) and b[k].start < interval.end:
            if b[k].start > cursor:
                result.append(Interval(cursor, b[k].start))
            cursor = max(cursor, b[k].end)
            k += 1
        if cursor < interval.end:
            result.append(interval if cursor == interval.start else Interval(cursor, interval.end))
    return result


def clip(intervals: Iterable[Interval], start: datetime, end: datetime) -> list[Interval]:
    """Each interval cut to [start, end), in the given order; the ones left empty are dropped."""
    result: list[Interval] = []
    for interval in intervals:
        lo = max(interval.start, start)
        hi = min(interval.end, end)
        if lo < hi:
            same = lo == interval.start and hi == interval.end
            result.append(interval if same else Interval(lo, hi))
    return result


def uncovered(target: Interval, cover: Sequence[Interval]) -> list[Interval]:
    """The parts of `target` outside `cover` (any list: it is merged here)."""
    return subtract([target] if target.end > target.start else [], merge(cover))


def complement(intervals: Sequence[Interval], start: datetime, end: datetime) -> list[Interval]:
    """The parts of [start, end) outside merged list `intervals`."""
    return subtract([Interval(start, end)] if end > start else [], intervals)
