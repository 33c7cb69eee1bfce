"""The AMQP bus's consumers after the broker restarts (a private RabbitMQ, stopped and started
for real): events published after it came back are handled, a handler that fails is retried
and its event handled once it succeeds, and nothing is handled twice. The consumers take their
deliveries straight from aiormq (services/shared/bus/deliveries.py), also after aio-pika has
restored them."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from services.shared.bus.amqp import AmqpBus
from services.shared.bus.base import BusSettings
from services.shared.contracts import Envelope
from tests.support.polling import until
from tests.support.private_servers import private_rabbit

pytestmark = pytest.mark.timeout(300)
WAIT_S = 60.0


async def test_consumers_handle_and_retry_events_after_the_broker_restarts() -> None:
    with private_rabbit() as rabbit:
        publisher = AmqpBus(rabbit.url, BusSettings(max_deliveries=3), name="test-publisher")
        consumer = AmqpBus(rabbit.url, BusSettings(max_deliveries=3), name="test-consumer")
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

            async def sent_again() -> bool:
                if not (publisher.connected and consumer.connected):
                    return False
                try:
                    await emit("after")
                except Exception:
                    return False
                return True

            await until(sent_again, "a publish after the restart", WAIT_S, interval=0.5)
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
