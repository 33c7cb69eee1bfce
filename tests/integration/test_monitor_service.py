"""The monitor service end to end: its composition root polling the simulated fleet over real
SSH, publishing on the in-process bus and on RabbitMQ, answering snapshot and series RPCs."""

from __future__ import annotations

import functools
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.monitor.service import start as start_monitor
from services.shared.bus import Bus
from services.shared.bus.amqp import AmqpBus
from services.shared.bus.inproc import InProcessBus
from services.shared.config import load_settings
from services.shared.contracts import Envelope
from services.shared.errors import InvalidRequest, NotFound
from services.shared.runtime import ServiceContext
from services.shared.storage import db
from services.sim.model import SimFleet
from tests.support import polling
from tests.support.config import write_config
from tests.support.events import record
from tests.support.fleet import served_fleet

INTERVAL_S = 0.3


@dataclass
class Running:
    fleet: SimFleet
    bus: Bus  # the bus the test talks on (another connection on RabbitMQ)
    events: list[Envelope]
    context: ServiceContext  # the monitor's

    def of(self, event_type: str, host: str | None = None) -> list[dict[str, Any]]:
        return [
            e.data
            for e in self.events
            if e.type == event_type and (host is None or e.data["host"] == host)
        ]


until = functools.partial(polling.until, timeout=20.0)


@pytest.fixture(params=["inproc", "amqp"])
async def running(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Running]:
    fleet = SimFleet(3, 4, seed=7, churn=False)
    async with served_fleet(fleet, tmp_path) as served:
        monitor = {"interval_s": INTERVAL_S}
        # On RabbitMQ a replica waits 1.5 heartbeats to hear its peers before it polls: 0.75 s
        # here, not the default 3 s (nothing here is about heartbeats).
        config = write_config(
            tmp_path / "warden.toml",
            **served.config(),
            monitor=monitor,
            replicas={"heartbeat_s": 0.5},
        )
        settings = load_settings(config, environ={})
        engine = db.create_engine(settings.storage.database_url_for("monitor"))
        await db.upgrade(engine, "monitor")
        await engine.dispose()

        buses: list[Bus]
        if request.param == "inproc":
            service_bus = InProcessBus()
            buses = [service_bus]
        else:
            amqp_url = request.getfixturevalue("amqp_url")
            service_bus, test_bus = AmqpBus(amqp_url), AmqpBus(amqp_url)
            buses = [service_bus, test_bus]
        for bus in buses:
            await bus.start()
        events: list[Envelope] = []
        await record(buses[-1], events, "monitor")
        context = ServiceContext("monitor", settings, service_bus)
        teardown = await start_monitor(context)
        try:
            yield Running(fleet, buses[-1], events, context)
        finally:
            await teardown()
            for bus in buses:
                await bus.close()


async def test_every_gpu_is_discovered_and_every_host_sampled(running: Running) -> None:
    await until(lambda: len(running.of("gpu.discovered")) == 12, "12 GPUs discovered")
    for host in ("sim-001", "sim-002", "sim-003"):
        await until(lambda h=host: len(running.of("host.sampled", h)) >= 2, f"{host} sampled")
    sample = running.of("host.sampled", "sim-001")[-1]
    assert sample["gpu_status"] == "ok" and len(sample["gpus"]) == 4
    assert sample["cpu_percent"] is not None  # a delta of two readings
    assert all(gpu["fan_speed_percent"] is None for gpu in sample["gpus"])  # A100: [N/A]

    snapshot = await running.bus.call("monitor", "snapshot", {})
    hosts = {h["name"]: h for h in snapshot["hosts"]}
    assert set(hosts) == {"sim-001", "sim-002", "sim-003"}
    assert all(h["reachable"] for h in hosts.values())
    assert len(hosts["sim-002"]["sample"]["gpus"]) == 4
    with pytest.raises(NotFound):
        await running.bus.call("monitor", "snapshot", {"host": "nope"})


async def test_alone_on_the_in_process_bus_it_waits_for_no_peer(running: Running) -> None:
    """On RabbitMQ a starting replica says `joining` to hear its peers first, then `active`
    with the moment it takes its hosts from (`active_from`); on the in-process bus there is no
    other replica to hear, and it takes its hosts at once (no `active_from`)."""
    replicas = running.context.replicas
    await until(lambda: replicas.role() == "active", "the replica active")
    assert ("active_from" in replicas.details()) == (not running.bus.in_process)


