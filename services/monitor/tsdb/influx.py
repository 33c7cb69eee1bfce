"""The InfluxDB 2 metrics store (production): influxdb-client's async API.

Schema (what Grafana sees):
- measurement `warden_host`, tag `host`, one float field per host metric;
- measurement `warden_gpu`, tags `host`, `gpu_uuid`, `gpu_index`, one float field per GPU
  metric. A figure that was not reported is left out of the line (never written as 0); a tick
  where nothing was reported writes no line at all.

Writing never makes the caller (the polling loop) wait: `write()` turns points into line
protocol and appends them to a bounded buffer; a background task sends batches, retries a
failing server with exponential back-off, and when the buffer is full the oldest lines are
dropped (one log line per overflow episode). `close()` sends what is left within a deadline.
Retention and downsampling are the bucket's business (its retention policy, tasks): `prune()`
and `compact()` do nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from services.monitor.tsdb.base import (
    GPU_METRICS,
    HOST_METRICS,
    Bucket,
    HostPoint,
    MetricsStore,
    check_points,
    check_query,
)
from services.monitor.tsdb.buckets import step_ms, to_ms
from services.shared.cluster.background import cancel_and_wait

if TYPE_CHECKING:
    from influxdb_client.client.influxdb_client_async import InfluxDBClientAsync
    from influxdb_client.client.write_api_async import WriteApiAsync

log = logging.getLogger("warden.monitor.influx")

HOST_MEASUREMENT = "warden_host"
GPU_MEASUREMENT = "warden_gpu"

# HTTP statuses that say the data itself is refused: sending it again cannot help.
_REFUSED = frozenset({400, 413, 422})

_TAG_ESCAPES = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ ", "\n": r"\ ", "\r": r"\ "})


# --- line protocol -------------------------------------------------------------------------------


def _tag(value: str) -> str:
    return value.translate(_TAG_ESCAPES)


def _fields(sample: Any, metrics: Iterable[str]) -> str:
    parts = []
    for name in metrics:
        value = getattr(sample, name)
        if value is None:
            continue
        number = float(value)
        if math.isfinite(number):  # NaN and infinities cannot be written: not available
            parts.append(f"{name}={number!r}")
    return ",".join(parts)


def line_protocol(points: Iterable[HostPoint]) -> list[str]:
    """InfluxDB line protocol of `points`, millisecond timestamps, tags in key order."""
    lines = []
    for point in points:
        t_ms = to_ms(point.time)
        host = _tag(point.host)
        fields = _fields(point, HOST_METRICS)
        if fields:
            lines.append(f"{HOST_MEASUREMENT},host={host} {fields} {t_ms}")
        for gpu in point.gpus:
            fields = _fields(gpu, GPU_METRICS)
            if fields:
                lines.append(
                    f"{GPU_MEASUREMENT},gpu_index={gpu.index},gpu_uuid={_tag(gpu.uuid)},"
                    f"host={host} {fields} {t_ms}"
                )
    return lines


# --- the bounded buffer ----------------------------------------------------------------------


class LineBuffer:
    """A bounded FIFO of lines. When full, the oldest lines go, with one log line per episode.

    Lines are numbered as they arrive (`head` is the number of the oldest one kept), so a batch
    taken with `peek()` is acknowledged by number: lines dropped meanwhile are not acknowledged
    twice and newer ones are never lost.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.head = 0
        self.dropped = 0  # lines dropped on overflow, in all
        self.overflowing = False
        self._lines: deque[str] = deque()

    def __len__(self) -> int:
        return len(self._lines)

    def extend(self, lines: Sequence[str]) -> None:
        self._lines.extend(lines)
        excess = len(self._lines) - self.capacity
        if excess <= 0:
            return
        for _ in range(excess):
            self._lines.popleft()
        self.head += excess
        self.dropped += excess
        if not self.overflowing:
            self.overflowing = True
            log.warning(
                "InfluxDB is behind: buffer of %d points full, dropping the oldest until it "
                "catches up",
                self.capacity,
            )

    def peek(self, count: int) -> tuple[int, list[str]]:
        """The number of the first line and up to `count` oldest lines (they stay)."""
        return self.head, [self._lines[i] for i in range(min(count, len(self._lines)))]

    def ack(self, first: int, count: int) -> None:
        """Lines `first` .. `first + count - 1` were delivered: forget those still kept."""
        while self._lines and self.head < first + count:
            self._lines.popleft()
            self.head += 1
        if self.overflowing and len(self._lines) < self.capacity:
            self.overflowing = False  # the next overflow is a new episode


