"""Replicas hear each other's heartbeats over real RabbitMQ (one connection each, as processes
would have), see a clean stop at once and a silent one after `dead_after_s`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.shared.bus.amqp import AmqpBus
from services.shared.bus.base import BusSettings
from services.shared.bus.inproc import InProcessBus
from services.shared.cluster.replicas import Replicas
from tests.support.polling import until

SETTINGS = BusSettings(max_deliveries=3, prefetch=16, rpc_timeout_s=2.0)


@pytest.fixture
async def buses(amqp_url: str) -> AsyncIterator[list[AmqpBus]]:
    opened = [AmqpBus(amqp_url, SETTINGS, name=f"replica-{i}") for i in range(3)]
    for bus in opened:
        await bus.start()
    yield opened
    for bus in opened:
        await bus.close()


def ids(replicas: Replicas, service: str) -> list[str]:
    return [peer.replica for peer in replicas.live(service)]


async def test_replicas_see_each_other_and_a_clean_stop_at_once(buses: list[AmqpBus]) -> None:
    shards = {"hosts": 3}
    first = Replicas(buses[0], "monitor", heartbeat_s=0.2, dead_after_s=30, details=lambda: shards)
    second = Replicas(buses[1], "monitor", heartbeat_s=0.2, dead_after_s=30)
    gateway = Replicas(buses[2], "gateway", heartbeat_s=0.2, dead_after_s=30)
    changes: list[str] = []
    first.on_change(changes.append)
    for replicas in (first, second):
        await replicas.watch("monitor")
    await gateway.watch("monitor", "gateway")
    for replicas in (first, second, gateway):
        replicas.start()

    both = sorted([first.replica_id, second.replica_id])
    await until(lambda: ids(first, "monitor") == both, "first sees both")
    await until(lambda: ids(gateway, "monitor") == both, "the gateway sees both monitors")
    assert ids(gateway, "gateway") == [gateway.replica_id]
    seen = {peer.replica: peer for peer in gateway.live("monitor")}
    assert seen[first.replica_id].details == {"hosts": 3}
    assert seen[first.replica_id].role == "active"
    assert "monitor" in changes

    # dead_after_s is 30 s: only the `stopping` heartbeat can make it go this soon.
    await second.stop()
    await until(lambda: ids(first, "monitor") == [first.replica_id], "the stop is seen")
    await until(lambda: ids(gateway, "monitor") == [first.replica_id], "by every watcher")
    for replicas in (first, gateway):
        await replicas.stop()


async def test_a_silent_replica_expires(buses: list[AmqpBus]) -> None:
    watcher = Replicas(buses[0], "monitor", heartbeat_s=0.1, dead_after_s=0.6)
    silent = Replicas(buses[1], "monitor", heartbeat_s=0.1, dead_after_s=0.6)
    await watcher.watch("monitor")
    watcher.start()
    silent.start()
    await until(lambda: silent.replica_id in ids(watcher, "monitor"), "the peer is seen")
    await buses[1].close()  # as a process killed -9: no `stopping`
    await until(lambda: ids(watcher, "monitor") == [watcher.replica_id], "the peer expires")
    await watcher.stop()
    await silent.stop()  # its `stopping` cannot be sent: that is not an error


async def test_role_and_details_are_read_at_every_beat() -> None:
    bus = InProcessBus(SETTINGS)
    await bus.start()
    role = ["standby"]
    replicas = Replicas(bus, "violations", heartbeat_s=0.05, dead_after_s=1, role=lambda: role[0])
    await replicas.watch("violations")
    replicas.start()
    await until(
        lambda: [p.role for p in replicas.live("violations")] == ["standby"], "standby shown"
    )
    role[0] = "leader"
    await until(
        lambda: [p.role for p in replicas.live("violations")] == ["leader"], "the new role shown"
    )
    await replicas.stop()
    await bus.close()
