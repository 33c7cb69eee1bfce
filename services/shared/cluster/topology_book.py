"""Each host's GPU interconnect as the monitor last read it (`TopologyBook`), kept by the
services that choose GPUs: the reservations (earliest slot) and the jobs (placement).

The monitor publishes `host.topology_read` on a host's first poll, every 10 minutes after and
when its GPUs change, changed or not: a service that starts (or missed events) knows every
host's matrix within 10 minutes, and until then chooses as if the links were unknown. Every
replica hears every event (transient queues of its own), as with the host directory.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from services.shared.bus import Bus, Teardown
from services.shared.contracts import Envelope
from services.shared.topology import Topology

EVENT = "host.topology_read"


class TopologyBook(Mapping[str, Topology]):
    """host -> its Topology (hosts with no matrix are absent)."""

    def __init__(self, known: Mapping[str, Topology] | None = None) -> None:
        self._topologies: dict[str, Topology] = dict(known or {})
        self._read_at: dict[str, datetime] = {}

    def __getitem__(self, host: str) -> Topology:
        return self._topologies[host]

    def __iter__(self) -> Iterator[str]:
        return iter(self._topologies)

    def __len__(self) -> int:
        return len(self._topologies)

    def apply(self, data: Mapping[str, Any]) -> None:
        """One `host.topology_read`; an event older than the one applied changes nothing."""
        host = data["host"]
        at = datetime.fromisoformat(data["read_at"])
        last = self._read_at.get(host)
        if last is not None and at < last:
            return
        self._read_at[host] = at
        if data.get("topology") is None:
            self._topologies.pop(host, None)
        else:
            self._topologies[host] = Topology.from_dict(data["topology"])

    async def on_event(self, envelope: Envelope) -> None:
        self.apply(envelope.data)

    async def follow(self, bus: Bus, service: str) -> Teardown:
        """Hear the monitor's `host.topology_read` on a transient queue of this replica's."""
        consumer = f"{service}.topology-{secrets.token_hex(4)}"
        return await bus.subscribe("monitor", EVENT, consumer, self.on_event, transient=True)
