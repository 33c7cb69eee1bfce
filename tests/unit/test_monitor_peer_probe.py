"""Monitor replicas found dead before their heartbeat expires (services/monitor/peer_probe.py):
a peer whose heartbeat is late and whose own RPC queue the broker no longer has (or has with no
consumer) is dead; one whose queue still has its consumer is not; a bus that cannot tell
finds nobody. Heartbeats go over the in-process bus; the broker's answer about the queues is a
fake (`queue_depths`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest

from services.monitor.peer_probe import vanished
from services.shared.bus.amqp import rpc_queue_name
from services.shared.bus.inproc import InProcessBus
from services.shared.cluster.replicas import HEARTBEAT, Replicas
from tests.support.polling import until

OWN_RPC, PEER_RPC = "monitor-rme", "monitor-rpeer"
PEER = "monitor@h:2-peer"


class Broker(InProcessBus):
    """The in-process bus, with the queues the broker would answer about (ready, consumers)."""

    def __init__(self) -> None:
        super().__init__()
        self.queues: dict[str, tuple[int, int | None]] = {rpc_queue_name(OWN_RPC): (0, 1)}
        self.asked: list[list[str]] = []

    async def queue_depths(self, names: Iterable[str]) -> dict[str, tuple[int, int | None]]:
        wanted = list(names)
        self.asked.append(wanted)
        return {name: self.queues[name] for name in wanted if name in self.queues}


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    bus = Broker()
    await bus.start()
    try:
        yield bus
    finally:
        await bus.close()


async def peer_beats(bus: Broker) -> None:
    data = {
        "service": "monitor",
        "replica": PEER,
        "role": "active",
        "started_at": "2026-11-27T20:00:00+00:00",
        "interval_s": 2.0,
        "details": {"hosts": 3, "rpc": PEER_RPC},
    }
    await bus.emit(HEARTBEAT, data, source="monitor")


async def watching(bus: Broker, heartbeat_s: float) -> Replicas:
    """This replica, having heard the peer's heartbeat once (`heartbeat_s` 0: late at once)."""
    replicas = Replicas(bus, "monitor", heartbeat_s=heartbeat_s, replica_id="monitor@h:1-me")
    await replicas.watch("monitor")
    await peer_beats(bus)
    await heard(replicas)
    assert [r.replica for r in replicas.live("monitor")] == ["monitor@h:1-me", PEER]
    return replicas


async def heard(replicas: Replicas) -> None:
    await until(lambda: PEER in [r.replica for r in replicas.live("monitor")], "its heartbeat", 5)


async def test_a_late_peer_whose_queue_is_gone_is_dead(broker: Broker) -> None:
    replicas = await watching(broker, heartbeat_s=0.0)
    assert await vanished(broker, replicas, OWN_RPC) == [PEER]
    assert broker.asked == [[rpc_queue_name(OWN_RPC), rpc_queue_name(PEER_RPC)]]


async def test_a_late_peer_whose_queue_lost_its_consumer_is_dead(broker: Broker) -> None:
    broker.queues[rpc_queue_name(PEER_RPC)] = (2, 0)
    replicas = await watching(broker, heartbeat_s=0.0)
    assert await vanished(broker, replicas, OWN_RPC) == [PEER]


async def test_a_late_peer_still_consuming_is_alive(broker: Broker) -> None:
    broker.queues[rpc_queue_name(PEER_RPC)] = (0, 1)
    replicas = await watching(broker, heartbeat_s=0.0)
    assert await vanished(broker, replicas, OWN_RPC) == []


async def test_a_bus_that_cannot_tell_finds_nobody(broker: Broker) -> None:
    broker.queues.clear()  # not even this replica's own queue: it cannot tell
    replicas = await watching(broker, heartbeat_s=0.0)
    assert await vanished(broker, replicas, OWN_RPC) == []


async def test_a_peer_heard_lately_is_not_asked_about(broker: Broker) -> None:
    replicas = await watching(broker, heartbeat_s=60.0)
    assert await vanished(broker, replicas, OWN_RPC) == []
    assert broker.asked == []


async def test_a_forgotten_peer_is_back_with_its_next_heartbeat(broker: Broker) -> None:
    replicas = await watching(broker, heartbeat_s=0.0)
    changes: list[str] = []
    replicas.on_change(changes.append)
    replicas.forget("monitor", PEER)
    assert [r.replica for r in replicas.live("monitor")] == ["monitor@h:1-me"]
    assert changes == ["monitor"]
    await peer_beats(broker)
    await heard(replicas)
