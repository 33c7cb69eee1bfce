"""One contract, every metrics store: the in-memory fake, SqlMetricsStore on SQLite and on
PostgreSQL, and InfluxMetricsStore when a real InfluxDB 2 is named in the environment.

Every time is fixed (2024) and every `now` is passed explicitly: nothing here reads the wall
clock or sleeps. Each test writes under host names of its own, so runs against a shared
InfluxDB bucket do not see each other. Retention and rollups are the business of the stores
that keep them (memory and SQL); InfluxDB leaves them to the bucket, so those tests skip there.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.monitor.tsdb.base import Bucket, GpuPoint, HostPoint, MetricsStore
from services.monitor.tsdb.influx import InfluxMetricsStore
from services.monitor.tsdb.memory import MemoryMetricsStore
from services.monitor.tsdb.sqlite import SqlMetricsStore
from services.shared.errors import InvalidRequest
from services.shared.storage import db

INFLUX_URL = os.environ.get("WARDEN_TEST_INFLUX_URL", "")
INFLUX_SKIP = (
    "InfluxDB contract runs only against a real InfluxDB 2: set WARDEN_TEST_INFLUX_URL "
    "(and WARDEN_TEST_INFLUX_TOKEN, WARDEN_TEST_INFLUX_ORG, WARDEN_TEST_INFLUX_BUCKET; the "
    "bucket must keep data from 2024, e.g. infinite retention)"
)

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param(
            "influx", id="influx", marks=pytest.mark.skipif(not INFLUX_URL, reason=INFLUX_SKIP)
        ),
    ]
)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    """(kind, database URL): only the SQL kinds have a database."""
    if request.param == "sqlite":
        return "sql", f"sqlite+aiosqlite:///{tmp_path / 'monitor.db'}"
    if request.param == "postgres":
        return "sql", request.getfixturevalue("pg_url")
    return request.param, None


@dataclass
class Stores:
    """`await stores(**options)` gives a started store; all are closed at teardown."""

    kind: str
    engine: Any = None
    opened: list[MetricsStore] = field(default_factory=list)

    @property
    def keeps_rollups(self) -> bool:
        return self.kind != "influx"

    async def __call__(self, **options: Any) -> MetricsStore:
        store: MetricsStore
        if self.kind == "memory":
            store = MemoryMetricsStore(**options)
        elif self.kind == "sql":
            store = SqlMetricsStore(self.engine, **options)
        else:
            store = InfluxMetricsStore(
                INFLUX_URL,
                os.environ.get("WARDEN_TEST_INFLUX_TOKEN", ""),
                os.environ.get("WARDEN_TEST_INFLUX_ORG", ""),
                os.environ.get("WARDEN_TEST_INFLUX_BUCKET", "warden-test"),
                **options,
            )
        await store.start()
        self.opened.append(store)
        return store

    async def write(self, store: MetricsStore, points: Sequence[HostPoint]) -> None:
        """Write and wait until the points can be read back (InfluxDB writes in background)."""
        await store.write(points)
        if isinstance(store, InfluxMetricsStore):
            assert await store.flush(timeout_s=30), "InfluxDB did not take the points"

    def need_rollups(self) -> None:
        if not self.keeps_rollups:
            pytest.skip("InfluxDB: retention and downsampling belong to the bucket's policy")


@pytest.fixture
async def stores(target: tuple[str, str | None]) -> AsyncIterator[Stores]:
    kind, url = target
    engine = None
    if url is not None:
        engine = db.create_engine(url)
        await db.upgrade(engine, "monitor")
    made = Stores(kind, engine)
    try:
        yield made
    finally:
        for store in reversed(made.opened):
            await store.close()
        if engine is not None:
            await engine.dispose()


@pytest.fixture
async def store(stores: Stores) -> MetricsStore:
    return await stores()


@pytest.fixture
def host() -> str:
    return f"node-{uuid.uuid4().hex[:10]}"


def gpu(uuid_: str, index: int = 0, **figures: float | None) -> GpuPoint:
    return GpuPoint(uuid=uuid_, index=index, **figures)


def tick(
    host: str,
    seconds: float,
    cpu: float | None = None,
    *,
    gpus: Sequence[GpuPoint] = (),
    **rest: Any,
) -> HostPoint:
    return HostPoint(host=host, time=at(seconds), cpu_percent=cpu, gpus=tuple(gpus), **rest)


def shape(buckets: Sequence[Bucket]) -> list[tuple[float, float, float, float, int]]:
    """(seconds after T0, min, avg, max, count), floats rounded for comparison."""
    return [
        (
            (b.start - T0).total_seconds(),
            round(b.min, 9),
            round(b.avg, 9),
            round(b.max, 9),
            b.count,
        )
        for b in buckets
    ]


def expect(
    values: Sequence[float | None], offset_s: float
) -> tuple[float, float, float, float, int]:
    """The bucket `values` make (None does not count)."""
    present = [v for v in values if v is not None]
    return (
        offset_s,
        round(min(present), 9),
        round(math.fsum(present) / len(present), 9),
        round(max(present), 9),
        len(present),
    )


# --- writing and reading back ------------------------------------------------------------------


async def test_buckets_hold_min_avg_max_and_count(
    stores: Stores, store: MetricsStore, host: str
) -> None:
    first_minute = [float(i) for i in range(12)]  # ticks at 0, 5, ..., 55 s
    points = [tick(host, 5 * i, v) for i, v in enumerate(first_minute)]
    points += [tick(host, 60 + 5 * i, 100.0) for i in range(6)]  # 60 .. 85 s
    await stores.write(store, points)

    by_minute = await store.series(host, "cpu_percent", T0, at(120), 60)
    assert shape(by_minute) == [expect(first_minute, 0), expect([100.0] * 6, 60)]
    assert shape(by_minute)[0] == (0, 0.0, 5.5, 11.0, 12)

    by_half_minute = await store.series(host, "cpu_percent", T0, at(120), 30)
    assert shape(by_half_minute) == [
        expect(first_minute[:6], 0),
        expect(first_minute[6:], 30),
        expect([100.0] * 6, 60),
    ]
    assert all(b.start.utcoffset() == timedelta(0) for b in by_half_minute)


async def test_not_available_is_not_zero(stores: Stores, store: MetricsStore, host: str) -> None:
    uuid_ = f"GPU-{host}"
    await stores.write(
        store,
        [
            tick(host, 0, 10.0, gpus=[gpu(uuid_, power_draw_w=100.0, temperature_c=40.0)]),
            tick(host, 5, None, gpus=[gpu(uuid_, power_draw_w=None, temperature_c=50.0)]),
            tick(host, 10, 30.0, gpus=[gpu(uuid_, power_draw_w=300.0, temperature_c=None)]),
            tick(host, 15, None, gpus=[gpu(uuid_)]),
            # a minute where the CPU figure is never reported, but the load is
            tick(host, 60, None, load_1m=1.5),
            tick(host, 65, None, load_1m=2.5),
        ],
    )

    cpu = await store.series(host, "cpu_percent", T0, at(120), 60)
    assert shape(cpu) == [(0, 10.0, 20.0, 30.0, 2)]  # not 10.0 over 4, and no bucket at 60 s
    load = await store.series(host, "load_1m", T0, at(120), 60)
    assert shape(load) == [(60, 1.5, 2.0, 2.5, 2)]
    power = await store.series(host, "power_draw_w", T0, at(60), 60, gpu_uuid=uuid_)
    assert shape(power) == [(0, 100.0, 200.0, 300.0, 2)]
    temperature = await store.series(host, "temperature_c", T0, at(60), 5, gpu_uuid=uuid_)
    assert shape(temperature) == [(0, 40.0, 40.0, 40.0, 1), (5, 50.0, 50.0, 50.0, 1)]
    never = await store.series(host, "fan_speed_percent", T0, at(120), 60, gpu_uuid=uuid_)
    assert never == []


async def test_buckets_align_to_start(stores: Stores, store: MetricsStore, host: str) -> None:
    await stores.write(
        store, [tick(host, s, v) for s, v in [(7, 1.0), (26, 2.0), (27, 3.0), (46, 4.0), (47, 5.0)]]
    )

    buckets = await store.series(host, "cpu_percent", at(7), at(67), 20)

    assert shape(buckets) == [expect([1.0, 2.0], 7), expect([3.0, 4.0], 27), expect([5.0], 47)]


async def test_range_includes_start_and_excludes_end(
    stores: Stores, store: MetricsStore, host: str
) -> None:
    await stores.write(store, [tick(host, s, v) for s, v in [(0, 1.0), (10, 2.0), (20, 3.0)]])

    assert shape(await store.series(host, "cpu_percent", T0, at(20), 5)) == [
        expect([1.0], 0),
        expect([2.0], 10),
    ]
    assert shape(await store.series(host, "cpu_percent", at(10), at(30), 60)) == [
        expect([2.0, 3.0], 10)
    ]
    assert await store.series(host, "cpu_percent", at(0.001), at(10), 5) == []
    assert await store.series(host, "cpu_percent", at(21), at(600), 60) == []


async def test_gpu_and_host_series_are_apart(
    stores: Stores, store: MetricsStore, host: str
) -> None:
    other_host = f"{host}-b"
    gpu0, gpu1 = f"GPU-{host}-0", f"GPU-{host}-1"
    points = []
    for i in range(4):
        points.append(
            tick(
                host,
                5 * i,
                50.0,
                memory_used_mib=1000.0 + i,
                gpus=[
                    gpu(gpu0, 0, utilization_gpu_percent=10.0 * i, memory_used_mib=500.0),
                    gpu(gpu1, 1, utilization_gpu_percent=90.0, memory_used_mib=700.0),
                ],
            )
        )
        points.append(tick(other_host, 5 * i, 5.0, memory_used_mib=1.0))
    await stores.write(store, points)

    assert shape(
        await store.series(host, "utilization_gpu_percent", T0, at(60), 60, gpu_uuid=gpu0)
    ) == [expect([0.0, 10.0, 20.0, 30.0], 0)]
    assert shape(
        await store.series(host, "utilization_gpu_percent", T0, at(60), 60, gpu_uuid=gpu1)
    ) == [expect([90.0] * 4, 0)]
    # memory_used_mib is a host metric without gpu_uuid and a GPU metric with it
    assert shape(await store.series(host, "memory_used_mib", T0, at(60), 60)) == [
        expect([1000.0, 1001.0, 1002.0, 1003.0], 0)
    ]
    assert shape(await store.series(host, "memory_used_mib", T0, at(60), 60, gpu_uuid=gpu1)) == [
        expect([700.0] * 4, 0)
    ]
    assert shape(await store.series(other_host, "cpu_percent", T0, at(60), 60)) == [
        expect([5.0] * 4, 0)
    ]
    # a GPU belongs to its host
    assert await store.series(other_host, "memory_used_mib", T0, at(60), 60, gpu_uuid=gpu1) == []
    assert await store.series(f"{host}-none", "cpu_percent", T0, at(60), 60) == []
    assert await store.series(host, "clock_sm_mhz", T0, at(60), 60, gpu_uuid="GPU-none") == []


async def test_writing_a_tick_again_does_not_count_it_twice(
    stores: Stores, store: MetricsStore, host: str
) -> None:
    points = [tick(host, 0, 10.0, gpus=[gpu(f"GPU-{host}", utilization_gpu_percent=1.0)])]
    await stores.write(store, points)
    await stores.write(store, points)
    await stores.write(store, [])

    assert shape(await store.series(host, "cpu_percent", T0, at(60), 60)) == [expect([10.0], 0)]
    assert shape(
        await store.series(host, "utilization_gpu_percent", T0, at(60), 60, gpu_uuid=f"GPU-{host}")
    ) == [expect([1.0], 0)]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (dict(metric="cpu_percentage"), "unknown metric 'cpu_percentage'"),
        (dict(metric="utilization_gpu_percent"), "is a GPU metric: pass gpu_uuid"),
        (dict(metric="cpu_percent", gpu_uuid="GPU-1"), "is a host metric: leave gpu_uuid out"),
        (dict(metric="temperature", gpu_uuid="GPU-1"), "unknown metric 'temperature'"),
        (dict(start=datetime(2024, 5, 1, 12)), "timezone-aware"),
        (dict(end=T0), "end must be after start"),
        (dict(step_s=0), "step_s must be"),
    ],
)
async def test_invalid_queries_are_refused(
    store: MetricsStore, host: str, query: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = dict(metric="cpu_percent", start=T0, end=at(60), step_s=60)
    args.update(query)
    with pytest.raises(InvalidRequest, match=message) as refused:
        await store.series(host, **args)
    assert refused.value.code == "invalid_request"


async def test_samples_without_time_zone_are_refused(store: MetricsStore, host: str) -> None:
    with pytest.raises(InvalidRequest, match="no time zone"):
        await store.write([HostPoint(host=host, time=datetime(2024, 5, 1, 12), cpu_percent=1.0)])


# --- retention and rollups ---------------------------------------------------------------------


def minutes_of_samples(
    host: str, gpu_uuid: str, minutes: int, first_s: float = 0
) -> tuple[list[HostPoint], dict[int, list[float | None]], dict[int, list[float | None]]]:
    """Ticks every 5 s over `minutes` minutes from `first_s`, with uneven counts and gaps.

    Returns the points and, per minute, the CPU and GPU-utilisation values written."""
    points: list[HostPoint] = []
    cpu: dict[int, list[float | None]] = {}
    util: dict[int, list[float | None]] = {}
    for minute in range(minutes):
        for i in range(12):
            if minute % 2 and i >= 4:  # odd minutes have 4 ticks only: averages must weigh
                break
            seconds = first_s + 60 * minute + 5 * i
            cpu_value = None if i % 3 == 1 else float(minute * 10 + i)
            util_value = None if i == 0 else float(100 - minute - i) / 3
            cpu.setdefault(minute, []).append(cpu_value)
            util.setdefault(minute, []).append(util_value)
            points.append(
                tick(
                    host,
                    seconds,
                    cpu_value,
                    load_1m=0.5,
                    gpus=[gpu(gpu_uuid, 0, utilization_gpu_percent=util_value)],
                )
            )
    return points, cpu, util


def flat(per_minute: dict[int, list[float | None]], minutes: range) -> list[float | None]:
    return [v for m in minutes for v in per_minute[m]]


async def test_old_ranges_are_answered_from_rollups(stores: Stores, host: str) -> None:
    stores.need_rollups()
    store = await stores()  # default retention: raw 48 h, rollups 90 days
    gpu_uuid = f"GPU-{host}"
    points, cpu, util = minutes_of_samples(host, gpu_uuid, 6)
    await stores.write(store, points)

    now = T0 + 3 * DAY
    await store.prune(now)

    # step of 6 minutes: one bucket whose average weighs every sample, not every minute
    whole = await store.series(host, "cpu_percent", T0, at(360), 360)
    assert shape(whole) == [expect(flat(cpu, range(6)), 0)]
    gpu_whole = await store.series(
        host, "utilization_gpu_percent", T0, at(360), 360, gpu_uuid=gpu_uuid
    )
    assert shape(gpu_whole) == [expect(flat(util, range(6)), 0)]
    # step of 2 minutes: buckets of two rollup minutes each
    pairs = await store.series(host, "cpu_percent", T0, at(360), 120)
    assert shape(pairs) == [expect(flat(cpu, range(m, m + 2)), 60 * m) for m in (0, 2, 4)]
    # a step under a minute once raw samples are gone: one bucket per rollup minute
    fine = await store.series(host, "cpu_percent", T0, at(360), 5)
    assert shape(fine) == [expect(cpu[m], 60 * m) for m in range(6)]


async def test_retention_removes_raw_then_rollups(stores: Stores, host: str) -> None:
    stores.need_rollups()
    store = await stores(raw_retention_s=3600, rollup_retention_s=2 * 86400)
    await stores.write(store, [tick(host, 5 * i, float(i)) for i in range(12)])
    recent = 3 * 3600  # three hours after T0
    await stores.write(store, [tick(host, recent + 5 * i, 50.0) for i in range(3)])

    await store.prune(at(recent + 120))
    # the first minute is older than raw retention: its rollup answers, even at 5 s steps
    assert shape(await store.series(host, "cpu_percent", T0, at(60), 5)) == [
        expect([float(i) for i in range(12)], 0)
    ]
    # the recent minute still has raw samples
    assert shape(await store.series(host, "cpu_percent", at(recent), at(recent + 60), 5)) == [
        expect([50.0], recent),
        expect([50.0], recent + 5),
        expect([50.0], recent + 10),
    ]

    # two days and two hours later: the first minute is past rollup retention, the recent
    # one only past raw retention
    await store.prune(T0 + 2 * DAY + timedelta(hours=2))
    assert await store.series(host, "cpu_percent", T0, at(60), 60) == []
    assert await store.series(host, "cpu_percent", T0, at(60), 5) == []
    assert shape(await store.series(host, "cpu_percent", at(recent), at(recent + 60), 60)) == [
        expect([50.0] * 3, recent)
    ]


async def test_recomputing_rollups_does_not_count_twice(stores: Stores, host: str) -> None:
    stores.need_rollups()
    store = await stores()
    gpu_uuid = f"GPU-{host}"
    points, cpu, util = minutes_of_samples(host, gpu_uuid, 3)
    await stores.write(store, points)

    now = at(180)
    await store.compact(now)
    await store.compact(now)
    await store.compact(now, since=T0)  # recompute every minute from T0 on
    # a sample that arrives late, into a minute already rolled up, counts once
    await stores.write(store, [tick(host, 57, 1000.0)])
    await store.compact(now)
    await store.compact(now, since=T0)

    await store.prune(T0 + 3 * DAY)
    await store.compact(T0 + 3 * DAY, since=T0)  # raw samples are gone: rollups stay as they are

    expected_cpu = [*flat(cpu, range(3)), 1000.0]
    assert shape(await store.series(host, "cpu_percent", T0, at(180), 180)) == [
        expect(expected_cpu, 0)
    ]
    assert shape(
        await store.series(host, "utilization_gpu_percent", T0, at(180), 60, gpu_uuid=gpu_uuid)
    ) == [expect(util[m], 60 * m) for m in range(3)]


async def test_a_range_across_the_raw_horizon_joins_rollups_and_raw(
    stores: Stores, host: str
) -> None:
    stores.need_rollups()
    store = await stores(raw_retention_s=600)
    values = [float(i % 17) for i in range(120)]  # 10 minutes, every 5 s
    await stores.write(store, [tick(host, 5 * i, v) for i, v in enumerate(values)])

    await store.prune(at(900))  # raw samples before minute 5 go; their rollups stay

    fine = await store.series(host, "cpu_percent", T0, at(600), 5)
    rolled = [expect(values[12 * m : 12 * m + 12], 60 * m) for m in range(5)]
    raw = [expect([v], 5 * i) for i, v in enumerate(values) if i >= 60]
    assert shape(fine) == rolled + raw
    by_minute = await store.series(host, "cpu_percent", T0, at(600), 60)
    assert shape(by_minute) == [expect(values[12 * m : 12 * m + 12], 60 * m) for m in range(10)]
    whole = await store.series(host, "cpu_percent", T0, at(600), 600)
    assert shape(whole) == [expect(values, 0)]


async def test_minutes_not_rolled_up_yet_still_count(stores: Stores, host: str) -> None:
    stores.need_rollups()
    store = await stores()
    values = [float(i) for i in range(36)]  # 3 minutes, every 5 s
    await stores.write(store, [tick(host, 5 * i, v) for i, v in enumerate(values)])

    await store.compact(at(120))  # minutes 0 and 1 rolled up, minute 2 is not

    by_minute = await store.series(host, "cpu_percent", T0, at(180), 60)
    assert shape(by_minute) == [expect(values[12 * m : 12 * m + 12], 60 * m) for m in range(3)]
    whole = await store.series(host, "cpu_percent", T0, at(180), 180)
    assert shape(whole) == [expect(values, 0)]
    fine = await store.series(host, "cpu_percent", T0, at(180), 5)
    assert shape(fine) == [expect([v], 5 * i) for i, v in enumerate(values)]


async def test_a_far_off_clock_does_not_stall_rollups_or_retention(
    stores: Stores, host: str
) -> None:
    stores.need_rollups()
    store = await stores(raw_retention_s=60, rollup_retention_s=100 * 365 * 86400)
    y2k = datetime(2000, 1, 1, tzinfo=UTC)
    await stores.write(store, [tick(host, 0, 1.0), HostPoint(host, y2k, cpu_percent=2.0)])

    await store.prune(at(3600))  # 24 years apart: rolled up and pruned in a few steps

    assert shape(await store.series(host, "cpu_percent", T0, at(60), 5)) == [expect([1.0], 0)]
    old = await store.series(host, "cpu_percent", y2k, y2k + timedelta(minutes=1), 5)
    assert [(b.start, b.avg, b.count) for b in old] == [(y2k, 2.0, 1)]


# --- the SQL store across restarts ------------------------------------------------------------


async def test_a_restarted_sql_store_finds_its_rollups(stores: Stores, host: str) -> None:
    if stores.kind != "sql":
        pytest.skip("only the SQL store outlives its process")
    first = await stores(compact_on_write=False)
    values = [float(i) for i in range(24)]
    await stores.write(first, [tick(host, 5 * i, v) for i, v in enumerate(values)])
    await first.compact(at(60))  # minute 0 rolled up, minute 1 pending
    await first.close()

    second = await stores()
    await second.prune(T0 + 3 * DAY)  # rolls up minute 1 before its raw samples go

    assert shape(await second.series(host, "cpu_percent", T0, at(120), 60)) == [
        expect(values[:12], 0),
        expect(values[12:], 60),
    ]
