"""The AMQP bus's consumers after the broker restarts (a private RabbitMQ, stopped and started
for real): events published after it came back are handled, a handler that fails is retried
and its event handled once it succeeds, and nothing is handled twice. The consumers take their
deliveries straight from aiormq (services/shared/bus/deliveries.py), also after aio-pika has
restored them."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from services.shared.bus.amqp import AmqpBus
from services.shared.bus.base import BusSettings
from services.shared.contracts import Envelope
from tests.support.polling import until
from tests.support.private_servers import private_rabbit

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]
WAIT_S = 60.0
# Reconnect attempts every 0.5 s instead of 5 s: back sooner once the broker is.
RECONNECT_S = 0.5


def amqp_bus(url: str, name: str, **settings: Any) -> AmqpBus:
    """A bus on `url` that tries to reconnect every RECONNECT_S."""
    return AmqpBus(url, BusSettings(reconnect_interval_s=RECONNECT_S, **settings), name=name)


async def published_again(buses: list[AmqpBus], publish: Callable[[], Awaitable[None]]) -> None:
    """Once every bus is connected again after the restart, `publish` (retried until it goes)."""

    async def sent() -> bool:
        if not all(bus.connected for bus in buses):
            return False
        try:
            await publish()
        except Exception:
            return False
        return True

    published: bool = await until(sent, "a publish after the restart", WAIT_S, interval=0.5)
    assert published


async def test_consumers_handle_and_retry_events_after_the_broker_restarts() -> None:
    with private_rabbit() as rabbit:
        publisher = amqp_bus(rabbit.url, "test-publisher", max_deliveries=3)
        consumer = amqp_bus(rabbit.url, "test-consumer", max_deliveries=3)
        await publisher.start()
        await consumer.start()
        handled: Counter[str] = Counter()
        failures: Counter[str] = Counter()

        async def on_recovered(envelope: Envelope) -> None:
            host = envelope.data["host"]
            if host.startswith("flaky") and failures[host] < 1:
                failures[host] += 1
                raise RuntimeError("fails once")
            handled[host] += 1

        teardown = await consumer.subscribe("monitor", "host.recovered", "test.on", on_recovered)
        try:

            async def emit(host: str) -> None:
                data = {"host": host, "at": "2026-11-21T13:05:01+00:00"}
                await publisher.emit("host.recovered", data, source="monitor")

            await emit("before")
            await emit("flaky-before")
            await until(lambda: handled["flaky-before"] == 1, "handled before", WAIT_S)

            await asyncio.to_thread(rabbit.stop)
            await asyncio.to_thread(rabbit.start)

            await published_again([publisher, consumer], lambda: emit("after"))
            await emit("flaky-after")
            await until(
                lambda: handled["after"] >= 1 and handled["flaky-after"] == 1,
                "handled after the restart",
                WAIT_S,
            )
            await asyncio.sleep(0.5)  # a second delivery, were there one, would show now
            assert handled["before"] == 1 and handled["flaky-before"] == 1
            assert handled["flaky-after"] == 1 and failures["flaky-after"] == 1
            assert handled["after"] == 1
        finally:
            await teardown()
            await consumer.close()
            await publisher.close()


async def test_a_consumer_torn_down_while_the_broker_is_away_handles_nothing_once_it_is_back() -> (
    None
):
    """A leader standing down while the broker restarts tears its consumers down when nothing
    can reach the broker; the robust channel must not bring them back to act as a deposed
    replica: what they would have had goes to the consumer that took over."""
    with private_rabbit() as rabbit:
        publisher = amqp_bus(rabbit.url, "test-publisher")
        old = amqp_bus(rabbit.url, "test-old-leader")
        new = amqp_bus(rabbit.url, "test-new-leader")
        for bus in (publisher, old, new):
            await bus.start()
        by_old: list[str] = []
        by_new: list[str] = []

        async def old_handles(envelope: Envelope) -> None:
            by_old.append(envelope.data["host"])

        async def new_handles(envelope: Envelope) -> None:
            by_new.append(envelope.data["host"])

        async def emit(host: str) -> None:
            data = {"host": host, "at": "2026-11-21T13:05:01+00:00"}
            await publisher.emit("host.recovered", data, source="monitor")

        old_teardown = await old.subscribe("monitor", "host.recovered", "test.on", old_handles)
        new_teardown = None
        try:
            await emit("before")
            await until(lambda: by_old == ["before"], "handled by the leader", WAIT_S)
            await asyncio.to_thread(rabbit.stop)
            await old_teardown()  # stands down: the broker cannot be told
            await asyncio.to_thread(rabbit.start)

            await published_again([publisher, old, new], lambda: emit("after-0"))
            await asyncio.sleep(2)  # time for the old consumer to be restored, were it to be
            for n in range(1, 6):
                await emit(f"after-{n}")
            new_teardown = await new.subscribe("monitor", "host.recovered", "test.on", new_handles)
            await until(lambda: len(by_new) == 6, "every event handled by the new one", WAIT_S)
            assert by_old == ["before"]
            assert sorted(by_new) == [f"after-{n}" for n in range(6)]
        finally:
            if new_teardown is not None:
                await new_teardown()
            for bus in (publisher, old, new):
                await bus.close()
