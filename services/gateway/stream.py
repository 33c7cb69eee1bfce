"""The live stream: the bus's events as Server-Sent Events, each caller seeing only their share.

The gateway binds one transient queue per event family (its own copy: every replica streams
everything) and keeps the last `replay` events, each once (a duplicate envelope id, from an
outbox published twice, is dropped). Each event's SSE id is `<epoch>-<seq>-<event id>`: this
process's epoch, its arrival number here, and the envelope's id that every replica shares. The
JSON body carries the envelope id as `event_id`, for clients to drop an event seen twice.

A browser reconnecting with `Last-Event-ID`:
- to the same replica (same epoch) receives exactly what came after `seq`;
- to another replica (behind a load balancer, or after a restart) is placed at that event in
  this replica's buffer. Replicas may receive events of different publishers and families in a
  different order, but only events that arrived within a short time of each other swap places;
  so it receives every event that arrived here from `resume_window_s` before that event on,
  some of them again (the client drops them by `event_id`). That holds while no replica
  receives an event more than half the window after it occurred (by its `occurred_at`): a
  replica that did (a queue of its fell behind) names no event in its ids for a window, and a
  replica where the client's last event itself came that late does not resume from it. When
  this replica cannot vouch for the resume (that, or it does not have the event, even after
  waiting `resume_wait_s` for it to arrive; or its buffer does not reach back the window, or
  its copy of the events broke off when its broker connection did) the client gets one `reset`
  event and reloads its state once: never a silent gap, never a storm of re-sends.
A client too slow to keep up is disconnected and resumes the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
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
    ("jobs", "queue.*", "jobs"),
    ("violations", "violation.*", "violations"),
    ("violations", "notification.*", "notifications"),
)
# Events that carry a whole HostRecord (only its name and labels go to non-admins).
HOST_RECORD_EVENTS = frozenset({"host.added", "host.updated"})
TOPICS = tuple(dict.fromkeys(topic for _, _, topic in SUBSCRIPTIONS))
HEARTBEAT_S = 15.0
CLIENT_BACKLOG = 1000
RESUME_WAIT_S = 2.0
# An envelope id goes into the SSE id line as it is only when it cannot break the framing.
_SAFE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,48}")


@dataclass(frozen=True)
class Event:
    seq: int
    id: str  # the SSE id: `<epoch>-<seq>-<event_id>`
    topic: str
    type: str
    occurred_at: str
    data: dict[str, Any]
    event_id: str = ""  # the envelope's, the same on every replica ("" when unusable in an id)
    received: float = 0.0  # when it arrived here (monotonic clock)
    lag: float = 0.0  # seconds from occurred_at (the publisher's clock) to its arrival here


def parse_id(last_event_id: str) -> tuple[str, int | None, str]:
    """(epoch, seq or None, event id) of an SSE id; the id of an older release has no event."""
    epoch, _, rest = last_event_id.partition("-")
    seq_text, _, event_id = rest.partition("-")
    return epoch, int(seq_text) if seq_text.isdigit() else None, event_id


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
    body = fastjson.dumps_text(
        {
            "type": event.type,
            "event_id": event.event_id,
            "occurred_at": event.occurred_at,
            "data": data,
        }
    )
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
        resume_window_s: float = 5.0,
        resume_wait_s: float = RESUME_WAIT_S,
        heartbeat_s: float = HEARTBEAT_S,
        epoch: Callable[[], str] = lambda: secrets.token_hex(4),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.bus = bus
        self._new_epoch = epoch
        self.epoch = epoch()
        self.replay = replay
        self.resume_window_s = resume_window_s
        self.resume_wait_s = resume_wait_s
        self.heartbeat_s = heartbeat_s
        self._clock = clock
        self._wall = wall
        # Until when this replica cannot vouch for its positions (it received events late).
        self._lagging_until = float("-inf")
        self._seq = 0
        self._recent: deque[Event] = deque()
        self._by_event: dict[str, Event] = {}
        # Since when the buffer holds every event that arrived (start, last eviction, the last
        # broker reconnection): a resume reaching back before that cannot be vouched for.
        self._complete_since = clock()
        self._reconnections = bus.reconnections
        self._awaited: dict[str, asyncio.Future[None]] = {}
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
        self._complete_since = self._clock()
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

    def _check_continuity(self) -> None:
        """After a broker reconnection this replica's transient queues were declared anew:
        what was published in between never reached it. A new epoch and an empty buffer, and
        every client is cut off, to resume with a `reset`."""
        if self.bus.reconnections == self._reconnections:
            return
        self._reconnections = self.bus.reconnections
        log.info("the live stream lost events while the broker was away: clients reset")
        self.epoch = self._new_epoch()
        self._recent.clear()
        self._by_event.clear()
        self._complete_since = self._clock()
        for client in list(self._clients):
            client.overflowed = True
            client.end()

    def publish(self, topic: str, envelope: Envelope) -> Event | None:
        """Keep and send an event; None for an envelope this replica has already had."""
        self._check_continuity()
        event_id = envelope.id if _SAFE_ID.fullmatch(envelope.id) else ""
        if event_id and event_id in self._by_event:
            return None  # the same event again (published twice, redelivered)
        lag = self._lag(envelope.occurred_at)
        if lag > self.resume_window_s / 2:
            if self._clock() >= self._lagging_until:
                log.info("live events arrive %.1fs late: resumes from here reset for now", lag)
            # Events that reach this replica this late may reach another replica long before
            # or after their neighbours here: another replica cannot place a client from here
            # by its last event for a while (its ids name none: a resume there is a reset).
            self._lagging_until = self._clock() + self.resume_window_s
        self._seq += 1
        self._generations[topic] = self._generations.get(topic, 0) + 1
        event = Event(
            seq=self._seq,
            id=f"{self.epoch}-{self._seq}-{self._vouched(event_id)}",
            event_id=event_id,
            topic=topic,
            type=envelope.type,
            occurred_at=envelope.occurred_at,
            data=envelope.data,
            received=self._clock(),
            lag=lag,
        )
        self._keep(event)
        for listener in self.listeners:
            listener(event)
        for client in self._clients:
            client.offer(event)
        return event

    def _lag(self, occurred_at: str) -> float:
        try:
            return max(0.0, self._wall() - datetime.fromisoformat(occurred_at).timestamp())
        except ValueError:
            return 0.0  # the contract's ISO-8601: not reached

    def _vouched(self, event_id: str) -> str:
        """The event id for an SSE id, or "" while this replica received events late."""
        return "" if self._clock() < self._lagging_until else event_id

    def _keep(self, event: Event) -> None:
        self._recent.append(event)
        if event.event_id:
            self._by_event[event.event_id] = event
            waiting = self._awaited.pop(event.event_id, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(None)
        while len(self._recent) > self.replay:
            gone = self._recent.popleft()
            self._by_event.pop(gone.event_id, None)
            self._complete_since = gone.received

    def missed(self, last_event_id: str | None) -> list[Event] | None:
        """The events after `last_event_id` (for another replica's id: a superset, see the
        module's note); None when they cannot be told (reset)."""
        self._check_continuity()
        if not last_event_id:
            return []
        epoch, seq, event_id = parse_id(last_event_id)
        if epoch == self.epoch and seq is not None:
            oldest = self._recent[0].seq if self._recent else self._seq + 1
            if seq > self._seq or seq < oldest - 1:
                return None
            return [event for event in self._recent if event.seq > seq]
        anchor = self._by_event.get(event_id) if event_id else None
        if anchor is None:
            return None
        horizon = anchor.received - self.resume_window_s
        if horizon < self._complete_since or anchor.lag > self.resume_window_s / 2:
            return None  # what swapped places with it may be gone from here, or not come yet
        return [e for e in self._recent if e.received >= horizon and e is not anchor]

    async def _arrival(self, last_event_id: str | None) -> None:
        """Another replica's client may come here before its last event does: wait a moment."""
        if not last_event_id or self.resume_wait_s <= 0:
            return
        epoch, _, event_id = parse_id(last_event_id)
        if epoch == self.epoch or not event_id or event_id in self._by_event:
            return
        waiting = self._awaited.get(event_id)
        if waiting is None:
            waiting = self._awaited[event_id] = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(waiting), self.resume_wait_s)
        except TimeoutError:
            pass
        finally:
            if self._awaited.get(event_id) is waiting and not waiting.done():
                del self._awaited[event_id]

    def _position(self) -> str:
        """The SSE id of a `reset`: this replica's place, after its newest event."""
        newest = self._recent[-1].event_id if self._recent else ""
        return f"{self.epoch}-{self._seq}-{self._vouched(newest)}"

    async def serve(
        self,
        request: web.Request,
        caller: Caller,
        topics: frozenset[str],
        last_event_id: str | None,
    ) -> web.StreamResponse:
        await self._arrival(last_event_id)
        self._check_continuity()
        client = _Client(caller, topics)
        # Registered before anything else is awaited: what comes after `sent` arrives in its queue,
        # what came before is replayed; nothing falls between.
        self._clients.add(client)
        sent = self._seq
        missed = self.missed(last_event_id)
        position = self._position()
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
                    f"id: {position}\nevent: reset\ndata: {json.dumps(reset)}\n\n".encode()
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
