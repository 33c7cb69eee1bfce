"""Interval set arithmetic: merge, intersect, subtract, clip, uncovered (exact coverage)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reservations.rules.domain import Interval
from services.reservations.rules.intervals import (
    clip,
    complement,
    intersect,
    merge,
    subtract,
    uncovered,
)

T0 = datetime(2026, 11, 23, tzinfo=UTC)
SPAN = 60  # minutes the random intervals live in


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def iv(a: int, b: int) -> Interval:
    return Interval(at(a), at(b))


def minutes(intervals: list[Interval]) -> set[int]:
    """The minutes an interval list covers (all the random ones are minute-granular)."""
    covered: set[int] = set()
    for interval in intervals:
        first = (interval.start - T0) // timedelta(minutes=1)
        stop = (interval.end - T0) // timedelta(minutes=1)
        covered.update(range(first, stop))
    return covered


def is_merged(intervals: list[Interval]) -> bool:
    return all(i.start < i.end for i in intervals) and all(
        a.end < b.start for a, b in pairwise(intervals)
    )


intervals_st = st.lists(
    st.tuples(st.integers(0, SPAN), st.integers(0, SPAN)).map(lambda p: iv(min(p), max(p))),
    max_size=8,
)


def test_merge_joins_overlapping_and_touching_and_drops_empty() -> None:
    assert merge([iv(5, 7), iv(0, 2), iv(2, 3), iv(6, 9), iv(4, 4)]) == [iv(0, 3), iv(5, 9)]
    assert merge([]) == []
    assert merge([iv(1, 10), iv(2, 3)]) == [iv(1, 10)]


def test_intersect_subtract_clip_uncovered_examples() -> None:
    a = [iv(0, 10), iv(20, 30)]
    b = [iv(5, 25)]
    assert intersect(a, b) == [iv(5, 10), iv(20, 25)]
    assert subtract(a, b) == [iv(0, 5), iv(25, 30)]
    assert subtract(b, a) == [iv(10, 20)]
    assert clip(a, at(8), at(22)) == [iv(8, 10), iv(20, 22)]
    assert clip(a, at(10), at(20)) == []
    assert uncovered(iv(0, 30), [iv(20, 25), iv(0, 5), iv(4, 10)]) == [iv(10, 20), iv(25, 30)]
    assert uncovered(iv(3, 3), []) == []
    assert complement([iv(2, 4)], at(0), at(6)) == [iv(0, 2), iv(4, 6)]


def test_intervals_refuse_to_end_before_they_start() -> None:
    with pytest.raises(ValueError):
        iv(5, 4)


@settings(max_examples=200, deadline=None)
@given(intervals_st)
def test_merge_is_exact_and_canonical(intervals: list[Interval]) -> None:
    merged = merge(intervals)
    assert is_merged(merged)
    assert minutes(merged) == minutes(intervals)
    assert merge(merged) == merged
    assert merge(reversed(intervals)) == merged


@settings(max_examples=200, deadline=None)
@given(intervals_st, intervals_st)
def test_set_operations_match_sets_of_minutes(a: list[Interval], b: list[Interval]) -> None:
    ma, mb = merge(a), merge(b)
    assert minutes(intersect(ma, mb)) == minutes(ma) & minutes(mb)
    assert intersect(ma, mb) == intersect(mb, ma)  # symmetric
    assert is_merged(intersect(ma, mb))
    assert minutes(subtract(ma, mb)) == minutes(ma) - minutes(mb)
    assert is_merged(subtract(ma, mb))


@settings(max_examples=200, deadline=None)
@given(intervals_st, st.integers(0, SPAN), st.integers(0, SPAN))
def test_uncovered_and_clip_are_exact(cover: list[Interval], x: int, y: int) -> None:
    lo, hi = min(x, y), max(x, y)
    target = iv(lo, hi)
    gaps = uncovered(target, cover)
    assert is_merged(gaps)
    assert minutes(gaps) == set(range(lo, hi)) - minutes(cover)
    assert minutes(clip(cover, at(lo), at(hi))) == minutes(cover) & set(range(lo, hi))
    assert all(at(lo) <= i.start < i.end <= at(hi) for i in clip(cover, at(lo), at(hi)))


nonempty_st = st.tuples(st.integers(0, SPAN - 1), st.integers(1, SPAN)).map(
    lambda p: iv(min(p), max(p[1], min(p) + 1))
)


@settings(max_examples=200, deadline=None)
@given(nonempty_st, nonempty_st)
def test_overlap_is_symmetric_and_means_a_shared_instant(a: Interval, b: Interval) -> None:
    assert a.overlaps(b) == b.overlaps(a)
    assert a.overlaps(b) == bool(minutes([a]) & minutes([b]))
    assert a.overlaps(b) == bool(intersect([a], [b]))
