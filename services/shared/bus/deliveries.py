"""Deliveries to the AMQP bus's event consumers straight from aiormq (`amqp.py`).

aio-pika hands each delivery over by wrapping it in an `IncomingMessage` and running the
callback in a task of its own, on top of the task aiormq already runs it in: about a fifth of
a consumer's CPU per event (bench/bus_throughput.py). `fast_consume` puts our callback in
aio-pika's place on the channel, with a `Delivery` that has what the handlers use of an
`IncomingMessage`. aio-pika still restores the consumer after a reconnect (its own way);
the channel's reopen callback then puts ours back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import aiormq
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustChannel


class Delivery:
    """One delivered message: what `AmqpBus` reads of it and how it settles it."""

    __slots__ = (
        "_channel",
        "body",
        "content_type",
        "delivery_tag",
        "headers",
        "message_id",
        "redelivered",
        "type",
    )

    def __init__(self, message: aiormq.abc.DeliveredMessage) -> None:
        properties = message.header.properties
        delivery = message.delivery
        self._channel = message.channel
        self.body = message.body
        self.delivery_tag: int | None = message.delivery_tag
        self.redelivered = bool(getattr(delivery, "redelivered", False))
        self.headers: dict[str, Any] = properties.headers or {}
        self.content_type = properties.content_type
        self.message_id = properties.message_id
        self.type = properties.message_type

    async def ack(self, multiple: bool = False) -> None:
        assert self.delivery_tag is not None
        await self._channel.basic_ack(self.delivery_tag, multiple=multiple)

    async def reject(self, requeue: bool = False) -> None:
        assert self.delivery_tag is not None
        await self._channel.basic_reject(self.delivery_tag, requeue=requeue)

    async def nack(self, requeue: bool = True) -> None:
        assert self.delivery_tag is not None
        await self._channel.basic_nack(self.delivery_tag, requeue=requeue)


Callback = Callable[[AbstractIncomingMessage], Awaitable[None]]


async def fast_consume(channel: AbstractChannel, tag: str, callback: Callback) -> None:
    """Deliveries of consumer `tag` on `channel` go to `callback` as `Delivery`s (from now
    on, and again after each reconnect)."""

    async def deliver(message: aiormq.abc.DeliveredMessage) -> None:
        await callback(Delivery(message))  # type: ignore[arg-type]  # the parts it uses

    async def install(*_: Any) -> None:
        underlay = cast(aiormq.Channel, await channel.get_underlay_channel())
        if tag in underlay.consumers:
            underlay.consumers[tag] = deliver

    await install()
    if isinstance(channel, AbstractRobustChannel):
        channel.reopen_callbacks.add(install)
