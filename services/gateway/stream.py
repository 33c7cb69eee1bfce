"""The live stream: the bus's events as Server-Sent Events, each caller seeing only their share.

The gateway binds one transient queue per event family (its own copy: every replica streams
everything). Each event gets an id `<epoch>-<seq>`, `epoch` being this process's; the last
`replay` events are kept, so a browser that reconnects with `Last-Event-ID` receives exactly
what it missed. When that is no longer possible (another gateway, too old) it gets one `reset`
event and reloads its state once, instead of a storm of re-sends. A client too slow to keep up
is disconnected and resumes the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from services.gateway.auth import Caller
from services.gateway.visibility import reservation_for, sees_account, sees_incident
from services.shared import fastjson
from services.shared.bus import Bus, Teardown
from services.shared.contracts import Envelope

log = logging.getLogger("warden.gateway")

# (source service, routing pattern, topic a client may choose)
SUBSCRIPTIONS = (
    ("monitor", "host.*", "hosts"),
    ("monitor", "gpu.*", "hosts"),
    ("monitor", "processes.observed", "processes"),
    ("reservations", "reservation.*", "reservations"),
    ("reservations", "access.*", "access"),
    ("reservations", "user.*", "users"),
    ("jobs", "job.*", "jobs"),
    ("jobs", "task.*", "jobs"),
    ("violations", "violation.*", "violations"),
    ("violations", "notification.*", "notifications"),
)
# Events that carry a whole HostRecord (only its name and labels go to non-admins).
HOST_RECORD_EVENTS = frozenset({"host.added", "host.updated"})
TOPICS = tuple(dict.fromkeys(topic for _, _, topic in SUBSCRIPTIONS))
HEARTBEAT_S = 15.0
CLIENT_BACKLOG = 1000


@dataclass(frozen=True)
class Event:
    seq: int
    id: str
    topic: str
    type: str
    occurred_at: str
    data: dict[str, Any]


def visible_data(caller: Caller, event: Event) -> dict[str, Any] | None:
    """What of `event` the caller may see, or None for nothing. Pure."""
    if event.topic == "users":
        return event.data if sees_account(caller, event.data.get("username")) else None
    if event.topic == "violations":
        return event.data if sees_incident(caller, event.data) else None
    if event.topic == "reservations":
        return reservation_for(caller, event.data)
    if event.topic == "notifications":  # a personal message: its user's eyes only
        return event.data if event.data.get("user") == caller.username else None
    if event.type in HOST_RECORD_EVENTS and not caller.is_admin:
        # How a host is reached (address, user, key file, host key) is for admins.
        host = event.data.get("host") or {}
        return {"host": {"name": host.get("name"), "labels": host.get("labels", [])}}
    return event.data


def encode(event: Event, data: dict[str, Any]) -> bytes:
    body = fastjson.dumps_text({"type": event.type, "occurred_at": event.occurred_at, "data": data})
    return f"id: {event.id}\nevent: {event.type}\ndata: {body}\n\n".encode()


class _Client:
    def __init__(self, caller: Caller, topics: frozenset[str]) -> None:
        self.caller = caller
        self.topics = topics
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(CLIENT_BACKLOG)
        self.overflowed = False

    def offer(self, event: Event) -> None:
        if event.topic not in self.topics or self.overflowed:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True  # it will be cut off and resume from its last id

    def end(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(None)


class StreamHub:
    def __init__(
        self,
        bus: Bus,
        replay: int,
        *,
        heartbeat_s: float = HEARTBEAT_S,
        epoch: Callable[[], str] = lambda: secrets.token_hex(4),
    ) -> None:
        self.bus = bus
        self.epoch = epoch()
        self.heartbeat_s = heartbeat_s
        self._seq = 0
        self._recent: deque[Event] = deque(maxlen=replay)
        self._clients: set[_Client] = set()
        self._teardowns: list[Teardown] = []
        self._generations: dict[str, int] = {}
        # Called with every event before it goes out (the gateway's read models).
        self.listeners: list[Callable[[Event], None]] = []

    def generation(self, topic: str) -> int:
        """How many events of `topic` arrived: a cache built on them is stale once it moves."""
        return self._generations.get(topic, 0)

    @property
    def clients(self) -> int:
        return len(self._clients)

    async def start(self) -> None:
        for source, pattern, topic in SUBSCRIPTIONS:

            async def handler(envelope: Envelope, topic: str = topic) -> None:
                self.publish(topic, envelope)

            consumer = f"gateway.stream-{self.epoch}"
            self._teardowns.append(
                await self.bus.subscribe(source, pattern, consumer, handler, transient=True)
            )

    async def close(self) -> None:
        for client in list(self._clients):
            client.end()
        teardowns, self._teardowns = self._teardowns, []
        for teardown in teardowns:
            with contextlib.suppress(Exception):
                await teardown()

    def publish(self, topic: str, envelope: Envelope) -> Event:
        self._seq += 1
        self._generations[topic] = self._generations.get(topic, 0) + 1
        event = Event(
            seq=self._seq,
            id=f"{self.epoch}-{self._seq}",
            topic=topic,
            type=envelope.type,
            occurred_at=envelope.occurred_at,
            data=envelope.data,
        )
        self._recent.append(event)
        for listener in self.listeners:
            listener(event)
        for client in self._clients:
            client.offer(event)
        return event

    def missed(self, last_event_id: str | None) -> list[Event] | None:
        """The events after `last_event_id`; None when they cannot be told (reset)."""
        if not last_event_id:
            return []
        epoch, _, seq_text = last_event_id.partition("-")
        if epoch != self.epoch or not seq_text.isdigit():
            return None
        seq = int(seq_text)
        oldest = self._recent[0].seq if self._recent else self._seq + 1
        if seq > self._seq or seq < oldest - 1:
            return None
        return [event for event in self._recent if event.seq > seq]

    async def serve(
        self,
        request: web.Request,
        caller: Caller,
        topics: frozenset[str],
        last_event_id: str | None,
    ) -> web.StreamResponse:
        client = _Client(caller, topics)
        # Registered before anything is awaited: what comes after `sent` arrives in its queue,
        # what came before is replayed; nothing falls between.
        self._clients.add(client)
        sent = self._seq
        missed = self.missed(last_event_id)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        try:
            await response.prepare(request)
            # Spread reconnections after a restart instead of all at once.
            await response.write(f"retry: {random.randint(1000, 4000)}\n\n".encode())
            if missed is None:
                reset = {"reason": "the events since your last one are gone; reload the state"}
                await response.write(
                    f"id: {self.epoch}-{sent}\nevent: reset\ndata: {json.dumps(reset)}\n\n".encode()
                )
            else:
                for event in missed:
                    await self._send(response, client, event)
            await self._follow(response, client, sent)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(client)
        return response

    async def _send(self, response: web.StreamResponse, client: _Client, event: Event) -> None:
        if event.topic not in client.topics:
            return
        data = visible_data(client.caller, event)
        if data is not None:
            await response.write(encode(event, data))

    async def _follow(self, response: web.StreamResponse, client: _Client, sent: int) -> None:
        while not client.overflowed:
            try:
                event = await asyncio.wait_for(client.queue.get(), self.heartbeat_s)
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
                continue
            if event is None:
                return
            if event.seq > sent:  # queued while the replay was being sent: already done
                await self._send(response, client, event)
