"""A service's view of the bus that counts what goes through it, for Prometheus.

Each service gets its own `MeteredBus` around the process's bus (runtime.py), so what one
replica publishes, consumes, calls and answers is counted under its own `service` and
`replica` labels, also when five services share one in-process bus (`warden run all`). The
buses themselves know nothing of metrics; the cost on the way is one counter or histogram
call per message or call.

It also knows the durable queues its service consumes, whose depths are read at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any

from services.shared.bus.base import (
    Bus,
    EventHandler,
    RpcHandler,
    Teardown,
    dead_letter_queue_name,
    queue_name,
)
from services.shared.contracts import Envelope
from services.shared.errors import ServiceUnavailable, WardenError
from services.shared.metrics import (
    EVENTS_CONSUMED,
    EVENTS_PUBLISHED,
    PROBES,
    RPC_CLIENT,
    RPC_SERVER,
    Children,
    Probe,
    Sample,
)


class MeteredBus(Bus):
    def __init__(self, inner: Bus, service: str, replica: str) -> None:
        self.inner = inner
        self.service = service
        self.replica = replica
        self._published = Children(EVENTS_PUBLISHED, service, replica)
        self._consumed = Children(EVENTS_CONSUMED, service, replica)
        self._client = Children(RPC_CLIENT, service, replica)
        self._server = Children(RPC_SERVER, service, replica)
        self.queues: set[str] = set()  # durable queues this service consumes, and their DLQs

    @property
    def settings(self) -> Any:  # type: ignore[override]
        return self.inner.settings

    @property
    def connected(self) -> bool:
        return self.inner.connected

    @property
    def in_process(self) -> bool:
        return self.inner.in_process

    @property
    def reconnections(self) -> int:  # type: ignore[override]  # the stream's broker-drop check
        return self.inner.reconnections

    def add_probe(self, probe: Probe) -> Teardown:
        """Run `probe` at every scrape under this service's labels; returns its removal."""
        remove = PROBES.add(self.service, self.replica, probe)

        async def teardown() -> None:
            remove()

        return teardown

    async def queue_samples(self) -> Iterable[Sample]:
        """The depth and consumers of every queue this service consumes (a probe)."""
        found = await self.inner.queue_depths(sorted(self.queues))
        samples: list[Sample] = []
        for queue, (messages, consumers) in found.items():
            samples.append(("warden_queue_messages", {"queue": queue}, messages))
            if consumers is not None:
                samples.append(("warden_queue_consumers", {"queue": queue}, consumers))
        return samples

    # --- the bus, counted ----------------------------------------------------------------

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def publish(self, envelope: Envelope) -> None:
        await self.inner.publish(envelope)
        self._published(envelope.type).inc()  # once it went out (confirmed on AMQP)

    async def emit(self, type_name: str, data: Mapping[str, Any], *, source: str) -> Envelope:
        envelope = await self.inner.emit(type_name, data, source=source)
        self._published(type_name).inc()
        return envelope

    async def emit_all(
        self, events: Sequence[tuple[str, Mapping[str, Any]]], *, source: str
    ) -> list[Envelope]:
        envelopes = await self.inner.emit_all(events, source=source)
        for envelope in envelopes:
            self._published(envelope.type).inc()
        return envelopes

    async def publish_raw(self, source: str, routing_key: str, body: bytes) -> None:
        await self.inner.publish_raw(source, routing_key, body)

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
        teardown = await self.inner.subscribe(
            source,
            pattern,
            consumer,
            self._counted(handler),
            concurrency=concurrency,
            transient=transient,
        )
        if not transient:  # a transient queue is this replica's own and empties at once
            name = queue_name(source, pattern, consumer)
            self.queues.update((name, dead_letter_queue_name(name)))
        return teardown

    def _counted(self, handler: EventHandler) -> EventHandler:
        consumed = self._consumed

        async def counted(envelope: Envelope) -> None:
            try:
                await handler(envelope)
            except Exception:
                consumed(envelope.type, "failed").inc()
                raise
            consumed(envelope.type, "ok").inc()

        return counted

    async def serve(self, service: str, methods: Mapping[str, RpcHandler]) -> Teardown:
        timed = {name: self._timed(name, handler) for name, handler in methods.items()}
        self.queues.add(f"rpc-{service}")
        return await self.inner.serve(service, timed)

    def _timed(self, method: str, handler: RpcHandler) -> RpcHandler:
        ok, error = self._server(method, "ok"), self._server(method, "error")

        async def answer(args: dict[str, Any]) -> Any:
            started = time.perf_counter()
            try:
                result = await handler(args)
            except BaseException:
                error.observe(time.perf_counter() - started)
                raise
            ok.observe(time.perf_counter() - started)
            return result

        return answer

    async def call(
        self,
        service: str,
        method: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        return await self._timed_call(
            service, method, self.inner.call(service, method, args, timeout=timeout)
        )

    async def call_json(
        self,
        service: str,
        method: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> bytes:
        answer: bytes = await self._timed_call(
            service, method, self.inner.call_json(service, method, args, timeout=timeout)
        )
        return answer

    async def _timed_call(self, service: str, method: str, calling: Awaitable[Any]) -> Any:
        started = time.perf_counter()
        outcome = "ok"
        try:
            return await calling
        except ServiceUnavailable:
            outcome = "unavailable"
            raise
        except WardenError:
            outcome = "error"
            raise
        finally:
            self._client(service, method, outcome).observe(time.perf_counter() - started)

    async def dead_letters(self, queue: str) -> list[bytes]:
        return await self.inner.dead_letters(queue)

    async def queue_depths(self, names: Iterable[str]) -> dict[str, tuple[int, int | None]]:
        return await self.inner.queue_depths(names)
