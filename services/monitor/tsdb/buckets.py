"""Bucket arithmetic shared by the stores: pure functions over integer milliseconds.

Times are handled as integer milliseconds since the Unix epoch (UTC), so bucket edges are
exact. A `Partial` is what a run of samples adds up to (min, max, sum, count); the average of
a bucket is its sum over its count, never an average of averages, and a None sample adds
nothing at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from services.monitor.tsdb.base import Bucket

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MINUTE_MS = 60_000
_ONE_MS = timedelta(milliseconds=1)


def to_ms(moment: datetime) -> int:
    """Milliseconds since the epoch of an aware datetime (exact, no float rounding)."""
    return (moment - EPOCH) // _ONE_MS


def from_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def step_ms(step_s: float) -> int:
    return max(1, round(step_s * 1000))


def floor_minute(ms: int) -> int:
    return ms - ms % MINUTE_MS


def bucket_index(t_ms: int, start_ms: int, step: int) -> int:
    return (t_ms - start_ms) // step


@dataclass(slots=True)
class Partial:
    """min, max, sum and count of the samples that reported (count 0: nobody did)."""

    min: float = math.inf
    max: float = -math.inf
    sum: float = 0.0
    count: int = 0

    def add(self, value: float | None) -> None:
        if value is None:
            return
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        self.sum += value
        self.count += 1

    def merge(self, other: Partial) -> None:
        if other.count <= 0:
            return
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.sum += other.sum
        self.count += other.count

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Partial:
        partial = cls()
        for value in values:
            partial.add(value)
        return partial


def merge_buckets(parts: Iterable[tuple[int, Partial]], start_ms: int, step: int) -> list[Bucket]:
    """Buckets from (bucket index, partial) pairs: merged per index, empty ones left out."""
    merged: dict[int, Partial] = {}
    for index, part in parts:
        if part.count <= 0:
            continue
        into = merged.get(index)
        if into is None:
            merged[index] = into = Partial()
        into.merge(part)
    return [
        Bucket(
            start=from_ms(start_ms + index * step),
            min=part.min,
            avg=part.sum / part.count,
            max=part.max,
            count=part.count,
        )
        for index, part in sorted(merged.items())
    ]


def rollups_until(
    step: int,
    start_ms: int,
    end_ms: int,
    first_raw_ms: int | None,
    last_rollup_minute_ms: int | None,
) -> int:
    """Where a query switches from 1-minute rollups to raw samples.

    Rollup minutes starting in `[start, split)` and raw samples in `[split, end)` answer a
    query; both sources never cover the same minute, so nothing counts twice.

    - step < 1 minute: raw samples wherever they still exist (from the minute of the first raw
      sample in the range); rollups only for what retention already removed from raw.
    - step of 1 minute or more: rollups for every minute already rolled up (they are
      contiguous), raw samples for the minutes after the last one (not rolled up yet).

    `first_raw_ms`: the earliest raw sample of the series in the range (None: none);
    `last_rollup_minute_ms`: the latest rollup minute of the series in the range (None: none).
    """
    if step < MINUTE_MS:
        if first_raw_ms is None:
            return end_ms
        return max(start_ms, floor_minute(first_raw_ms))
    if last_rollup_minute_ms is None:
        return start_ms
    return min(end_ms, last_rollup_minute_ms + MINUTE_MS)


def retention_cutoffs(
    now_ms: int, raw_retention_s: float, rollup_retention_s: float
) -> tuple[int, int]:
    """(raw, rollup) cutoffs: samples before them are deleted. Both fall on minute edges, so
    raw samples always start at a whole minute and rollups never cover a half-deleted one."""
    raw = floor_minute(now_ms - round(raw_retention_s * 1000))
    rollup = floor_minute(now_ms - round(rollup_retention_s * 1000))
    return raw, rollup
