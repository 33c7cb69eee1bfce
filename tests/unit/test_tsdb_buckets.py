"""Bucket arithmetic of the metrics stores (pure): alignment, merging, the raw/rollup split."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.monitor.tsdb.base import GPU_METRICS, HOST_METRICS, check_query, metric_kind
from services.monitor.tsdb.buckets import (
    MINUTE_MS,
    Partial,
    bucket_index,
    floor_minute,
    from_ms,
    merge_buckets,
    retention_cutoffs,
    rollups_until,
    step_ms,
    to_ms,
)
from services.shared.errors import InvalidRequest

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
T0_MS = to_ms(T0)


def test_milliseconds_are_exact_and_zone_independent() -> None:
    assert to_ms(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert T0_MS == 1_714_564_800_000
    plus_two = timezone(timedelta(hours=2))
    assert to_ms(datetime(2024, 5, 1, 14, 0, tzinfo=plus_two)) == T0_MS
    assert to_ms(T0 + timedelta(microseconds=1999)) == T0_MS + 1  # truncated to the ms
    assert from_ms(T0_MS + 5) == T0 + timedelta(milliseconds=5)
    assert from_ms(T0_MS).tzinfo is UTC


def test_steps_minutes_and_bucket_indexes() -> None:
    assert step_ms(5) == 5000
    assert step_ms(0.0001) == 1  # never a zero step
    assert floor_minute(T0_MS + 59_999) == T0_MS
    assert floor_minute(T0_MS + 60_000) == T0_MS + MINUTE_MS
    assert bucket_index(T0_MS + 7000, T0_MS + 7000, 20_000) == 0
    assert bucket_index(T0_MS + 26_999, T0_MS + 7000, 20_000) == 0
    assert bucket_index(T0_MS + 27_000, T0_MS + 7000, 20_000) == 1


def test_partials_ignore_what_was_not_reported() -> None:
    part = Partial.of([None, 3.0, None, 1.0])
    assert (part.min, part.max, part.sum, part.count) == (1.0, 3.0, 4.0, 2)
    assert Partial.of([None, None]).count == 0

    part.merge(Partial.of([10.0]))
    part.merge(Partial())  # an empty partial changes nothing
    assert (part.min, part.max, part.sum, part.count) == (1.0, 10.0, 14.0, 3)


def test_merge_buckets_weighs_samples_not_partials() -> None:
    parts = [
        (2, Partial.of([100.0])),
        (0, Partial.of([1.0, 2.0, 3.0])),
        (0, Partial.of([10.0])),
        (1, Partial()),  # nobody reported: no bucket
    ]

    buckets = merge_buckets(parts, T0_MS, 60_000)

    assert [(b.start, b.min, b.avg, b.max, b.count) for b in buckets] == [
        (T0, 1.0, 4.0, 10.0, 4),  # (1+2+3+10)/4, not (2+10)/2
        (T0 + timedelta(minutes=2), 100.0, 100.0, 100.0, 1),
    ]


@pytest.mark.parametrize(
    ("step", "first_raw", "last_rollup", "split"),
    [
        # under a minute: raw wherever it exists, from the minute of its first sample
        (5000, None, None, 600_000),
        (5000, 300_000, None, 300_000),
        (5000, 312_000, None, 300_000),
        (5000, 5000, None, 0),  # raw from the start: no rollups
        # a minute or more: rollups up to the last one, raw after it
        (60_000, None, None, 0),
        (60_000, 0, 240_000, 300_000),
        (60_000, None, 590_000, 600_000),  # never past the end
    ],
)
def test_where_rollups_give_way_to_raw(
    step: int, first_raw: int | None, last_rollup: int | None, split: int
) -> None:
    assert rollups_until(step, 0, 600_000, first_raw, last_rollup) == split


def test_retention_cutoffs_fall_on_minutes() -> None:
    now = T0_MS + 30_500
    raw, rollup = retention_cutoffs(now, 48 * 3600, 90 * 86400)
    assert raw == T0_MS - 48 * 3600_000
    assert rollup == T0_MS - 90 * 86400_000
    assert raw % MINUTE_MS == 0 and rollup % MINUTE_MS == 0


def test_metric_kind_decides_by_gpu_uuid() -> None:
    assert metric_kind("cpu_percent", None) == "host"
    assert metric_kind("memory_used_mib", None) == "host"
    assert metric_kind("memory_used_mib", "GPU-1") == "gpu"
    assert metric_kind("temperature_c", "GPU-1") == "gpu"
    assert set(HOST_METRICS) & set(GPU_METRICS) == {"memory_used_mib", "memory_total_mib"}


@pytest.mark.parametrize(
    ("metric", "gpu_uuid", "message"),
    [
        ("bogus", None, "unknown metric 'bogus'; host metrics: cpu_percent"),
        ("bogus", "GPU-1", "unknown metric 'bogus'"),
        ("fan_speed_percent", None, "'fan_speed_percent' is a GPU metric: pass gpu_uuid"),
        ("load_1m", "GPU-1", "'load_1m' is a host metric: leave gpu_uuid out"),
    ],
)
def test_metric_mistakes_say_what_to_do(metric: str, gpu_uuid: str | None, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as refused:
        metric_kind(metric, gpu_uuid)
    assert refused.value.details["metric"] == metric


@pytest.mark.parametrize("step_s", [0, -5, math.nan, 0.0001])
def test_steps_must_be_positive(step_s: float) -> None:
    with pytest.raises(InvalidRequest, match="step_s"):
        check_query("cpu_percent", T0, T0 + timedelta(minutes=1), step_s, None)


# --- rollups give the answers raw samples give ------------------------------------------------

samples = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3600_000 - 1),  # within an hour of T0, in ms
        st.one_of(st.none(), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)),
    ),
    max_size=80,
)


@given(samples, st.sampled_from([60, 120, 300, 900, 3600]), st.integers(0, 10))
def test_minute_rollups_answer_whole_minute_steps_like_raw_samples(
    data: list[tuple[int, float | None]], step_s: int, start_minute: int
) -> None:
    start = T0_MS + start_minute * MINUTE_MS
    step = step_ms(step_s)
    kept = [(T0_MS + t, v) for t, v in data if T0_MS + t >= start]

    from_raw = merge_buckets(
        ((bucket_index(t, start, step), Partial.of([v])) for t, v in kept), start, step
    )
    minutes: dict[int, Partial] = {}
    for t, v in kept:
        minutes.setdefault(floor_minute(t), Partial()).add(v)
    from_rollups = merge_buckets(
        ((bucket_index(m, start, step), part) for m, part in minutes.items()), start, step
    )

    assert [(b.start, b.min, b.max, b.count) for b in from_rollups] == [
        (b.start, b.min, b.max, b.count) for b in from_raw
    ]
    for rolled, raw in zip(from_rollups, from_raw, strict=True):
        assert rolled.avg == pytest.approx(raw.avg, rel=1e-9, abs=1e-6)