async def test_a_new_process_is_observed_with_its_owner(running: Running) -> None:
    pid = running.fleet.start_process("sim-002", 1, "bob", "python train.py --lr 3e-4")

    def seen() -> list[dict[str, Any]]:
        observed = running.of("processes.observed", "sim-002")
        return [p for p in (observed[-1]["processes"] if observed else []) if p["pid"] == pid]

    await until(lambda: bool(seen()), "bob's process observed")
    process = seen()[0]
    assert process["user"] == "bob"
    assert process["command"] == "python train.py --lr 3e-4"
    gpu_uuids = {g["uuid"]: g["index"] for g in running.of("gpu.discovered", "sim-002")}
    assert gpu_uuids[process["gpu_uuid"]] == 1

    running.fleet.stop_process("sim-002", pid)
    await until(lambda: not seen(), "the process gone from the next observation")


async def test_a_hung_host_is_reported_once_and_delays_nobody(running: Running) -> None:
    await until(lambda: len(running.of("host.sampled", "sim-003")) >= 1, "first samples")
    running.fleet.set_hang("sim-003", math.inf)
    await until(lambda: running.of("host.unreachable", "sim-003") != [], "sim-003 unreachable")
    before = len(running.of("host.sampled", "sim-001"))
    await until(
        lambda: len(running.of("host.sampled", "sim-001")) >= before + 5,
        "sim-001 still sampled every tick while sim-003 hangs",
    )
    assert running.of("host.unreachable", "sim-003")[0]["reason"] == "timed out"

    hung_from = len(running.events)
    running.fleet.set_hang("sim-003", None)

    def recovered() -> bool:
        return any(
            e.type == "host.recovered" and e.data["host"] == "sim-003"
            for e in running.events[hung_from:]
        )

    await until(recovered, "sim-003 recovered", timeout=60)
    # The hang's outage: everything after sim-003's last sample before it (a poll on a busy
    # machine may also have missed its deadline just before the hang: an outage of its own).
    last_sample = max(
        i
        for i, e in enumerate(running.events[:hung_from])
        if e.type == "host.sampled" and e.data["host"] == "sim-003"
    )
    outage = [
        e.type
        for e in running.events[last_sample + 1 :]
        if e.data.get("host") == "sim-003" and e.type in ("host.unreachable", "host.recovered")
    ]
    # Once, not once per tick: the outage's first report is followed by its recovery.
    assert outage[:2] == ["host.unreachable", "host.recovered"]


async def test_a_dropped_host_and_a_broken_nvidia_smi(running: Running) -> None:
    await until(lambda: len(running.of("host.sampled", "sim-001")) >= 1, "first samples")
    running.fleet.set_nvidia_smi("sim-001", "failing")
    await until(
        lambda: running.of("host.sampled", "sim-001")[-1]["gpu_status"] == "error",
        "the failure reported in the sample",
    )
    assert running.of("gpu.disappeared", "sim-001") == []  # unknown is not gone

    running.fleet.set_down("sim-002", True)
    await until(lambda: running.of("host.unreachable", "sim-002") != [], "sim-002 down")
    running.fleet.set_down("sim-002", False)
    await until(lambda: running.of("host.recovered", "sim-002") != [], "sim-002 back", timeout=60)


async def test_series_of_a_gpu_metric_and_bad_queries(running: Running) -> None:
    await until(lambda: len(running.of("host.sampled", "sim-001")) >= 4, "some samples")
    uuid = running.of("gpu.discovered", "sim-001")[0]["uuid"]
    now = datetime.now(UTC)
    query = {
        "host": "sim-001",
        "metric": "utilization_gpu_percent",
        "gpu_uuid": uuid,
        "start": (now - timedelta(minutes=5)).isoformat(),
        "end": (now + timedelta(minutes=1)).isoformat(),
        "step_s": 60,
    }

    async def buckets() -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = (await running.bus.call("monitor", "series", query))[
            "buckets"
        ]
        return answer

    found = await until(buckets, "a bucket written", interval=0.2)  # flushed every second
    assert sum(b["count"] for b in found) >= 1
    assert all(b["min"] <= b["avg"] <= b["max"] for b in found)

    for bad in (
        {**query, "metric": "no_such_metric"},
        {**query, "end": query["start"]},
        {**query, "start": "yesterday"},
        {"host": "sim-001"},
    ):
        with pytest.raises(InvalidRequest):
            await running.bus.call("monitor", "series", bad)