# --- Flux -------------------------------------------------------------------------------------


def flux_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${")
    return f'"{escaped}"'


def _flux_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def series_flux(
    bucket: str,
    host: str,
    metric: str,
    start: datetime,
    end: datetime,
    step_s: float,
    gpu_uuid: str | None,
) -> str:
    """The Flux query of `series()`: min, mean, max and count per window of `step_s`,
    windows aligned to `start` (offset = start modulo step), empty windows left out."""
    step = step_ms(step_s)
    offset = to_ms(start) % step
    if gpu_uuid is None:
        where = (
            f"r._measurement == {flux_string(HOST_MEASUREMENT)} and "
            f"r._field == {flux_string(metric)} and r.host == {flux_string(host)}"
        )
    else:
        where = (
            f"r._measurement == {flux_string(GPU_MEASUREMENT)} and "
            f"r._field == {flux_string(metric)} and r.host == {flux_string(host)} and "
            f"r.gpu_uuid == {flux_string(gpu_uuid)}"
        )
    return f"""\
data = from(bucket: {flux_string(bucket)})
    |> range(start: {_flux_time(start)}, stop: {_flux_time(end)})
    |> filter(fn: (r) => {where})
    |> group()
stat = (fn, name) => data
    |> aggregateWindow(
        every: {step}ms, offset: {offset}ms, fn: fn, createEmpty: false, timeSrc: "_start"
    )
    |> toFloat()
    |> set(key: "stat", value: name)
union(tables: [
    stat(fn: min, name: "min"),
    stat(fn: mean, name: "mean"),
    stat(fn: max, name: "max"),
    stat(fn: count, name: "count"),
])
    |> group()
    |> pivot(rowKey: ["_time"], columnKey: ["stat"], valueColumn: "_value")
    |> sort(columns: ["_time"])
"""


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("InfluxDB writer stopped", exc_info=task.exception())


# --- the store --------------------------------------------------------------------------------


class InfluxMetricsStore(MetricsStore):
    def __init__(
        self,
        url: str,
        token: str,
        org: str,
        bucket: str,
        *,
        batch_size: int = 5000,
        buffer_size: int = 200_000,
        flush_interval_s: float = 1.0,
        retry_initial_s: float = 0.5,
        retry_max_s: float = 30.0,
        close_timeout_s: float = 5.0,
        request_timeout_s: float = 10.0,
    ) -> None:
        """`buffer_size` and `batch_size` count lines: one per host and one per GPU per tick."""
        self.url = url
        self.org = org
        self.bucket = bucket
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.close_timeout_s = close_timeout_s
        self.request_timeout_s = request_timeout_s
        self.buffer = LineBuffer(buffer_size)
        self._token = token
        self._client: InfluxDBClientAsync | None = None
        self._write_api: WriteApiAsync | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._failing = False

    def __repr__(self) -> str:  # never the token
        return f"InfluxMetricsStore(url={self.url!r}, org={self.org!r}, bucket={self.bucket!r})"

    async def start(self) -> None:
        from influxdb_client.client.influxdb_client_async import InfluxDBClientAsync

        self._client = InfluxDBClientAsync(
            url=self.url,
            token=self._token,
            org=self.org,
            timeout=round(self.request_timeout_s * 1000),
        )
        self._write_api = self._client.write_api()
        self._closing = False
        self._task = asyncio.create_task(self._send_forever(), name="influx writer")
        self._task.add_done_callback(_log_crash)

    async def write(self, points: Sequence[HostPoint]) -> None:
        """Only buffers: returns at once whatever the state of the server."""
        if self._task is None or self._closing:
            raise RuntimeError("InfluxMetricsStore is not started (or is closing)")
        check_points(points)
        self.buffer.extend(line_protocol(points))
        if len(self.buffer) >= self.batch_size:
            self._wake.set()

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything written so far was delivered; False when `timeout_s` ran out."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        target = self.buffer.head + len(self.buffer)
        self._wake.set()
        while self.buffer.head < target:
            if deadline is not None and loop.time() >= deadline:
                return False
            if self._task is None or self._task.done():
                return False
            await asyncio.sleep(0.02)
        return True

    async def close(self) -> None:
        task, self._task = self._task, None
        self._closing = True
        if task is not None:
            self._wake.set()
            done, _ = await asyncio.wait({task}, timeout=self.close_timeout_s)
            if not done:
                await cancel_and_wait(task)
            if len(self.buffer):
                log.warning(
                    "InfluxDB writer closed with %d points not delivered within %gs",
                    len(self.buffer),
                    self.close_timeout_s,
                )
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def _send_forever(self) -> None:
        delay = self.retry_initial_s
        while True:
            if not self._closing and len(self.buffer) < self.batch_size:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.flush_interval_s)
            while len(self.buffer):
                first, lines = self.buffer.peek(self.batch_size)
                outcome = await self._send(lines)
                if outcome == "retry":
                    # Full jitter keeps replicas that failed together from retrying together.
                    await asyncio.sleep(delay * (0.5 + random.random() / 2))
                    delay = min(delay * 2, self.retry_max_s)
                    continue
                delay = self.retry_initial_s
                self.buffer.ack(first, len(lines))
            if self._closing:
                return

    async def _send(self, lines: list[str]) -> Literal["sent", "refused", "retry"]:
        from influxdb_client import WritePrecision
        from influxdb_client.rest import ApiException

        assert self._write_api is not None
        try:
            await self._write_api.write(
                bucket=self.bucket,
                org=self.org,
                record="\n".join(lines),
                write_precision=WritePrecision.MS,  # type: ignore[arg-type]  # a str constant
            )
        except ApiException as err:
            if err.status in _REFUSED:
                log.error(
                    "InfluxDB refused a batch of %d points (HTTP %s: %s); dropping it",
                    len(lines),
                    err.status,
                    (err.body or err.reason or "")[:300],
                )
                return "refused"
            return self._failed(f"HTTP {err.status} {err.reason}")
        except (OSError, TimeoutError) as err:
            return self._failed(f"{type(err).__name__}: {err}")
        except Exception as err:  # aiohttp errors and anything unexpected: retried, not fatal
            return self._failed(f"{type(err).__name__}: {err}")
        if self._failing:
            self._failing = False
            log.info("InfluxDB writes recovered (%d points buffered)", len(self.buffer))
        return "sent"

    def _failed(self, reason: str) -> Literal["retry"]:
        if not self._failing:
            self._failing = True
            log.warning(
                "InfluxDB write to %s failed (%s); retrying with back-off, %d points buffered",
                self.url,
                reason,
                len(self.buffer),
            )
        return "retry"

    # --- reading and retention ----------------------------------------------------------------

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
        if self._client is None:
            raise RuntimeError("InfluxMetricsStore is not started")
        flux = series_flux(
            self.bucket, host, metric, start, end, step_s, gpu_uuid if kind == "gpu" else None
        )
        tables = await self._client.query_api().query(flux, org=self.org)
        buckets = []
        for table in tables:
            for record in table.records:
                values = record.values
                low, mean, high, count = (values.get(k) for k in ("min", "mean", "max", "count"))
                if low is None or mean is None or high is None or not count:
                    continue
                buckets.append(
                    Bucket(
                        start=record.get_time().astimezone(UTC),
                        min=float(low),
                        avg=float(mean),
                        max=float(high),
                        count=int(count),
                    )
                )
        buckets.sort(key=lambda bucket: bucket.start)
        return buckets

    async def prune(self, now: datetime) -> None:
        """Nothing to do: the bucket's retention policy applies."""
