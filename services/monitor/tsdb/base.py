"""The metrics store: GPU and CPU time series behind one small interface (DESIGN.md §4).

A `HostPoint` is one host at one tick, with one `GpuPoint` per GPU; the metric names are the
field names of `contracts.HostSampled` / `contracts.GpuSample`. A figure a host or GPU did not
report is None and is simply not stored: "not available" is not zero, so it never counts in a
minimum, an average or a count.

`series()` answers one metric of one host (or of one GPU of that host) over `[start, end)` in
buckets of `step_s` seconds aligned to `start`: bucket k covers
`[start + k*step, start + (k+1)*step)`. Only buckets where something reported are returned,
in time order.

Implementations: `MemoryMetricsStore` (the fake, `tsdb.memory`), `SqlMetricsStore` (the
embedded default, `tsdb.sqlite`, SQLite or PostgreSQL) and `InfluxMetricsStore` (`tsdb.influx`).
One contract test suite (tests/integration/test_tsdb_contract.py) runs on all of them.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from services.shared.errors import InvalidRequest

HOST_METRICS: tuple[str, ...] = ("cpu_percent", "load_1m", "memory_used_mib", "memory_total_mib")

GPU_METRICS: tuple[str, ...] = (
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "memory_used_mib",
    "memory_total_mib",
    "temperature_c",
    "power_draw_w",
    "power_limit_w",
    "fan_speed_percent",
    "clock_sm_mhz",
    "clock_memory_mhz",
)

DEFAULT_RAW_RETENTION_S = 48 * 3600
DEFAULT_ROLLUP_RETENTION_S = 90 * 86400


@dataclass(frozen=True, slots=True)
class GpuPoint:
    """One GPU at one tick; None: the GPU does not report that figure."""

    uuid: str
    index: int
    utilization_gpu_percent: float | None = None
    utilization_memory_percent: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    fan_speed_percent: float | None = None
    clock_sm_mhz: float | None = None
    clock_memory_mhz: float | None = None


@dataclass(frozen=True, slots=True)
class HostPoint:
    """One host at one tick: its CPU figures and every GPU's. `time` is an aware datetime."""

    host: str
    time: datetime
    cpu_percent: float | None = None
    load_1m: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    gpus: tuple[GpuPoint, ...] = ()


@dataclass(frozen=True, slots=True)
class Bucket:
    """One step of a series: figures of the `count` samples that reported in it."""

    start: datetime
    min: float
    avg: float
    max: float
    count: int


MetricKind = Literal["host", "gpu"]


def metric_kind(metric: str, gpu_uuid: str | None) -> MetricKind:
    """Which kind of series a query asks for; InvalidRequest when it cannot be answered.

    `memory_used_mib` and `memory_total_mib` exist for hosts and GPUs: `gpu_uuid` decides.
    """
    if gpu_uuid is not None:
        if metric in GPU_METRICS:
            return "gpu"
        if metric in HOST_METRICS:
            raise InvalidRequest(
                f"{metric!r} is a host metric: leave gpu_uuid out",
                {"metric": metric, "gpu_uuid": gpu_uuid},
            )
    else:
        if metric in HOST_METRICS:
            return "host"
        if metric in GPU_METRICS:
            raise InvalidRequest(
                f"{metric!r} is a GPU metric: pass gpu_uuid to say which GPU",
                {"metric": metric},
            )
    raise InvalidRequest(
        f"unknown metric {metric!r}; host metrics: {', '.join(HOST_METRICS)}; "
        f"GPU metrics (with gpu_uuid): {', '.join(GPU_METRICS)}",
        {"metric": metric, "host_metrics": list(HOST_METRICS), "gpu_metrics": list(GPU_METRICS)},
    )


def check_query(
    metric: str, start: datetime, end: datetime, step_s: float, gpu_uuid: str | None
) -> MetricKind:
    """Validate a `series()` query; returns the kind of series it asks for."""
    kind = metric_kind(metric, gpu_uuid)
    for name, value in (("start", start), ("end", end)):
        if value.utcoffset() is None:
            raise InvalidRequest(
                f"{name} must be a timezone-aware datetime (UTC), not {value.isoformat()}",
                {name: value.isoformat()},
            )
    if end <= start:
        raise InvalidRequest(
            "end must be after start", {"start": start.isoformat(), "end": end.isoformat()}
        )
    if not step_s >= 0.001:  # also refuses NaN
        raise InvalidRequest(
            f"step_s must be at least 0.001 seconds, not {step_s}", {"step_s": step_s}
        )
    return kind


def check_points(points: Sequence[HostPoint]) -> None:
    for point in points:
        if point.time.utcoffset() is None:
            raise InvalidRequest(
                f"the time of a sample of {point.host!r} has no time zone: "
                f"{point.time.isoformat()}",
                {"host": point.host, "time": point.time.isoformat()},
            )


class MetricsStore(abc.ABC):
    """Where GPU and CPU samples go, and where dashboards read series from."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect / prepare; call once before anything else."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush what is pending (within a deadline) and let go of connections."""

    @abc.abstractmethod
    async def write(self, points: Sequence[HostPoint]) -> None:
        """Store a batch of host ticks. Writing the same tick again does not count it twice."""

    @abc.abstractmethod
    async def series(
        self,
        host: str,
        metric: str,
        start: datetime,
        end: datetime,
        step_s: float,
        gpu_uuid: str | None = None,
    ) -> list[Bucket]:
        """One metric over `[start, end)` in buckets of `step_s` aligned to `start`.

        Only buckets with data, in time order. A metric given without `gpu_uuid` is a host
        metric, with it a GPU metric; unknown metrics and mismatches raise InvalidRequest.
        """

    @abc.abstractmethod
    async def prune(self, now: datetime) -> None:
        """Apply retention as of `now` (stores whose server enforces retention do nothing)."""

    async def compact(self, now: datetime, since: datetime | None = None) -> None:  # noqa: B027
        """Roll up the minutes complete at `now` (stores that keep rollups).

        `since` recomputes every minute from then on; recomputing is idempotent. Stores that
        downsample on their own (InfluxDB) have nothing to do.
        """
