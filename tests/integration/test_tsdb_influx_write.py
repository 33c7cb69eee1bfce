"""InfluxMetricsStore's write path against a real server speaking InfluxDB line protocol.

VictoriaMetrics (Debian package `victoria-metrics`, binary /usr/bin/victoria-metrics) accepts
InfluxDB 2 writes on /api/v2/write and maps measurement `m`, field `f` to the metric `m_f`
with the tags as labels, which we read back through its Prometheus-style export API. Each test
starts its own server on a free port with its own data directory. (Flux queries need a real
InfluxDB 2: see test_tsdb_contract.py.)

Waiting is done by polling a condition with a generous deadline; the only timings asserted
are the ones the store promises: write() returns at once, close() keeps its deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.monitor.tsdb.base import GpuPoint, HostPoint
from services.monitor.tsdb.buckets import to_ms
from services.monitor.tsdb.influx import InfluxMetricsStore
from tests.support.polling import until
from tests.support.ports import free_port

VM_BINARY = os.environ.get("WARDEN_TEST_VICTORIA_METRICS") or (
    shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
)
WAIT_S = 30.0
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
LOGGER = "warden.monitor.influx"


class VictoriaMetrics:
    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process: asyncio.subprocess.Process | None = None
        self.log = data_dir.with_suffix(".log")

    async def start(self) -> None:
        with self.log.open("wb") as log_file:
            self.process = process = await asyncio.create_subprocess_exec(
                VM_BINARY,
                f"-storageDataPath={self.data_dir}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-retentionPeriod=100y",  # the tests write fixed times from 2024
                "-loggerLevel=ERROR",
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
            )
        async with aiohttp.ClientSession() as session:

            async def answers() -> bool:
                if process.returncode is not None:
                    pytest.fail(
                        f"victoria-metrics exited with {process.returncode}: "
                        f"{self.log.read_text(errors='replace')[-2000:]}",
                        pytrace=False,
                    )
                try:
                    async with session.get(f"{self.url}/health") as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            await until(answers, f"victoria-metrics answering on {self.url}", timeout=WAIT_S)

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()

    async def export(self) -> dict[tuple[str, frozenset[tuple[str, str]]], dict[int, float]]:
        """Every warden_* series: (name, labels) -> {timestamp ms: value}."""
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{self.url}/internal/force_flush") as response:
                assert response.status == 200
            params = {"match[]": '{__name__=~"warden_.*"}', "start": "0"}
            async with session.get(f"{self.url}/api/v1/export", params=params) as response:
                assert response.status == 200, await response.text()
                text = await response.text()
        series = {}
        for line in text.splitlines():
            if line.strip():
                item = json.loads(line)
                labels = dict(item["metric"])
                name = labels.pop("__name__")
                series[(name, frozenset(labels.items()))] = dict(
                    zip(item["timestamps"], item["values"], strict=True)
                )
        return series


StartServer = Callable[[int], Awaitable[VictoriaMetrics]]


@pytest.fixture
def vm_binary() -> str:
    if not os.path.exists(VM_BINARY):
        pytest.fail(
            f"VictoriaMetrics is not installed ({VM_BINARY} is missing). The InfluxDB write "
            "tests need it: `apt-get install -y victoria-metrics` (or run .ci/run, which "
            "installs it), or point WARDEN_TEST_VICTORIA_METRICS at the binary.",
            pytrace=False,
        )
    return VM_BINARY


@pytest.fixture
async def start_server(vm_binary: str, tmp_path: Path) -> AsyncIterator[StartServer]:
    """`await start_server(port)` runs a fresh VictoriaMetrics; all are stopped at teardown."""
    started: list[VictoriaMetrics] = []

    async def start(port: int) -> VictoriaMetrics:
        server = VictoriaMetrics(tmp_path / f"vm-{len(started)}", port)
        started.append(server)
        await server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            await server.stop()


@pytest.fixture
async def opened() -> AsyncIterator[list[InfluxMetricsStore]]:
    """Stores a test opens: closed at teardown if the test did not."""
    stores: list[InfluxMetricsStore] = []
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


async def open_store(
    opened: list[InfluxMetricsStore], url: str, **options: Any
) -> InfluxMetricsStore:
    store = InfluxMetricsStore(url, "dummy-token", "dummy-org", "dummy-bucket", **options)
    await store.start()
    opened.append(store)
    return store


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ms(seconds: float) -> int:
    return to_ms(at(seconds))


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


def messages(caplog: pytest.LogCaptureFixture, fragment: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and fragment in r.getMessage()
    ]


# --- tests ------------------------------------------------------------------------------------


async def test_points_arrive_and_missing_figures_are_not_written(
    start_server: StartServer, opened: list[InfluxMetricsStore]
) -> None:
    server = await start_server(free_port())
    store = await open_store(opened, server.url)
    points = []
    for i in range(3):
        points.append(
            HostPoint(
                host="dgx1",
                time=at(5 * i),
                cpu_percent=None if i == 1 else 10.0 * (i + 1),
                load_1m=0.25,
                memory_used_mib=1024.0,
                memory_total_mib=None,  # never reported
                gpus=(
                    GpuPoint("GPU-aaa", 0, utilization_gpu_percent=50.0 + i, temperature_c=None),
                    GpuPoint("GPU-b b", 1, utilization_gpu_percent=0.0, temperature_c=61.5),
                ),
            )
        )
    # a host whose tick reports nothing writes no line, and breaks nothing
    points.append(HostPoint(host="empty", time=at(0)))
    await store.write(points)
    await store.close()  # sends everything before returning

    series = await server.export()

    assert series[("warden_host_cpu_percent", labels(host="dgx1"))] == {
        ms(0): 10.0,
        ms(10): 30.0,  # the tick at 5 s did not report: absent, not 0
    }
    assert series[("warden_host_load_1m", labels(host="dgx1"))] == {
        ms(0): 0.25,
        ms(5): 0.25,
        ms(10): 0.25,
    }
    gpu0 = labels(host="dgx1", gpu_uuid="GPU-aaa", gpu_index="0")
    gpu1 = labels(host="dgx1", gpu_uuid="GPU-b b", gpu_index="1")
    assert series[("warden_gpu_utilization_gpu_percent", gpu0)] == {
        ms(0): 50.0,
        ms(5): 51.0,
        ms(10): 52.0,
    }
    # a real 0 is written as 0
    assert series[("warden_gpu_utilization_gpu_percent", gpu1)] == {
        ms(0): 0.0,
        ms(5): 0.0,
        ms(10): 0.0,
    }
    assert series[("warden_gpu_temperature_c", gpu1)] == {ms(0): 61.5, ms(5): 61.5, ms(10): 61.5}
    names = {name for name, _ in series}
    # figures never reported were never written
    assert ("warden_gpu_temperature_c", gpu0) not in series
    assert "warden_host_memory_total_mib" not in names
    assert "warden_gpu_fan_speed_percent" not in names
    assert not any(dict(found).get("host") == "empty" for _, found in series)


async def test_write_does_not_wait_for_a_server_that_is_down(
    opened: list[InfluxMetricsStore], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    store = await open_store(
        opened,
        f"http://127.0.0.1:{free_port()}",  # nothing listens there
        retry_initial_s=0.01,
        retry_max_s=0.05,
        close_timeout_s=1.0,
        flush_interval_s=0.01,
    )
    points = [
        HostPoint(
            host=f"h{h}",
            time=at(0),
            cpu_percent=1.0,
            gpus=tuple(GpuPoint(f"GPU-{h}-{g}", g, utilization_gpu_percent=5.0) for g in range(8)),
        )
        for h in range(1000)
    ]

    started = time.monotonic()
    await store.write(points)
    assert time.monotonic() - started < 1.0  # buffering 9,000 lines, no network involved

    # it keeps retrying, and says so once, not once per attempt
    await until(
        lambda: store.buffer.head == 0 and len(messages(caplog, "failed")) == 1,
        "a retry",
        timeout=WAIT_S,
    )
    await asyncio.sleep(0.3)  # several more attempts
    assert len(messages(caplog, "failed")) == 1

    started = time.monotonic()
    await store.close()
    assert time.monotonic() - started < 1.0 + 2.0  # its deadline, and a little slack
    assert len(store.buffer) == 9000
    assert messages(caplog, "not delivered")


async def test_points_kept_while_the_server_is_down_arrive_when_it_is_back(
    start_server: StartServer, opened: list[InfluxMetricsStore], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    port = free_port()
    store = await open_store(
        opened,
        f"http://127.0.0.1:{port}",
        retry_initial_s=0.05,
        retry_max_s=0.2,
        flush_interval_s=0.05,
        buffer_size=10,
    )
    # 3 batches of 6 lines (one host, 5 GPUs) into a buffer of 10: the oldest go
    for i in range(3):
        await store.write(
            [
                HostPoint(
                    "node1",
                    at(5 * i),
                    cpu_percent=float(i),
                    gpus=tuple(GpuPoint(f"GPU-{g}", g, power_draw_w=100.0 + i) for g in range(5)),
                )
            ]
        )
    await until(
        lambda: bool(messages(caplog, "failed")), "the failing write to be logged", timeout=WAIT_S
    )
    assert len(store.buffer) == 10
    assert store.buffer.dropped == 8
    assert len(messages(caplog, "dropping the oldest")) == 1  # one line for the whole episode

    server = await start_server(port)
    assert await store.flush(timeout_s=WAIT_S)
    assert messages(caplog, "recovered")

    series = await server.export()
    # the 8 oldest lines (tick 0 and the host line and first GPU lines of tick 5) were dropped
    assert series[("warden_host_cpu_percent", labels(host="node1"))] == {ms(10): 2.0}
    delivered = series[
        ("warden_gpu_power_draw_w", labels(host="node1", gpu_uuid="GPU-4", gpu_index="4"))
    ]
    assert delivered == {ms(5): 101.0, ms(10): 102.0}
    assert (
        "warden_gpu_power_draw_w",
        labels(host="node1", gpu_uuid="GPU-0", gpu_index="0"),
    ) in series
    assert series[
        ("warden_gpu_power_draw_w", labels(host="node1", gpu_uuid="GPU-0", gpu_index="0"))
    ] == {ms(10): 102.0}
