"""Acknowledging a consumer's deliveries in batches, for the AMQP bus (`amqp.py`), and closing
what may already be gone quietly."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

log = logging.getLogger("warden.bus")


class AckBatcher:
    """Acks a consumer channel's handled deliveries with one `basic.ack(multiple=True)`.

    Only the oldest run of settled deliveries is acked, so a multiple ack never covers a
    message another handler still holds. A batch goes out when `every` are waiting or
    `delay` seconds after the first one, whichever comes first.
    """

    def __init__(self, every: int, delay: float = 0.005) -> None:
        self.every, self.delay = every, delay
        # delivery tag -> None while handled, True when handled OK, False when settled alone
        self._open: dict[int, bool | None] = {}
        self._last_ok: AbstractIncomingMessage | None = None
        self._waiting = 0
        self._timer: asyncio.TimerHandle | None = None
        self._messages: dict[int, AbstractIncomingMessage] = {}
        self._tasks: set[asyncio.Future[None]] = set()

    def received(self, message: AbstractIncomingMessage) -> None:
        if message.delivery_tag is not None:
            self._open[message.delivery_tag] = None

    def handled(self, message: AbstractIncomingMessage) -> None:
        if message.delivery_tag is not None:
            self._open[message.delivery_tag] = True
            self._messages[message.delivery_tag] = message
            self._advance()

    def settled(self, message: AbstractIncomingMessage) -> None:
        """Acked, rejected or requeued on its own (or not at all: the channel closed)."""
        tag = message.delivery_tag
        if tag is not None and tag in self._open and self._open[tag] is None:
            self._open[tag] = False
            self._advance()

    def _advance(self) -> None:
        while self._open:
            tag, state = next(iter(self._open.items()))
            if state is None:
                break
            del self._open[tag]
            if state:
                self._last_ok = self._messages.pop(tag)
                self._waiting += 1
        if self._waiting >= self.every:
            self._flush_soon()
        elif self._waiting and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.delay, self._flush_soon)

    def _flush_soon(self) -> None:
        task = asyncio.ensure_future(quietly(self.flush()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        last, self._last_ok, self._waiting = self._last_ok, None, 0
        if last is not None:
            await last.ack(multiple=True)


async def quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception as err:  # closing something that is already gone
        log.debug("ignored while closing: %r", err)
