"""The in-memory metrics store: the fake for unit tests of code that writes or reads metrics.

It keeps raw samples and 1-minute rollups the way `SqlMetricsStore` does (same retention, same
choice between raw and rollups in `series()`), so the contract suite holds it to the same
answers. It also records what it was asked (`batches`, `points`) and can be told to fail
(`failure`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from services.monitor.tsdb.base import (
    DEFAULT_RAW_RETENTION_S,
    DEFAULT_ROLLUP_RETENTION_S,
    GPU_METRICS,
    HOST_METRICS,
    Bucket,
    GpuPoint,
    HostPoint,
    MetricsStore,
    check_points,
    check_query,
)
from services.monitor.tsdb.buckets import (
    Partial,
    bucket_index,
    floor_minute,
    merge_buckets,
    retention_cutoffs,
    rollups_until,
    step_ms,
    to_ms,
)

# ("host", host, None) or ("gpu", host, gpu_uuid)
SeriesKey = tuple[str, str, str | None]
Sample = HostPoint | GpuPoint


class MemoryMetricsStore(MetricsStore):
    def __init__(
        self,
        *,
        raw_retention_s: float = DEFAULT_RAW_RETENTION_S,
        rollup_retention_s: float = DEFAULT_ROLLUP_RETENTION_S,
    ) -> None:
        self.raw_retention_s = raw_retention_s
        self.rollup_retention_s = rollup_retention_s
        self.batches: list[tuple[HostPoint, ...]] = []  # every batch written, in order
        self.failure: Exception | None = None  # set it to make write() raise it
        self.started = False
        self.closed = False
        self._raw: dict[SeriesKey, dict[int, Sample]] = {}
        self._rollups: dict[SeriesKey, dict[int, dict[str, Partial]]] = {}

    @property
    def points(self) -> list[HostPoint]:
        """Every point written, in order (all batches one after the other)."""
        return [point for batch in self.batches for point in batch]

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    async def write(self, points: Sequence[HostPoint]) -> None:
        if self.failure is not None:
            raise self.failure
        check_points(points)
        self.batches.append(tuple(points))
        for point in points:
            t_ms = to_ms(point.time)
            # The first write of a tick wins (as in SQL): writing it again changes nothing.
            self._raw.setdefault(("host", point.host, None), {}).setdefault(t_ms, point)
            for gpu in point.gpus:
                self._raw.setdefault(("gpu", point.host, gpu.uuid), {}).setdefault(t_ms, gpu)

    async def series(
        self,
        host: str,
        metric: str,
        start: datetime,
        end: datetime,
        step_s: float,
        gpu_uuid: str | None = None,
    ) -> list[Bucket]:
        kind = check_query(metric, start, end, step_s, gpu_uuid)
        key: SeriesKey = (kind, host, gpu_uuid if kind == "gpu" else None)
        start_ms, end_ms, step = to_ms(start), to_ms(end), step_ms(step_s)
        raw = self._raw.get(key, {})
        rollups = self._rollups.get(key, {})
        split = rollups_until(
            step,
            start_ms,
            end_ms,
            min((t for t in raw if start_ms <= t < end_ms), default=None),
            max((m for m in rollups if start_ms <= m < end_ms), default=None),
        )
        parts = [
            (bucket_index(minute, start_ms, step), by_metric[metric])
            for minute, by_metric in rollups.items()
            if start_ms <= minute < split and metric in by_metric
        ]
        parts += [
            (bucket_index(t, start_ms, step), Partial.of([getattr(sample, metric)]))
            for t, sample in raw.items()
            if max(start_ms, split) <= t < end_ms
        ]
        return merge_buckets(parts, start_ms, step)

    async def compact(self, now: datetime, since: datetime | None = None) -> None:
        """(Re)compute the rollup of every complete minute from the raw samples still kept."""
        until = floor_minute(to_ms(now))
        lowest = floor_minute(to_ms(since)) if since is not None else None
        for key, samples in self._raw.items():
            metrics = HOST_METRICS if key[0] == "host" else GPU_METRICS
            minutes: dict[int, list[Sample]] = {}
            for t, sample in samples.items():
                minute = floor_minute(t)
                if minute < until and (lowest is None or minute >= lowest):
                    minutes.setdefault(minute, []).append(sample)
            rollups = self._rollups.setdefault(key, {})
            for minute, group in minutes.items():
                rollups[minute] = {
                    name: part
                    for name in metrics
                    if (part := Partial.of(getattr(s, name) for s in group)).count
                }

    async def prune(self, now: datetime) -> None:
        await self.compact(now)
        raw_cutoff, rollup_cutoff = retention_cutoffs(
            to_ms(now), self.raw_retention_s, self.rollup_retention_s
        )
        for samples in self._raw.values():
            for t in [t for t in samples if t < raw_cutoff]:
                del samples[t]
        for rollups in self._rollups.values():
            for minute in [m for m in rollups if m < rollup_cutoff]:
                del rollups[minute]
        self._raw = {key: samples for key, samples in self._raw.items() if samples}
        self._rollups = {key: rollups for key, rollups in self._rollups.items() if rollups}
