"""The Prometheus metrics on the in-process bus: what a service's bus counts, the scrape-time
probes, the monitor's poll hook, and the exposition Prometheus reads.

Every test labels its metrics with a replica id of its own, so values left by other tests in
this process (the registry is the process's) never count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.monitor.monitor import Monitor
from services.monitor.readers import FakeReader
from services.shared.bus.inproc import InProcessBus
from services.shared.bus.metered import MeteredBus
from services.shared.cluster.replicas import new_replica_id
from services.shared.contracts import Envelope, utc_now_iso
from services.shared.errors import ConfigError, InvalidRequest, ServiceUnavailable
from services.shared.metrics import PROBES, REGISTRY, Sample, render
from services.shared.metrics.http import serve_metrics
from tests.support.polling import until
from tests.unit.test_monitor_loop import healthy

# Earlier tests' series would make every scrape here slow (tests/support/metrics.py).
pytestmark = pytest.mark.usefixtures("fresh_metrics")


@pytest.fixture(autouse=True)
def only_this_tests_probes() -> Iterator[None]:
    """The process-wide probes without those earlier tests of the same run left behind: a
    stopped service's probe makes every scrape here wait out the probe deadline (10 s a test
    in the whole suite)."""
    left = dict(PROBES._probes)
    PROBES._probes.clear()
    yield
    PROBES._probes.update(left)


def value(name: str, **labels: str) -> float:
    found = REGISTRY.get_sample_value(name, labels)
    return 0.0 if found is None else found


def heartbeat(service: str) -> dict[str, Any]:
    return {
        "service": service,
        "replica": "someone",
        "role": "active",
        "started_at": utc_now_iso(),
        "interval_s": 1.0,
        "details": {},
    }


async def test_each_service_counts_what_it_publishes_consumes_calls_and_answers(
    bus: InProcessBus,
) -> None:
    jobs = MeteredBus(bus, "jobs", new_replica_id("jobs"))
    violations = MeteredBus(bus, "violations", new_replica_id("violations"))
    mine = {"service": "jobs", "replica": jobs.replica}
    theirs = {"service": "violations", "replica": violations.replica}
    handled: list[Envelope] = []

    async def flaky(envelope: Envelope) -> None:
        handled.append(envelope)
        if len(handled) == 1:
            raise RuntimeError("first delivery fails")  # retried by the bus

    async def echo(args: dict[str, Any]) -> Any:
        return args

    async def refuse(_args: dict[str, Any]) -> Any:
        raise InvalidRequest("no")

    stop_consuming = await violations.subscribe("jobs", "replica.heartbeat", "violations.t", flaky)
    stop_serving = await violations.serve("violations", {"echo": echo, "refuse": refuse})
    try:
        await jobs.emit("replica.heartbeat", heartbeat("jobs"), source="jobs")
        await until(lambda: len(handled) == 2, "the event handled on its second delivery", 10)
        assert await jobs.call("violations", "echo", {"x": 1}) == {"x": 1}
        with pytest.raises(InvalidRequest):
            await jobs.call("violations", "refuse")
        with pytest.raises(ServiceUnavailable):
            await jobs.call("nobody", "anything", timeout=0.05)
    finally:
        await stop_consuming()
        await stop_serving()

    assert value("warden_events_published_total", **mine, type="replica.heartbeat") == 1
    consumed = {"type": "replica.heartbeat", **theirs}
    assert value("warden_events_consumed_total", **consumed, outcome="failed") == 1
    assert value("warden_events_consumed_total", **consumed, outcome="ok") == 1
    assert (
        value("warden_events_consumed_total", **mine, type="replica.heartbeat", outcome="ok") == 0
    )
    client = "warden_rpc_client_duration_seconds_count"
    assert value(client, **mine, target="violations", method="echo", outcome="ok") == 1
    assert value(client, **mine, target="violations", method="refuse", outcome="error") == 1
    assert value(client, **mine, target="nobody", method="anything", outcome="unavailable") == 1
    server = "warden_rpc_server_duration_seconds_count"
    assert value(server, **theirs, method="echo", outcome="ok") == 1
    assert value(server, **theirs, method="refuse", outcome="error") == 1
    assert value(server, **mine, method="echo", outcome="ok") == 0
    # What the consumer's queues are, for their depths: the durable one, its DLQ, its RPC.
    queue = "evt-jobs-replica.heartbeat--violations.t"
    assert violations.queues == {queue, f"{queue}.dead-letter", "rpc-violations"}
    assert jobs.queues == set()


async def test_queue_depths_are_read_at_scrape_time(bus: InProcessBus) -> None:
    jobs = MeteredBus(bus, "jobs", new_replica_id("jobs"))
    held = asyncio.Event()

    async def stuck(_envelope: Envelope) -> None:
        await held.wait()

    stop = await jobs.subscribe("monitor", "replica.heartbeat", "jobs.stuck", stuck)
    remove = jobs.add_probe(jobs.queue_samples)
    try:
        for _ in range(3):  # one is taken by the stuck handler, two wait
            await bus.emit("replica.heartbeat", heartbeat("monitor"), source="monitor")
        await asyncio.sleep(0)
        await render()
        labels = {"service": "jobs", "replica": jobs.replica}
        queue = "evt-monitor-replica.heartbeat--jobs.stuck"
        assert value("warden_queue_messages", **labels, queue=queue) == 2
        assert value("warden_queue_messages", **labels, queue=f"{queue}.dead-letter") == 0
        # The in-process bus cannot tell its consumers: left out, not zero.
        assert (
            REGISTRY.get_sample_value("warden_queue_consumers", {**labels, "queue": queue}) is None
        )
    finally:
        held.set()
        await remove()
        await stop()


async def test_a_probe_that_fails_or_is_late_is_left_out_not_zero() -> None:
    replica = new_replica_id("reservations")
    labels = {"service": "reservations", "replica": replica}

    async def fine() -> list[Sample]:
        return [("warden_outbox_backlog", {}, 7.0)]

    async def broken() -> list[Sample]:
        raise RuntimeError("the database is away")

    async def late() -> list[Sample]:
        await asyncio.sleep(60)
        return [("warden_outbox_oldest_seconds", {}, 1.0)]

    removes = [PROBES.add("reservations", replica, probe) for probe in (fine, broken, late)]
    try:
        await PROBES.refresh(deadline_s=0.1)
        assert value("warden_outbox_backlog", **labels) == 7
        assert REGISTRY.get_sample_value("warden_outbox_oldest_seconds", labels) is None
    finally:
        for remove in removes:
            remove()
    await PROBES.refresh()
    assert REGISTRY.get_sample_value("warden_outbox_backlog", labels) is None  # removed


async def test_the_exposition_parses_and_names_every_warden_metric(bus: InProcessBus) -> None:
    jobs = MeteredBus(bus, "jobs", new_replica_id("jobs"))
    await jobs.emit("replica.heartbeat", heartbeat("jobs"), source="jobs")

    body, content_type = await render()

    assert content_type.startswith("text/plain; version=")  # the Prometheus text format
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert {"warden_events_published", "warden_http_request_duration_seconds"} <= names
    assert "process_cpu_seconds" in names or "process_cpu_seconds_total" in names


async def test_the_monitor_tells_each_poll_its_duration_and_age_or_failure() -> None:
    told: list[tuple[float, float | None]] = []
    up = True

    def answer() -> Any:
        if not up:
            from services.shared.remote.ssh import HostUnreachable

            raise HostUnreachable("a: refused", {"reason": "refused"})
        return healthy()

    async def publish(_event_type: str, _data: dict[str, Any]) -> None:
        pass

    monitor = Monitor([FakeReader("a", answer)], publish, interval_s=0.05, poll_deadline_s=0.04)
    monitor.stats.on_poll = lambda seconds, age: told.append((seconds, age))
    await monitor.start()
    try:
        await until(lambda: len(told) >= 2, "two polls told", 10)
        up = False
        await until(lambda: any(age is None for _, age in told), "a failed poll told", 10)
    finally:
        await monitor.stop()
    ok = [(s, age) for s, age in told if age is not None]
    assert ok and all(s >= 0 and age >= 0 for s, age in ok)
    assert monitor.stats.failures == sum(1 for _, age in told if age is None)


async def test_the_listener_serves_metrics_and_a_taken_port_says_what_to_set() -> None:
    stop, port = await serve_metrics("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert response.status == 200
                assert "process_cpu_seconds_total" in await response.text()
            async with session.get(f"http://127.0.0.1:{port}/") as response:
                assert response.status == 404  # nothing else is served there
        with pytest.raises(ConfigError) as taken:
            await serve_metrics("127.0.0.1", port)
        assert "metrics.port" in taken.value.message
    finally:
        await stop()


def test_the_metered_view_tells_what_its_bus_is() -> None:
    """Leadership asks whether the bus is in-process (then one replica leads alone), the live
    stream whether the broker connection was re-made: both through a service's MeteredBus."""
    inner = InProcessBus()
    metered = MeteredBus(inner, "violations", new_replica_id("violations"))
    assert metered.in_process
    inner.reconnections = 3
    assert metered.reconnections == 3
