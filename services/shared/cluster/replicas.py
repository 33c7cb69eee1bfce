"""The replicas of each service that are alive: this one's heartbeat, and who was heard lately.

Every replica of a service publishes `replica.heartbeat` on its service's exchange every
`[replicas] heartbeat_s`, saying its id, its role and a few figures of its own (`details`),
and a last one with role `stopping` when it stops cleanly. A replica that wants to know its
peers (the monitor, to split the hosts; the gateway, for health) watches their services on
transient queues of its own: a peer is alive while its last heartbeat is younger than
`[replicas] dead_after_s`, and gone at once when it said `stopping`.

On the in-process bus (`warden run all`) each service has exactly one replica: itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.shared.bus import Bus, Teardown
from services.shared.cluster.background import cancel_and_wait
from services.shared.contracts import Envelope, utc_now_iso

log = logging.getLogger("warden.replicas")

HEARTBEAT = "replica.heartbeat"


def new_replica_id(service: str) -> str:
    """`<service>@<host>:<pid>-<random>`: readable in health and logs, unique per start."""
    return f"{service}@{socket.gethostname()}:{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Replica:
    service: str
    replica: str
    role: str
    started_at: str
    details: Mapping[str, Any] = field(default_factory=dict)
    heard_at: float = 0.0  # time.monotonic() of its last heartbeat here


ChangeListener = Callable[[str], None]
"""Called with a service's name when its set of live replicas changed (joined, left, role)."""


class Replicas:
    """This replica's heartbeat and the live replicas of the services it watches.

    `role` and `details` are asked at every heartbeat, so a leader election or a shard
    count shows in the next one without telling this class.
    """

    def __init__(
        self,
        bus: Bus,
        service: str,
        *,
        heartbeat_s: float = 2.0,
        dead_after_s: float = 6.0,
        replica_id: str | None = None,
        role: Callable[[], str] = lambda: "active",
        details: Callable[[], Mapping[str, Any]] = dict,
    ) -> None:
        self.bus = bus
        self.service = service
        self.replica_id = replica_id or new_replica_id(service)
        self.heartbeat_s = heartbeat_s
        self.dead_after_s = dead_after_s
        self.started_at = utc_now_iso()
        self.role = role
        self.details = details
        self._peers: dict[str, dict[str, Replica]] = {}
        # What each replica that stopped cleanly said last (its `details`), by id.
        self.left: dict[str, Mapping[str, Any]] = {}
        self._listeners: list[ChangeListener] = []
        self._teardowns: list[Teardown] = []
        self._task: asyncio.Task[None] | None = None

    # --- what others see of this replica -------------------------------------------------

    async def beat(self, role: str | None = None) -> None:
        data = {
            "service": self.service,
            "replica": self.replica_id,
            "role": role or self.role(),
            "started_at": self.started_at,
            "interval_s": self.heartbeat_s,
            "details": dict(self.details()),
        }
        await self.bus.emit(HEARTBEAT, data, source=self.service)

    async def watch(self, *services: str) -> None:
        """Keep track of the live replicas of `services` (this service's own when named)."""
        suffix = self.replica_id.rsplit("-", 1)[-1]
        for service in services:
            if service in self._peers:
                continue
            self._peers[service] = {}
            consumer = f"{self.service}.replicas-{suffix}"
            self._teardowns.append(
                await self.bus.subscribe(service, HEARTBEAT, consumer, self._heard, transient=True)
            )

    def start(self) -> None:
        """Beat now and every `heartbeat_s` until `stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{self.service} heartbeat")

    async def stop(self) -> None:
        """Stop beating and say `stopping`, so peers take over without waiting for expiry."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
            with contextlib.suppress(Exception):  # a dead broker: peers expire this one
                await asyncio.wait_for(self.beat("stopping"), self.heartbeat_s)
        teardowns, self._teardowns = self._teardowns, []
        for teardown in teardowns:
            with contextlib.suppress(Exception):
                await teardown()

    async def _run(self) -> None:
        while True:
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the broker is away: peers will see this one expire
                log.debug("heartbeat not sent: %s", err)
            await asyncio.sleep(self.heartbeat_s)
            for service in list(self._peers):
                self._expire(service)

    # --- what this replica sees of the others --------------------------------------------

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def live(self, service: str) -> list[Replica]:
        """The live replicas of `service` (a watched one), sorted by id; this one included
        when it is of `service`, even before its own heartbeat came back."""
        self._expire(service)
        found = dict(self._peers.get(service, {}))
        if service == self.service and self.replica_id not in found:
            found[self.replica_id] = Replica(
                self.service,
                self.replica_id,
                self.role(),
                self.started_at,
                self.details(),
                time.monotonic(),
            )
        return [found[key] for key in sorted(found)]

    def forget(self, service: str, replica_id: str) -> None:
        """Count a peer gone now, found dead otherwise than by its silence (the monitor's
        `peer_probe`); heard again, it is back."""
        if self._peers.get(service, {}).pop(replica_id, None) is not None:
            self._changed(service)

    async def _heard(self, envelope: Envelope) -> None:
        data = envelope.data
        service, replica_id = data["service"], data["replica"]
        peers = self._peers.setdefault(service, {})
        before = peers.get(replica_id)
        if data["role"] == "stopping":
            self.left[replica_id] = data.get("details") or {}
            if peers.pop(replica_id, None) is not None:
                self._changed(service)
            return
        peers[replica_id] = Replica(
            service,
            replica_id,
            data["role"],
            data["started_at"],
            data.get("details") or {},
            time.monotonic(),
        )
        if before is None or before.role != data["role"]:
            self._changed(service)

    def _expire(self, service: str) -> None:
        peers = self._peers.get(service, {})
        limit = time.monotonic() - self.dead_after_s
        gone = [key for key, peer in peers.items() if peer.heard_at < limit]
        for key in gone:
            del peers[key]
        if gone:
            self._changed(service)

    def _changed(self, service: str) -> None:
        for listener in self._listeners:
            try:
                listener(service)
            except Exception:
                log.exception("replica listener failed")
