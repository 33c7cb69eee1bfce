"""The in-process bus: the embedded default for `warden run all`.

It keeps the routing semantics of the AMQP bus (topic patterns, one durable queue per
consumer, competing consumers, fan-out across queues, bounded redelivery, dead letters, RPC
with a deadline) so that services behave the same on both. Envelopes published in this
process were validated by `make_envelope` and are handed over as they are; raw bodies from
`publish_raw` are validated on delivery like on the wire. RPC arguments and results do a JSON
round trip so that nothing works here that would fail over AMQP.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.shared import fastjson
from services.shared.bus.base import (
    DEAD_LETTER_SUFFIX,
    Bus,
    BusSettings,
    EventHandler,
    RpcHandler,
    Teardown,
    events_exchange,
    queue_name,
    topic_matches,
)
from services.shared.contracts import Envelope, parse_envelope
from services.shared.errors import (
    ContractError,
    NotFound,
    ServiceUnavailable,
    WardenError,
    error_from_dict,
)
from services.shared.failures import (
    ConsumerOutages,
    Unreachable,
    log_rpc_failure,
    outage,
)

log = logging.getLogger("warden.bus")


@dataclass
class _Message:
    envelope: Envelope | None = None
    body: bytes | None = None
    deliveries: int = 0


@dataclass
class _Queue:
    name: str
    messages: asyncio.Queue[_Message] = field(default_factory=asyncio.Queue)
    dead: list[bytes] = field(default_factory=list)


class InProcessBus(Bus):
    def __init__(self, settings: BusSettings | None = None) -> None:
        self.settings = settings or BusSettings()
        self._unreachable = Unreachable(log)
        self._outages = ConsumerOutages(log)
        self._queues: dict[str, _Queue] = {}
        # exchange -> [(pattern, queue name)]
        self._bindings: dict[str, list[tuple[str, str]]] = {}
        self._servers: dict[str, list[Mapping[str, RpcHandler]]] = {}
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def in_process(self) -> bool:
        return True

    async def start(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        workers, self._workers = self._workers, set()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._servers.clear()

    # --- events ---------------------------------------------------------------------------

    async def publish(self, envelope: Envelope) -> None:
        self._route(events_exchange(envelope.source), envelope.type, _Message(envelope=envelope))

    async def publish_raw(self, source: str, routing_key: str, body: bytes) -> None:
        self._route(events_exchange(source), routing_key, _Message(body=body))

    def _route(self, exchange: str, routing_key: str, message: _Message) -> None:
        for pattern, name in self._bindings.get(exchange, ()):
            if topic_matches(pattern, routing_key):
                # Each queue gets its own copy (its own delivery count).
                self._queues[name].messages.put_nowait(
                    _Message(envelope=message.envelope, body=message.body)
                )

    async def subscribe(
        self,
        source: str,
        pattern: str,
        consumer: str,
        handler: EventHandler,
        *,
        concurrency: int = 1,
        transient: bool = False,
    ) -> Teardown:
        name = queue_name(source, pattern, consumer)
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = _Queue(name)
            self._bindings.setdefault(events_exchange(source), []).append((pattern, name))
        tasks = [
            asyncio.create_task(self._consume(queue, handler), name=f"consume {name}")
            for _ in range(max(1, concurrency))
        ]
        self._workers.update(tasks)

        async def teardown() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._workers.difference_update(tasks)
            if transient:
                self._queues.pop(name, None)
                bindings = self._bindings.get(events_exchange(source), [])
                with contextlib.suppress(ValueError):
                    bindings.remove((pattern, name))

        return teardown

    async def _consume(self, queue: _Queue, handler: EventHandler) -> None:
        while True:
            message = await queue.messages.get()
            message.deliveries += 1
            try:
                envelope = message.envelope or parse_envelope(message.body or b"")
            except ContractError as err:
                self._dead_letter(queue, message, f"invalid message: {err.message}")
                continue
            try:
                await handler(envelope)
            except asyncio.CancelledError:
                # Stopped while handling: the message goes back for the next consumer.
                message.deliveries -= 1
                queue.messages.put_nowait(message)
                raise
            except Exception as err:
                if outage(err):
                    # Nothing wrong with the message: it waits and goes again, uncounted.
                    message.deliveries -= 1
                    await asyncio.sleep(self._outages.failed(queue.name, err))
                    queue.messages.put_nowait(message)
                elif message.deliveries >= self.settings.max_deliveries:
                    self._dead_letter(queue, message, f"handler failed: {err!r}")
                else:
                    log.debug("handler of %s failed (%r); redelivering", queue.name, err)
                    queue.messages.put_nowait(message)
            else:
                self._outages.succeeded(queue.name)

    def _dead_letter(self, queue: _Queue, message: _Message, reason: str) -> None:
        body = message.envelope.to_json() if message.envelope else (message.body or b"")
        queue.dead.append(body)
        log.warning(
            "dead-lettered message on %s after %d deliveries: %s",
            queue.name,
            message.deliveries,
            reason,
        )

    async def dead_letters(self, queue: str) -> list[bytes]:
        found = self._queues.get(queue)
        if found is None:
            return []
        taken, found.dead = found.dead, []
        return taken

    async def queue_depths(self, names: Iterable[str]) -> dict[str, tuple[int, int | None]]:
        found: dict[str, tuple[int, int | None]] = {}
        for name in names:
            queue = self._queues.get(name)
            if queue is not None:
                found[name] = (queue.messages.qsize(), None)
            elif (owner := self._queues.get(name.removesuffix(DEAD_LETTER_SUFFIX))) is not None:
                found[name] = (len(owner.dead), None)
        return found

    # --- RPC ------------------------------------------------------------------------------

    async def serve(self, service: str, methods: Mapping[str, RpcHandler]) -> Teardown:
        table = dict(methods)
        self._servers.setdefault(service, []).append(table)
        self._round_robin.setdefault(service, itertools.count())

        async def teardown() -> None:
            with contextlib.suppress(ValueError):
                self._servers.get(service, []).remove(table)

        return teardown

    async def call(
        self,
        service: str,
        method: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        # As over the wire: what comes back is plain JSON data, never the server's objects.
        return fastjson.loads(await self.call_json(service, method, args, timeout=timeout))

    async def call_json(
        self,
        service: str,
        method: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> bytes:
        deadline = self.settings.rpc_timeout_s if timeout is None else timeout
        servers = self._servers.get(service)
        if self._closed or not servers:
            raise ServiceUnavailable(
                f"service {service!r} is not running", {"service": service, "method": method}
            )
        table = servers[next(self._round_robin[service]) % len(servers)]
        handler = table.get(method)
        if handler is None:
            raise NotFound(
                f"service {service!r} has no RPC method {method!r}",
                {"service": service, "method": method},
            )
        wire_args = fastjson.loads(fastjson.dumps(dict(args or {})))
        try:
            # In the caller's own task (asyncio.timeout, not wait_for's task of its own): two
            # trips through the event loop's queue fewer per call, what `warden run all`'s
            # latency under load is made of.
            async with asyncio.timeout(deadline):
                result = await handler(wire_args)
            return fastjson.dumps(result)
        except TimeoutError as err:
            raise ServiceUnavailable(
                f"{service}.{method} did not answer within {deadline:g}s",
                {"service": service, "method": method, "timeout_s": deadline},
            ) from err
        except WardenError as err:
            # As over the wire: the caller gets the error rebuilt from its data.
            raise error_from_dict(err.to_dict()) from err
        except Exception as err:
            failure = log_rpc_failure(log, self._unreachable, service, method, err)
            raise error_from_dict(failure.to_dict()) from err
