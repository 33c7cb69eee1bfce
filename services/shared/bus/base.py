"""The bus interface every service talks through, and what both implementations share.

Events: a service publishes on its own topic exchange `<source>.events` with the event type as
routing key. A consumer binds a named durable queue `evt-<source>-<pattern>--<service>.<handler>`
(nameko's naming) to that exchange; several consumers on one queue compete, several queues
each get a copy. Delivery is at least once: a handler that raises is retried up to
`max_deliveries` times, then the message goes to the queue's dead-letter queue with one log
line. A message that does not fit its contract is dead-lettered at once.

RPC: `call("reservations", "create", {...}, timeout=2)` reaches whichever replica serves
`reservations`; an error raised there as a `WardenError` is raised again here; a service that is
down or slow gives `ServiceUnavailable` within the deadline, never a hang.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from services.shared import fastjson
from services.shared.contracts import Envelope, make_envelope
from services.shared.errors import WardenError

log = logging.getLogger("warden.bus")

EventHandler = Callable[[Envelope], Awaitable[None]]
RpcHandler = Callable[[dict[str, Any]], Awaitable[Any]]
Teardown = Callable[[], Awaitable[None]]

DEAD_LETTER_SUFFIX = ".dead-letter"


@dataclass(frozen=True)
class RpcDelivery:
    """The RPC request a handler is answering, as the bus delivered it: a request is
    acknowledged after its answer, so one whose first receiver died before answering is
    delivered again, to another replica, with the same `request_id`."""

    request_id: str  # the caller's id of the call: the same on every delivery of it
    redelivered: bool  # delivered before (its first receiver may have carried it out)


# Set by the bus while a handler answers a request that came over the wire (None otherwise):
# what a handler that must not do a thing twice (a create) keys it by.
RPC_DELIVERY: ContextVar[RpcDelivery | None] = ContextVar("rpc_delivery", default=None)


@dataclass(frozen=True)
class BusSettings:
    max_deliveries: int = 5
    prefetch: int = 64
    rpc_timeout_s: float = 5.0
    # One attempt to connect (AMQP): a broker that accepts TCP but never answers gives up after
    # this.
    connect_timeout_s: float = 10.0
    # After the connection is lost, the pause between attempts to connect again (AMQP;
    # aio-pika's default).
    reconnect_interval_s: float = 5.0


def events_exchange(source: str) -> str:
    return f"{source}.events"


def queue_name(source: str, pattern: str, consumer: str) -> str:
    """nameko's queue name for a handler: `evt-<source>-<pattern>--<service>.<handler>`.

    AMQP queue names may not hold `*`, so a one-word wildcard is spelt `any` there.
    """
    return f"evt-{source}-{pattern.replace('*', 'any')}--{consumer}"


def dead_letter_queue_name(queue: str) -> str:
    return queue + DEAD_LETTER_SUFFIX


@lru_cache(maxsize=4096)
def topic_matches(pattern: str, routing_key: str) -> bool:
    """AMQP topic matching: `*` is exactly one word, `#` zero or more words."""
    want, got = pattern.split("."), routing_key.split(".")

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i] == "#":
            return any(match(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and want[i] in ("*", got[j]) and match(i + 1, j + 1)

    return match(0, 0)


def encode_rpc_reply(result: Any = None, error: WardenError | None = None) -> bytes:
    if error is not None:
        return fastjson.dumps({"ok": False, "error": error.to_dict()})
    return fastjson.dumps({"ok": True, "result": result})


class Bus(ABC):
    """Events (publish / subscribe) and RPC (serve / call) behind one interface."""

    settings: BusSettings
    # How many times the connection to the broker was restored: a transient queue missed what
    # was published while it was gone (an in-process bus never loses one).
    reconnections: int = 0

    @abstractmethod
    async def start(self) -> None:
        """Connect (AMQP) or get ready (in-process)."""

    @property
    def connected(self) -> bool:
        """Whether the bus reaches its broker now (an in-process bus always does)."""
        return True

    @property
    def in_process(self) -> bool:
        """Whether every service on this bus is in this one process (`warden run all`)."""
        return False

    @abstractmethod
    async def close(self) -> None:
        """Stop consuming, let in-flight handlers finish or requeue, close connections."""

    @abstractmethod
    async def publish(self, envelope: Envelope) -> None:
        """Publish a validated envelope on `<envelope.source>.events` (confirmed on AMQP)."""

    @abstractmethod
    async def publish_raw(self, source: str, routing_key: str, body: bytes) -> None:
        """Publish bytes as a foreign publisher would (no validation). For tests and tools."""

    @abstractmethod
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
        """Consume events of `source` matching `pattern` on the durable queue of `consumer`.

        `consumer` is `<service>.<handler>`. Returns the teardown that stops this consumer
        (the queue and what waits in it stay). A `transient` queue belongs to this consumer
        alone and goes away with it (each gateway replica's copy of the live events); what
        its handler fails on is dropped, not dead-lettered.
        """

    @abstractmethod
    async def serve(self, service: str, methods: Mapping[str, RpcHandler]) -> Teardown:
        """Answer RPC calls to `service`; returns the teardown that stops serving."""

    @abstractmethod
    async def call(
        self,
        service: str,
        method: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Call `service.method(args)`; raises the remote WardenError or ServiceUnavailable."""

    async def call_json(
        self,
        service: str,
        method: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> bytes:
        """`call`, answering the result as JSON text: for a caller that passes it on as it is
        (the gateway answering a client), so that a bus holding it as text need not build
        Python objects from it only to have them encoded again."""
        return fastjson.dumps(await self.call(service, method, args, timeout=timeout))

    @abstractmethod
    async def dead_letters(self, queue: str) -> list[bytes]:
        """Take the bodies waiting in the dead-letter queue of `queue` (for tools and tests)."""

    async def queue_depths(self, names: Iterable[str]) -> dict[str, tuple[int, int | None]]:
        """(messages ready, consumers or None) of each of the queues `names` that exists, for
        the metrics; a bus that cannot tell answers nothing."""
        return {}

    async def emit(self, type_name: str, data: Mapping[str, Any], *, source: str) -> Envelope:
        """Validate `data` against its contract, wrap it in an envelope and publish it."""
        envelope = make_envelope(type_name, data, source=source)
        await self.publish(envelope)
        return envelope

    async def emit_all(
        self, events: Sequence[tuple[str, Mapping[str, Any]]], *, source: str
    ) -> list[Envelope]:
        """Validate all of `events`, then `publish_all` them."""
        envelopes = [make_envelope(type_name, data, source=source) for type_name, data in events]
        await self.publish_all(envelopes)
        return envelopes

    async def publish_all(self, envelopes: Sequence[Envelope]) -> None:
        """Publish `envelopes` in this order (a failure stops at its envelope). A bus that can
        (AMQP) has them all on the way at once and waits for their confirms together: one
        round trip for a monitor poll's events, not one each."""
        for envelope in envelopes:
            await self.publish(envelope)
