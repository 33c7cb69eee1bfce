"""The poll loops with fake readers: events per tick, isolation of slow hosts, transitions."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from services.monitor.monitor import Monitor
from services.monitor.probe import CpuCounters, GpuReading, HostReading
from services.monitor.readers import FakeReader, HostReader
from services.monitor.tsdb.memory import MemoryMetricsStore
from services.monitor.writer import MetricsWriter
from services.shared.remote.ssh import HostUnreachable
from tests.support import polling


def healthy() -> HostReading:
    return HostReading(cpu=CpuCounters(1, 10), gpus=(GpuReading(uuid="GPU-0", index=0),))


class HungReader(HostReader):
    """Never answers (and ignores its deadline): only the monitor's own guard stops it."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def read(self, timeout: float) -> HostReading:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, event_type: str, data: dict[str, Any]) -> None:
        self.events.append((event_type, data))

    def of(self, event_type: str, host: str) -> list[dict[str, Any]]:
        return [d for t, d in self.events if t == event_type and d["host"] == host]


until = functools.partial(polling.until, timeout=10.0)


async def test_each_host_publishes_samples_and_a_hung_host_delays_nobody() -> None:
    published = Recorder()
    readers: list[HostReader] = [
        FakeReader("a", healthy),
        HungReader("hung"),
        FakeReader("b", healthy),
    ]
    monitor = Monitor(readers, published, interval_s=0.1, poll_deadline_s=0.05)
    await monitor.start()
    try:
        await until(
            lambda: (
                len(published.of("host.sampled", "a")) >= 5
                and len(published.of("host.sampled", "b")) >= 5
            ),
            "samples of a and b",
        )
        await until(lambda: published.of("host.unreachable", "hung") != [], "hung host reported")
    finally:
        await monitor.stop()
    assert len(published.of("gpu.discovered", "a")) == 1
    assert len(published.of("host.unreachable", "hung")) == 1
    assert published.of("host.unreachable", "hung")[0]["reason"] == "timed out"
    assert published.of("host.sampled", "hung") == []
    snapshot = {h["name"]: h for h in monitor.snapshot()["hosts"]}
    assert snapshot["a"]["reachable"] is True and snapshot["hung"]["reachable"] is False
    assert monitor.stats.as_dict()["sample_age_ms"]["count"] >= 10


async def test_an_outage_gives_one_unreachable_and_one_recovered() -> None:
    up = True

    def answer() -> HostReading:
        if not up:
            raise HostUnreachable("flaky: connection refused", {"reason": "connection refused"})
        return healthy()

    published = Recorder()
    reader = FakeReader("flaky", answer)
    monitor = Monitor([reader], published, interval_s=0.02, poll_deadline_s=0.01)
    await monitor.start()
    try:
        await until(lambda: len(published.of("host.sampled", "flaky")) >= 2, "first samples")
        up = False
        await until(lambda: published.of("host.unreachable", "flaky") != [], "outage noticed")
        reads_when_down = reader.reads
        await until(lambda: reader.reads >= reads_when_down + 3, "retries while down")
        up = True
        await until(lambda: published.of("host.recovered", "flaky") != [], "recovery")
        samples = len(published.of("host.sampled", "flaky"))
        await until(lambda: len(published.of("host.sampled", "flaky")) > samples, "sampling again")
    finally:
        await monitor.stop()
    assert len(published.of("host.unreachable", "flaky")) == 1
    assert len(published.of("host.recovered", "flaky")) == 1


async def test_a_host_waiting_for_its_turn_to_connect_is_not_reported_down() -> None:
    """Many hosts gained at once queue for their SSH handshakes: a tick spent in the queue is
    missed, not an outage."""
    waiting = True

    def answer() -> HostReading:
        if waiting:
            reason = "not tried: waiting for a turn among the SSH handshakes"
            raise HostUnreachable(f"q: {reason}", {"reason": reason, "waiting": True})
        return healthy()

    published = Recorder()
    reader = FakeReader("q", answer)
    monitor = Monitor([reader], published, interval_s=0.02, poll_deadline_s=0.01)
    await monitor.start()
    try:
        await until(lambda: reader.reads >= 3, "ticks spent waiting")
        waiting = False
        await until(lambda: published.of("host.sampled", "q") != [], "its first sample")
    finally:
        await monitor.stop()
    assert published.of("host.unreachable", "q") == []
    assert monitor.stats.failures == 0 and monitor.stats.missed_ticks >= 3


async def test_samples_reach_the_metrics_store_through_the_writer() -> None:
    store = MemoryMetricsStore()
    await store.start()
    writer = MetricsWriter(store, flush_s=0.02)
    monitor = Monitor(
        [FakeReader("a", healthy)], Recorder(), interval_s=0.02, poll_deadline_s=0.01, writer=writer
    )
    await monitor.start()
    try:
        await until(lambda: monitor.stats.polls >= 3, "polls")
    finally:
        await monitor.stop()  # flushes the writer
    snapshot = monitor.snapshot("a")["hosts"][0]
    assert snapshot["sample"]["gpus"][0]["uuid"] == "GPU-0"
    assert len(store.points) >= 3
