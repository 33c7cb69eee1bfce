"""`HostDirectory` on RabbitMQ, against a test double of the monitor's inventory (it serves
`list_hosts` and publishes the real host.* events): the seed from [[hosts]] while the monitor
does not answer, its list once it does, each event as it comes, every replica hearing each one,
and the periodic list healing a change whose event was missed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.monitor import api as monitor_api
from services.shared.bus.amqp import AmqpBus
from services.shared.cluster.host_directory import HostDirectory
from services.shared.config import HostConfig
from tests.support.monitor_double import MonitorDouble, host_record
from tests.support.polling import until

pytestmark = [pytest.mark.amqp, pytest.mark.timeout(120)]

DEADLINE_S = 30.0
SEED = HostConfig(name="dgx1", address="dgx1.lab.example", user="warden")


@pytest.fixture
async def buses(amqp_url: str) -> AsyncIterator[tuple[AmqpBus, AmqpBus, AmqpBus]]:
    """Two services' buses (two replicas) and the monitor double's, on the test's vhost."""
    made = (AmqpBus(amqp_url, name="a"), AmqpBus(amqp_url, name="b"), AmqpBus(amqp_url, name="m"))
    for bus in made:
        await bus.start()
    try:
        yield made
    finally:
        for bus in made:
            await bus.close()


def directory(bus: AmqpBus, refresh_s: float = 30.0) -> HostDirectory:
    return HostDirectory([SEED], bus=bus, list_hosts=monitor_api.LIST_HOSTS, refresh_s=refresh_s)


async def test_the_seed_serves_until_the_monitor_answers_then_events_change_every_replica(
    buses: tuple[AmqpBus, AmqpBus, AmqpBus],
) -> None:
    first_bus, second_bus, monitor_bus = buses
    replicas = [directory(first_bus), directory(second_bus)]
    for replica in replicas:
        await replica.start("jobs")
    double = MonitorDouble(monitor_bus, {"a1": host_record("a1", labels=["a100"])})
    try:
        assert all(list(r) == ["dgx1"] and not r.listed for r in replicas)  # no monitor yet
        await double.serve()
        for replica in replicas:
            await until(lambda r=replica: r.listed, "the monitor's list", DEADLINE_S)
            assert list(replica) == ["a1"] and replica.labels("a1") == ("a100",)
            assert replica.was_removed("dgx1")  # the monitor's list, not the seed, rules

        await double.add(host_record("b2", port=2222))
        await double.update("a1", labels=["h100"])
        await double.remove("a1")
        for replica in replicas:  # each replica hears each event (a queue of its own)
            await until(
                lambda r=replica: "a1" not in r and "b2" in r, "b2 added, a1 removed", DEADLINE_S
            )
            assert list(replica) == ["b2"] and replica["b2"].port == 2222
            known = replica.known("a1")
            assert known is not None and known.labels == ("h100",)  # its last record
    finally:
        for replica in replicas:
            await replica.stop()
        await double.stop()


async def test_a_missed_event_is_healed_by_the_next_list(
    buses: tuple[AmqpBus, AmqpBus, AmqpBus],
) -> None:
    bus, _, monitor_bus = buses
    double = MonitorDouble(monitor_bus, {"dgx1": host_record("dgx1")})
    await double.serve()
    hosts = directory(bus, refresh_s=0.3)
    await hosts.start("violations")
    try:
        await until(lambda: hosts.listed, "the monitor's list", DEADLINE_S)
        # Changed while nobody heard (no event): the next list brings it.
        double.hosts["c3"] = host_record("c3", labels=["lab-b"])
        del double.hosts["dgx1"]
        await until(lambda: "c3" in hosts and "dgx1" not in hosts, "the change", DEADLINE_S)
        assert hosts.labels("c3") == ("lab-b",) and double.listed >= 2
    finally:
        await hosts.stop()
        await double.stop()
