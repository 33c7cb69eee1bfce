"""The AMQP bus: RabbitMQ through aio-pika, with nameko's exchange and queue conventions.

Topology (re-declared by `connect_robust` after a broker restart):
- `<source>.events`: durable topic exchange per publishing service; routing key = event type.
- `evt-<source>-<pattern>--<service>.<handler>`: durable queue per consumer, dead-lettering
  to the direct exchange `warden.dead-letter` with the queue's name as routing key, where
  `<queue>.dead-letter` collects what could not be handled.
- `warden.rpc`: durable topic exchange for requests, routing key `<service>.<method>`; each
  service consumes the auto-delete queue `rpc-<service>` (replicas compete on it). A request
  to a service with no replica running is returned at once (mandatory publish) and a request
  that waits longer than its deadline expires in the queue, so a caller never hangs.
- Replies come back on the caller's own exclusive queue, matched by correlation id.

Messages are JSON, persistent, published with confirms. A handler's message is acked after the
handler succeeds; when it raises, the message is published again to the same queue with its
delivery count in a header, up to `max_deliveries`, then rejected into the dead-letter queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)
from aio_pika.connection import make_url
from aio_pika.exceptions import AMQPError, ChannelNotFoundEntity, DeliveryError
from aiormq import spec

from services.shared import fastjson
from services.shared.bus.acks import AckBatcher, quietly
from services.shared.bus.base import (
    RPC_DELIVERY,
    Bus,
    BusSettings,
    EventHandler,
    RpcDelivery,
    RpcHandler,
    Teardown,
    dead_letter_queue_name,
    encode_rpc_reply,
    events_exchange,
    queue_name,
)
from services.shared.bus.connecting import redact, start_failure
from services.shared.bus.deliveries import fast_consume
from services.shared.contracts import Envelope, parse_envelope
from services.shared.errors import (
    ContractError,
    InvalidRequest,
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
# How long stopping a consumer may wait for the broker (see subscribe's teardown).
TEARDOWN_S = 5.0

DEAD_LETTER_EXCHANGE = "warden.dead-letter"
RPC_EXCHANGE = "warden.rpc"
DELIVERIES_HEADER = "x-warden-deliveries"
# An RPC request's absolute deadline (Unix time in integer milliseconds, the caller's clock):
# the queue TTL counts from the request's arrival, so one held up in a frozen broker would
# still be delivered after it. Integer: AMQP carries a Python float as single precision,
# 128 s apart at today's Unix times.
DEADLINE_HEADER = "x-warden-deadline-ms"
PERSISTENT = int(aio_pika.DeliveryMode.PERSISTENT)
JSON = "application/json"


def rpc_queue_name(service: str) -> str:
    return f"rpc-{service}"


def _expired(message: AbstractIncomingMessage) -> bool:
    deadline_ms = (message.headers or {}).get(DEADLINE_HEADER)
    return isinstance(deadline_ms, int) and time.time() * 1000 > deadline_ms


class AmqpBus(Bus):
    def __init__(self, url: str, settings: BusSettings | None = None, *, name: str = "warden"):
        self.url = url
        self.settings = settings or BusSettings()
        self.name = name
        self._connection: AbstractRobustConnection | None = None
        self._publish_channel: AbstractChannel | None = None
        self._exchanges: dict[str, AbstractExchange] = {}
        self._consumer_channels: set[AbstractChannel] = set()
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._ack_batchers: dict[AbstractChannel, AckBatcher] = {}
        self._rpc_channel: AbstractChannel | None = None
        self._rpc_exchange: AbstractExchange | None = None
        self._reply_queue: AbstractQueue | None = None
        self._pending: dict[str, asyncio.Future[bytes]] = {}
        self._lock = asyncio.Lock()
        self._unreachable = Unreachable(log)
        self._outages = ConsumerOutages(log)
        self._lost = False  # the connection is lost and being restored

    # --- connection -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._connection is not None:
            return
        interval = self.settings.reconnect_interval_s
        # What aio_pika.connect_robust does, with the connection in hand: a start cancelled
        # (SIGTERM while a silent broker is being waited for) closes it at once, which stops
        # the reconnecting it would otherwise go on with in the background.
        connection = aio_pika.RobustConnection(
            make_url(self.url, reconnect_interval=interval),
            client_properties={"connection_name": self.name},
            reconnect_interval=interval,
        )
        try:
            # aio-pika's own timeout bounds one attempt.
            await connection.connect(timeout=self.settings.connect_timeout_s)
        except BaseException as err:
            await quietly(connection.close())
            raise start_failure(self.url, self.settings.connect_timeout_s, err) from err
        self._connection = connection
        self._publish_channel = await self._connection.channel(publisher_confirms=True)
        self._connection.close_callbacks.add(self._on_connection_lost)
        self._connection.reconnect_callbacks.add(self._on_reconnected)
        log.info("connected to RabbitMQ at %s", redact(self.url))

    @property
    def connected(self) -> bool:
        return self._connection is not None and self._connection.connected.is_set()

    def _on_connection_lost(self, _connection: Any, reason: BaseException | None = None) -> None:
        # Not our own close(), and once per outage (a failed reconnect attempt calls it too).
        if self._connection is not None and not self._lost:
            self._lost = True
            log.warning(
                "lost the connection to RabbitMQ at %s (%s); reconnecting",
                redact(self.url),
                type(reason).__name__ if reason is not None else "closed",
            )

    def _on_reconnected(self, _connection: Any) -> None:
        self._lost = False
        self.reconnections += 1
        log.info("reconnected to RabbitMQ at %s", redact(self.url))

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        # Stop taking new messages, let handlers that run finish (unacked ones are requeued
        # by the broker when the channel closes).
        for channel in list(self._consumer_channels):
            batcher = self._ack_batchers.pop(channel, None)
            if batcher is not None:
                await quietly(batcher.flush())
            await quietly(channel.close())
        self._consumer_channels.clear()
        if self._in_flight:
            await asyncio.wait(self._in_flight, timeout=10)
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        self._exchanges.clear()
        self._rpc_channel = self._rpc_exchange = self._reply_queue = None
        self._publish_channel = None
        await quietly(connection.close())

    def _require_connection(self) -> AbstractRobustConnection:
        if self._connection is None:
            raise RuntimeError("AmqpBus.start() was not awaited")
        return self._connection

    async def _exchange(self, channel: AbstractChannel, name: str) -> AbstractExchange:
        # Same declaration as nameko's: durable topic exchange, not auto-deleted.
        return await channel.declare_exchange(name, aio_pika.ExchangeType.TOPIC, durable=True)

    async def _publish_exchange(self, source: str) -> AbstractExchange:
        name = events_exchange(source)
        exchange = self._exchanges.get(name)
        if exchange is None:
            assert self._publish_channel is not None
            exchange = self._exchanges[name] = await self._exchange(self._publish_channel, name)
        return exchange

    # --- events -----------------------------------------------------------------------------

    async def publish(self, envelope: Envelope) -> None:
        await self._publish(envelope.source, envelope.type, envelope.to_json(), envelope.id)

    async def publish_raw(self, source: str, routing_key: str, body: bytes) -> None:
        await self._publish(source, routing_key, body, None)

    async def publish_all(self, envelopes: Sequence[Envelope]) -> None:
        """In order: each publish, started in turn, queues its frames (or waits for the
        channel's first-come-first-served lock) before the next starts."""
        self._require_connection()
        for name in {envelope.source for envelope in envelopes}:
            await self._publish_exchange(name)  # declared before the publishes start
        sent = [asyncio.ensure_future(self.publish(envelope)) for envelope in envelopes]
        for result in await asyncio.gather(*sent, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result

    async def _publish(
        self, source: str, routing_key: str, body: bytes, message_id: str | None
    ) -> None:
        self._require_connection()
        exchange = await self._publish_exchange(source)
        assert self._publish_channel is not None
        properties = spec.Basic.Properties(
            content_type=JSON,
            delivery_mode=PERSISTENT,
            message_id=message_id,
            message_type=routing_key,
        )
        try:
            # aio-pika's Exchange.publish minus its Message object (a fifth of the publisher's
            # CPU). Not mandatory: an event nobody subscribes to is dropped, not bounced back.
            channel = cast(aiormq.Channel, await self._publish_channel.get_underlay_channel())
            await channel.basic_publish(
                body,
                exchange=exchange.name,
                routing_key=routing_key,
                properties=properties,
                mandatory=False,
                # The broker's confirm is what we wait for; waiting for each frame to drain to
                # the socket too (aiormq's default) would serialise publishes on the lock.
                wait=False,
            )
        except (AMQPError, ConnectionError, RuntimeError) as err:
            raise ServiceUnavailable(
                f"publishing {routing_key} failed: the message bus is unavailable ({err!r})",
                {"routing_key": routing_key},
            ) from err

    async def _declare_consumer_queue(
        self, channel: AbstractChannel, source: str, pattern: str, name: str
    ) -> AbstractQueue:
        dlx = await channel.declare_exchange(
            DEAD_LETTER_EXCHANGE, aio_pika.ExchangeType.DIRECT, durable=True
        )
        dead = await channel.declare_queue(dead_letter_queue_name(name), durable=True)
        await dead.bind(dlx, routing_key=name)
        exchange = await self._exchange(channel, events_exchange(source))
        queue = await channel.declare_queue(
            name,
            durable=True,
            arguments={
                "x-dead-letter-exchange": DEAD_LETTER_EXCHANGE,
                "x-dead-letter-routing-key": name,
                "x-queue-version": 2,
            },
        )
        await queue.bind(exchange, routing_key=pattern)
        return queue

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
        connection = self._require_connection()
        name = queue_name(source, pattern, consumer)
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=self.settings.prefetch)
        queue: AbstractQueue
        if transient:
            queue = await channel.declare_queue(name, exclusive=True, auto_delete=True)
            await queue.bind(await self._exchange(channel, events_exchange(source)), pattern)
        else:
            queue = await self._declare_consumer_queue(channel, source, pattern, name)
        gate = asyncio.Semaphore(max(1, concurrency))
        # Half the prefetch: one ack frame per 32 events at the default, while the other half
        # keeps the consumer busy.
        acks = AckBatcher(every=max(1, self.settings.prefetch // 2))

        stopped = False

        async def on_message(message: AbstractIncomingMessage) -> None:
            if stopped:
                # Torn down, yet given a message: a consumer the robust channel restored when
                # the broker came back after its teardown (which could not reach the broker).
                # Never handled here (this replica may no longer be the one to act): it goes
                # back to the queue, and this consumer goes for good.
                await quietly(message.nack(requeue=True))
                await quietly(asyncio.wait_for(channel.close(), TEARDOWN_S))
                return
            task = asyncio.current_task()
            if task is not None:
                self._in_flight.add(task)
            acks.received(message)
            try:
                async with gate:
                    await self._handle(name, message, handler, acks)
            finally:
                acks.settled(message)  # no-op when handled: then it waits in the batch
                if task is not None:
                    self._in_flight.discard(task)

        tag = await queue.consume(on_message)
        await fast_consume(channel, tag, on_message)
        self._consumer_channels.add(channel)
        self._ack_batchers[channel] = acks

        async def teardown() -> None:
            nonlocal stopped
            stopped = True
            self._consumer_channels.discard(channel)
            self._ack_batchers.pop(channel, None)
            if channel.is_closed:  # lost with the connection: closed by us, it is not restored
                await quietly(asyncio.wait_for(channel.close(), TEARDOWN_S))
            else:
                # Bounded: on a connection that is down or reconnecting these can wait for the
                # broker indefinitely, and a leader standing down must not hang on them; a
                # closed channel is not restored with its consumer when the broker is back.
                await quietly(asyncio.wait_for(queue.cancel(tag), TEARDOWN_S))
                await quietly(asyncio.wait_for(acks.flush(), TEARDOWN_S))
                await quietly(asyncio.wait_for(channel.close(), TEARDOWN_S))

        return teardown

    async def _handle(
        self,
        queue: str,
        message: AbstractIncomingMessage,
        handler: EventHandler,
        acks: AckBatcher,
    ) -> None:
        previous = (message.headers or {}).get(DELIVERIES_HEADER, 0)
        deliveries = (previous if isinstance(previous, int) else 0) + 1
        if message.redelivered:
            deliveries += 1  # the broker gave it again after a consumer died holding it
        try:
            envelope = parse_envelope(message.body)
        except ContractError as err:
            log.warning("dead-lettered message on %s: invalid message: %s", queue, err.message)
            await message.reject(requeue=False)
            return
        try:
            await handler(envelope)
        except asyncio.CancelledError:
            await quietly(message.nack(requeue=True))
            raise
        except Exception as err:
            if outage(err):
                # Nothing wrong with the message: it waits (back-off) and goes again, not
                # counted towards dead-lettering; one log line per outage, per queue.
                await asyncio.sleep(self._outages.failed(queue, err))
                await self._retry(queue, message, deliveries - 1)
                return
            if deliveries >= self.settings.max_deliveries:
                log.warning(
                    "dead-lettered %s %s on %s after %d deliveries: handler failed: %r",
                    envelope.type,
                    envelope.id,
                    queue,
                    deliveries,
                    err,
                )
                await message.reject(requeue=False)
                return
            log.debug("handler of %s failed (%r); delivery %d", queue, err, deliveries)
            await self._retry(queue, message, deliveries)
            return
        self._outages.succeeded(queue)
        acks.handled(message)

    async def _retry(self, queue: str, message: AbstractIncomingMessage, deliveries: int) -> None:
        """Publish the message again to the back of its queue, then ack the original."""
        assert self._publish_channel is not None
        headers = dict(message.headers or {})
        headers[DELIVERIES_HEADER] = deliveries
        again = aio_pika.Message(
            message.body,
            headers=headers,
            content_type=message.content_type or JSON,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=message.message_id,
            type=message.type,
        )
        await self._publish_channel.default_exchange.publish(again, routing_key=queue)
        await message.ack()

    async def dead_letters(self, queue: str) -> list[bytes]:
        connection = self._require_connection()
        channel = await connection.channel()
        try:
            dead = await channel.declare_queue(dead_letter_queue_name(queue), durable=True)
            bodies = []
            while (message := await dead.get(fail=False, no_ack=True)) is not None:
                bodies.append(message.body)
            return bodies
        finally:
            await quietly(channel.close())

    async def queue_depths(self, names: Iterable[str]) -> dict[str, tuple[int, int | None]]:
        # Passive declares on a channel of their own: one for a queue that does not exist
        # (yet) makes the broker close the channel, and the next name gets a new one.
        connection = self._require_connection()
        found: dict[str, tuple[int, int | None]] = {}
        channel = await connection.channel()
        try:
            for name in names:
                try:
                    queue = await channel.declare_queue(name, passive=True)
                except ChannelNotFoundEntity:
                    await quietly(channel.close())
                    channel = await connection.channel()
                    continue
                declared = queue.declaration_result
                found[name] = (declared.message_count or 0, declared.consumer_count or 0)
        finally:
            await quietly(channel.close())
        return found

    # --- RPC --------------------------------------------------------------------------------

    async def serve(self, service: str, methods: Mapping[str, RpcHandler]) -> Teardown:
        connection = self._require_connection()
        table = dict(methods)
        for attempt in range(1, 4):
            channel = await connection.channel()
            try:
                await channel.set_qos(prefetch_count=self.settings.prefetch)
                exchange = await self._exchange(channel, RPC_EXCHANGE)
                queue = await channel.declare_queue(
                    rpc_queue_name(service), durable=False, auto_delete=True
                )
                await queue.bind(exchange, routing_key=f"{service}.#")
                tag = await queue.consume(self._request_handler(service, table, channel))
                break
            except ChannelNotFoundEntity:
                # The last other replica left while we declared, and the broker auto-deleted
                # the queue under us: declare it again on a fresh channel.
                await quietly(channel.close())
                if attempt == 3:
                    raise
        self._consumer_channels.add(channel)

        async def teardown() -> None:
            self._consumer_channels.discard(channel)
            if not channel.is_closed:
                await quietly(queue.cancel(tag))
                await quietly(channel.close())

        return teardown

    def _request_handler(
        self, service: str, table: Mapping[str, RpcHandler], channel: AbstractChannel
    ) -> Callable[[AbstractIncomingMessage], Awaitable[None]]:
        async def on_request(message: AbstractIncomingMessage) -> None:
            if _expired(message):
                # The caller has given up (and answered its own caller 503): doing it now
                # would carry out a request nobody waits for, and that was reported failed.
                log.debug("dropping %s: its caller's deadline passed", message.routing_key)
                await message.ack()
                return
            task = asyncio.current_task()
            if task is not None:
                self._in_flight.add(task)
            request_id = message.correlation_id or message.message_id
            delivery = RPC_DELIVERY.set(
                None if not request_id else RpcDelivery(request_id, bool(message.redelivered))
            )
            try:
                reply = await self._answer(service, table, message)
                if message.reply_to:
                    await channel.default_exchange.publish(
                        aio_pika.Message(
                            reply, content_type=JSON, correlation_id=message.correlation_id
                        ),
                        routing_key=message.reply_to,
                    )
                await message.ack()
            finally:
                RPC_DELIVERY.reset(delivery)
                if task is not None:
                    self._in_flight.discard(task)

        return on_request

    async def _answer(
        self, service: str, table: Mapping[str, RpcHandler], message: AbstractIncomingMessage
    ) -> bytes:
        method = (message.routing_key or "").partition(".")[2]
        handler = table.get(method)
        if handler is None:
            return encode_rpc_reply(
                error=NotFound(
                    f"service {service!r} has no RPC method {method!r}",
                    {"service": service, "method": method},
                )
            )
        try:
            args = fastjson.loads(message.body)
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as err:
            return encode_rpc_reply(error=InvalidRequest(f"bad RPC request: {err}"))
        try:
            return encode_rpc_reply(await handler(args))
        except WardenError as err:
            return encode_rpc_reply(error=err)
        except Exception as err:
            return encode_rpc_reply(
                error=log_rpc_failure(log, self._unreachable, service, method, err)
            )

    async def _ensure_rpc_client(self) -> tuple[AbstractExchange, AbstractQueue]:
        async with self._lock:
            if self._rpc_exchange is None or self._reply_queue is None:
                connection = self._require_connection()
                channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
                exchange = await self._exchange(channel, RPC_EXCHANGE)
                reply_queue = await channel.declare_queue(
                    f"rpc-reply-{self.name}-{uuid.uuid4().hex}", exclusive=True, auto_delete=True
                )
                await reply_queue.consume(self._on_reply, no_ack=True, exclusive=True)
                self._rpc_channel, self._rpc_exchange = channel, exchange
                self._reply_queue = reply_queue
            return self._rpc_exchange, self._reply_queue

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        future = self._pending.pop(message.correlation_id or "", None)
        if future is not None and not future.done():
            future.set_result(message.body)

    async def call(
        self,
        service: str,
        method: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        deadline = self.settings.rpc_timeout_s if timeout is None else timeout
        # When this caller gives up, told to the service (integer ms: see DEADLINE_HEADER).
        expires_at_ms = int((time.time() + deadline) * 1000)
        where = {"service": service, "method": method}
        try:
            async with asyncio.timeout(deadline):
                exchange, reply_queue = await self._ensure_rpc_client()
                correlation_id = uuid.uuid4().hex
                future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
                self._pending[correlation_id] = future
                try:
                    await exchange.publish(
                        aio_pika.Message(
                            fastjson.dumps(dict(args or {})),
                            content_type=JSON,
                            correlation_id=correlation_id,
                            reply_to=reply_queue.name,
                            expiration=deadline,
                            headers={DEADLINE_HEADER: expires_at_ms},
                        ),
                        routing_key=f"{service}.{method}",
                        mandatory=True,
                    )
                    body = await future
                finally:
                    self._pending.pop(correlation_id, None)
        except DeliveryError as err:
            raise ServiceUnavailable(f"service {service!r} is not running", where) from err
        except TimeoutError as err:
            raise ServiceUnavailable(
                f"{service}.{method} did not answer within {deadline:g}s",
                {**where, "timeout_s": deadline},
            ) from err
        except (AMQPError, ConnectionError, RuntimeError) as err:
            # RuntimeError: aiormq's ChannelInvalidStateError, a channel of a lost connection.
            raise ServiceUnavailable(
                f"calling {service}.{method} failed: the message bus is unavailable", where
            ) from err
        reply = fastjson.loads(body)
        if not reply.get("ok"):
            raise error_from_dict(reply.get("error") or {})
        return reply.get("result")
